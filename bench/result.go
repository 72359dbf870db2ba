package bench

import (
	"fmt"
	"math"
	"strings"

	"stepbench/bench/stats"
	"stepbench/runner"
)

// Phase names of a Sample.
const (
	PhasePrefill = runner.PhasePrefill
	PhaseDecode  = runner.PhaseDecode
)

// Sample is one timed region.
type Sample struct {
	Phase string `json:"phase"` // PhasePrefill or PhaseDecode
	// Iter is the timed iteration (0-based); Step the decode step (0-based,
	// 0 for prefill).
	Iter int `json:"iter"`
	Step int `json:"step"`
	// Position is the KV cache length of every sequence before the step:
	// 0 for prefill, inputLen+Step for decode.
	Position      int     `json:"position"`
	HostSeconds   float64 `json:"host_seconds"`
	DeviceSeconds float64 `json:"device_seconds"`
	// RankDeviceSeconds are each rank's device time of a tensor-parallel
	// step (DeviceSeconds is their maximum); nil on one GPU.
	RankDeviceSeconds []float64 `json:"rank_device_seconds,omitempty"`
	// Warmup marks samples of warmup iterations; they reach BetweenRegions
	// but are never kept in results.
	Warmup bool `json:"warmup,omitempty"`
	// StartUnixNanos is the host clock at the region's start (its t0), for
	// a timeline of the run.
	StartUnixNanos int64 `json:"start_unix_nanos,omitempty"`
}

// IterationResult is one timed iteration of a shape: a prefill and
// outputLen−1 decode steps, as one_batch.
type IterationResult struct {
	Iter int
	// PromptStream is the PCG stream its prompts came from (PromptIDs with
	// Options.Seed reproduces them); 0 with Options.Prompts.
	PromptStream uint64
	Prefill      Sample
	Decode       []Sample
	// TotalHostSeconds is prefill + Σ decode host times (one_batch's total).
	TotalHostSeconds   float64
	TotalDeviceSeconds float64
}

// ShapeSummary summarises a shape's samples over all its timed iterations.
type ShapeSummary struct {
	PrefillHostSeconds   stats.Summary
	PrefillDeviceSeconds stats.Summary
	DecodeHostSeconds    stats.Summary // every decode step of every iteration
	DecodeDeviceSeconds  stats.Summary
	TotalHostSeconds     stats.Summary // per-iteration totals
	TotalDeviceSeconds   stats.Summary
}

// ShapeResult is everything measured for one (batch, input, output) shape.
type ShapeResult struct {
	Shape
	Iterations []IterationResult
	Summary    ShapeSummary
	// Noise is the achieved noise of each median (see ShapeNoise) and
	// StopReason why the timed iterations stopped (Stop* constants).
	Noise      Noise
	StopReason string
	// Complete is false when an error or an interruption stopped the shape
	// before its stopping rule held; Iterations then holds the finished ones.
	Complete bool
	// Energy is set when Options.EnergyMeter was.
	Energy *ShapeEnergy
	// HostOtherCPU is the share of the host's CPU time other processes took
	// while the shape was timed (bench/hostload); nil when unknown.
	HostOtherCPU *float64
}

// Finish computes the summary and noise of the finished iterations and
// records why they stopped (Stop* constants).
func (s *ShapeResult) Finish(reason string) {
	s.Summary = summarizeShape(s.Iterations)
	s.Noise = ShapeNoise(s.Iterations)
	s.StopReason = reason
}

// Samples returns every kept sample of the shape, in the order measured.
func (s ShapeResult) Samples() []Sample {
	var samples []Sample
	for _, it := range s.Iterations {
		samples = append(samples, it.Prefill)
		samples = append(samples, it.Decode...)
	}
	return samples
}

// NoiseLine says how many iterations ran, why they stopped and the noise
// reached, e.g. "23 iterations (target_noise: every median within 0.50%);
// noise prefill ±0.31% (device ±0.29%), decode ±0.22%": the host time's,
// and the device time's where it differs.
func (s ShapeResult) NoiseLine(opt Options) string {
	why := s.StopReason
	switch s.StopReason {
	case StopTargetNoise:
		why += fmt.Sprintf(": every median within %.2f%%", 100*opt.Adaptive.TargetNoise)
	case StopMaxSeconds:
		why += fmt.Sprintf(": %g s before every median reached %.2f%%", opt.Adaptive.MaxSeconds, 100*opt.Adaptive.TargetNoise)
	}
	var parts []string
	for _, m := range []struct {
		phase        string
		host, device float64
	}{{"prefill", s.Noise.PrefillHost, s.Noise.PrefillDevice}, {"decode", s.Noise.DecodeHost, s.Noise.DecodeDevice}} {
		switch {
		case math.IsNaN(m.host):
		case math.IsNaN(m.device) || stats.NoiseText(m.device) == stats.NoiseText(m.host):
			parts = append(parts, m.phase+" "+stats.NoiseText(m.host))
		default:
			parts = append(parts, fmt.Sprintf("%s %s (device %s)", m.phase, stats.NoiseText(m.host), stats.NoiseText(m.device)))
		}
	}
	return fmt.Sprintf("%d iterations (%s); noise %s", len(s.Iterations), why, strings.Join(parts, ", "))
}

func summarizeShape(iterations []IterationResult) ShapeSummary {
	summary, _ := summarizeKept(iterations, nil)
	return summary
}

// summarizeKept summarises the samples for which drop is false (every
// sample when drop is nil); an iteration's total counts only when none of
// its samples was dropped. It also returns how many samples were dropped.
func summarizeKept(iterations []IterationResult, drop func(Sample) bool) (ShapeSummary, int) {
	var prefillHost, prefillDevice, decodeHost, decodeDevice, totalHost, totalDevice []float64
	dropped := 0
	for _, it := range iterations {
		clean := true
		for i, sample := range append([]Sample{it.Prefill}, it.Decode...) {
			if drop != nil && drop(sample) {
				dropped++
				clean = false
				continue
			}
			if i == 0 {
				prefillHost = append(prefillHost, sample.HostSeconds)
				prefillDevice = append(prefillDevice, sample.DeviceSeconds)
			} else {
				decodeHost = append(decodeHost, sample.HostSeconds)
				decodeDevice = append(decodeDevice, sample.DeviceSeconds)
			}
		}
		if clean {
			totalHost = append(totalHost, it.TotalHostSeconds)
			totalDevice = append(totalDevice, it.TotalDeviceSeconds)
		}
	}
	return ShapeSummary{
		PrefillHostSeconds:   stats.Summarize(prefillHost),
		PrefillDeviceSeconds: stats.Summarize(prefillDevice),
		DecodeHostSeconds:    stats.Summarize(decodeHost),
		DecodeDeviceSeconds:  stats.Summarize(decodeDevice),
		TotalHostSeconds:     stats.Summarize(totalHost),
		TotalDeviceSeconds:   stats.Summarize(totalDevice),
	}, dropped
}

// TokensPerSecond is tokens/seconds, or 0 when no time was measured (a
// division by zero would make the result unencodable as JSON).
func TokensPerSecond(tokens int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(tokens) / seconds
}

// DropSamples is s with its summary recomputed without the samples drop
// names (an iteration's total counts only when none of its samples was
// dropped), and the count of dropped samples. Iterations keep every sample:
// reports still show them, marked.
func DropSamples(s ShapeResult, drop func(Sample) bool) (ShapeResult, int) {
	var dropped int
	s.Summary, dropped = summarizeKept(s.Iterations, drop)
	return s, dropped
}

package roofline

import (
	"fmt"
	"math"
	"sort"

	"stepbench/runner"
)

// Point is one measured step or op placed on a roofline.
type Point struct {
	Label     string `json:"label"`        // e.g. "decode b=8"
	Phase     string `json:"phase"`        // "prefill" or "decode"
	Op        string `json:"op,omitempty"` // set for per-op points
	Batch     int    `json:"batch_size"`   //
	InputLen  int    `json:"input_len"`    //
	OutputLen int    `json:"output_len"`   //
	Position  int    `json:"position"`     // KV length the cost was computed at
	// KVTokens is a ragged or synthetically filled batch's tokens in its
	// caches after the step (what its attention reads: the sum of the
	// sequences' lengths); absent for a uniform batch, batch × (Position+1)
	// for decode and batch × input_len for the prefill.
	KVTokens int    `json:"kv_tokens,omitempty"`
	Roof     string `json:"roof,omitempty"` // the roof's Source
	// The cost model's work and the measured (median device) time.
	FLOPs float64 `json:"flops"`
	// FP8FLOPs is the part of FLOPs FP8 GEMMs do (at the roof's FP8 rate).
	FP8FLOPs float64 `json:"fp8_flops,omitempty"`
	Bytes    float64 `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	// CommBytes is what one GPU of a tensor-parallel step sends to its
	// peers; its time at the roof's link bandwidth is in the floor.
	CommBytes float64 `json:"comm_bytes,omitempty"`
	// Derived: FLOPs/Bytes, FLOPs/Seconds, Bytes/Seconds.
	IntensityFLOPsPerByte float64 `json:"intensity_flops_per_byte"`
	AchievedFLOPsPerSec   float64 `json:"achieved_flops_per_second"`
	AchievedBytesPerSec   float64 `json:"achieved_bytes_per_second"`
	AttainableFLOPsPerSec float64 `json:"attainable_flops_per_second,omitempty"` // min(peak, I × bandwidth)
	FloorSeconds          float64 `json:"floor_seconds,omitempty"`               // max(FLOPs/peak, Bytes/bandwidth)
	AttainmentFraction    float64 `json:"attainment_fraction,omitempty"`         // floor / measured
	Bound                 string  `json:"bound,omitempty"`                       // "compute", "memory" or "link": the roof that binds
}

// NewPoint places work (flops, bytes) done in seconds under roof
// (nil: no roof, only the achieved rates). The attainment is
// achieved / attainable FLOP/s, computed as floor / measured time so that
// ops without FLOPs (copies) get one too; the two are equal otherwise.
func NewPoint(roof *Roof, flops, bytes, seconds float64) Point {
	return NewCommPoint(roof, flops, bytes, 0, seconds)
}

// NewCommPoint is NewPoint for a tensor-parallel GPU's step that also sends
// commBytes (its floor is Roof.FloorComm).
func NewCommPoint(roof *Roof, flops, bytes, commBytes, seconds float64) Point {
	return NewWorkPoint(roof, flops, 0, bytes, commBytes, seconds)
}

// NewWorkPoint is NewCommPoint for work of which fp8FLOPs are FP8 GEMMs':
// its floor computes them at the FP8 rate, and its attainable FLOP/s is the
// roofline with the step's own compute peak, FLOPs / Roof.ComputeSeconds.
func NewWorkPoint(roof *Roof, flops, fp8FLOPs, bytes, commBytes, seconds float64) Point {
	p := Point{FLOPs: flops, FP8FLOPs: fp8FLOPs, Bytes: bytes, Seconds: seconds, CommBytes: commBytes}
	if bytes > 0 {
		p.IntensityFLOPsPerByte = flops / bytes
	}
	if seconds > 0 {
		p.AchievedFLOPsPerSec = flops / seconds
		p.AchievedBytesPerSec = bytes / seconds
	}
	if roof == nil || !(roof.PeakFLOPsPerSec > 0) || !(roof.PeakBytesPerSec > 0) {
		return p
	}
	p.Roof = roof.Source
	p.AttainableFLOPsPerSec = roof.AttainableFLOPsPerSec(p.IntensityFLOPsPerByte)
	if fp8FLOPs > 0 {
		peak := flops / roof.ComputeSeconds(flops, fp8FLOPs)
		p.AttainableFLOPsPerSec = math.Min(peak, p.IntensityFLOPsPerByte*roof.PeakBytesPerSec)
	}
	f := roof.FloorWork(flops, fp8FLOPs, bytes, commBytes)
	p.FloorSeconds, p.Bound = f.Seconds, f.Bound
	if seconds > 0 {
		p.AttainmentFraction = f.Seconds / seconds
	}
	return p
}

// StepPoints places one shape's prefill (prefillSeconds per step) and its
// decode steps (decodeSeconds per step, costed at the median step's
// position, input_len + (output_len−2)/2) under roof; a phase with no time
// (0) or no steps is left out.
func StepPoints(cfg runner.Config, roof *Roof, batch, inputLen, outputLen int, prefillSeconds, decodeSeconds float64) ([]Point, error) {
	return Costs{}.StepPoints(cfg, roof, batch, inputLen, outputLen, prefillSeconds, decodeSeconds)
}

// StepPoints is the package's StepPoints with c's costs (one tensor-parallel
// GPU's share and its all-reduces when c.TPSize > 0).
func (c Costs) StepPoints(cfg runner.Config, roof *Roof, batch, inputLen, outputLen int, prefillSeconds, decodeSeconds float64) ([]Point, error) {
	if batch < 1 || inputLen < 1 {
		return nil, fmt.Errorf("roofline point: %s cost: batch %d and input length %d must be positive", runner.PhasePrefill, batch, inputLen)
	}
	return c.Points(cfg, roof, UniformShape(batch, inputLen, outputLen), prefillSeconds, decodeSeconds)
}

// Points places s's prefill (prefillSeconds per step) and its decode steps
// (decodeSeconds per step, costed at the median step, (output_len−2)/2:
// every sequence's own length plus that many tokens) under roof; a phase
// with no time (0) or no steps is left out. A ragged batch's points carry
// their KVTokens.
func (c Costs) Points(cfg runner.Config, roof *Roof, s Shape, prefillSeconds, decodeSeconds float64) ([]Point, error) {
	var points []Point
	batch := s.Batch()
	if prefillSeconds > 0 {
		cost, err := c.PrefillOf(cfg, s)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewWorkPoint(roof, cost.FLOPs, cost.FP8FLOPs, cost.Bytes, cost.CommBytes, prefillSeconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen = fmt.Sprintf("prefill b=%d", batch), runner.PhasePrefill, batch, s.InputLen, s.OutputLen
		p.KVTokens = cost.KVTokens
		points = append(points, p)
	}
	if decodeSeconds > 0 && s.OutputLen > 1 {
		step := (s.OutputLen - 2) / 2
		cost, err := c.DecodeOf(cfg, s, step)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewWorkPoint(roof, cost.FLOPs, cost.FP8FLOPs, cost.Bytes, cost.CommBytes, decodeSeconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen = fmt.Sprintf("decode b=%d", batch), runner.PhaseDecode, batch, s.InputLen, s.OutputLen
		p.Position, p.KVTokens = s.InputLen+step, cost.KVTokens
		points = append(points, p)
	}
	return points, nil
}

// OpPoints places every op of a step that has a measured time
// (seconds per step, summed over the op's calls) under roof, sorted by op.
func OpPoints(roof *Roof, step runner.StepCost, opSeconds map[string]float64) []Point {
	var points []Point
	for _, op := range step.Ops {
		seconds, ok := opSeconds[op.Op]
		if !ok || !(seconds > 0) {
			continue
		}
		p := NewWorkPoint(roof, op.FLOPs, op.FP8FLOPs, op.Bytes, 0, seconds)
		p.Label = fmt.Sprintf("%s %s b=%d", step.Phase, op.Op, step.Batch)
		p.Phase, p.Op, p.Batch, p.Position = step.Phase, op.Op, step.Batch, step.StartPos
		points = append(points, p)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].Op < points[j].Op })
	return points
}

package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"stepbench/bench"
	"stepbench/bench/kernelbench"
	"stepbench/runner"

	"stepbench/bench/internal/files"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
	"stepbench/bench/telemetry"
	"stepbench/internal/input"
)

// Schema is the schema string of the native report this package
// writes and reads. A change that breaks readers gets a new version.
const Schema = "stepbench/v1"

// Report is stepbench's native result document: everything needed to
// compare two runs later without rerunning them.
type Report struct {
	Schema      string      `json:"schema"` // Schema
	ToolVersion string      `json:"tool_version,omitempty"`
	CreatedAt   string      `json:"created_at,omitempty"` // RFC 3339
	Environment Environment `json:"environment"`
	Config      RunConfig   `json:"config"`
	// Verified is false when the run timed kernels it did not check first
	// (--no-verify); Verification says what was checked. Both are absent
	// from reports older than the check.
	Verified     *bool         `json:"verified,omitempty"`
	Verification *Verification `json:"verification,omitempty"`
	Shapes       []ShapeReport `json:"shapes"`
	// KernelResults are a stepbench kernel report's ops (--json-out): every
	// cold sample of each op at each shape; Shapes is then empty. With a
	// baseline (--baseline-kernel, --baseline-op) the baseline's samples,
	// pair by pair with KernelResults', are BaselineKernelResults.
	KernelResults         []kernelbench.Result `json:"kernel_results,omitempty"`
	BaselineKernelResults []kernelbench.Result `json:"baseline_kernel_results,omitempty"`
}

// Environment is the machine a report was measured on. Every field is
// optional: the CPU backend has no GPU, and NVML may be missing.
type Environment struct {
	Backend string `json:"backend,omitempty"`
	// Emulated describes the emulated CUDA device (cuda/emu) when it ran the
	// kernels: then every time is the CPU's emulation, not a GPU time.
	Emulated string `json:"emulated,omitempty"`
	// TPSize and TPRanks: a tensor-parallel run's size and the ranks this
	// process drove (rank_device_seconds are theirs, in this order); the
	// GPU fields describe the first of them.
	TPSize  int   `json:"tp_size,omitempty"`
	TPRanks []int `json:"tp_ranks,omitempty"`
	// TPGPUUUIDs are the UUIDs of this node's GPUs the ranks ran on, one per
	// rank of TPRanks (CUDA ordinals 0, 1, ...); NVML reads each of them.
	TPGPUUUIDs []string `json:"tp_gpu_uuids,omitempty"`
	// KernelVersions is the version each op with several ran at the
	// model's shapes ("argmax=2 attn_decode=2 attn_prefill=1 rope_kv_write=2").
	KernelVersions    string  `json:"kernel_versions,omitempty"`
	GPUName           string  `json:"gpu_name,omitempty"`
	GPUUUID           string  `json:"gpu_uuid,omitempty"`
	ComputeCapability string  `json:"compute_capability,omitempty"` // e.g. "9.0"
	DriverVersion     string  `json:"driver_version,omitempty"`
	CUDAVersion       string  `json:"cuda_version,omitempty"` // the driver API version
	NVRTCVersion      string  `json:"nvrtc_version,omitempty"`
	CUBLASVersion     string  `json:"cublas_version,omitempty"`
	Hostname          string  `json:"hostname,omitempty"`
	GoVersion         string  `json:"go_version,omitempty"`
	OS                string  `json:"os,omitempty"`
	Arch              string  `json:"arch,omitempty"`
	SMClockMHz        float64 `json:"sm_clock_mhz,omitempty"`
	MaxSMClockMHz     float64 `json:"max_sm_clock_mhz,omitempty"`
	MemoryClockMHz    float64 `json:"memory_clock_mhz,omitempty"`
	PowerLimitWatts   float64 `json:"power_limit_watts,omitempty"`
	GPUMemoryBytes    uint64  `json:"gpu_memory_bytes,omitempty"`
	// What the roofline and NVML add: the SM count, bus width and maximum
	// memory clock of the device roof.
	SMCount            int     `json:"sm_count,omitempty"`
	MemoryBusWidthBits int     `json:"memory_bus_width_bits,omitempty"`
	MaxMemoryClockMHz  float64 `json:"max_memory_clock_mhz,omitempty"`
	// ClocksLocked is whether the SM clock was pinned (nil: unknown).
	ClocksLocked *bool `json:"clocks_locked,omitempty"`
	// TelemetryNotes are warnings about the telemetry (NVML missing,
	// unsupported calls, unlocked and varying clocks).
	TelemetryNotes []string `json:"telemetry_notes,omitempty"`
	// Roofs are the roofline ceilings the report's points use, and the
	// others known (device-derived, measured, datasheet).
	Roof  *roofline.Roof  `json:"roof,omitempty"`
	Roofs []roofline.Roof `json:"roofs,omitempty"`
}

// RunConfig is the configuration a report was measured with.
type RunConfig struct {
	Model      runner.Config `json:"model"`
	ModelPath  string        `json:"model_path,omitempty"`
	LoadFormat string        `json:"load_format,omitempty"` // "dummy" or "safetensors"
	RunName    string        `json:"run_name,omitempty"`
	Seed       uint64        `json:"seed"`
	// NumIters is the fixed count of timed iterations per shape; 0 means
	// adaptive sampling by bench.Adaptive (see bench.Adaptive).
	NumIters    int             `json:"num_iters"`
	Adaptive    *bench.Adaptive `json:"adaptive,omitempty"`
	WarmupIters int             `json:"warmup_iters"`
	// Flags holds every command-line flag as given or defaulted, by name.
	Flags map[string]string `json:"flags,omitempty"`
	// Prompts says where the timed prompts came from when not from random
	// ids (run --prompt-file); absent: random ids.
	Prompts *Prompts `json:"prompts,omitempty"`
	// KV is the KV cache's layout and the batches' lengths (run
	// --kv-layout, --page-size, --page-order, --context-lens, --kv-fill);
	// absent in reports from before it was recorded: the contiguous layout.
	KV *KVCache `json:"kv_cache,omitempty"`
}

// KVCache is a run's KV cache layout and where its lengths came from; each
// shape's own lengths are its context_lens.
type KVCache struct {
	Layout      string `json:"layout"`                 // "paged" or "contiguous"
	PageSize    int    `json:"page_size,omitempty"`    // tokens per page (paged)
	PageOrder   string `json:"page_order,omitempty"`   // "sequential" or "shuffled" (paged; shuffled by Seed)
	ContextLens string `json:"context_lens,omitempty"` // --context-lens as given (drawn with Seed); absent: --input-len
	KVFill      string `json:"kv_fill,omitempty"`      // "prefill" or "synthetic"
	// DType is the cache's element type as vLLM names it: "fp8_e4m3" or
	// "fp8_e5m2" (absent: the model's bf16, vLLM's "auto").
	DType string `json:"cache_dtype,omitempty"`
	// Scales are an FP8 cache's dequantization multipliers (x ≈ byte ·
	// scale) per layer and KV head, and where they came from.
	Scales *KVScales `json:"scales,omitempty"`
}

// KVScales are an FP8 cache's K and V scales.
type KVScales struct {
	Source string      `json:"source"` // "checkpoint (NAMES, per tensor|per KV head)", "1.0 ..." or "calibrated ..."
	K      [][]float32 `json:"k"`      // [layer][kv head]
	V      [][]float32 `json:"v"`
}

// Prompts are the text prompts of a run (bench.TextPrompts): the file,
// how many prompts it held, their tokens in all, and how many rows of a
// shape start at distinct places.
type Prompts struct {
	Source       string `json:"source"` // "text"
	File         string `json:"file"`
	Count        int    `json:"count"`
	Tokens       int    `json:"tokens"`
	DistinctRows int    `json:"distinct_rows"`
}

// ShapeReport is one shape's samples, summaries and roofline floors.
type ShapeReport struct {
	bench.Shape
	// KVTokens is a ragged or synthetically filled batch's tokens in its
	// caches after the prefill: the sum of its context_lens (absent for a
	// uniform batch: batch_size × input_len).
	KVTokens int  `json:"kv_tokens,omitempty"`
	Complete bool `json:"complete"`
	// Iterations is the count of timed iterations, StopReason why they
	// stopped (num_iters, target_noise, max_seconds, interrupted, error)
	// and bench.Noise the achieved noise of each median (null: not measured or
	// too few iterations for an interval).
	Iterations int          `json:"iterations"`
	StopReason string       `json:"stop_reason,omitempty"`
	Noise      *bench.Noise `json:"noise,omitempty"`
	// Samples are every timed region, warmup excluded, in measured order.
	Samples []SampleReport `json:"samples"`
	// IterationTotalHostSeconds is each iteration's prefill + Σ decode.
	IterationTotalHostSeconds []float64 `json:"iteration_total_host_seconds"`

	PrefillHostSeconds   stats.Summary `json:"prefill_host_seconds"`
	PrefillDeviceSeconds stats.Summary `json:"prefill_device_seconds"`
	DecodeHostSeconds    stats.Summary `json:"decode_host_seconds"`
	DecodeDeviceSeconds  stats.Summary `json:"decode_device_seconds"`
	TotalHostSeconds     stats.Summary `json:"total_host_seconds"`

	// Floors: the cost model's minimal work per step and the least time it
	// takes under the run's roof (environment.roof). Zero (left out) without
	// a roof. The decode figures are the first decode step's (KV length
	// input_len); the roofline points hold the median step's.
	PrefillFloorSeconds float64 `json:"prefill_floor_seconds,omitempty"`
	DecodeFloorSeconds  float64 `json:"decode_floor_seconds,omitempty"`
	PrefillFLOPs        float64 `json:"prefill_flops,omitempty"`
	PrefillBytes        float64 `json:"prefill_bytes,omitempty"`
	DecodeFLOPs         float64 `json:"decode_flops,omitempty"`
	DecodeBytes         float64 `json:"decode_bytes,omitempty"`

	// Telemetry: flagged samples, medians over kept samples' readings, the
	// background sampler's readings during the shape, energy windows, and
	// the roofline points under the run's roof.
	ThrottledSamples          int     `json:"throttled_samples,omitempty"`
	DiscardedThrottledSamples int     `json:"discarded_throttled_samples,omitempty"`
	MedianPowerWatts          float64 `json:"median_power_watts,omitempty"`
	// HostOtherCPUFraction is the share of the host's CPU time other
	// processes took while the shape was timed (absent: unknown); compare
	// judges cpu and emulated runs by what it could inflate (no SAME on a
	// busy host, no FASTER or SLOWER within the load's reach).
	HostOtherCPUFraction *float64 `json:"host_other_cpu_fraction,omitempty"`
	MedianSMClockMHz     float64  `json:"median_sm_clock_mhz,omitempty"`
	// Over several GPUs (a tensor-parallel node) the medians above are left
	// out: MedianPowerWattsSum is the median of the GPUs' summed power and
	// MedianSMClockMHzMin that of the slowest GPU's SM clock (telemetry.Combine);
	// GPUs summarises each GPU, and throttled_samples counts the samples
	// on which any GPU was throttled.
	MedianPowerWattsSum float64             `json:"median_power_watts_sum,omitempty"`
	MedianSMClockMHzMin float64             `json:"median_sm_clock_mhz_min,omitempty"`
	GPUs                []GPUSummary        `json:"gpus,omitempty"`
	TelemetryTimeline   []telemetry.Reading `json:"telemetry_timeline,omitempty"`
	Energy              *bench.ShapeEnergy  `json:"energy,omitempty"`
	RooflinePoints      []roofline.Point    `json:"roofline_points,omitempty"`
}

// SampleReport is one timed region.
type SampleReport struct {
	Phase         string  `json:"phase"` // "prefill" or "decode"
	Iter          int     `json:"iter"`
	Step          int     `json:"step"`
	Position      int     `json:"position"` // KV length before the step
	HostSeconds   float64 `json:"host_seconds"`
	DeviceSeconds float64 `json:"device_seconds"`
	// RankDeviceSeconds: each tensor-parallel rank's device time (the
	// device time is the largest); absent on one GPU.
	RankDeviceSeconds []float64 `json:"rank_device_seconds,omitempty"`
	// StartUnixNanos is the host clock at the region's start (a timeline's x).
	StartUnixNanos int64      `json:"start_unix_nanos,omitempty"`
	Telemetry      *Telemetry `json:"telemetry,omitempty"`
}

// Telemetry is what NVML said between regions, next to the region it
// follows. All fields are optional.
type Telemetry struct {
	PowerWatts      float64 `json:"power_watts,omitempty"`
	EnergyJoules    float64 `json:"energy_joules,omitempty"` // consumed by the region
	SMClockMHz      float64 `json:"sm_clock_mhz,omitempty"`
	MemoryClockMHz  float64 `json:"memory_clock_mhz,omitempty"`
	TemperatureC    float64 `json:"temperature_c,omitempty"`
	ThrottleReasons uint64  `json:"throttle_reasons,omitempty"` // NVML's clocks-event bit mask
	// PowerSource says what PowerWatts is: "instant" (FI_DEV_POWER_INSTANT)
	// or "average_1s" (nvmlDeviceGetPowerUsage, a 1 s average on Hopper).
	PowerSource              string   `json:"power_source,omitempty"`
	MemoryTemperatureC       float64  `json:"memory_temperature_c,omitempty"`
	ClockEventReasonNames    []string `json:"clock_event_reason_names,omitempty"`
	Throttled                bool     `json:"throttled,omitempty"`
	EnergyCounterMillijoules uint64   `json:"energy_counter_millijoules,omitempty"` // NVML's total, at the reading
	UnixNanos                int64    `json:"unix_nanos,omitempty"`
	// GPUs holds each GPU's own telemetry when the reading covers several
	// GPUs; the fields above are then the combined figures (telemetry.Combine),
	// written as power_watts_sum, sm_clock_mhz_min, ... (MarshalJSON).
	GPUs []GPUTelemetry `json:"gpus,omitempty"`
}

// NewShapeReport converts a measured shape into its report form (no floors,
// no telemetry: the caller adds them).
func NewShapeReport(s bench.ShapeResult) ShapeReport {
	r := ShapeReport{
		Shape:                     s.Shape,
		Complete:                  s.Complete,
		Iterations:                len(s.Iterations),
		StopReason:                s.StopReason,
		Samples:                   []SampleReport{},
		IterationTotalHostSeconds: []float64{},
		PrefillHostSeconds:        s.Summary.PrefillHostSeconds,
		PrefillDeviceSeconds:      s.Summary.PrefillDeviceSeconds,
		DecodeHostSeconds:         s.Summary.DecodeHostSeconds,
		DecodeDeviceSeconds:       s.Summary.DecodeDeviceSeconds,
		TotalHostSeconds:          s.Summary.TotalHostSeconds,
	}
	if s.Shape.Ragged() {
		r.KVTokens = s.Shape.KVTokens()
	}
	if s.StopReason != "" {
		noise := s.Noise
		r.Noise = &noise
	}
	r.HostOtherCPUFraction = s.HostOtherCPU
	for _, sample := range s.Samples() {
		r.Samples = append(r.Samples, SampleReport{
			Phase:         sample.Phase,
			Iter:          sample.Iter,
			Step:          sample.Step,
			Position:      sample.Position,
			HostSeconds:   sample.HostSeconds,
			DeviceSeconds: sample.DeviceSeconds,

			RankDeviceSeconds: sample.RankDeviceSeconds,
			StartUnixNanos:    sample.StartUnixNanos,
		})
	}
	for _, it := range s.Iterations {
		r.IterationTotalHostSeconds = append(r.IterationTotalHostSeconds, it.TotalHostSeconds)
	}
	return r
}

// Write writes r to path as indented JSON, atomically. An empty Schema
// field is filled with the Schema constant; any other value is
// refused, so that no file claims a schema it does not follow.
func Write(path string, r Report) error {
	if r.Schema == "" {
		r.Schema = Schema
	}
	if r.Schema != Schema {
		return fmt.Errorf("write report %s: schema %q is not %q", path, r.Schema, Schema)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report %s: %w", path, err)
	}
	return files.WriteAtomic(path, append(data, '\n'))
}

// MaxReportBytes bounds a native report read back (every sample of a long
// sweep is a few MB).
const MaxReportBytes = 1 << 30

// Read reads and validates a native report. A file that cannot be read or
// is no valid report is bad input (input.IsBad).
func Read(path string) (Report, error) {
	data, err := input.ReadFile(path, MaxReportBytes, "a native report")
	if err != nil {
		return Report{}, input.Bad(fmt.Errorf("read report: %w", err))
	}
	r, err := Parse(data)
	if err != nil {
		return Report{}, input.Bad(fmt.Errorf("read report %s: %w", path, err))
	}
	return r, nil
}

// Parse decodes and validates a native report: the schema string
// must be Schema, every shape positive, every sample a known phase with
// finite, non-negative times.
func Parse(data []byte) (Report, error) {
	// Peek at the schema first: a report of another schema (or not a report
	// at all) gets that error, not one about a field it happens to lack.
	var header struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &header); err != nil {
		return Report{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if header.Schema == nil {
		return Report{}, errors.New(`no "schema" field: not a stepbench report`)
	}
	if *header.Schema != Schema {
		return Report{}, fmt.Errorf("unsupported schema %q (this stepbench reads %q)", *header.Schema, Schema)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("decode %s report: %w", Schema, err)
	}
	for i, s := range r.Shapes {
		if err := s.validate(); err != nil {
			return Report{}, fmt.Errorf("shape %d (batch_size=%d input_len=%d output_len=%d): %w",
				i, s.Batch, s.InputLen, s.OutputLen, err)
		}
	}
	for i, k := range append(slices.Clone(r.KernelResults), r.BaselineKernelResults...) {
		if k.Op == "" || k.ShapeLabel == "" || len(k.DeviceSeconds) == 0 || slices.ContainsFunc(k.DeviceSeconds, func(x float64) bool { return x < 0 }) {
			return Report{}, fmt.Errorf("kernel result %d (%s %s): an op, a shape and non-negative device_seconds are needed", i, k.Op, k.ShapeLabel)
		}
	}
	return r, nil
}

// MaxSampleSeconds bounds a sample's times in a report read back: the
// largest --step-timeout (a step that took longer was cut off).
const MaxSampleSeconds = 1e6

func (s ShapeReport) validate() error {
	if s.Batch < 1 || s.InputLen < 1 || s.OutputLen < 1 {
		return errors.New("batch_size, input_len and output_len must be >= 1")
	}
	for i, sample := range s.Samples {
		if !slices.Contains([]string{bench.PhasePrefill, bench.PhaseDecode}, sample.Phase) {
			return fmt.Errorf("sample %d: unknown phase %q", i, sample.Phase)
		}
		// encoding/json cannot produce NaN or ±Inf, so a finite check is
		// a sign check here.
		if sample.HostSeconds < 0 || sample.DeviceSeconds < 0 {
			return fmt.Errorf("sample %d: negative time (host_seconds=%v device_seconds=%v)",
				i, sample.HostSeconds, sample.DeviceSeconds)
		}
		// A finite time past any step's (1e308 s) overflowed the medians
		// and ratios to ±Inf and NaN, which compare then called SAME.
		if sample.HostSeconds > MaxSampleSeconds || sample.DeviceSeconds > MaxSampleSeconds {
			return fmt.Errorf("sample %d: a time longer than any step takes (host_seconds=%v device_seconds=%v; at most %g)",
				i, sample.HostSeconds, sample.DeviceSeconds, MaxSampleSeconds)
		}
		if sample.Iter < 0 || sample.Step < 0 || sample.Position < 0 {
			return fmt.Errorf("sample %d: negative iter, step or position", i)
		}
	}
	return nil
}

// IterationResults rebuilds the shape's timed iterations from its samples
// (what compare and the statistics work on).
func (s ShapeReport) IterationResults() []bench.IterationResult {
	index := map[int]int{}
	var iterations []bench.IterationResult
	for _, r := range s.Samples {
		i, ok := index[r.Iter]
		if !ok {
			i = len(iterations)
			index[r.Iter] = i
			iterations = append(iterations, bench.IterationResult{Iter: r.Iter})
		}
		sample := bench.Sample{Phase: r.Phase, Iter: r.Iter, Step: r.Step, Position: r.Position,
			HostSeconds: r.HostSeconds, DeviceSeconds: r.DeviceSeconds, RankDeviceSeconds: r.RankDeviceSeconds}
		if r.Phase == bench.PhasePrefill {
			iterations[i].Prefill = sample
		} else {
			iterations[i].Decode = append(iterations[i].Decode, sample)
		}
	}
	return iterations
}

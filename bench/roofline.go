package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"stepbench/runner"

	"stepbench/bench/stats"
)

// GPUSpec is a GPU's datasheet peaks: dense bf16 tensor-core FLOP/s (no
// sparsity) and HBM bandwidth.
type GPUSpec struct {
	Name            string  `json:"name"`
	Description     string  `json:"description"`
	PeakFLOPsPerSec float64 `json:"peak_bf16_dense_flops_per_second"`
	PeakBytesPerSec float64 `json:"peak_memory_bytes_per_second"`
	MemoryBytes     float64 `json:"memory_bytes"`
}

// gpuPresets are NVIDIA datasheet figures (dense bf16 = half the "with
// sparsity" figure the datasheets print).
var gpuPresets = []GPUSpec{
	{"a100-pcie-80gb", "A100 PCIe 80GB", 312e12, 1.935e12, 80e9},
	{"a100-sxm-80gb", "A100 SXM4 80GB", 312e12, 2.039e12, 80e9},
	{"h100-pcie", "H100 PCIe 80GB", 756e12, 2.0e12, 80e9},
	{"h100-nvl", "H100 NVL 94GB", 835e12, 3.9e12, 94e9},
	{"h100-sxm", "H100 SXM5 80GB", 989.4e12, 3.35e12, 80e9},
	{"h200", "H200 SXM 141GB", 989.4e12, 4.8e12, 141e9},
	{"l40s", "L40S 48GB", 362e12, 0.864e12, 48e9},
}

// GPUPresetNames lists the GPU presets.
func GPUPresetNames() []string {
	names := make([]string, len(gpuPresets))
	for i, g := range gpuPresets {
		names[i] = g.Name
	}
	sort.Strings(names)
	return names
}

// GPUPreset returns a GPU preset by name.
func GPUPreset(name string) (GPUSpec, error) {
	for _, g := range gpuPresets {
		if g.Name == name {
			return g, nil
		}
	}
	return GPUSpec{}, fmt.Errorf("unknown GPU %q (known: %s)", name, strings.Join(GPUPresetNames(), ", "))
}

// RidgeFLOPsPerByte is the arithmetic intensity where the two roofs meet.
func (g GPUSpec) RidgeFLOPsPerByte() float64 { return g.PeakFLOPsPerSec / g.PeakBytesPerSec }

// Floor is the least time a step can take on a GPU: the larger of its
// compute time at peak FLOP/s and its memory time at peak bandwidth.
type Floor struct {
	ComputeSeconds float64 `json:"compute_floor_seconds"` // FLOPs / peak FLOP/s
	MemorySeconds  float64 `json:"memory_floor_seconds"`  // bytes / peak bytes/s
	Seconds        float64 `json:"floor_seconds"`         // max of the two
	Bound          string  `json:"bound"`                 // "compute" or "memory"
}

// FloorOf applies the roofline to a cost.
func FloorOf(g GPUSpec, flops, bytes float64) Floor {
	f := Floor{ComputeSeconds: flops / g.PeakFLOPsPerSec, MemorySeconds: bytes / g.PeakBytesPerSec}
	f.Seconds, f.Bound = f.MemorySeconds, "memory"
	if f.ComputeSeconds > f.MemorySeconds {
		f.Seconds, f.Bound = f.ComputeSeconds, "compute"
	}
	return f
}

// StepFloors are the analytic floors of one shape: its prefill, its first
// and last decode steps, and the sum over the whole iteration.
type StepFloors struct {
	Prefill          runner.StepCost   `json:"prefill"`
	PrefillFloor     Floor             `json:"prefill_floor"`
	Decode           []runner.StepCost `json:"decode"` // one per decode step, in order; null without decode steps
	DecodeFloors     []Floor           `json:"decode_floors"`
	IterationSeconds float64           `json:"iteration_floor_seconds"` // prefill floor + every decode step's floor
}

// MedianDecodeFloorSeconds is the median over the decode steps' floors
// (comparable with the median decode latency); 0 without decode steps.
func (s StepFloors) MedianDecodeFloorSeconds() float64 {
	if len(s.DecodeFloors) == 0 {
		return 0
	}
	xs := make([]float64, len(s.DecodeFloors))
	for i, f := range s.DecodeFloors {
		xs[i] = f.Seconds
	}
	return stats.Median(xs)
}

// ComputeFloors costs every step of one shape. Decode steps are costed at
// each of their positions, so long generations see the KV cache grow.
func ComputeFloors(cfg runner.Config, g GPUSpec, batch, inputLen, outputLen int) (StepFloors, error) {
	var sf StepFloors
	var err error
	if sf.Prefill, err = runner.PrefillCost(cfg, batch, inputLen); err != nil {
		return sf, err
	}
	sf.PrefillFloor = FloorOf(g, sf.Prefill.FLOPs, sf.Prefill.Bytes)
	sf.IterationSeconds = sf.PrefillFloor.Seconds
	// Decode costs are affine in the position; cost two points and
	// interpolate the rest exactly rather than run the model per step.
	steps := outputLen - 1
	if steps > 0 {
		first, err := runner.DecodeCost(cfg, batch, inputLen)
		if err != nil {
			return sf, err
		}
		last := first
		if steps > 1 {
			if last, err = runner.DecodeCost(cfg, batch, inputLen+steps-1); err != nil {
				return sf, err
			}
		}
		for i := 0; i < steps; i++ {
			c := first
			if i > 0 {
				t := float64(i) / float64(steps-1)
				c.StartPos = inputLen + i
				c.FLOPs = first.FLOPs + t*(last.FLOPs-first.FLOPs)
				c.Bytes = first.Bytes + t*(last.Bytes-first.Bytes)
				c.Ops = nil
				if i == steps-1 {
					c = last
				}
			}
			f := FloorOf(g, c.FLOPs, c.Bytes)
			sf.Decode = append(sf.Decode, c)
			sf.DecodeFloors = append(sf.DecodeFloors, f)
			sf.IterationSeconds += f.Seconds
		}
	}
	if math.IsNaN(sf.IterationSeconds) {
		return sf, fmt.Errorf("floors: not a number for batch %d input %d output %d", batch, inputLen, outputLen)
	}
	return sf, nil
}

// GPUPresetForDevice picks the preset matching a device name as the driver
// reports it (e.g. "NVIDIA H100 80GB HBM3" → h100-sxm).
func GPUPresetForDevice(deviceName string) (GPUSpec, bool) {
	n := strings.ToLower(deviceName)
	var name string
	switch {
	case strings.Contains(n, "h200"):
		name = "h200"
	case strings.Contains(n, "h100") && strings.Contains(n, "pcie"):
		name = "h100-pcie"
	case strings.Contains(n, "h100") && strings.Contains(n, "nvl"):
		name = "h100-nvl"
	case strings.Contains(n, "h100"):
		name = "h100-sxm"
	case strings.Contains(n, "a100") && strings.Contains(n, "pcie"):
		name = "a100-pcie-80gb"
	case strings.Contains(n, "a100"):
		name = "a100-sxm-80gb"
	case strings.Contains(n, "l40s"):
		name = "l40s"
	default:
		return GPUSpec{}, false
	}
	g, err := GPUPreset(name)
	return g, err == nil
}

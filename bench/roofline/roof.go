package roofline

import (
	"fmt"
	"math"
)

// Roof sources, in the order a run prefers them.
const (
	SourceMeasured  = "measured"  // stepbench calibrate: cuBLAS bf16 GEMM and device-to-device copy
	SourceDevice    = "device"    // SM count × FLOP/clock/SM × SM clock; memory clock × bus width × 2
	SourceDatasheet = "datasheet" // a GPU preset's datasheet peaks
)

// Roof is a pair of roofline ceilings: dense bf16 FLOP/s and memory bytes/s
// (and, for FP8 models, the dense FP8 tensor-core rate).
type Roof struct {
	Source          string  `json:"source"` // SourceMeasured, SourceDevice or SourceDatasheet
	Description     string  `json:"description,omitempty"`
	PeakFLOPsPerSec float64 `json:"peak_flops_per_second"`
	// PeakFP8FLOPsPerSec is the dense FP8 tensor-core rate (fp32
	// accumulate), the ceiling of an FP8 model's GEMMs; 0 on a roof of a
	// bf16 run (nothing of it runs at that rate) and on GPUs without FP8.
	PeakFP8FLOPsPerSec float64 `json:"peak_fp8_flops_per_second,omitempty"`
	PeakBytesPerSec    float64 `json:"peak_bytes_per_second"`
	RidgeFLOPsPerByte  float64 `json:"ridge_flops_per_byte"` // where the two roofs meet
	// LinkBytesPerSec is the GPU's interconnect bandwidth to its peers, per
	// direction (NVLink; the datasheet's, of the preset matching the GPU):
	// the ceiling of tensor parallelism's all-reduces. 0: unknown.
	LinkBytesPerSec float64 `json:"link_bytes_per_second,omitempty"`
}

// NewRoof makes a roof and computes its ridge.
func NewRoof(source, description string, flopsPerSec, bytesPerSec float64) Roof {
	r := Roof{Source: source, Description: description, PeakFLOPsPerSec: flopsPerSec, PeakBytesPerSec: bytesPerSec}
	if bytesPerSec > 0 {
		r.RidgeFLOPsPerByte = flopsPerSec / bytesPerSec
	}
	return r
}

// AttainableFLOPsPerSec is the roofline: min(peak, intensity × bandwidth).
func (r Roof) AttainableFLOPsPerSec(intensityFLOPsPerByte float64) float64 {
	return math.Min(r.PeakFLOPsPerSec, intensityFLOPsPerByte*r.PeakBytesPerSec)
}

// FP8Ratio is FP8's dense tensor-core rate over bf16's on every GPU with
// FP8 tensor cores (Ada, Hopper, Blackwell datasheets: H100 SXM 1979 and
// 989 TFLOP/s), what a roof without its own FP8 figure assumes.
const FP8Ratio = 2

// FP8PeakFLOPsPerSec is the FP8 rate an FP8 GEMM's FLOPs are floored at:
// the roof's own, else FP8Ratio × its bf16 peak.
func (r Roof) FP8PeakFLOPsPerSec() float64 {
	if r.PeakFP8FLOPsPerSec > 0 {
		return r.PeakFP8FLOPsPerSec
	}
	return FP8Ratio * r.PeakFLOPsPerSec
}

// ComputeSeconds is the least time of flops FLOPs of which fp8FLOPs run at
// the FP8 rate and the rest at the bf16 one.
func (r Roof) ComputeSeconds(flops, fp8FLOPs float64) float64 {
	t := (flops - fp8FLOPs) / r.PeakFLOPsPerSec
	if fp8FLOPs > 0 {
		t += fp8FLOPs / r.FP8PeakFLOPsPerSec()
	}
	return t
}

// WithoutFP8 is the roof with no FP8 ceiling (a bf16 run's).
func (r Roof) WithoutFP8() Roof {
	r.PeakFP8FLOPsPerSec = 0
	return r
}

// Label names the roof in every output that uses it: its source, what it
// is, and its peaks.
func (r Roof) Label() string {
	fp8 := ""
	if r.PeakFP8FLOPsPerSec > 0 {
		fp8 = fmt.Sprintf(" (FP8 %.1f)", r.PeakFP8FLOPsPerSec/1e12)
	}
	return fmt.Sprintf("%s roof (%s): %.1f TFLOP/s%s, %.2f TB/s, ridge %.0f FLOP/byte",
		r.Source, r.Description, r.PeakFLOPsPerSec/1e12, fp8, r.PeakBytesPerSec/1e12, r.RidgeFLOPsPerByte)
}

// Floor is the least time a step can take on a GPU: the larger of its
// compute time at peak FLOP/s and its memory time at peak bandwidth.
type Floor struct {
	ComputeSeconds float64 `json:"compute_floor_seconds"` // FLOPs / peak FLOP/s
	MemorySeconds  float64 `json:"memory_floor_seconds"`  // bytes / peak bytes/s
	Seconds        float64 `json:"floor_seconds"`         // max of the two (+ CommSeconds)
	Bound          string  `json:"bound"`                 // "compute", "memory", or "link" (FloorComm's largest term)
	// CommSeconds is a tensor-parallel step's interconnect bytes over the
	// link bandwidth, added to Seconds (FloorComm); 0 on one GPU.
	CommSeconds float64 `json:"comm_floor_seconds,omitempty"`
}

// Floor applies the roofline to a cost: the least time flops and bytes
// take under r (no FP8 FLOPs among them: FloorWork).
func (r Roof) Floor(flops, bytes float64) Floor { return r.FloorWork(flops, 0, bytes, 0) }

// FloorWork is the floor of flops FLOPs (fp8FLOPs of them FP8 GEMMs',
// ComputeSeconds), bytes, and commBytes over the link (FloorComm).
func (r Roof) FloorWork(flops, fp8FLOPs, bytes, commBytes float64) Floor {
	f := Floor{ComputeSeconds: r.ComputeSeconds(flops, fp8FLOPs), MemorySeconds: bytes / r.PeakBytesPerSec}
	f.Seconds, f.Bound = f.MemorySeconds, "memory"
	if f.ComputeSeconds > f.MemorySeconds {
		f.Seconds, f.Bound = f.ComputeSeconds, "compute"
	}
	return r.floorComm(f, commBytes)
}

// FloorComm is Floor for one GPU of a tensor-parallel step that also sends
// commBytes to its peers: the all-reduces sit between the ops whose results
// they sum and the ops that need the sums, so their time at the link
// bandwidth adds to the larger of the compute and memory times. Without a
// known link bandwidth the all-reduces are left out (the floor stays a lower
// bound, a looser one). Bandwidth only: a small all-reduce's latency (µs
// per call) is not in it.
func (r Roof) FloorComm(flops, bytes, commBytes float64) Floor {
	return r.FloorWork(flops, 0, bytes, commBytes)
}

// floorComm adds commBytes' link time to a floor (FloorComm).
func (r Roof) floorComm(f Floor, commBytes float64) Floor {
	if commBytes > 0 && r.LinkBytesPerSec > 0 {
		f.CommSeconds = commBytes / r.LinkBytesPerSec
		if f.CommSeconds > f.Seconds {
			f.Bound = "link"
		}
		f.Seconds += f.CommSeconds
	}
	return f
}

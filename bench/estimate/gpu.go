package estimate

import (
	"fmt"
	"sort"
	"strings"
)

// Constant is one figure of the model and where it comes from.
type Constant struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Source string  `json:"source"`
}

// GPU is the machine the model prices launches on.
type GPU struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	SMs         int    `json:"sms"`
	// HBMRate is achievable HBM bandwidth (bytes/s), MatrixRate the
	// achievable dense bf16 tensor-core rate (FLOP/s), L2Rate L2's
	// bandwidth (bytes/s), Clock the SM clock (Hz), SharedBytesPerClock
	// one SM's shared-memory bandwidth (bytes per clock).
	HBMRate, MatrixRate, L2Rate, Clock, SharedBytesPerClock float64
	// Seconds: a captured decode step's gap between graph nodes, an
	// eager launch's gap, what a programmatic edge saves of either, a
	// kernel's ramp (first loads' latency and tail) and the shortest kernel.
	NodeGap, LaunchGap, PDLSaving, Ramp, MinKernel float64
	// sources name each figure's source, by Constants' names.
	sources map[string]string
}

const (
	srcKindsH200   = "/work/.library/device/KINDS.md, nvidia-h200 2026-10-28 and 2026-11-04"
	srcKindsH100   = "/work/.library/device/KINDS.md, nvidia-h100-x1 2026-11-13"
	srcIssue19     = "docs/kernel.md, issue 19's per-launch model"
	srcAssumption  = "ASSUMPTION"
	srcHopperBanks = "/work/.library/device/HOPPER.md: 32 banks of 4 bytes per clock"
)

// commonSources are the figures both Hoppers share.
func commonSources() map[string]string {
	return map[string]string{
		"l2_rate":          srcAssumption + ": no L2 bandwidth measured on these machines; about twice the H200's copy rate, Hopper's L2 serving both parts alike",
		"smem_bytes_clock": srcHopperBanks,
		"sms":              "KINDS.md: PyTorch reported 132 multiprocessors (H100 and H200)",
		"node_gap":         srcIssue19 + ": about 1.5 µs of graph-node gap per launch",
		"launch_gap":       srcAssumption + ": an eager prefill's launches queue ahead of the GPU, so the gap between dependent kernels is a graph node's",
		"pdl_saving":       "docs/kernel.md (launch 2): overlap hides 1.0-1.5 µs of the gap per programmatic edge; the low end",
		"ramp":             srcIssue19 + ": 1 µs per GEMV launch, the first weights' DRAM latency (docs/kernel.md, launch 2)",
		"min_kernel":       "docs/kernel.md (attn_decode 5): a small kernel's 2-6 µs of latency; the low end",
	}
}

// gpus are the GPUs the model knows; rates are the ones measured on this
// workplace's machines, not the datasheets' peaks (the floors' roof).
var gpus = []GPU{
	{Name: "h100-sxm", Description: "H100 SXM5 80GB", SMs: 132, HBMRate: 3.0e12, MatrixRate: 798e12, L2Rate: 9e12, Clock: 1.98e9, SharedBytesPerClock: 128,
		NodeGap: 1.5e-6, LaunchGap: 1.5e-6, PDLSaving: 1.0e-6, Ramp: 1.0e-6, MinKernel: 2.0e-6,
		sources: withSources(map[string]string{
			"hbm_rate":    srcKindsH100 + ": a device-to-device copy moved about 3.0 TB/s counting bytes read and written (datasheet 3.35)",
			"matrix_rate": srcKindsH100 + ": an 8192³ bf16 matrix product ran at 798 TFLOP/s on random data (datasheet 989)",
			"clock":       srcAssumption + ": the H200's 1980 MHz under load (KINDS.md), the same chip",
		})},
	{Name: "h200", Description: "H200 SXM 141GB", SMs: 132, HBMRate: 4.3e12, MatrixRate: 788e12, L2Rate: 9e12, Clock: 1.98e9, SharedBytesPerClock: 128,
		NodeGap: 1.5e-6, LaunchGap: 1.5e-6, PDLSaving: 1.0e-6, Ramp: 1.0e-6, MinKernel: 2.0e-6,
		sources: withSources(map[string]string{
			"hbm_rate":    srcKindsH200 + ": a device-to-device copy moved about 4.3 TB/s counting bytes read and written (datasheet 4.8)",
			"matrix_rate": srcKindsH200 + ": an 8192³ bf16 matrix product ran at 788 TFLOP/s on random data (769-798; datasheet 989)",
			"clock":       srcKindsH200 + ": SM clock 1980 MHz just after the matrix products",
		})},
}

func withSources(own map[string]string) map[string]string {
	out := commonSources()
	for k, v := range own {
		out[k] = v
	}
	return out
}

// GPUNames lists the GPUs the model knows.
func GPUNames() []string {
	var names []string
	for _, g := range gpus {
		names = append(names, g.Name)
	}
	sort.Strings(names)
	return names
}

// LookupGPU is the GPU of a roofline preset name (h100-sxm, h200).
func LookupGPU(name string) (GPU, error) {
	for _, g := range gpus {
		if g.Name == name {
			return g, nil
		}
	}
	return GPU{}, fmt.Errorf("the estimate knows %s, not %q", strings.Join(GPUNames(), " and "), name)
}

// Constants lists every figure of the model with its unit and source.
func (g GPU) Constants() []Constant {
	s := g.sources
	return []Constant{
		{"hbm_rate", g.HBMRate, "B/s", s["hbm_rate"]},
		{"matrix_rate", g.MatrixRate, "FLOP/s", s["matrix_rate"]},
		{"l2_rate", g.L2Rate, "B/s", s["l2_rate"]},
		{"sms", float64(g.SMs), "", s["sms"]},
		{"clock", g.Clock, "Hz", s["clock"]},
		{"smem_bytes_clock", g.SharedBytesPerClock, "B/clock/SM", s["smem_bytes_clock"]},
		{"node_gap", g.NodeGap, "s", s["node_gap"]},
		{"launch_gap", g.LaunchGap, "s", s["launch_gap"]},
		{"pdl_saving", g.PDLSaving, "s", s["pdl_saving"]},
		{"ramp", g.Ramp, "s", s["ramp"]},
		{"min_kernel", g.MinKernel, "s", s["min_kernel"]},
	}
}

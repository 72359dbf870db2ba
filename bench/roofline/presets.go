package roofline

import (
	"fmt"
	"sort"
	"strings"
)

// Preset is a GPU's datasheet: its name, memory, and the peaks that make
// its datasheet roof (dense bf16 tensor-core FLOP/s, no sparsity, and HBM
// bandwidth; dense FP8 for FP8 models).
type Preset struct {
	Name            string  `json:"name"`
	Description     string  `json:"description"`
	PeakFLOPsPerSec float64 `json:"peak_bf16_dense_flops_per_second"`
	PeakBytesPerSec float64 `json:"peak_memory_bytes_per_second"`
	MemoryBytes     float64 `json:"memory_bytes"`
	// LinkBytesPerSec is the interconnect bandwidth per direction to the
	// other GPUs (half the datasheet's bidirectional NVLink figure), the
	// ceiling of tensor parallelism's all-reduces.
	LinkBytesPerSec float64 `json:"link_bytes_per_second_per_direction"`
	// PeakFP8FLOPsPerSec is the dense FP8 (E4M3) tensor-core rate; 0: the
	// GPU has no FP8 tensor cores (A100).
	PeakFP8FLOPsPerSec float64 `json:"peak_fp8_dense_flops_per_second,omitempty"`
}

// gpuPresets are NVIDIA datasheet figures (dense bf16 and FP8 = half the
// "with sparsity" figures the datasheets print: FP8 H100/H200 SXM 3958 →
// 1979 TFLOP/s, H100 NVL 3341 → 1671, H100 PCIe 3026 → 1513, L40S 1466 →
// 733; A100 has no FP8). Links, per direction: H100 and
// H200 SXM NVLink 4, 900 GB/s bidirectional → 450; A100 SXM NVLink 3,
// 600 → 300; the PCIe and NVL cards' NVLink bridges, 600 → 300 (a bridge
// joins two cards only: a larger group on them goes over PCIe and the link
// floor is optimistic); L40S has no NVLink: PCIe Gen4 x16, 32 GB/s.
var gpuPresets = []Preset{
	{"a100-pcie-80gb", "A100 PCIe 80GB", 312e12, 1.935e12, 80e9, 300e9, 0},
	{"a100-sxm-80gb", "A100 SXM4 80GB", 312e12, 2.039e12, 80e9, 300e9, 0},
	{"h100-pcie", "H100 PCIe 80GB", 756e12, 2.0e12, 80e9, 300e9, 1513e12},
	{"h100-nvl", "H100 NVL 94GB", 835e12, 3.9e12, 94e9, 300e9, 1671e12},
	{"h100-sxm", "H100 SXM5 80GB", 989.4e12, 3.35e12, 80e9, 450e9, 1978.9e12},
	{"h200", "H200 SXM 141GB", 989.4e12, 4.8e12, 141e9, 450e9, 1978.9e12},
	{"l40s", "L40S 48GB", 362e12, 0.864e12, 48e9, 32e9, 733e12},
}

// PresetNames lists the GPU presets.
func PresetNames() []string {
	names := make([]string, len(gpuPresets))
	for i, g := range gpuPresets {
		names[i] = g.Name
	}
	sort.Strings(names)
	return names
}

// LookupPreset returns a GPU preset by name.
func LookupPreset(name string) (Preset, error) {
	for _, g := range gpuPresets {
		if g.Name == name {
			return g, nil
		}
	}
	return Preset{}, fmt.Errorf("unknown GPU %q (known: %s)", name, strings.Join(PresetNames(), ", "))
}

// Roof is the preset's datasheet roof.
func (p Preset) Roof() Roof {
	r := NewRoof(SourceDatasheet, p.Description, p.PeakFLOPsPerSec, p.PeakBytesPerSec)
	r.LinkBytesPerSec = p.LinkBytesPerSec
	r.PeakFP8FLOPsPerSec = p.PeakFP8FLOPsPerSec
	return r
}

// CheckFP8 refuses, in one line, floors of an FP8 model on a GPU without
// FP8 tensor cores.
func (p Preset) CheckFP8() error {
	if p.PeakFP8FLOPsPerSec == 0 {
		return fmt.Errorf("%s has no FP8 tensor cores (compute capability 8.9 or newer: L40S, H100, H200): no FP8 floors", p.Description)
	}
	return nil
}

// PresetForDevice picks the preset matching a device name as the driver
// reports it (e.g. "NVIDIA H100 80GB HBM3" → h100-sxm).
func PresetForDevice(deviceName string) (Preset, bool) {
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
		return Preset{}, false
	}
	g, err := LookupPreset(name)
	return g, err == nil
}

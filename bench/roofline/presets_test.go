package roofline

import (
	"math"
	"testing"

	"stepbench/runner"
)

func TestPresetsAndTheirRoofs(t *testing.T) {
	for _, tc := range []struct{ device, preset string }{
		{"NVIDIA H100 80GB HBM3", "h100-sxm"}, {"NVIDIA H100 PCIe", "h100-pcie"}, {"NVIDIA H100 NVL", "h100-nvl"},
		{"NVIDIA H200", "h200"}, {"NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"}, {"NVIDIA L40S", "l40s"},
	} {
		p, ok := PresetForDevice(tc.device)
		if !ok || p.Name != tc.preset {
			t.Errorf("PresetForDevice(%q) = %q, %v; want %q", tc.device, p.Name, ok, tc.preset)
		}
	}
	if _, ok := PresetForDevice("stepbench emulated GPU"); ok {
		t.Error("a device of no preset matched one")
	}
	h200, err := LookupPreset("h200")
	if err != nil {
		t.Fatal(err)
	}
	roof := h200.Roof()
	if roof.Source != SourceDatasheet || roof.PeakBytesPerSec != 4.8e12 || math.Abs(roof.RidgeFLOPsPerByte-989.4e12/4.8e12) > 1e-9 {
		t.Errorf("h200 roof %+v", roof)
	}
	if _, err := LookupPreset("h300"); err == nil {
		t.Error("an unknown preset was found")
	}
}

// DESIGN's figure: Llama-3-8B decode at batch 1 reads 15.01 GB of weights,
// 4.48 ms on an H100 SXM at 3.35 TB/s.
func TestFloorOfLlama3Decode(t *testing.T) {
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := LookupPreset("h100-sxm")
	sf, err := ComputeFloors(cfg, h100.Roof(), 1, 128, 2)
	if err != nil {
		t.Fatal(err)
	}
	if f := sf.DecodeFloors[0]; f.Bound != "memory" || math.Abs(f.Seconds-4.48e-3) > 0.01e-3 {
		t.Errorf("decode floor %+v, want 4.48 ms memory bound", f)
	}
}

func TestStepPoints(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := NewRoof(SourceDatasheet, "test", 1e12, 1e11)
	points, err := StepPoints(cfg, &roof, 2, 16, 5, 1e-3, 2e-4)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].Phase != runner.PhasePrefill || points[1].Phase != runner.PhaseDecode {
		t.Fatalf("points %+v", points)
	}
	// Four decode steps at positions 16..19: the median step is at 16+(5-2)/2.
	decode, err := runner.DecodeCost(cfg, 2, 17)
	if err != nil {
		t.Fatal(err)
	}
	if p := points[1]; p.Position != 17 || p.Bytes != decode.Bytes || p.Roof != SourceDatasheet ||
		math.Abs(p.AttainmentFraction-roof.Floor(decode.FLOPs, decode.Bytes).Seconds/2e-4) > 1e-12 {
		t.Errorf("decode point %+v", p)
	}
	if points, _ := StepPoints(cfg, nil, 1, 16, 1, 1e-3, 0); len(points) != 1 || points[0].Bound != "" {
		t.Errorf("no roof, no decode steps: %+v", points)
	}
}

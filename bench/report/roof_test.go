package report

import (
	"testing"

	"stepbench/bench/roofline"
)

func TestChooseRoof(t *testing.T) {
	h100 := Environment{Backend: "cuda", GPUName: "NVIDIA H100 80GB HBM3", GPUUUID: "GPU-1234", ComputeCapability: "9.0",
		SMCount: 132, MaxSMClockMHz: 1980, MaxMemoryClockMHz: 2619, MemoryBusWidthBits: 5120}
	unknownGPU := h100
	unknownGPU.GPUName, unknownGPU.GPUUUID = "stepbench emulated GPU", "GPU-emu"
	noClocks := h100
	noClocks.MaxSMClockMHz = 0
	calibrated := t.TempDir()
	c, err := roofline.NewCalibration("GPU-1234", "NVIDIA H100 80GB HBM3", 1<<30, []float64{0.001}, 8192, []float64{0.0015})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roofline.SaveCalibration(calibrated, c); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, choice, dir string
		env               Environment
		want              string // the chosen roof's source, "" for none
		known             int
	}{
		{"cpu, auto", RoofAuto, "", Environment{Backend: "cpu"}, "", 0},
		{"cpu, a preset", "h100-sxm", "", Environment{Backend: "cpu"}, roofline.SourceDatasheet, 1},
		{"GPU, auto, no calibration", RoofAuto, t.TempDir(), h100, roofline.SourceDevice, 2},
		{"GPU, auto, calibrated", RoofAuto, calibrated, h100, roofline.SourceMeasured, 3},
		{"GPU, a preset asked for", "h200", calibrated, h100, roofline.SourceDatasheet, 3},
		{"GPU, none", RoofNone, calibrated, h100, "", 3},
		{"no preset for the GPU", RoofAuto, t.TempDir(), unknownGPU, roofline.SourceDevice, 1},
		{"no clocks: the datasheet", RoofAuto, t.TempDir(), noClocks, roofline.SourceDatasheet, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roof, known, err := ChooseRoof(tc.env, tc.choice, tc.dir, false)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if roof != nil {
				got = roof.Source
				if known[0] != *roof {
					t.Errorf("the chosen roof is not the first known one")
				}
			}
			if got != tc.want || len(known) != tc.known {
				t.Errorf("roof %q of %d known, want %q of %d", got, len(known), tc.want, tc.known)
			}
		})
	}
	if roof, _, _ := ChooseRoof(h100, "h200", "", false); roof == nil || roof.PeakBytesPerSec != 4.8e12 {
		t.Errorf("--gpu h200 on an H100: %+v, want the H200's datasheet", roof)
	}
	if _, _, err := ChooseRoof(h100, "h300", "", false); err == nil {
		t.Error("an unknown preset was accepted")
	}
}

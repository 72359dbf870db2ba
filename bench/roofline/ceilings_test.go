package roofline

import (
	"errors"
	"math"
	"os"
	"testing"
)

func TestDeviceCeilingsH100(t *testing.T) {
	c, err := ComputeDeviceCeilings(132, 9, 0, 1830, 2619, 5120)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.PeakFLOPsPerSec-989.4e12)/989.4e12 > 1e-3 {
		t.Errorf("peak %.4g FLOP/s, want ≈ 989.4e12", c.PeakFLOPsPerSec)
	}
	if math.Abs(c.PeakBytesPerSec-3.352e12)/3.35e12 > 1e-3 {
		t.Errorf("bandwidth %.4g B/s, want ≈ 3.35e12", c.PeakBytesPerSec)
	}
	// Ridge: 989.4e12 / 3.352e12 ≈ 295 FLOP/byte.
	if math.Abs(c.RidgeFLOPsPerByte-295.2) > 0.5 {
		t.Errorf("ridge %.2f FLOP/byte, want ≈ 295.2", c.RidgeFLOPsPerByte)
	}
	a100, err := ComputeDeviceCeilings(108, 8, 0, 1410, 1593, 5120)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(a100.PeakFLOPsPerSec-312e12)/312e12 > 2e-3 {
		t.Errorf("A100 peak %.4g, want ≈ 312e12", a100.PeakFLOPsPerSec)
	}
	if _, err := ComputeDeviceCeilings(132, 7, 5, 1830, 2619, 5120); err == nil {
		t.Error("unknown architecture accepted")
	}
	if _, err := ComputeDeviceCeilings(0, 9, 0, 1830, 2619, 5120); err == nil {
		t.Error("zero SMs accepted")
	}
}

func TestRooflinePointAttainment(t *testing.T) {
	roof := NewRoof(SourceDatasheet, "test", 1000e12, 4e12) // ridge 250 FLOP/byte
	if roof.RidgeFLOPsPerByte != 250 {
		t.Fatalf("ridge %v", roof.RidgeFLOPsPerByte)
	}
	cases := []struct {
		name                   string
		flops, bytes, seconds  float64
		bound                  string
		attainable, attainment float64
	}{
		// 15 GB at 4 TB/s is 3.75 ms; measured 5 ms → 75%.
		{"decode, memory bound", 30e9, 15e9, 5e-3, "memory", 2 * 4e12, 0.75},
		// 1e15 FLOPs at 1 PFLOP/s is 1 s; measured 2 s → 50%.
		{"prefill, compute bound", 1e15, 1e12, 2, "compute", 1000e12, 0.5},
		// a copy: no FLOPs, 8 GB in 4 ms at 4 TB/s floor 2 ms → 50%.
		{"copy, no flops", 0, 8e9, 4e-3, "memory", 0, 0.5},
	}
	for _, c := range cases {
		p := NewPoint(&roof, c.flops, c.bytes, c.seconds)
		if p.Bound != c.bound || math.Abs(p.AttainmentFraction-c.attainment) > 1e-9 ||
			math.Abs(p.AttainableFLOPsPerSec-c.attainable) > 1e-3*math.Max(1, c.attainable) {
			t.Errorf("%s: %+v", c.name, p)
		}
		if c.flops > 0 {
			// achieved / attainable equals floor / measured.
			if r := p.AchievedFLOPsPerSec / p.AttainableFLOPsPerSec; math.Abs(r-p.AttainmentFraction) > 1e-9 {
				t.Errorf("%s: achieved/attainable %v != attainment %v", c.name, r, p.AttainmentFraction)
			}
		}
	}
	if p := NewPoint(nil, 1, 1, 1); p.Bound != "" || p.AchievedFLOPsPerSec != 1 {
		t.Errorf("no roof: %+v", p)
	}
}

func TestCalibrationCache(t *testing.T) {
	dir := t.TempDir()
	uuid := "GPU-0123abcd-0000-1111-2222-333344445555"
	if _, err := LoadCalibration(dir, uuid); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty cache: %v", err)
	}
	// 1 GiB copied in 0.5 ms median → 2 GiB moved / 0.5e-3 s; 8192³ GEMM in 1.2 ms median.
	c, err := NewCalibration(uuid, "NVIDIA H200", 1<<30, []float64{0.6e-3, 0.5e-3, 0.4e-3}, 8192, []float64{1.2e-3, 1.1e-3, 1.3e-3})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * float64(1<<30) / 0.5e-3; math.Abs(c.CopyBytesPerSec-want) > 1 {
		t.Errorf("copy rate %v, want %v", c.CopyBytesPerSec, want)
	}
	if want := 2 * math.Pow(8192, 3) / 1.2e-3; math.Abs(c.GEMMFLOPsPerSec-want)/want > 1e-12 {
		t.Errorf("GEMM rate %v, want %v", c.GEMMFLOPsPerSec, want)
	}
	path, err := SaveCalibration(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadCalibration(dir, uuid)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if got.GEMMFLOPsPerSec != c.GEMMFLOPsPerSec || got.Roof().Source != SourceMeasured {
		t.Errorf("round trip: %+v", got)
	}
	if _, err := NewCalibration(uuid, "x", 1, []float64{0}, 1, []float64{1}); err == nil {
		t.Error("zero copy time accepted")
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCalibration(dir, uuid); err == nil {
		t.Error("corrupt cache accepted")
	}
}

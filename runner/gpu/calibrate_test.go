package gpu

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
)

func TestCalibrateRejectsBadOptions(t *testing.T) {
	for _, opt := range []CalibrateOptions{
		{CopyBytes: 0, GEMMSize: 1024, Repeats: 1},
		{CopyBytes: 1 << 20, GEMMSize: 8, Repeats: 1},
		{CopyBytes: 1 << 20, GEMMSize: 1024, Repeats: 0},
		{CopyBytes: 1 << 20, GEMMSize: 1024, Repeats: 1, Warmup: -1},
	} {
		// Options are checked before the driver is touched: nil is fine.
		if _, err := Calibrate(nil, nil, opt); err == nil {
			t.Errorf("options %+v accepted", opt)
		}
	}
}

// TestCalibrateOnGPU measures small sizes; it needs a GPU and cuBLAS, or
// the emulated device when an earlier test of the process loaded it (then
// smaller still, and only the shape of the result is checked: its times
// are the CPU's).
func TestCalibrateOnGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if n, err := drv.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no GPU: %d devices, %v", n, err)
	}
	blas, err := cuda.OpenCublas("")
	if err != nil {
		t.Skipf("no cuBLAS: %v", err)
	}
	opt := CalibrateOptions{CopyBytes: 256 << 20, GEMMSize: 2048, Repeats: 5, Warmup: 1, Seed: 1}
	emulated := drv.Emulated() != ""
	if emulated {
		opt.CopyBytes, opt.GEMMSize = 4<<20, 128
	}
	res, err := Calibrate(drv, blas, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CopySeconds) != 5 || len(res.GEMMSeconds) != 5 || res.UUID == "" {
		t.Fatalf("result %+v", res)
	}
	copyMedian := slices.Sorted(slices.Values(res.CopySeconds))[2]
	gemmMedian := slices.Sorted(slices.Values(res.GEMMSeconds))[2]
	bw := 2 * float64(opt.CopyBytes) / copyMedian
	flops := 2 * float64(opt.GEMMSize*opt.GEMMSize*opt.GEMMSize) / gemmMedian
	t.Logf("%s: copy %.2f TB/s, bf16 GEMM %d³ %.1f TFLOP/s", res.DeviceName, bw/1e12, opt.GEMMSize, flops/1e12)
	if props, _ := drv.Props(0); props.Major*10+props.Minor >= MinFP8Arch && len(res.FP8GEMMSeconds) != 5 {
		t.Errorf("compute capability %d.%d: %d FP8 GEMM times, want 5", props.Major, props.Minor, len(res.FP8GEMMSeconds))
	}
	if emulated {
		if !(bw > 0) || !(flops > 0) {
			t.Errorf("emulated device: rates %.3g B/s, %.3g FLOP/s, want positive", bw, flops)
		}
		return
	}
	// Sanity bounds for any datacenter GPU of the last decade.
	if bw < 1e11 || bw > 2e13 || flops < 1e12 || flops > 1e16 {
		t.Errorf("implausible rates: %.3g B/s, %.3g FLOP/s", bw, flops)
	}
}

// A cancelled calibration (Ctrl-C) stops between two runs, saying which;
// its progress names every run as it starts.
func TestCalibrateStopsWhenCancelled(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	blas, err := cuda.OpenCublas("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []string
	opt := CalibrateOptions{CopyBytes: 1 << 20, GEMMSize: 64, Repeats: 3, Warmup: 1, Seed: 1, Context: ctx,
		Progress: func(msg string) {
			seen = append(seen, msg)
			if len(seen) == 6 { // the second GEMM run
				cancel()
			}
		}}
	_, err = Calibrate(drv, blas, opt)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped before run 3 of 4") {
		t.Errorf("cancelled calibration: %v", err)
	}
	want := []string{"device-to-device copy 1/4", "device-to-device copy 2/4", "device-to-device copy 3/4", "device-to-device copy 4/4",
		"cuBLAS bf16 GEMM 1/4", "cuBLAS bf16 GEMM 2/4"}
	if !slices.Equal(seen, want) {
		t.Errorf("progress %q, want %q", seen, want)
	}
}

package cuda

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// openFakeDriver builds testdata/fakecuda.c into a shared library and opens
// it as the driver, so the Go side is exercised without a GPU.
func openFakeDriver(t *testing.T) *Driver {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the fake driver: %v", err)
	}
	so := filepath.Join(t.TempDir(), "libcuda.so.1")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, filepath.Join("testdata", "fakecuda.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("build fake driver: %v\n%s", err, out)
	}
	d, err := openDriverAt(so)
	if err != nil {
		t.Fatalf("openDriverAt(fake): %v", err)
	}
	t.Cleanup(d.lib.close)
	return d
}

func TestFakeDriverProps(t *testing.T) {
	d := openFakeDriver(t)
	if v, err := d.Version(); err != nil || v != 12040 {
		t.Errorf("Version = %d, %v; want 12040", v, err)
	}
	if n, err := d.DeviceCount(); err != nil || n != 1 {
		t.Errorf("DeviceCount = %d, %v; want 1", n, err)
	}
	p, err := d.Props(0)
	if err != nil {
		t.Fatalf("Props: %v", err)
	}
	want := DeviceProps{
		Ordinal: 0, Name: "Fake GPU", UUID: "GPU-00112233-4455-6677-8899-aabbccddeeff",
		Major: 9, Minor: 0, SMCount: 132, TotalMemBytes: 80 << 30, L2Bytes: 50 << 20,
		MaxSharedPerBlockOptinBytes: 227 << 10, ClockKHz: 1980000, MemClockKHz: 2619000, MemBusWidthBits: 5120,
	}
	if p != want {
		t.Errorf("Props =\n  %+v\nwant\n  %+v", p, want)
	}
	if _, err := d.Props(1); err == nil || err.Error() != "cuDeviceGet(1): CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("Props(1): err = %v", err)
	}
}

func TestFakeDriverErrorsAndLaunchArgs(t *testing.T) {
	d := openFakeDriver(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := d.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	_, err = ctx.Alloc(1 << 40)
	if err == nil || err.Error() != "cuMemAlloc_v2(1099511627776 bytes): CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("huge Alloc: err = %v", err)
	}
	if p, err := ctx.Alloc(1024); err != nil || p != 0x10000 {
		t.Errorf("Alloc = %#x, %v", p, err)
	}
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	f := &Function{name: "fake"}
	if err := s.Launch(f, Dim3{2, 1, 1}, Dim3{128, 1, 1}, 256, DevPtr(0x1000), int32(-5), float32(1.5), uint64(1<<40)); err != nil {
		t.Errorf("Launch with the expected arguments: %v", err)
	}
	err = s.Launch(f, Dim3{2, 1, 1}, Dim3{128, 1, 1}, 256, DevPtr(0x1000), int32(-4), float32(1.5), uint64(1<<40))
	if err == nil || !strings.HasPrefix(err.Error(), "cuLaunchKernel(fake, grid 2x1x1, block 128x1x1, 256 shared bytes): CUDA_ERROR_INVALID_VALUE") {
		t.Errorf("Launch with a wrong argument: err = %v", err)
	}
}

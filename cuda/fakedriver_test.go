package cuda

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildFake compiles testdata/src into the shared library dir/name with the
// given -D definitions and returns its path.
func buildFake(t *testing.T, src, dir, name string, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the fake %s: %v", name, err)
	}
	so := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-O1", "-o", so}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, filepath.Join("testdata", src))
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("build fake %s: %v\n%s", name, err, out)
	}
	return so
}

// openFakeDriver builds testdata/fakecuda.c (with the given variant
// definitions) into a shared library and opens it as the driver, so the Go
// side is exercised without a GPU.
func openFakeDriver(t *testing.T, defines ...string) *Driver {
	t.Helper()
	so := buildFake(t, "fakecuda.c", t.TempDir(), "libcuda.so.1", defines...)
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
	if d.Emulated() != "" {
		t.Errorf("a driver without sbemu_describe says it is emulated: %q", d.Emulated())
	}
}

// The _v2 entry points win where exported; the v1 names are the fallback;
// a driver with neither is refused. A MIG instance (v1 and v2 UUIDs differ)
// gets NVML's "MIG-" form.
func TestFakeDriverVersionedEntryPoints(t *testing.T) {
	tests := []struct {
		name      string
		defines   []string
		wantUUID  string
		wantMIG   bool
		wantMs    float32
		wantUUIDn string
	}{
		{name: "both: _v2 used", wantUUID: "GPU-00112233-4455-6677-8899-aabbccddeeff", wantMs: 2, wantUUIDn: "cuDeviceGetUuid_v2"},
		{name: "v2 only (CUDA 13 may drop v1)", defines: []string{"FAKE_NO_V1"},
			wantUUID: "GPU-00112233-4455-6677-8899-aabbccddeeff", wantMs: 2, wantUUIDn: "cuDeviceGetUuid_v2"},
		{name: "v1 only (older drivers)", defines: []string{"FAKE_NO_V2"},
			wantUUID: "GPU-00112233-4455-6677-8899-aabbccddeeff", wantMs: 1, wantUUIDn: "cuDeviceGetUuid"},
		{name: "MIG instance", defines: []string{"FAKE_MIG"},
			wantUUID: "MIG-00112233-4455-6677-8899-aabbccddeeff", wantMIG: true, wantMs: 2, wantUUIDn: "cuDeviceGetUuid_v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := openFakeDriver(t, tt.defines...)
			if d.api.uuidName != tt.wantUUIDn {
				t.Errorf("UUID entry point = %q, want %q", d.api.uuidName, tt.wantUUIDn)
			}
			p, err := d.Props(0)
			if err != nil {
				t.Fatal(err)
			}
			if p.UUID != tt.wantUUID || p.MIG != tt.wantMIG {
				t.Errorf("UUID, MIG = %q, %v; want %q, %v", p.UUID, p.MIG, tt.wantUUID, tt.wantMIG)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx, err := d.NewContext(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Close()
			start, err := ctx.NewEvent()
			if err != nil {
				t.Fatal(err)
			}
			end, err := ctx.NewEvent()
			if err != nil {
				t.Fatal(err)
			}
			if ms, err := ElapsedMs(start, end); err != nil || ms != tt.wantMs {
				t.Errorf("ElapsedMs = %v, %v; want %v (from the %s entry point)", ms, err, tt.wantMs, map[float32]string{1: "v1", 2: "_v2"}[tt.wantMs])
			}
		})
	}
	t.Run("neither", func(t *testing.T) {
		so := buildFake(t, "fakecuda.c", t.TempDir(), "libcuda.so.1", "FAKE_NO_V1", "FAKE_NO_V2")
		_, err := openDriverAt(so)
		for _, want := range []string{"missing symbols", "cuDeviceGetUuid_v2 (or cuDeviceGetUuid)", "cuEventElapsedTime_v2 (or cuEventElapsedTime)"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("driver with neither UUID nor elapsed-time entry point: err = %v, want it to contain %q", err, want)
			}
		}
	})
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

// TestFakeDriverLaunchProgrammatic passes LaunchProgrammatic's grid, block,
// shared bytes, arguments and attribute through cuLaunchKernelEx's
// configuration as the driver API lays it out (the fake checks each), and a
// driver without cuLaunchKernelEx gets an error naming it, not a launch.
func TestFakeDriverLaunchProgrammatic(t *testing.T) {
	for _, tc := range []struct {
		defines []string
		want    string // error prefix; "" for none
	}{
		{defines: []string{"FAKE_LAUNCH_EX"}},
		{want: "cuLaunchKernelEx(fake, programmatic stream serialization): the driver "},
	} {
		d := openFakeDriver(t, tc.defines...)
		if d.HasLaunchEx() != (tc.want == "") {
			t.Errorf("%v: HasLaunchEx = %v", tc.defines, d.HasLaunchEx())
		}
		func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx, err := d.NewContext(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Close()
			s, err := ctx.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			f := &Function{name: "fake"}
			err = s.LaunchProgrammatic(f, Dim3{2, 1, 1}, Dim3{128, 1, 1}, 256, DevPtr(0x1000), int32(-5), float32(1.5), uint64(1<<40))
			if tc.want == "" && err != nil {
				t.Errorf("LaunchProgrammatic with the expected arguments: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
				t.Errorf("LaunchProgrammatic without cuLaunchKernelEx: err = %v, want prefix %q", err, tc.want)
			}
			if tc.want != "" {
				return
			}
			err = s.LaunchProgrammatic(f, Dim3{2, 1, 1}, Dim3{128, 1, 1}, 256, DevPtr(0x1000), int32(-4), float32(1.5), uint64(1<<40))
			want := "cuLaunchKernelEx(fake, grid 2x1x1, block 128x1x1, 256 shared bytes, programmatic stream serialization): CUDA_ERROR_INVALID_VALUE"
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("LaunchProgrammatic with a wrong argument: err = %v, want prefix %q", err, want)
			}
		}()
	}
}

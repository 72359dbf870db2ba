package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
)

// These tests pin the emulated device's (cuda/emu) hardware rules and
// detectors through the real bindings: the launch checks CUDA makes, what a
// stream capture refuses, sticky faults with their messages.

const emuCheckSrc = `
extern "C" __global__ void __launch_bounds__(64) bounded(float* d) { d[threadIdx.x] = 1.0f; }
extern "C" __global__ void rotate(float* d) {
    extern __shared__ float s[];
    s[threadIdx.x] = d[threadIdx.x];
    __syncthreads();
    d[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void poke(float* d, long long i) {
    if (threadIdx.x == 0 && blockIdx.x == 0) d[i] = 1.0f;
}
`

type emuEnv struct {
	*gpuEnv
	mod *Module
}

func newEmuEnv(t *testing.T) *emuEnv {
	t.Helper()
	emutest.Use(t)
	g := newGPUEnv(t)
	if g.drv.Emulated() == "" {
		t.Fatal("STEPBENCH_CUDA_LIBS points at the emulated device, but the driver opened is not emulated")
	}
	cubin, log, err := openTestNVRTC(t).Compile(emuCheckSrc, "emu_check.cu", []string{"--gpu-architecture=sm_90"})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	mod, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mod.Unload() })
	return &emuEnv{gpuEnv: g, mod: mod}
}

func (e *emuEnv) fn(t *testing.T, name string) *Function {
	t.Helper()
	f, err := e.mod.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// wantCUDAError checks err is the CUDA error code name and its text has every part.
func wantCUDAError(t *testing.T, what string, err error, name string, parts ...string) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != name {
		t.Errorf("%s: err = %v, want %s", what, err, name)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q lacks %q", what, err.Error(), p)
		}
	}
}

func TestEmulatorLaunchChecks(t *testing.T) {
	seeded.Expect(t, "launches past CUDA's limits")
	e := newEmuEnv(t)
	d := e.alloc(t, 4096)
	one := Dim3{1, 1, 1}
	wantCUDAError(t, "block above __launch_bounds__", e.stream.Launch(e.fn(t, "bounded"), one, Dim3{128, 1, 1}, 0, d),
		"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "__launch_bounds__(64)")
	wantCUDAError(t, "1025 threads", e.stream.Launch(e.fn(t, "poke"), one, Dim3{1025, 1, 1}, 0, d, int64(0)),
		"CUDA_ERROR_INVALID_VALUE", "1024 threads")
	wantCUDAError(t, "grid y 65536", e.stream.Launch(e.fn(t, "poke"), Dim3{1, 65536, 1}, one, 0, d, int64(0)),
		"CUDA_ERROR_INVALID_VALUE", "grid")
	rotate := e.fn(t, "rotate")
	const big = 64 << 10 // above the 48 KiB that needs no opt-in
	wantCUDAError(t, "64 KiB dynamic shared without opt-in", e.stream.Launch(rotate, one, Dim3{32, 1, 1}, big, d),
		"CUDA_ERROR_INVALID_VALUE", "MAX_DYNAMIC_SHARED_SIZE_BYTES")
	if err := rotate.SetMaxDynamicShared(big); err != nil {
		t.Fatal(err)
	}
	in := make([]float32, 32)
	for i := range in {
		in[i] = float32(i)
	}
	if err := e.stream.CopyHtoD(d, unsafe.Pointer(&in[0]), 128); err != nil {
		t.Fatal(err)
	}
	if err := e.stream.Launch(rotate, one, Dim3{32, 1, 1}, big, d); err != nil {
		t.Fatalf("after opting in: %v", err)
	}
	for i, v := range readFloats(t, e.gpuEnv, d, 32) {
		if v != float32((i+1)%32) {
			t.Fatalf("rotate: element %d = %v", i, v)
		}
	}
}

func TestEmulatorCaptureRefusals(t *testing.T) {
	seeded.Expect(t, "calls a stream capture refuses")
	e := newEmuEnv(t)
	d := e.alloc(t, 4096)
	poke := e.fn(t, "poke")
	for _, tt := range []struct {
		name string
		call func() error
		want string
	}{
		{"cuMemAlloc", func() error { _, err := e.ctx.Alloc(64); return err }, "cuMemAlloc_v2"},
		{"synchronise the capturing stream", func() error { return e.stream.Sync() }, "cuStreamSynchronize"},
		{"pageable copy", func() error {
			var x [16]byte
			return e.stream.CopyHtoD(d, unsafe.Pointer(&x[0]), 16)
		}, "pageable"},
		// poke never ran eagerly: with lazy loading, drivers before 12.3 cannot load it here.
		{"first launch inside a capture", func() error { return e.stream.Launch(poke, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, d, int64(0)) }, "lazy module loading"},
	} {
		if err := e.stream.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		wantCUDAError(t, tt.name, tt.call(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", tt.want)
		_, err := e.stream.EndCapture()
		wantCUDAError(t, tt.name+": end capture", err, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
	}
}

func TestEmulatorStickyFaultNamesTheAllocation(t *testing.T) {
	seeded.Expect(t, "one float past the end")
	e := newEmuEnv(t)
	d, err := e.ctx.Alloc(4096) // not freed: after the fault only the context's release frees it
	if err != nil {
		t.Fatal(err)
	}
	e.ctx.NameAllocation(d, "probe buffer")
	poke := e.fn(t, "poke")
	if err := e.stream.Launch(poke, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, d, int64(1024)); err != nil {
		t.Fatal(err)
	}
	err = e.stream.Sync()
	wantCUDAError(t, "one float past the end", err, "CUDA_ERROR_ILLEGAL_ADDRESS",
		"kernel poke", "illegal write at byte offset 4096", "'probe buffer'", "just past its end", "[argument d]",
		"block (0,0,0) thread (0,0,0)")
	if !IsSticky(err) {
		t.Errorf("IsSticky(%v) = false", err)
	}
	_, err = e.ctx.Alloc(64)
	wantCUDAError(t, "a call after the fault", err, "CUDA_ERROR_ILLEGAL_ADDRESS", "sticky")
}

func TestEmulatorUseAfterFree(t *testing.T) {
	seeded.Expect(t, "use after free")
	e := newEmuEnv(t)
	p, err := e.ctx.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	poke := e.fn(t, "poke")
	// One eager launch so that the module counts as loaded, then free and poke.
	if err := e.stream.Launch(poke, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, p, int64(0)); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	if err := e.ctx.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := e.stream.Launch(poke, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, p, int64(3)); err != nil {
		t.Fatal(err)
	}
	wantCUDAError(t, "use after free", e.stream.Sync(), "CUDA_ERROR_ILLEGAL_ADDRESS", "which was freed")
}

// TestEmulatorUnderrun writes one float before an allocation: caught by the
// canary in front of it (guard after, the default), or by the guard page
// (STEPBENCH_EMU_GUARD=before, in a child process: settings are per process).
func TestEmulatorUnderrun(t *testing.T) {
	if mode := os.Getenv("STEPBENCH_TEST_UNDERRUN"); mode != "" {
		e := newEmuEnv(t)
		d, err := e.ctx.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.stream.Launch(e.fn(t, "poke"), Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, d, int64(-1)); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("UNDERRUN %v\n", e.stream.Sync())
		return
	}
	emutest.Use(t)
	seeded.Expect(t, "one float before an allocation")
	for guard, want := range map[string]string{
		"after":  "a write 4 bytes before the start of allocation",
		"before": "illegal write at byte offset -4 of allocation",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorUnderrun$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_UNDERRUN=1", "STEPBENCH_EMU_GUARD="+guard)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("guard %s: %v\n%s", guard, err, out)
		}
		if !strings.Contains(string(out), "UNDERRUN") || !strings.Contains(string(out), want) {
			t.Errorf("guard %s: output lacks %q:\n%s", guard, want, out)
		}
	}
}

func TestEmulatorBadSettingIsNamed(t *testing.T) {
	if os.Getenv("STEPBENCH_TEST_BAD_SETTING") == "1" {
		_, err := OpenDriver()
		fmt.Printf("OPEN %v\n", err)
		return
	}
	emutest.Use(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorBadSettingIsNamed$", "-test.v")
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_BAD_SETTING=1", "STEPBENCH_EMU_SCHEDULE=sideways")
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{"cuInit(0): CUDA_ERROR_INVALID_VALUE", "STEPBENCH_EMU_SCHEDULE=sideways", "forward, reverse, random"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

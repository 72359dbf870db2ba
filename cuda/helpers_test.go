package cuda

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"stepbench/cuda/emutest"
)

// requireDevice opens the driver: a GPU's where there is one, else the
// emulated device's (cuda/emu); it skips only when neither is there.
func requireDevice(t *testing.T) *Driver {
	t.Helper()
	d, err := OpenDriver()
	// An emulated driver (one loaded earlier in this process answers to
	// libcuda.so.1 too) goes with the emulated NVRTC and cuBLAS.
	if err != nil || d.Emulated() != "" {
		emutest.Use(t)
		if d, err = OpenDriver(); err != nil {
			t.Fatalf("emulated CUDA driver: %v", err)
		}
	}
	n, err := d.DeviceCount()
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	if n == 0 {
		t.Skip("no CUDA device: cuDeviceGetCount returned 0")
	}
	return d
}

// gpuEnv is a context on device 0 with one stream, current on the test's
// locked OS thread; everything is released when the test ends.
type gpuEnv struct {
	drv    *Driver
	ctx    *Context
	stream *Stream
	props  DeviceProps
}

func newGPUEnv(t *testing.T) *gpuEnv {
	t.Helper()
	d := requireDevice(t)
	// Cleanups run on the test's goroutine, so the lock covers them too.
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	ctx, err := d.NewContext(0)
	if err != nil {
		t.Fatalf("NewContext(0): %v", err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("Context.Close: %v", err)
		}
	})
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Errorf("Stream.Destroy: %v", err)
		}
	})
	props, err := d.Props(0)
	if err != nil {
		t.Fatalf("Props(0): %v", err)
	}
	return &gpuEnv{drv: d, ctx: ctx, stream: s, props: props}
}

func (g *gpuEnv) alloc(t *testing.T, bytes int) DevPtr {
	t.Helper()
	p, err := g.ctx.Alloc(bytes)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", bytes, err)
	}
	t.Cleanup(func() {
		if err := g.ctx.Free(p); err != nil {
			t.Errorf("Free: %v", err)
		}
	})
	return p
}

func (g *gpuEnv) allocHost(t *testing.T, bytes int) HostBuf {
	t.Helper()
	h, err := g.ctx.AllocHost(bytes)
	if err != nil {
		t.Fatalf("AllocHost(%d): %v", bytes, err)
	}
	t.Cleanup(func() {
		if err := g.ctx.FreeHost(h); err != nil {
			t.Errorf("FreeHost: %v", err)
		}
	})
	return h
}

func (g *gpuEnv) sync(t *testing.T) {
	t.Helper()
	if err := g.stream.Sync(); err != nil {
		t.Fatalf("Stream.Sync: %v", err)
	}
}

// arch is the device's real architecture option, e.g. "sm_90".
func (g *gpuEnv) arch() string { return fmt.Sprintf("sm_%d%d", g.props.Major, g.props.Minor) }

// openTestNVRTC opens NVRTC or skips; under CI=true a missing NVRTC fails,
// because CI must compile every kernel.
func openTestNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := OpenNVRTC("")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true requires NVRTC (run .ci/install-cuda-userspace.sh): %v", err)
		}
		t.Skipf("NVRTC not found: %v", err)
	}
	return n
}

// addOneSrc is a header-free kernel: data[i] += 1 for i < n.
const addOneSrc = `extern "C" __global__ void add_one(float* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1.0f;
}
`

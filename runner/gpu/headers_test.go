package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/kernels"
)

// A kernel that includes cuda_bf16.h compiles with a real NVRTC once the
// CUDA toolkit's include directory is offered, as KernelBuild does. Here
// that is Debian's CUDA 11.8 headers (nvidia-cuda-dev; .ci/install-cuda-
// userspace.sh with STEPBENCH_CUDA_HEADERS=1), or any toolkit found.
func TestCompileWithCUDAHeaders(t *testing.T) {
	n := openNVRTCForTest(t)
	if n.Emulated() != "" {
		t.Skip("the emulated NVRTC compiles with g++, which cannot compile NVIDIA's headers")
	}
	major, minor := n.Version()
	h, ok := cuda.FindCUDAHeaders(major)
	if !ok {
		t.Skipf("no CUDA headers (cuda_bf16.h) for NVRTC %d.%d: install Debian's nvidia-cuda-dev (STEPBENCH_CUDA_HEADERS=1 bash .ci/install-cuda-userspace.sh) or set CUDA_HOME", major, minor)
	}
	t.Logf("CUDA headers %s, NVRTC %d.%d", h, major, minor)
	b, headers := KernelBuild(n, "", nil, 90, t.TempDir())
	if headers == "" || b.Include[len(b.Include)-1] != h.Dir {
		t.Fatalf("KernelBuild offers %v (%q), want %s last", b.Include, headers, h.Dir)
	}
	srcs := mustSources(t)
	srcs = map[string]string{kernels.CommonSource: srcs[kernels.CommonSource], "mine.cu": `#include <cuda_bf16.h>
extern "C" __global__ void scale_bf16(__nv_bfloat16* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
}
`}
	compiled, err := b.Compile(n, srcs)
	if err != nil {
		t.Fatalf("compile with %s: %v", h.Dir, err)
	}
	if len(compiled) != 1 || len(compiled[0].Cubin) == 0 || !strings.Contains(compiled[0].Log, "scale_bf16") {
		t.Errorf("compiled %+v", compiled)
	}
}

// A header of the user's own, from an include directory, compiles with a
// real NVRTC (no CUDA toolkit needed).
func TestCompileWithAUsersHeader(t *testing.T) {
	n := openNVRTCForTest(t)
	inc := t.TempDir()
	if err := os.WriteFile(filepath.Join(inc, "twice.cuh"), []byte("__device__ inline float twice(float x) { return 2.0f * x; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srcs := mustSources(t)
	srcs = map[string]string{kernels.CommonSource: srcs[kernels.CommonSource], "mine.cu": "#include \"twice.cuh\"\n" +
		"extern \"C\" __global__ void twice_all(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = twice(x[i]); }\n"}
	b := kernels.Build{Arch: 90, CacheDir: t.TempDir(), Include: []string{inc}}
	if _, err := b.Compile(n, srcs); err != nil {
		t.Fatal(err)
	}
	b.Include = nil
	var ce *kernels.CompileError
	if _, err := b.Compile(n, srcs); err == nil || !asCompileError(err, &ce) || ce.File != "mine.cu" || ce.Line != 1 {
		t.Errorf("without --include: %v, want a compile error at mine.cu:1", err)
	}
}

func asCompileError(err error, ce **kernels.CompileError) bool { return errors.As(err, ce) }

package gpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// The nvcc recipe's device code (examples/ops/nvcc, cuda_bf16.h) compiles
// with a real NVRTC and the CUDA headers: what can be checked of it without
// nvcc (the device bundle builds and verifies the library on a GPU).
func TestNvccRecipeKernelCompiles(t *testing.T) {
	n := openNVRTCForTest(t)
	if n.Emulated() != "" {
		t.Skip("the emulated NVRTC compiles with g++, which cannot compile NVIDIA's headers")
	}
	major, minor := n.Version()
	if _, ok := cuda.FindCUDAHeaders(major); !ok {
		t.Skipf("no CUDA headers (cuda_bf16.h) for NVRTC %d.%d: STEPBENCH_CUDA_HEADERS=1 bash .ci/install-cuda-userspace.sh", major, minor)
	}
	recipe, err := filepath.Abs("../../examples/ops/nvcc")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := KernelBuild(n, "", []string{recipe}, 90, t.TempDir())
	srcs := map[string]string{kernels.CommonSource: mustSources(t)[kernels.CommonSource], "recipe.cu": "#include \"attn_decode_kernel.cuh\"\n"}
	compiled, err := b.Compile(n, srcs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(compiled[0].Log, "nvcc_attn_decode") || compiled[0].Report[0].SpillStoreBytes != 0 {
		t.Errorf("the recipe's kernel: %+v", compiled[0].Report)
	}
}

// The C example libraries' kernel sources (C strings they hand NVRTC at run
// time) compile with a real NVRTC for sm_80 and sm_90: the emulated NVRTC's
// g++ accepts what NVRTC may not (INFINITY from math.h, for one). A harness
// built with gcc includes each library's source and prints the string.
func TestExampleKernelSourcesCompileWithNVRTC(t *testing.T) {
	n := openNVRTCForTest(t)
	if n.Emulated() != "" {
		t.Skip("needs a real NVRTC")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []struct{ file, source string }{{"examples/ops/attn_decode/attn_decode.c", "kKernel"}, {"examples/ops/reference/reference_ops.c", "kKernels"},
		{"examples/ops/paged/attn_decode_paged.c", "kKernels"}} {
		harness := filepath.Join(t.TempDir(), "harness.c")
		text := fmt.Sprintf("#include \"%s\"\nint main(void) { fputs(%s, stdout); return 0; }\n", filepath.Join(root, ex.file), ex.source)
		if err := os.WriteFile(harness, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(filepath.Dir(harness), "harness")
		if out, err := exec.Command(gcc, "-std=c11", "-I"+filepath.Join(root, "include"), "-o", bin, harness, "-ldl").CombinedOutput(); err != nil {
			t.Fatalf("%s: gcc: %v\n%s", ex.file, err, out)
		}
		src, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range []int{80, 90} {
			opts := []string{fmt.Sprintf("--gpu-architecture=sm_%d", arch), "-std=c++17", "-default-device"}
			if _, log, err := n.Compile(string(src), filepath.Base(ex.file)+".cu", opts); err != nil {
				t.Errorf("%s for sm_%d: %v\n%s", ex.file, arch, err, log)
			}
		}
	}
	// The FlashInfer recipe's CSR derivation, a header-free kernel (cuda's
	// TestFlashInferCSRFromTable runs it on the device).
	src, err := os.ReadFile(filepath.Join(root, "examples/ops/flashinfer/csr_from_table.cuh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []int{80, 90} {
		if _, log, err := n.Compile(string(src), "csr_from_table.cu", []string{fmt.Sprintf("--gpu-architecture=sm_%d", arch)}); err != nil {
			t.Errorf("csr_from_table.cuh for sm_%d: %v\n%s", arch, err, log)
		}
	}
}

// The Triton recipe's shim compiles against a CUDA toolkit's cuda.h (on a
// GPU machine, Triton's own): what can be checked of it without Triton.
func TestTritonShimCompiles(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	h, ok := cuda.FindCUDAHeaders(0)
	if !ok {
		t.Skip("no CUDA headers (cuda.h): STEPBENCH_CUDA_HEADERS=1 bash .ci/install-cuda-userspace.sh")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"+h.Dir, "-I"+filepath.Join(root, "include"),
		"-DTRITON_D64=attn_decode_d64_0123abcd_0d1d2d3d", "-DTRITON_D128=attn_decode_d128_0123abcd_0d1d2d3d",
		filepath.Join(root, "examples/ops/triton/shim.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gcc shim.c against %s: %v\n%s", h, err, out)
	}
}

// CompileProgress says once, on the first source compiled, that kernels
// compile, and shows each source as the status where there is one.
func TestCompileProgress(t *testing.T) {
	var out statusRecorder
	on := CompileProgress(&out, "sm_90", 11, 8)
	on("attention.cu", 2, 10)
	on("norm.cu", 7, 10)
	if got := out.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "compiling kernels for sm_90 with NVRTC 11.8 (not in the cubin cache") {
		t.Errorf("kept lines %q", got)
	}
	if len(out.statuses) != 2 || out.statuses[1] != "stepbench: compiling norm.cu for sm_90 (7/10 sources)" {
		t.Errorf("statuses %q", out.statuses)
	}
}

// statusRecorder is a progress line: kept lines and statuses.
type statusRecorder struct {
	strings.Builder
	statuses []string
}

func (s *statusRecorder) Status(msg string) { s.statuses = append(s.statuses, msg) }

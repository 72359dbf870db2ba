package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"stepbench/cuda"
	"stepbench/kernels"
	"strings"
	"testing"
)

// buildFakeCUDALibs compiles the cuda package's fake libraries into one
// folder for STEPBENCH_CUDA_LIBS, as stand-ins that say they are emulated.
func buildFakeCUDALibs(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the fake CUDA libraries: %v", err)
	}
	dir := t.TempDir()
	for _, lib := range []struct {
		name, src string
		defines   []string
	}{
		{"libcuda.so.1", "fakecuda.c", []string{"FAKE_EMU", "FAKE_DRIVER_VERSION=13000"}},
		{"libnvrtc.so.13", "fakenvrtc.c", []string{"FAKE_EMU", "FAKE_NVRTC_MAJOR=0", "FAKE_NVRTC_MINOR=1"}},
		{"libcublas.so.13", "fakecublas.c", []string{"FAKE_EMU", "FAKE_CUBLAS_MAJOR=0"}},
	} {
		args := []string{"-shared", "-fPIC", "-o", filepath.Join(dir, lib.name)}
		for _, d := range lib.defines {
			args = append(args, "-D"+d)
		}
		args = append(args, filepath.Join("..", "..", "cuda", "testdata", lib.src))
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", lib.name, err, out)
		}
	}
	return dir
}

func TestDevicesNamesEmulatedLibraries(t *testing.T) {
	dir := buildFakeCUDALibs(t)
	t.Setenv("STEPBENCH_CUDA_LIBS", dir)
	t.Setenv("STEPBENCH_NVRTC", "")
	t.Setenv("STEPBENCH_CUBLAS", "")
	code, stdout, stderr := run(t, "devices")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"CUDA driver API 13.0, 1 device(s), from " + filepath.Join(dir, "libcuda.so.1") + "\n",
		"  EMULATED driver: fake emulated CUDA driver (test)\n",
		"their times are not GPU times",
		"NVRTC   0.1 at " + filepath.Join(dir, "libnvrtc.so.13"),
		"        EMULATED: fake emulated NVRTC (test)\n",
		"cuBLAS  0.9.3 at " + filepath.Join(dir, "libcublas.so.13") + "\n",
		"        EMULATED: fake emulated cuBLAS (test)\n",
		"        chosen from $STEPBENCH_CUDA_LIBS: the only NVRTC that opened; driver CUDA 13.0 supports CUDA 13 and older\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("devices output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestDevicesWithMissingCUDALibsDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	t.Setenv("STEPBENCH_CUDA_LIBS", missing)
	code, _, stderr := run(t, "devices")
	if code == 0 || !strings.Contains(stderr, "STEPBENCH_CUDA_LIBS="+missing+": "+missing+" is not a directory") {
		t.Errorf("exit %d, stderr %q; want an error naming the variable and the folder", code, stderr)
	}
}

// build prints ptxas's report, the launch and the occupancy per entry point
// with the real NVRTC, when one is installed (CI installs Debian's 11.8):
// for the embedded kernels, for an overlay of one file, as JSON; a source
// that does not compile is exit 1 naming it.
// nvrtcCacheHome is the user cache directory of the tests that compile
// every kernel with the real NVRTC: make test's, shared with runner/gpu's
// compile test ($STEPBENCH_TEST_NVRTC_CACHE: the embedded kernels are
// compiled once per run for sm_90), else this package's. Never the user's.
func nvrtcCacheHome() string {
	if dir := os.Getenv("STEPBENCH_TEST_NVRTC_CACHE"); dir != "" {
		return dir
	}
	return emuCacheHome
}

func TestBuildPrintsTheResourceTable(t *testing.T) {
	t.Setenv("STEPBENCH_CUDA_LIBS", "")
	t.Setenv("XDG_CACHE_HOME", nvrtcCacheHome())
	code, stdout, stderr := run(t, "build", "--arch", "sm_90") // as nvcc spells it
	if code != 0 && strings.Contains(stderr, "no NVRTC") {
		t.Skipf("no NVRTC installed: %s", stderr)
	}
	// attn_prefill_tc_d128: no spills, no stack, no static shared memory,
	// 81920 bytes of dynamic shared memory (q and double-buffered k, v tiles), 128 threads.
	row := regexp.MustCompile(`(?m)^attn_prefill_tc_d128 +sm_90 +[1-9][0-9]* +0 +0 +0 +81920 +128 +[1-9][0-9]* +[0-9]+% +.+$`)
	if code != 0 || !row.MatchString(stdout) || !strings.Contains(stdout, "kernels embedded") {
		t.Errorf("build: exit %d\n%s\n%s", code, stdout, stderr)
	}
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	edited := strings.Replace(srcs["norm.cu"], "__shared__ float scratch[32];", "__shared__ float scratch[64];", 1)
	if err := os.WriteFile(filepath.Join(dir, "norm.cu"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run(t, "build", "--arch", "90", "--kernels-dir", dir, "--format", "json")
	var doc struct {
		Kernels string
		Rows    []struct {
			Kernel, Arch      string
			StaticSharedBytes int  `json:"static_shared_bytes"`
			BlocksPerSM       *int `json:"blocks_per_sm"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Kernels != "from "+dir {
		t.Fatalf("build --kernels-dir --format json: exit %d\n%s\n%s", code, stdout, stderr)
	}
	found := false
	for _, r := range doc.Rows {
		if r.Kernel == "add_rmsnorm" {
			found = r.Arch == "sm_90" && r.StaticSharedBytes == 256 && r.BlocksPerSM != nil && *r.BlocksPerSM > 0
		}
	}
	if !found || len(doc.Rows) < len(kernels.EntryPointSources()) {
		t.Errorf("the overlay's add_rmsnorm lacks its 256 bytes of static shared memory, or rows are missing: %+v", doc.Rows)
	}
	if err := os.WriteFile(filepath.Join(dir, "norm.cu"), []byte("this is not C++;\n"+edited), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, "build", "--arch", "90", "--kernels-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, "compile error: norm.cu:1:") {
		t.Errorf("build of a source that does not compile: exit %d\n%s", code, stderr)
	}
}

// --arch takes nvcc's spellings, the bare number and the compute
// capability (one target each, however many ways it is named), and the
// architecture-specific sm_90a only where the NVRTC has it; anything else
// is refused in one line, exit 2, before a compile.
func TestBuildArchSpellings(t *testing.T) {
	t.Setenv("STEPBENCH_CUDA_LIBS", "")
	t.Setenv("XDG_CACHE_HOME", nvrtcCacheHome())
	code, stdout, stderr := run(t, "build", "--arch", "compute_90,9.0,90", "--format", "json")
	if code != 0 && strings.Contains(stderr, "no NVRTC") {
		t.Skipf("no NVRTC installed: %s", stderr)
	}
	var doc struct {
		Rows []struct{ Kernel, Arch string }
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || len(doc.Rows) == 0 {
		t.Fatalf("build --arch compute_90,9.0,90: exit %d\n%s", code, stderr)
	}
	seen := map[string]int{}
	for _, r := range doc.Rows {
		seen[r.Kernel+" "+r.Arch]++
		if r.Arch != "sm_90" || seen[r.Kernel+" "+r.Arch] > 1 {
			t.Errorf("row %+v: want one sm_90 row per kernel", r)
		}
	}
	nv, err := cuda.OpenNVRTC("")
	if err != nil {
		t.Fatal(err)
	}
	major, _ := nv.Version()
	code, _, stderr = run(t, "build", "--arch", "sm_90a", "--format", "json")
	if specific := major >= 12; specific != (code == 0) || !specific && (code != exitUsage || !strings.Contains(stderr, "sm_90a needs NVRTC 12.0 or newer")) {
		t.Errorf("--arch sm_90a on NVRTC %d: exit %d\n%s", major, code, stderr)
	}
	for arg, want := range map[string]string{
		"hopper": `"hopper" is not an architecture: write sm_90, compute_90, 90 or 9.0`,
		"8.0a":   "sm_80a does not exist",
		"7.5":    "sm_75 is older than sm_80",
	} {
		if code, _, stderr := run(t, "build", "--arch", arg); code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
			t.Errorf("--arch %s: exit %d, want 2 and one line saying %q:\n%s", arg, code, want, stderr)
		}
	}
}

// build --cubin-dir writes every source's cubin, what cuobjdump -sass reads
// (an ELF file, as NVRTC makes it).
func TestBuildWritesCubins(t *testing.T) {
	t.Setenv("STEPBENCH_CUDA_LIBS", "")
	t.Setenv("XDG_CACHE_HOME", nvrtcCacheHome())
	dir := t.TempDir()
	code, _, stderr := run(t, "build", "--arch", "90", "--cubin-dir", dir)
	if code != 0 && strings.Contains(stderr, "no NVRTC") {
		t.Skipf("no NVRTC installed: %s", stderr)
	}
	if code != 0 {
		t.Fatalf("build: exit %d\n%s", code, stderr)
	}
	for _, name := range []string{"gemv", "attention", "norm"} {
		data, err := os.ReadFile(filepath.Join(dir, "sm_90", name+".cubin"))
		if err != nil || !bytes.HasPrefix(data, []byte("\x7fELF")) {
			t.Errorf("%s.cubin: %v, %d bytes, want an ELF cubin", name, err, len(data))
		}
	}
}

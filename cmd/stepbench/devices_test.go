package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// build prints ptxas's report per entry point with the real NVRTC, when one
// is installed (CI installs Debian's 11.8).
func TestBuildPrintsThePtxasReport(t *testing.T) {
	t.Setenv("STEPBENCH_CUDA_LIBS", "")
	code, stdout, stderr := run(t, "build", "--arch", "90")
	if code != 0 && strings.Contains(stderr, "no NVRTC") {
		t.Skipf("no NVRTC installed: %s", stderr)
	}
	row := regexp.MustCompile(`(?m)^attn_prefill_tc_d128 +sm_90 +[1-9][0-9]* +0 +0$`)
	if code != 0 || !row.MatchString(stdout) || !strings.Contains(stdout, "registers") {
		t.Errorf("build: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// build --cubin-dir writes every source's cubin, what cuobjdump -sass reads
// (an ELF file, as NVRTC makes it).
func TestBuildWritesCubins(t *testing.T) {
	t.Setenv("STEPBENCH_CUDA_LIBS", "")
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

// Package emutest points tests at the emulated CUDA device (cuda/emu, built
// by 'make emu' into build/emu). A test that calls Use runs the real GPU path
// of stepbench — NVRTC compile, kernel launches, graphs, cuBLAS, NVML — on
// the CPU. Use selects the device the way a user does, through
// STEPBENCH_CUDA_LIBS, for the rest of the test.
package emutest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// DriverFile is the emulated driver's file name in the library directory.
const DriverFile = "libcuda.so.1"

// Dir returns the directory of the emulated libraries: $STEPBENCH_CUDA_LIBS
// when it holds them, else build/emu under the module root. ok is false
// when neither exists.
func Dir() (dir string, ok bool) {
	if d := os.Getenv("STEPBENCH_CUDA_LIBS"); d != "" {
		if abs, err := filepath.Abs(d); err == nil && exists(filepath.Join(abs, DriverFile)) && exists(filepath.Join(abs, "libnvidia-ml.so.1")) {
			return abs, true
		}
	}
	root, err := moduleRoot()
	if err != nil {
		return "", false
	}
	d := filepath.Join(root, "build", "emu")
	return d, exists(filepath.Join(d, DriverFile))
}

// Use makes the test run on the emulated device: it sets STEPBENCH_CUDA_LIBS
// for the test's duration, or skips the test (fails it when CI=true) when
// the device has not been built. STEPBENCH_TEST_EMULATED=0 skips it too
// (make test-quick: the emulated tests but one are left to make test).
func Use(t testing.TB) string {
	t.Helper()
	if os.Getenv("STEPBENCH_TEST_EMULATED") == "0" {
		t.Skip("STEPBENCH_TEST_EMULATED=0: the emulated device's tests are make test's")
	}
	dir, ok := Dir()
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the emulated CUDA device is not built (make emu)")
		}
		t.Skip("the emulated CUDA device is not built: run 'make emu' (make test does)")
	}
	t.Setenv("STEPBENCH_CUDA_LIBS", dir)
	return dir
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// moduleRoot is the nearest directory above the working directory with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if exists(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

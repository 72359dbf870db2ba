package gpu

import (
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/kernels"
)

// A cache entry whose checksum holds but whose cubin does not serve its
// source (another source's cubin: its kernels are missing) is discarded,
// the source compiled again once, the backend starts, and stderr says so.
// Before, the missing kernel's CUDA error came back on every run and never
// named the cache.
func TestCachedCubinThatDoesNotLoadIsRebuilt(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	props, err := drv.Props(0)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	cache := testCache()
	compiled, err := kernels.Compile(openNVRTCForTest(t), srcs, props.Major*10+props.Minor, cache)
	if err != nil {
		t.Fatal(err)
	}
	var victim, other kernels.Compiled
	for _, c := range compiled {
		switch c.Name {
		case "activation.cu":
			victim = c
		case "copy.cu":
			other = c
		}
	}
	swapped := victim
	swapped.Cubin = other.Cubin
	if err := kernels.StoreCache(cache, swapped); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	be, err := New(Options{CacheDir: cache, Progress: &progress})
	if err != nil {
		t.Fatalf("New with a bad cached cubin: %v\n%s", err, progress.String())
	}
	if err := be.Close(); err != nil {
		t.Error(err)
	}
	if !strings.Contains(progress.String(), "kernel cache: the cached cubin") ||
		!strings.Contains(progress.String(), "of activation.cu did not load (load kernel") ||
		!strings.Contains(progress.String(), "discarded and compiled again") {
		t.Errorf("progress does not say the entry was rebuilt:\n%s", progress.String())
	}
	// The entry is repaired: the next start is silent about the cache.
	progress.Reset()
	be, err = New(Options{CacheDir: cache, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	be.Close()
	if strings.Contains(progress.String(), "kernel cache") {
		t.Errorf("the repaired entry is rebuilt again:\n%s", progress.String())
	}
}

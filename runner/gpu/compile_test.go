package gpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/kernels"
)

// openNVRTCForTest skips without NVRTC, except in CI, where it must be installed.
func openNVRTCForTest(t *testing.T) *cuda.NVRTC {
	t.Helper()
	n, err := cuda.OpenNVRTC("")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but NVRTC is missing: %v", err)
		}
		t.Skipf("no NVRTC (run .ci/install-cuda-userspace.sh): %v", err)
	}
	return n
}

// nvrtcTestCache is the cubin cache of a test that compiles every kernel
// with the real NVRTC: make test's ($STEPBENCH_TEST_NVRTC_CACHE, which
// cmd/stepbench's build tests share: the embedded kernels are compiled once
// per run), else the test's own.
func nvrtcTestCache(t *testing.T) string {
	if dir := os.Getenv("STEPBENCH_TEST_NVRTC_CACHE"); dir != "" {
		return filepath.Join(dir, "stepbench", "cubin")
	}
	return t.TempDir()
}

func TestCompileEverySourceWithoutSpills(t *testing.T) {
	n := openNVRTCForTest(t)
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	major, minor := n.Version()
	t.Logf("NVRTC %d.%d at %s", major, minor, n.Path())
	for _, arch := range []int{80, 90} {
		t.Run(fmt.Sprintf("sm_%d", arch), func(t *testing.T) {
			// As a run builds them (the CUDA headers' -I included): the
			// sm_90 cubins are those cmd/stepbench's build tests compile,
			// one cache entry for both in make test.
			b, _ := KernelBuild(n, "", nil, arch, nvrtcTestCache(t))
			compiled, err := b.Compile(n, srcs)
			if err != nil {
				t.Fatal(err)
			}
			if len(compiled) != len(srcs)-1 {
				t.Errorf("got %d cubins for %d sources (common.cu excluded)", len(compiled), len(srcs)-1)
			}
			var table strings.Builder
			fmt.Fprintf(&table, "%-14s %-28s %5s %7s %7s %7s\n", "source", "function", "regs", "spillST", "spillLD", "smem")
			found := map[string]bool{}
			for _, c := range compiled {
				if len(c.Cubin) == 0 {
					t.Errorf("%s: empty cubin", c.Name)
				}
				if len(c.Report) == 0 {
					t.Errorf("%s: no ptxas resource report in the log:\n%s", c.Name, c.Log)
				}
				for _, r := range c.Report {
					found[r.Kernel] = true
					fmt.Fprintf(&table, "%-14s %-28s %5d %7d %7d %7d\n", c.Name, r.Kernel, r.Registers, r.SpillStoreBytes, r.SpillLoadBytes, r.SharedBytes)
					if r.SpillStoreBytes > 0 || r.SpillLoadBytes > 0 {
						t.Errorf("%s: %s spills (%d bytes stored, %d loaded)", c.Name, r.Kernel, r.SpillStoreBytes, r.SpillLoadBytes)
					}
				}
			}
			t.Logf("resources for sm_%d:\n%s", arch, table.String())
			for kernel := range kernels.EntryPointSources() {
				if !found[kernel] {
					t.Errorf("kernel %s is not in any resource report", kernel)
				}
			}

			// A second compile is served from the cache with the same bits.
			again, err := b.Compile(n, srcs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range again {
				if !bytes.Equal(again[i].Cubin, compiled[i].Cubin) || !slices.Equal(again[i].Report, compiled[i].Report) {
					t.Errorf("%s: cached compile differs from the first", again[i].Name)
				}
			}
		})
	}
}

func TestCompileErrorNamesFileAndLine(t *testing.T) {
	n := openNVRTCForTest(t)
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	broken := map[string]string{
		kernels.CommonSource: srcs[kernels.CommonSource],
		"broken.cu":          "extern \"C\" __global__ void f(float* x) {\n    x[0] = undeclared_name;\n}\n",
	}
	_, err = kernels.Compile(n, broken, 80, t.TempDir())
	if err == nil {
		t.Fatal("compile of a broken source succeeded")
	}
	if !strings.Contains(err.Error(), "broken.cu(2)") || !strings.Contains(err.Error(), "undeclared_name") {
		t.Errorf("error does not point at broken.cu line 2: %v", err)
	}
}

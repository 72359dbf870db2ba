package kernels

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda"
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

func TestCompileEverySourceWithoutSpills(t *testing.T) {
	n := openNVRTCForTest(t)
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	major, minor := n.Version()
	t.Logf("NVRTC %d.%d at %s", major, minor, n.Path())
	for _, arch := range []int{80, 90} {
		t.Run(fmt.Sprintf("sm_%d", arch), func(t *testing.T) {
			cacheDir := t.TempDir()
			compiled, err := Compile(n, srcs, arch, cacheDir)
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
			for kernel := range kernelSources {
				if !found[kernel] {
					t.Errorf("kernel %s is not in any resource report", kernel)
				}
			}

			// A second compile is served from the cache with the same bits.
			again, err := Compile(n, srcs, arch, cacheDir)
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
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	broken := map[string]string{
		CommonSource: srcs[CommonSource],
		"broken.cu":  "extern \"C\" __global__ void f(float* x) {\n    x[0] = undeclared_name;\n}\n",
	}
	_, err = Compile(n, broken, 80, t.TempDir())
	if err == nil {
		t.Fatal("compile of a broken source succeeded")
	}
	if !strings.Contains(err.Error(), "broken.cu(2)") || !strings.Contains(err.Error(), "undeclared_name") {
		t.Errorf("error does not point at broken.cu line 2: %v", err)
	}
}

func TestSourcesEmbeddedHaveEveryKernelFile(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	for kernel, file := range kernelSources {
		src, ok := srcs[file]
		if !ok {
			t.Errorf("kernel %s: source %s not embedded", kernel, file)
			continue
		}
		// attention entry points come from a macro: attn_prefill_d##D.
		stem := strings.TrimSuffix(strings.TrimRight(kernel, "0123456789"), "_d")
		if !strings.Contains(src, stem) {
			t.Errorf("kernel %s not mentioned in %s", kernel, file)
		}
	}
	for name, src := range srcs {
		if strings.Contains(src, "#include") {
			t.Errorf("%s includes a header; sources must be header-free for NVRTC 11.8", name)
		}
	}
}

func TestSourcesFromDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Sources(dir); err == nil {
		t.Error("empty directory: want an error")
	}
	write("norm.cu", "// norm")
	if _, err := Sources(dir); err == nil || !strings.Contains(err.Error(), CommonSource) {
		t.Errorf("directory without common.cu: got %v, want an error naming it", err)
	}
	write(CommonSource, "// common")
	write("notes.txt", "ignored")
	srcs, err := Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"norm.cu": "// norm", CommonSource: "// common"}
	if len(srcs) != len(want) || srcs["norm.cu"] != want["norm.cu"] || srcs[CommonSource] != want[CommonSource] {
		t.Errorf("Sources(%s) = %v, want %v", dir, srcs, want)
	}
	if _, err := Sources(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing directory: want an error")
	}
}

func TestCacheKeyChangesWithEveryInput(t *testing.T) {
	nvrtc118 := compilerID{major: 11, minor: 8}
	base := cacheKey("src", compileOptions(90), nvrtc118, 90)
	variants := map[string]string{
		"source":  cacheKey("src2", compileOptions(90), nvrtc118, 90),
		"options": cacheKey("src", append(compileOptions(90), "-G"), nvrtc118, 90),
		"version": cacheKey("src", compileOptions(90), compilerID{major: 12, minor: 8}, 90),
		"minor":   cacheKey("src", compileOptions(90), compilerID{major: 11, minor: 9}, 90),
		"arch":    cacheKey("src", compileOptions(90), nvrtc118, 80),
		// An emulated NVRTC reporting a real version still gets its own entries.
		"emulated": cacheKey("src", compileOptions(90), compilerID{major: 11, minor: 8, emulated: "stepbench emulated CUDA device 1.0"}, 90),
	}
	for what, key := range variants {
		if key == base {
			t.Errorf("changing the %s keeps the cache key", what)
		}
	}
	emu10 := cacheKey("src", compileOptions(90), compilerID{emulated: "stepbench emulated CUDA device 1.0 (g++ 12.2.0)"}, 90)
	emu11 := cacheKey("src", compileOptions(90), compilerID{emulated: "stepbench emulated CUDA device 1.1 (g++ 12.2.0)"}, 90)
	if emu10 == emu11 {
		t.Error("two emulator versions share a cache key")
	}
	if again := cacheKey("src", compileOptions(90), nvrtc118, 90); again != base {
		t.Errorf("cache key not deterministic: %s vs %s", again, base)
	}
}

func TestTranslationUnitKeepsLineNumbers(t *testing.T) {
	unit := translationUnit("a\nb\n", "x.cu", "first\nsecond")
	want := "#line 1 \"common.cu\"\na\nb\n\n#line 1 \"x.cu\"\nfirst\nsecond"
	if unit != want {
		t.Errorf("translationUnit = %q, want %q", unit, want)
	}
}

func TestParsePtxasReport(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want []KernelResources
	}{
		{
			name: "empty",
			log:  "",
			want: nil,
		},
		{
			name: "entry with smem and cmem (NVRTC 11.8, sm_90)",
			log: "ptxas info    : 0 bytes gmem\n" +
				"ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'\n" +
				"ptxas info    : Function properties for add_rmsnorm\n" +
				"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
				"ptxas info    : Used 30 registers, 128 bytes smem, 380 bytes cmem[0]\n",
			want: []KernelResources{{Kernel: "add_rmsnorm", Registers: 30, SharedBytes: 128}},
		},
		{
			name: "spills and a non-inlined device function",
			log: "ptxas info    : Compiling entry function 'attn_decode_split_d128' for 'sm_90'\n" +
				"ptxas info    : Function properties for attn_decode_split_d128\n" +
				"ptxas         .     8 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n" +
				"ptxas info    : Used 255 registers\n" +
				"ptxas info    : Function properties for _Z17attn_decode_splitILi128EEvPf\n" +
				"ptxas         .     0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n" +
				"ptxas info    : Compiling entry function 'embed' for 'sm_90'\n" +
				"ptxas info    : Function properties for embed\n" +
				"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
				"ptxas info    : Used 16 registers, 380 bytes cmem[0]\n",
			want: []KernelResources{
				{Kernel: "attn_decode_split_d128", Registers: 255, SpillStoreBytes: 16, SpillLoadBytes: 12},
				{Kernel: "_Z17attn_decode_splitILi128EEvPf", SpillStoreBytes: 4, SpillLoadBytes: 4},
				{Kernel: "embed", Registers: 16},
			},
		},
		{
			name: "CUDA 12+ wording: barriers before smem, compile time",
			log: "ptxas info    : 0 bytes gmem\n" +
				"ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'\n" +
				"ptxas info    : Function properties for add_rmsnorm\n" +
				"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
				"ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]\n" +
				"ptxas info    : Compile time = 23.759 ms\n" +
				"ptxas info    : Compiling entry function 'embed' for 'sm_90'\n" +
				"ptxas info    : Function properties for embed\n" +
				"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
				"ptxas info    : Used 16 registers, used 0 barriers, 380 bytes cmem[0]\n",
			want: []KernelResources{
				{Kernel: "add_rmsnorm", Registers: 30, SharedBytes: 128, Barriers: 1},
				{Kernel: "embed", Registers: 16},
			},
		},
		{
			name: "CUDA 12.8+ on sm_90: no cmem, cumulative stack size",
			log: "ptxas info    : Compiling entry function 'attn_prefill_d128' for 'sm_90'\n" +
				"ptxas info    : Function properties for attn_prefill_d128\n" +
				"ptxas         .     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
				"ptxas info    : Used 96 registers, used 2 barriers, 64 bytes cumulative stack size, 4096 bytes smem\n",
			want: []KernelResources{{Kernel: "attn_prefill_d128", Registers: 96, SharedBytes: 4096, Barriers: 2}},
		},
		{
			name: "nvcc style: stack-frame line without the ptxas prefix",
			log: "ptxas info    : Compiling entry function 'k' for 'sm_61'\n" +
				"ptxas info    : Function properties for k\n" +
				"    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n" +
				"ptxas info    : Used 40 registers, 32768 bytes smem, 400 bytes cmem[0], 12 bytes cmem[2]\n",
			want: []KernelResources{{Kernel: "k", Registers: 40, SharedBytes: 32768, SpillStoreBytes: 8, SpillLoadBytes: 4}},
		},
		{
			name: "non-ptxas lines are ignored",
			log:  "norm.cu(3): warning: variable \"x\" was declared but never referenced\nUsed 99 registers\n",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePtxasReport(tt.log)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParsePtxasReport = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParsePtxasReportRejectsOrphanLines(t *testing.T) {
	for _, log := range []string{
		"ptxas info    : Used 30 registers\n",
		"ptxas         .     0 bytes stack frame, 4 bytes spill stores, 0 bytes spill loads\n",
	} {
		if _, err := ParsePtxasReport(log); err == nil {
			t.Errorf("ParsePtxasReport(%q): want an error", log)
		}
	}
}

func FuzzParsePtxasReport(f *testing.F) {
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n" +
		"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 22 registers, 256 bytes smem\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n" +
		"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
		"ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]\nptxas info    : Compile time = 1.5 ms\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\n" +
		"ptxas info    : Used 96 registers, used 1 barriers, 64 bytes cumulative stack size, 4096 bytes smem\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_61'\n    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n")
	f.Add("ptxas info    : Used 99999999999999999999999 registers\n")
	f.Fuzz(func(t *testing.T, log string) {
		report, err := ParsePtxasReport(log)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range report {
			if seen[r.Kernel] {
				t.Errorf("function %q reported twice", r.Kernel)
			}
			seen[r.Kernel] = true
			if r.Registers < 0 || r.SpillStoreBytes < 0 || r.SpillLoadBytes < 0 || r.SharedBytes < 0 || r.Barriers < 0 {
				t.Errorf("negative resource in %+v", r)
			}
		}
	})
}

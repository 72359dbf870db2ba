package kernels

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
	base := cacheKey("src", CompileOptions(90), nvrtc118, 90)
	variants := map[string]string{
		"source":  cacheKey("src2", CompileOptions(90), nvrtc118, 90),
		"options": cacheKey("src", append(CompileOptions(90), "-G"), nvrtc118, 90),
		"version": cacheKey("src", CompileOptions(90), compilerID{major: 12, minor: 8}, 90),
		"minor":   cacheKey("src", CompileOptions(90), compilerID{major: 11, minor: 9}, 90),
		"arch":    cacheKey("src", CompileOptions(90), nvrtc118, 80),
		// An emulated NVRTC reporting a real version still gets its own entries.
		"emulated": cacheKey("src", CompileOptions(90), compilerID{major: 11, minor: 8, emulated: "stepbench emulated CUDA device 1.0"}, 90),
	}
	for what, key := range variants {
		if key == base {
			t.Errorf("changing the %s keeps the cache key", what)
		}
	}
	emu10 := cacheKey("src", CompileOptions(90), compilerID{emulated: "stepbench emulated CUDA device 1.0 (g++ 12.2.0)"}, 90)
	emu11 := cacheKey("src", CompileOptions(90), compilerID{emulated: "stepbench emulated CUDA device 1.1 (g++ 12.2.0)"}, 90)
	if emu10 == emu11 {
		t.Error("two emulator versions share a cache key")
	}
	if again := cacheKey("src", CompileOptions(90), nvrtc118, 90); again != base {
		t.Errorf("cache key not deterministic: %s vs %s", again, base)
	}
}

func TestTranslationUnitKeepsLineNumbers(t *testing.T) {
	unit := TranslationUnit("a\nb\n", "x.cu", "first\nsecond")
	want := "#line 1 \"common.cu\"\na\nb\n\n#line 1 \"x.cu\"\nfirst\nsecond"
	if unit != want {
		t.Errorf("TranslationUnit = %q, want %q", unit, want)
	}
}

// fakeCompiler stands in for NVRTC: it counts compiles and returns a cubin
// naming the unit's file with a one-kernel ptxas report.
type fakeCompiler struct{ compiles int }

func (c *fakeCompiler) Compile(unit, name string, opts []string) ([]byte, string, error) {
	c.compiles++
	log := "ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Used 8 registers\n"
	return []byte("cubin of " + name), log, nil
}
func (c *fakeCompiler) Version() (int, int) { return 12, 4 }
func (c *fakeCompiler) Emulated() string    { return "" }

func TestCompileCachesEveryCubin(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	var c fakeCompiler
	cache := t.TempDir()
	first, err := Compile(&c, srcs, 90, cache)
	if err != nil {
		t.Fatal(err)
	}
	if c.compiles != len(srcs)-1 || len(first) != len(srcs)-1 {
		t.Fatalf("%d compiles and %d cubins for %d sources, want one each but common.cu", c.compiles, len(first), len(srcs))
	}
	again, err := Compile(&c, srcs, 90, cache)
	if err != nil {
		t.Fatal(err)
	}
	if c.compiles != len(srcs)-1 {
		t.Errorf("a second compile ran NVRTC %d more times, want every cubin from the cache", c.compiles-(len(srcs)-1))
	}
	for i := range again {
		if again[i].Name != first[i].Name || string(again[i].Cubin) != "cubin of "+first[i].Name || len(again[i].Report) != 1 {
			t.Errorf("cached %s: %q, report %v", again[i].Name, again[i].Cubin, again[i].Report)
		}
	}
}

func TestChangedSourcesNamesWhatDiffers(t *testing.T) {
	embedded, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range embedded {
		if name == "tp.cu" {
			continue // missing from dir
		}
		if name == "attention.cu" {
			text += "\n// edited\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "mine.cu"), []byte("// new"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ChangedSources(dir)
	if want := []string{"attention.cu", "mine.cu", "tp.cu"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ChangedSources = %v, %v; want %v", got, err, want)
	}
}

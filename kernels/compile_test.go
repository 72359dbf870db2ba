package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A --kernels-dir holds any subset of the sources: its files replace the
// embedded ones of their names, the rest stay embedded.
func TestSourcesOverlayTheEmbeddedOnes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Sources(dir); err == nil || !strings.Contains(err.Error(), "no *.cu files") {
		t.Errorf("empty directory: got %v, want an error saying it holds no *.cu file", err)
	}
	embedded, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	write("norm.cu", "// norm")
	write("notes.txt", "ignored")
	srcs, err := Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != len(embedded) || srcs["norm.cu"] != "// norm" || srcs[CommonSource] != embedded[CommonSource] || srcs["attention.cu"] != embedded["attention.cu"] {
		t.Errorf("Sources(%s): %d files, norm.cu %q; want the %d embedded ones with norm.cu replaced", dir, len(srcs), srcs["norm.cu"], len(embedded))
	}
	over, err := Overrides(dir)
	if err != nil || len(over) != 1 || over[0].Name != "norm.cu" || !over[0].Changed ||
		over[0].SHA256 != sha256Hex("// norm") {
		t.Errorf("Overrides = %+v, %v", over, err)
	}
	if _, err := Sources(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing directory: want an error")
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
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

// OnCompile hears of every source the cache cannot serve, in order, with
// its place among all sources, and of none the cache serves.
func TestOnCompileHearsOfCompilesOnly(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	var c fakeCompiler
	var heard []string
	b := Build{Arch: 90, CacheDir: t.TempDir(), OnCompile: func(name string, done, total int) {
		heard = append(heard, fmt.Sprintf("%s %d/%d", name, done, total))
	}}
	if _, err := b.Compile(&c, srcs); err != nil {
		t.Fatal(err)
	}
	if n := len(srcs) - 1; len(heard) != n || heard[0] != "activation.cu 1/"+fmt.Sprint(n) || !strings.HasSuffix(heard[n-1], fmt.Sprintf(" %d/%d", n, n)) {
		t.Errorf("heard %q", heard)
	}
	heard = nil
	if _, err := b.Compile(&c, srcs); err != nil || len(heard) != 0 {
		t.Errorf("a cached compile: %v, heard %q", err, heard)
	}
}

// Every corruption of a cache entry is caught by its checksum before the
// cubin reaches the driver: the entry is discarded, the source compiled
// again once, Rebuilt says so, and the next compile is served from the
// repaired entry. Before, a truncated cubin made cuModuleLoadData read past
// its end (SIGSEGV), and random bytes in its code were run.
func TestCorruptCacheEntriesAreRebuilt(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	const victim = "norm.cu"
	for _, tc := range []struct {
		name    string
		corrupt func(entry, other []byte) []byte
		want    string
	}{
		{"truncated", func(e, _ []byte) []byte { return e[:len(e)-7] }, "truncated"},
		{"100 bytes", func(e, _ []byte) []byte { return e[:100] }, ""},
		{"garbled header of the cubin", func(e, _ []byte) []byte {
			e = bytes.Clone(e)
			copy(e[len(e)-len("cubin of norm.cu"):], "\x7fELF garbage")
			return e
		}, "checksum"},
		{"another kernel's entry", func(_, other []byte) []byte { return other }, "another key"},
		{"random bytes in the code", func(e, _ []byte) []byte {
			e = bytes.Clone(e)
			e[len(e)-3] ^= 0x5a
			return e
		}, "checksum"},
		{"empty", func([]byte, []byte) []byte { return nil }, "not a cache entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c fakeCompiler
			cache := t.TempDir()
			first, err := Compile(&c, srcs, 90, cache)
			if err != nil {
				t.Fatal(err)
			}
			var victimKey, otherKey string
			for _, comp := range first {
				if comp.Name == victim {
					victimKey = comp.CacheKey
				} else if otherKey == "" {
					otherKey = comp.CacheKey
				}
			}
			entry, _ := os.ReadFile(entryPath(cache, victimKey))
			other, _ := os.ReadFile(entryPath(cache, otherKey))
			if err := os.WriteFile(entryPath(cache, victimKey), tc.corrupt(entry, other), 0o644); err != nil {
				t.Fatal(err)
			}
			compiles := c.compiles
			again, err := Compile(&c, srcs, 90, cache)
			if err != nil {
				t.Fatal(err)
			}
			if c.compiles != compiles+1 {
				t.Errorf("%d compiles, want the corrupted source's alone", c.compiles-compiles)
			}
			for _, comp := range again {
				switch {
				case comp.Name == victim && (comp.FromCache || !strings.Contains(comp.Rebuilt, "discarded") ||
					!strings.Contains(comp.Rebuilt, tc.want) || string(comp.Cubin) != "cubin of norm.cu"):
					t.Errorf("%s: from cache %v, cubin %q, rebuilt %q (want it to say %q)", comp.Name, comp.FromCache, comp.Cubin, comp.Rebuilt, tc.want)
				case comp.Name != victim && (!comp.FromCache || comp.Rebuilt != ""):
					t.Errorf("%s: from cache %v, rebuilt %q", comp.Name, comp.FromCache, comp.Rebuilt)
				}
			}
			if _, err := Compile(&c, srcs, 90, cache); err != nil || c.compiles != compiles+1 {
				t.Errorf("the repaired entry is not served from the cache (%d compiles, %v)", c.compiles-compiles, err)
			}
		})
	}
}

// Rebuild discards an entry whose cubin passed its checksum but did not
// load, and compiles the source again.
func TestRebuildDiscardsAnEntryThatDoesNotLoad(t *testing.T) {
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
	bad := first[0]
	bad.Cubin = []byte("a cubin the driver refuses")
	if err := StoreCache(cache, bad); err != nil {
		t.Fatal(err)
	}
	served, err := Compile(&c, srcs, 90, cache)
	if err != nil || string(served[0].Cubin) != "a cubin the driver refuses" || !served[0].FromCache {
		t.Fatalf("the stored entry is not served: %q, %v", served[0].Cubin, err)
	}
	compiles := c.compiles
	again, err := Rebuild(&c, srcs, served[0], 90, cache, "CUDA_ERROR_INVALID_IMAGE")
	if err != nil {
		t.Fatal(err)
	}
	if c.compiles != compiles+1 || again.FromCache || string(again.Cubin) != "cubin of "+bad.Name ||
		!strings.Contains(again.Rebuilt, "CUDA_ERROR_INVALID_IMAGE") || !strings.Contains(again.Rebuilt, bad.Name) {
		t.Errorf("Rebuild: %d compiles, %+v", c.compiles-compiles, again)
	}
	if fixed, _ := Compile(&c, srcs, 90, cache); string(fixed[0].Cubin) != "cubin of "+bad.Name {
		t.Errorf("after Rebuild the cache serves %q", fixed[0].Cubin)
	}
}

func TestChangedSourcesNamesWhatDiffers(t *testing.T) {
	embedded, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// attention.cu edited, norm.cu an identical copy, the rest absent (embedded), mine.cu new.
	files := map[string]string{"attention.cu": embedded["attention.cu"] + "\n// edited\n", "norm.cu": embedded["norm.cu"], "mine.cu": "// new"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ChangedSources(dir)
	if want := []string{"attention.cu", "mine.cu"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ChangedSources = %v, %v; want %v", got, err, want)
	}
	// The overlay and the changed files agree: Sources differs from the
	// embedded sources exactly in what ChangedSources names.
	srcs, err := Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	var differ []string
	for name, text := range srcs {
		if embedded[name] != text {
			differ = append(differ, name)
		}
	}
	slices.Sort(differ)
	if !slices.Equal(differ, got) {
		t.Errorf("Sources differs from the embedded sources in %v, ChangedSources says %v", differ, got)
	}
}

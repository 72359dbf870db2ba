package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/internal/seeded"
)

// Corrupted entries of the cubin cache, as a user's disk or an old
// stepbench may leave them, are each discarded and rebuilt, and the run
// says so on stderr and goes on; the repaired cache serves the next run in
// silence. Before, a cubin truncated to 37,952 bytes made every later run
// die with SIGSEGV in cuModuleLoadData, 100 bytes, a garbled ELF header or
// another kernel's cubin gave CUDA errors that never named the cache, and
// random bytes in the code section ran unnoticed.
func TestEmulatedCorruptKernelCacheRebuilt(t *testing.T) {
	seeded.Expect(t, "corrupt kernel cache entries")
	onEmulator(t)
	home := t.TempDir() // a cache of this test's own: every entry is this run's
	t.Setenv("XDG_CACHE_HOME", home)
	args := []string{"run", "--device", "cuda", "--model", "llama-tiny", "--input-len", "4", "--output-len", "2",
		"--num-iters", "1", "--num-iters-warmup", "0", "--energy-window-seconds", "0", "--no-telemetry"}
	mustRun(t, args...)
	entries, _ := filepath.Glob(filepath.Join(home, "stepbench", "cubin", "*.entry"))
	if len(entries) < 5 {
		t.Fatalf("%d cache entries, want one per source", len(entries))
	}
	slices.Sort(entries)
	read := func(p string) []byte {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	write := func(p string, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	corrupt := map[string]func([]byte) []byte{
		"truncated": func(e []byte) []byte { return e[:min(37952, len(e)/2)] },
		"100 bytes": func(e []byte) []byte { return e[:100] },
		"garbled ELF header": func(e []byte) []byte {
			at := strings.Index(string(e), "\x7fELF")
			e[at+4], e[at+5], e[at+16] = 9, 9, 9
			return e
		},
		"another kernel's": func([]byte) []byte { return read(entries[0]) },
		"random bytes in the code": func(e []byte) []byte {
			for i := len(e) / 2; i < len(e)/2+64; i++ {
				e[i] ^= byte(i*131 + 7)
			}
			return e
		},
	}
	i := 1
	for _, how := range []string{"truncated", "100 bytes", "garbled ELF header", "another kernel's", "random bytes in the code"} {
		write(entries[i], corrupt[how](read(entries[i])))
		i++
	}
	_, stderr := mustRun(t, args...)
	if n := strings.Count(stderr, "stepbench: kernel cache: the cache entry "); n != 5 ||
		!strings.Contains(stderr, "discarded") || !strings.Contains(stderr, "compiled again") {
		t.Errorf("%d cache entries said rebuilt, want 5:\n%s", n, stderr)
	}
	if _, stderr := mustRun(t, args...); strings.Contains(stderr, "kernel cache") {
		t.Errorf("the repaired cache is rebuilt again:\n%s", stderr)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// A cuBLASLt tuning-cache entry that is a FIFO, a link to /dev/zero or a
// file padded to 4 GB is noted and the shape tuned again at once: the run
// stalled for the whole step timeout, which then blamed "a kernel that
// never returns" (13 GB resident for /dev/zero), and the padded entry was
// read whole (43 s, 11.8 GB) before being ignored.
func TestEmulatedGemmCacheEntriesThatAreNoFiles(t *testing.T) {
	seeded.Expect(t, "cuBLASLt tuning-cache entries that are no files")
	onEmulator(t)
	dir := filepath.Join(emuCacheHome, "stepbench", "cubin", "gemm-lt")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	gemm := []string{"run", "--device", "cuda", "--model", "llama-tiny", "--kernel", "gemm=2", "-v", "--batch-size", "1",
		"--input-len", "40", "--output-len", "2", "--num-iters", "1", "--step-timeout", "2m"}
	env := []string{"XDG_CACHE_HOME=" + emuCacheHome}
	if code, _, stderr := runProcess(t, 5*time.Minute, env, gemm...); code != 0 {
		t.Fatalf("the first gemm=2 run: exit %d\n%s", code, stderr)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(entries) == 0 {
		t.Fatal("the first run cached no gemm choice")
	}
	if len(entries) < 3 {
		t.Fatalf("the first run cached %d gemm choices, want one per prefill GEMM (3 or more)", len(entries))
	}
	// One entry of each kind, in one run.
	replaceWithFIFO(t, entries[0])
	linkToDevZero(t, entries[1])
	sparseFile(t, entries[2], 4<<30)
	start := time.Now()
	code, _, stderr := runProcess(t, 2*time.Minute, env, gemm...)
	for _, want := range []string{entries[0] + ": a named pipe (FIFO), not a regular file", entries[1] + ": a character device, not a regular file",
		entries[2] + ": 4294967296 bytes is more than the 1 MiB that a gemm-lt cache entry may hold"} {
		if code != 0 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d after %s, stderr lacks %q:\n%s", code, time.Since(start).Round(time.Second), want, stderr)
		}
	}
	if n := strings.Count(stderr, "stepbench: gemm cache: ignored ("); n != 3 {
		t.Errorf("%d entries ignored, want 3:\n%s", n, stderr)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A cuBLASLt tuning-cache entry that is a FIFO, a link to /dev/zero or a
// file padded to 4 GB is noted and the shape tuned again at once: the run
// stalled for the whole step timeout, which then blamed "a kernel that
// never returns" (13 GB resident for /dev/zero), and the padded entry was
// read whole (43 s, 11.8 GB) before being ignored.
func TestEmulatedGemmCacheEntriesThatAreNoFiles(t *testing.T) {
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
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, path string)
		want    string
	}{
		{"fifo", func(t *testing.T, path string) {
			os.Remove(path)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "a named pipe (FIFO), not a regular file"},
		{"/dev/zero", linkToDevZero, "a character device, not a regular file"},
		{"4 GB", func(t *testing.T, path string) { sparseFile(t, path, 4<<30) }, "is more than the 1 MiB that a gemm-lt cache entry may hold"},
	} {
		for _, e := range entries {
			tc.replace(t, e)
		}
		start := time.Now()
		code, _, stderr := runProcess(t, 2*time.Minute, env, gemm...)
		if code != 0 || !strings.Contains(stderr, "stepbench: gemm cache: ignored (") || !strings.Contains(stderr, tc.want) ||
			!strings.Contains(stderr, "tuning again") {
			t.Errorf("entries that are %s: exit %d after %s, stderr:\n%s", tc.name, code, time.Since(start).Round(time.Second), stderr)
		}
	}
}

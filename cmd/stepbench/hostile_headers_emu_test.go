package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// A header reached by #include that is a FIFO, in --kernels-dir or in an
// --include directory, is refused before NVRTC would open it: one line
// naming the header and the #include, exit 2. The compile hung with no
// output.
func TestEmulatedFIFOHeaderRefused(t *testing.T) {
	seeded.Expect(t, "a FIFO reached by #include")
	onEmulator(t)
	for _, where := range []string{"--kernels-dir", "--include"} {
		kernelsDir, incDir := t.TempDir(), t.TempDir()
		headerDir := kernelsDir
		if where == "--include" {
			headerDir = incDir
		}
		fifo := filepath.Join(headerDir, "mine.cuh")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile("../../kernels/norm.cu")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(kernelsDir, "norm.cu"), append([]byte("#include \"mine.cuh\"\n"), src...), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"verify", "--kernels-dir", kernelsDir, "--include", incDir, "--check", "add_rmsnorm"}, tinyRunShape...)
		code, _, stderr := runProcess(t, 2*time.Minute, []string{"XDG_CACHE_HOME=" + emuCacheHome}, args...)
		last := strings.TrimSpace(stderr)
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:] // after the compile's progress line
		}
		if code != exitUsage || !strings.Contains(last, "kernel header "+fifo+" (#include \"mine.cuh\"): open "+fifo+": a named pipe (FIFO), not a regular file") {
			t.Errorf("a FIFO header in %s: exit %d, stderr:\n%s", where, code, stderr)
		}
	}
}

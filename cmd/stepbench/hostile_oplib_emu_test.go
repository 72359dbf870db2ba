package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// processIn runs stepbench (this test binary) in dir, killed after 5
// minutes (a hang is a failure).
func processIn(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1", "XDG_CACHE_HOME="+emuCacheHome)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("stepbench %s: still running after 5 minutes\n%s", strings.Join(args, " "), stderr.String())
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("stepbench %s: %v", strings.Join(args, " "), err)
	}
	return 0, stdout.String(), stderr.String()
}

// Issue 30: --op attn_decode=libmine.so names the file in the current
// directory, as a path does (it went to dlopen unchanged, which searched
// the loader's path: "no usable GPU: ... cannot open shared object
// file"); reports name it by its absolute path.
func TestEmulatedOpLibraryInTheCurrentDirectory(t *testing.T) {
	onEmulator(t)
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(exampleLibs(t), "libattn_decode.so"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "libmine.so"), data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := processIn(t, dir, append([]string{"verify", "--op", "attn_decode=libmine.so", "--check", "attention"}, tinyRunShape...)...)
	if code != 0 || !strings.Contains(stdout, "op attn_decode from "+filepath.Join(dir, "libmine.so")) || !strings.Contains(stdout, "checks passed") {
		t.Errorf("verify --op attn_decode=libmine.so in its directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// An --op that is no library file is refused in one line naming what it
// is, exit 2, before the GPU is opened: a FIFO said "not a library file
// (<nil>)".
func TestIrregularOpLibrariesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.so")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.so")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "a named pipe (FIFO), not a library file"},
		{zero, "a character device, not a library file"},
		{dir, "a directory, not a library file"},
		{"libnone.so", "no such file (" + filepath.Join(dir, "libnone.so") + ")"},
	} {
		for _, args := range [][]string{
			{"run", "--device", "cuda", "--model", "llama-tiny", "--num-iters", "1"},
			{"verify", "--check", "attention"},
		} {
			code, _, stderr := processIn(t, dir, append(args, "--op", "attn_decode="+tc.path)...)
			wantOneLine(t, args[0]+" "+tc.path, code, stderr, exitUsage, "--op attn_decode="+tc.path+": "+tc.want)
		}
	}
}

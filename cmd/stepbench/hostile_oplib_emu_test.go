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

	"stepbench/internal/seeded"
)

// The probe of an op library (probe.go) re-executes this test binary,
// which is stepbench only with STEPBENCH_TEST_MAIN=1: a test that runs a
// command in its own process would otherwise start every test again.
func init() { probeEnv = []string{"STEPBENCH_TEST_MAIN=1"} }

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
	seeded.Expect(t, "an --op path that is no library file")
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

// hostileOp builds testdata/hostile_op.c with the given -D definitions
// into dir/name.
func hostileOp(t *testing.T, dir, name string, defines ...string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, name)
	args := []string{"-std=c11", "-shared", "-fPIC", "-O1", "-I" + filepath.Join(root, "include"), "-o", so}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	if out, err := exec.Command("gcc", append(args, filepath.Join("testdata", "hostile_op.c"))...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	return so
}

// A user's library that crashes as it loads (its constructor, its ABI
// version, stepbench_op_get), whose stepbench_op_get never returns, that
// is no ELF file or whose error is full of escape sequences: one line
// names the library and the call, exit 2 (exit 1 for the hang, a step
// timeout), never "no usable GPU" and never Go's dump of every goroutine
// (158-171 lines that named no library); with several --op flags the
// line names the one that crashed.
func TestEmulatedHostileOpLibraries(t *testing.T) {
	seeded.Expect(t, "op libraries that crash, hang or refuse their op")
	onEmulator(t)
	dir := t.TempDir()
	good := hostileOp(t, dir, "libgood.so")
	notELF := filepath.Join(dir, "libtext.so")
	if err := os.WriteFile(notELF, []byte(strings.Repeat("not a shared object\n", 10)), 0o755); err != nil {
		t.Fatal(err)
	}
	const load = "crashed in its load (dlopen: its constructors; stepbench_op_abi_version): "
	for _, tc := range []struct {
		name    string
		defines []string
		code    int
		want    string
	}{
		{"libctor.so", []string{"BOOM_CTOR"}, exitUsage, load + "SIGABRT (abort)"},
		{"libabi.so", []string{"BOOM_ABI"}, exitUsage, load + "SIGSEGV (an invalid memory access)"},
		{"libget.so", []string{"BOOM_GET"}, exitUsage, "crashed in rope_kv_write's stepbench_op_get: SIGSEGV"},
		{"libhang.so", []string{"HANG_GET"}, exitFailure, "looking up rope_kv_write (dlopen, its constructors, stepbench_op_get) did not finish within 1s"},
		{"liberr.so", []string{"ERR_GET"}, exitUsage, `\x1b[2J\x1b]0;pwned\ano rope_kv_write here\nsecond line`},
		{"libtext.so", nil, exitUsage, "invalid ELF header"},
	} {
		lib := notELF
		if tc.defines != nil {
			lib = hostileOp(t, dir, tc.name, tc.defines...)
		}
		args := append([]string{"verify", "--op", "attn_decode=" + good + ",rope_kv_write=" + lib, "--check", "attention"}, tinyRunShape...)
		code, _, stderr := runProcess(t, 2*time.Minute, []string{"XDG_CACHE_HOME=" + emuCacheHome, "STEPBENCH_SETUP_TIMEOUT=1s"}, args...)
		if code != tc.code || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, lib) || !strings.Contains(stderr, tc.want) ||
			strings.Contains(stderr, "no usable GPU") || strings.Contains(stderr, "\x1b") || strings.Contains(stderr, "goroutine ") {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line naming the library with %q (no escape, no GPU blamed)",
				tc.name, code, stderr, tc.code, tc.want)
		}
	}
}

// A library whose run fails with a message holding escape sequences and a
// newline has that message written on one line with the escapes quoted:
// a library's text never reaches the terminal raw.
func TestEmulatedOpLibraryErrorTextIsSanitized(t *testing.T) {
	seeded.Expect(t, "an op library's error text with escape sequences and a newline")
	onEmulator(t)
	lib := hostileOp(t, t.TempDir(), "liberrrun.so", "ERR_RUN")
	code, stdout, stderr := runProcess(t, 2*time.Minute, []string{"XDG_CACHE_HOME=" + emuCacheHome},
		append([]string{"verify", "--op", "attn_decode=" + lib, "--check", "attention"}, tinyRunShape...)...)
	if code != exitFailure || !strings.Contains(stdout+stderr, `\x1b[31mred\x1b[0m run failed\nsecond line`) || strings.Contains(stdout+stderr, "\x1b") {
		t.Errorf("a run that fails: exit %d\nstdout:\n%q\nstderr:\n%q", code, stdout, stderr)
	}
}

package cuda

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"stepbench/internal/seeded"
)

// crashChild is the environment variable that makes TestCrashChild act:
// "LIB:SYMBOL" to call SYMBOL of LIB labelled, "gonil" for a Go nil
// dereference (recovered) once the handler is installed.
const crashChild = "STEPBENCH_TEST_CRASH_CHILD"

func TestCrashChild(t *testing.T) {
	what := os.Getenv(crashChild)
	if what == "" {
		t.Skip("the child of TestCrashNamesTheLibrary")
	}
	if err := InstallCrashHandler(); err != nil {
		t.Fatal(err)
	}
	if what == "gonil" {
		defer func() {
			if recover() == nil {
				t.Error("a Go nil dereference was not a recoverable panic")
			}
		}()
		var p *int
		_ = *p
		return
	}
	path, symbol, _ := strings.Cut(what, ":")
	lib, err := openLibrary(path)
	if err != nil {
		t.Fatal(err)
	}
	fn := lib.symbol(symbol)
	crashCall(fn, crashLabel(path, "attn_decode", "run"))
	os.Stdout.WriteString("returned\n")
}

// A crash inside a labelled library call ends the process by its signal
// after one line naming the library, the op and the call (Go's dump of
// every goroutine named none of them); a call that returns, and a Go nil
// dereference with the handler installed, are as they were.
func TestCrashNamesTheLibrary(t *testing.T) {
	lib := buildFake(t, "crash_lib.c", t.TempDir(), "libcrash.so")
	seeded.Expect(t, "an op library that crashes (SIGSEGV, abort, SIGFPE)")
	for _, tc := range []struct {
		child string
		sig   syscall.Signal // 0: exits 0
	}{
		{lib + ":crash_segv", syscall.SIGSEGV},
		{lib + ":crash_abort", syscall.SIGABRT},
		{lib + ":crash_fpe", syscall.SIGFPE},
		{lib + ":fine", 0},
		{"gonil", 0},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), crashChild+"="+tc.child)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case tc.sig == 0 && err != nil:
			t.Errorf("%s: %v\n%s%s", tc.child, err, stdout.String(), stderr.String())
		case tc.sig == 0:
		case !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != tc.sig:
			t.Errorf("%s: %v, want death by %v\n%s", tc.child, err, tc.sig, stderr.String())
		default:
			want := "stepbench: op library " + lib + " crashed in attn_decode's run: " +
				map[syscall.Signal]string{syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGFPE: "SIGFPE"}[tc.sig]
			if !strings.HasPrefix(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 ||
				strings.Contains(stderr.String(), "goroutine") {
				t.Errorf("%s: stderr %q, want one line starting %q", tc.child, stderr.String(), want)
			}
		}
	}
}

// Sanitize keeps a library's text on one line a terminal shows as text.
func TestSanitize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain error: 3 > 2", 100, "plain error: 3 > 2"},
		{"\x1b[2J\x1b]0;pwned\x07cleared", 100, `\x1b[2J\x1b]0;pwned\acleared`},
		{"two\nlines\r", 100, `two\nlines\r`},
		{"bad \xff byte, real \uFFFD", 100, `bad \xff byte, real ` + "\uFFFD"},
		{"rtl \u202e override", 100, `rtl \u202e override`},
		{strings.Repeat("x", 100), 10, strings.Repeat("x", 10) + "..."},
	} {
		if got := Sanitize(tc.in, tc.max); got != tc.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

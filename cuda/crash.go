package cuda

// #include <stdlib.h>
// #include "crash.h"
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unsafe"
)

// The crash handler of calls into a user's library (crash.h): a fault on
// the thread of a labelled call writes one line naming the library, the
// op and the call, and the process dies by the signal, where Go printed a
// dump of every goroutine (158-171 lines) that never named the library.
// Nothing is printed, or allocated, per call: a label is made once per
// library, op and call.

var (
	crashOnce sync.Once
	crashErr  error
)

// InstallCrashHandler installs the handler (once), ahead of Go's, which
// keeps every signal outside a labelled call.
func InstallCrashHandler() error {
	crashOnce.Do(func() {
		if rc := C.sb_crash_install(); rc != 0 {
			crashErr = fmt.Errorf("install the op libraries' crash handler: %w", syscall.Errno(rc))
		}
	})
	return crashErr
}

// crashLabel is the line a crash during call (stepbench_op_get, run, ...)
// of op in the library at path starts with, in C memory kept for the
// process's life; the signal's name completes it.
func crashLabel(path, op, call string) *C.char {
	what := "op library " + Sanitize(path, 512)
	if op != "" {
		what += " crashed in " + Sanitize(op, 64) + "'s " + call
	} else {
		what += " crashed in " + call
	}
	return C.CString("stepbench: " + what + ": ")
}

// LabelCrashes labels the calling thread's calls until done is called: a
// crash in them (the library's constructors as it is opened,
// stepbench_op_get) writes "stepbench: op library PATH crashed in OP's
// CALL" and the signal. The calling goroutine must stay on its thread
// (runtime.LockOSThread) until done.
func LabelCrashes(path, op, call string) (done func()) {
	label := crashLabel(path, op, call)
	C.sb_crash_set(label)
	return func() {
		C.sb_crash_set(nil)
		C.free(unsafe.Pointer(label))
	}
}

// crashCall calls fn (a C function of no arguments) with label set: a
// crash inside it is named by the label.
func crashCall(fn unsafe.Pointer, label *C.char) {
	C.sb_crash_call((*[0]byte)(fn), label)
}

// Sanitize makes text from a user's library fit for a terminal, in one
// line: control characters (an escape sequence's ESC, a newline) and
// invalid UTF-8 are written as Go escapes, and text past max bytes is cut
// with "...".
func Sanitize(text string, max int) string {
	var b strings.Builder
	for i, r := range text {
		if b.Len() >= max {
			b.WriteString("...")
			break
		}
		switch {
		case r == utf8RuneError && isInvalidAt(text, i):
			fmt.Fprintf(&b, `\x%02x`, text[i])
		case r == '\t' || r == ' ':
			b.WriteRune(' ')
		case unicode.IsControl(r) || r == 0x2028 || r == 0x2029 || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

const utf8RuneError = '\uFFFD'

// isInvalidAt says whether the RuneError at text[i] stands for an invalid
// byte (not a U+FFFD written in the text).
func isInvalidAt(text string, i int) bool {
	return !strings.HasPrefix(text[i:], "\uFFFD")
}

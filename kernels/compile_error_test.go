package kernels

import (
	"errors"
	"testing"
)

// The first error of NVRTC's log, in each form it (or the emulated NVRTC's
// g++) writes one, gives the file, the line and the message.
func TestCompileErrorReadsTheFirstDiagnostic(t *testing.T) {
	for _, tc := range []struct {
		name, log, file, message string
		line                     int
	}{
		{"error", "attention.cu(12): error: identifier \"foo\" is undefined\n1 error detected", "attention.cu", "identifier \"foo\" is undefined", 12},
		{"catastrophic", "mine.cu(1): catastrophic error: cannot open source file \"twice.cuh\"\n", "mine.cu", "cannot open source file \"twice.cuh\"", 1},
		{"g++ fatal", "emulated NVRTC: mine.cu compiled for sm_90 by g++\nmine.cu(1): fatal error: twice.cuh: No such file or directory\ncompilation terminated.", "mine.cu", "twice.cuh: No such file or directory", 1},
		{"a header's", "norm.cu(3): warning: unused\nmine.cuh(40): error: expected a \";\"", "mine.cuh", "expected a \";\"", 40},
		{"no line", "something failed with an error", "x.cu", "something failed with an error", 0},
	} {
		e := newCompileError("x.cu", 90, tc.log, errors.New("NVRTC_ERROR_COMPILATION"))
		if e.File != tc.file || e.Line != tc.line || e.Message != tc.message {
			t.Errorf("%s: got %s:%d %q, want %s:%d %q", tc.name, e.File, e.Line, e.Message, tc.file, tc.line, tc.message)
		}
	}
}

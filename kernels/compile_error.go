package kernels

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// CompileError is a kernel source that did not compile: the file and line of
// NVRTC's first error and its message, with the whole log. A user's edit
// that does not compile is named as such (exit 1), never as a missing GPU.
type CompileError struct {
	File    string // the file of the first error ("attention.cu", a header)
	Line    int    // its line, 0 when NVRTC gave none
	Message string // NVRTC's words for it ("identifier \"foo\" is undefined")
	Arch    int
	Log     string // NVRTC's whole log
	Err     error  // the NVRTC call's error
}

// nvrtcDiagRe is NVRTC's diagnostic line, "attention.cu(12): error: ..."
// (also "catastrophic error" and, from g++ through the emulated NVRTC, the
// same form, a missing header there being g++'s "fatal error").
var nvrtcDiagRe = regexp.MustCompile(`(?m)^(.+?)\((\d+)\): (?:catastrophic |fatal )?error: (.*)$`)

// newCompileError reads the first error of log.
func newCompileError(name string, arch int, log string, err error) *CompileError {
	e := &CompileError{File: name, Arch: arch, Log: strings.TrimSpace(log), Err: err}
	if m := nvrtcDiagRe.FindStringSubmatch(log); m != nil {
		e.File, e.Message = m[1], strings.TrimSpace(m[3])
		e.Line, _ = strconv.Atoi(m[2])
		return e
	}
	for _, line := range strings.Split(e.Log, "\n") {
		if strings.Contains(line, "error") {
			e.Message = strings.TrimSpace(line)
			return e
		}
	}
	e.Message = err.Error()
	return e
}

// Error is "compile error: attention.cu:12: identifier "foo" is undefined
// (sm_90)" and NVRTC's log below it.
func (e *CompileError) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return fmt.Sprintf("compile error: %s: %s (sm_%d, %v)\n%s", where, e.Message, e.Arch, e.Err, e.Log)
}

func (e *CompileError) Unwrap() error { return e.Err }

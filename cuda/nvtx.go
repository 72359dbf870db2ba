package cuda

// #include <stdlib.h>
// #include "nvtx.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// NVTXInjectionVar names the profiler's injection library; Nsight Systems
// and Nsight Compute set it in the environment of the program they launch.
const NVTXInjectionVar = "NVTX_INJECTION64_PATH"

// nvtxLibrary is the NVTX v1/v2 library of CUDA toolkits, used when the
// named tool is no NVTX v3 injection (it loads such tools itself).
const nvtxLibrary = "libnvToolsExt.so.1"

// NVTX emits NVTX ranges and marks to the profiler attached to the process,
// if any. Without one, Push, Pop and Mark return at once (no C call, no
// allocation), so ranges cost nothing in an unprofiled run. A nil *NVTX is
// valid and attached to nothing.
//
// Ranges are per OS thread, as NVTX's are: push and pop on the goroutine
// (locked to its thread) whose work they bracket.
type NVTX struct {
	attached bool
	source   string
}

// OpenNVTX attaches to the profiler named by $NVTX_INJECTION64_PATH
// (getenv reads it; nil is os.Getenv's absence of a value) through NVTX v3's
// injection protocol, else through libnvToolsExt.so.1 where present. A tool
// that cannot be loaded leaves NVTX detached; Source says why. NVTX's
// injection is process-wide: once one tool is attached, every later
// OpenNVTX shares it.
func OpenNVTX(getenv func(string) string) *NVTX {
	path := ""
	if getenv != nil {
		path = getenv(NVTXInjectionVar)
	}
	if path == "" {
		return &NVTX{source: "no profiler (" + NVTXInjectionVar + " is unset)"}
	}
	errBuf := (*C.char)(C.malloc(dlerrorBytes))
	defer C.free(unsafe.Pointer(errBuf))
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	if C.sb_nvtx_inject(cPath, errBuf, dlerrorBytes) == 1 {
		return &NVTX{attached: true, source: fmt.Sprintf("%s=%s (NVTX v3 injection)", NVTXInjectionVar, path)}
	}
	injectErr := C.GoString(errBuf)
	cLib := C.CString(nvtxLibrary)
	defer C.free(unsafe.Pointer(cLib))
	if C.sb_nvtx_use_library(cLib, errBuf, dlerrorBytes) == 1 {
		return &NVTX{attached: true, source: fmt.Sprintf("%s (%s=%s: %s)", nvtxLibrary, NVTXInjectionVar, path, injectErr)}
	}
	return &NVTX{source: fmt.Sprintf("detached: %s=%s: %s; %s", NVTXInjectionVar, path, injectErr, C.GoString(errBuf))}
}

// Attached reports whether ranges reach a profiler.
func (n *NVTX) Attached() bool { return n != nil && n.attached }

// Source says what NVTX is attached to, or why it is not.
func (n *NVTX) Source() string {
	if n == nil {
		return "no profiler"
	}
	return n.source
}

// Push opens a range named name on the calling thread.
func (n *NVTX) Push(name string) {
	if !n.Attached() {
		return
	}
	c := C.CString(name)
	C.sb_nvtx_push(c)
	C.free(unsafe.Pointer(c))
}

// Pop closes the calling thread's innermost range.
func (n *NVTX) Pop() {
	if n.Attached() {
		C.sb_nvtx_pop()
	}
}

// Mark records an instant named name.
func (n *NVTX) Mark(name string) {
	if !n.Attached() {
		return
	}
	c := C.CString(name)
	C.sb_nvtx_mark(c)
	C.free(unsafe.Pointer(c))
}

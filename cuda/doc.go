// Package cuda is stepbench's own binding to the CUDA driver API, NVRTC and
// cuBLAS. Nothing is linked at build time: libcuda.so.1, libnvrtc.so.* and
// libcublas.so.* are opened with dlopen when first needed, every symbol is
// looked up once by its versioned name (cuMemAlloc_v2, ...) and called
// through a small C trampoline. A binary built on a machine without CUDA
// therefore runs with any driver and any CUDA 11.8-13.x user-space libraries
// present at run time, and reports their absence as an ordinary error.
//
// Every error names the call and the library's name for the failure, e.g.
// "cuMemAlloc_v2(1073741824 bytes): CUDA_ERROR_OUT_OF_MEMORY"; such errors
// are *Error values.
//
// Threading rule: a CUDA context is current per OS thread. The caller locks
// its goroutine to an OS thread (runtime.LockOSThread) before
// Driver.NewContext and makes every call of that Context, and of the
// streams, events, modules, graphs and cuBLAS handles made from it, from that
// goroutine. NVRTC compiles need no context and may run on any goroutine.
package cuda

// #cgo LDFLAGS: -ldl
import "C"

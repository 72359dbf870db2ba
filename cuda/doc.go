// Package cuda is stepbench's own binding to the CUDA driver API, NVRTC and
// cuBLAS. Nothing is linked at build time: libcuda.so.1, libnvrtc.so.* and
// libcublas.so.* are opened with dlopen when first needed, every symbol is
// looked up once by its versioned name (cuMemAlloc_v2, ...) and called
// through a small C trampoline. A binary built on a machine without CUDA
// therefore runs with any driver and any CUDA 11.8-13.x user-space libraries
// present at run time, and reports their absence as an ordinary error.
//
// Which libraries are opened:
//
//   - The driver is libcuda.so.1 through the loader path (but see
//     STEPBENCH_CUDA_LIBS below).
//   - NVRTC and cuBLAS: an explicit path (the CLI's --nvrtc, --cublas) wins,
//     then $STEPBENCH_NVRTC / $STEPBENCH_CUBLAS, then the search described at
//     OpenNVRTC. The choice is aware of the driver: a library whose major
//     version the driver does not support (cuDriverGetVersion) is used only
//     when nothing else is there, and of several NVRTC the newest wins, so a
//     toolkit's own NVRTC beats an older one on the loader path. Choice()
//     records which was chosen and why; `stepbench devices` prints it.
//   - STEPBENCH_CUDA_LIBS=DIR (package libdir) is one switch for all of
//     them: the driver, NVRTC, cuBLAS and NVML (bench) are then opened from
//     DIR and from nowhere else, by the same sonames (libnvrtc.so.13, .12,
//     .11.2 and libcublas.so.13, .12, .11, tried in that order), below only
//     an explicit path and $STEPBENCH_NVRTC / $STEPBENCH_CUBLAS. A missing
//     DIR or library is an error naming the variable and the path. It
//     selects stepbench's emulated CUDA device (STEPBENCH_CUDA_LIBS=build/emu,
//     built by `make emu`), and serves real installs too, e.g. one toolkit's
//     lib64 with the driver's libcuda.so.1 and libnvidia-ml.so.1 linked in.
//
// Libraries opened by absolute path bring their companions from the same
// folder first (libcublasLt for cuBLAS, libnvrtc-builtins.so.M.m for NVRTC),
// since they find them by name and have no RUNPATH.
//
// The emulated libraries export sbemu_describe; Driver, NVRTC and Cublas
// report it through Emulated ("" for real libraries), so that nothing
// mistakes emulated times or cubins for real ones.
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

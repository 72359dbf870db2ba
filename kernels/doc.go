// Package kernels is what stepbench's CUDA kernels are, without running
// them: the CUDA C sources of every GPU operation of the forward pass
// (embedded *.cu files, header-free so that NVRTC 11.8 and later compile
// them), the registry that names each entry point with its source file and
// its plain-Go twin in kernels/ref, the launch geometry the sources and the
// Go launch code share (thread counts, tiles, attention splits, shared
// memory and workspace sizes), and the compile step that turns the sources
// into cached cubins through any NVRTC (the Compiler interface).
//
// It needs no cgo: the launches themselves, the checks against the twins
// and everything else that touches a GPU live in runner/gpu, the CUDA
// backend. A test keeps the registry and the sources in step (every entry
// point registered, every twin present, every shared constant equal), so a
// new kernel or kernel version is one source, one registry entry and one
// twin.
//
// Sizes are in bytes, counts in elements or threads, as each name says.
package kernels

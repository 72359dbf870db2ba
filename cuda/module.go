package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// CUfunction_attribute numbers.
const (
	funcAttrSharedSizeBytes           = 1
	funcAttrLocalSizeBytes            = 3
	funcAttrNumRegs                   = 4
	funcAttrMaxDynamicSharedSizeBytes = 8
)

// Module is a loaded cubin.
type Module struct {
	ctx    *Context
	module C.CUmodule
}

// Function is a kernel of a Module.
type Function struct {
	mod  *Module
	fn   C.CUfunction
	name string
}

// LoadModule loads a cubin (e.g. from NVRTC.Compile) into the context.
func (c *Context) LoadModule(cubin []byte) (*Module, error) {
	if len(cubin) == 0 {
		return nil, fmt.Errorf("cuModuleLoadData: empty image")
	}
	// The driver reads the image only during the call; a copy in C memory
	// keeps the cgo pointer rules simple.
	image := C.CBytes(cubin)
	defer C.free(image)
	m := &Module{ctx: c}
	d := c.drv
	defer watch(ModuleLoad, callText(fmt.Sprintf("cuModuleLoadData (a %d-byte cubin)", len(cubin))))()
	if err := d.check(C.sb_cuModuleLoadData(d.api.cuModuleLoadData, &m.module, image), "cuModuleLoadData(%d bytes)", len(cubin)); err != nil {
		return nil, err
	}
	return m, nil
}

// Function looks up a kernel by its (extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	f := &Function{mod: m, name: name}
	d := m.ctx.drv
	if err := d.check(C.sb_cuModuleGetFunction(d.api.cuModuleGetFunction, &f.fn, m.module, cName), "cuModuleGetFunction(%q)", name); err != nil {
		return nil, err
	}
	return f, nil
}

// Unload releases the module; its Functions become invalid.
func (m *Module) Unload() error {
	if m.module == nil {
		return nil
	}
	d := m.ctx.drv
	err := d.check(C.sb_cuModuleUnload(d.api.cuModuleUnload, m.module), "cuModuleUnload")
	m.module = nil
	return err
}

// SetMaxDynamicShared allows launches with up to bytes of dynamic shared
// memory; above 48 KiB this opt-in is required.
func (f *Function) SetMaxDynamicShared(bytes int) error {
	if bytes < 0 || bytes > math.MaxInt32 {
		return fmt.Errorf("cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES): %d bytes out of range", f.name, bytes)
	}
	d := f.mod.ctx.drv
	return d.check(C.sb_cuFuncSetAttribute(d.api.cuFuncSetAttribute, f.fn, funcAttrMaxDynamicSharedSizeBytes, C.int(bytes)),
		"cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%d)", f.name, bytes)
}

// Attributes reports the kernel's registers per thread, local memory per
// thread (spills and stack) and static shared memory per block.
func (f *Function) Attributes() (regs, localBytes, staticSharedBytes int, err error) {
	d := f.mod.ctx.drv
	get := func(attr int, name string) (int, error) {
		var v C.int
		err := d.check(C.sb_cuFuncGetAttribute(d.api.cuFuncGetAttribute, &v, C.int(attr), f.fn), "cuFuncGetAttribute(%s, %s)", f.name, name)
		return int(v), err
	}
	if regs, err = get(funcAttrNumRegs, "NUM_REGS"); err != nil {
		return 0, 0, 0, err
	}
	if localBytes, err = get(funcAttrLocalSizeBytes, "LOCAL_SIZE_BYTES"); err != nil {
		return 0, 0, 0, err
	}
	if staticSharedBytes, err = get(funcAttrSharedSizeBytes, "SHARED_SIZE_BYTES"); err != nil {
		return 0, 0, 0, err
	}
	return regs, localBytes, staticSharedBytes, nil
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// launchArgSlotBytes is the room each kernel argument gets: every supported
// type fits in 8 bytes, and 8-byte slots keep each value aligned.
const launchArgSlotBytes = 8

// packedArgs is a kernel parameter array in C memory: params[i] points at
// slot i, as cuLaunchKernel's kernelParams expects.
type packedArgs struct {
	block  unsafe.Pointer // params array followed by the value slots
	params *unsafe.Pointer
}

func (p packedArgs) free() {
	if p.block != nil {
		C.free(p.block)
	}
}

// packLaunchArgs copies args into C memory. Supported: DevPtr, int32,
// uint32, int64, uint64, float32 — the exact widths of the kernel's
// parameters, so no implicit conversion can misplace a value.
func packLaunchArgs(args []any) (packedArgs, error) {
	if len(args) == 0 {
		return packedArgs{}, nil
	}
	ptrBytes := len(args) * int(unsafe.Sizeof(uintptr(0)))
	block := C.calloc(C.size_t(ptrBytes+len(args)*launchArgSlotBytes), 1)
	if block == nil {
		return packedArgs{}, fmt.Errorf("pack %d kernel arguments: out of memory", len(args))
	}
	params := unsafe.Slice((*unsafe.Pointer)(block), len(args))
	slots := unsafe.Add(block, ptrBytes)
	for i, arg := range args {
		slot := unsafe.Add(slots, i*launchArgSlotBytes)
		switch v := arg.(type) {
		case DevPtr:
			*(*uint64)(slot) = uint64(v)
		case int32:
			*(*int32)(slot) = v
		case uint32:
			*(*uint32)(slot) = v
		case int64:
			*(*int64)(slot) = v
		case uint64:
			*(*uint64)(slot) = v
		case float32:
			*(*float32)(slot) = v
		default:
			C.free(block)
			return packedArgs{}, fmt.Errorf("kernel argument %d has unsupported type %T (want DevPtr, int32, uint32, int64, uint64 or float32)", i, arg)
		}
		params[i] = slot
	}
	return packedArgs{block: block, params: &params[0]}, nil
}

// Launch enqueues f on s with the given grid, block, dynamic shared memory
// and arguments (see packLaunchArgs for the accepted types). The driver
// copies the arguments, so they may change as soon as Launch returns.
func (s *Stream) Launch(f *Function, grid, block Dim3, sharedBytes int, args ...any) error {
	return s.launch(false, f, grid, block, sharedBytes, args)
}

// LaunchProgrammatic is Launch through cuLaunchKernelEx with programmatic
// stream serialization allowed (programmatic dependent launch, sm_90): f
// may start before the stream's previous kernel has finished, so f must
// execute griddepcontrol.wait (kernels' SB_PDL_WAIT) before it touches
// anything that kernel reads or writes. Inside a stream capture the launch
// records a programmatic edge. A driver without cuLaunchKernelEx (before
// CUDA 11.8) gets an error naming the missing entry point, no launch.
func (s *Stream) LaunchProgrammatic(f *Function, grid, block Dim3, sharedBytes int, args ...any) error {
	d := s.drv()
	if !d.HasLaunchEx() {
		return fmt.Errorf("cuLaunchKernelEx(%s, programmatic stream serialization): the driver %s does not export cuLaunchKernelEx (CUDA 11.8 or newer has it)", f.name, d.Path())
	}
	return s.launch(true, f, grid, block, sharedBytes, args)
}

// launch packs args and calls cuLaunchKernel, or when programmatic
// cuLaunchKernelEx with programmatic stream serialization.
func (s *Stream) launch(programmatic bool, f *Function, grid, block Dim3, sharedBytes int, args []any) error {
	call, attr := "cuLaunchKernel", ""
	if programmatic {
		call, attr = "cuLaunchKernelEx", ", programmatic stream serialization"
	}
	if sharedBytes < 0 || sharedBytes > math.MaxUint32 {
		return fmt.Errorf("%s(%s): shared memory %d bytes out of range", call, f.name, sharedBytes)
	}
	packed, err := packLaunchArgs(args)
	if err != nil {
		return fmt.Errorf("%s(%s): %w", call, f.name, err)
	}
	defer packed.free()
	d := s.drv()
	gx, gy, gz := C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z)
	bx, by, bz := C.uint(block.X), C.uint(block.Y), C.uint(block.Z)
	s.last.Store(&f.name)
	var code C.CUresult
	if programmatic {
		code = C.sb_cuLaunchKernelPDL(d.api.cuLaunchKernelEx, f.fn, gx, gy, gz, bx, by, bz, C.uint(sharedBytes), s.stream, packed.params)
	} else {
		code = C.sb_cuLaunchKernel(d.api.cuLaunchKernel, f.fn, gx, gy, gz, bx, by, bz, C.uint(sharedBytes), s.stream, packed.params)
	}
	return d.check(code, "%s(%s, grid %dx%dx%d, block %dx%dx%d, %d shared bytes%s)", call, f.name,
		grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedBytes, attr)
}

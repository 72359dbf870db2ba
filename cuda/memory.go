package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// DevPtr is a device address (CUdeviceptr).
type DevPtr uint64

// checkBytes rejects sizes the driver would misread after conversion to size_t.
func checkBytes(call string, bytes int) error {
	if bytes <= 0 {
		return fmt.Errorf("%s: size must be positive, got %d bytes", call, bytes)
	}
	return nil
}

// checkCount lets a zero-length copy or memset be a no-op and rejects a
// negative one; skip is true when there is nothing to enqueue.
func checkCount(call string, count int) (skip bool, err error) {
	if count < 0 {
		return true, fmt.Errorf("%s: negative size %d", call, count)
	}
	return count == 0, nil
}

// MemInfo returns the device's free and total memory.
func (c *Context) MemInfo() (freeBytes, totalBytes uint64, err error) {
	var free, total C.size_t
	d := c.drv
	if err := d.check(C.sb_cuMemGetInfo(d.api.cuMemGetInfo, &free, &total), "cuMemGetInfo_v2"); err != nil {
		return 0, 0, err
	}
	return uint64(free), uint64(total), nil
}

// Alloc allocates bytes of device memory (cuMemAlloc_v2, 256-byte aligned).
func (c *Context) Alloc(bytes int) (DevPtr, error) {
	if err := checkBytes("cuMemAlloc_v2", bytes); err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	d := c.drv
	if err := d.check(C.sb_cuMemAlloc(d.api.cuMemAlloc, &p, C.size_t(bytes)), "cuMemAlloc_v2(%d bytes)", bytes); err != nil {
		return 0, err
	}
	return DevPtr(p), nil
}

// Free releases memory from Alloc. Freeing 0 is a no-op.
func (c *Context) Free(p DevPtr) error {
	if p == 0 {
		return nil
	}
	d := c.drv
	return d.check(C.sb_cuMemFree(d.api.cuMemFree, C.CUdeviceptr(p)), "cuMemFree_v2(%#x)", uint64(p))
}

// NameAllocation labels the allocation at p for the emulated device's fault
// messages ("illegal read ... of allocation #12 'kv cache'"); a real driver
// has no such call and this does nothing.
func (c *Context) NameAllocation(p DevPtr, name string) {
	d := c.drv
	if d.nameAllocation == nil || p == 0 {
		return
	}
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	C.sb_name_allocation(d.nameAllocation, C.CUdeviceptr(p), cName)
}

// HostBuf is page-locked host memory (cuMemAllocHost_v2): copies from and to
// it run asynchronously and at full PCIe speed. It is C memory, so it may be
// handed to the driver freely and never moves.
type HostBuf struct {
	Ptr   unsafe.Pointer
	Bytes int
}

// AllocHost allocates bytes of pinned host memory.
func (c *Context) AllocHost(bytes int) (HostBuf, error) {
	if err := checkBytes("cuMemAllocHost_v2", bytes); err != nil {
		return HostBuf{}, err
	}
	var p unsafe.Pointer
	d := c.drv
	if err := d.check(C.sb_cuMemAllocHost(d.api.cuMemAllocHost, &p, C.size_t(bytes)), "cuMemAllocHost_v2(%d bytes)", bytes); err != nil {
		return HostBuf{}, err
	}
	return HostBuf{Ptr: p, Bytes: bytes}, nil
}

// FreeHost releases memory from AllocHost. Freeing a zero HostBuf is a no-op.
func (c *Context) FreeHost(h HostBuf) error {
	if h.Ptr == nil {
		return nil
	}
	d := c.drv
	return d.check(C.sb_cuMemFreeHost(d.api.cuMemFreeHost, h.Ptr), "cuMemFreeHost(%d bytes)", h.Bytes)
}

// Bytes16 views the buffer as uint16 elements (e.g. bf16 bit patterns).
func (h HostBuf) Bytes16() []uint16 {
	if h.Ptr == nil {
		return nil
	}
	return unsafe.Slice((*uint16)(h.Ptr), h.Bytes/2)
}

// Int32 views the buffer as int32 elements.
func (h HostBuf) Int32() []int32 {
	if h.Ptr == nil {
		return nil
	}
	return unsafe.Slice((*int32)(h.Ptr), h.Bytes/4)
}

// Float32 views the buffer as float32 elements.
func (h HostBuf) Float32() []float32 {
	if h.Ptr == nil {
		return nil
	}
	return unsafe.Slice((*float32)(h.Ptr), h.Bytes/4)
}

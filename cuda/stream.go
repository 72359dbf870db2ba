package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// streamNonBlocking is CU_STREAM_NON_BLOCKING: no implicit synchronisation
// with the legacy default stream.
const streamNonBlocking = 1

// Stream is a CUDA stream of the Context it was made from.
type Stream struct {
	ctx       *Context
	stream    C.CUstream
	capturing bool // between BeginCapture and EndCapture
	// last is the name of the last kernel (or graph) launched on the
	// stream, which a Watcher's description of a stuck Sync names.
	last atomic.Pointer[string]
}

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	s := &Stream{ctx: c}
	d := c.drv
	if err := d.check(C.sb_cuStreamCreate(d.api.cuStreamCreate, &s.stream, streamNonBlocking), "cuStreamCreate"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stream) drv() *Driver { return s.ctx.drv }

// Sync waits until all work enqueued on the stream has finished. A kernel
// fault surfaces here as a sticky error (e.g. CUDA_ERROR_ILLEGAL_ADDRESS).
func (s *Stream) Sync() error {
	if watched() {
		defer watch(DeviceWork, (*streamSync)(s))()
	}
	d := s.drv()
	return d.check(C.sb_cuStreamSynchronize(d.api.cuStreamSynchronize, s.stream), "cuStreamSynchronize")
}

// Destroy releases the stream; work already enqueued still completes.
func (s *Stream) Destroy() error {
	if s.stream == nil {
		return nil
	}
	d := s.drv()
	err := d.check(C.sb_cuStreamDestroy(d.api.cuStreamDestroy, s.stream), "cuStreamDestroy_v2")
	s.stream = nil
	return err
}

// CopyHtoD enqueues a copy of bytes from host src to device dst. src should
// be pinned (HostBuf) for the copy to be asynchronous; pageable memory is
// staged by the driver. src must stay valid until the stream reaches the copy.
func (s *Stream) CopyHtoD(dst DevPtr, src unsafe.Pointer, bytes int) error {
	if skip, err := checkCount("cuMemcpyHtoDAsync_v2", bytes); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemcpyHtoDAsync(d.api.cuMemcpyHtoDAsync, C.CUdeviceptr(dst), src, C.size_t(bytes), s.stream),
		"cuMemcpyHtoDAsync_v2(%d bytes)", bytes)
}

// CopyDtoH enqueues a copy of bytes from device src to host dst; dst must
// stay valid until the stream has been synchronised.
func (s *Stream) CopyDtoH(dst unsafe.Pointer, src DevPtr, bytes int) error {
	if skip, err := checkCount("cuMemcpyDtoHAsync_v2", bytes); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemcpyDtoHAsync(d.api.cuMemcpyDtoHAsync, dst, C.CUdeviceptr(src), C.size_t(bytes), s.stream),
		"cuMemcpyDtoHAsync_v2(%d bytes)", bytes)
}

// CopyDtoD enqueues a device-to-device copy.
func (s *Stream) CopyDtoD(dst, src DevPtr, bytes int) error {
	if skip, err := checkCount("cuMemcpyDtoDAsync_v2", bytes); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemcpyDtoDAsync(d.api.cuMemcpyDtoDAsync, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), s.stream),
		"cuMemcpyDtoDAsync_v2(%d bytes)", bytes)
}

// Memset8 sets count bytes at dst to value.
func (s *Stream) Memset8(dst DevPtr, value uint8, count int) error {
	if skip, err := checkCount("cuMemsetD8Async", count); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemsetD8Async(d.api.cuMemsetD8Async, C.CUdeviceptr(dst), C.uchar(value), C.size_t(count), s.stream),
		"cuMemsetD8Async(%d elements)", count)
}

// Memset16 sets count 16-bit elements at dst (2-byte aligned) to value.
func (s *Stream) Memset16(dst DevPtr, value uint16, count int) error {
	if skip, err := checkCount("cuMemsetD16Async", count); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemsetD16Async(d.api.cuMemsetD16Async, C.CUdeviceptr(dst), C.ushort(value), C.size_t(count), s.stream),
		"cuMemsetD16Async(%d elements)", count)
}

// Memset32 sets count 32-bit elements at dst (4-byte aligned) to value.
func (s *Stream) Memset32(dst DevPtr, value uint32, count int) error {
	if skip, err := checkCount("cuMemsetD32Async", count); skip || err != nil {
		return err
	}
	d := s.drv()
	return d.check(C.sb_cuMemsetD32Async(d.api.cuMemsetD32Async, C.CUdeviceptr(dst), C.uint(value), C.size_t(count), s.stream),
		"cuMemsetD32Async(%d elements)", count)
}

// Event marks a point in a stream; two of them time the work between them.
type Event struct {
	ctx   *Context
	event C.CUevent
	// stream is where the event was last recorded (a Watcher's
	// description of a stuck Sync names its last launch).
	stream atomic.Pointer[Stream]
}

// NewEvent creates an event with default flags (timing enabled).
func (c *Context) NewEvent() (*Event, error) {
	e := &Event{ctx: c}
	d := c.drv
	if err := d.check(C.sb_cuEventCreate(d.api.cuEventCreate, &e.event, 0), "cuEventCreate"); err != nil {
		return nil, err
	}
	return e, nil
}

// Record enqueues the event on s.
func (e *Event) Record(s *Stream) error {
	e.stream.Store(s)
	d := e.ctx.drv
	return d.check(C.sb_cuEventRecord(d.api.cuEventRecord, e.event, s.stream), "cuEventRecord")
}

// Sync waits until the work before the event's last Record has finished.
func (e *Event) Sync() error {
	if s := e.stream.Load(); s != nil && watched() {
		defer watch(DeviceWork, (*streamSync)(s))()
	}
	d := e.ctx.drv
	return d.check(C.sb_cuEventSynchronize(d.api.cuEventSynchronize, e.event), "cuEventSynchronize")
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e.event == nil {
		return nil
	}
	d := e.ctx.drv
	err := d.check(C.sb_cuEventDestroy(d.api.cuEventDestroy, e.event), "cuEventDestroy_v2")
	e.event = nil
	return err
}

// ElapsedMs returns the device time between two recorded, completed events
// in milliseconds (resolution about 0.5 µs).
func ElapsedMs(start, end *Event) (float32, error) {
	if start == nil || end == nil {
		return 0, fmt.Errorf("cuEventElapsedTime: nil event")
	}
	var ms C.float
	d := start.ctx.drv
	if err := d.check(C.sb_cuEventElapsedTime(d.api.cuEventElapsedTime, &ms, start.event, end.event), d.api.elapsedTimeName); err != nil {
		return 0, err
	}
	return float32(ms), nil
}

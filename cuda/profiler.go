package cuda

// #include "shim.h"
// static CUresult sb_cuProfilerCall(void *fn) { return ((CUresult(*)(void))fn)(); }
import "C"

import (
	"errors"
	"unsafe"
)

// ProfilerStart is cuProfilerStart on the context: a profiler started with
// a capture range on the profiler API (nsys --capture-range=cudaProfilerApi,
// ncu --profile-from-start off) collects from here. Outside a profiler it
// does nothing. A driver without the call is an error.
func (c *Context) ProfilerStart() error {
	return c.profilerCall(c.drv.api.cuProfilerStart, "cuProfilerStart")
}

// ProfilerStop is cuProfilerStop: collection stops here.
func (c *Context) ProfilerStop() error {
	return c.profilerCall(c.drv.api.cuProfilerStop, "cuProfilerStop")
}

func (c *Context) profilerCall(fn unsafe.Pointer, name string) error {
	if fn == nil {
		return errors.New(name + ": the CUDA driver does not export it")
	}
	return c.drv.check(C.sb_cuProfilerCall(fn), name)
}

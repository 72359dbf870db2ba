package gpu

import "stepbench/cuda"

// Profiler is the backend's side of profiling (bench.Profiler): the
// capture window is cuProfilerStart/Stop on the backend's context, the
// ranges are NVTX ranges on the calling thread (the backend's). With no
// profiler attached, Push and Pop do nothing and Start and Stop are the
// driver's no-ops.
type Profiler struct {
	ctx  *cuda.Context
	nvtx *cuda.NVTX
}

// Profiler returns the backend's profiler, its ranges going to nvtx (nil:
// none).
func (c *Backend) Profiler(nvtx *cuda.NVTX) *Profiler { return &Profiler{ctx: c.ctx, nvtx: nvtx} }

// Start opens the capture window (cuProfilerStart); call it outside any timed region.
func (p *Profiler) Start() error { return p.ctx.ProfilerStart() }

// Stop closes it (cuProfilerStop).
func (p *Profiler) Stop() error { return p.ctx.ProfilerStop() }

// Push opens an NVTX range on the calling thread.
func (p *Profiler) Push(name string) { p.nvtx.Push(name) }

// Pop closes the calling thread's innermost NVTX range.
func (p *Profiler) Pop() { p.nvtx.Pop() }

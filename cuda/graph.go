package cuda

// #include "shim.h"
import "C"

import "errors"

// streamCaptureModeThreadLocal is CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only
// unsafe calls from this thread break the capture, so other threads (NVML
// readers, say) may keep using CUDA.
const streamCaptureModeThreadLocal = 1

// Graph is a captured sequence of stream work.
type Graph struct {
	ctx   *Context
	graph C.CUgraph
}

// GraphExec is an instantiated Graph, ready to launch.
type GraphExec struct {
	ctx  *Context
	exec C.CUgraphExec
}

// BeginCapture starts recording the work enqueued on s instead of running it.
func (s *Stream) BeginCapture() error {
	d := s.drv()
	err := d.check(C.sb_cuStreamBeginCapture(d.api.cuStreamBeginCapture, s.stream, streamCaptureModeThreadLocal),
		"cuStreamBeginCapture_v2(thread-local)")
	s.capturing = err == nil
	return err
}

// Capturing says whether a capture begun on s has not ended: what an op
// library is told (it must not allocate or synchronize then).
func (s *Stream) Capturing() bool { return s.capturing }

// EndCapture stops recording and returns the graph of the captured work.
func (s *Stream) EndCapture() (*Graph, error) {
	g := &Graph{ctx: s.ctx}
	s.capturing = false
	d := s.drv()
	if err := d.check(C.sb_cuStreamEndCapture(d.api.cuStreamEndCapture, s.stream, &g.graph), "cuStreamEndCapture"); err != nil {
		return nil, err
	}
	return g, nil
}

// Instantiate makes an executable graph.
func (g *Graph) Instantiate() (*GraphExec, error) {
	ge := &GraphExec{ctx: g.ctx}
	d := g.ctx.drv
	if err := d.check(C.sb_cuGraphInstantiateWithFlags(d.api.cuGraphInstantiateWithFlags, &ge.exec, g.graph, 0), "cuGraphInstantiateWithFlags"); err != nil {
		return nil, err
	}
	return ge, nil
}

// NodeCount is the number of nodes of the graph (cuGraphGetNodes): every
// kernel launch, memset, copy and library call captured in it, a library's
// own kernels each one.
func (g *Graph) NodeCount() (int, error) {
	d := g.ctx.drv
	if d.api.cuGraphGetNodes == nil {
		return 0, errors.New("cuGraphGetNodes: not exported by this driver")
	}
	var n C.size_t
	if err := d.check(C.sb_cuGraphGetNodes(d.api.cuGraphGetNodes, g.graph, &n), "cuGraphGetNodes"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Destroy releases the graph; executable graphs made from it stay valid.
func (g *Graph) Destroy() error {
	if g.graph == nil {
		return nil
	}
	d := g.ctx.drv
	err := d.check(C.sb_cuGraphDestroy(d.api.cuGraphDestroy, g.graph), "cuGraphDestroy")
	g.graph = nil
	return err
}

// Launch enqueues one replay of the graph on s.
func (ge *GraphExec) Launch(s *Stream) error {
	s.last.Store(&graphLaunchName)
	d := ge.ctx.drv
	return d.check(C.sb_cuGraphLaunch(d.api.cuGraphLaunch, ge.exec, s.stream), "cuGraphLaunch")
}

// Destroy releases the executable graph.
func (ge *GraphExec) Destroy() error {
	if ge.exec == nil {
		return nil
	}
	d := ge.ctx.drv
	err := d.check(C.sb_cuGraphExecDestroy(d.api.cuGraphExecDestroy, ge.exec), "cuGraphExecDestroy")
	ge.exec = nil
	return err
}

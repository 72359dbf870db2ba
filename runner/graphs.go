package runner

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// The decode-graph cache lives beside Engine: the engine owns the buffers a
// captured step points at, so it alone knows when the captures go stale.

// StepCapturer is a backend that can record the ops of one decode step and
// replay them (the cuda backend's CUDA graphs). Engine.Decode captures the
// first decode step of a run's buffers and replays it afterwards; the ops
// read the position from the device (Backend.RopeKVWrite), so one recording
// serves every position.
type StepCapturer interface {
	// CaptureEnabled is false when the user asked for eager decode steps.
	CaptureEnabled() bool
	// BeginCapture makes the following ops be recorded instead of run.
	BeginCapture() error
	// EndCapture stops recording and returns the recorded step.
	EndCapture() (CapturedStep, error)
}

// CapturedStep is a recorded decode step.
type CapturedStep interface {
	Launch() error // enqueue one replay
	Destroy() error
}

// NodeCounter is a captured step that knows its node count (a CUDA graph's
// cuGraphGetNodes): every kernel launch and library call recorded in it.
type NodeCounter interface {
	Nodes() int
}

// LaunchCounter is a backend that counts the device work it enqueues:
// kernel launches and library calls (a cuBLAS GEMM counts one), captured or
// not. The per-op breakdown reads it at every op boundary.
type LaunchCounter interface {
	Launches() int64
}

// GraphNodes is one captured decode step's size: the batch and cache
// length it was captured for, and its node count.
type GraphNodes struct {
	Batch, MaxSeq, Nodes int
}

// DecodeGraphNodes lists the captured decode steps of the current buffers
// whose backend counts their nodes (NodeCounter), by batch then cache length.
func (e *Engine) DecodeGraphNodes() []GraphNodes {
	var out []GraphNodes
	for k, s := range e.graphs.steps {
		if nc, ok := s.(NodeCounter); ok && nc.Nodes() > 0 {
			out = append(out, GraphNodes{Batch: k.batch, MaxSeq: k.maxSeq, Nodes: nc.Nodes()})
		}
	}
	slices.SortFunc(out, func(a, b GraphNodes) int {
		return cmp.Or(cmp.Compare(a.Batch, b.Batch), cmp.Compare(a.MaxSeq, b.MaxSeq))
	})
	return out
}

// graphKey is what a captured decode step depends on besides the buffers
// (which Engine.ensureBuffers owns: reallocating them drops every graph).
type graphKey struct {
	batch, maxSeq, slots int
	tabled               bool
}

// decodeGraphs holds the captured decode steps of the current buffers.
type decodeGraphs struct {
	steps map[graphKey]CapturedStep
	// eager marks keys whose decode step has run once without capture:
	// lazy module loading (the default since CUDA 12.2) must not load a
	// kernel, ours or cuBLAS's, inside a capture on drivers before 12.3.
	eager map[graphKey]bool
}

// ranEager reports whether k's step already ran eagerly, and marks it.
func (g *decodeGraphs) ranEager(k graphKey) bool {
	if g.eager == nil {
		g.eager = map[graphKey]bool{}
	}
	seen := g.eager[k]
	g.eager[k] = true
	return seen
}

func (g *decodeGraphs) get(k graphKey) CapturedStep { return g.steps[k] }

func (g *decodeGraphs) put(k graphKey, s CapturedStep) {
	if g.steps == nil {
		g.steps = map[graphKey]CapturedStep{}
	}
	g.steps[k] = s
}

// invalidate destroys every graph: they point at buffers about to be freed.
func (g *decodeGraphs) invalidate() error {
	var errs []error
	for k, s := range g.steps {
		errs = append(errs, s.Destroy())
		delete(g.steps, k)
	}
	clear(g.eager)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy decode graphs: %w", err)
	}
	return nil
}

// len is the number of cached graphs.
func (g *decodeGraphs) len() int { return len(g.steps) }

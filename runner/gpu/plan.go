package gpu

import (
	"errors"
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
)

// PlannedLaunch is one launch a planner (NewPlanner) would have enqueued:
// the kernel, its geometry and how it is launched, as the cuda backend's
// own launch code decided them.
type PlannedLaunch struct {
	// Op is the backend op that launched it, as its errors name it
	// ("linear", "attention", "norm_linear").
	Op string `json:"op"`
	// Entry is the kernel's entry point, or the library call
	// (LibraryGemm, LibraryGemmLt) for a product cuBLAS runs.
	Entry       string    `json:"entry"`
	Grid        cuda.Dim3 `json:"grid"`
	Block       cuda.Dim3 `json:"block"`
	SharedBytes int       `json:"shared_bytes"`
	// Programmatic: launched with programmatic stream serialization
	// (launch=2 and the kernel opts in).
	Programmatic bool `json:"programmatic,omitempty"`
	// Triggers: the kernel opts in to launch=2 (kernels.PDLEntryPoints),
	// so it triggers its dependants early under launch=2.
	Triggers bool `json:"triggers,omitempty"`
	// Library: cuBLAS or cuBLASLt, whose kernels and grids are its own.
	Library bool `json:"library,omitempty"`
}

// The library calls a planner records for the products cuBLAS runs.
const (
	LibraryGemm   = "cublasGemmEx"
	LibraryGemmLt = "cublasLtMatmul"
)

// planState is a planner's: the next fake device address, and where the
// launches go.
type planState struct {
	next cuda.DevPtr
}

// planAlign is the planner's fake allocations' alignment (what cuMemAlloc
// gives and more than any kernel checks).
const planAlign = 256

// alloc hands out an address range that no kernel will ever touch.
func (p *planState) alloc(bytes int) cuda.DevPtr {
	ptr := p.next
	p.next += cuda.DevPtr((max(bytes, 16) + planAlign - 1) / planAlign * planAlign)
	return ptr
}

// NewPlanner is a cuda backend that opens no driver and enqueues nothing:
// every op checks its arguments and picks its kernels, versions, grids
// and fusions exactly as on a GPU of smCount SMs under sel (the same
// code), and hands record each launch it would have made instead of
// making it. Buffers are address ranges without memory, uploads and
// downloads do nothing, and FP8 weights and op libraries are refused.
// The estimate (bench/estimate) runs the engine's step on it.
func NewPlanner(sel kernels.Selection, smCount int, record func(PlannedLaunch)) (*Backend, error) {
	if smCount < 1 {
		return nil, fmt.Errorf("planner: SM count %d < 1", smCount)
	}
	if record == nil {
		return nil, errors.New("planner: no launch recorder")
	}
	srcs, err := kernels.Sources("")
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	set := &Kernels{smCount: smCount, sel: sel, launched: new(int64), pdl: kernels.PDLEntryPoints(srcs), record: record}
	c := &Backend{set: set, planning: &planState{next: 1 << 20}}
	c.info.Device.SMCount = smCount
	return c, nil
}

// Planning reports whether c is a planner (NewPlanner).
func (c *Backend) Planning() bool { return c.planning != nil }

// devAlloc allocates device memory, or, planning, an address range.
func (c *Backend) devAlloc(bytes int) (cuda.DevPtr, error) {
	if c.planning != nil {
		return c.planning.alloc(bytes), nil
	}
	return c.ctx.Alloc(bytes)
}

// planLaunch records a launch of entry point name instead of enqueuing it:
// the name must be one of the registry's.
func (k *Kernels) planLaunch(op, name string, grid, block cuda.Dim3, sharedBytes int) error {
	if _, ok := kernels.EntryPointSources()[name]; !ok {
		return fmt.Errorf("%s: kernel %s is not in the registry", op, name)
	}
	k.record(k.planned(op, name, grid, block, sharedBytes))
	*k.launched++
	return nil
}

// planned describes a launch of entry point name.
func (k *Kernels) planned(op, name string, grid, block cuda.Dim3, sharedBytes int) PlannedLaunch {
	return PlannedLaunch{Op: op, Entry: name, Grid: grid, Block: block, SharedBytes: sharedBytes,
		Programmatic: k.Programmatic(name), Triggers: k.pdl[name]}
}

// ObserveLaunches has f told every launch c makes from now on (nil: none),
// as a planner records them: a test holds the planner's launches to a
// real backend's.
func (c *Backend) ObserveLaunches(f func(PlannedLaunch)) { c.set.observe = f }

// observeLibrary tells the observer of a library call c made.
func (c *Backend) observeLibrary(op, call string) {
	if c.set.observe != nil {
		c.set.observe(PlannedLaunch{Op: op, Entry: call, Library: true})
	}
}

// planLibrary records a library call (cuBLAS) of op.
func (c *Backend) planLibrary(op, call string) {
	c.set.record(PlannedLaunch{Op: op, Entry: call, Library: true})
	c.gemms++
}

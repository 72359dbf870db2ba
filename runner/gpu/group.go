package gpu

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"stepbench/cuda"
	"stepbench/runner"
	"stepbench/runner/dist"
)

// A tensor-parallel group on this node's GPUs: one cuda backend per rank,
// each on its own goroutine locked to its OS thread (runner.Group), joined
// by one NCCL communicator, each holding its rank's share of the weights.

// GroupOptions say which ranks this node opens and how.
type GroupOptions struct {
	Config runner.Config
	Size   int   // ranks over every node
	Ranks  []int // this node's communicator ranks; the node's GPU i runs Ranks[i]
	// Backend is every rank's backend; Ordinal and Progress are set per
	// rank (the first rank reports its kernel compile to Progress).
	Backend  Options
	Progress io.Writer
	NCCL     *cuda.NCCL
	ID       cuda.NCCLUniqueID
	// Estimate is one GPU's memory (rank 0's, the largest vocabulary
	// slice), checked on every GPU before any weight is loaded.
	Estimate     runner.MemoryEstimate
	Weights      runner.WeightSource
	LoadProgress func(done, total int)
}

// Group is this node's ranks of a tensor-parallel group.
type Group struct {
	*runner.Group
	backends map[int]*Backend
}

// OpenGroup opens a backend on each of this node's GPUs, one per rank (the
// first alone, so that the others find its compiled kernels in the cache
// instead of compiling too), checks each GPU's memory, joins them to the
// communicator and loads their shares of the weights.
func OpenGroup(o GroupOptions) (*Group, error) {
	if len(o.Ranks) == 0 {
		return nil, errors.New("open group: no ranks on this node")
	}
	if err := CheckGPUCount(o.Size, len(o.Ranks)); err != nil {
		return nil, err
	}
	g := &Group{backends: map[int]*Backend{}}
	var mu sync.Mutex
	first, firstDone := o.Ranks[0], make(chan struct{})
	open := runner.RankBackends{
		Open: func(rank int) (runner.Backend, error) {
			opts := o.Backend
			opts.Ordinal, opts.Progress = rank-first, nil
			if rank == first {
				defer close(firstDone)
				opts.Progress = o.Progress
			} else {
				<-firstDone
			}
			be, err := New(opts)
			if err != nil {
				return nil, fmt.Errorf("--device cuda: %w", err)
			}
			if err := be.CheckMemory(o.Estimate); err != nil {
				return nil, errors.Join(fmt.Errorf("--tp-size %d: GPU %d: %w", o.Size, rank-first, err), be.Close())
			}
			mu.Lock()
			g.backends[rank] = be
			mu.Unlock()
			return be, nil
		},
		Join: func(rank int, be runner.Backend) error {
			return be.(*Backend).JoinGroup(o.NCCL, o.ID, rank, o.Size)
		},
	}
	var err error
	g.Group, err = runner.NewGroup(o.Config, o.Size, o.Ranks, open, o.Weights, o.LoadProgress)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// ErrTooFewGPUs is wrapped by the error of a node with fewer GPUs than
// ranks: a usage error, not a failure.
var ErrTooFewGPUs = errors.New("too few GPUs")

// CheckGPUCount says whether this node sees a GPU for each of its ranks
// (ranks of size over every node); call it before the rendezvous, so that a
// node that cannot run stops at once instead of keeping the others waiting.
func CheckGPUCount(size, ranks int) error {
	drv, err := cuda.OpenDriver()
	if err != nil {
		return fmt.Errorf("--tp-size: %w", err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("--tp-size: %w", err)
	}
	if n < ranks {
		return fmt.Errorf("%w: --tp-size %d over %d node(s) needs %d GPUs on this node, %d visible", ErrTooFewGPUs, size, size/ranks, ranks, n)
	}
	return nil
}

// Info is the backend of rank (one of this node's).
func (g *Group) Info(rank int) Info { return g.backends[rank].Info() }

// GPUUUIDs are the GPUs of this node's ranks, in Ranks order.
func (g *Group) GPUUUIDs() []string {
	var out []string
	for _, rank := range g.Ranks() {
		out = append(out, g.backends[rank].Info().Device.UUID)
	}
	return out
}

// GroupID is the communicator's id: made here when this node is node 0 (or
// the only one), else fetched from node 0 at addr (dist.Fetch); node 0 of
// several waits at addr until every other node has it (dist.Serve, logging on progress the connections it drops). It says
// on progress what it waits for.
func GroupID(nccl *cuda.NCCL, job dist.Job, addr string, timeout time.Duration, progress io.Writer) (cuda.NCCLUniqueID, error) {
	var id cuda.NCCLUniqueID
	if job.NodeRank > 0 {
		fmt.Fprintf(progress, "stepbench: node %d of %d: fetching the NCCL id from node 0 at %s\n", job.NodeRank, job.NNodes, addr)
		raw, err := dist.Fetch(addr, job, len(id), timeout)
		copy(id[:], raw)
		return id, err
	}
	id, err := nccl.UniqueID()
	if err != nil || job.NNodes == 1 {
		return id, err
	}
	fmt.Fprintf(progress, "stepbench: node 0 of %d: waiting at %s for the other nodes\n", job.NNodes, addr)
	return id, dist.Serve(addr, job, id[:], dist.ServeOptions{Timeout: timeout, Log: progress})
}

// GroupProfiler is a group's profiler (bench.Profiler): the capture window
// opens and closes on every rank's context, and the region ranges go to
// every rank's thread (NVTX ranges are per thread).
type GroupProfiler struct {
	g    *Group
	nvtx *cuda.NVTX
}

// Profiler is the group's profiler, its ranges sent to nvtx.
func (g *Group) Profiler(nvtx *cuda.NVTX) GroupProfiler { return GroupProfiler{g: g, nvtx: nvtx} }

func (p GroupProfiler) backends(f func(*Profiler) error) error {
	return p.g.DoBackend(func(_ int, be runner.Backend) error { return f(be.(*Backend).Profiler(p.nvtx)) })
}

// Start opens the capture window on every rank.
func (p GroupProfiler) Start() error { return p.backends((*Profiler).Start) }

// Stop closes it.
func (p GroupProfiler) Stop() error { return p.backends((*Profiler).Stop) }

// Push opens a range on every rank's thread.
func (p GroupProfiler) Push(name string) {
	if p.nvtx.Attached() {
		_ = p.backends(func(pr *Profiler) error { pr.Push(name); return nil })
	}
}

// Pop closes it.
func (p GroupProfiler) Pop() {
	if p.nvtx.Attached() {
		_ = p.backends(func(pr *Profiler) error { pr.Pop(); return nil })
	}
}

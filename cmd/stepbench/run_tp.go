package main

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/telemetry/nvml"
	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// tpFlags run the model tensor-parallel over several GPUs, of one node or
// of several (run).
type tpFlags struct {
	size             int
	nnodes, nodeRank int
	distInitAddr     string
	distTimeout      time.Duration
	ncclPath         string
}

func (t *tpFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&t.size, "tp-size", 1, "tensor parallelism over this many GPUs, all nodes together (one thread and CUDA context per GPU, NCCL all-reduces in every layer); given at all, even as 1, the run goes through NCCL")
	fs.IntVar(&t.nnodes, "nnodes", 1, "nodes the --tp-size GPUs span, --tp-size/--nnodes on each; every node runs the same command with its own --node-rank")
	fs.IntVar(&t.nodeRank, "node-rank", 0, "this node's index, 0..--nnodes-1 (node 0 hands out the NCCL unique id)")
	fs.StringVar(&t.distInitAddr, "dist-init-addr", "", "HOST:PORT of node 0: node 0 listens on PORT, the other nodes connect there for the NCCL unique id (as SGLang's --dist-init-addr)")
	fs.DurationVar(&t.distTimeout, "dist-timeout", 2*time.Minute, "how long node 0 waits for the other nodes, and they for node 0")
	fs.StringVar(&t.ncclPath, "nccl", "", "path of libnccl.so.2 to use (default: $STEPBENCH_NCCL, then $STEPBENCH_CUDA_LIBS, else the loader path, CUDA_HOME, /usr/local/cuda*, Python wheels' nvidia/nccl/lib)")
}

// grouped says whether the run goes through a tensor-parallel group.
func (t *tpFlags) grouped(fs *pflag.FlagSet) bool { return fs.Changed("tp-size") || t.nnodes > 1 }

// localRanks are the communicator ranks this node drives; GPU ordinal i of
// the node runs the i-th.
func (t *tpFlags) localRanks() []int {
	per := t.size / t.nnodes
	ranks := make([]int, per)
	for i := range ranks {
		ranks[i] = t.nodeRank*per + i
	}
	return ranks
}

// check validates the flags that need no model.
func (t *tpFlags) check(fs *pflag.FlagSet, f *runFlags) error {
	switch {
	case t.size < 1:
		return usagef("--tp-size: %d must be at least 1", t.size)
	case t.nnodes < 1:
		return usagef("--nnodes: %d must be at least 1", t.nnodes)
	case t.size%t.nnodes != 0:
		return usagef("--tp-size %d over --nnodes %d: every node runs --tp-size/--nnodes GPUs, so --nnodes must divide --tp-size", t.size, t.nnodes)
	case t.nodeRank < 0 || t.nodeRank >= t.nnodes:
		return usagef("--node-rank %d: must be 0..%d (--nnodes %d)", t.nodeRank, t.nnodes-1, t.nnodes)
	case t.nnodes > 1 && t.distInitAddr == "":
		return usagef("--nnodes %d needs --dist-init-addr HOST:PORT (node 0's address, where the nodes meet)", t.nnodes)
	case t.nnodes == 1 && (t.distInitAddr != "" || fs.Changed("node-rank")):
		return usagef("--dist-init-addr and --node-rank are for runs over several nodes (--nnodes > 1)")
	case t.distTimeout <= 0:
		return usagef("--dist-timeout: %s must be positive", t.distTimeout)
	}
	if !t.grouped(fs) {
		for _, name := range []string{"nccl", "dist-timeout"} {
			if fs.Changed(name) {
				return usagef("--%s is for tensor parallelism (--tp-size)", name)
			}
		}
		return nil
	}
	return t.checkModes(fs, f)
}

// checkModes refuses what a tensor-parallel run does not do.
func (t *tpFlags) checkModes(fs *pflag.FlagSet, f *runFlags) error {
	switch {
	case f.breakdown:
		return usagef("--breakdown times one GPU's ops; it does not run with --tp-size")
	case t.nnodes > 1 && !f.correctness && f.sampling.numIters == 0:
		return usagef("--nnodes %d needs --num-iters N: adaptive sampling would stop each node after a different iteration, and the nodes would wait on each other forever", t.nnodes)
	case t.nnodes > 1 && fs.Changed("energy-window-seconds") && f.telemetry.energyWindowSeconds > 0:
		return usagef("--energy-window-seconds: energy windows repeat steps for a time, a different count on each node; over several nodes there are none")
	case t.nnodes > 1 && f.logitsOut != "":
		return usagef("--logits-out: over several nodes each node holds only its ranks' slices of the logits")
	}
	return nil
}

// checkModel refuses, before anything is loaded, a model the ranks cannot
// split and a device that cannot run them.
func (t *tpFlags) checkModel(cfg runner.Config, device string) error {
	if device != "cuda" {
		return usagef("--tp-size runs ranks on the cuda backend through NCCL; the cpu backend is one rank (leave --tp-size out, or use --device cuda)")
	}
	if err := cfg.CheckTP(t.size); err != nil {
		return usagef("--tp-size: %v", err)
	}
	return nil
}

// rankEstimate is the memory one GPU needs: rank 0's (the largest
// vocabulary slice).
func (t *tpFlags) rankEstimate(cfg runner.Config, batch, tokens, maxSeq int) runner.MemoryEstimate {
	l, err := cfg.TPLayout(0, t.size)
	if err != nil {
		return runner.EstimateMemory(cfg, batch, tokens, maxSeq)
	}
	return runner.EstimateMemoryRank(cfg, l, batch, tokens, maxSeq)
}

// uniqueID is the communicator's id: made here on one node, else node 0's
// over TCP.
func (t *tpFlags) uniqueID(nccl *cuda.NCCL, work string, stderr io.Writer) (cuda.NCCLUniqueID, error) {
	var id cuda.NCCLUniqueID
	job := distJob{nnodes: t.nnodes, nodeRank: t.nodeRank, tpSize: t.size, work: work}
	if t.nodeRank > 0 {
		fmt.Fprintf(stderr, "stepbench: node %d of %d: fetching the NCCL id from node 0 at %s\n", t.nodeRank, t.nnodes, t.distInitAddr)
		raw, err := fetchID(t.distInitAddr, job, len(id), t.distTimeout)
		copy(id[:], raw)
		return id, err
	}
	id, err := nccl.UniqueID()
	if err != nil || t.nnodes == 1 {
		return id, err
	}
	fmt.Fprintf(stderr, "stepbench: node 0 of %d: waiting at %s for the other nodes\n", t.nnodes, t.distInitAddr)
	return id, serveID(t.distInitAddr, job, id[:], t.distTimeout)
}

// runGroup is runCmd for a tensor-parallel run.
func (f *runFlags) runGroup(fs *pflag.FlagSet, s runSetup, stdout, stderr io.Writer) error {
	verification, err := f.checkRankKernels(s, stderr)
	if err != nil {
		return err
	}
	group, env, err := f.openGroup(s, stderr)
	if err != nil {
		return err
	}
	defer group.Close()
	if f.correctness {
		return f.runCorrectness(group, s, stdout)
	}
	if f.tp.nnodes > 1 && f.telemetry.energyWindowSeconds > 0 {
		f.telemetry.energyWindowSeconds = 0
		fmt.Fprintf(stderr, "stepbench: --nnodes %d: no energy windows (they repeat steps for a time, a different count on each node)\n", f.tp.nnodes)
	}
	deps := runDeps{target: group, env: env, openNVML: nvml.Open, toolVersion: versionString(), tpSize: f.tp.size, verification: verification}
	deps.profiler = attachGroupProfiler(group, s.window, stderr)
	return f.benchmark(fs, s, deps, stdout, stderr)
}

// rankShape is the model as a rank's kernels see it: rank 0's heads,
// intermediate columns and vocabulary slice.
func (t *tpFlags) rankShape(cfg runner.Config) kernels.ModelShape {
	m := cfg.KernelShape()
	if l, err := cfg.TPLayout(0, t.size); err == nil {
		m.Heads, m.KVHeads, m.Inter, m.Vocab = l.Heads, l.KVHeads, l.Inter, l.Vocab
	}
	return m
}

// openGroup opens this node's GPUs (one rank each), joins them to the
// communicator and loads their shares of the weights; the environment is
// the first rank's GPU.
func (f *runFlags) openGroup(s runSetup, stderr io.Writer) (*runner.Group, report.Environment, error) {
	t := &f.tp
	ranks := t.localRanks()
	sel, err := f.backend.selection()
	if err != nil {
		return nil, report.Environment{}, err
	}
	versions, err := sel.Resolve(t.rankShape(s.cfg))
	if err != nil {
		return nil, report.Environment{}, usagef("--kernel: %v", err)
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return nil, report.Environment{}, fmt.Errorf("--tp-size: %w", err)
	}
	if n, err := drv.DeviceCount(); err != nil || n < len(ranks) {
		return nil, report.Environment{}, errors.Join(err, usagef("--tp-size %d over %d node(s) needs %d GPUs on this node, %d visible", t.size, t.nnodes, len(ranks), n))
	}
	nccl, err := cuda.OpenNCCL(t.ncclPath)
	if err != nil {
		return nil, report.Environment{}, fmt.Errorf("--tp-size: %w", err)
	}
	id, err := t.uniqueID(nccl, f.distWork(s, versions), stderr)
	if err != nil {
		return nil, report.Environment{}, err
	}
	src, closeSrc, err := f.weightSource(s)
	if err != nil {
		return nil, report.Environment{}, err
	}
	defer closeSrc()
	backends := &rankBackendsByRank{byRank: map[int]*gpu.Backend{}}
	open := f.rankBackends(s, ranks, sel, nccl, id, backends, stderr)
	loadStart := time.Now()
	group, err := runner.NewGroup(s.cfg, t.size, ranks, open, src, loadProgress(stderr, s.loadFormat))
	if err != nil {
		return nil, report.Environment{}, err
	}
	info := backends.byRank[ranks[0]].Info()
	fmt.Fprintf(stderr, "stepbench: %s, tensor-parallel size %d (ranks %v on this node's GPUs 0..%d, NCCL %s): %.2f GB of %s weights per GPU in %.1f s\n",
		s.cfg.Name, t.size, ranks, len(ranks)-1, nccl.Path(), float64(s.est.WeightBytes)/1e9, s.loadFormat, time.Since(loadStart).Seconds())
	describeBackend(info, versions, stderr)
	env := cudaEnvironment(info)
	env.KernelVersions, env.TPSize, env.TPRanks = versions, t.size, group.Ranks()
	for _, rank := range env.TPRanks {
		env.TPGPUUUIDs = append(env.TPGPUUUIDs, backends.byRank[rank].Info().Device.UUID)
	}
	return group, env, nil
}

// rankBackends opens rank r's backend on GPU r−ranks[0] of this node and
// joins it to the communicator. The first rank opens alone, so that the
// others find its compiled kernels in the cache instead of compiling too.
func (f *runFlags) rankBackends(s runSetup, ranks []int, sel kernels.Selection, nccl *cuda.NCCL, id cuda.NCCLUniqueID,
	backends *rankBackendsByRank, stderr io.Writer) runner.RankBackends {
	first, firstDone := ranks[0], make(chan struct{})
	return runner.RankBackends{
		Open: func(rank int) (runner.Backend, error) {
			opts := gpu.Options{Ordinal: rank - first, KernelsDir: f.backend.kernelsDir, NVRTCPath: f.backend.nvrtcPath,
				CublasPath: f.backend.cublasPath, DisableGraphs: f.backend.disableCUDAGraph, Kernels: sel}
			if rank == first {
				defer close(firstDone)
				opts.Progress = stderr
			} else {
				<-firstDone
			}
			be, err := gpu.New(opts)
			if err != nil {
				return nil, fmt.Errorf("--device cuda: %w", err)
			}
			if err := be.CheckMemory(s.est); err != nil {
				return nil, errors.Join(fmt.Errorf("--tp-size %d: GPU %d: %w", f.tp.size, rank-first, err), be.Close())
			}
			backends.mu.Lock()
			backends.byRank[rank] = be
			backends.mu.Unlock()
			return be, nil
		},
		Join: func(rank int, be runner.Backend) error {
			return be.(*gpu.Backend).JoinGroup(nccl, id, rank, f.tp.size)
		},
	}
}

// rankBackendsByRank are the backends the rank goroutines open.
type rankBackendsByRank struct {
	mu     sync.Mutex
	byRank map[int]*gpu.Backend
}

// weightSource is the run's weights: dummy from the seed, or the
// safetensors of --model-path (closeSrc releases them after loading).
func (f *runFlags) weightSource(s runSetup) (src runner.WeightSource, closeSrc func(), err error) {
	src.Seed = f.seed
	if s.loadFormat != "safetensors" {
		return src, func() {}, nil
	}
	st, err := runner.OpenSafetensors(f.model.modelPath)
	if err != nil {
		return src, nil, err
	}
	if err := st.Check(s.cfg); err != nil {
		st.Close()
		return src, nil, err
	}
	src.Reader = st
	return src, func() { st.Close() }, nil
}

// groupProfiler is a tensor-parallel run's profiler: the window opens and
// closes on every rank's context, and the region ranges go to every rank's
// thread (NVTX ranges are per thread).
type groupProfiler struct {
	g    *runner.Group
	nvtx *cuda.NVTX
}

func (p groupProfiler) backends(f func(*gpu.Profiler) error) error {
	return p.g.DoBackend(func(_ int, be runner.Backend) error { return f(be.(*gpu.Backend).Profiler(p.nvtx)) })
}

func (p groupProfiler) Start() error { return p.backends((*gpu.Profiler).Start) }
func (p groupProfiler) Stop() error  { return p.backends((*gpu.Profiler).Stop) }

func (p groupProfiler) Push(name string) {
	if p.nvtx.Attached() {
		_ = p.backends(func(pr *gpu.Profiler) error { pr.Push(name); return nil })
	}
}

func (p groupProfiler) Pop() {
	if p.nvtx.Attached() {
		_ = p.backends(func(pr *gpu.Profiler) error { pr.Pop(); return nil })
	}
}

// attachGroupProfiler is attachProfiler for a group: every rank's engine
// gets the op ranges.
func attachGroupProfiler(g *runner.Group, window *bench.ProfileWindow, stderr io.Writer) bench.Profiler {
	nvtx := openNVTX(stderr)
	if nvtx.Attached() {
		_ = g.Do(func(_ int, e *runner.Engine) error { e.Ranges = nvtx; return nil })
	}
	if window != nil {
		fmt.Fprintf(stderr, "stepbench: profiler window: %s of each shape's first timed iteration, on every rank\n", describeWindow(window))
	}
	if !nvtx.Attached() && window == nil {
		return nil
	}
	return groupProfiler{g: g, nvtx: nvtx}
}

// openNVTX attaches NVTX to the profiler that named its injection library,
// saying so (or why not) on stderr.
func openNVTX(stderr io.Writer) *cuda.NVTX {
	nvtx := cuda.OpenNVTX(os.Getenv)
	if nvtx.Attached() {
		fmt.Fprintf(stderr, "stepbench: NVTX ranges go to %s\n", nvtx.Source())
	} else if os.Getenv(cuda.NVTXInjectionVar) != "" {
		fmt.Fprintf(stderr, "stepbench: no NVTX ranges: %s\n", nvtx.Source())
	}
	return nvtx
}

// distWork is what every node of a multi-node run must do identically: the
// model's shape, the weights, the prompts, the shapes and iterations timed,
// the kernels (see distJob).
func (f *runFlags) distWork(s runSetup, versions string) string {
	c := s.cfg
	ints := func(v []int) string { return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]") }
	return strings.Join([]string{
		fmt.Sprintf("model=%s/h%d/l%d/heads%d/kv%d/v%d/i%d", c.Name, c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads,
			c.NumKeyValueHeads, c.VocabSize, c.IntermediateSize),
		"load-format=" + s.loadFormat,
		fmt.Sprintf("seed=%d", f.seed),
		"batch-size=" + ints(f.shapes.batch),
		"input-len=" + ints(f.shapes.input),
		"output-len=" + ints(f.shapes.output),
		fmt.Sprintf("num-iters=%d", f.sampling.numIters),
		fmt.Sprintf("num-iters-warmup=%d", f.warmupIters),
		fmt.Sprintf("correctness-test=%t", f.correctness),
		fmt.Sprintf("prompt-ids=%x", promptsHash(s.prompts)),
		"kernel=" + strings.ReplaceAll(versions, " ", ","),
		fmt.Sprintf("disable-cuda-graph=%t", f.backend.disableCUDAGraph),
	}, " ")
}

// promptsHash is FNV-1a of the prompts' token ids (0 lengths included).
func promptsHash(prompts [][]int32) uint64 {
	h := fnv.New64a()
	for _, p := range prompts {
		fmt.Fprint(h, len(p), p)
	}
	return h.Sum64()
}

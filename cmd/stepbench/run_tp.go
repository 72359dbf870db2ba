package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/telemetry/nvml"
	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/dist"
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
	// single: --tp-size 1 on the cpu backend, one rank without NCCL (vLLM's
	// habit of always passing --tensor-parallel-size).
	single bool
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
func (t *tpFlags) grouped(fs *pflag.FlagSet) bool {
	return !t.single && (fs.Changed("tp-size") || t.nnodes > 1)
}

// oneRankOn makes --tp-size 1 on one node a plain run on the cpu backend,
// which has no NCCL to go through.
func (t *tpFlags) oneRankOn(device string) {
	t.single = device == "cpu" && t.size == 1 && t.nnodes == 1
}

// job is this node's part of the run, for the rendezvous.
func (t *tpFlags) job(work string) dist.Job {
	return dist.Job{NNodes: t.nnodes, NodeRank: t.nodeRank, TPSize: t.size, Work: work}
}

// check validates the flags that need no model.
func (t *tpFlags) check(fs *pflag.FlagSet, f *runFlags) error {
	t.oneRankOn(f.device)
	if err := t.checkCounts(fs); err != nil || !t.grouped(fs) {
		return err
	}
	return t.checkModes(fs, f)
}

// checkCounts validates the sizes, the nodes and the flags that need a
// group (run's and ab's).
func (t *tpFlags) checkCounts(fs *pflag.FlagSet) error {
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
	}
	return nil
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

// rankLayout is the share of the model one GPU holds: rank 0's of a
// tensor-parallel run, else the whole model.
func (t *tpFlags) rankLayout(cfg runner.Config, grouped bool) runner.TPLayout {
	if grouped {
		if l, err := cfg.TPLayout(0, t.size); err == nil {
			return l
		}
	}
	return cfg.FullLayout()
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

// runGroup is runCmd for a tensor-parallel run.
func (f *runFlags) runGroup(fs *pflag.FlagSet, s runSetup, stdout, stderr io.Writer) error {
	verification, err := f.checkRankKernels(s, stderr)
	if err != nil {
		return err
	}
	stopWatch := f.watchSetup(s, stderr) // every rank's compile
	group, env, err := f.openGroup(s, stderr)
	stopWatch()
	if err != nil {
		return err
	}
	defer group.Close()
	if err := group.SetKVOptions(f.kv.options(f.seed)); err != nil {
		return err
	}
	if err := f.kv.applyKVScales(group, s.kvScales, f.calibrationInputs(s), stderr); err != nil {
		return err
	}
	if f.correctness {
		if f.raggedBatch {
			return f.runRaggedCorrectness(group, s, stdout)
		}
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
func (f *runFlags) openGroup(s runSetup, stderr io.Writer) (*gpu.Group, report.Environment, error) {
	t := &f.tp
	sel, err := f.backend.selection()
	if err != nil {
		return nil, report.Environment{}, err
	}
	versions, err := sel.ResolveKV(t.rankShape(s.cfg), f.kv.tabled(), f.kv.dtype)
	if err != nil {
		return nil, report.Environment{}, usagef("--kernel: %v", err)
	}
	job := t.job(f.distWork(s, versions).String())
	ranks := job.LocalRanks()
	if err := gpu.CheckGPUCount(t.size, len(ranks)); errors.Is(err, gpu.ErrTooFewGPUs) {
		return nil, report.Environment{}, usageError{err}
	} else if err != nil {
		return nil, report.Environment{}, err
	}
	nccl, err := cuda.OpenNCCL(t.ncclPath)
	if err != nil {
		return nil, report.Environment{}, fmt.Errorf("--tp-size: %w", err)
	}
	id, err := gpu.GroupID(nccl, job, t.distInitAddr, t.distTimeout, stderr)
	if err != nil {
		return nil, report.Environment{}, err
	}
	src, closeSrc, err := openWeights(s.loadFormat, f.model.modelPath, f.seed, s.cfg)
	if err != nil {
		return nil, report.Environment{}, err
	}
	defer closeSrc()
	loadStart := time.Now()
	group, err := gpu.OpenGroup(gpu.GroupOptions{Config: s.cfg, Size: t.size, Ranks: ranks, Backend: f.backend.options(sel),
		Progress: stderr, NCCL: nccl, ID: id, Estimate: s.est, Weights: src, LoadProgress: loadProgress(stderr, s.loadFormat)})
	if err != nil {
		return nil, report.Environment{}, err
	}
	info := group.Info(ranks[0])
	fmt.Fprintf(stderr, "stepbench: %s, tensor-parallel size %d (ranks %v on this node's GPUs 0..%d, NCCL %s): %.2f GB of %s weights per GPU in %.1f s\n",
		s.cfg.Name, t.size, ranks, len(ranks)-1, nccl.Path(), float64(s.est.WeightBytes)/1e9, s.loadFormat, time.Since(loadStart).Seconds())
	describeBackend(info, versions, stderr)
	env := cudaEnvironment(info)
	env.KernelVersions, env.TPSize, env.TPRanks, env.TPGPUUUIDs = versions, t.size, group.Ranks(), group.GPUUUIDs()
	return group, env, nil
}

// attachGroupProfiler is attachProfiler for a group: every rank's engine
// gets the op ranges.
func attachGroupProfiler(g *gpu.Group, window *bench.ProfileWindow, stderr io.Writer) bench.Profiler {
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
	return g.Profiler(nvtx)
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

// distWork is what every node of a multi-node run must do identically.
func (f *runFlags) distWork(s runSetup, versions string) dist.Work {
	return dist.Work{Model: s.cfg, LoadFormat: s.loadFormat, Seed: f.seed,
		BatchSizes: f.shapes.batch, InputLens: f.shapes.input, OutputLens: f.shapes.output,
		NumIters: f.sampling.numIters, WarmupIters: f.warmupIters, CorrectnessTest: f.correctness,
		Prompts: s.prompts, KernelVersions: versions, DisableCUDAGraph: f.backend.disableCUDAGraph,
		KVCache: f.kv.options(f.seed).String() + " " + f.kv.contextLens + " " + f.kv.fill}
}

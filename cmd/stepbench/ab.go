package main

import (
	"errors"
	"fmt"
	"io"

	"stepbench/bench"
	"stepbench/runner"
)

// openCUDAWithKernels opens a cuda backend, with eager or captured decode
// steps as flags say, whose kernels come from dir ("" = the embedded ones).
func openCUDAWithKernels(dir string, flags backendFlags, stderr io.Writer) (*runner.CUDA, error) {
	be, err := runner.NewCUDA(runner.CUDAOptions{KernelsDir: dir, NVRTCPath: flags.nvrtcPath, CublasPath: flags.cublasPath,
		DisableGraphs: flags.disableCUDAGraph, Progress: stderr})
	if err != nil {
		return nil, err
	}
	return be, nil
}

// abCmd runs an interleaved A/B comparison of two kernel sets on the same
// weights: stepbench ab --kernels-dir A [--baseline-kernels-dir B].
func abCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ab", stderr)
	var model modelFlags
	var shapes shapeFlags
	model.register(fs)
	shapes.register(fs, []int{1024}, []int{16})
	var backend backendFlags
	fs.BoolVar(&backend.disableCUDAGraph, "disable-cuda-graph", false, "run decode steps eagerly instead of replaying a captured CUDA graph")
	registerLibraryFlags(fs, &backend.nvrtcPath, &backend.cublasPath)
	kernelsA := fs.String("kernels-dir", "", "candidate (A): compile the kernels of this directory")
	kernelsB := fs.String("baseline-kernels-dir", "", "baseline (B): compile the kernels of this directory (default: the embedded kernels)")
	numIters := fs.Int("num-iters", 10, "timed iterations per shape and arm, interleaved A B A B …")
	warmup := fs.Int("num-iters-warmup", 1, "untimed warmup iterations per shape and arm")
	seed := fs.Uint64("seed", 42, "seed of the dummy weights and the prompts (both arms share them)")
	format := fs.String("format", "markdown", "output: markdown, csv or json")
	alpha := fs.Float64("alpha", 0.05, "significance level of the Mann-Whitney U test")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *kernelsA == "" {
		return usagef("--kernels-dir A is required")
	}
	if *numIters < 1 || *warmup < 0 || *alpha <= 0 || *alpha >= 1 {
		return usagef("--num-iters >= 1, --num-iters-warmup >= 0 and --alpha in (0, 1) please")
	}
	writer, err := compareWriter(*format)
	if err != nil {
		return err
	}
	cfg, err := model.resolve()
	if err != nil {
		return err
	}
	if err := shapes.validate(cfg); err != nil {
		return err
	}
	if why := probeGPU(); why != nil {
		return fmt.Errorf("needs a GPU: %w", why)
	}
	// Both arms hold the weights and their own run buffers: check they fit
	// twice before loading anything.
	est := runner.EstimateMemory(cfg, maxInt(shapes.batch), maxInt(shapes.batch)*maxInt(shapes.input), maxInt(shapes.input)+maxInt(shapes.output))
	fmt.Fprintf(stderr, "stepbench ab: two copies of %.2f GB of weights\n", 2*float64(est.WeightBytes)/1e9)
	engines := make([]*runner.Engine, 2)
	for i, dir := range []string{*kernelsA, *kernelsB} {
		be, err := openCUDAWithKernels(dir, backend, stderr)
		if err != nil {
			return fmt.Errorf("arm %c (kernels %q): %w", "AB"[i], dir, err)
		}
		defer be.Close()
		// Arm A still needs room for B's weights; both arms' run buffers
		// are allocated later, at Begin.
		need := runner.MemoryEstimate{WeightBytes: int64(2-i) * est.WeightBytes,
			KVCacheBytes: 2 * est.KVCacheBytes, ActivationBytes: 2 * est.ActivationBytes}
		if err := be.CheckMemory(need); err != nil {
			return fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		e, err := runner.NewEngine(cfg, be, runner.WeightSource{Seed: *seed}, loadProgress(stderr, "dummy"))
		if err != nil {
			return fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		defer e.Close()
		engines[i] = e
	}
	if err := bench.ArmsAgree(engines[0], engines[1], 1, min(64, shapes.input[0]), *seed, 1e-2); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "stepbench ab: both arms compute the same logits; timing A B A B …")
	opt := bench.Options{BatchSizes: shapes.batch, InputLens: shapes.input, OutputLens: shapes.output,
		NumIters: *numIters, WarmupIters: *warmup, Seed: *seed, VocabSize: cfg.VocabSize, Progress: stderr}
	baseline, candidate, runErr := bench.RunAB(bench.ABTarget{A: engines[0], B: engines[1]}, opt)
	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	}
	if len(candidate) > 0 {
		errs = append(errs, writer(stdout, bench.CompareShapes(baseline, candidate, bench.CompareOptions{Alpha: *alpha})))
	}
	return errors.Join(errs...)
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

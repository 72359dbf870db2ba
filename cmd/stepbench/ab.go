package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/compare"
	"stepbench/bench/report"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// openCUDAWithKernels opens a cuda backend, with eager or captured decode
// steps as flags say, whose kernels come from dir ("" = the embedded ones)
// in the versions sel chooses.
func openCUDAWithKernels(dir string, sel kernels.Selection, ops map[string]string, flags backendFlags, stderr io.Writer) (*gpu.Backend, error) {
	be, err := gpu.New(gpu.Options{Ops: ops, KernelsDir: dir, IncludeDirs: flags.includeDirs, NVRTCPath: flags.nvrtcPath, CublasPath: flags.cublasPath,
		DisableGraphs: flags.disableCUDAGraph, Kernels: sel, KV: flags.kv, Progress: stderr})
	if err != nil {
		return nil, err
	}
	return be, nil
}

// abFlags are the flags of 'stepbench ab': run's model, weight,
// quantization, prompt, serving and tensor-parallel flags (the same
// definitions), and two arms of kernels.
type abFlags struct {
	model              modelFlags
	shapes             shapeFlags
	sampling           samplingFlags
	weights            weightFlags  // --load-format, --quantization
	text               textFlags    // --prompt-file only
	serving            servingFlags // vLLM's and SGLang's habits
	tp                 tpFlags
	kv                 kvFlags       // A's layout, and both arms' lengths
	kvB                kvFlags       // B's layout (baselineKV over kv)
	kvScaleIn          kvScaleInputs // an FP8 cache's scales, as far as known before loading
	baselineKV         baselineKV    // --baseline-kv-layout, --baseline-page-size, --baseline-page-order
	verdict            verdictFlags
	backend            backendFlags
	jsonOut            string // --json-out: the comparison as JSON
	kernelsA, kernelsB string
	versionsA          []string // --kernel: candidate's kernel versions
	versionsB          []string // --baseline-kernel: baseline's
	selA, selB         kernels.Selection
	opItemsA, opItemsB []string // --op, --baseline-op
	opsA, opsB         map[string]string
	// versionsOfA and versionsOfB are the versions each arm runs (Resolve).
	versionsOfA, versionsOfB string
	warmup                   int
	seed                     uint64
	noVerify                 bool
	emulated                 bool          // the arms run on the emulated device
	gates                    [2]kernelGate // A's and B's
	loadFormat               string        // resolved: dummy or safetensors
	prompts                  [][]int32     // --prompt-file's, tokenized
	textSource               *bench.TextPrompts
	stepTimeout              stepTimeoutFlag // every blocking call of the arms
	sweep                    []bench.Shape   // the sweep, lengths resolved
}

func (f *abFlags) register(fs *pflag.FlagSet) {
	f.model.register(fs)
	f.shapes.register(fs, []int{1024}, []int{16})
	f.weights.register(fs)
	registerPromptFile(fs, &f.text, "")
	f.tp.register(fs)
	f.kv.register(fs, true)
	f.baselineKV.register(fs)
	fs.StringVar(&f.jsonOut, "json-out", "", "also write the comparison as JSON (what --format json prints: every row, the header, the verdicts) to this file, atomically")
	fs.BoolVar(&f.backend.disableCUDAGraph, "disable-cuda-graph", false, "run decode steps eagerly instead of replaying a captured CUDA graph")
	registerLibraryFlags(fs, &f.backend.nvrtcPath, &f.backend.cublasPath)
	registerIncludeFlag(fs, &f.backend.includeDirs)
	fs.StringVar(&f.kernelsA, "kernels-dir", "", "candidate (A): compile the kernels of this directory (default: the embedded kernels)")
	fs.StringVar(&f.kernelsB, "baseline-kernels-dir", "", "baseline (B): compile the kernels of this directory (default: the embedded kernels)")
	registerKernelFlag(fs, &f.versionsA, "kernel", "candidate (A): ")
	registerKernelFlag(fs, &f.versionsB, "baseline-kernel", "baseline (B): ")
	registerOpFlag(fs, &f.opItemsA, "op", "candidate (A): ")
	registerOpFlag(fs, &f.opItemsB, "baseline-op", "baseline (B): ")
	f.sampling.register(fs)
	fs.IntVar(&f.warmup, "num-iters-warmup", 1, "untimed warmup iterations per shape and arm")
	fs.Uint64Var(&f.seed, "seed", 42, "seed of the dummy weights and the prompts (both arms share them)")
	registerNoVerify(fs, &f.noVerify)
	f.verdict.register(fs, "least change in percent that FASTER/SLOWER may claim (the interval must lie beyond it), and the band of SAME (default ±1%); in [0, 100)")
	f.serving.register(fs)
	f.stepTimeout.register(fs, "ab")
}

// abCmd runs an interleaved A/B comparison of two kernel sets on the same
// weights: stepbench ab --kernels-dir A [--baseline-kernels-dir B], or two
// versions of the embedded kernels: --kernel attn_prefill=2
// --baseline-kernel attn_prefill=1. Exit
// codes as compare's, and 130 when interrupted (the finished pairs are
// compared and printed).
func abCmd(args []string, stdout, stderr io.Writer) error {
	stderr = newProgressLine(stderr, false) // one status line on a terminal, nothing per pair elsewhere
	defer statusOf(stderr).Status("")
	fs := newFlagSet("ab", stderr)
	var f abFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.stepTimeout.check(); err != nil {
		return err
	}
	tiny := f.model.fitEmulated(fs)
	writer, cfg, err := f.check(fs, stderr)
	if err != nil {
		return err
	}
	if tiny {
		fmt.Fprintln(stderr, "stepbench: "+emulatedNote)
	}
	if why := probeGPU(); why != nil {
		return fmt.Errorf("needs a GPU: %w", why)
	}
	// A call past --step-timeout aborts the arms' collectives (a group's
	// peers then fail instead of waiting) before the process ends.
	var loaded atomic.Pointer[[]abArm]
	defer watchSteps("ab", f.stepTimeout.resolve(cfg, slices.Max(f.shapes.batch), slices.Max(f.shapes.input), driverEmulated()), stderr, func() {
		for _, arm := range *cmp.Or(loaded.Load(), &[]abArm{}) {
			if a, ok := arm.(collectivesAborter); ok {
				abortWithin(a, 10*time.Second)
			}
		}
	})()
	load := f.loadArms
	if f.tp.grouped(fs) {
		load = f.loadGroupArms
	}
	arms, header, closeAll, err := load(cfg, stderr)
	defer closeAll()
	if err != nil {
		return err
	}
	loaded.Store(&arms)
	checked, err := f.checkGenerations(arms, cfg, stderr)
	if err != nil {
		return err
	}
	header = append(header, checked...)
	fmt.Fprintln(stderr, "stepbench ab: timing pairs A B, B A, …")
	return f.runArms(bench.ABTarget{A: arms[0], B: arms[1]}, cfg, header, writer, stdout, stderr)
}

// abArm is one arm of an A/B run: an engine on one GPU, or a
// tensor-parallel group.
type abArm interface {
	bench.Target
	bench.GenerationArm
}

// abMaxLogitsRelErr bounds the arms' logits at every step of the
// generation check: the end-to-end bound (verify's against the cpu backend),
// since two kernel sets' roundings differ many bf16 steps deep; a kernel
// that drops a key or a tile is far beyond it.
const abMaxLogitsRelErr = endToEndMaxRelErr

// checkGenerations compares the arms over the whole generation of every
// shape before any is timed (bench.CheckGeneration), and returns the line
// the report's header shows.
func (f *abFlags) checkGenerations(engines []abArm, cfg runner.Config, stderr io.Writer) ([]string, error) {
	if f.noVerify {
		return []string{"UNVERIFIED: --no-verify: the arms' logits were not compared before timing; A may compute another model"}, nil
	}
	var worst bench.GenerationCheck
	steps := 0
	for _, shape := range f.sweep {
		c := bench.CheckGeneration(engines[0], engines[1], shape, f.seed, cfg.VocabSize, abMaxLogitsRelErr)
		if c.Err != nil {
			return nil, fmt.Errorf("%w (nothing was timed; --no-verify times it anyway)", c.Err)
		}
		steps += c.Steps
		if c.WorstRelErr >= worst.WorstRelErr {
			worst = c
		}
	}
	line := fmt.Sprintf("checked before timing: A's logits against B's at the prefill and every decode step of every shape (%d steps, both fed B's tokens), "+
		"worst relative error %.2e at %s of %s (bound %g)", steps, worst.WorstRelErr, worst.WorstStep, worst.Shape.Label(), abMaxLogitsRelErr)
	fmt.Fprintln(stderr, "stepbench ab: "+line)
	return []string{line}, nil
}

func (f *abFlags) check(fs *pflag.FlagSet, stderr io.Writer) (func(io.Writer, compare.Result) error, runner.Config, error) {
	var cfg runner.Config
	if err := f.checkArms(); err != nil {
		return nil, cfg, err
	}
	if err := f.kv.check(fs); err != nil {
		return nil, cfg, err
	}
	var err error
	if f.kvB, err = f.baselineKV.resolve(fs, f.kv); err != nil {
		return nil, cfg, err
	}
	for _, check := range []func() error{f.weights.check, func() error { return f.serving.check(fs) },
		func() error { return f.tp.checkCounts(fs) }, func() error { return f.sampling.check(fs) }} {
		if err := check(); err != nil {
			return nil, cfg, err
		}
	}
	switch {
	case f.warmup < 0:
		return nil, cfg, usagef("--num-iters-warmup: %d must not be negative", f.warmup)
	case f.tp.nnodes > 1:
		return nil, cfg, usagef("--nnodes %d: ab runs both arms in one process, on one node's GPUs", f.tp.nnodes)
	case f.tp.grouped(fs) && (len(f.opsA) > 0 || len(f.opsB) > 0):
		return nil, cfg, usagef("--op, --baseline-op: op libraries run on one GPU, not with --tp-size")
	}
	writer, err := f.verdict.check(fs)
	if err != nil {
		return nil, cfg, err
	}
	cfg, err = f.checkModel(fs, stderr)
	return writer, cfg, err
}

// checkArms parses and plans both arms' kernels: their versions, overlays,
// headers and op libraries, and what must be checked before timing.
func (f *abFlags) checkArms() error {
	var err error
	if f.selA, err = kernels.ParseSelection(f.versionsA); err != nil {
		return usagef("--kernel: %v", err)
	}
	if f.selB, err = kernels.ParseSelection(f.versionsB); err != nil {
		return usagef("--baseline-kernel: %v", err)
	}
	for _, dir := range []string{f.kernelsA, f.kernelsB} {
		if err := checkKernelsDir(dir); err != nil {
			return err
		}
	}
	if err := checkIncludeDirs(f.backend.includeDirs); err != nil {
		return err
	}
	if f.opsA, err = parseOps("--op", f.opItemsA); err != nil {
		return err
	}
	if f.opsB, err = parseOps("--baseline-op", f.opItemsB); err != nil {
		return err
	}
	if f.gates[0], err = planGate("--kernels-dir", f.kernelsA, "--kernel", f.selA, f.noVerify); err != nil {
		return err
	}
	if f.gates[1], err = planGate("--baseline-kernels-dir", f.kernelsB, "--baseline-kernel", f.selB, f.noVerify); err != nil {
		return err
	}
	f.gates[0].includes, f.gates[1].includes = f.backend.includeDirs, f.backend.includeDirs
	f.gates[0].withOps("--op", f.opsA)
	f.gates[1].withOps("--baseline-op", f.opsB)
	return nil
}

// checkModel resolves the model, its weights and quantization, checks the
// shapes and the tensor-parallel split, reads --prompt-file and checks
// --json-out, all before anything is loaded.
func (f *abFlags) checkModel(fs *pflag.FlagSet, stderr io.Writer) (runner.Config, error) {
	cfg, err := f.model.resolve()
	if err != nil {
		return cfg, err
	}
	if cfg, err = applyQuantization(cfg, f.weights.quantization); err != nil {
		return cfg, err
	}
	if f.loadFormat, err = f.weights.resolve(f.model.modelPath); err != nil {
		return cfg, err
	}
	if f.kvScaleIn, err = f.kv.readKVScales(f.loadFormat, f.model.modelPath, cfg); err != nil {
		return cfg, err
	}
	if err := f.resolveVersions(f.tp.rankShape(cfg)); err != nil {
		return cfg, err
	}
	checked := f.shapes
	if f.kv.contextLens != "" {
		checked.input = []int{1} // the lengths are checked as they are drawn (sweep)
	}
	if err := checked.validate(cfg); err != nil {
		return cfg, err
	}
	if f.sweep, err = sweep(&f.kv, f.shapes, f.seed, cfg); err != nil {
		return cfg, err
	}
	if err := f.serving.checkShapes(fs, cfg, f.shapes, f.backend.disableCUDAGraph); err != nil {
		return cfg, err
	}
	if f.tp.grouped(fs) {
		if err := f.tp.checkModel(cfg, "cuda"); err != nil {
			return cfg, err
		}
	}
	if f.text.promptFile != "" {
		if f.prompts, err = timingPrompts(&f.text, f.serving.tokenizerDir(f.model.modelPath), cfg, stderr); err != nil {
			return cfg, err
		}
		if f.textSource, err = bench.NewTextPrompts(f.prompts, f.seed); err != nil {
			return cfg, usagef("--prompt-file: %v", err)
		}
	}
	var outputs, inputs []report.OutputFile
	if f.jsonOut != "" {
		outputs = append(outputs, report.OutputFile{Label: "--json-out", Path: f.jsonOut})
	}
	if f.text.promptFile != "" {
		inputs = append(inputs, report.OutputFile{Label: "--prompt-file", Path: f.text.promptFile})
	}
	if err := report.CheckOutputs(outputs, inputs); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// loadArms loads the two arms, each checked (its kernelGate) before its
// weights load, both from the same weights. Both hold the weights and
// their own run buffers: each arm checks they fit twice before loading
// anything. It returns the lines the comparison's header shows about the
// arms and their weights.
func (f *abFlags) loadArms(cfg runner.Config, stderr io.Writer) ([]abArm, []string, func(), error) {
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	est := f.armsEstimate(cfg.FullLayout(), cfg)
	fmt.Fprintf(stderr, "stepbench ab: two copies of %s of weights (%s)\n", report.Bytes(est.WeightBytes), report.Bytes(2*est.WeightBytes))
	src, closeSrc, err := openWeights(f.loadFormat, f.model.modelPath, f.seed, cfg)
	if err != nil {
		return nil, nil, closeAll, err
	}
	defer closeSrc()
	arms := make([]abArm, 2)
	var header []string
	sels := []kernels.Selection{f.selA, f.selB}
	ops := []map[string]string{f.opsA, f.opsB}
	for i, dir := range []string{f.kernelsA, f.kernelsB} {
		if err := probeOpLibraries([]string{"--op", "--baseline-op"}[i], ops[i], f.backend); err != nil {
			return nil, header, closeAll, err
		}
		flags, kv := f.backend, f.armKV(i).options(f.seed)
		flags.kv = &kv // the arm's layout, for its op libraries' caps
		be, err := openCUDAWithKernels(dir, sels[i], ops[i], flags, stderr)
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], openFailure(fmt.Sprintf("kernels %q, versions %s", dir, sels[i]), err))
		}
		fmt.Fprintf(stderr, "stepbench ab: arm %c: kernels %s, versions %s\n", "AB"[i], kernelsOrigin(dir), []string{f.versionsOfA, f.versionsOfB}[i])
		closers = append(closers, be.Close)
		lines, err := f.checkArm(i, be, cfg, stderr)
		header = append(header, lines...)
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		// Arm A still needs room for B's weights; both arms' run buffers
		// are allocated later, at Begin.
		need := runner.MemoryEstimate{WeightBytes: int64(2-i) * est.WeightBytes,
			KVCacheBytes: 2 * est.KVCacheBytes, ActivationBytes: 2 * est.ActivationBytes}
		if err := be.CheckMemory(need); err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		e, err := runner.NewEngine(cfg, be, src, loadProgress(stderr, f.loadFormat))
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		closers = append(closers, e.Close)
		if err := e.SetKVOptions(f.armKV(i).options(f.seed)); err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		if err := f.armKVScales(i, e, cfg, stderr); err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		arms[i] = e
	}
	return arms, append(header, f.inputLines(cfg)...), closeAll, nil
}

// checkArm checks arm i's kernels on be before its weights load (and that
// be can run an FP8 model), and returns the header's lines about them.
func (f *abFlags) checkArm(i int, be *gpu.Backend, cfg runner.Config, stderr io.Writer) ([]string, error) {
	var lines []string
	if i == 0 && be.Info().Emulated != "" {
		f.emulated = true
		lines = append(lines, report.EmulatedNote)
	}
	if err := checkFP8Device(be, cfg); err != nil {
		return lines, err
	}
	v, err := f.gates[i].check(be, cfg, runGateShapes(f.sweep, f.armKV(i).options(f.seed)), f.seed, stderr)
	if err != nil {
		return lines, err
	}
	lines = append(lines, armVerificationLine("AB"[i], v))
	for _, line := range v.SourceLines() {
		lines = append(lines, fmt.Sprintf("arm %c: %s", "AB"[i], line))
	}
	return lines, nil
}

// inputLines say what both arms ran on: the weights and the prompts.
func (f *abFlags) inputLines(cfg runner.Config) []string {
	lines := []string{"both arms: " + weightsLine(f.loadFormat, f.model.modelPath, f.seed, cfg)}
	if a, b := f.kv.options(f.seed).String(), f.kvB.options(f.seed).String(); a != b {
		lines = append(lines, fmt.Sprintf("arm A: KV cache %s; arm B: KV cache %s", a, b))
	} else {
		lines = append(lines, "both arms: KV cache "+a)
	}
	if f.kv.contextLens != "" || f.kv.fill == bench.KVFillSynthetic {
		lines = append(lines, "both arms: "+strings.TrimPrefix(f.kv.describe(f.seed), "KV cache "+f.kv.options(f.seed).String()+", "))
	}
	if f.textSource != nil {
		tokens := 0
		for _, p := range f.prompts {
			tokens += len(p)
		}
		lines = append(lines, fmt.Sprintf("both arms: prompts cut from the text of %s (%d prompts, %d tokens), the same rows for A and B",
			f.text.promptFile, len(f.prompts), tokens))
	} else {
		lines = append(lines, fmt.Sprintf("both arms: random prompt ids from seed %d, the same for A and B, never reused across iterations", f.seed))
	}
	return lines
}

// armVerificationLine says what the arm's kernels are and how they were checked.
func armVerificationLine(arm byte, v report.Verification) string {
	switch v.Status {
	case report.VerificationSkipped:
		return fmt.Sprintf("UNVERIFIED: arm %c: %s, not checked before timing (--no-verify)", arm, v.Kernels)
	case report.VerificationPassed:
		return fmt.Sprintf("arm %c: %s, checked against the Go twins at the run's shapes before timing: %d checks passed, worst relative error %.2e",
			arm, v.Kernels, v.Checks, v.WorstRelErr)
	}
	if v.Kernels == "" {
		return fmt.Sprintf("arm %c: the embedded kernels at their default versions", arm)
	}
	return fmt.Sprintf("arm %c: %s: the embedded kernels, nothing to check", arm, v.Kernels)
}

// runArms times the pairs and prints the paired comparison (B = old, A =
// new), also after an interruption (exit 130) for the pairs that finished.
func (f *abFlags) runArms(pair bench.ABTarget, cfg runner.Config, header []string, writer func(io.Writer, compare.Result) error, stdout, stderr io.Writer) error {
	in := newInterruption()
	defer in.stop()
	opt := bench.Options{BatchSizes: f.shapes.batch, InputLens: f.shapes.input, OutputLens: f.shapes.output,
		WarmupIters: f.warmup, Seed: f.seed, VocabSize: cfg.VocabSize, Progress: stderr, Status: statusOf(stderr).Status, Context: in.ctx}
	if f.textSource != nil {
		opt.Prompts = f.textSource
	}
	f.kv.apply(&opt, cfg)
	f.sampling.options(&opt)
	baseline, candidate, runErr := bench.RunAB(pair, opt)
	errs := []error{runErr}
	if len(candidate) > 0 {
		res, err := compare.Paired(baseline, candidate, f.verdict.options())
		res.Header, res.Emulated = header, f.emulated
		if err == nil && f.jsonOut != "" {
			if err = compare.WriteJSONFile(f.jsonOut, res); err == nil {
				fmt.Fprintf(stderr, "stepbench ab: wrote %s\n", f.jsonOut)
			} else {
				err = fmt.Errorf("--json-out: %w", err)
			}
		}
		if err == nil {
			err = f.verdict.outcome(stdout, writer, res)
		}
		errs = append(errs, err)
	}
	sig := in.signal()
	switch {
	case sig != nil && errors.Is(runErr, bench.ErrInterrupted):
		errs[0] = fmt.Errorf("%v: stopped at a timed-region boundary; the finished pairs are compared above", sig)
		return exitError{exitInterrupted, errors.Join(errs...)}
	case runErr != nil && len(errs) > 1 && errs[1] != nil:
		// A failure is exit 1, whatever the finished pairs say.
		return errors.Join(runErr, errors.New(errs[1].Error()))
	}
	return errors.Join(errs...)
}

// resolveVersions finds the kernel versions each arm runs at the model's
// shapes and refuses two arms that would run the same kernels.
func (f *abFlags) resolveVersions(shape kernels.ModelShape) error {
	var err error
	if f.versionsOfA, err = f.selA.ResolveKV(shape, f.kv.tabled(), f.kv.dtype); err != nil {
		return usagef("--kernel: %v", err)
	}
	if f.versionsOfB, err = f.selB.ResolveKV(shape, f.kvB.tabled(), f.kvB.dtype); err != nil {
		return usagef("--baseline-kernel: %v", err)
	}
	sameKV := f.kv.options(f.seed).String() == f.kvB.options(f.seed).String()
	if f.kernelsA == "" && f.kernelsB == "" && f.versionsOfA == f.versionsOfB && maps.Equal(f.opsA, f.opsB) && sameKV {
		return usagef("the arms are the same (both run %s): give --kernels-dir A (and --baseline-kernels-dir B), --kernel OP=V and --baseline-kernel OP=V that differ, --op OP=LIB, or a --baseline-kv-layout or --baseline-page-size of its own", f.versionsOfA)
	}
	return nil
}

// armKV is arm i's layout flags: A's (--kv-layout ...) or B's.
func (f *abFlags) armKV(i int) *kvFlags {
	if i == 0 {
		return &f.kv
	}
	return &f.kvB
}

// armsEstimate is what one arm needs on a GPU holding l's share: the
// larger of the arms' caches (their layouts may differ).
func (f *abFlags) armsEstimate(l runner.TPLayout, cfg runner.Config) runner.MemoryEstimate {
	a := kvEstimate(cfg, l, f.sweep, f.kv.options(f.seed))
	b := kvEstimate(cfg, l, f.sweep, f.kvB.options(f.seed))
	a.KVCacheBytes, a.ActivationBytes = max(a.KVCacheBytes, b.KVCacheBytes), max(a.ActivationBytes, b.ActivationBytes)
	return a
}

// armKVScales sets arm i's FP8 cache scales: arm A's from the checkpoint
// or calibrated on it, arm B's A's (so that the arms differ in their
// kernels only).
func (f *abFlags) armKVScales(i int, e kvScaled, cfg runner.Config, stderr io.Writer) error {
	if i == 0 {
		return f.kv.applyKVScales(e, f.kvScaleIn, func() ([]runner.SeqSpec, []int32, error) {
			return calibrationInputs(f.sweep, nil, f.textSource, f.seed, cfg.VocabSize)
		}, stderr)
	}
	if f.kv.scaleReport == nil {
		return nil
	}
	f.kvB.scaleReport = f.kv.scaleReport
	return e.SetKVScales(runner.KVScales{K: f.kv.scaleReport.K, V: f.kv.scaleReport.V})
}

package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"stepbench/bench/compare"
	"stepbench/kernels"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench/kernelbench"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// kernelFlags are the flags of 'stepbench kernel'.
type kernelFlags struct {
	model                               modelFlags
	backend                             backendFlags
	batch, inputLen                     int
	shapeText, format, gpuName, jsonOut string
	minSamples, maxSamples, l2Bytes     int
	maxNoise                            float64
	timeout                             time.Duration
	noVerify                            bool
	// The baseline arm of an op-level A/B: --baseline-kernels-dir,
	// --baseline-kernel, --baseline-op.
	baselineDir     string
	baselineKernel  []string
	baselineOps     []string
	baselineBuiltin bool
	verdict         verdictFlags
	kv              kvFlags // --kv-layout, --page-size, --page-order, --context-lens
}

func (f *kernelFlags) register(fs *pflag.FlagSet) {
	f.model.register(fs)
	f.backend.register(fs)
	fs.IntVar(&f.batch, "batch-size", 1, "batch size of the model shapes")
	fs.IntVar(&f.inputLen, "input-len", 1024, "prompt length: prefill runs seq=input-len, decode seq=1 at pos=input-len")
	fs.StringVar(&f.shapeText, "shape", "", "instead of the model shapes: batch=B,seq=S,pos=P; seq and pos take a list per sequence, a ragged step through the block table: lens=128:4096:512 (a decode step at each length, pos's list), seq=128:4096:512 (a varlen prefill)")
	f.kv.register(fs, false)
	fs.StringVar(&f.kv.contextLens, "context-lens", "", "instead of --input-len, a ragged batch's model shapes: its varlen prefill and the decode step after it, through the block table: a list 128,4096,512 (the batch size is its length), uniform:LO-HI or normal:MEAN,SD (drawn for --batch-size with seed 42, as run --seed 42 draws them)")
	fs.IntVar(&f.minSamples, "min-samples", 10, "cold samples to take at least")
	fs.IntVar(&f.maxSamples, "max-samples", 100000, "cold samples to take at most")
	fs.Float64Var(&f.maxNoise, "max-noise", 0.005, "stop when the median's 95% interval half-width is at most this, relative (with a baseline: of the median pair ratio)")
	fs.DurationVar(&f.timeout, "timeout", 15*time.Second, "stop sampling a shape after this long")
	fs.IntVar(&f.l2Bytes, "l2-flush-bytes", 0, "bytes written before every sample to flush the L2 (0: the GPU's L2 size, 128 MiB if it does not say)")
	fs.StringVar(&f.format, "format", "table", "output: table or gobench; with a baseline, the comparison: markdown, csv or json")
	fs.BoolVar(&f.noVerify, "no-verify", false, noVerifyHelp)
	fs.StringVar(&f.gpuName, "gpu", report.RoofAuto, "the roof of the attainment column: auto (a cached calibration of this GPU, else its clocks, else the datasheet preset matching its name), none, or a preset's datasheet: "+joinNames(roofline.PresetNames()))
	fs.StringVar(&f.jsonOut, "json-out", "", "write the native report of the op's samples (kernel_results; with a baseline also baseline_kernel_results), which compare reads")
	fs.StringVar(&f.baselineDir, "baseline-kernels-dir", "", "op-level A/B: the baseline (B) compiles the kernels of this directory (A is --kernels-dir, --kernel, --op)")
	registerKernelFlag(fs, &f.baselineKernel, "baseline-kernel", "op-level A/B: the baseline's (B) ")
	registerOpFlag(fs, &f.baselineOps, "baseline-op", "op-level A/B: the baseline (B): ")
	fs.BoolVar(&f.baselineBuiltin, "baseline-builtin", false, "op-level A/B against the embedded kernels at their default versions as the baseline (B)")
	fs.Float64Var(&f.verdict.alpha, "alpha", 0.05, "with a baseline: significance level of the sign test, in (0, 0.5]")
	fs.Float64Var(&f.verdict.thresholdPct, "threshold", 0, "with a baseline: least change in percent that FASTER/SLOWER may claim, and the band of SAME (default ±1%); in [0, 100)")
}

// abMode says whether a baseline arm was given.
func (f *kernelFlags) abMode() bool {
	return f.baselineBuiltin || f.baselineDir != "" || len(f.baselineKernel) > 0 || len(f.baselineOps) > 0
}

// baselineFlags are the backend flags of the baseline arm.
func (f *kernelFlags) baselineFlags() backendFlags {
	b := f.backend
	b.kernelsDir, b.kernelVersions, b.ops = f.baselineDir, f.baselineKernel, f.baselineOps
	return b
}

// kernelCmd times one op at the model's shapes: stepbench kernel OP; with a
// baseline (--baseline-kernel, --baseline-op, --baseline-kernels-dir), the
// candidate and the baseline interleaved, launch by launch, with a verdict.
func kernelCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("kernel", stderr)
	var f kernelFlags
	f.register(fs)
	registerOneRank(fs, "kernel")
	var stepTimeout stepTimeoutFlag
	stepTimeout.register(fs, "kernel")
	positional, err := parsePositional(fs, args, 1, "OP ("+joinNames(kernelbench.Ops())+")")
	if err == nil {
		err = stepTimeout.check()
	}
	if err != nil {
		return err
	}
	op := positional[0]
	shapes, cfg, gates, err := f.check(fs, op, stderr)
	if err != nil {
		return err
	}
	// Kernel timings on the cpu reference would mean nothing: a GPU or nothing.
	if why := probeGPU(); why != nil {
		return fmt.Errorf("needs a GPU: %w", why)
	}
	defer watchSteps("kernel", stepTimeout.resolve(cfg, f.batch, f.inputLen, driverEmulated()), stderr, nil)()
	// --shape brings its own batch: size the estimate from the shapes.
	maxSeq, maxBatch := 0, 0
	for _, s := range shapes {
		maxSeq, maxBatch = max(maxSeq, s.Longest()), max(maxBatch, s.Batch)
	}
	est := runner.EstimateMemory(cfg, maxBatch, maxBatch*maxSeq, maxSeq)
	be, env, v, err := openCheckedBackend(f.backend, gates[0], cfg, shapes, est, stderr)
	if err != nil {
		return err
	}
	defer be.Close()
	if f.abMode() {
		return f.runAB(fs, kernelArm{be, env, v}, gates[1], cfg, op, shapes, est, stdout, stderr)
	}
	roof, _, err := report.ChooseRoof(env, f.gpuName, "", false)
	if err != nil {
		return usagef("--gpu: %v", err)
	}
	results, errs := measureKernels(be, cfg, op, shapes, f.flushBytes(be), f.options())
	if len(results) == 0 {
		return errors.Join(errs...)
	}
	if f.jsonOut != "" {
		errs = append(errs, f.writeReport(fs, cfg, kernelArm{be, env, v}, results, nil))
	}
	if f.format == "gobench" {
		errs = append(errs, report.WriteKernelGoBench(stdout, report.GoBenchConfig{"gpu": env.GPUName, "model": cfg.Name, "driver": env.DriverVersion,
			"emulated": yesIf(env.Emulated != ""), "verified": noIf(!v.Verified())}, results))
	} else {
		errs = append(errs, writeKernelNotes(stdout, env, v), report.WriteKernelTable(stdout, results, roof))
	}
	return errors.Join(errs...)
}

// check validates the flags before any GPU is touched and plans both arms' gates.
func (f *kernelFlags) check(fs *pflag.FlagSet, op string, stderr io.Writer) ([]kernelbench.Shape, runner.Config, [2]kernelGate, error) {
	var gates [2]kernelGate
	if err := checkKernelOp(op, f.backend.kernelsDir); err != nil {
		return nil, runner.Config{}, gates, err
	}
	if err := errors.Join(checkIncludeDirs(f.backend.includeDirs), checkKernelsDir(f.baselineDir)); err != nil {
		return nil, runner.Config{}, gates, err
	}
	formats := []string{"table", "gobench"}
	if f.abMode() {
		if !fs.Changed("format") {
			f.format = "markdown"
		}
		formats = []string{"markdown", "md", "csv", "json"}
	}
	if !slices.Contains(formats, f.format) {
		return nil, runner.Config{}, gates, usagef("--format: %q is not %s", f.format, strings.Join(formats, ", "))
	}
	if f.l2Bytes < 0 {
		return nil, runner.Config{}, gates, usagef("--l2-flush-bytes: %d must not be negative", f.l2Bytes)
	}
	if f.jsonOut != "" {
		if err := report.CheckOutputs([]report.OutputFile{{Label: "--json-out", Path: f.jsonOut}}, nil); err != nil {
			return nil, runner.Config{}, gates, usageError{err}
		}
	}
	if err := f.kv.check(fs); err != nil {
		return nil, runner.Config{}, gates, err
	}
	if f.kv.contextLens != "" && f.shapeText != "" {
		return nil, runner.Config{}, gates, usagef("--shape and --context-lens both give the shapes: give one of them")
	}
	shapes, err := kernelShapes(f.shapeText, f.batch, f.inputLen)
	if err != nil {
		return nil, runner.Config{}, gates, err
	}
	cfg, err := f.model.resolveFitted(fs, stderr)
	if err != nil {
		return nil, cfg, gates, err
	}
	if shapes, err = f.raggedShapes(shapes, cfg); err != nil {
		return nil, cfg, gates, err
	}
	if gates[0], err = f.backend.gate(f.noVerify); err != nil {
		return nil, cfg, gates, err
	}
	if f.abMode() {
		gates[1], err = f.baselineGate()
	}
	return shapes, cfg, gates, err
}

// baselineGate plans the check of the baseline arm's kernels.
func (f *kernelFlags) baselineGate() (kernelGate, error) {
	sel, err := kernels.ParseSelection(f.baselineKernel)
	if err != nil {
		return kernelGate{}, usagef("--baseline-kernel: %v", err)
	}
	g, err := planGate("--baseline-kernels-dir", f.baselineDir, "--baseline-kernel", sel, f.noVerify)
	if err != nil {
		return g, err
	}
	ops, err := parseOps("--baseline-op", f.baselineOps)
	g.withOps("--baseline-op", ops)
	g.includes = f.backend.includeDirs
	return g, err
}

func (f *kernelFlags) options() kernelbench.Options {
	return kernelbench.Options{WarmupLaunches: 3, MinSamples: f.minSamples, MaxSamples: f.maxSamples, MaxNoise: f.maxNoise, Timeout: f.timeout}
}

func (f *kernelFlags) flushBytes(be runner.Backend) int {
	if f.l2Bytes > 0 {
		return f.l2Bytes
	}
	return deviceL2Bytes(be)
}

// kernelArm is one arm's backend and what the report says of it.
type kernelArm struct {
	be  runner.Backend
	env report.Environment
	v   report.Verification
}

// writeReport writes --json-out: the candidate's results (and the
// baseline's, pair by pair) under the candidate's environment and checks.
func (f *kernelFlags) writeReport(fs *pflag.FlagSet, cfg runner.Config, a kernelArm, results, baseline []kernelbench.Result) error {
	flags := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) { flags[fl.Name] = fl.Value.String() })
	verified := a.v.Verified()
	v := a.v
	if v.Status == "" {
		v.Status = report.VerificationEmbedded
	}
	rep := report.Report{ToolVersion: versionString(), CreatedAt: time.Now().UTC().Format(time.RFC3339), Environment: a.env,
		Config: report.RunConfig{Model: cfg, Seed: 42, Flags: flags, KV: f.kvReport()}, Verified: &verified, Verification: &v,
		KernelResults: results, BaselineKernelResults: baseline}
	if err := report.Write(f.jsonOut, rep); err != nil {
		return err
	}
	return nil
}

// deviceL2Bytes is the GPU's L2 size, what a flush must overwrite; 128 MiB
// when the device does not say.
func deviceL2Bytes(be runner.Backend) int {
	if g, ok := be.(*gpu.Backend); ok && g.Info().Device.L2Bytes > 0 {
		return g.Info().Device.L2Bytes
	}
	return 128 << 20
}

// kernelShapes are --shape's one shape, or the model's prefill and decode
// shapes at --batch-size and --input-len.
func kernelShapes(shapeText string, batch, inputLen int) ([]kernelbench.Shape, error) {
	if batch < 1 || inputLen < 1 {
		return nil, usagef("--batch-size and --input-len must be >= 1")
	}
	if shapeText == "" {
		return []kernelbench.Shape{{Batch: batch, SeqLen: inputLen}, {Batch: batch, SeqLen: 1, StartPos: inputLen}}, nil
	}
	s, err := kernelbench.ParseShape(shapeText)
	if err != nil {
		return nil, usagef("--shape: %v", err)
	}
	return []kernelbench.Shape{s}, nil
}

// measureKernels times op at every shape, stopping at the first failure.
func measureKernels(be runner.Backend, cfg runner.Config, op string, shapes []kernelbench.Shape, flush int, opt kernelbench.Options) ([]kernelbench.Result, []error) {
	var results []kernelbench.Result
	var errs []error
	for _, s := range shapes {
		k, cost, err := kernelbench.NewOp(be, cfg, op, s, flush)
		if err != nil {
			return results, append(errs, err)
		}
		res, err := kernelbench.Measure(k, opt)
		errs = append(errs, k.Close())
		if err != nil {
			return results, append(errs, fmt.Errorf("%s %s: %w", op, s.Label(), err))
		}
		res.Op, res.ShapeLabel, res.FLOPs, res.Bytes = op, s.Label(), cost.FLOPs, cost.Bytes
		results = append(results, res)
	}
	return results, errs
}

// parsePositional parses flags and positional arguments in any order and
// returns exactly want positional arguments (want < 0: at least one).
func parsePositional(fs *pflag.FlagSet, args []string, want int, names string) ([]string, error) {
	fs.SetInterspersed(true)
	out := fs.Output()
	fs.SetOutput(io.Discard) // one error line, not the whole usage
	err := fs.Parse(joinListValues(fs, rewriteShortAliases(fs, args)))
	fs.SetOutput(out)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(out, "usage of %s %s:\n", fs.Name(), names)
		fs.PrintDefaults()
		return nil, err
	}
	if err != nil {
		return nil, flagError(fs, err)
	}
	got := fs.Args()
	if want < 0 && len(got) == 0 {
		return nil, usagef("want %s, got none", names)
	}
	if want >= 0 && len(got) != want {
		return nil, usagef("want %s, got %d argument(s)", names, len(got))
	}
	return got, nil
}

// gateShapes are the run shapes whose checks cover the op's shapes: a
// prefill of seq tokens (and the decode step after it), or a decode step at
// pos (after a prefill of pos tokens); a tabled shape's under its layout
// (raggedGateShape).
func gateShapes(shapes []kernelbench.Shape) []gpu.RunShape {
	var out []gpu.RunShape
	for _, s := range shapes {
		if s.Tabled() {
			out = append(out, raggedGateShape(s))
			continue
		}
		if s.SeqLen > 1 {
			out = append(out, gpu.RunShape{Batch: s.Batch, InputLen: s.StartPos + s.SeqLen, OutputLen: 2})
		} else {
			out = append(out, gpu.RunShape{Batch: s.Batch, InputLen: max(s.StartPos, 1), OutputLen: 2})
		}
	}
	return out
}

// writeKernelNotes heads the kernel table with what ran it: the emulated
// device, unverified kernels.
func writeKernelNotes(w io.Writer, env report.Environment, v report.Verification) error {
	var err error
	if env.Emulated != "" {
		_, err = fmt.Fprintln(w, report.EmulatedNote)
	}
	if !v.Verified() && err == nil {
		_, err = fmt.Fprintln(w, report.UnverifiedNote)
	}
	for _, line := range v.SourceLines() {
		if err == nil {
			_, err = fmt.Fprintln(w, line)
		}
	}
	return err
}

// openCheckedBackend opens the cuda backend and checks its non-default
// kernels at the op's shapes before anything is timed (kernelGate).
func openCheckedBackend(flags backendFlags, gate kernelGate, cfg runner.Config, shapes []kernelbench.Shape, est runner.MemoryEstimate,
	stderr io.Writer) (runner.Backend, report.Environment, report.Verification, error) {
	flags.kv = &runner.KVOptions{} // the shapes' layout (--kv-layout), for the op libraries' caps
	if len(shapes) > 0 {
		flags.kv = &shapes[0].KV
	}
	for _, s := range shapes {
		flags.tabled = flags.tabled || s.Tabled()
	}
	be, env, err := openBackend("cuda", flags, cfg.KernelShape(), est, stderr)
	if err != nil {
		return nil, env, report.Verification{}, err
	}
	v, err := gate.check(be.(*gpu.Backend), cfg, gateShapes(shapes), 42, stderr)
	if err != nil {
		return nil, env, v, errors.Join(err, be.Close())
	}
	return be, env, v, nil
}

// checkKernelOp refuses an op kernelbench does not time and a bad --kernels-dir.
func checkKernelOp(op, kernelsDir string) error {
	if !slices.Contains(kernelbench.Ops(), op) {
		return usagef("unknown op %q (ops: %s)", op, joinNames(kernelbench.Ops()))
	}
	return checkKernelsDir(kernelsDir)
}

// runAB opens the baseline arm (checked like the candidate), times both at
// every shape interleaved (kernelbench.MeasurePaired) and prints the
// comparison with bench/compare's paired method (B = old, A = new).
func (f *kernelFlags) runAB(fs *pflag.FlagSet, a kernelArm, gate kernelGate, cfg runner.Config, op string, shapes []kernelbench.Shape,
	est runner.MemoryEstimate, stdout, stderr io.Writer) error {
	writer, err := compareWriter(f.format)
	if err != nil {
		return err
	}
	beB, envB, vB, err := openCheckedBackend(f.baselineFlags(), gate, cfg, shapes, est, stderr)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer beB.Close()
	var candidate, baseline []kernelbench.Result
	var errs []error
	for _, s := range shapes {
		ra, rb, err := measurePair(a.be, beB, cfg, op, s, f.flushBytes(a.be), f.options())
		if err != nil {
			errs = append(errs, err)
			break
		}
		candidate, baseline = append(candidate, ra), append(baseline, rb)
	}
	if len(candidate) == 0 {
		return errors.Join(errs...)
	}
	if f.jsonOut != "" {
		errs = append(errs, f.writeReport(fs, cfg, a, candidate, baseline))
	}
	res, err := compare.KernelPaired(baseline, candidate, compare.Options{Alpha: f.verdict.alpha, Threshold: f.verdict.thresholdPct / 100,
		ThresholdSet: fs.Changed("threshold")})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	res.Emulated = a.env.Emulated != "" || envB.Emulated != ""
	if res.Emulated {
		res.Header = append(res.Header, report.EmulatedNote)
	}
	res.Header = append(res.Header, kernelArmLines('A', a.v)...)
	res.Header = append(res.Header, kernelArmLines('B', vB)...)
	return errors.Join(append(errs, writer(stdout, res))...)
}

// kernelArmLines say what an arm's kernels are and how they were checked.
func kernelArmLines(arm byte, v report.Verification) []string {
	lines := []string{armVerificationLine(arm, v)}
	for _, line := range v.SourceLines() {
		lines = append(lines, fmt.Sprintf("arm %c: %s", arm, line))
	}
	return lines
}

// measurePair times op at s on both arms, launch pairs interleaved.
func measurePair(beA, beB runner.Backend, cfg runner.Config, op string, s kernelbench.Shape, flush int, opt kernelbench.Options) (kernelbench.Result, kernelbench.Result, error) {
	ka, cost, err := kernelbench.NewOp(beA, cfg, op, s, flush)
	if err != nil {
		return kernelbench.Result{}, kernelbench.Result{}, fmt.Errorf("candidate: %w", err)
	}
	defer ka.Close()
	kb, _, err := kernelbench.NewOp(beB, cfg, op, s, flush)
	if err != nil {
		return kernelbench.Result{}, kernelbench.Result{}, fmt.Errorf("baseline: %w", err)
	}
	defer kb.Close()
	ra, rb, err := kernelbench.MeasurePaired(ka, kb, opt)
	if err != nil {
		return ra, rb, fmt.Errorf("%s %s: %w", op, s.Label(), err)
	}
	for _, r := range []*kernelbench.Result{&ra, &rb} {
		r.Op, r.ShapeLabel, r.FLOPs, r.Bytes = op, s.Label(), cost.FLOPs, cost.Bytes
	}
	return ra, rb, nil
}

// raggedGateShape is the run shape whose checks cover a tabled step: a
// decode step at each sequence's length is the one after a prefill of
// those lengths; any other step is the prefill of its own sequences.
func raggedGateShape(s kernelbench.Shape) gpu.RunShape {
	seqs := slices.Clone(s.SeqSpecs())
	decode := !slices.ContainsFunc(seqs, func(q runner.SeqSpec) bool { return q.Prompt != 1 || q.Context < 1 })
	total := 0
	for b, q := range seqs {
		if decode {
			seqs[b] = runner.SeqSpec{Prompt: q.Context}
		}
		total += seqs[b].Context + seqs[b].Prompt
	}
	return gpu.RunShape{Batch: s.Batch, InputLen: max(1, total/len(seqs)), OutputLen: 2, Seqs: seqs, KV: s.KV}
}

// raggedShapes are the op's shapes under the layout flags: --context-lens's
// varlen prefill and the decode step after it (drawn, for a distribution,
// for --batch-size with seed 42) instead of the model shapes, each shape
// laid out as --kv-layout says.
func (f *kernelFlags) raggedShapes(shapes []kernelbench.Shape, cfg runner.Config) ([]kernelbench.Shape, error) {
	if f.kv.contextLens != "" {
		batch := f.batch
		if f.kv.spec.List != nil {
			batch = len(f.kv.spec.List)
		}
		lens, err := f.kv.spec.Lengths(batch, 42, cfg.MaxPositionEmbeddings-1)
		if err != nil {
			return nil, usagef("--context-lens: %v", err)
		}
		prefill, decode := make([]runner.SeqSpec, len(lens)), make([]runner.SeqSpec, len(lens))
		for b, n := range lens {
			prefill[b], decode[b] = runner.SeqSpec{Prompt: n}, runner.SeqSpec{Context: n, Prompt: 1}
		}
		shapes = []kernelbench.Shape{kernelbench.RaggedShape(prefill), kernelbench.RaggedShape(decode)}
	}
	for i := range shapes {
		shapes[i].KV = f.kv.options(42)
	}
	return shapes, nil
}

// kvReport is the layout and lengths --json-out records; nil for the
// model shapes on the contiguous layout (a report as it was).
func (f *kernelFlags) kvReport() *report.KVCache {
	if f.kv.layout == runner.KVContiguous && f.kv.contextLens == "" && !strings.ContainsAny(f.shapeText, ";:") {
		return nil
	}
	r := &report.KVCache{Layout: f.kv.layout, ContextLens: f.kv.contextLens}
	if f.kv.layout == runner.KVPaged {
		r.PageSize, r.PageOrder = f.kv.pageSize, f.kv.order
	}
	return r
}

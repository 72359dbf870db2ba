package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench/kernelbench"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// kernelCmd times one op at the model's shapes: stepbench kernel OP.
func kernelCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("kernel", stderr)
	var model modelFlags
	var backend backendFlags
	model.register(fs)
	backend.register(fs)
	batch := fs.Int("batch-size", 1, "batch size of the model shapes")
	inputLen := fs.Int("input-len", 1024, "prompt length: prefill runs seq=input-len, decode seq=1 at pos=input-len")
	shapeText := fs.String("shape", "", "instead of the model shapes: batch=B,seq=S,pos=P")
	minSamples := fs.Int("min-samples", 10, "cold samples to take at least")
	maxSamples := fs.Int("max-samples", 100000, "cold samples to take at most")
	maxNoise := fs.Float64("max-noise", 0.005, "stop when the median's 95% interval half-width is at most this, relative")
	timeout := fs.Duration("timeout", 15*time.Second, "stop sampling a shape after this long")
	l2Bytes := fs.Int("l2-flush-bytes", 0, "bytes written before every sample to flush the L2 (0: the GPU's L2 size, 128 MiB if it does not say)")
	format := fs.String("format", "table", "output: table or gobench")
	noVerify := fs.Bool("no-verify", false, noVerifyHelp)
	gpuName := fs.String("gpu", report.RoofAuto, "the roof of the attainment column: auto (a cached calibration of this GPU, else its clocks, else the datasheet preset matching its name), none, or a preset's datasheet: "+joinNames(roofline.PresetNames()))
	positional, err := parsePositional(fs, args, 1, "OP ("+joinNames(kernelbench.Ops())+")")
	if err != nil {
		return err
	}
	op := positional[0]
	if err := checkKernelOp(op, backend.kernelsDir); err != nil {
		return err
	}
	if err := checkIncludeDirs(backend.includeDirs); err != nil {
		return err
	}
	if *format != "table" && *format != "gobench" {
		return usagef("--format: %q is not table or gobench", *format)
	}
	if *l2Bytes < 0 {
		return usagef("--l2-flush-bytes: %d must not be negative", *l2Bytes)
	}
	shapes, err := kernelShapes(*shapeText, *batch, *inputLen)
	if err != nil {
		return err
	}
	cfg, err := model.resolve()
	if err != nil {
		return err
	}
	gate, err := backend.gate(*noVerify)
	if err != nil {
		return err
	}
	// Kernel timings on the cpu reference would mean nothing: a GPU or nothing.
	if why := probeGPU(); why != nil {
		return fmt.Errorf("needs a GPU: %w", why)
	}
	// --shape brings its own batch: size the estimate from the shapes.
	maxSeq, maxBatch := 0, 0
	for _, s := range shapes {
		maxSeq, maxBatch = max(maxSeq, s.StartPos+s.SeqLen), max(maxBatch, s.Batch)
	}
	be, env, v, err := openCheckedBackend(backend, gate, cfg, shapes, runner.EstimateMemory(cfg, maxBatch, maxBatch*maxSeq, maxSeq), stderr)
	if err != nil {
		return err
	}
	defer be.Close()
	roof, _, err := report.ChooseRoof(env, *gpuName, "")
	if err != nil {
		return usagef("--gpu: %v", err)
	}
	flush := *l2Bytes
	if flush == 0 {
		flush = deviceL2Bytes(be)
	}
	opt := kernelbench.Options{WarmupLaunches: 3, MinSamples: *minSamples, MaxSamples: *maxSamples, MaxNoise: *maxNoise, Timeout: *timeout}
	results, errs := measureKernels(be, cfg, op, shapes, flush, opt)
	if len(results) == 0 {
		return errors.Join(errs...)
	}
	if *format == "gobench" {
		errs = append(errs, report.WriteKernelGoBench(stdout, report.GoBenchConfig{"gpu": env.GPUName, "model": cfg.Name, "driver": env.DriverVersion,
			"emulated": yesIf(env.Emulated != ""), "verified": noIf(!v.Verified())}, results))
	} else {
		errs = append(errs, writeKernelNotes(stdout, env, v), report.WriteKernelTable(stdout, results, roof))
	}
	return errors.Join(errs...)
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
// returns exactly want positional arguments.
func parsePositional(fs *pflag.FlagSet, args []string, want int, names string) ([]string, error) {
	fs.SetInterspersed(true)
	out := fs.Output()
	fs.SetOutput(io.Discard) // one error line, not the whole usage
	err := fs.Parse(joinListValues(fs, args))
	fs.SetOutput(out)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(out, "usage of %s %s:\n", fs.Name(), names)
		fs.PrintDefaults()
		return nil, err
	}
	if err != nil {
		return nil, usageError{err}
	}
	if got := fs.Args(); len(got) != want {
		return nil, usagef("want %s, got %d argument(s)", names, len(got))
	}
	return fs.Args(), nil
}

// gateShapes are the run shapes whose checks cover the op's shapes: a
// prefill of seq tokens (and the decode step after it), or a decode step at
// pos (after a prefill of pos tokens).
func gateShapes(shapes []kernelbench.Shape) []gpu.RunShape {
	var out []gpu.RunShape
	for _, s := range shapes {
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

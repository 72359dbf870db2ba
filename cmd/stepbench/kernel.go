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
)

// l2BytesByPreset is each GPU preset's L2 cache (datasheets); the flush
// buffer must be at least this large.
var l2BytesByPreset = map[string]int{
	"a100-pcie-80gb": 40 << 20, "a100-sxm-80gb": 40 << 20, "h100-pcie": 50 << 20, "h100-nvl": 50 << 20,
	"h100-sxm": 50 << 20, "h200": 50 << 20, "l40s": 96 << 20,
}

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
	l2Bytes := fs.Int("l2-flush-bytes", 0, "bytes written before every sample to flush the L2 (0: the GPU's L2 size, 128 MiB if unknown)")
	format := fs.String("format", "table", "output: table or gobench")
	gpuName := fs.String("gpu", "auto", "GPU preset for the attainment column: auto, none or "+joinNames(roofline.PresetNames()))
	positional, err := parsePositional(fs, args, 1, "OP ("+joinNames(kernelbench.Ops())+")")
	if err != nil {
		return err
	}
	op := positional[0]
	if !slices.Contains(kernelbench.Ops(), op) {
		return usagef("unknown op %q (ops: %s)", op, joinNames(kernelbench.Ops()))
	}
	if err := checkKernelsDir(backend.kernelsDir); err != nil {
		return err
	}
	if *format != "table" && *format != "gobench" {
		return usagef("--format: %q is not table or gobench", *format)
	}
	if *batch < 1 || *inputLen < 1 || *l2Bytes < 0 {
		return usagef("--batch-size and --input-len must be >= 1, --l2-flush-bytes >= 0")
	}
	shapes, err := kernelShapes(*shapeText, *batch, *inputLen)
	if err != nil {
		return err
	}
	cfg, err := model.resolve()
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
	be, env, err := openBackend("cuda", backend, runner.EstimateMemory(cfg, maxBatch, maxBatch*maxSeq, maxSeq), stderr)
	if err != nil {
		return err
	}
	defer be.Close()
	gpu, err := kernelGPU(env, *gpuName)
	if err != nil {
		return err
	}
	flush := *l2Bytes
	if flush == 0 {
		flush = 128 << 20
		if gpu != nil && l2BytesByPreset[gpu.Name] > 0 {
			flush = l2BytesByPreset[gpu.Name]
		}
	}
	opt := kernelbench.Options{WarmupLaunches: 3, MinSamples: *minSamples, MaxSamples: *maxSamples, MaxNoise: *maxNoise, Timeout: *timeout}
	results, errs := measureKernels(be, cfg, op, shapes, flush, opt)
	if len(results) > 0 {
		if *format == "gobench" {
			errs = append(errs, report.WriteKernelGoBench(stdout, report.GoBenchConfig{"gpu": env.GPUName, "model": cfg.Name, "driver": env.DriverVersion}, results))
		} else {
			var roof *roofline.Roof
			if gpu != nil {
				r := gpu.Roof()
				roof = &r
			}
			errs = append(errs, report.WriteKernelTable(stdout, results, roof))
		}
	}
	return errors.Join(errs...)
}

// kernelShapes are --shape's one shape, or the model's prefill and decode
// shapes at --batch-size and --input-len.
func kernelShapes(shapeText string, batch, inputLen int) ([]kernelbench.Shape, error) {
	if shapeText == "" {
		return []kernelbench.Shape{{Batch: batch, SeqLen: inputLen}, {Batch: batch, SeqLen: 1, StartPos: inputLen}}, nil
	}
	s, err := kernelbench.ParseShape(shapeText)
	if err != nil {
		return nil, usagef("--shape: %v", err)
	}
	return []kernelbench.Shape{s}, nil
}

// kernelGPU is --gpu's preset for the attainment column (auto: the device's).
func kernelGPU(env report.Environment, name string) (*roofline.Preset, error) {
	switch name {
	case "none":
		return nil, nil
	case "auto":
		if g, ok := roofline.PresetForDevice(env.GPUName); ok {
			return &g, nil
		}
		return nil, nil
	}
	g, err := roofline.LookupPreset(name)
	if err != nil {
		return nil, usagef("--gpu: %v", err)
	}
	return &g, nil
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

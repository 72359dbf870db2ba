package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/breakdown"
	"stepbench/bench/compat"
	"stepbench/bench/plot"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// outputFiles are every file the run writes (CheckOutputs checks them up
// front): --output-json's per-shape names, --plot's two plots included.
func (f *runFlags) outputFiles() []report.OutputFile {
	var out []report.OutputFile
	add := func(label, path string) {
		if path != "" {
			out = append(out, report.OutputFile{Label: label, Path: path})
		}
	}
	add("--result-filename", f.resultFile)
	if f.outputJSON != "" {
		several := len(f.shapes.batch)*len(f.shapes.input)*len(f.shapes.output) > 1
		for _, b := range f.shapes.batch {
			for _, in := range f.shapes.input {
				for _, o := range f.shapes.output {
					add("--output-json", compat.VLLMPath(f.outputJSON, several, b, in, o))
				}
			}
		}
	}
	add("--json-out", f.jsonOut)
	if roofline, sweep, err := plot.Paths(f.telemetry.plot); f.telemetry.plot != "" && err == nil {
		add("--plot", roofline)
		add("--plot", sweep)
	}
	add("--logits-out", f.logitsOut)
	return out
}

func (f *runFlags) inputFiles() []report.OutputFile {
	if f.promptIDs == "" {
		return nil
	}
	return []report.OutputFile{{Label: "--prompt-ids", Path: f.promptIDs}}
}

// runOutputs writes a run's results shape by shape (report.ResultWriter).
type runOutputs struct {
	f      *runFlags
	fs     *pflag.FlagSet
	setup  runSetup
	gpu    *roofline.Preset
	roof   *roofline.Roof // the roof of the per-shape reports; the final one replaces it
	writer *report.ResultWriter
}

func (f *runFlags) newRunOutputs(fs *pflag.FlagSet, s runSetup, env report.Environment, gpu *roofline.Preset, lines io.Writer) *runOutputs {
	o := &runOutputs{f: f, fs: fs, setup: s, gpu: gpu}
	o.roof, _ = runRoofs(&env, gpu)
	files := report.ResultFiles{
		OneBatchJSONL: report.OutputFile{Label: "--result-filename", Path: f.resultFile},
		VLLMJSON:      report.OutputFile{Label: "--output-json", Path: f.outputJSON},
		Native:        report.OutputFile{Label: "--json-out", Path: f.jsonOut},
		SeveralShapes: len(f.shapes.batch)*len(f.shapes.input)*len(f.shapes.output) > 1,
		RunName:       f.runName,
		VLLMLines:     lines,
	}
	o.writer = report.NewResultWriter(files, o.header(env))
	return o
}

// addShape is bench.Options.AfterShape: the shape's results, written now.
func (o *runOutputs) addShape(s bench.ShapeResult) error {
	return o.writer.AddShape(s, o.shapeReport(o.f.telemetry.run.kept(s), o.roof))
}

// finish rewrites the native report with the run's final environment,
// roofs and telemetry.
func (o *runOutputs) finish(shapes []bench.ShapeResult, env report.Environment) error {
	if o.f.jsonOut == "" {
		return nil
	}
	reports := make([]report.ShapeReport, len(shapes))
	for i, s := range shapes {
		reports[i] = o.shapeReport(s, o.f.telemetry.roof)
	}
	return o.writer.Rewrite(o.header(env), reports)
}

func (o *runOutputs) header(env report.Environment) report.Report {
	f, s := o.f, o.setup
	flags := map[string]string{}
	o.fs.VisitAll(func(fl *pflag.Flag) { flags[fl.Name] = fl.Value.String() })
	cfg := report.RunConfig{Model: s.cfg, ModelPath: f.model.modelPath, LoadFormat: s.loadFormat, RunName: f.runName,
		Seed: f.seed, NumIters: f.sampling.numIters, WarmupIters: f.warmupIters, Flags: flags}
	if f.sampling.numIters == 0 {
		var opt bench.Options
		f.sampling.options(&opt)
		cfg.Adaptive = &opt.Adaptive
	}
	return report.Report{ToolVersion: versionString(), CreatedAt: time.Now().UTC().Format(time.RFC3339), Environment: env, Config: cfg}
}

// shapeReport is a shape's native report: samples, summaries, noise,
// telemetry, roofline points (against roof) and the GPU preset's floors.
func (o *runOutputs) shapeReport(s bench.ShapeResult, roof *roofline.Roof) report.ShapeReport {
	sr := report.NewShapeReport(s)
	o.f.telemetry.run.fillShape(&sr, s, o.setup.cfg, roof)
	if o.gpu == nil {
		return sr
	}
	if sf, err := roofline.ComputeFloors(o.setup.cfg, o.gpu.Roof(), s.Batch, s.InputLen, s.OutputLen); err == nil {
		sr.PrefillFloorSeconds, sr.PrefillFLOPs, sr.PrefillBytes = sf.PrefillFloor.Seconds, sf.Prefill.FLOPs, sf.Prefill.Bytes
		if len(sf.Decode) > 0 {
			sr.DecodeFloorSeconds, sr.DecodeFLOPs, sr.DecodeBytes = sf.DecodeFloors[0].Seconds, sf.Decode[0].FLOPs, sf.Decode[0].Bytes
		}
	}
	return sr
}

// benchmark times the sweep, writing each shape's results as it ends; a
// SIGINT or SIGTERM stops it at the next timed-region boundary (exit 130).
func (f *runFlags) benchmark(fs *pflag.FlagSet, s runSetup, engine *runner.Engine, env report.Environment, stdout, stderr io.Writer) error {
	in := newInterruption()
	defer in.stop()
	opt := bench.Options{
		BatchSizes: f.shapes.batch, InputLens: f.shapes.input, OutputLens: f.shapes.output,
		WarmupIters: f.warmupIters, Seed: f.seed, VocabSize: s.cfg.VocabSize,
		LogDecodeStep: f.logDecodeStep, RunName: f.runName, Stdout: stdout, Progress: stderr, Context: in.ctx,
	}
	f.sampling.options(&opt)
	textOut := stdout
	if f.format == "gobench" {
		textOut, opt.Stdout = stderr, stderr // stdout carries only benchmark lines
	}
	f.telemetry.run = startTelemetry(!f.telemetry.noTelemetry, f.telemetry.discardThrottled, f.telemetry.energyWindowSeconds, &env, &opt, stderr)
	gpu, gpuErr := f.floorGPU(env)
	outputs := f.newRunOutputs(fs, s, env, gpu, textOut)
	opt.AfterShape = outputs.addShape
	shapes, runErr := bench.Run(engine, opt)
	shapes = f.telemetry.run.finish(shapes, &env, stderr)
	errs := []error{runErr, gpuErr}
	if len(shapes) > 0 {
		errs = append(errs, f.report(textOut, stdout, stderr, shapes, s.cfg, &env, gpu)...)
		errs = append(errs, outputs.finish(shapes, env))
	}
	if written := outputs.writer.Written(); len(written) > 0 {
		fmt.Fprintf(stderr, "stepbench: wrote %s\n", strings.Join(written, ", "))
	}
	if f.breakdown && runErr == nil {
		errs = append(errs, f.runBreakdown(engine, shapes, gpu, textOut))
	}
	if sig := in.signal(); sig != nil && errors.Is(runErr, bench.ErrInterrupted) {
		errs[0] = fmt.Errorf("%v: stopped at a timed-region boundary after %d finished shapes; their results are written", sig, completeShapes(shapes))
		return exitError{exitInterrupted, errors.Join(errs...)}
	}
	return errors.Join(errs...)
}

func completeShapes(shapes []bench.ShapeResult) int {
	n := 0
	for _, s := range shapes {
		if s.Complete {
			n++
		}
	}
	return n
}

// report prints the summary and telemetry tables, draws --plot and writes
// --format gobench.
func (f *runFlags) report(textOut, stdout, stderr io.Writer, shapes []bench.ShapeResult, cfg runner.Config, env *report.Environment, gpu *roofline.Preset) []error {
	var errs []error
	fmt.Fprintln(textOut)
	if env.Emulated != "" {
		fmt.Fprintln(textOut, emulatedNote)
	}
	if gpu != nil {
		fmt.Fprintf(textOut, "summary (floors: %s datasheet peaks, %s)\n", gpu.Description, "derived by the cost model")
	} else {
		fmt.Fprintln(textOut, "summary")
	}
	errs = append(errs, report.WriteSummaryTable(textOut, shapes, floorFunc(cfg, gpu)))
	errs = append(errs, f.telemetry.report(textOut, shapes, cfg, env, gpu, stderr))
	if f.format == "gobench" {
		errs = append(errs, report.WriteGoBench(stdout, cfg.Name, report.GoBenchConfig{"backend": env.Backend, "gpu": env.GPUName,
			"driver": env.DriverVersion, "goos": runtime.GOOS, "goarch": runtime.GOARCH}, shapes))
	}
	return errs
}

func (f *runFlags) runBreakdown(engine *runner.Engine, shapes []bench.ShapeResult, gpu *roofline.Preset, textOut io.Writer) error {
	var errs []error
	for _, s := range shapes {
		var roof *roofline.Roof
		if gpu != nil {
			r := gpu.Roof()
			roof = &r
		}
		sb, err := breakdown.Measure(engine, s.Shape, f.seed, roof)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, report.WriteBreakdownTable(textOut, sb))
	}
	return errors.Join(errs...)
}

// floorGPU is the GPU whose datasheet peaks give the summary's floors.
func (f *runFlags) floorGPU(env report.Environment) (*roofline.Preset, error) {
	switch f.gpu {
	case "none":
		return nil, nil
	case "auto":
		if env.GPUName == "" {
			return nil, nil
		}
		g, ok := roofline.PresetForDevice(env.GPUName)
		if !ok {
			return nil, nil
		}
		return &g, nil
	}
	g, err := roofline.LookupPreset(f.gpu)
	if err != nil {
		return nil, usagef("--gpu: %v", err)
	}
	return &g, nil
}

func floorFunc(cfg runner.Config, g *roofline.Preset) report.FloorFunc {
	if g == nil {
		return nil
	}
	return func(batch, inputLen, outputLen int) (float64, float64) {
		sf, err := roofline.ComputeFloors(cfg, g.Roof(), batch, inputLen, outputLen)
		if err != nil {
			return 0, 0
		}
		return sf.PrefillFloor.Seconds, sf.MedianDecodeFloorSeconds()
	}
}

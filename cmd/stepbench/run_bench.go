package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/breakdown"
	"stepbench/bench/compat"
	"stepbench/bench/hostload"
	"stepbench/bench/plot"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/telemetry/nvml"
	"stepbench/bench/tracker"
	"stepbench/runner"
)

// runDeps are what a benchmark run touches besides its flags: the target,
// the machine, NVML and the clock. runCmd gives the real ones; tests give
// fakes, so that every output of a run can be checked byte for byte.
type runDeps struct {
	target       bench.Target
	engine       *runner.Engine     // for --breakdown; nil when target is not an engine
	profiler     bench.Profiler     // NVTX ranges and the --profile window; nil: none
	tpSize       int                // --tp-size of a tensor-parallel run (0: one GPU, no group)
	env          report.Environment // the machine, before NVML adds to it
	openNVML     func(uuid string) (*nvml.Monitor, error)
	now          func() time.Time // the host clock; nil: time.Now
	sampleEvery  time.Duration    // the NVML sampler's period (0: the default); < 0: no sampler
	calibrations string           // the calibration cache ("": the user cache directory)
	toolVersion  string
	verification report.Verification    // how the timed kernels were checked
	hostLoad     func() hostload.Sample // nil: the host's (bench.Options.HostLoad)
}

// engineDeps are the real dependencies of a run on engine.
func engineDeps(engine *runner.Engine, env report.Environment) runDeps {
	return runDeps{target: engine, engine: engine, env: env, openNVML: nvml.Open, toolVersion: versionString()}
}

// benchmark times the sweep, writing each shape's results as it ends, then
// prints the summary and writes the final report, plots and gobench lines;
// a SIGINT or SIGTERM stops it at the next timed-region boundary (exit 130).
func (f *runFlags) benchmark(fs *pflag.FlagSet, s runSetup, d runDeps, stdout, stderr io.Writer) error {
	guard := &exitGuard{}
	in := newGuardedInterruption(stderr, guard)
	defer in.stop()
	if d.now == nil {
		d.now = time.Now
	}
	textOut := stdout
	if f.format != "text" {
		textOut = stderr // stdout carries only benchmark lines or a tracker's file
	}
	opt := f.benchOptions(s, d, textOut, stderr)
	opt.Context = in.ctx
	tel := startTelemetry(f.telemetry, d, &d.env, &opt, stderr)
	roof, roofs, err := report.ChooseRoof(d.env, f.gpu, d.calibrations, s.cfg.Quantization != nil)
	if err != nil {
		tel.finish(&d.env, stderr)
		return usagef("--gpu: %v", err)
	}
	d.env.Roof, d.env.Roofs = roof, roofs
	build := report.Builder{Model: s.cfg, Roof: roof, Telemetry: tel.Recorder(), DiscardThrottled: f.telemetry.discardThrottled,
		TPSize: d.tpSize, KV: f.kv.options(f.seed)}
	created := d.now()
	files := f.resultFiles(textOut)
	files.Device = compat.Device(d.env.Backend, d.env.Emulated)
	writer := report.NewResultWriter(files, f.header(fs, s, d.env, d.toolVersion, created, d.verification))
	graphNodes := f.graphNodesPrinter(d.engine, stderr)
	opt.AfterShape = func(sh bench.ShapeResult) error {
		graphNodes()
		return guard.writing(func() error { return writer.AddShape(sh, build.Shape(sh)) })
	}
	opt.StepTimeout, opt.OnStepTimeout = f.stepTimeouts(s, d, guard, stderr)
	shapes, runErr := bench.Run(d.target, opt)
	tel.finish(&d.env, stderr)
	if note := f.sampling.maxSecondsNote(shapes); note != "" {
		fmt.Fprintf(stderr, "stepbench: %s\n", note)
	}
	errs := []error{runErr}
	if len(shapes) > 0 {
		final := f.header(fs, s, d.env, d.toolVersion, created, d.verification)
		final.Shapes = build.Shapes(shapes)
		errs = append(errs, writer.Rewrite(final, final.Shapes))
		errs = append(errs, f.writeText(final, shapes, stdout, textOut, stderr)...)
	}
	if written := writer.Written(); len(written) > 0 {
		fmt.Fprintf(stderr, "stepbench: wrote %s\n", strings.Join(written, ", "))
	}
	if f.breakdown && runErr == nil && d.engine != nil {
		errs = append(errs, f.runBreakdown(d.engine, shapes, roof, textOut))
	}
	if sig := in.signal(); sig != nil && errors.Is(runErr, bench.ErrInterrupted) {
		errs[0] = fmt.Errorf("%v: stopped at a timed-region boundary after %d finished shapes; their results are written", sig, completeShapes(shapes))
		return exitError{exitInterrupted, joinDistinct(errs...)}
	}
	return joinDistinct(errs...)
}

// joinDistinct joins errors, each message once: a file that could not be
// written after a shape usually fails again at the final rewrite, with the
// same words. Joined errors (errors.Join) are taken apart first.
func joinDistinct(errs ...error) error {
	var out []error
	seen := map[string]bool{}
	var add func(err error)
	add = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		if err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	for _, err := range errs {
		add(err)
	}
	return errors.Join(out...)
}

// benchOptions are the harness's options from the flags.
func (f *runFlags) benchOptions(s runSetup, d runDeps, textOut, stderr io.Writer) bench.Options {
	opt := bench.Options{
		BatchSizes: f.shapes.batch, InputLens: f.shapes.input, OutputLens: f.shapes.output,
		WarmupIters: f.warmupIters, Seed: f.seed, VocabSize: s.cfg.VocabSize,
		LogDecodeStep: f.logDecodeStep, RunName: f.runName, Progress: stderr, Status: statusOf(stderr).Status, Now: d.now,
		Profiler: d.profiler, Profile: s.window, HostLoad: d.hostLoad,
	}
	if f.output.verbose {
		opt.Stdout = textOut // one_batch's lines of every iteration
	}
	if s.textSource != nil {
		opt.Prompts = s.textSource
	}
	f.kv.apply(&opt, s.cfg)
	f.sampling.options(&opt)
	return opt
}

// resultFiles are the files the flags ask for; vLLM's summary lines go to lines.
func (f *runFlags) resultFiles(lines io.Writer) report.ResultFiles {
	return report.ResultFiles{
		OneBatchJSONL: report.OutputFile{Label: "--result-filename", Path: f.resultFile},
		VLLMJSON:      report.OutputFile{Label: "--output-json", Path: f.outputJSON},
		Native:        report.OutputFile{Label: "--json-out", Path: f.jsonOut},
		SeveralShapes: f.severalShapes(),
		RunName:       f.runName,
		VLLMLines:     lines,
	}
}

func (f *runFlags) severalShapes() bool {
	inputs := len(f.shapes.input)
	if f.kv.contextLens != "" {
		inputs = 1
	}
	return len(f.kv.batchSizes(f.shapes.batch))*inputs*len(f.shapes.output) > 1
}

// header is the native report without its shapes: tool, time, machine and
// the configuration, every flag included.
func (f *runFlags) header(fs *pflag.FlagSet, s runSetup, env report.Environment, toolVersion string, created time.Time, v report.Verification) report.Report {
	flags := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) { flags[fl.Name] = fl.Value.String() })
	cfg := report.RunConfig{Model: s.cfg, ModelPath: f.model.modelPath, LoadFormat: s.loadFormat, RunName: f.runName,
		Seed: f.seed, NumIters: f.sampling.numIters, WarmupIters: f.warmupIters, Flags: flags}
	if f.sampling.numIters == 0 {
		var opt bench.Options
		f.sampling.options(&opt)
		cfg.Adaptive = &opt.Adaptive
	}
	if s.textSource != nil {
		tokens := 0
		for _, p := range s.prompts {
			tokens += len(p)
		}
		cfg.Prompts = &report.Prompts{Source: "text", File: f.text.promptFile, Count: len(s.prompts), Tokens: tokens,
			DistinctRows: s.textSource.Distinct()}
	}
	cfg.KV = f.kv.report()
	if v.Status == "" {
		v.Status = report.VerificationEmbedded // a run without a gate: the embedded defaults
	}
	verified := v.Verified()
	return report.Report{ToolVersion: toolVersion, CreatedAt: created.UTC().Format(time.RFC3339), Environment: env, Config: cfg,
		Verified: &verified, Verification: &v}
}

// writeText prints the summary and telemetry tables, draws --plot and
// writes --format gobench.
func (f *runFlags) writeText(final report.Report, shapes []bench.ShapeResult, stdout, textOut, stderr io.Writer) []error {
	env := final.Environment
	errs := []error{report.WriteRunText(textOut, final, report.TextOptions{Wide: f.output.wide, SummaryOnly: f.output.quiet})}
	title := fmt.Sprintf("%s on %s", final.Config.Model.Name, orString(env.GPUName, env.Backend))
	if env.Emulated != "" {
		title += " (emulated: CPU times)"
	}
	if f.telemetry.plot != "" {
		written, err := plot.Run(f.telemetry.plot, env.Roof, final.Shapes, title)
		errs = append(errs, err)
		for _, p := range written {
			fmt.Fprintf(stderr, "stepbench: wrote %s\n", p)
		}
	}
	if f.telemetry.plotTimeline != "" {
		err := plot.WriteTimelinePlot(f.telemetry.plotTimeline, final.Shapes, title+": timeline")
		if errs = append(errs, err); err == nil {
			fmt.Fprintf(stderr, "stepbench: wrote %s\n", f.telemetry.plotTimeline)
		}
	}
	if f.format == "gobench" {
		cfg := report.GoBenchConfig{"backend": env.Backend,
			"gpu": env.GPUName, "driver": env.DriverVersion, "goos": runtime.GOOS, "goarch": runtime.GOARCH,
			"emulated": yesIf(env.Emulated != ""), "verified": noIf(final.Verified != nil && !*final.Verified)}
		if q := final.Config.Model.Quantization; q != nil {
			cfg["quantization"] = q.String()
		}
		maps.Copy(cfg, report.KVGoBenchConfig(final.Config.KV, final.Config.Seed))
		errs = append(errs, report.WriteGoBench(stdout, final.Config.Model.Name, cfg, shapes))
	}
	if write := tracker.Formats[f.format]; write != nil {
		run, err := tracker.NewRun(final)
		if err == nil {
			err = write(stdout, run)
		}
		errs = append(errs, err)
	}
	return errs
}

// graphNodesPrinter returns what, after each shape with -v, says how many
// nodes each decode step's CUDA graph has (once per batch and cache length):
// the launches of a replayed step, which --breakdown counts per op.
func (f *runFlags) graphNodesPrinter(e *runner.Engine, stderr io.Writer) func() {
	printed := map[runner.GraphNodes]bool{}
	return func() {
		if !f.output.verbose || e == nil {
			return
		}
		for _, g := range e.DecodeGraphNodes() {
			if !printed[g] {
				printed[g] = true
				fmt.Fprintf(stderr, "stepbench: decode step of batch %d (cache of %d positions) replays a CUDA graph of %d nodes\n", g.Batch, g.MaxSeq, g.Nodes)
			}
		}
	}
}

func (f *runFlags) runBreakdown(engine *runner.Engine, shapes []bench.ShapeResult, roof *roofline.Roof, textOut io.Writer) error {
	var errs []error
	for _, s := range shapes {
		sb, err := breakdown.Measure(engine, s.Shape, f.seed, roof)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, report.WriteBreakdownTable(textOut, sb, roof))
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

func orString(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// outputFiles are every file the run writes (CheckOutputs checks them up
// front): --output-json's per-shape names (of shapes, the sweep with its
// lengths resolved, when given), --plot's two plots included.
func (f *runFlags) outputFiles(shapes []bench.Shape) []report.OutputFile {
	var out []report.OutputFile
	add := func(label, path string, appended bool) {
		if path != "" {
			out = append(out, report.OutputFile{Label: label, Path: path, Appended: appended})
		}
	}
	add("--result-filename", f.resultFile, true)
	// With several shapes the files go beside --output-json, named after
	// it: a name that is a device (/dev/full), a FIFO or a directory is
	// itself checked, and refused, first.
	if info, err := os.Stat(f.outputJSON); f.outputJSON != "" && f.severalShapes() && err == nil && !info.Mode().IsRegular() {
		add("--output-json", f.outputJSON, false)
	}
	for _, sh := range shapes {
		if f.outputJSON != "" {
			add("--output-json", compat.VLLMPath(f.outputJSON, f.severalShapes(), sh.Batch, sh.InputLen, sh.OutputLen), false)
		}
	}
	if f.outputJSON != "" && shapes == nil {
		for _, b := range f.shapes.batch {
			for _, in := range f.shapes.input {
				for _, o := range f.shapes.output {
					add("--output-json", compat.VLLMPath(f.outputJSON, f.severalShapes(), b, in, o), false)
				}
			}
		}
	}
	add("--json-out", f.jsonOut, false)
	if roofline, sweep, err := plot.Paths(f.telemetry.plot); f.telemetry.plot != "" && err == nil {
		add("--plot", roofline, false)
		add("--plot", sweep, false)
	}
	add("--plot-timeline", f.telemetry.plotTimeline, false)
	add("--logits-out", f.logitsOut, true)
	return out
}

func (f *runFlags) inputFiles() []report.OutputFile {
	var in []report.OutputFile
	if f.promptIDs != "" {
		in = append(in, report.OutputFile{Label: "--prompt-ids", Path: f.promptIDs})
	}
	if f.text.promptFile != "" {
		in = append(in, report.OutputFile{Label: "--prompt-file", Path: f.text.promptFile})
	}
	return in
}

// yesIf is "yes" when b, else "" (a gobench configuration line left out).
func yesIf(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

// noIf is "no" when b, else "".
func noIf(b bool) string {
	if b {
		return "no"
	}
	return ""
}

package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/plot"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
	"stepbench/bench/telemetry"
	"stepbench/bench/telemetry/nvml"
	"stepbench/cuda"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// calibrateCmd measures the roofline ceilings of a GPU and caches them per UUID.
func calibrateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("calibrate", stderr)
	opt := gpu.DefaultCalibrateOptions()
	var force bool
	var copyMiB int
	var cacheDir, cublasPath string
	fs.IntVar(&opt.Ordinal, "device-ordinal", 0, "CUDA device to measure")
	fs.BoolVar(&force, "force", false, "measure again even when a calibration of this GPU is cached")
	fs.IntVar(&copyMiB, "copy-mib", opt.CopyBytes>>20, "MiB per device-to-device copy")
	fs.IntVar(&opt.GEMMSize, "gemm-size", opt.GEMMSize, "n of the n×n×n cuBLAS bf16 GEMM")
	fs.IntVar(&opt.Repeats, "repeats", opt.Repeats, "timed runs of each measurement (the median is kept)")
	fs.StringVar(&cacheDir, "cache-dir", "", "where calibrations are cached (default: <user cache dir>/stepbench/calibration)")
	fs.StringVar(&cublasPath, "cublas", "", "path of libcublas.so to use")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if copyMiB < 1 || opt.GEMMSize < 16 || opt.Repeats < 1 {
		return usagef("--copy-mib, --gemm-size (>= 16) and --repeats must be positive")
	}
	opt.CopyBytes = copyMiB << 20
	drv, err := cuda.OpenDriver()
	if err != nil {
		return fmt.Errorf("needs a GPU: %w", err)
	}
	if n, err := drv.DeviceCount(); err != nil || opt.Ordinal >= n || opt.Ordinal < 0 {
		return fmt.Errorf("needs a GPU: device %d of %d (%v)", opt.Ordinal, n, err)
	}
	props, err := drv.Props(opt.Ordinal)
	if err != nil {
		return err
	}
	if !force {
		if c, err := roofline.LoadCalibration(cacheDir, props.UUID); err == nil {
			printCalibration(stdout, c, "cached; --force to measure again")
			return nil
		}
	}
	blas, err := cuda.OpenCublas(cublasPath)
	if err != nil {
		return fmt.Errorf("needs cuBLAS: %w", err)
	}
	fmt.Fprintf(stderr, "stepbench: calibrating %s (%s): %d MiB copy and %d³ bf16 GEMM, %d runs each\n",
		props.Name, props.UUID, copyMiB, opt.GEMMSize, opt.Repeats)
	res, err := gpu.Calibrate(drv, blas, opt)
	if err != nil {
		return err
	}
	c, err := roofline.NewCalibration(res.UUID, res.DeviceName, int64(res.CopyBytes), res.CopySeconds, res.GEMMSize, res.GEMMSeconds)
	if err != nil {
		return err
	}
	if m, err := nvml.Open(props.UUID); err == nil {
		c.SMClockMHz = m.Read().SMClockMHz
		m.Close()
	}
	path, err := roofline.SaveCalibration(cacheDir, c)
	if err != nil {
		return err
	}
	printCalibration(stdout, c, "saved to "+path)
	return nil
}

func printCalibration(w io.Writer, c roofline.Calibration, note string) {
	fmt.Fprintf(w, "%s %s (%s, %s)\n", c.GPUName, c.GPUUUID, c.MeasuredAt, note)
	fmt.Fprintf(w, "  device-to-device copy: %.3f TB/s (read+write, median of %d, %d MiB)\n",
		c.CopyBytesPerSec/1e12, len(c.CopySeconds), c.CopyBytes>>20)
	fmt.Fprintf(w, "  cuBLAS bf16 GEMM %d³:   %.1f TFLOP/s (median of %d)\n", c.GEMMSize, c.GEMMFLOPsPerSec/1e12, len(c.GEMMSeconds))
	fmt.Fprintf(w, "  ridge: %.0f FLOP/byte\n", c.GEMMFLOPsPerSec/c.CopyBytesPerSec)
}

// runTelemetry is the NVML side of one 'stepbench run': nil when off.
type runTelemetry struct {
	monitor  *nvml.Monitor
	recorder *telemetry.Recorder
	discard  bool
	dropped  map[[3]int]int // discarded throttled samples per shape
}

// startTelemetry opens NVML for the run's GPU (matched by UUID), wires the
// recorder and the energy meter into opt and starts the background
// sampler. Without NVML it prints one notice and returns nil: the run goes on.
func startTelemetry(enabled, discard bool, energyWindowSeconds float64, env *report.Environment, opt *bench.Options, stderr io.Writer) *runTelemetry {
	if !enabled || env.Backend != "cuda" {
		return nil
	}
	m, err := nvml.Open(env.GPUUUID)
	if err != nil {
		note := fmt.Sprintf("no telemetry: %v", err)
		fmt.Fprintf(stderr, "stepbench: %s; the run goes on without it\n", note)
		env.TelemetryNotes = append(env.TelemetryNotes, note)
		return nil
	}
	if env.MemoryBusWidthBits == 0 { // the CUDA device query's value wins; NVML's only fills a gap
		env.MemoryBusWidthBits = m.MemoryBusWidthBit
	}
	env.MaxMemoryClockMHz, env.PowerLimitWatts = m.MaxMemoryClockMHz, m.PowerLimitWatts
	if m.MaxSMClockMHz > 0 {
		env.MaxSMClockMHz = m.MaxSMClockMHz
	}
	t := &runTelemetry{monitor: m, recorder: telemetry.NewRecorder(m, nil), discard: discard, dropped: map[[3]int]int{}}
	opt.BeforeShape, opt.BetweenRegions = t.recorder.BeforeShape, t.recorder.AfterRegion
	if _, err := m.EnergyMillijoules(); err == nil && energyWindowSeconds > 0 {
		opt.EnergyMeter, opt.EnergyWindowSeconds = m, energyWindowSeconds
	} else if err != nil {
		env.TelemetryNotes = append(env.TelemetryNotes, fmt.Sprintf("no energy windows: %v", err))
	}
	t.recorder.Start(telemetry.DefaultSamplePeriod)
	return t
}

// finish stops the sampler, warns about unlocked varying clocks, drops
// throttled samples from the statistics when asked, and closes NVML.
func (t *runTelemetry) finish(shapes []bench.ShapeResult, env *report.Environment, stderr io.Writer) []bench.ShapeResult {
	if t == nil {
		return shapes
	}
	t.recorder.Stop()
	between, sampled := t.recorder.Readings()
	all := append(between, sampled...)
	locked, known := t.monitor.ClocksLocked(between)
	if known {
		env.ClocksLocked = &locked
	}
	if w := telemetry.ClockVariationWarning(all, locked); w != "" {
		fmt.Fprintf(stderr, "stepbench: warning: %s\n", w)
		env.TelemetryNotes = append(env.TelemetryNotes, w)
	}
	if u := t.monitor.Unsupported(); len(u) > 0 {
		env.TelemetryNotes = append(env.TelemetryNotes, fmt.Sprintf("NVML calls unsupported here: %v", u))
	}
	if len(all) > 0 && env.SMClockMHz == 0 {
		env.SMClockMHz = medianSMClock(all)
	}
	for i, s := range shapes {
		shapes[i] = t.kept(s)
	}
	if err := t.monitor.Close(); err != nil {
		fmt.Fprintf(stderr, "stepbench: %v\n", err)
	}
	return shapes
}

// kept is s with its throttled samples dropped from the statistics when
// --discard-throttled asked for it (the samples stay, marked).
func (t *runTelemetry) kept(s bench.ShapeResult) bench.ShapeResult {
	if t == nil || !t.discard {
		return s
	}
	kept, n := bench.DropSamples(s, func(x bench.Sample) bool { return t.recorder.Throttled(s.Shape, x) })
	t.dropped[[3]int{s.Batch, s.InputLen, s.OutputLen}] = n
	return kept
}

func medianSMClock(readings []telemetry.Reading) float64 {
	var clocks []float64
	for _, r := range readings {
		if r.SMClockMHz > 0 {
			clocks = append(clocks, r.SMClockMHz)
		}
	}
	if len(clocks) == 0 {
		return 0
	}
	return stats.Median(clocks)
}

// runRoofs are every roof known for the run and the one points use:
// measured (a cached calibration of this GPU), else device-derived (NVML
// clocks during the run), else the datasheet of --gpu; nil when none.
func runRoofs(env *report.Environment, gpu *roofline.Preset) (*roofline.Roof, []roofline.Roof) {
	var roofs []roofline.Roof
	if env.GPUUUID != "" {
		if c, err := roofline.LoadCalibration("", env.GPUUUID); err == nil {
			roofs = append(roofs, c.Roof())
		}
	}
	var major, minor int
	if _, err := fmt.Sscanf(env.ComputeCapability, "%d.%d", &major, &minor); err == nil {
		smClock := env.SMClockMHz
		if smClock == 0 {
			smClock = env.MaxSMClockMHz
		}
		memClock := env.MaxMemoryClockMHz
		if memClock == 0 {
			memClock = env.MemoryClockMHz
		}
		if c, err := roofline.ComputeDeviceCeilings(env.SMCount, major, minor, smClock, memClock, env.MemoryBusWidthBits); err == nil {
			roofs = append(roofs, c.Roof())
		}
	}
	if gpu != nil {
		roofs = append(roofs, gpu.Roof())
	}
	if len(roofs) == 0 {
		return nil, nil
	}
	return &roofs[0], roofs
}

// fillShape adds telemetry, energy and roofline points to a shape's report.
func (t *runTelemetry) fillShape(sr *report.ShapeReport, s bench.ShapeResult, cfg runner.Config, roof *roofline.Roof) {
	if t != nil {
		report.AttachTelemetry(t.recorder, sr)
		sr.DiscardedThrottledSamples = t.dropped[[3]int{s.Batch, s.InputLen, s.OutputLen}]
		if sr.DiscardedThrottledSamples > 0 {
			// The report's summaries follow the statistics actually used.
			sr.PrefillHostSeconds, sr.PrefillDeviceSeconds = s.Summary.PrefillHostSeconds, s.Summary.PrefillDeviceSeconds
			sr.DecodeHostSeconds, sr.DecodeDeviceSeconds = s.Summary.DecodeHostSeconds, s.Summary.DecodeDeviceSeconds
			sr.TotalHostSeconds = s.Summary.TotalHostSeconds
		}
	}
	sr.Energy = s.Energy
	if points, err := report.ShapeRooflinePoints(cfg, roof, s); err == nil {
		sr.RooflinePoints = points
	}
}

// writeTelemetryOutputs prints the telemetry and roofline table and draws
// --plot. It returns the shape reports it built (for --json-out).
func writeTelemetryOutputs(w io.Writer, plotPath string, t *runTelemetry, shapes []bench.ShapeResult, cfg runner.Config, env report.Environment, roof *roofline.Roof, stderr io.Writer) error {
	var reports []report.ShapeReport
	for _, s := range shapes {
		sr := report.NewShapeReport(s)
		t.fillShape(&sr, s, cfg, roof)
		reports = append(reports, sr)
	}
	var errs []error
	fmt.Fprintln(w)
	if roof != nil {
		fmt.Fprintf(w, "telemetry and roofline (roof: %s, %.1f TFLOP/s, %.2f TB/s, ridge %.0f FLOP/byte; J/token from NVML energy-counter windows >= %.0f s)\n",
			roof.Source, roof.PeakFLOPsPerSec/1e12, roof.PeakBytesPerSec/1e12, roof.RidgeFLOPsPerByte, bench.DefaultEnergyWindowSeconds)
	} else {
		fmt.Fprintln(w, "telemetry and roofline (no roof: pass --gpu for datasheet roofs)")
	}
	errs = append(errs, report.WriteTelemetryTable(w, reports))
	if plotPath != "" {
		title := fmt.Sprintf("%s on %s", cfg.Name, orString(env.GPUName, env.Backend))
		written, err := plot.Run(plotPath, cfg, roof, shapes, title)
		errs = append(errs, err)
		for _, p := range written {
			fmt.Fprintf(stderr, "stepbench: wrote %s\n", p)
		}
	}
	return errors.Join(errs...)
}

func orString(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// telemetryFlags are run's issue-4 flags.
type telemetryFlags struct {
	noTelemetry         bool
	discardThrottled    bool
	plot                string
	energyWindowSeconds float64

	// State of the run, set by runCmd.
	run  *runTelemetry
	roof *roofline.Roof
}

// report picks the roofs, prints the telemetry table and draws --plot.
func (t *telemetryFlags) report(w io.Writer, shapes []bench.ShapeResult, cfg runner.Config, env *report.Environment, gpu *roofline.Preset, stderr io.Writer) error {
	t.roof, env.Roofs = runRoofs(env, gpu)
	env.Roof = t.roof
	return writeTelemetryOutputs(w, t.plot, t.run, shapes, cfg, *env, t.roof, stderr)
}

func (t *telemetryFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&t.noTelemetry, "no-telemetry", false, "do not read NVML (power, clocks, temperatures, energy) between regions")
	fs.BoolVar(&t.discardThrottled, "discard-throttled", false, "drop samples flagged as throttled (SM clock < 75% of max, or power/thermal slowdown) from the statistics")
	fs.StringVar(&t.plot, "plot", "", "write a log-log roofline plot to FILE (.svg or .png) and a latency-vs-batch sweep plot to FILE with .sweep before the extension")
	fs.Float64Var(&t.energyWindowSeconds, "energy-window-seconds", bench.DefaultEnergyWindowSeconds, "minimum length of each energy window per shape (0: no energy windows)")
}

func (t *telemetryFlags) check() error {
	if t.plot != "" {
		if _, _, err := plot.Paths(t.plot); err != nil {
			return usagef("--plot: %v", err)
		}
	}
	if t.energyWindowSeconds < 0 {
		return usagef("--energy-window-seconds: %v must not be negative", t.energyWindowSeconds)
	}
	return nil
}

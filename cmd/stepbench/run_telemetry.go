package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/plot"
	"stepbench/bench/report"
	"stepbench/bench/telemetry"
	"stepbench/bench/telemetry/nvml"
)

// telemetryFlags are run's flags for NVML, energy and plots.
type telemetryFlags struct {
	noTelemetry         bool
	discardThrottled    bool
	plot                string
	energyWindowSeconds float64
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

// runTelemetry is the NVML side of one 'stepbench run'; nil when off.
type runTelemetry struct {
	monitor  *nvml.Monitor
	recorder *telemetry.Recorder
}

// startTelemetry opens NVML for the run's GPU (matched by UUID), adds its
// facts to env, wires the recorder and the energy meter into opt and starts
// the background sampler (every d.sampleEvery; never when negative).
// Without NVML it prints one notice and returns nil: the run goes on.
func startTelemetry(t telemetryFlags, d runDeps, env *report.Environment, opt *bench.Options, stderr io.Writer) *runTelemetry {
	if t.noTelemetry || env.Backend != "cuda" {
		return nil
	}
	m, err := d.openNVML(env.GPUUUID)
	if err != nil {
		note := fmt.Sprintf("no telemetry: %v", err)
		fmt.Fprintf(stderr, "stepbench: %s; the run goes on without it\n", note)
		env.TelemetryNotes = append(env.TelemetryNotes, note)
		return nil
	}
	m.Clock = d.now
	if env.MemoryBusWidthBits == 0 { // the CUDA device query's value wins; NVML's only fills a gap
		env.MemoryBusWidthBits = m.MemoryBusWidthBit
	}
	env.MaxMemoryClockMHz, env.PowerLimitWatts = m.MaxMemoryClockMHz, m.PowerLimitWatts
	if m.MaxSMClockMHz > 0 {
		env.MaxSMClockMHz = m.MaxSMClockMHz
	}
	rt := &runTelemetry{monitor: m, recorder: telemetry.NewRecorder(m, d.now)}
	opt.BeforeShape, opt.BetweenRegions = rt.recorder.BeforeShape, rt.recorder.AfterRegion
	if _, err := m.EnergyMillijoules(); err == nil && t.energyWindowSeconds > 0 {
		opt.EnergyMeter, opt.EnergyWindowSeconds = m, t.energyWindowSeconds
	} else if err != nil {
		env.TelemetryNotes = append(env.TelemetryNotes, fmt.Sprintf("no energy windows: %v", err))
	}
	if d.sampleEvery >= 0 {
		rt.recorder.Start(d.sampleEvery)
	}
	return rt
}

// Recorder is the run's recorder; nil without telemetry.
func (t *runTelemetry) Recorder() *telemetry.Recorder {
	if t == nil {
		return nil
	}
	return t.recorder
}

// finish stops the sampler, records in env whether clocks were locked,
// warns about unlocked varying clocks, notes the NVML calls this driver
// lacks and the run's median SM clock, and closes NVML.
func (t *runTelemetry) finish(env *report.Environment, stderr io.Writer) {
	if t == nil {
		return
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
	if env.SMClockMHz == 0 {
		env.SMClockMHz = telemetry.MedianSMClockMHz(all)
	}
	if err := t.monitor.Close(); err != nil {
		fmt.Fprintf(stderr, "stepbench: %v\n", err)
	}
}

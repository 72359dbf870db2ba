package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

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
	plotTimeline        string
	energyWindowSeconds float64
}

func (t *telemetryFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&t.noTelemetry, "no-telemetry", false, "do not read NVML (power, clocks, temperatures, energy) between regions")
	fs.BoolVar(&t.discardThrottled, "discard-throttled", false, "drop samples flagged as throttled (SM clock < 75% of max, or power/thermal slowdown) from the statistics")
	fs.StringVar(&t.plot, "plot", "", "write a log-log roofline plot to FILE (.svg or .png) and a latency-vs-batch sweep plot to FILE with .sweep before the extension (--plot x.sweep.png: the sweep x.sweep.png, the roofline x.png)")
	fs.StringVar(&t.plotTimeline, "plot-timeline", "", "write a timeline to FILE (.svg or .png): every timed region's latency, and NVML's power, SM clock (throttled readings marked) and temperatures, over wall time")
	fs.Float64Var(&t.energyWindowSeconds, "energy-window-seconds", bench.DefaultEnergyWindowSeconds, "minimum length of each energy window per shape (0: no energy windows)")
}

func (t *telemetryFlags) check() error {
	if t.plot != "" {
		if _, _, err := plot.Paths(t.plot); err != nil {
			return usagef("--plot: %v", err)
		}
	}
	if t.plotTimeline != "" {
		if err := plot.CheckPath(t.plotTimeline); err != nil {
			return usagef("--plot-timeline: %v", err)
		}
	}
	if !(t.energyWindowSeconds >= 0) || t.energyWindowSeconds > maxSeconds {
		return usagef("--energy-window-seconds: %v must be 0..%g", t.energyWindowSeconds, maxSeconds)
	}
	return nil
}

// runTelemetry is the NVML side of one 'stepbench run'; nil when off.
type runTelemetry struct {
	monitors []*nvml.Monitor // one per GPU of this node the run uses, in CUDA ordinal order
	recorder *telemetry.Recorder
}

// startTelemetry opens NVML for the run's GPUs (matched by UUID: the GPU,
// or every GPU of this node's tensor-parallel ranks), adds the first GPU's
// facts to env, wires the recorder and the energy meter into opt and
// starts the background sampler (every d.sampleEvery; never when
// negative). Several GPUs are read as one telemetry.Node: every reading
// keeps each GPU's and combines them (telemetry.Combine), and the energy
// counter is the sum of theirs. Without NVML it prints one notice and
// returns nil: the run goes on.
func startTelemetry(t telemetryFlags, d runDeps, env *report.Environment, opt *bench.Options, stderr io.Writer) *runTelemetry {
	if t.noTelemetry || env.Backend != "cuda" {
		return nil
	}
	monitors, err := openMonitors(d.openNVML, env)
	if err != nil {
		note := fmt.Sprintf("no telemetry: %v", err)
		fmt.Fprintf(stderr, "stepbench: %s; the run goes on without it\n", note)
		env.TelemetryNotes = append(env.TelemetryNotes, note)
		return nil
	}
	for _, m := range monitors {
		m.Clock = d.now
	}
	m := monitors[0]
	if env.MemoryBusWidthBits == 0 { // the CUDA device query's value wins; NVML's only fills a gap
		env.MemoryBusWidthBits = m.MemoryBusWidthBit
	}
	env.MaxMemoryClockMHz, env.PowerLimitWatts = m.MaxMemoryClockMHz, m.PowerLimitWatts
	env.DriverVersion = m.DriverVersion
	if m.MaxSMClockMHz > 0 {
		env.MaxSMClockMHz = m.MaxSMClockMHz
	}
	var source telemetry.Source = m
	var meter bench.EnergyMeter = m
	if len(monitors) > 1 {
		gpus := make([]telemetry.GPU, len(monitors))
		for i, g := range monitors {
			gpus[i] = telemetry.GPU{Index: i, UUID: env.TPGPUUUIDs[i], Source: g, Meter: g}
		}
		node := telemetry.NewNode(gpus)
		source, meter = node, node
	}
	rt := &runTelemetry{monitors: monitors, recorder: telemetry.NewRecorder(source, d.now)}
	opt.BeforeShape, opt.BetweenRegions = rt.recorder.BeforeShape, rt.recorder.AfterRegion
	// A GPU without the energy counter makes every window unavailable: said
	// once, here, never per shape.
	if _, err := meter.EnergyMillijoules(); err == nil && t.energyWindowSeconds > 0 {
		opt.EnergyMeter, opt.EnergyWindowSeconds = meter, t.energyWindowSeconds
	} else if err != nil {
		note := fmt.Sprintf("no energy windows: %v", err)
		env.TelemetryNotes = append(env.TelemetryNotes, note)
		if len(monitors) > 1 && t.energyWindowSeconds > 0 { // one GPU's run keeps its output as it was
			fmt.Fprintf(stderr, "stepbench: %s\n", note)
		}
	}
	if d.sampleEvery >= 0 {
		rt.recorder.Start(d.sampleEvery)
	}
	return rt
}

// openMonitors opens NVML on the run's GPU, or on each GPU of this node's
// tensor-parallel ranks (env.TPGPUUUIDs), all or none: a sum over some of
// them would understate the node.
func openMonitors(open func(uuid string) (*nvml.Monitor, error), env *report.Environment) ([]*nvml.Monitor, error) {
	if len(env.TPGPUUUIDs) < 2 {
		m, err := open(env.GPUUUID)
		if err != nil {
			return nil, err
		}
		return []*nvml.Monitor{m}, nil
	}
	var monitors []*nvml.Monitor
	for i, uuid := range env.TPGPUUUIDs {
		m, err := open(uuid)
		if err != nil {
			for _, opened := range monitors {
				_ = opened.Close() // the error that matters is this GPU's
			}
			return nil, fmt.Errorf("GPU %d (%s): %w", i, uuid, err)
		}
		monitors = append(monitors, m)
	}
	return monitors, nil
}

// Recorder is the run's recorder; nil without telemetry.
func (t *runTelemetry) Recorder() *telemetry.Recorder {
	if t == nil {
		return nil
	}
	return t.recorder
}

// finish stops the sampler, records in env whether clocks were locked
// (over several GPUs: on every one), warns about unlocked varying clocks
// (naming the GPU over several), notes the NVML calls a driver lacks and
// the run's median SM clock (the first GPU's, as the environment's other
// GPU fields), and closes NVML.
func (t *runTelemetry) finish(env *report.Environment, stderr io.Writer) {
	if t == nil {
		return
	}
	t.recorder.Stop()
	between, sampled := t.recorder.Readings()
	all := append(between, sampled...)
	allLocked, allKnown, someUnlocked := true, true, false
	unsupported := map[string]bool{}
	for i, m := range t.monitors {
		locked, known := m.ClocksLocked(telemetry.GPUReadings(between, i))
		allLocked, allKnown = allLocked && locked, allKnown && known
		someUnlocked = someUnlocked || (known && !locked)
		if w := telemetry.ClockVariationWarning(telemetry.GPUReadings(all, i), locked); w != "" {
			if len(t.monitors) > 1 {
				w = fmt.Sprintf("GPU %d (%s): %s", i, env.TPGPUUUIDs[i], w)
			}
			fmt.Fprintf(stderr, "stepbench: warning: %s\n", w)
			env.TelemetryNotes = append(env.TelemetryNotes, w)
		}
		for _, u := range m.Unsupported() {
			unsupported[u] = true
		}
	}
	if allKnown || someUnlocked { // one GPU known unlocked settles "not every GPU locked"
		env.ClocksLocked = &allLocked
	}
	if len(unsupported) > 0 {
		env.TelemetryNotes = append(env.TelemetryNotes, fmt.Sprintf("NVML calls unsupported here: %v", slices.Sorted(maps.Keys(unsupported))))
	}
	if env.SMClockMHz == 0 {
		env.SMClockMHz = telemetry.MedianSMClockMHz(telemetry.GPUReadings(all, 0))
	}
	for _, m := range t.monitors {
		if err := m.Close(); err != nil {
			fmt.Fprintf(stderr, "stepbench: %v\n", err)
		}
	}
}

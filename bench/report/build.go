package report

import (
	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
	"stepbench/bench/telemetry"
	"stepbench/runner"
)

// Builder turns a run's measured shapes into their report form, every one
// under the run's one roof and with its telemetry when there is some. It
// is the one place a ShapeReport is assembled.
type Builder struct {
	Model runner.Config
	// Roof is the run's roof (ChooseRoof); nil: no floors, and roofline
	// points with achieved rates only.
	Roof *roofline.Roof
	// Telemetry, when set, holds the readings filed under each region.
	Telemetry *telemetry.Recorder
	// DiscardThrottled drops the samples whose reading was throttled from
	// the statistics (--discard-throttled); the samples stay, marked.
	DiscardThrottled bool
	// TPSize, when set, is the run's tensor-parallel size: floors and points
	// are then one GPU's (its share of the work and its all-reduces at the
	// roof's link bandwidth), against the slowest rank's device time.
	TPSize int
	// KV is the run's KV cache layout: a step through the block table
	// costs its views' few bytes more (roofline.Costs).
	KV runner.KVOptions
}

// CostShape is a shape's work as the cost model takes it: each sequence's
// context and prompt (bench.Shape.Seqs), its InputLen and OutputLen.
func CostShape(s bench.Shape) roofline.Shape {
	return roofline.Shape{Seqs: s.Seqs(), InputLen: s.InputLen, OutputLen: s.OutputLen}
}

// Keep is s with the statistics the run reports: without its throttled
// samples when DiscardThrottled asks for it, with the count dropped.
func (b Builder) Keep(s bench.ShapeResult) (bench.ShapeResult, int) {
	if b.Telemetry == nil || !b.DiscardThrottled {
		return s, 0
	}
	return bench.DropSamples(s, func(x bench.Sample) bool { return b.Telemetry.Throttled(s.Shape, x) })
}

// Shape is s's report: every sample with its telemetry, the summaries of
// the kept samples, noise, energy, the floors of its prefill and first
// decode step under the roof, and its roofline points (prefill and the
// median decode step at their median device times).
func (b Builder) Shape(s bench.ShapeResult) ShapeReport {
	kept, dropped := b.Keep(s)
	sr := NewShapeReport(kept)
	sr.DiscardedThrottledSamples = dropped
	sr.Energy = s.Energy
	if b.Telemetry != nil {
		attachTelemetry(b.Telemetry, &sr)
	}
	costs, shape := roofline.Costs{TPSize: b.TPSize, KV: b.KV}, CostShape(s.Shape)
	if b.Roof != nil {
		if sf, err := costs.Floors(b.Model, *b.Roof, shape); err == nil {
			sr.PrefillFloorSeconds, sr.PrefillFLOPs, sr.PrefillBytes = sf.PrefillFloor.Seconds, sf.Prefill.FLOPs, sf.Prefill.Bytes
			if len(sf.Decode) > 0 {
				sr.DecodeFloorSeconds, sr.DecodeFLOPs, sr.DecodeBytes = sf.DecodeFloors[0].Seconds, sf.Decode[0].FLOPs, sf.Decode[0].Bytes
			}
		}
	}
	sum := kept.Summary
	points, err := costs.Points(b.Model, b.Roof, shape,
		StepSeconds(sum.PrefillDeviceSeconds, sum.PrefillHostSeconds), StepSeconds(sum.DecodeDeviceSeconds, sum.DecodeHostSeconds))
	if err == nil {
		sr.RooflinePoints = points
	}
	return sr
}

// Shapes is Shape of every shape, in order.
func (b Builder) Shapes(shapes []bench.ShapeResult) []ShapeReport {
	out := make([]ShapeReport, len(shapes))
	for i, s := range shapes {
		out[i] = b.Shape(s)
	}
	return out
}

// StepSeconds is the median device time when there is one, else the median
// host time (the cpu backend's events may measure nothing): the time a
// step's roofline point is placed at.
func StepSeconds(device, host stats.Summary) float64 {
	if device.N > 0 && device.Median > 0 {
		return device.Median
	}
	if host.N > 0 {
		return host.Median
	}
	return 0
}

// attachTelemetry fills a shape report's per-sample telemetry, its throttle
// count, its sampler timeline and its medians of power and SM clock; over
// several GPUs, the medians of the combined figures and each GPU's summary.
func attachTelemetry(r *telemetry.Recorder, sr *ShapeReport) {
	var power, clocks []float64
	var samples []SampleReport
	var readings []telemetry.Reading
	sr.ThrottledSamples = 0
	for i := range sr.Samples {
		s := &sr.Samples[i]
		reading, ok := r.Region(sr.Shape, s.Phase, s.Iter, s.Step)
		if !ok {
			continue
		}
		s.Telemetry = sampleTelemetry(reading)
		samples, readings = append(samples, *s), append(readings, reading)
		if reading.Throttled {
			sr.ThrottledSamples++
		}
		if reading.PowerWatts > 0 {
			power = append(power, reading.PowerWatts)
		}
		if reading.SMClockMHz > 0 {
			clocks = append(clocks, reading.SMClockMHz)
		}
	}
	medianPower, medianClock := &sr.MedianPowerWatts, &sr.MedianSMClockMHz
	if sr.GPUs = gpuSummaries(samples, readings); sr.GPUs != nil {
		medianPower, medianClock = &sr.MedianPowerWattsSum, &sr.MedianSMClockMHzMin
	}
	if len(power) > 0 {
		*medianPower = stats.Median(power)
	}
	if len(clocks) > 0 {
		*medianClock = stats.Median(clocks)
	}
	sr.TelemetryTimeline = r.Timeline(sr.Shape)
}

// sampleTelemetry is a reading in its report form, each GPU's own too when
// it covers several.
func sampleTelemetry(t telemetry.Reading) *Telemetry {
	out := &Telemetry{
		PowerWatts:               t.PowerWatts,
		SMClockMHz:               t.SMClockMHz,
		MemoryClockMHz:           t.MemoryClockMHz,
		TemperatureC:             t.GPUTemperatureC,
		ThrottleReasons:          t.ClockEventReasons,
		PowerSource:              t.PowerSource,
		MemoryTemperatureC:       t.MemoryTemperatureC,
		ClockEventReasonNames:    t.ReasonNames(),
		Throttled:                t.Throttled,
		EnergyCounterMillijoules: t.EnergyMillijoules,
		UnixNanos:                t.UnixNanos,
	}
	for _, g := range t.GPUs {
		out.GPUs = append(out.GPUs, GPUTelemetry{Index: g.Index, UUID: g.UUID, Telemetry: *sampleTelemetry(g.Reading)})
	}
	return out
}

package report

import (
	"stepbench/bench/stats"
	"stepbench/bench/telemetry"
)

// reportTelemetry converts a reading to its report form.
func reportTelemetry(t telemetry.Reading) *Telemetry {
	return &Telemetry{
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
}

// AttachTelemetry fills a shape report's per-sample telemetry, its throttle
// count, its sampler timeline and its medians of power and SM clock.
func AttachTelemetry(r *telemetry.Recorder, sr *ShapeReport) {
	var power, clocks []float64
	sr.ThrottledSamples = 0
	for i := range sr.Samples {
		s := &sr.Samples[i]
		reading, ok := r.Region(sr.Shape, s.Phase, s.Iter, s.Step)
		if !ok {
			continue
		}
		s.Telemetry = reportTelemetry(reading)
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
	if len(power) > 0 {
		sr.MedianPowerWatts = stats.Median(power)
	}
	if len(clocks) > 0 {
		sr.MedianSMClockMHz = stats.Median(clocks)
	}
	sr.TelemetryTimeline = r.Timeline(sr.Shape)
}

package report

import (
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/telemetry"
)

// countingSource reads an SM clock that grows by one MHz per reading, from
// 1000 MHz, of a GPU whose maximum is 1980 MHz: every reading is throttled.
type countingSource struct{ reads int }

func (c *countingSource) Read() telemetry.Reading {
	c.reads++
	mhz := float64(999 + c.reads)
	return telemetry.Reading{UnixNanos: int64(c.reads), SMClockMHz: mhz, PowerWatts: 100, Throttled: mhz < 0.75*1980}
}

func TestBuilderAttachesTelemetry(t *testing.T) {
	rec := telemetry.NewRecorder(&countingSource{}, nil)
	device := benchtest.NewDevice(1)
	opt := bench.Options{BatchSizes: []int{1, 2}, InputLens: []int{4}, OutputLens: []int{3}, NumIters: 2, WarmupIters: 1,
		VocabSize: 10, Now: device.Clock, BeforeShape: rec.BeforeShape, BetweenRegions: rec.AfterRegion}
	shapes, err := bench.Run(&benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, opt)
	if err != nil {
		t.Fatal(err)
	}
	sr := Builder{Telemetry: rec}.Shape(shapes[1])
	// Shape 2's first timed region is the 13th region of the run (each
	// shape: 1 warmup and 2 timed iterations of 3 regions).
	if sr.Samples[0].Telemetry == nil || sr.Samples[0].Telemetry.SMClockMHz != 1012 {
		t.Errorf("report sample 0 telemetry: %+v", sr.Samples[0].Telemetry)
	}
	if sr.ThrottledSamples != len(sr.Samples) || sr.MedianPowerWatts != 100 {
		t.Errorf("throttled samples %d of %d, median power %v", sr.ThrottledSamples, len(sr.Samples), sr.MedianPowerWatts)
	}
}

// With --discard-throttled the statistics leave the throttled samples out
// and the report counts them, while every sample stays in it.
func TestBuilderDiscardsThrottled(t *testing.T) {
	rec := telemetry.NewRecorder(&countingSource{}, nil)
	device := benchtest.NewDevice(1)
	opt := bench.Options{BatchSizes: []int{1}, InputLens: []int{4}, OutputLens: []int{3}, NumIters: 2,
		VocabSize: 10, Now: device.Clock, BeforeShape: rec.BeforeShape, BetweenRegions: rec.AfterRegion}
	shapes, err := bench.Run(&benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, opt)
	if err != nil {
		t.Fatal(err)
	}
	sr := Builder{Telemetry: rec, DiscardThrottled: true}.Shape(shapes[0])
	if sr.DiscardedThrottledSamples != 6 || len(sr.Samples) != 6 || sr.PrefillHostSeconds.N != 0 {
		t.Errorf("discarded %d of %d samples, prefill summary of %d", sr.DiscardedThrottledSamples, len(sr.Samples), sr.PrefillHostSeconds.N)
	}
}

package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
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

// twoGPUs is a node of two GPUs: GPU 0 at 300 W and 1980 MHz, GPU 1 at
// 350 W whose SM clock drops to 1400 MHz (throttled) on every third
// reading.
type twoGPUs struct{ reads int }

func (n *twoGPUs) Read() telemetry.Reading {
	n.reads++
	gpu1 := telemetry.Reading{UnixNanos: int64(n.reads), SMClockMHz: 1980, PowerWatts: 350, PowerSource: telemetry.PowerSourceInstant}
	if n.reads%3 == 0 {
		gpu1.SMClockMHz, gpu1.Throttled = 1400, true
	}
	return telemetry.Combine([]telemetry.GPUReading{
		{Index: 0, UUID: "GPU-0", Reading: telemetry.Reading{UnixNanos: int64(n.reads), SMClockMHz: 1980, PowerWatts: 300,
			PowerSource: telemetry.PowerSourceInstant}},
		{Index: 1, UUID: "GPU-1", Reading: gpu1},
	})
}

// Over several GPUs a shape reports the medians of the combined figures
// under their own names, each GPU's summary, and each sample's GPUs; the
// text names the sum and the minimum and prints a table per GPU.
func TestBuilderSeveralGPUs(t *testing.T) {
	rec := telemetry.NewRecorder(&twoGPUs{}, nil)
	device := benchtest.NewDevice(1)
	opt := bench.Options{BatchSizes: []int{1}, InputLens: []int{4}, OutputLens: []int{3}, NumIters: 2,
		VocabSize: 10, Now: device.Clock, BeforeShape: rec.BeforeShape, BetweenRegions: rec.AfterRegion}
	shapes, err := bench.Run(&benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, opt)
	if err != nil {
		t.Fatal(err)
	}
	sr := Builder{Telemetry: rec}.Shape(shapes[0])
	// 6 samples: readings 1..6, GPU 1 throttled at 3 and 6 (each
	// iteration's last decode step).
	if sr.MedianPowerWatts != 0 || sr.MedianPowerWattsSum != 650 || sr.MedianSMClockMHzMin != 1980 || sr.ThrottledSamples != 2 {
		t.Errorf("medians %v/%v W, %v MHz min, %d throttled; want the sum 650 W, 1980 MHz, 2", sr.MedianPowerWatts,
			sr.MedianPowerWattsSum, sr.MedianSMClockMHzMin, sr.ThrottledSamples)
	}
	want := []GPUSummary{
		{Index: 0, UUID: "GPU-0", PrefillMedianPowerWatts: 300, DecodeMedianPowerWatts: 300, PrefillMinSMClockMHz: 1980, DecodeMinSMClockMHz: 1980},
		{Index: 1, UUID: "GPU-1", PrefillMedianPowerWatts: 350, DecodeMedianPowerWatts: 350, PrefillMinSMClockMHz: 1980, DecodeMinSMClockMHz: 1400, ThrottledSamples: 2},
	}
	if !reflect.DeepEqual(sr.GPUs, want) {
		t.Errorf("GPU summaries %+v\nwant %+v", sr.GPUs, want)
	}
	r := Report{Schema: Schema, Environment: Environment{Backend: "cuda", TPSize: 2, TPRanks: []int{0, 1}}, Shapes: []ShapeReport{sr}}
	var text bytes.Buffer
	if err := WriteRunText(&text, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "two_gpus.txt", text.Bytes())
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"median_power_watts_sum": 650`, `"power_watts_sum": 650`, `"sm_clock_mhz_min": 1400`, `"throttled_any": true`,
		`"uuid": "GPU-1"`, `"decode_min_sm_clock_mhz": 1400`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("native report lacks %s", want)
		}
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if s := back.Shapes[0].Samples[2].Telemetry; s == nil || s.PowerWatts != 650 || !s.Throttled || len(s.GPUs) != 2 ||
		s.GPUs[1].UUID != "GPU-1" || s.GPUs[1].Telemetry.SMClockMHz != 1400 || !s.GPUs[1].Telemetry.Throttled || s.GPUs[0].Telemetry.Throttled {
		t.Errorf("sample 2's telemetry read back: %+v", s)
	}
}

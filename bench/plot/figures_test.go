package plot

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/telemetry"
	"stepbench/runner"
)

// sweepReports are llama-3-8b on an H100 under its datasheet roof, 3 input
// lengths × 7 batch sizes, 8 iterations each of 4 output tokens, at 1.4×
// (prefill) and 1.6× (decode) the floors with a few percent of jitter;
// every region has its start time and an NVML reading, the clock drops
// and throttles in the later shapes.
func sweepReports(t *testing.T) ([]report.ShapeReport, roofline.Roof) {
	t.Helper()
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := h100.Roof()
	var shapes []bench.ShapeResult
	for _, b := range []int{1, 2, 4, 8, 16, 32, 64} {
		for _, in := range []int{128, 1024, 4096} {
			f, err := roofline.ComputeFloors(cfg, roof, b, in, 4)
			if err != nil {
				t.Fatal(err)
			}
			var prefill []float64
			var decode [][]float64
			for i := range 8 {
				jitter := 1 + 0.04*math.Sin(float64(7*i+b+in))
				// ScriptedShape's device time is half the host time.
				prefill = append(prefill, 2*1.4*f.PrefillFloor.Seconds*jitter)
				decode = append(decode, []float64{2 * 1.6 * f.DecodeFloors[0].Seconds * jitter, 2 * 1.6 * f.DecodeFloors[1].Seconds * jitter,
					2 * 1.6 * f.DecodeFloors[2].Seconds / jitter})
			}
			shapes = append(shapes, benchtest.ScriptedShape(b, in, 4, prefill, decode))
		}
	}
	reports := report.Builder{Model: cfg, Roof: &roof}.Shapes(shapes)
	now := int64(1_700_000_000e9)
	for k := range reports {
		for i := range reports[k].Samples {
			s := &reports[k].Samples[i]
			s.StartUnixNanos = now
			now += int64(s.HostSeconds*1e9) + 2e5
			clock := 1980 - 2*float64(k)
			s.Telemetry = &report.Telemetry{PowerWatts: 300 + 10*float64(k) + 50*float64(s.Step), SMClockMHz: clock, TemperatureC: 40 + float64(k),
				MemoryTemperatureC: 45 + float64(k), Throttled: clock < 1960 && i%5 == 0, UnixNanos: now}
		}
		reports[k].TelemetryTimeline = []telemetry.Reading{{UnixNanos: now - 1e5, PowerWatts: 320 + 10*float64(k), SMClockMHz: 1980 - 2*float64(k),
			GPUTemperatureC: 40 + float64(k)}}
	}
	return reports, roof
}

// The figures of a sweep say what they show: the roof's name and source
// in the roofline's title and legend, labels that name their series,
// intervals as error bars; the sweep's file is named as written; the
// timeline has a panel per figure. With STEPBENCH_PLOT_DIR set they are
// also written there as PNGs, to look at.
func TestFiguresOfASweep(t *testing.T) {
	reports, roof := sweepReports(t)
	dir := t.TempDir()
	written, err := Run(filepath.Join(dir, "x.sweep.svg"), &roof, reports, "llama-3-8b on H100")
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || written[0] != filepath.Join(dir, "x.svg") || written[1] != filepath.Join(dir, "x.sweep.svg") {
		t.Errorf("--plot x.sweep.svg wrote %v, want x.svg and x.sweep.svg", written)
	}
	rooflineSVG, _ := os.ReadFile(written[0])
	for _, want := range []string{"(datasheet roof: H100 SXM5 80GB)", "roof: datasheet (H100", "b=64/4k", "b=1/128", "bars: 95% interval"} {
		if !bytes.Contains(rooflineSVG, []byte(want)) {
			t.Errorf("roofline lacks %q", want)
		}
	}
	sweepSVG, _ := os.ReadFile(written[1])
	if !bytes.Contains(sweepSVG, []byte("bar: its 95% interval")) || !bytes.Contains(sweepSVG, []byte("datasheet roof: H100")) {
		t.Error("sweep lacks its error bars' legend or the roof")
	}
	timeline := filepath.Join(dir, "t.svg")
	if err := WriteTimelinePlot(timeline, reports, "llama-3-8b on H100: timeline"); err != nil {
		t.Fatal(err)
	}
	timelineSVG, _ := os.ReadFile(timeline)
	for _, want := range []string{"step latency (ms)", "power (W)", "SM clock (MHz)", "temperature (°C)", "throttled reading (",
		"prefill (a timed region each)", "decode step", "wall time since the first timed region (s)", "b=64 in=4096 out=4"} {
		if !bytes.Contains(timelineSVG, []byte(want)) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	if out := os.Getenv("STEPBENCH_PLOT_DIR"); out != "" {
		if _, err := Run(filepath.Join(out, "sweep-roofline.png"), &roof, reports, "llama-3-8b on H100"); err != nil {
			t.Fatal(err)
		}
		if err := WriteTimelinePlot(filepath.Join(out, "timeline.png"), reports, "llama-3-8b on H100: timeline"); err != nil {
			t.Fatal(err)
		}
		if err := WriteTimelinePlot(filepath.Join(out, "timeline-cpu.png"), Shapeless(reports[:3]), "llama-3-8b on cpu: timeline"); err != nil {
			t.Fatal(err)
		}
	}
}

// Shapeless drops the telemetry of reports, as a cpu run has none.
func Shapeless(reports []report.ShapeReport) []report.ShapeReport {
	var out []report.ShapeReport
	for _, r := range reports {
		r.TelemetryTimeline = nil
		r.Samples = append([]report.SampleReport(nil), r.Samples...)
		for i := range r.Samples {
			r.Samples[i].Telemetry = nil
		}
		out = append(out, r)
	}
	return out
}

// Every median of eight iterations has its interval, and the interval
// holds the point's time.
func TestMedianIntervals(t *testing.T) {
	reports, _ := sweepReports(t)
	for _, r := range reports[:4] {
		for _, p := range r.RooflinePoints {
			lo, hi := MedianInterval(r, p.Phase)
			if !(lo > 0 && lo <= p.Seconds*1.01 && hi >= p.Seconds*0.99) {
				t.Errorf("b=%d in=%d %s: interval [%g, %g] of %g", r.Batch, r.InputLen, p.Phase, lo, hi, p.Seconds)
			}
		}
	}
	few := report.Builder{}.Shapes([]bench.ShapeResult{benchtest.ScriptedShape(1, 8, 2, []float64{1, 2}, [][]float64{{1}, {2}})})
	if lo, hi := MedianInterval(few[0], bench.PhasePrefill); lo != 0 || hi != 0 {
		t.Errorf("two iterations: interval [%g, %g], want none", lo, hi)
	}
}

func TestPaths(t *testing.T) {
	for _, tc := range []struct{ in, roofline, sweep string }{
		{"x.png", "x.png", "x.sweep.png"}, {"x.sweep.png", "x.png", "x.sweep.png"}, {"d/a.b.SVG", "d/a.b.SVG", "d/a.b.sweep.SVG"},
		{".sweep.png", ".sweep.png", ".sweep.sweep.png"},
	} {
		r, s, err := Paths(tc.in)
		if err != nil || r != tc.roofline || s != tc.sweep {
			t.Errorf("Paths(%q) = %q, %q, %v; want %q, %q", tc.in, r, s, err, tc.roofline, tc.sweep)
		}
	}
	if _, _, err := Paths("x.pdf"); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("x.pdf: %v", err)
	}
}

package bench_test

import (
	"math"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/compare"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// virtualRun runs one arm alone on its own virtual device (host time is
// the device's clock too) with the given sampling.
func virtualRun(t *testing.T, seed uint64, slowdown, noise float64, numIters int, adaptive bench.Adaptive) []bench.ShapeResult {
	t.Helper()
	device := benchtest.NewDevice(seed)
	opt := abOptions(device)
	opt.NumIters, opt.Adaptive = numIters, adaptive
	shapes, err := bench.Run(&benchtest.Arm{Name: "A", Device: device, Slowdown: slowdown, Noise: noise}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return shapes
}

func TestAdaptiveSampling(t *testing.T) {
	tests := []struct {
		name       string
		noise      float64
		adaptive   bench.Adaptive
		wantReason string
		wantIters  func(n int) bool
	}{
		{"0.5% noise reaches the 0.5% target", 0.005, bench.DefaultAdaptive(), bench.StopTargetNoise, func(n int) bool { return n >= 10 && n < 200 }},
		{"no noise stops at the minimum", 1e-9, bench.Adaptive{TargetNoise: 0.005, MaxSeconds: 15, MinIters: 7}, bench.StopTargetNoise, func(n int) bool { return n == 7 }},
		{"50% noise runs out of time", 0.5, bench.Adaptive{TargetNoise: 0.005, MaxSeconds: 2, MinIters: 10}, bench.StopMaxSeconds,
			func(n int) bool { return n > 10 && n < 200 }}, // ~15 ms an iteration of virtual time
		{"never fewer than the minimum", 0.5, bench.Adaptive{TargetNoise: 0.005, MaxSeconds: 1e-9, MinIters: 12}, bench.StopMaxSeconds,
			func(n int) bool { return n == 12 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range virtualRun(t, 1, 1, tc.noise, 0, tc.adaptive) {
				n := len(s.Iterations)
				if s.StopReason != tc.wantReason || !tc.wantIters(n) || !s.Complete {
					t.Errorf("batch %d: %d iterations, stopped by %s (complete %v), want %s", s.Batch, n, s.StopReason, s.Complete, tc.wantReason)
				}
				worst := math.Max(math.Max(s.Noise.PrefillHost, s.Noise.PrefillDevice), math.Max(s.Noise.DecodeHost, s.Noise.DecodeDevice))
				if tc.wantReason == bench.StopTargetNoise && worst > tc.adaptive.TargetNoise {
					t.Errorf("batch %d: stopped at target noise with noise %.4f", s.Batch, worst)
				}
			}
		})
	}
}

// The case: a 2% shift under 0.5% noise is detected with the
// default adaptive sampling. The virtual device has no drift between runs,
// so the reports are compared without a run-to-run floor (--threshold 0).
func TestDefaultSettingsDetectTwoPercent(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		want  string
	}{{1.02, stats.VerdictSlower}, {0.98, stats.VerdictFaster}, {1, stats.VerdictSame}} {
		old := virtualRun(t, 1, 1, 0.005, 0, bench.DefaultAdaptive())
		newer := virtualRun(t, 2, tc.scale, 0.005, 0, bench.DefaultAdaptive())
		toReport := func(shapes []bench.ShapeResult) report.Report {
			r := report.Report{Schema: report.Schema}
			for _, s := range shapes {
				r.Shapes = append(r.Shapes, report.NewShapeReport(s))
			}
			return r
		}
		res, err := compare.Reports(toReport(old), toReport(newer), compare.Options{ThresholdSet: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Rows {
			if r.Verdict != tc.want {
				t.Errorf("×%g batch %d %s: %s after %d/%d iterations (ratio %.4f [%.4f, %.4f], p %.2g), want %s", tc.scale,
					r.Batch, r.Metric, r.Verdict, r.Old.N, r.New.N, r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, tc.want)
			}
		}
	}
}

func TestFixedCountAndLabels(t *testing.T) {
	for _, s := range virtualRun(t, 1, 1, 0.01, 5, bench.Adaptive{}) {
		if len(s.Iterations) != 5 || s.StopReason != bench.StopNumIters {
			t.Errorf("fixed count: %d iterations, %s", len(s.Iterations), s.StopReason)
		}
	}
}

package compare

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/stats"
	"stepbench/runner"
)

// syntheticShape is a shape whose prefill and decode host and device times
// are base·scale·(1 + noise·N(0,1)), from a seeded generator; decode steps
// grow by 2% per position, as attention does with the KV length.
func syntheticShape(seed uint64, base, scale, noise float64, iters, decodeSteps int) report.ShapeReport {
	rng := rand.New(rand.NewPCG(seed, 7))
	draw := func(b float64) float64 { return b * scale * (1 + noise*rng.NormFloat64()) }
	s := report.ShapeReport{Shape: bench.Shape{Batch: 1, InputLen: 64, OutputLen: decodeSteps + 1}, Complete: true}
	for i := 0; i < iters; i++ {
		s.Samples = append(s.Samples, report.SampleReport{Phase: bench.PhasePrefill, Iter: i, HostSeconds: draw(10 * base), DeviceSeconds: draw(9 * base)})
		for step := 0; step < decodeSteps; step++ {
			grow := 1 + 0.02*float64(step)
			s.Samples = append(s.Samples, report.SampleReport{Phase: bench.PhaseDecode, Iter: i, Step: step, Position: 64 + step,
				HostSeconds: draw(base * grow), DeviceSeconds: draw(0.9 * base * grow)})
		}
	}
	return s
}

func syntheticReport(seed uint64, scale, noise float64, iters int) report.Report {
	return report.Report{Schema: report.Schema, Shapes: []report.ShapeReport{syntheticShape(seed, 1e-3, scale, noise, iters, 10)}}
}

// prefillReport has prefill only, so that noise is the per-iteration noise.
func prefillReport(seed uint64, scale, noise float64, iters int) report.Report {
	return report.Report{Schema: report.Schema, Shapes: []report.ShapeReport{syntheticShape(seed, 1e-3, scale, noise, iters, 0)}}
}

// noFloor compares by the statistics alone (--threshold 0): synthetic
// reports have no drift between runs.
var noFloor = Options{ThresholdSet: true}

func mustCompare(t *testing.T, o, n report.Report, opt Options) Result {
	t.Helper()
	res, err := Reports(o, n, opt)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCompareVerdicts(t *testing.T) {
	tests := []struct {
		name        string
		old, new    report.Report
		wantVerdict string
	}{
		{"2% slower under 0.5% noise", syntheticReport(1, 1, 0.005, 20), syntheticReport(2, 1.02, 0.005, 20), stats.VerdictSlower},
		{"2% faster under 0.5% noise", syntheticReport(1, 1, 0.005, 20), syntheticReport(2, 0.98, 0.005, 20), stats.VerdictFaster},
		{"a run against itself", syntheticReport(1, 1, 0.005, 20), syntheticReport(1, 1, 0.005, 20), stats.VerdictSame},
		{"identical distributions", syntheticReport(1, 1, 0.005, 30), syntheticReport(2, 1, 0.005, 30), stats.VerdictSame},
		{"10% slower under 15% noise, 3 iterations", prefillReport(1, 1, 0.15, 3), prefillReport(2, 1.1, 0.15, 3), stats.VerdictInconclusive},
		{"10% slower under 15% noise, 5 iterations", prefillReport(1, 1, 0.15, 5), prefillReport(2, 1.1, 0.15, 5), stats.VerdictInconclusive},
		{"10% slower under 15% noise, 300 iterations", prefillReport(1, 1, 0.15, 300), prefillReport(2, 1.1, 0.15, 300), stats.VerdictSlower},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustCompare(t, tc.old, tc.new, noFloor)
			if want := len(bench.IterationSeries(tc.old.Shapes[0].IterationResults())); len(res.Rows) != want || want < 2 {
				t.Fatalf("got %d rows, want %d", len(res.Rows), want)
			}
			iters := res.Rows[0].Old.N
			for _, r := range res.Rows {
				if r.Verdict != tc.wantVerdict {
					t.Errorf("%s: verdict %s (ratio %.4f [%.4f, %.4f], p %.3g), want %s", r.Metric, r.Verdict,
						r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, tc.wantVerdict)
				}
				if iters >= 4 && (!(r.RatioLow <= r.Ratio && r.Ratio <= r.RatioHigh) || r.RatioConfidence < 0.95) {
					t.Errorf("%s: ratio %.4f outside its interval [%.4f, %.4f] at %g", r.Metric, r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence)
				}
				if (r.Verdict == stats.VerdictInconclusive) != (r.SamplesNeeded > iters) {
					t.Errorf("%s: %s after %d iterations with %d said to be needed", r.Metric, r.Verdict, iters, r.SamplesNeeded)
				}
			}
		})
	}
}

// A real slowdown is never called SAME, whatever the iteration count.
func TestCompareTenPercentSlowdownIsNeverSame(t *testing.T) {
	for iters := 1; iters <= 40; iters++ {
		old := syntheticReport(uint64(iters), 1, 0.03, iters)
		slower := syntheticReport(uint64(iters), 1, 0.03, iters)
		for i := range slower.Shapes[0].Samples {
			slower.Shapes[0].Samples[i].HostSeconds *= 1.10
			slower.Shapes[0].Samples[i].DeviceSeconds *= 1.10
		}
		for _, r := range mustCompare(t, old, slower, noFloor).Rows {
			want := []string{stats.VerdictSlower, stats.VerdictInconclusive}
			if iters >= 4 {
				want = want[:1] // ×1.10 separates the samples completely: p is its minimum
			}
			if !slices.Contains(want, r.Verdict) {
				t.Errorf("%d iterations, %s: %s (ratio %.4f [%.4f, %.4f], p %.3g), want one of %v",
					iters, r.Metric, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, want)
			}
		}
	}
}

// Decode steps are compared per iteration: a 3% slowdown of every step is
// found although the steps' times differ by 40% from the first position to
// the last (pooled, that spread would hide it).
func TestCompareDecodeIsNotPooledAcrossPositions(t *testing.T) {
	res := mustCompare(t, syntheticReport(1, 1, 0.002, 12), syntheticReport(2, 1.03, 0.002, 12), noFloor)
	for _, r := range res.Rows {
		if strings.HasPrefix(r.Metric, "decode") && r.Verdict != stats.VerdictSlower {
			t.Errorf("%s: %s (ratio %.4f [%.4f, %.4f]), want SLOWER", r.Metric, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh)
		}
		if r.Old.N != 12 {
			t.Errorf("%s: %d values, want one per iteration (12)", r.Metric, r.Old.N)
		}
	}
}

func TestCompareThreshold(t *testing.T) {
	old, slower := syntheticReport(1, 1, 0.002, 30), syntheticReport(2, 1.02, 0.002, 30)
	tests := []struct {
		threshold float64
		want      string
	}{{0, stats.VerdictSlower}, {0.01, stats.VerdictSlower}, {0.05, stats.VerdictSame}, {0.02, stats.VerdictInconclusive}}
	for _, tc := range tests {
		for _, r := range mustCompare(t, old, slower, Options{Threshold: tc.threshold, ThresholdSet: true}).Rows {
			if r.Metric == bench.MetricPrefillDevice && r.Verdict != tc.want {
				t.Errorf("threshold %g: %s (ratio %.4f [%.4f, %.4f]), want %s", tc.threshold, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, tc.want)
			}
		}
	}
}

func TestCompareTooFewSamples(t *testing.T) {
	oldReport := report.Report{Shapes: []report.ShapeReport{syntheticShape(1, 1e-3, 1, 0.01, 2, 3)}}
	newReport := report.Report{Shapes: []report.ShapeReport{syntheticShape(2, 1e-3, 2, 0.01, 2, 3)}}
	res := mustCompare(t, oldReport, newReport, Options{})
	for _, r := range res.Rows {
		if r.Verdict != stats.VerdictInconclusive || len(r.Notes) == 0 || r.SamplesNeeded < 4 {
			t.Errorf("%s: %s, notes %q, needed %d; want INCONCLUSIVE with notes and >= 4 needed", r.Metric, r.Verdict, r.Notes, r.SamplesNeeded)
		}
	}
	var md, js bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"Inf", "NaN", "+Inf", "-Inf"} {
		if strings.Contains(md.String(), bad) {
			t.Errorf("markdown shows %q:\n%s", bad, md.String())
		}
	}
	for _, note := range res.Notes() {
		if n := strings.Count(md.String(), note.Note); n != 1 {
			t.Errorf("note %q printed %d times", note.Note, n)
		}
	}
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
}

func TestCompareNoCommonShape(t *testing.T) {
	o, n := syntheticReport(1, 1, 0.01, 5), syntheticReport(2, 1, 0.01, 5)
	n.Shapes[0].Batch = 8
	if _, err := Reports(o, n, Options{}); !errors.Is(err, ErrNoCommonShape) {
		t.Errorf("error %v, want ErrNoCommonShape", err)
	}
}

func TestCompareWarnsOnEnvironmentAndShapes(t *testing.T) {
	oldReport, newReport := syntheticReport(1, 1, 0.01, 10), syntheticReport(2, 1, 0.01, 10)
	oldReport.Environment = report.Environment{GPUName: "NVIDIA H100 80GB HBM3", DriverVersion: "550.1", SMClockMHz: 1980}
	newReport.Environment = report.Environment{GPUName: "NVIDIA H200", DriverVersion: "550.1", SMClockMHz: 1755}
	oldReport.Config.Flags = map[string]string{"disable-cuda-graph": "false", "json-out": "a.json", "num-iters": "3"}
	newReport.Config.Flags = map[string]string{"disable-cuda-graph": "true", "json-out": "b.json", "num-iters": "0"}
	oldReport.Config.Model.Name, newReport.Config.Model.Name = "llama-3-8b", "llama-3.2-1b"
	newReport.Shapes = append(newReport.Shapes, report.ShapeReport{Shape: bench.Shape{Batch: 8, InputLen: 64, OutputLen: 1}})
	newReport.Shapes[0].Complete, newReport.Shapes[0].StopReason = false, bench.StopInterrupted
	joined := strings.Join(mustCompare(t, oldReport, newReport, Options{}).Warnings, "\n")
	for _, want := range []string{"GPU differs", "SM clock MHz differs", "model differs", "--disable-cuda-graph",
		"batch_size=8 input_len=64 output_len=1 is only in NEW", "stopped early in NEW (interrupted)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	for _, unwanted := range []string{"driver", "json-out", "num-iters"} {
		if strings.Contains(joined, unwanted) {
			t.Errorf("warnings mention %q, which did not change what was measured:\n%s", unwanted, joined)
		}
	}
}

// An FP8 run against a bf16 one of the same model: the quantization is
// named (from the model's configuration and from --quantization), the
// model is not called different.
func TestCompareWarnsOnQuantization(t *testing.T) {
	oldReport, newReport := syntheticReport(1, 1, 0.01, 10), syntheticReport(2, 1, 0.01, 10)
	oldReport.Config.Model.Name, newReport.Config.Model.Name = "llama-3-8b", "llama-3-8b"
	newReport.Config.Model.Quantization = runner.QuantizeAtLoad()
	oldReport.Config.Flags = map[string]string{"quantization": ""}
	newReport.Config.Flags = map[string]string{"quantization": "fp8"}
	joined := strings.Join(mustCompare(t, oldReport, newReport, Options{}).Warnings, "\n")
	for _, want := range []string{`quantization differs: OLD "none (bf16)", NEW "fp8 (quantized-at-load): E4M3 weights scaled per tensor, activations dynamic per tensor"`,
		`--quantization OLD "" NEW "fp8"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "model differs") {
		t.Errorf("a quantization of the same model is called another model:\n%s", joined)
	}
}

// goldenComparison has a verdict of every kind, rows without intervals, a
// metric that cannot be compared and an emulated, unverified run, under a
// 1% floor given as --threshold.
func goldenComparison(t *testing.T) Result {
	old := syntheticReport(1, 1, 0.005, 20)
	old.Shapes = append(old.Shapes, syntheticShape(5, 2e-3, 1, 0.05, 3, 0), syntheticShape(7, 1e-3, 1, 0.01, 8, 3))
	old.Shapes[2].InputLen = 128
	newer := syntheticReport(2, 1.02, 0.005, 20)
	newer.Shapes = append(newer.Shapes, syntheticShape(6, 2e-3, 1.2, 0.05, 3, 0), syntheticShape(8, 1e-3, 1, 0.01, 8, 3))
	newer.Shapes[2].InputLen = 128
	for i := range newer.Shapes[2].Samples {
		newer.Shapes[2].Samples[i].DeviceSeconds = 0 // a run whose device timer gave nothing
	}
	newer.Shapes[0].Samples = slices.DeleteFunc(newer.Shapes[0].Samples, func(s report.SampleReport) bool { return s.Iter >= 12 })
	unverified := false
	newer.Verified, newer.Verification = &unverified, &report.Verification{Status: report.VerificationSkipped, Kernels: "kernels from fast/ (attention.cu changed)"}
	for _, r := range []*report.Report{&old, &newer} {
		r.Environment = report.Environment{Backend: "cuda", Emulated: "stepbench emulated GPU"}
	}
	// A change smaller than the band, significant: SAME, saying so.
	old.Shapes = append(old.Shapes, syntheticShape(9, 1e-3, 1, 0.001, 20, 0))
	newer.Shapes = append(newer.Shapes, syntheticShape(10, 1e-3, 1.004, 0.001, 20, 0))
	old.Shapes[3].InputLen, newer.Shapes[3].InputLen = 256, 256
	floor := Options{Threshold: 0.01, ThresholdSet: true}
	res := mustCompare(t, old, newer, floor)
	res.Rows[0] = mustCompare(t, old, old, floor).Rows[0] // a SAME row
	// A shape timed on a busy host, under the emulated device's floor: no
	// verdict within the load's reach.
	busy, idle := 0.6, 0.01
	o, n := syntheticReport(11, 1, 0.01, 8), syntheticReport(12, 1.2, 0.01, 8)
	o.Shapes[0].InputLen, n.Shapes[0].InputLen = 512, 512
	o.Shapes[0].HostOtherCPUFraction, n.Shapes[0].HostOtherCPUFraction = &busy, &idle
	o.Environment, n.Environment = old.Environment, newer.Environment
	res.Rows = append(res.Rows, mustCompare(t, o, n, Options{}).Rows[:2]...)
	return res
}

func TestCompareOutputsGolden(t *testing.T) {
	res := goldenComparison(t)
	var md, csvOut, js bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "compare.md", md.Bytes())
	if err := WriteCSV(&csvOut, res); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "compare.csv", csvOut.Bytes())
	records, err := csv.NewReader(bytes.NewReader(csvOut.Bytes())).ReadAll()
	if err != nil || len(records) != 1+len(res.Rows) {
		t.Errorf("csv: %d records, %v", len(records), err)
	}
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "compare.json", js.Bytes())
	var decoded map[string]any
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
}

// kthRatio and mannWhitneyCritical against brute force and tables.

func TestPairedNeedsShapes(t *testing.T) {
	res, err := Paired(nil, nil, Options{})
	if !errors.Is(err, ErrNoCommonShape) || !res.Paired {
		t.Errorf("empty A/B: %v", err)
	}
}

// The method line names the test that made the verdicts: an A/B run's
// paired sign test, two runs' Mann-Whitney U.
func TestMethodTextNamesTheTest(t *testing.T) {
	tests := []struct {
		paired      bool
		want, never string
	}{
		{false, "Mann-Whitney U test", "sign test"},
		{true, "exact two-sided sign test", "Mann-Whitney"},
	}
	for _, tt := range tests {
		var md bytes.Buffer
		if err := WriteMarkdown(&md, Result{Alpha: 0.05, Confidence: 0.95, Paired: tt.paired}); err != nil {
			t.Fatal(err)
		}
		if text := md.String(); !strings.Contains(text, tt.want) || strings.Contains(text, tt.never) {
			t.Errorf("paired=%v: method text %q, want %q and no %q", tt.paired, text, tt.want, tt.never)
		}
	}
}

// Between separate runs the default floor is the backends': an A/A pair
// of reports 8% apart with tight intervals is a verdict without a floor,
// none on the emulated device or the cpu backend, SLOWER on a GPU's 3%.
func TestRunToRunFloorPerBackend(t *testing.T) {
	old, newer := syntheticReport(1, 1, 0.003, 30), syntheticReport(2, 1.08, 0.003, 30)
	tests := []struct {
		env  report.Environment
		want string
	}{
		{report.Environment{Backend: "cuda"}, stats.VerdictSlower},
		{report.Environment{Backend: "cuda", Emulated: "stepbench emulated GPU"}, stats.VerdictSame},
		{report.Environment{Backend: "cpu"}, stats.VerdictSame},
		{report.Environment{}, stats.VerdictSlower}, // an old report: a GPU's floor
	}
	for _, tc := range tests {
		old.Environment, newer.Environment = tc.env, tc.env
		res := mustCompare(t, old, newer, Options{})
		wantFloor, _ := RunToRunFloor(tc.env)
		if res.Threshold != wantFloor || !strings.Contains(strings.Join(res.Header, "\n"), "stepbench ab") {
			t.Errorf("%+v: threshold %g, header %q", tc.env, res.Threshold, res.Header)
		}
		for _, r := range res.Rows {
			if r.Verdict != tc.want {
				t.Errorf("%+v %s: %s (ratio %.4f [%.4f, %.4f]), want %s", tc.env, r.Metric, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, tc.want)
			}
		}
	}
	// --threshold replaces the floor.
	old.Environment, newer.Environment = report.Environment{Backend: "cpu"}, report.Environment{Backend: "cpu"}
	for _, r := range mustCompare(t, old, newer, Options{Threshold: 0.05, ThresholdSet: true}).Rows {
		if r.Verdict != stats.VerdictSlower {
			t.Errorf("--threshold 5 on the cpu backend: %s %s", r.Metric, r.Verdict)
		}
	}
}

func TestReportsRefuseWhatTheyCannotJudge(t *testing.T) {
	gpu := syntheticReport(1, 1, 0.005, 10)
	gpu.Environment = report.Environment{Backend: "cuda", GPUName: "NVIDIA H200"}
	emu := syntheticReport(2, 1, 0.005, 10)
	emu.Environment = report.Environment{Backend: "cuda", Emulated: "stepbench emulated GPU"}
	twice := syntheticReport(3, 1, 0.005, 10)
	twice.Shapes = append(twice.Shapes, twice.Shapes[0])
	for _, tc := range []struct {
		name     string
		old, new report.Report
		opt      Options
		want     string
	}{
		{"emulated against a GPU", gpu, emu, Options{}, "NEW was made on the emulated CUDA device"},
		{"a GPU against emulated", emu, gpu, Options{}, "OLD was made on the emulated CUDA device"},
		{"a shape twice", twice, gpu, Options{}, "OLD lists shape batch_size=1 input_len=64 output_len=11 twice"},
		{"alpha NaN", gpu, gpu, Options{Alpha: math.NaN()}, "alpha NaN"},
		{"alpha above 0.5", gpu, gpu, Options{Alpha: 0.6}, "alpha 0.6"},
		{"threshold NaN", gpu, gpu, Options{Threshold: math.NaN(), ThresholdSet: true}, "threshold NaN"},
		{"threshold 1", gpu, gpu, Options{Threshold: 1, ThresholdSet: true}, "threshold 1"},
		{"confidence 0.5", gpu, gpu, Options{Confidence: 0.5}, "confidence 0.5"},
	} {
		_, err := Reports(tc.old, tc.new, tc.opt)
		if !errors.Is(err, ErrIncomparable) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v, want ErrIncomparable saying %q", tc.name, err, tc.want)
		}
	}
}

// A metric one run lacks or measured as zeros is listed with its reason,
// never dropped in silence.
func TestUnjudgedMetricsAreListed(t *testing.T) {
	old := syntheticReport(1, 1, 0.005, 10)
	tests := []struct {
		name   string
		mutate func(*report.ShapeReport)
		want   map[string]string
	}{
		{"no samples at all", func(s *report.ShapeReport) { s.Samples = nil }, map[string]string{
			bench.MetricPrefillHost: "NEW has no samples of it", bench.MetricDecodeDevice: "NEW has no samples of it"}},
		{"no decode phase", func(s *report.ShapeReport) {
			s.Samples = slices.DeleteFunc(s.Samples, func(x report.SampleReport) bool { return x.Phase == bench.PhaseDecode })
		}, map[string]string{bench.MetricDecodeHost: "NEW has no samples of it"}},
		{"zero host times", func(s *report.ShapeReport) {
			for i := range s.Samples {
				s.Samples[i].HostSeconds = 0
			}
		}, map[string]string{bench.MetricPrefillHost: "NEW has 10 of 10 iterations with a time that is zero"}},
	}
	for _, tc := range tests {
		newer := syntheticReport(2, 1, 0.005, 10)
		tc.mutate(&newer.Shapes[0])
		res := mustCompare(t, old, newer, noFloor)
		if len(res.Rows)+len(res.Unjudged) != 4 {
			t.Errorf("%s: %d rows and %d unjudged, want 4 in all", tc.name, len(res.Rows), len(res.Unjudged))
		}
		for metric, want := range tc.want {
			i := slices.IndexFunc(res.Unjudged, func(u Unjudged) bool { return u.Metric == metric })
			if i < 0 || !strings.Contains(res.Unjudged[i].Reason, want) {
				t.Errorf("%s: %s not listed with %q: %+v", tc.name, metric, want, res.Unjudged)
			}
		}
	}
}

// Other processes' load inflates a cpu or emulated run's times: a shape
// timed while others kept 60% of the host busy can be 2.5x slower for that
// alone, so between separate runs a difference within that reach is
// INCONCLUSIVE (never SAME: the load hides a change as easily as it makes
// one), a light load only widens what FASTER must clear, and on a GPU or
// under --threshold the load changes no verdict.
func TestHostLoadLeavesNoVerdictWithinItsReach(t *testing.T) {
	old, newer := syntheticReport(1, 2.2, 0.003, 30), syntheticReport(2, 1, 0.003, 30)
	busy, light, idle := 0.6, 0.05, 0.0
	for _, tc := range []struct {
		name     string
		backend  string
		old, new *float64
		opt      Options
		want     string
		says     string // in the rows' notes or the warnings
	}{
		{"busy", "cpu", &busy, &idle, Options{}, stats.VerdictInconclusive, "host busy: other processes used 60% (OLD) and 0% (NEW)"},
		{"light load", "cpu", &light, &idle, Options{}, stats.VerdictFaster, "FASTER needs the interval below 0.67, SLOWER above 1.4"},
		{"quiet", "cpu", &idle, &idle, Options{}, stats.VerdictFaster, ""},
		{"unknown (an older report)", "cpu", nil, nil, Options{}, stats.VerdictFaster, ""},
		{"busy, on a GPU", "cuda", &busy, &idle, Options{}, stats.VerdictFaster, ""},
		{"busy, --threshold 5", "cpu", &busy, &idle, Options{Threshold: 0.05, ThresholdSet: true}, stats.VerdictFaster, "--threshold 5% is taken to cover it"},
	} {
		old.Environment, newer.Environment = report.Environment{Backend: tc.backend}, report.Environment{Backend: tc.backend}
		old.Shapes[0].HostOtherCPUFraction, newer.Shapes[0].HostOtherCPUFraction = tc.old, tc.new
		res := mustCompare(t, old, newer, tc.opt)
		for _, r := range res.Rows {
			if r.Verdict != tc.want || r.HostBusy != (tc.name == "busy") {
				t.Errorf("%s: %s %s (ratio %.3f [%.3f, %.3f], load %.3g, busy %v), want %s", tc.name,
					r.Metric, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, r.Load, r.HostBusy, tc.want)
			}
		}
		var md bytes.Buffer
		if err := WriteMarkdown(&md, res); err != nil {
			t.Fatal(err)
		}
		if says := strings.Contains(md.String(), "other processes used"); says != (tc.says != "") || !strings.Contains(md.String(), tc.says) {
			t.Errorf("%s: the comparison does not say %q:\n%s", tc.name, tc.says, md.String())
		}
	}
}

// The cases of issue 30, as report files would hold them: a run timed on a
// host others kept 70% busy against the same run scaled by 1.10 and 1.34
// (a slower kernel), and against an unloaded run 1.75x faster: never SAME,
// whose band would have been wider than the change.
func TestSlowdownsOnABusyHostAreNeverSame(t *testing.T) {
	busy, quiet := 0.7, 0.02
	for _, tc := range []struct {
		name  string
		scale float64
		share *float64
	}{{"x1.10", 1.10, &busy}, {"x1.34", 1.34, &busy}, {"x1.75, the new run quiet", 1.0 / 1.75, &quiet}} {
		old := syntheticReport(1, 1, 0.05, 12)
		newer := syntheticReport(2, tc.scale, 0.05, 12)
		old.Environment, newer.Environment = report.Environment{Backend: "cpu"}, report.Environment{Backend: "cpu"}
		old.Shapes[0].HostOtherCPUFraction, newer.Shapes[0].HostOtherCPUFraction = &busy, tc.share
		for _, r := range mustCompare(t, old, newer, Options{}).Rows {
			if r.Verdict == stats.VerdictSame || r.Verdict == stats.VerdictFaster {
				t.Errorf("%s: %s %s (ratio %.3f [%.3f, %.3f], p %.2g)", tc.name, r.Metric, r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, r.PValue)
			}
		}
	}
}

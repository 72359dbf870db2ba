package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// syntheticShape is a shape whose prefill and decode host and device times
// are base·scale·(1 + noise·N(0,1)), from a seeded generator.
func syntheticShape(seed uint64, base, scale, noise float64, iters, decodeSteps int) ShapeReport {
	rng := rand.New(rand.NewPCG(seed, 7))
	draw := func(b float64) float64 { return b * scale * (1 + noise*rng.NormFloat64()) }
	s := ShapeReport{BatchSize: 1, InputLen: 64, OutputLen: decodeSteps + 1, Complete: true}
	for i := 0; i < iters; i++ {
		s.Samples = append(s.Samples, SampleReport{Phase: PhasePrefill, Iter: i, HostSeconds: draw(10 * base), DeviceSeconds: draw(9 * base)})
		for step := 0; step < decodeSteps; step++ {
			s.Samples = append(s.Samples, SampleReport{Phase: PhaseDecode, Iter: i, Step: step, Position: 64 + step,
				HostSeconds: draw(base), DeviceSeconds: draw(0.9 * base)})
		}
	}
	return s
}

func syntheticReport(seed uint64, scale, noise float64) Report {
	return Report{Schema: ReportSchema, Shapes: []ShapeReport{syntheticShape(seed, 1e-3, scale, noise, 30, 10)}}
}

func TestCompareVerdicts(t *testing.T) {
	tests := []struct {
		name        string
		newScale    float64
		noise       float64
		wantVerdict string
	}{
		{"5% slower under 1% noise", 1.05, 0.01, VerdictSlower},
		{"5% faster under 1% noise", 0.95, 0.01, VerdictFaster},
		{"identical distributions", 1.0, 0.01, VerdictSame},
		// Significant but inside the runs' own noise: not a verdict.
		{"2% shift under 5% noise", 1.02, 0.05, VerdictSame},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Compare(syntheticReport(1, 1, tc.noise), syntheticReport(2, tc.newScale, tc.noise), CompareOptions{})
			if len(res.Rows) != 4 {
				t.Fatalf("got %d rows, want 4 (prefill/decode × host/device)", len(res.Rows))
			}
			for _, r := range res.Rows {
				if r.Verdict != tc.wantVerdict {
					t.Errorf("%s: verdict %s (ratio %.4f [%.4f, %.4f], p %.3g, noise %.3g/%.3g), want %s", r.Metric, r.Verdict,
						r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, r.Old.RelativeNoise, r.New.RelativeNoise, tc.wantVerdict)
				}
				if tc.wantVerdict != VerdictSame && (r.RatioLow <= 1 && r.RatioHigh >= 1) {
					t.Errorf("%s: ratio interval [%.4f, %.4f] includes 1", r.Metric, r.RatioLow, r.RatioHigh)
				}
				if !(r.RatioLow <= r.Ratio && r.Ratio <= r.RatioHigh) {
					t.Errorf("%s: ratio %.4f outside its interval [%.4f, %.4f]", r.Metric, r.Ratio, r.RatioLow, r.RatioHigh)
				}
				if math.Abs(r.Ratio-tc.newScale) > 3*tc.noise {
					t.Errorf("%s: ratio %.4f far from %.4f", r.Metric, r.Ratio, tc.newScale)
				}
				if !(r.Old.LowSeconds <= r.Old.MedianSeconds && r.Old.MedianSeconds <= r.Old.HighSeconds) {
					t.Errorf("%s: old median %g outside its interval [%g, %g]", r.Metric, r.Old.MedianSeconds, r.Old.LowSeconds, r.Old.HighSeconds)
				}
			}
		})
	}
}

func TestCompareTooFewSamplesIsSameWithNote(t *testing.T) {
	oldReport := Report{Shapes: []ShapeReport{syntheticShape(1, 1e-3, 1, 0.01, 2, 0)}}
	newReport := Report{Shapes: []ShapeReport{syntheticShape(2, 1e-3, 2, 0.01, 2, 0)}}
	res := Compare(oldReport, newReport, CompareOptions{})
	if len(res.Rows) != 2 {
		t.Fatalf("got %d rows, want 2 (prefill host and device only)", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Verdict != VerdictSame || len(r.Notes) == 0 {
			t.Errorf("%s: verdict %s notes %q; want SAME with a note about sample size", r.Metric, r.Verdict, r.Notes)
		}
	}
	var buf bytes.Buffer
	if err := WriteCompareJSON(&buf, res); err != nil { // ±Inf interval bounds must encode
		t.Fatal(err)
	}
}

func TestCompareWarnsOnEnvironmentAndShapes(t *testing.T) {
	oldReport, newReport := syntheticReport(1, 1, 0.01), syntheticReport(2, 1, 0.01)
	oldReport.Environment = Environment{GPUName: "NVIDIA H100 80GB HBM3", DriverVersion: "550.1", SMClockMHz: 1980}
	newReport.Environment = Environment{GPUName: "NVIDIA H200", DriverVersion: "550.1", SMClockMHz: 1755}
	oldReport.Config.Flags = map[string]string{"disable-cuda-graph": "false", "json-out": "a.json"}
	newReport.Config.Flags = map[string]string{"disable-cuda-graph": "true", "json-out": "b.json"}
	oldReport.Config.Model.Name, newReport.Config.Model.Name = "llama-3-8b", "llama-3.2-1b"
	newReport.Shapes = append(newReport.Shapes, ShapeReport{BatchSize: 8, InputLen: 64, OutputLen: 1})
	joined := strings.Join(Compare(oldReport, newReport, CompareOptions{}).Warnings, "\n")
	for _, want := range []string{"GPU differs", "SM clock MHz differs", "model differs", "--disable-cuda-graph", "batch_size=8 input_len=64 output_len=1 is only in NEW"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	for _, unwanted := range []string{"driver", "json-out"} {
		if strings.Contains(joined, unwanted) {
			t.Errorf("warnings mention %q, which did not change what was measured:\n%s", unwanted, joined)
		}
	}
}

func TestCompareOutputs(t *testing.T) {
	res := Compare(syntheticReport(1, 1, 0.01), syntheticReport(2, 1.05, 0.01), CompareOptions{})
	var md, csvOut, js bytes.Buffer
	if err := WriteCompareMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| 1 | 64 | 11 | decode_device |") || !strings.Contains(md.String(), VerdictSlower) {
		t.Errorf("markdown lacks the decode_device row or the verdict:\n%s", md.String())
	}
	if err := WriteCompareCSV(&csvOut, res); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&csvOut).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 1+len(res.Rows) || records[0][len(records[0])-1] != "verdict" {
		t.Errorf("csv: %d records, header %v", len(records), records[0])
	}
	if err := WriteCompareJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Rows []struct {
			Metric  string  `json:"metric"`
			Ratio   float64 `json:"ratio"`
			Verdict string  `json:"verdict"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if len(decoded.Rows) != 4 || decoded.Rows[0].Verdict != VerdictSlower || decoded.Rows[0].Ratio < 1.02 {
		t.Errorf("json rows: %+v", decoded.Rows)
	}
}

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"stepbench/bench/stats"
	"strings"
	"testing"
	"unicode/utf8"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

func sampleReport() Report {
	shape := NewShapeReport(benchtest.ScriptedShape(2, 16, 3, []float64{0.1, 0.2}, [][]float64{{0.01, 0.02}, {0.03, 0.04}}))
	shape.PrefillFloorSeconds, shape.DecodeFloorSeconds = 0.05, 0.005
	shape.DecodeBytes, shape.DecodeFLOPs = 15.01e9, 3.2e10
	shape.Samples[1].Telemetry = &Telemetry{PowerWatts: 612.5, SMClockMHz: 1980}
	return Report{
		Schema:      Schema,
		ToolVersion: "v0.1.0",
		Environment: Environment{Backend: "cuda", GPUName: "NVIDIA H200", PowerLimitWatts: 700},
		Config:      RunConfig{Seed: 7, NumIters: 2, Flags: map[string]string{"batch-size": "2"}},
		Shapes:      []ShapeReport{shape},
	}
}

func TestReportRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	want := sampleReport()
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, want)
	}
	if n := len(got.Shapes[0].Samples); n != 6 {
		t.Errorf("%d samples, want 2 iterations × 3", n)
	}
	data, _ := os.ReadFile(path)
	for _, key := range []string{`"prefill_host_seconds"`, `"decode_device_seconds"`, `"host_seconds"`,
		`"position"`, `"prefill_floor_seconds"`, `"decode_bytes"`, `"decode_flops"`, `"power_watts"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("report lacks %s", key)
		}
	}
	if bytes.Contains(data, []byte(`"gpu_uuid"`)) {
		t.Errorf("empty optional environment field written")
	}
}

func TestReadReportErrors(t *testing.T) {
	valid, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, data, wantErr string
	}{
		{"not json", "hello", "not a JSON object"},
		{"no schema", `{"shapes":[]}`, `no "schema"`},
		{"other schema", `{"schema":"stepbench/v2"}`, `unsupported schema "stepbench/v2"`},
		{"wrong field type", `{"schema":"stepbench/v1","shapes":{}}`, "decode stepbench/v1"},
		{"bad shape", `{"schema":"stepbench/v1","shapes":[{"batch_size":0,"input_len":1,"output_len":1}]}`, "shape 0"},
		{"bad phase", strings.Replace(string(valid), `"phase":"decode"`, `"phase":"verify"`, 1), `unknown phase "verify"`},
		{"negative time", strings.Replace(string(valid), `"host_seconds":0.1`, `"host_seconds":-0.1`, 1), "negative time"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Errorf("no error for a missing file")
	}
	if err := Write(filepath.Join(t.TempDir(), "r.json"), Report{Schema: "other"}); err == nil {
		t.Errorf("Write accepted a foreign schema")
	}
}

func FuzzParseReport(f *testing.F) {
	valid, err := json.Marshal(sampleReport())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"schema":"stepbench/v1"}`))
	f.Add([]byte(`{"schema":"stepbench/v1","shapes":[{"batch_size":1,"input_len":1,"output_len":1,"samples":[{"phase":"prefill"}]}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		// What compare and the text tables make of a report read back
		// must not panic on what parses.
		for _, s := range r.Shapes {
			its := s.IterationResults()
			for _, series := range bench.IterationSeries(its) {
				_ = stats.Summarize(series.Values)
				_ = stats.MedianNoise(series.Values)
			}
			_ = bench.ShapeNoise(its)
		}
		_ = WriteRunText(io.Discard, r)
		// Whatever parses must survive its own round trip.
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("re-parse of a valid report failed: %v", err)
		}
	})
}

func TestWriteSummaryTable(t *testing.T) {
	shapes := []bench.ShapeResult{
		benchtest.ScriptedShape(1, 128, 3, []float64{0.012}, [][]float64{{0.004, 0.006}}),
		benchtest.ScriptedShape(8, 128, 1, []float64{0.05}, [][]float64{nil}),
		benchtest.ScriptedShape(2, 16, 2, []float64{0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016},
			[][]float64{{0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}}),
	}
	var plain bytes.Buffer
	if err := WriteSummaryTable(&plain, Builder{}.Shapes(shapes), nil); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "summary.txt", plain.Bytes())
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[4], "±: ") {
		t.Fatalf("want header + 3 rows + the noise legend:\n%s", plain.String())
	}
	if strings.Contains(plain.String(), "derived") || strings.Contains(plain.String(), "Inf") {
		t.Errorf("attainment columns without floors, or an infinity")
	}
	// bench.Shape 1: prefill host 12 ms, device 6 ms; decode host median 5 ms,
	// device 2.5 ms, p90 5.8 ms; overall (128+3)·1/0.022 tok/s; one
	// iteration gives no interval.
	for _, want := range []string{"12.000±n/a", "6.000±n/a", "5.000±n/a", "2.500±n/a", "5.800", "5954.55±n/a"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %s", lines[1], want)
		}
	}
	if !strings.Contains(lines[2], "-") {
		t.Errorf("output_len 1 row should show missing decode: %q", lines[2])
	}
	// Seven iterations 10..16 ms: the 95% interval of the median is [10, 16], ±3/13.
	if !strings.Contains(lines[3], "13.000±23.08%") {
		t.Errorf("row %q lacks the prefill noise ±23.08%%", lines[3])
	}
	// Columns are aligned: every line has the same width.
	for _, l := range lines[1:4] {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("unaligned line %q (header %d wide)", l, len(lines[0]))
		}
	}

	// Under a roof: each phase's floor and attainment are the roofline
	// point's, floor / median device time: llama-tiny's prefill of 128
	// tokens under a 1 TFLOP/s, 10 GB/s roof, against 6 ms.
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := roofline.NewRoof(roofline.SourceDatasheet, "test", 1e12, 1e10)
	reports := Builder{Model: cfg, Roof: &roof}.Shapes(shapes[:1])
	var withFloors bytes.Buffer
	if err := WriteSummaryTable(&withFloors, reports, &roof); err != nil {
		t.Fatal(err)
	}
	out := withFloors.String()
	prefill := reports[0].RooflinePoints[0]
	if prefill.Phase != bench.PhasePrefill || prefill.Seconds != 0.006 {
		t.Fatalf("prefill point %+v", prefill)
	}
	for _, want := range []string{"derived", fmt.Sprintf("%.3f", 1e3*prefill.FloorSeconds), fmt.Sprintf("%.1f%%", 100*prefill.FloorSeconds/0.006)} {
		if !strings.Contains(out, want) {
			t.Errorf("table with floors lacks %q:\n%s", want, out)
		}
	}
}

func TestReportGolden(t *testing.T) {
	r := sampleReport()
	adaptive := bench.DefaultAdaptive()
	r.Config.Adaptive = &adaptive
	prefillOnly := NewShapeReport(benchtest.ScriptedShape(1, 16, 1, []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, make([][]float64, 6)))
	r.Shapes = append(r.Shapes, prefillOnly)
	path := filepath.Join(t.TempDir(), "report.json")
	if err := Write(path, r); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.json", data)
	// An output_len of 1 has no decode summary: null, not zeros.
	var raw struct {
		Shapes []map[string]json.RawMessage `json:"shapes"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if got := string(raw.Shapes[1]["decode_host_seconds"]); got != "null" {
		t.Errorf("decode summary of a prefill-only shape: %s, want null", got)
	}
	if got := string(raw.Shapes[1]["noise"]); !strings.Contains(got, `"prefill_host": 0.71`) || !strings.Contains(got, `"decode_host": null`) {
		t.Errorf("noise %s", got)
	}
}

package report

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
		_ = WriteRunText(io.Discard, r, TextOptions{})
		_ = WriteRunText(io.Discard, r, TextOptions{Wide: true})
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

// summaryShapes are three shapes: one iteration, no decode, seven iterations.
func summaryShapes() []bench.ShapeResult {
	return []bench.ShapeResult{
		benchtest.ScriptedShape(1, 128, 3, []float64{0.012}, [][]float64{{0.004, 0.006}}),
		benchtest.ScriptedShape(8, 128, 1, []float64{0.05}, [][]float64{nil}),
		benchtest.ScriptedShape(2, 16, 2, []float64{0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016},
			[][]float64{{0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}}),
	}
}

func TestWriteSummaryTable(t *testing.T) {
	shapes := summaryShapes()
	var plain, wide bytes.Buffer
	if err := WriteSummaryTable(&plain, Builder{}.Shapes(shapes), nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteWideSummaryTable(&wide, Builder{}.Shapes(shapes), nil); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "summary.txt", append(plain.Bytes(), wide.Bytes()...))
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[4], "ms: ") {
		t.Fatalf("want header + 3 rows + the legend:\n%s", plain.String())
	}
	if strings.Contains(plain.String(), "attain") || strings.Contains(plain.String(), "Inf") {
		t.Errorf("attainment columns without a roof, or an infinity")
	}
	// Shape 1: prefill device 6 ms; decode device median 2.5 ms; overall
	// (128+3)·1/0.022 tok/s; one iteration gives no interval. Four
	// significant digits.
	for _, want := range []string{"6.000±n/a", "2.500±n/a", "5955±n/a"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %s", lines[1], want)
		}
	}
	if !strings.Contains(lines[2], "-") {
		t.Errorf("output_len 1 row should show missing decode: %q", lines[2])
	}
	// Seven iterations 10..16 ms (device: half): the 95% interval of the
	// median is [5, 8], ±1.5/6.5 = 23%.
	if !strings.Contains(lines[3], "6.500±23%") {
		t.Errorf("row %q lacks the prefill noise ±23%%", lines[3])
	}
	// The wide table keeps host and device times, the p90, the old legend.
	for _, want := range []string{"prefill_host_ms", "12.00±n/a", "6.000±n/a", "5.000±n/a", "2.500±n/a", "5.800", "5955±n/a", "13.00±23.08%", SummaryNoiseLegend} {
		if !strings.Contains(wide.String(), want) {
			t.Errorf("wide table lacks %s:\n%s", want, wide.String())
		}
	}
	// Columns are aligned: every row has the header's width.
	for _, l := range lines[1:4] {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("unaligned line %q (header %d wide)", l, len(lines[0]))
		}
	}

	// Under a roof: each phase's attainment is the roofline point's, floor
	// / median device time: llama-tiny's prefill of 128 tokens under a 1
	// TFLOP/s, 10 GB/s roof, against 6 ms.
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := roofline.NewRoof(roofline.SourceDatasheet, "test", 1e12, 1e10)
	reports := Builder{Model: cfg, Roof: &roof}.Shapes(shapes[:1])
	var withRoof, wideRoof bytes.Buffer
	if err := WriteSummaryTable(&withRoof, reports, &roof); err != nil {
		t.Fatal(err)
	}
	if err := WriteWideSummaryTable(&wideRoof, reports, &roof); err != nil {
		t.Fatal(err)
	}
	prefill := reports[0].RooflinePoints[0]
	if prefill.Phase != bench.PhasePrefill || prefill.Seconds != 0.006 {
		t.Fatalf("prefill point %+v", prefill)
	}
	attain := Sig(100*prefill.FloorSeconds/0.006, 3) + "%"
	for _, want := range []string{"prefill_attain", attain, "attain: floor / time"} {
		if !strings.Contains(withRoof.String(), want) {
			t.Errorf("table under a roof lacks %q:\n%s", want, withRoof.String())
		}
	}
	for _, want := range []string{"derived", Sig(1e3*prefill.FloorSeconds, 4), attain} {
		if !strings.Contains(wideRoof.String(), want) {
			t.Errorf("wide table with floors lacks %q:\n%s", want, wideRoof.String())
		}
	}
}

// The summary keeps within 120 columns at the widest values a run gives
// (a 128k prompt, 100k iterations, a 12 s prefill, a 5 µs decode step, a
// million tokens per second, noise of 100%, attainment under a roof).
func TestSummaryFits120Columns(t *testing.T) {
	wide := benchtest.ScriptedShape(1024, 131072, 8192, []float64{12.345, 12.4}, [][]float64{{5.123e-6}, {5.2e-6}})
	wide.Iterations = slices.Repeat(wide.Iterations, 50000)
	wide.Finish(bench.StopTargetNoise)
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := roofline.NewRoof(roofline.SourceDatasheet, "test", 1e12, 1e10)
	reports := Builder{Model: cfg, Roof: &roof}.Shapes([]bench.ShapeResult{wide})
	reports[0].Noise.PrefillDevice, reports[0].Noise.DecodeDevice, reports[0].Noise.TotalHost = 1, 0.01234, 0.5
	r := Report{Environment: Environment{Backend: "cuda", Roof: &roof, Emulated: "emu"}, Shapes: reports}
	var b bytes.Buffer
	if err := WriteRunText(&b, r, TextOptions{SummaryOnly: true}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > SummaryColumns {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	if !strings.Contains(b.String(), "100000") {
		t.Errorf("summary lacks the iterations:\n%s", b.String())
	}
}

func TestSig(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		n    int
		want string
	}{{13.179, 4, "13.18"}, {0.0021234, 4, "0.002123"}, {765140.21, 4, "765140"}, {9.99996, 4, "10.00"}, {0, 4, "0"},
		{-0.5, 2, "-0.50"}, {40.1234, 3, "40.1"}, {0.0071, 3, "0.00710"}, {999.96, 4, "1000"}} {
		if got := Sig(tc.v, tc.n); got != tc.want {
			t.Errorf("Sig(%g, %d) = %q, want %q", tc.v, tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{{512, "512 B"}, {3670016, "3.67 MB"}, {16060522496, "16.1 GB"}, {1000, "1.00 kB"}} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
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

package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// scriptedShape builds a shape whose host times are given: prefill[i] and
// decode[i] for iteration i.
func scriptedShape(batch, inputLen, outputLen int, prefill []float64, decode [][]float64) ShapeResult {
	s := ShapeResult{Shape: Shape{Batch: batch, InputLen: inputLen, OutputLen: outputLen}, Complete: true}
	for i := range prefill {
		it := IterationResult{Iter: i, Prefill: Sample{Phase: PhasePrefill, Iter: i,
			HostSeconds: prefill[i], DeviceSeconds: prefill[i] / 2}}
		it.TotalHostSeconds = prefill[i]
		for step, d := range decode[i] {
			it.Decode = append(it.Decode, Sample{Phase: PhaseDecode, Iter: i, Step: step,
				Position: inputLen + step, HostSeconds: d, DeviceSeconds: d / 2})
			it.TotalHostSeconds += d
		}
		s.Iterations = append(s.Iterations, it)
	}
	s.finish(StopNumIters)
	return s
}

// jsonKeys returns the top-level keys of a JSON object in document order.
func jsonKeys(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", data)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestNewOneBatchRecordFormulas(t *testing.T) {
	// Three iterations: prefill 0.3, 0.1, 0.2 (median 0.2); decode steps of
	// all iterations 0.01,0.04 | 0.02,0.05 | 0.03,0.06 (median 0.035); totals
	// 0.35, 0.17, 0.29 (median 0.29).
	s := scriptedShape(4, 100, 3, []float64{0.3, 0.1, 0.2},
		[][]float64{{0.01, 0.04}, {0.02, 0.05}, {0.03, 0.06}})
	rec := NewOneBatchRecord("run", s)
	checks := []struct {
		name      string
		got, want float64
	}{
		{"prefill_latency", rec.PrefillLatency, 0.2},
		{"prefill_throughput", rec.PrefillThroughput, 4 * 100 / 0.2},
		{"median_decode_latency", *rec.MedianDecodeLatency, 0.035},
		{"median_decode_throughput", *rec.MedianDecodeThroughput, 4 / 0.035},
		{"total_latency", rec.TotalLatency, 0.29},
		{"overall_throughput", rec.OverallThroughput, (100 + 3) * 4 / 0.29},
	}
	for _, c := range checks {
		if !closeTo(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if rec.RunName != "run" || rec.BatchSize != 4 || rec.InputLen != 100 || rec.OutputLen != 3 {
		t.Errorf("identity fields: %+v", rec)
	}
}

func TestAppendOneBatchJSONLKeysAndAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(path, []byte(`{"earlier":true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withDecode := NewOneBatchRecord("a", scriptedShape(1, 8, 4, []float64{0.1}, [][]float64{{0.01, 0.02, 0.03}}))
	prefillOnly := NewOneBatchRecord("a", scriptedShape(1, 8, 1, []float64{0.1}, [][]float64{nil}))
	if err := AppendOneBatchJSONL(path, []OneBatchRecord{withDecode}); err != nil {
		t.Fatal(err)
	}
	if err := AppendOneBatchJSONL(path, []OneBatchRecord{prefillOnly}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 3 || lines[0] != `{"earlier":true}` {
		t.Fatalf("file not appended to:\n%s", data)
	}
	full := []string{"run_name", "batch_size", "input_len", "output_len", "prefill_latency",
		"prefill_throughput", "median_decode_latency", "median_decode_throughput", "total_latency",
		"overall_throughput"}
	if got := jsonKeys(t, []byte(lines[1])); !slices.Equal(got, full) {
		t.Errorf("keys %v, want %v", got, full)
	}
	withoutMedians := slices.DeleteFunc(slices.Clone(full), func(k string) bool { return strings.HasPrefix(k, "median_") })
	if got := jsonKeys(t, []byte(lines[2])); !slices.Equal(got, withoutMedians) {
		t.Errorf("output_len 1 keys %v, want %v", got, withoutMedians)
	}
	if err := AppendOneBatchJSONL(filepath.Join(t.TempDir(), "missing", "x.jsonl"), nil); err == nil {
		t.Errorf("no error for a missing directory")
	}
}

func TestWriteVLLMJSON(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "latency.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteVLLMJSON(path, []float64{10, 1, 4, 3, 2}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jsonKeys(t, data), []string{"avg_latency", "std_latency", "latencies", "percentiles"}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	var doc struct {
		Avg         float64            `json:"avg_latency"`
		Std         float64            `json:"std_latency"`
		Latencies   []float64          `json:"latencies"`
		Percentiles map[string]float64 `json:"percentiles"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// Mean 4; squared deviations 36+9+0+1+4 = 50; ddof=0 → sqrt(10).
	if !closeTo(doc.Avg, 4) || !closeTo(doc.Std, 3.1622776601683795) {
		t.Errorf("avg %v std %v, want 4 and sqrt(10)", doc.Avg, doc.Std)
	}
	if !slices.Equal(doc.Latencies, []float64{10, 1, 4, 3, 2}) {
		t.Errorf("latencies %v not kept in order", doc.Latencies)
	}
	want := map[string]float64{"10": 1.4, "25": 2, "50": 3, "75": 4, "90": 7.6, "99": 9.76}
	if len(doc.Percentiles) != len(want) {
		t.Errorf("percentiles %v", doc.Percentiles)
	}
	for k, v := range want {
		if !closeTo(doc.Percentiles[k], v) {
			t.Errorf("percentile %s = %v, want %v", k, doc.Percentiles[k], v)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := WriteVLLMJSON(path, nil); err == nil {
		t.Errorf("no error for zero iterations")
	}
}

func sampleReport() Report {
	shape := NewShapeReport(scriptedShape(2, 16, 3, []float64{0.1, 0.2}, [][]float64{{0.01, 0.02}, {0.03, 0.04}}))
	shape.PrefillFloorSeconds, shape.DecodeFloorSeconds = 0.05, 0.005
	shape.DecodeBytes, shape.DecodeFLOPs = 15.01e9, 3.2e10
	shape.Samples[1].Telemetry = &Telemetry{PowerWatts: 612.5, SMClockMHz: 1980}
	return Report{
		Schema:      ReportSchema,
		ToolVersion: "v0.1.0",
		Environment: Environment{Backend: "cuda", GPUName: "NVIDIA H200", PowerLimitWatts: 700},
		Config:      RunConfig{Seed: 7, NumIters: 2, Flags: map[string]string{"batch-size": "2"}},
		Shapes:      []ShapeReport{shape},
	}
}

func TestReportRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	want := sampleReport()
	if err := WriteReport(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(path)
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
		_, err := ParseReport([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	if _, err := ReadReport(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Errorf("no error for a missing file")
	}
	if err := WriteReport(filepath.Join(t.TempDir(), "r.json"), Report{Schema: "other"}); err == nil {
		t.Errorf("WriteReport accepted a foreign schema")
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
		r, err := ParseReport(data)
		if err != nil {
			return
		}
		// Whatever parses must survive its own round trip.
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := ParseReport(again); err != nil {
			t.Fatalf("re-parse of a valid report failed: %v", err)
		}
	})
}

func TestWriteSummaryTable(t *testing.T) {
	shapes := []ShapeResult{
		scriptedShape(1, 128, 3, []float64{0.012}, [][]float64{{0.004, 0.006}}),
		scriptedShape(8, 128, 1, []float64{0.05}, [][]float64{nil}),
		scriptedShape(2, 16, 2, []float64{0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016},
			[][]float64{{0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}, {0.002}}),
	}
	var plain bytes.Buffer
	if err := WriteSummaryTable(&plain, shapes, nil); err != nil {
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
	// Shape 1: prefill host 12 ms, device 6 ms; decode host median 5 ms,
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

	var withFloors bytes.Buffer
	floors := func(batch, inputLen, outputLen int) (float64, float64) { return 0.003, 0.0025 }
	if err := WriteSummaryTable(&withFloors, shapes[:1], floors); err != nil {
		t.Fatal(err)
	}
	out := withFloors.String()
	// Attainment is floor / median device time: 3/6 = 50%, 2.5/2.5 = 100%.
	for _, want := range []string{"derived", "3.000", "50.0%", "100.0%"} {
		if !strings.Contains(out, want) {
			t.Errorf("table with floors lacks %q:\n%s", want, out)
		}
	}
}

func TestReportGolden(t *testing.T) {
	r := sampleReport()
	adaptive := DefaultAdaptive()
	r.Config.Adaptive = &adaptive
	prefillOnly := NewShapeReport(scriptedShape(1, 16, 1, []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, make([][]float64, 6)))
	r.Shapes = append(r.Shapes, prefillOnly)
	path := filepath.Join(t.TempDir(), "report.json")
	if err := WriteReport(path, r); err != nil {
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

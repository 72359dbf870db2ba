package compat

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/bench/benchtest"
)

// closeTo compares within a relative 1e-12 (exact formulas, float rounding).
func closeTo(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

func TestNewOneBatchRecordFormulas(t *testing.T) {
	// Three iterations: prefill 0.3, 0.1, 0.2 (median 0.2); decode steps of
	// all iterations 0.01,0.04 | 0.02,0.05 | 0.03,0.06 (median 0.035); totals
	// 0.35, 0.17, 0.29 (median 0.29).
	s := benchtest.ScriptedShape(4, 100, 3, []float64{0.3, 0.1, 0.2},
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
	withDecode := NewOneBatchRecord("a", benchtest.ScriptedShape(1, 8, 4, []float64{0.1}, [][]float64{{0.01, 0.02, 0.03}}))
	prefillOnly := NewOneBatchRecord("a", benchtest.ScriptedShape(1, 8, 1, []float64{0.1}, [][]float64{nil}))
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
	if got := benchtest.JSONKeys(t, []byte(lines[1])); !slices.Equal(got, full) {
		t.Errorf("keys %v, want %v", got, full)
	}
	withoutMedians := slices.DeleteFunc(slices.Clone(full), func(k string) bool { return strings.HasPrefix(k, "median_") })
	if got := benchtest.JSONKeys(t, []byte(lines[2])); !slices.Equal(got, withoutMedians) {
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
	if err := WriteVLLMJSON(path, []float64{10, 1, 4, 3, 2}, ""); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := benchtest.JSONKeys(t, data), []string{"avg_latency", "std_latency", "latencies", "percentiles"}; !slices.Equal(got, want) {
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
	if err := WriteVLLMJSON(path, nil, ""); err == nil {
		t.Errorf("no error for zero iterations")
	}
	// A CPU's times say so, in a last key vLLM's readers skip.
	if err := WriteVLLMJSON(path, []float64{10, 1, 4, 3, 2}, DeviceEmulated); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if got := benchtest.JSONKeys(t, data); !slices.Equal(got, []string{"avg_latency", "std_latency", "latencies", "percentiles", "device"}) ||
		!strings.HasSuffix(string(data), "    \"device\": \"emulated\"\n}") {
		t.Errorf("emulated: keys %v\n%s", got, data)
	}
}

// The one_batch record of a CPU's times carries a device field after
// one_batch's keys, and its run name says it; a GPU's is one_batch's.
func TestOneBatchRecordMarksCPUTimes(t *testing.T) {
	for _, tc := range []struct {
		backend, emulated, device, runName string
	}{{"cuda", "", "", "default"}, {"cpu", "", DeviceCPU, "default-cpu"}, {"cuda", "stepbench emulated GPU", DeviceEmulated, "default-emulated"}} {
		device := Device(tc.backend, tc.emulated)
		rec := OneBatchRecord{RunName: MarkedRunName("default", device), BatchSize: 1, Device: device}
		line, err := rec.JSON()
		if err != nil || device != tc.device || rec.RunName != tc.runName || MarkedRunName(rec.RunName, device) != tc.runName {
			t.Errorf("%+v: device %q, run name %q, %v", tc, device, rec.RunName, err)
		}
		if want := `, "device": "` + tc.device + `"}`; (tc.device != "") != strings.HasSuffix(line, want) || tc.device == "" && strings.Contains(line, "device") {
			t.Errorf("%+v: %s", tc, line)
		}
	}
}

package compat

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

// raggedResult is a scripted shape given sh's lengths: prefill 0.2 s, two
// decode steps of 0.01 and 0.03 s.
func raggedResult(sh bench.Shape) bench.ShapeResult {
	s := benchtest.ScriptedShape(sh.Batch, sh.InputLen, sh.OutputLen, []float64{0.2}, [][]float64{{0.01, 0.03}})
	s.Shape = sh
	return s
}

// A ragged batch's one_batch record and vLLM file are one_batch's and
// vLLM's keys, input_len the lengths' mean, then context_lens, kv_tokens
// and (a synthetic fill) kv_fill, then the device; the throughputs count
// the tokens the steps ran. A uniform batch's stay theirs, byte for byte
// (TestOneBatchJSONLMatchesPython, TestVLLMMatchesPython).
func TestRaggedOneBatchAndVLLMGolden(t *testing.T) {
	dir := t.TempDir()
	var jsonl, vllm []byte
	for _, tc := range []struct {
		name                 string
		shape                bench.Shape
		device               string
		prefillTok, iterTok  float64
		oneBatchKeys, vKeys  []string
		uniformRecordOfShape bool
	}{
		{name: "ragged", shape: bench.RaggedShape([]int{512, 1536}, 3, ""), prefillTok: 2048, iterTok: 2048 + 2*3,
			oneBatchKeys: []string{"context_lens", "kv_tokens"}, vKeys: []string{"context_lens", "kv_tokens"}},
		{name: "synthetic on cpu", shape: bench.RaggedShape([]int{64, 64, 64}, 3, bench.KVFillSynthetic), device: DeviceCPU,
			prefillTok: 3, iterTok: 3 + 3*3,
			oneBatchKeys: []string{"context_lens", "kv_tokens", "kv_fill", "device"}, vKeys: []string{"context_lens", "kv_tokens", "kv_fill", "device"}},
		{name: "uniform", shape: bench.Shape{Batch: 2, InputLen: 64, OutputLen: 3}, prefillTok: 128, iterTok: (64 + 3) * 2,
			uniformRecordOfShape: true},
	} {
		s := raggedResult(tc.shape)
		rec := NewOneBatchRecord(MarkedRunName("r", tc.device), s)
		rec.Device = tc.device
		line, err := rec.JSON()
		if err != nil {
			t.Fatal(err)
		}
		jsonl = append(jsonl, line+"\n"...)
		wantKeys := append([]string{"run_name", "batch_size", "input_len", "output_len", "prefill_latency", "prefill_throughput",
			"median_decode_latency", "median_decode_throughput", "total_latency", "overall_throughput"}, tc.oneBatchKeys...)
		if got := benchtest.JSONKeys(t, []byte(line)); !slices.Equal(got, wantKeys) {
			t.Errorf("%s: one_batch keys %v, want %v", tc.name, got, wantKeys)
		}
		if !closeTo(rec.PrefillThroughput*0.2, tc.prefillTok) || !closeTo(rec.OverallThroughput*rec.TotalLatency, tc.iterTok) {
			t.Errorf("%s: throughputs count %v and %v tokens, want %v and %v", tc.name, rec.PrefillThroughput*0.2,
				rec.OverallThroughput*rec.TotalLatency, tc.prefillTok, tc.iterTok)
		}
		if tc.uniformRecordOfShape && rec.Ragged != nil {
			t.Errorf("uniform: a ragged part %+v", rec.Ragged)
		}
		doc, err := VLLMLatencyOf(s)
		if err != nil {
			t.Fatal(err)
		}
		doc.Device = tc.device
		path := filepath.Join(dir, tc.name+".json")
		if err := doc.Write(path); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		vllm = append(append(vllm, data...), '\n')
		if got, want := benchtest.JSONKeys(t, data), append([]string{"avg_latency", "std_latency", "latencies", "percentiles"}, tc.vKeys...); !slices.Equal(got, want) {
			t.Errorf("%s: vLLM keys %v, want %v", tc.name, got, want)
		}
	}
	benchtest.CheckGolden(t, "ragged_onebatch.jsonl", jsonl, *update)
	benchtest.CheckGolden(t, "ragged_vllm.json", vllm, *update)
}

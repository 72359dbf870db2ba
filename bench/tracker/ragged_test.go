package tracker

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
)

// raggedReport is testReport's run with a ragged batch (512 and 1536
// tokens), a uniform batch over synthetic contexts and a uniform batch, on
// the layout kv (nil: a report from before layouts were recorded).
func raggedReport(kv *report.KVCache) report.Report {
	r := testReport(h200)
	r.Config.KV = kv
	shape := func(sh bench.Shape) report.ShapeReport {
		s := benchtest.ScriptedShape(sh.Batch, sh.InputLen, sh.OutputLen, []float64{0.01, 0.011, 0.012, 0.01, 0.011, 0.012},
			[][]float64{{0.002, 0.002}, {0.002, 0.002}, {0.002, 0.002}, {0.002, 0.002}, {0.002, 0.002}, {0.002, 0.002}})
		s.Shape = sh
		return report.NewShapeReport(s)
	}
	r.Shapes = []report.ShapeReport{shape(bench.RaggedShape([]int{512, 1536}, 3, "")), shape(bench.RaggedShape([]int{64, 64}, 3, bench.KVFillSynthetic)),
		shape(bench.Shape{Batch: 2, InputLen: 1024, OutputLen: 3})}
	return r
}

// A dashboard never files a ragged batch, a synthetic fill or a paged
// layout under a uniform contiguous batch's series: the names say them;
// the PyTorch records give them as vLLM-style arguments. A uniform batch
// on the contiguous layout keeps its name.
func TestRaggedAndPagedSeriesNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   *report.KVCache
		want []string
	}{
		{"no layout recorded", nil, []string{"b2_i1024_o3_kv2048_lens512,1536/", "b2_i64_o3_kv128_synthetic/", "b2_i1024_o3/"}},
		{"contiguous", &report.KVCache{Layout: "contiguous", ContextLens: "512,1536"},
			[]string{"b2_i1024_o3_kv2048_lens512,1536/", "b2_i64_o3_kv128_synthetic/", "b2_i1024_o3/"}},
		{"paged shuffled", &report.KVCache{Layout: "paged", PageSize: 16, PageOrder: "shuffled"},
			[]string{"b2_i1024_o3_kv2048_lens512,1536_paged16_shuffled/", "b2_i64_o3_kv128_synthetic_paged16_shuffled/", "b2_i1024_o3_paged16_shuffled/"}},
	} {
		run, err := NewRun(raggedReport(tc.kv))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range run.Metrics {
			names = append(names, run.seriesName(m))
		}
		for _, want := range tc.want {
			if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "/"+want) }) {
				t.Errorf("%s: no series named .../%s...: %v", tc.name, want, names)
			}
		}
		var b bytes.Buffer
		if err := WritePyTorchBenchmark(&b, run); err != nil {
			t.Fatal(err)
		}
		var records []struct {
			Benchmark struct {
				ExtraInfo struct {
					Args map[string]any `json:"args"`
				} `json:"extra_info"`
			} `json:"benchmark"`
		}
		decode(t, b.Bytes(), &records)
		first, last := records[0].Benchmark.ExtraInfo.Args, records[len(records)-1].Benchmark.ExtraInfo.Args
		if lens, _ := first["context_lens"].([]any); len(lens) != 2 || first["kv_tokens"] == nil || last["context_lens"] != nil {
			t.Errorf("%s: args of the ragged batch %v, of the uniform one %v", tc.name, first, last)
		}
		if paged := tc.kv != nil && tc.kv.Layout == "paged"; (first["block_size"] != nil) != paged || (last["block_size"] != nil) != paged {
			t.Errorf("%s: block_size %v and %v", tc.name, first["block_size"], last["block_size"])
		}
	}
	run, err := NewRun(raggedReport(&report.KVCache{Layout: "paged", PageSize: 16, PageOrder: "sequential"}))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteGitHubActionBenchmark(&b, run); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "ragged.github-action-benchmark.json", b.Bytes())
}

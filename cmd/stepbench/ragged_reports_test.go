package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
)

// raggedRun runs a timed ragged batch on the cpu backend with args and
// returns its stdout and the paths of its native report, one_batch JSONL
// and vLLM file.
func raggedRun(t *testing.T, args ...string) (stdout, native, jsonl, vllm string) {
	t.Helper()
	dir := t.TempDir()
	native, jsonl, vllm = filepath.Join(dir, "n.json"), filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "v.json")
	full := append([]string{"run", "--device", "cpu", "--model", "llama-tiny", "--output-len", "3", "--num-iters", "1", "--gpu", "h100-sxm",
		"--json-out", native, "--result-filename", jsonl, "--output-json", vllm}, args...)
	code, stdout, stderr := run(t, full...)
	if code != 0 {
		t.Fatalf("run %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	return stdout, native, jsonl, vllm
}

// Every result of a ragged run records it, as a user reads them: the
// summary's mean input, KV tokens and lengths; the native report's layout,
// lengths, KV tokens and roofline points at the ragged KV; the one_batch
// record's and vLLM file's lengths after their own keys.
func TestRaggedRunResultsRecordTheLengths(t *testing.T) {
	stdout, native, jsonl, vllm := raggedRun(t, "--context-lens", "5,17,33", "--kv-layout", "paged", "--page-size", "4", "--page-order", "shuffled")
	for _, want := range []string{"kv_tokens", "~18", "55", "b3 o3: context lengths 5,17,33"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Shapes[0]
	if kv := rep.Config.KV; kv == nil || kv.Layout != "paged" || kv.PageSize != 4 || kv.PageOrder != "shuffled" || kv.ContextLens != "5,17,33" ||
		s.Lens != "5,17,33" || s.KVTokens != 55 || len(s.RooflinePoints) != 2 || s.RooflinePoints[0].KVTokens != 55 || s.RooflinePoints[1].KVTokens != 55+3 {
		t.Errorf("native report: kv %+v, shape %+v", rep.Config.KV, s)
	}
	line, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), `"input_len": 18,`) || !strings.Contains(string(line), `, "context_lens": [5, 17, 33], "kv_tokens": 55, "device": "cpu"}`) {
		t.Errorf("one_batch record %s", line)
	}
	var doc map[string]any
	data, err := os.ReadFile(vllm)
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil || doc["kv_tokens"] != 55.0 || doc["latencies"] == nil {
		t.Errorf("vLLM file (%v): %s", err, data)
	}
	// The gobench lines and a dashboard's series name the lengths and the layout.
	layout := []string{"--context-lens", "5,17,33", "--kv-layout", "paged", "--page-size", "4", "--page-order", "shuffled"}
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"gobench", []string{"kv_layout: paged 4 shuffled\n", "context_lens: 5,17,33\n", "BenchmarkPrefill/model=llama-tiny/batch=3/input=18/output=3/kv=55/lens=5,17,33-1\t"}},
		{"github-action-benchmark", []string{"/b3_i18_o3_kv55_lens5,17,33_paged4_shuffled/prefill_device"}},
	} {
		stdout, _, _, _ := raggedRun(t, append(layout, "--format", tc.format)...)
		for _, want := range tc.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("--format %s lacks %q:\n%s", tc.format, want, stdout)
			}
		}
	}
}

// compare refuses, in one line with exit 2, two runs whose layouts, page
// sizes or lengths differ, and compares two runs that agree.
func TestCompareRefusesRunsOfDifferentLayoutsOrLengths(t *testing.T) {
	_, base, _, _ := raggedRun(t, "--context-lens", "5,17,33", "--kv-layout", "contiguous")
	_, again, _, _ := raggedRun(t, "--context-lens", "5,17,33", "--kv-layout", "contiguous")
	_, paged, _, _ := raggedRun(t, "--context-lens", "5,17,33", "--kv-layout", "paged")
	_, paged8, _, _ := raggedRun(t, "--context-lens", "5,17,33", "--kv-layout", "paged", "--page-size", "8")
	_, other, _, _ := raggedRun(t, "--context-lens", "5,17,34", "--kv-layout", "contiguous")
	_, uniform, _, _ := raggedRun(t, "--batch-size", "3", "--input-len", "18", "--kv-layout", "contiguous")
	for _, tc := range []struct {
		old, new string
		code     int
		says     string
	}{
		{base, again, exitOK, ""},
		{base, paged, exitUsage, "OLD's KV cache is contiguous and NEW's paged (16-token pages, sequential)"},
		{paged, paged8, exitUsage, "OLD's KV cache pages hold 16 tokens and NEW's 8"},
		{base, other, exitUsage, "at batch_size=3 output_len=3 OLD's context lengths are 5,17,33 and NEW's 5,17,34"},
		{uniform, base, exitUsage, "OLD's context lengths are uniform (input_len 18) and NEW's 5,17,33"},
	} {
		code, _, stderr := run(t, "compare", tc.old, tc.new)
		if code != tc.code || !strings.Contains(stderr, tc.says) || tc.code != exitOK && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("compare %s %s: exit %d (want %d), stderr %q (want one line with %q)", filepath.Base(filepath.Dir(tc.old)),
				filepath.Base(filepath.Dir(tc.new)), code, tc.code, stderr, tc.says)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
)

// raggedPrompts is a --prompt-ids file of four prompts of different lengths.
func raggedPrompts(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prompts.txt")
	lines := "1 2 3 4 5\n7\n9 8 7 6 5 4 3 2 1 11 12 13 14 15 16 17 18\n100 200\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRaggedBatchCorrectnessOnCPU: run --correctness-test --ragged-batch
// as a user runs it, on the cpu backend, on both layouts and at page sizes
// 1, 16 and 64, in order and shuffled: every sequence of the batch
// generates what it generates alone, exit 0.
func TestRaggedBatchCorrectnessOnCPU(t *testing.T) {
	prompts := raggedPrompts(t)
	for _, layout := range [][]string{
		{"--kv-layout", "contiguous"},
		{"--kv-layout", "paged", "--page-size", "1", "--page-order", "shuffled"},
		{"--kv-layout", "paged", "--page-size", "16"},
		{"--kv-layout", "paged", "--page-size", "64", "--page-order", "shuffled"},
	} {
		args := append([]string{"run", "--device", "cpu", "--correctness-test", "--ragged-batch", "--prompt-ids", prompts, "--output-len", "4"}, layout...)
		code, stdout, stderr := run(t, args...)
		if code != 0 || strings.Count(stdout, "same tokens, logits worst rel err 0 ") != 4 ||
			!strings.Contains(stdout, "ragged batch of 4 prompts (lengths 5,1,17,2), 4 steps") ||
			!strings.Contains(stdout, "every sequence generates what it generates alone") {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", layout, code, stdout, stderr)
		}
	}
}

// TestContextLensRun: a timed ragged run records its layout and lengths
// in the native report; bad lengths are refused in one line, exit 2.
func TestContextLensRun(t *testing.T) {
	native := filepath.Join(t.TempDir(), "r.json")
	code, _, stderr := run(t, "run", "--device", "cpu", "--context-lens", "5,17,33", "--output-len", "3", "--num-iters", "1",
		"--kv-layout", "paged", "--page-size", "4", "--page-order", "shuffled", "--json-out", native)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	kv := rep.Config.KV
	if kv == nil || kv.Layout != "paged" || kv.PageSize != 4 || kv.PageOrder != "shuffled" || kv.ContextLens != "5,17,33" ||
		len(rep.Shapes) != 1 || rep.Shapes[0].Shape.Lens != "5,17,33" || rep.Shapes[0].Shape.Batch != 3 {
		t.Errorf("report: kv %+v, shapes %+v", kv, rep.Shapes)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--context-lens", "5,0"}, "--context-lens"},
		{[]string{"--context-lens", "5,6", "--batch-size", "2"}, "the batch size is its length"},
		{[]string{"--context-lens", "5,6", "--input-len", "8"}, "it replaces --input-len"},
		{[]string{"--context-lens", "uniform:9-3"}, "uniform:LO-HI"},
		{[]string{"--kv-layout", "ring"}, "--kv-layout"},
		{[]string{"--page-size", "0", "--kv-layout", "paged"}, "--page-size 0"},
		{[]string{"--kv-layout", "contiguous", "--page-size", "16"}, "--kv-layout contiguous has none"},
		{[]string{"--kv-fill", "zeros"}, "--kv-fill"},
		{[]string{"--ragged-batch"}, "--ragged-batch checks --correctness-test's prompts"},
	} {
		args := append([]string{"run", "--device", "cpu", "--output-len", "2", "--num-iters", "1"}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

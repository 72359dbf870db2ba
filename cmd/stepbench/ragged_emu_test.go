package main

import (
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
)

// The ragged batch on the emulated device: every sequence of one batch
// against itself alone (run --correctness-test --ragged-batch), over a
// covering subset of the layouts' axes (page size 1, 16, 64 and the
// contiguous layout; sequential and shuffled; graphs and eager; one GPU and
// --tp-size 2: every value of every axis, and each pair of page order and
// execution at least once), then a timed --context-lens run.
//
// Each run is a process of its own with two emulated GPUs.
func TestEmulatedRaggedBatch(t *testing.T) {
	onEmulator(t)
	prompts := raggedPrompts(t)
	for _, tc := range [][]string{
		{"--kv-layout", "paged", "--page-size", "1", "--page-order", "shuffled"},
		{"--kv-layout", "paged", "--page-size", "16", "--disable-cuda-graph", "--tp-size", "2"},
		{"--kv-layout", "paged", "--page-size", "64", "--page-order", "shuffled", "--disable-cuda-graph"},
		{"--kv-layout", "paged", "--page-size", "16", "--page-order", "shuffled", "--tp-size", "2"},
		{"--kv-layout", "contiguous"},
	} {
		args := append([]string{"run", "--device", "cuda", "--model", "llama-tiny", "--correctness-test", "--ragged-batch",
			"--prompt-ids", prompts, "--output-len", "4"}, tc...)
		code, stdout, stderr := runBinary(t, []string{"STEPBENCH_EMU_DEVICES=2"}, args...)
		if code != 0 || strings.Count(stdout, "same tokens") != 4 || !strings.Contains(stdout, "every sequence generates what it generates alone") {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(tc, " "), code, stdout, stderr)
		}
	}
}

// TestEmulatedContextLensRun: a timed ragged run on shuffled 16-token
// pages, its decode steps replayed from one captured graph, and a synthetic
// context fill.
func TestEmulatedContextLensRun(t *testing.T) {
	onEmulator(t)
	native := filepath.Join(t.TempDir(), "r.json")
	_, stderr := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--context-lens", "40,3,17", "--output-len", "4",
		"--num-iters", "2", "--kv-layout", "paged", "--page-order", "shuffled", "--json-out", native, "-v")
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Shapes) != 1 || rep.Shapes[0].Shape.Lens != "40,3,17" || rep.Config.KV == nil || rep.Config.KV.PageOrder != "shuffled" {
		t.Errorf("report shapes %+v, kv %+v", rep.Shapes, rep.Config.KV)
	}
	if !strings.Contains(stderr, "nodes") {
		t.Errorf("-v says nothing of the captured decode graph:\n%s", stderr)
	}
	mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--context-lens", "uniform:20-90", "--batch-size", "3",
		"--kv-fill", "synthetic", "--output-len", "3", "--num-iters", "1", "--kv-layout", "paged")
}

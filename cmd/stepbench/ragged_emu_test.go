package main

import (
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
	"stepbench/internal/testmatrix"
	"stepbench/runner"
)

// The ragged batch on the emulated device: every sequence of one batch
// against itself alone (run --correctness-test --ragged-batch), over the
// layouts' matrix (raggedAxes): make test runs its pairwise covering subset
// (every value of every axis, each pair of values of two axes at least
// once), make test-full (STEPBENCH_TEST_FULL=1) every combination.
//
// Each run is a process of its own with two emulated GPUs.
func TestEmulatedRaggedBatch(t *testing.T) {
	onEmulator(t)
	prompts := raggedPrompts(t)
	for _, c := range testmatrix.Cases(raggedAxes...) {
		tc := raggedArgs(c)
		args := append([]string{"run", "--device", "cuda", "--model", "llama-tiny", "--correctness-test", "--ragged-batch",
			"--prompt-ids", prompts, "--output-len", "4"}, tc...)
		code, stdout, stderr := runBinary(t, []string{"STEPBENCH_EMU_DEVICES=2"}, args...)
		if code != 0 || strings.Count(stdout, "same tokens") != 4 || !strings.Contains(stdout, "every sequence generates what it generates alone") {
			t.Errorf("%s (%s): exit %d\nstdout:\n%s\nstderr:\n%s", c.String(raggedAxes), strings.Join(tc, " "), code, stdout, stderr)
		}
	}
}

// raggedAxes are the ragged batch's layouts: the page size (or the
// contiguous layout, which has no page order: its cases run without one),
// the page order, graphs or eager, one GPU or two.
var raggedAxes = []testmatrix.Axis{
	{Name: "layout", Values: []string{"paged 1", "paged 16", "paged 64", "contiguous"}},
	{Name: "order", Values: []string{runner.PagesSequential, runner.PagesShuffled}},
	{Name: "exec", Values: []string{"graphs", "eager"}},
	{Name: "tp", Values: []string{"1", "2"}},
}

// raggedArgs are a case's flags.
func raggedArgs(c testmatrix.Case) []string {
	args := []string{"--kv-layout", "contiguous"}
	if size, paged := strings.CutPrefix(c["layout"], "paged "); paged {
		args = []string{"--kv-layout", "paged", "--page-size", size, "--page-order", c["order"]}
	}
	if c["exec"] == "eager" {
		args = append(args, "--disable-cuda-graph")
	}
	if c["tp"] != "1" {
		args = append(args, "--tp-size", c["tp"])
	}
	return args
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

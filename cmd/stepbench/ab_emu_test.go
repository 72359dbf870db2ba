package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ab is a run with two arms: a model directory's safetensors by default
// (it timed dummy weights and said nothing), run's --quantization,
// --prompt-file and --tp-size, and --json-out; the header says what both
// arms ran on. Real processes on the emulated device.
func TestEmulatedABIsARunWithTwoArms(t *testing.T) {
	onEmulator(t)
	model := textModel(t)
	dir := t.TempDir()
	prompts, comparison := filepath.Join(dir, "p.txt"), filepath.Join(dir, "cmp.json")
	if err := os.WriteFile(prompts, []byte("The capital of France is Paris.\nHello world, again and again.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arms := []string{"--kernel", "argmax=1", "--baseline-kernel", "argmax=2", "--batch-size", "1", "--input-len", "16", "--output-len", "4", "--num-iters", "4"}
	stdout, stderr := mustProcess(t, append([]string{"ab", "--model-path", model, "--prompt-file", prompts, "--quantization", "fp8",
		"--json-out", comparison}, arms...)...)
	for _, want := range []string{"both arms: weights: the safetensors of " + model, "fp8", "both arms: prompts cut from the text of " + prompts} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ab's header lacks %q:\n%s", want, stdout)
		}
	}
	var doc struct {
		Header []string `json:"header"`
		Rows   []struct {
			Metric, Verdict string
		} `json:"rows"`
	}
	data, err := os.ReadFile(comparison)
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil || len(doc.Rows) != 4 || !strings.Contains(strings.Join(doc.Header, "\n"), "the safetensors of "+model) ||
		!strings.Contains(stderr, "stepbench ab: wrote "+comparison) {
		t.Errorf("--json-out: %v, %d rows, header %q", err, len(doc.Rows), doc.Header)
	}
	// Tensor-parallel: each arm its own group over the same two GPUs.
	t.Setenv("STEPBENCH_EMU_DEVICES", "2")
	stdout, _ = mustProcess(t, append([]string{"ab", "--model", "llama-tiny", "--tp-size", "2"}, arms...)...)
	if !strings.Contains(stdout, "both arms: tensor-parallel size 2") || !strings.Contains(stdout, "weights: dummy (seed 42") ||
		len(verdicts(t, stdout)) != 4 {
		t.Errorf("ab --tp-size 2:\n%s", stdout)
	}
}

// ab between the layouts: arm A on shuffled 16-token pages, arm B on the
// contiguous cache, the same kernels chosen for each layout (the block
// table's and the contiguous ones): both arms run, every decode step is
// checked (both fed B's tokens) and timed, and the header names each arm's
// layout. Two arms that differ only in their page size are not the same
// arms either.
func TestEmulatedABAcrossLayouts(t *testing.T) {
	onEmulator(t)
	shape := []string{"--model", "llama-tiny", "--batch-size", "2", "--input-len", "24", "--output-len", "4", "--num-iters", "2"}
	stdout, _ := mustProcess(t, append([]string{"ab", "--kv-layout", "paged", "--page-order", "shuffled", "--baseline-kv-layout", "contiguous"}, shape...)...)
	for _, want := range []string{"arm A: KV cache paged 16 shuffled; arm B: KV cache contiguous", "every decode step of every shape (4 steps, both fed B's tokens)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ab across layouts: no %q in:\n%s", want, stdout)
		}
	}
	if len(verdicts(t, stdout)) != 4 {
		t.Errorf("ab across layouts: want the 4 metrics' rows:\n%s", stdout)
	}
	stdout, _ = mustProcess(t, append([]string{"ab", "--kv-layout", "paged", "--page-size", "16", "--baseline-page-size", "1"}, shape...)...)
	if !strings.Contains(stdout, "arm A: KV cache paged 16 sequential; arm B: KV cache paged 1 sequential") {
		t.Errorf("ab across page sizes:\n%s", stdout)
	}
}

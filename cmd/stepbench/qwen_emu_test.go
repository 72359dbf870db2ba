package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/kernels/ref"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// qwenFixture writes preset's bf16 checkpoint in its HF layout (config.json
// and model.safetensors with q_norm/k_norm or the q/k/v biases).
func qwenFixture(t *testing.T, preset string) string {
	t.Helper()
	cfg, err := runner.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), preset)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := quanttest.WriteBF16(dir, cfg, 7, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEmulatedQwenMatchesCPU runs, as a user does, --correctness-test of
// Qwen3 (its HF-layout fixture: q/k norm, attention 256 wide over a hidden
// size of 128, tied embedding) and Qwen2 (the qwen2-tiny preset's dummy
// weights: q/k/v bias) on the emulated device's default path (the paged
// cache, decode steps replayed from CUDA graphs): the cpu backend's tokens,
// logits within 2e-2; and the breakdown names the op.
func TestEmulatedQwenMatchesCPU(t *testing.T) {
	onEmulator(t)
	prompts := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(prompts, []byte(tpPrompts), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model []string
		op    string
	}{
		{[]string{"--model-path", qwenFixture(t, "qwen3-tiny")}, "qk_norm"},
		{[]string{"--model", "qwen2-tiny"}, "qkv_bias"},
	} {
		want, got := correctnessOf(t, c.model, prompts, "--device", "cpu"), correctnessOf(t, c.model, prompts, "--device", "cuda")
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%v: %d records on the emulated device, %d on the cpu", c.model, len(got), len(want))
		}
		for i := range want {
			if !slices.Equal(got[i].Generated, want[i].Generated) {
				t.Errorf("%v prompt %d: generated %v, the cpu %v", c.model, i, got[i].Generated, want[i].Generated)
			}
			for s := range want[i].Logits {
				if rel, err := ref.RelErr(got[i].Logits[s], want[i].Logits[s]); err != nil || rel > 2e-2 {
					t.Errorf("%v prompt %d step %d: logits rel err %.3g (%v)", c.model, i, s, rel, err)
				}
			}
		}
		stdout, _ := mustRun(t, append([]string{"run", "--device", "cuda", "--batch-size", "2", "--input-len", "8",
			"--output-len", "3", "--num-iters", "1", "--disable-cuda-graph", "--breakdown"}, c.model...)...)
		if _, decode, _ := strings.Cut(stdout, "decode breakdown:"); !strings.Contains(decode, c.op) {
			t.Errorf("%v: the decode breakdown lacks %s:\n%s", c.model, c.op, stdout)
		}
	}
}

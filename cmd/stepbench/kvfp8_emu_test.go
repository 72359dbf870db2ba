package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/kernels/ref"
	"stepbench/runner/quanttest"
)

// An FP8 KV cache on the emulated device as a user runs it: the FP8
// checkpoint's scales (E4M3) and dummy bf16 weights (E5M2), paged and
// contiguous, graphs and eager: each prompt's first logits within 3e-2 of
// the cpu backend's with bf16 weights, within the FP8 models' bound with FP8
// ones (runner/gpu's TestCUDAFP8CacheMatchesCPU measured the
// bf16 cache's 7.6e-3 and the FP8 cache's 1.8e-2 / 2.2e-2: the backends'
// bf16 values differ by a step here and there, and an FP8 byte then moves by
// a whole FP8 step; later steps feed each backend its own greedy tokens,
// which may part at llama-tiny's near ties); a ragged batch
// generates what each sequence generates alone, one GPU and --tp-size 2;
// a timed run over a synthetic context replays its decode graph.
func TestEmulatedFP8KVCache(t *testing.T) {
	onEmulator(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte(tpPrompts), 0o644); err != nil {
		t.Fatal(err)
	}
	scaled := kvScaledFixture(t, func(l int) float32 { return float32(l+1) / 96 })
	// The FP8 checkpoint's weights quantize every projection's input too:
	// a bf16 step of difference there moves an activation by an E4M3 step,
	// so its bound is the FP8 models' (quanttest.MaxRelErrFloat64, 8e-2;
	// measured here 2.8e-2 and 3.0e-2); bf16 weights with an FP8 cache take
	// 3e-2 (measured 1.3e-2).
	for _, tc := range []struct {
		model, device []string
		bound         float64
	}{
		{[]string{"--model-path", scaled, "--kv-cache-dtype", "fp8"}, []string{"--kv-layout", "paged", "--page-order", "shuffled"}, quanttest.MaxRelErrFloat64},
		{[]string{"--model-path", scaled, "--kv-cache-dtype", "fp8"}, []string{"--kv-layout", "contiguous", "--disable-cuda-graph"}, quanttest.MaxRelErrFloat64},
		{[]string{"--model", "llama-tiny", "--kv-cache-dtype", "fp8_e5m2"}, []string{"--kv-layout", "paged", "--page-size", "1", "--disable-cuda-graph"}, 3e-2},
	} {
		cpu := correctnessOf(t, tc.model, prompts, "--device", "cpu")
		gpu := correctnessOf(t, tc.model, prompts, append([]string{"--device", "cuda"}, tc.device...)...)
		name := strings.Join(append(tc.model[2:], tc.device...), " ")
		for i := range cpu {
			rel, err := ref.RelErr(gpu[i].Logits[0], cpu[i].Logits[0])
			if err != nil || rel > tc.bound {
				t.Errorf("%s, prompt %d: first logits %.3g from the cpu backend's (%v), bound %g", name, i+1, rel, err, tc.bound)
			}
			t.Logf("%s, prompt %d: first logits %.2e from the cpu backend's", name, i+1, rel)
		}
	}
	for _, extra := range [][]string{{"--page-order", "shuffled"}, {"--tp-size", "2", "--disable-cuda-graph"}} {
		args := append([]string{"run", "--device", "cuda", "--model-path", scaled, "--kv-cache-dtype", "fp8", "--correctness-test", "--ragged-batch",
			"--prompt-ids", prompts, "--output-len", "4"}, extra...)
		code, stdout, stderr := runBinary(t, []string{"STEPBENCH_EMU_DEVICES=2"}, args...)
		if code != 0 || strings.Count(stdout, "same tokens") != 3 || !strings.Contains(stdout, "fp8_e4m3: every sequence generates what it generates alone") {
			t.Errorf("ragged %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(extra, " "), code, stdout, stderr)
		}
	}
	mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--kv-cache-dtype", "fp8", "--context-lens", "60,7", "--kv-fill", "synthetic",
		"--output-len", "3", "--num-iters", "1")
}

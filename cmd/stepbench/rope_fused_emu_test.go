package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ropeFusedConfig is llama-tiny with head_dim 64 (4 heads over 2 kv
// heads): a shape attn_decode version 5 takes (llama-tiny's head_dim 32
// does not).
const ropeFusedConfig = `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
"intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
"head_dim": 64, "vocab_size": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000,
"max_position_embeddings": 2048, "torch_dtype": "bfloat16"}`

// TestEmulatedFusedRopeAttention runs, as a user does, --kernel
// attn_decode=5 (rope_kv_write fused into decode attention) on a head_dim-64
// model with dummy weights, in a child process with 2 emulated GPUs: on one
// GPU and with --tp-size 2 (each rank fuses over its own heads; graphs and
// eager), the generated tokens and every step's logits are attn_decode=4's
// bits at the same tp size, and run -v's decode graph has one node fewer
// per layer (4 layers) than version 4's.
func TestEmulatedFusedRopeAttention(t *testing.T) {
	onEmulator(t)
	if os.Getenv("STEPBENCH_TEST_TP") != "child" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedFusedRopeAttention$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_TP=child", "STEPBENCH_EMU_DEVICES=2", "STEPBENCH_TEST_EMU_CACHE="+emuCacheHome)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child with 2 emulated GPUs: %v\n%s", err, out)
		}
		return
	}
	model, prompts := headDim64Model(t)
	model = append(model, "--kv-layout", "contiguous") // version 5 fuses on the contiguous layout
	correctness := func(extra ...string) []correctnessRecord {
		return correctnessOf(t, model, prompts, append([]string{"--device", "cuda"}, extra...)...)
	}
	for _, extra := range [][]string{nil, {"--tp-size", "2"}, {"--tp-size", "2", "--disable-cuda-graph"}} {
		fused := correctness(append([]string{"--kernel", "attn_decode=5"}, extra...)...)
		unfused := correctness(append([]string{"--kernel", "attn_decode=4"}, extra...)...)
		if len(fused) == 0 || !reflect.DeepEqual(fused, unfused) {
			t.Errorf("%v: attn_decode=5's tokens and logits are not attn_decode=4's bits", extra)
		}
	}
	for _, c := range []struct {
		kernel, nodes string
	}{{"attn_decode=5", "34"}, {"attn_decode=4", "38"}} {
		args := append([]string{"run", "--device", "cuda", "--kernel", c.kernel, "--batch-size", "3", "--input-len", "8",
			"--output-len", "4", "--num-iters", "1", "-v"}, model...)
		stdout, stderr := mustRun(t, args...)
		want := "decode step of batch 3 (cache of 11 positions) replays a CUDA graph of " + c.nodes + " nodes"
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: run -v lacks %q:\n%s\n%s", c.kernel, want, stdout, stderr)
		}
	}
}

// headDim64Model writes ropeFusedConfig and tpPrompts to a temporary
// directory: the model flags of a run (dummy weights) and the prompts file.
func headDim64Model(t *testing.T) (model []string, prompts string) {
	t.Helper()
	dir := t.TempDir()
	prompts = filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(ropeFusedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prompts, []byte(tpPrompts), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--model-path", dir, "--load-format", "dummy"}, prompts
}

// correctnessOf runs --correctness-test of prompts on model with extra
// flags (the device's among them) and returns its --logits-out records.
func correctnessOf(t *testing.T, model []string, prompts string, extra ...string) []correctnessRecord {
	t.Helper()
	out := filepath.Join(t.TempDir(), "logits.jsonl")
	args := append([]string{"run", "--correctness-test", "--prompt-ids", prompts, "--output-len", "6", "--logits-out", out}, model...)
	mustRun(t, append(args, extra...)...)
	return readRecords(t, out)
}

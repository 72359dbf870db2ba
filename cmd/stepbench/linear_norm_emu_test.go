package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"stepbench/kernels/ref"
)

// TestEmulatedLinear4FusesTheNorms runs, as a user does, --kernel linear=4
// (the residual add in o_proj's and down_proj's epilogue, RMSNorm in the
// prologue of qkv_proj, gate_up_proj and lm_head) on a head_dim-64 model
// with dummy weights: --correctness-test generates the cpu backend's tokens
// with logits within 2e-2; run -v's decode graph has two nodes fewer per
// layer (4 layers) than linear=3's; and the eager decode breakdown keeps
// one input_norm (layer 0's) and no post_attention_norm or final_norm.
func TestEmulatedLinear4FusesTheNorms(t *testing.T) {
	onEmulator(t)
	model, prompts := headDim64Model(t)
	correctness := func(extra ...string) []correctnessRecord { return correctnessOf(t, model, prompts, extra...) }
	want, got := correctness("--device", "cpu"), correctness("--device", "cuda", "--kernel", "linear=4")
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d records with linear=4, %d on the cpu", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i].Generated, want[i].Generated) {
			t.Errorf("prompt %d: linear=4 generated %v, the cpu %v", i, got[i].Generated, want[i].Generated)
		}
		for s := range want[i].Logits {
			if rel, err := ref.RelErr(got[i].Logits[s], want[i].Logits[s]); err != nil || rel > 2e-2 {
				t.Errorf("prompt %d step %d: logits rel err %.3g (%v)", i, s, rel, err)
			}
		}
	}
	for _, c := range []struct{ kernel, nodes string }{{"linear=4", "30"}, {"linear=3", "38"}} {
		args := append([]string{"run", "--device", "cuda", "--kernel", c.kernel, "--batch-size", "3", "--input-len", "8",
			"--output-len", "4", "--num-iters", "1", "-v", "--kv-layout", "contiguous"}, model...)
		stdout, stderr := mustRun(t, args...)
		want := "decode step of batch 3 (cache of 11 positions) replays a CUDA graph of " + c.nodes + " nodes"
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: run -v lacks %q:\n%s\n%s", c.kernel, want, stdout, stderr)
		}
	}
	stdout, _ := mustRun(t, append([]string{"run", "--device", "cuda", "--kernel", "linear=4", "--batch-size", "2", "--input-len", "8",
		"--output-len", "3", "--num-iters", "1", "--disable-cuda-graph", "--breakdown"}, model...)...)
	_, decode, _ := strings.Cut(stdout, "decode breakdown:")
	if !regexp.MustCompile(`(?m)^ +input_norm +1 +1 `).MatchString(decode) ||
		strings.Contains(decode, "post_attention_norm") || strings.Contains(decode, "final_norm") {
		t.Errorf("linear=4's decode breakdown: want one input_norm call and no other norm:\n%s", decode)
	}
}

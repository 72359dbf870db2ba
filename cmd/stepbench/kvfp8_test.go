package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// kvScaledFixture writes a llama-tiny FP8 checkpoint (AutoFP8, static)
// whose every layer holds self_attn.k_scale and v_scale: kScale(l) and
// 2·kScale(l), F32 scalars.
func kvScaledFixture(t *testing.T, kScale func(l int) float32) string {
	t.Helper()
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny-kv-scaled")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	scalar := func(name string, v float32) runner.HostTensor {
		data := make([]byte, 4)
		binary.LittleEndian.PutUint32(data, math.Float32bits(v))
		return runner.HostTensor{Name: name, DType: "F32", Shape: []int{}, Data: data}
	}
	edit := func(tensors []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		for l := range cfg.NumHiddenLayers {
			p := fmt.Sprintf("model.layers.%d.self_attn.", l)
			tensors = append(tensors, scalar(p+"k_scale", kScale(l)), scalar(p+"v_scale", 2*kScale(l)))
		}
		return tensors
	}
	if _, err := quanttest.WriteEdited(dir, cfg, 7, quanttest.AutoFP8Static, edit); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run --kv-cache-dtype fp8 as a user runs it, on the cpu backend: the
// checkpoint's scales drive the cache and the report records them; a
// checkpoint with a scale of zero is refused before any weight loads,
// naming the tensor (exit 2); --kv-scales calibrate measures its own;
// --correctness-test writes the FP8 cache's logits.
func TestFP8KVCacheRun(t *testing.T) {
	dir := t.TempDir()
	model := kvScaledFixture(t, func(l int) float32 { return float32(l+1) / 128 })
	native := filepath.Join(dir, "fp8.json")
	args := []string{"run", "--device", "cpu", "--model-path", model, "--batch-size", "2", "--input-len", "16", "--output-len", "4",
		"--num-iters", "1", "--num-iters-warmup", "0", "--kv-cache-dtype", "fp8", "--json-out", native}
	code, _, stderr := runBinary(t, nil, args...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "KV cache fp8_e4m3, scales from the checkpoint (model.layers.0.self_attn.k_scale, model.layers.0.self_attn.v_scale; per tensor)") {
		t.Errorf("stderr does not say where the scales came from:\n%s", stderr)
	}
	kv := readNative(t, native).Config.KV
	if kv == nil || kv.DType != "fp8_e4m3" || kv.Scales == nil || len(kv.Scales.K) != 4 || kv.Scales.K[3][1] != 4.0/128 || kv.Scales.V[3][1] != 8.0/128 {
		t.Errorf("the report's kv_cache: %+v", kv)
	}

	bad := kvScaledFixture(t, func(l int) float32 { return float32(l) / 128 }) // layer 0's is zero
	code, _, stderr = runBinary(t, nil, append(args[:len(args)-2], "--model-path", bad)...)
	if want := `"model.layers.0.self_attn.k_scale": KV head 0's scale is 0: want positive and finite`; code != 2 ||
		!strings.Contains(stderr, want) || strings.Contains(stderr, "weights (") {
		t.Errorf("a zero scale: exit %d, want 2 and %q before any weight loads:\n%s", code, want, stderr)
	}

	calibrated := filepath.Join(dir, "calibrated.json")
	code, _, stderr = runBinary(t, nil, "run", "--device", "cpu", "--model", "llama-tiny", "--context-lens", "40,9", "--output-len", "3",
		"--num-iters", "1", "--num-iters-warmup", "0", "--kv-cache-dtype", "fp8_e4m3", "--kv-scales", "calibrate", "--json-out", calibrated)
	if code != 0 {
		t.Fatalf("calibrate: exit %d:\n%s", code, stderr)
	}
	if s := readNative(t, calibrated).Config.KV.Scales; s == nil || !strings.HasPrefix(s.Source, "calibrated") || s.K[0][0] == 1 || s.V[0][0] == 1 {
		t.Errorf("calibrated scales: %+v", s)
	}

	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte("1 2 3 4 5 6 7 8 9\n300 2 40\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logits := filepath.Join(dir, "logits.jsonl")
	code, stdout, stderr := runBinary(t, nil, "run", "--device", "cpu", "--model-path", model, "--correctness-test", "--prompt-ids", prompts,
		"--output-len", "3", "--kv-cache-dtype", "fp8", "--logits-out", logits)
	data, _ := os.ReadFile(logits)
	if code != 0 || strings.Count(stdout, "prompt ") != 2 || strings.Count(string(data), "\n") != 2 {
		t.Errorf("--correctness-test: exit %d, %d records\nstdout:\n%s\nstderr:\n%s", code, strings.Count(string(data), "\n"), stdout, stderr)
	}
}

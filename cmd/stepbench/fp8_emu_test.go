package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// The tests of this file run FP8 models as users do: --quantization fp8 on
// dummy weights, and checkpoints in each published format (written by
// runner/quanttest), through the whole sweep on the emulated device and the
// cpu backend, and what must be refused in one line.

// fp8Sweep is a small sweep: 2 batch sizes × 2 prompt lengths.
var fp8Sweep = []string{"--batch-size", "1,2", "--input-len", "8,24", "--output-len", "3", "--num-iters", "1", "--num-iters-warmup", "0"}

// fp8Fixture writes a llama-tiny checkpoint in format f.
func fp8Fixture(t *testing.T, f quanttest.Format) string {
	t.Helper()
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny-"+string(f))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := quanttest.Write(dir, cfg, 7, f); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readNative reads a native report.
func readNative(t *testing.T, path string) report.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkFP8Run checks a finished FP8 run's outputs name its scheme.
func checkFP8Run(t *testing.T, what, stdout, native string, want *runner.Quantization, shapes int) {
	t.Helper()
	if !strings.Contains(stdout, "weights: "+want.String()) {
		t.Errorf("%s: stdout does not name the scheme %q:\n%s", what, want, stdout)
	}
	r := readNative(t, native)
	if q := r.Config.Model.Quantization; q == nil || q.String() != want.String() {
		t.Errorf("%s: the native report's config.model.quantization is %v, want %v", what, q, want)
	}
	done := 0
	for _, s := range r.Shapes {
		if s.Complete {
			done++
		}
	}
	if done != shapes {
		t.Errorf("%s: %d of %d shapes complete", what, done, shapes)
	}
}

// run --quantization fp8 and every published FP8 format run the whole
// sweep on the emulated device (cuBLASLt's FP8 GEMMs, fp8.cu) and on the
// cpu backend, each output naming the scheme.
func TestEmulatedFP8Sweeps(t *testing.T) {
	onEmulator(t)
	type runCase struct {
		name string
		args []string
		want *runner.Quantization
	}
	cases := []runCase{{"--quantization fp8", []string{"--model", "llama-tiny", "--quantization", "fp8"}, runner.QuantizeAtLoad()}}
	for _, f := range quanttest.Formats {
		cases = append(cases, runCase{string(f), []string{"--model-path", fp8Fixture(t, f)}, quanttest.Scheme(f)})
	}
	for _, c := range cases {
		for _, device := range []string{"cuda", "cpu"} {
			native := filepath.Join(t.TempDir(), "n.json")
			args := append(append([]string{"run", "--device", device, "--json-out", native}, c.args...), fp8Sweep...)
			stdout, stderr := mustRun(t, args...)
			checkFP8Run(t, c.name+" on "+device, stdout, native, c.want, 4)
			if !strings.Contains(stderr, "FP8 E4M3 projections") {
				t.Errorf("%s on %s: the load line does not say the weights are FP8:\n%s", c.name, device, stderr)
			}
		}
	}
}

// A GPU below compute capability 8.9 (the emulated device reporting 8.0)
// refuses FP8 in one line before any weight loads, exit 1.
func TestEmulatedFP8NeedsComputeCapability89(t *testing.T) {
	onEmulator(t)
	t.Setenv("STEPBENCH_EMU_CC", "8.0")
	code, _, stderr := process(t, append([]string{"run", "--device", "cuda", "--model", "llama-tiny", "--quantization", "fp8"}, fp8Sweep...)...)
	want := "FP8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell: FP8 tensor cores); stepbench emulated GPU is 8.0"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr, want)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if strings.Contains(stderr, "weights (") || !strings.Contains(lines[len(lines)-1], want) {
		t.Errorf("weights loaded before the refusal, or the refusal is not its one last line:\n%s", stderr)
	}
}

// A bad FP8 checkpoint is refused in one line naming the tensor, exit 2.
func TestBadFP8CheckpointIsOneLine(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e5m2 := func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		for i := range ts {
			if ts[i].Name == "model.layers.2.mlp.down_proj.weight" {
				ts[i].DType = "F8_E5M2"
			}
		}
		return ts
	}
	if _, err := quanttest.WriteEdited(dir, cfg, 7, quanttest.AutoFP8Static, e5m2); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, append([]string{"run", "--device", "cpu", "--model-path", dir}, fp8Sweep...)...)
	want := `tensor "model.layers.2.mlp.down_proj.weight" in ` + filepath.Join(dir, "model.safetensors") + ": dtype F8_E5M2: FP8 E5M2 weights are not supported (E4M3 only)"
	if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and one line %q", code, stderr, want)
	}
}

// roofline gives FP8 floors: decode at batch 1 on an H200 reads about half
// the bf16 weight bytes (the embedding table and lm_head stay bf16), and a
// GPU without FP8 tensor cores is refused.
func TestRooflineFP8Floors(t *testing.T) {
	floors := func(args ...string) map[string]any {
		stdout, _ := mustRun(t, append([]string{"roofline", "--gpu", "h200", "--batch-size", "1", "--input-len", "1024", "--output-len", "2", "--format", "json"}, args...)...)
		var out struct {
			Shapes []struct {
				Floors struct {
					Decode       []runner.StepCost `json:"decode"`
					DecodeFloors []struct {
						Seconds float64 `json:"floor_seconds"`
					} `json:"decode_floors"`
				} `json:"floors"`
			} `json:"shapes"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatal(err)
		}
		d := out.Shapes[0].Floors
		return map[string]any{"weight": d.Decode[0].WeightBytes, "floor": d.DecodeFloors[0].Seconds}
	}
	bf16, fp8 := floors(), floors("--quantization", "fp8")
	ratio := fp8["weight"].(float64) / bf16["weight"].(float64)
	t.Logf("decode b=1 on H200: weights %.2f GB -> %.2f GB (%.3f), floor %.3f ms -> %.3f ms",
		bf16["weight"].(float64)/1e9, fp8["weight"].(float64)/1e9, ratio, 1e3*bf16["floor"].(float64), 1e3*fp8["floor"].(float64))
	if ratio < 0.5 || ratio > 0.56 {
		t.Errorf("FP8 decode weight bytes are %.3f of bf16's, want about half (0.5-0.56: the embedding and lm_head stay bf16)", ratio)
	}
	if f := fp8["floor"].(float64) / bf16["floor"].(float64); f > 0.56 {
		t.Errorf("FP8 decode floor is %.3f of bf16's", f)
	}
	code, _, stderr := run(t, "roofline", "--gpu", "a100-sxm-80gb", "--quantization", "fp8")
	if code != 2 || !strings.Contains(stderr, "A100 SXM4 80GB has no FP8 tensor cores") {
		t.Errorf("roofline --gpu a100 --quantization fp8: exit %d, %s", code, stderr)
	}
}

// FP8 checkpoints run tensor-parallel too (in a child process with 2
// emulated GPUs): --tp-size 2 gives the tokens of one GPU and its logits
// within the FP8 noise bound (quanttest.MaxRelErrFloat64: the ranks'
// partial sums are rounded to bf16 before the all-reduce, and each
// rounding that crosses an E4M3 boundary downstream moves an activation by
// a whole step; measured 3.5% for AutoFP8 static, 5.5% for
// compressed-tensors per channel with per-token scales).
func TestEmulatedFP8TensorParallel(t *testing.T) {
	onEmulator(t)
	if os.Getenv("STEPBENCH_TEST_TP") != "child" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedFP8TensorParallel$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_TP=child", "STEPBENCH_EMU_DEVICES=2", "STEPBENCH_TEST_EMU_CACHE="+emuCacheHome)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child with 2 emulated GPUs: %v\n%s", err, out)
		}
		return
	}
	prompts := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(prompts, []byte(tpPrompts), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []quanttest.Format{quanttest.AutoFP8Static, quanttest.CompressedTensorsChannel} {
		dir := fp8Fixture(t, f)
		records := func(extra ...string) []correctnessRecord {
			out := filepath.Join(t.TempDir(), "logits.jsonl")
			mustRun(t, append([]string{"run", "--device", "cuda", "--model-path", dir, "--correctness-test", "--prompt-ids", prompts,
				"--output-len", "6", "--logits-out", out}, extra...)...)
			return readRecords(t, out)
		}
		one, two := records(), records("--tp-size", "2")
		worst := sameGenerationWithin(t, string(f)+" tp=2", two, one, quanttest.MaxRelErrFloat64)
		t.Logf("%s tp=2: tokens equal to one GPU's, largest logits rel err %.2e", f, worst)
	}
}

// Dummy weights of an FP8 checkpoint's config (--load-format dummy) run
// the checkpoint's scheme (its scale layout, static input scales of 1), as
// vLLM's dummy loader does, and roofline costs a checkpoint's own scheme
// from its config.
func TestFP8CheckpointWithDummyWeights(t *testing.T) {
	for _, f := range []quanttest.Format{quanttest.CompressedTensorsChannel, quanttest.AutoFP8Static} {
		dir := fp8Fixture(t, f)
		cfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		native := filepath.Join(t.TempDir(), "n.json")
		stdout, _ := mustRun(t, append([]string{"run", "--device", "cpu", "--model-path", dir, "--load-format", "dummy", "--json-out", native}, fp8Sweep...)...)
		checkFP8Run(t, "dummy weights of "+string(f), stdout, native, cfg.Quantization, 4)
		stdout, _ = mustRun(t, "roofline", "--gpu", "h200", "--model-path", dir, "--batch-size", "1", "--input-len", "8", "--output-len", "2")
		if !strings.Contains(stdout, cfg.Quantization.String()) {
			t.Errorf("roofline --model-path %s does not name the scheme %q:\n%s", f, cfg.Quantization, stdout)
		}
	}
}

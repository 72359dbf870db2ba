package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
)

// vLLM's and SGLang's spellings work where the meaning is the same: the
// tensor-parallel size, eager decode, underscores for dashes.
func TestFlagAliases(t *testing.T) {
	for _, args := range [][]string{{"--tp-size", "2"}, {"--tensor-parallel-size", "2"}, {"--tp", "2"}, {"-tp", "2"}, {"-tp=2"}, {"--tp_size", "2"}} {
		code, stdout, stderr := runBinary(t, nil, append([]string{"roofline", "--model", "llama-tiny", "--batch_size", "1", "2",
			"--input_len", "8", "--output-len", "2", "--format", "json"}, args...)...)
		var doc struct {
			TPSize int `json:"tp_size"`
			Shapes []struct {
				Batch int `json:"batch_size"`
			} `json:"shapes"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); code != 0 || err != nil || doc.TPSize != 2 || len(doc.Shapes) != 2 {
			t.Errorf("%v: exit %d, tp %d, %d shapes (%v); stderr %q", args, code, doc.TPSize, len(doc.Shapes), err, stderr)
		}
	}
	native := filepath.Join(t.TempDir(), "n.json")
	code, _, stderr := runBinary(t, nil, "run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4", "--output-len", "2",
		"--num-iters", "1", "--enforce-eager", "--json-out", native)
	rep, err := report.Read(native)
	if code != 0 || err != nil || rep.Config.Flags["disable-cuda-graph"] != "true" {
		t.Errorf("--enforce-eager: exit %d (%v), disable-cuda-graph %q; %s", code, err, rep.Config.Flags["disable-cuda-graph"], stderr)
	}
	if _, stdout, _ := run(t, "run", "--help"); !strings.Contains(stdout, "--tensor-parallel-size, --tp, -tp = --tp-size") ||
		!strings.Contains(stdout, "--enforce-eager = --disable-cuda-graph") {
		t.Errorf("run --help does not list the aliases:\n%s", stdout)
	}
}

// An unknown flag names the nearest one; a bad list names the flag and the
// item (it was strconv.Atoi's error); every error is one line, exit 2.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--batchsize", "4"}, "unknown flag --batchsize (did you mean --batch-size?"},
		{[]string{"run", "--iters", "3"}, "unknown flag --iters (did you mean --num-iters?"},
		{[]string{"run", "--output-length", "3"}, "did you mean --output-len?"},
		{[]string{"roofline", "--gpus", "h200"}, "did you mean --gpu?"},
		{[]string{"run", "--frobnicate"}, "unknown flag --frobnicate ('stepbench run --help' lists every flag)"},
		{[]string{"run", "--batch-size", ""}, `--batch-size "": empty list`},
		{[]string{"run", "--batch-size", "1,x"}, `--batch-size "1,x": item 2 of 2, "x", is not a whole number`},
		{[]string{"roofline", "--input-len", "8,,16"}, `--input-len "8,,16": item 2 of 3 is empty`},
		{[]string{"ab", "--output-len", "2.5"}, `--output-len "2.5": item 1 of 1, "2.5", is not a whole number`},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

// A one_batch iteration writes input + output − 1 positions: a prompt of
// the model's whole context and one token is allowed (it was refused as
// input + output), one more position is not.
func TestPositionsRule(t *testing.T) {
	if code, stdout, stderr := run(t, "roofline", "--model", "llama-3-8b", "--input-len", "8192", "--output-len", "1"); code != 0 ||
		!strings.Contains(stdout, "8192") {
		t.Errorf("8192 + 1: exit %d, %s", code, stderr)
	}
	code, _, stderr := run(t, "roofline", "--model", "llama-3-8b", "--input-len", "8191", "--output-len", "3")
	if code != exitUsage || !strings.Contains(stderr, "--input-len 8191 + --output-len 3 − 1 = 8193 positions") {
		t.Errorf("8191 + 3: exit %d, %s", code, stderr)
	}
	// The cpu backend runs llama-tiny's whole context: 2047 prompt tokens, one decode step at position 2047.
	if code, _, stderr := run(t, "run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "2047", "--output-len", "2",
		"--num-iters", "1", "--num-iters-warmup", "0"); code != 0 {
		t.Errorf("llama-tiny 2047 + 2: exit %d, %s", code, stderr)
	}
}

// Quiet by default, detail on request: no line per iteration unless -v
// (then one_batch's, byte for byte), the summary alone with -q, every
// column with --wide.
func TestOutputLevels(t *testing.T) {
	base := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "8", "--output-len", "3",
		"--num-iters", "2"}
	_, plain, plainErr := runBinary(t, nil, base...)
	_, verbose, verboseErr := runBinary(t, nil, append(base, "-v")...)
	_, quiet, quietErr := runBinary(t, nil, append(base, "-q")...)
	_, wide, _ := runBinary(t, nil, append(base, "--wide")...)
	if strings.Contains(plain, "Prefill. latency") || strings.Contains(plainErr, "iteration 1") || !strings.Contains(plain, "prefill_ms") {
		t.Errorf("default: per-iteration lines, or no summary:\n%s\n%s", plain, plainErr)
	}
	if n := strings.Count(verbose, "Prefill. latency: "); n != 6 || !strings.Contains(verbose, "Benchmark 2/2: batch_size=2, input_len=8, output_len=3\n") ||
		!strings.Contains(verboseErr, "shape 2/2: iteration 2/2") {
		t.Errorf("-v: %d prefill lines, want 6 (2 shapes × (1 warmup + 2)):\n%s\n%s", n, verbose, verboseErr)
	}
	if quietErr != "" || strings.Contains(quiet, "telemetry") || !strings.HasPrefix(strings.TrimSpace(quiet), "summary") {
		t.Errorf("-q: stderr %q, stdout:\n%s", quietErr, quiet)
	}
	if !strings.Contains(wide, "prefill_host_ms") || !strings.Contains(wide, "decode_host_p90_ms") {
		t.Errorf("--wide:\n%s", wide)
	}
	if code, _, stderr := run(t, append(base, "-v", "-q")...); code != exitUsage || !strings.Contains(stderr, "-v and -q") {
		t.Errorf("-v -q: exit %d, %s", code, stderr)
	}
}

// --plot x.sweep.png names the sweep as written (it wrote x.sweep.sweep.png)
// and the roofline x.png; --plot-timeline writes the timeline; both
// outputs are checked before the run like every other.
func TestPlotFiles(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runBinary(t, nil, "run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "8",
		"--output-len", "3", "--num-iters", "2", "--plot", filepath.Join(dir, "x.sweep.png"), "--plot-timeline", filepath.Join(dir, "t.svg"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"x.png", "x.sweep.png", "t.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.sweep.sweep.png")); err == nil {
		t.Error("x.sweep.sweep.png written")
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "t.svg"))
	if !strings.Contains(string(svg), "step latency (ms)") || !strings.Contains(string(svg), "no telemetry") {
		t.Errorf("the cpu run's timeline lacks its latency panel or its note")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--plot-timeline", filepath.Join(dir, "t.pdf")}, "--plot-timeline: plot"},
		{[]string{"--plot-timeline", filepath.Join(dir, "t.svg"), "--json-out", filepath.Join(dir, "t.svg")}, "t.svg"},
	} {
		code, _, stderr := run(t, append([]string{"run", "--device", "cpu", "--model", "llama-tiny", "--num-iters", "1"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q", tc.args, code, stderr)
		}
	}
}

// The vLLM and SGLang flags users type: accepted where they mean something
// here (one run takes them all), otherwise refused in one line saying what
// stepbench does instead (they were "unknown flag" or named the wrong
// nearest flag: --gpu-memory-utilization suggested --gpu, --n --op).
func TestVLLMAndSGLangFlags(t *testing.T) {
	base := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1,4", "--input-len", "8", "--output-len", "3", "--num-iters", "1"}
	native := filepath.Join(t.TempDir(), "n.json")
	accepted := []string{"--dtype", "bfloat16", "--kv-cache-dtype", "auto", "--trust-remote-code", "--max-model-len", "64",
		"--cuda-graph-max-bs", "8", "--n", "1", "--json-out", native}
	if code, _, stderr := runBinary(t, nil, append(base, accepted...)...); code != 0 {
		t.Fatalf("%v: exit %d\n%s", accepted, code, stderr)
	}
	if rep, err := report.Read(native); err != nil || rep.Config.Flags["max-model-len"] != "64" {
		t.Errorf("the report does not record the flags: %v %v", err, rep.Config.Flags)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpu-memory-utilization", "0.9"}, "--gpu-memory-utilization: stepbench has no KV-cache pool to size"},
		{[]string{"--mem-fraction-static", "0.8"}, "--mem-fraction-static: stepbench has no KV-cache pool to size"},
		{[]string{"--max-model-len", "9"}, "--max-model-len 9: --input-len 8 + --output-len 3 − 1 = 10 positions exceed it"},
		{[]string{"--max-model-len", "100000"}, "--max-model-len 100000 exceeds llama-tiny's max_position_embeddings"},
		{[]string{"--dtype", "float16"}, "--dtype float16: stepbench runs bf16 weights and activations"},
		{[]string{"--kv-scales", "calibrate"}, "--kv-scales sets an FP8 cache's scales: give --kv-cache-dtype fp8"},
		{[]string{"--kv-cache-dtype", "fp8_e5m2", "--kv-fill", "synthetic"}, "--kv-fill synthetic writes E4M3 bytes"},
		{[]string{"--kv-cache-dtype", "int4"}, "--kv-cache-dtype int4: not a KV-cache dtype"},
		{[]string{"--cuda-graph-max-bs", "2"}, "--cuda-graph-max-bs 2: SGLang would run batch 4 eagerly"},
		{[]string{"--n", "2"}, "--n 2: stepbench generates one sequence per prompt"},
		{[]string{"--tokenizer", t.TempDir(), "--prompt-file", native}, "has no tokenizer.json"},
	} {
		code, _, stderr := run(t, append(base, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", tc.args, code, stderr, tc.want)
		}
	}
	// --tokenizer: text prompts encoded with another directory's tokenizer.json.
	prompts := filepath.Join(t.TempDir(), "p.txt")
	if err := os.WriteFile(prompts, []byte("The capital of France is Paris.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBinary(t, nil, append(base, "--tokenizer", textModel(t), "--prompt-file", prompts)...); code != 0 ||
		!strings.Contains(stderr, "--prompt-file "+prompts+": 1 prompts") {
		t.Errorf("--tokenizer: exit %d\n%s", code, stderr)
	}
	if _, stdout, _ := run(t, "run", "--help"); !strings.Contains(stdout, "--max-model-len") || !strings.Contains(stdout, "--mem-fraction-static") {
		t.Errorf("run --help does not list the vLLM and SGLang flags:\n%s", stdout)
	}
}

// --tensor-parallel-size 1 is accepted everywhere: on the cpu backend (a
// plain run; it was refused), and by the one-GPU commands, which refuse
// any other size in one line.
func TestTensorParallelSizeOneEverywhere(t *testing.T) {
	for _, args := range [][]string{
		{"verify", "--tp", "2"}, {"kernel", "attention", "-tp", "2"}, {"calibrate", "--tensor-parallel-size", "4"},
	} {
		code, _, stderr := run(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "runs on one GPU; run and roofline take --tp-size N") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	for _, args := range [][]string{{"verify", "--tp", "1", "--help"}, {"kernel", "attention", "-tp", "1", "--help"}, {"calibrate", "--tensor-parallel-size", "1", "--help"},
		{"run", "--device", "cpu", "--input-len", "4", "--output-len", "2", "--num-iters", "1", "--tensor-parallel-size", "1", "-q"}} {
		if code, _, stderr := run(t, args...); code != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// ab refuses in one line, before any GPU, what it cannot run with run's
// flags: several nodes, safetensors without a model directory, an FP8 KV
// cache, op libraries over --tp-size, an output in a missing directory.
func TestABRefusesWhatItCannotRun(t *testing.T) {
	base := []string{"ab", "--model", "llama-tiny", "--kernel", "argmax=1", "--baseline-kernel", "argmax=2", "--input-len", "8", "--output-len", "2"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nnodes", "2", "--tp-size", "2", "--dist-init-addr", "h:1"}, "--nnodes 2: ab runs both arms in one process"},
		{[]string{"--load-format", "safetensors"}, "--load-format safetensors needs --model-path"},
		{[]string{"--kv-cache-dtype", "fp8", "--kv-scales", "guess"}, `--kv-scales "guess": want checkpoint or calibrate`},
		{[]string{"--tp-size", "2", "--op", "attn_decode=" + os.Args[0]}, "op libraries run on one GPU, not with --tp-size"},
		{[]string{"--json-out", filepath.Join(t.TempDir(), "none", "c.json")}, "--json-out"},
		{[]string{"--quantization", "int4"}, `--quantization: "int4" is not supported`},
	} {
		code, _, stderr := run(t, append(base, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

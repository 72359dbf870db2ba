package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/report"
)

// run invokes the CLI in-process and returns exit code, stdout, stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainExit(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunLlamaTinyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "r.jsonl")
	vllm := filepath.Join(dir, "v.json")
	native := filepath.Join(dir, "n.json")
	args := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1", "2", "--input-len", "16",
		"--output-len", "4", "--num-iters", "2", "--result-filename", jsonl, "--output-json", vllm, "--json-out", native, "-v"}
	code, stdout, stderr := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, re := range []string{
		`(?m)^Prefill\. latency: [ 0-9.]{7,} s, throughput: [ 0-9.]{9,} token/s$`,
		`(?m)^Decode 0\. Batch size: 2, latency: [ 0-9.]+ s, throughput: [ 0-9.]+ token/s$`,
		`(?m)^Decode\.  median latency: [ 0-9.]+ s, median throughput: [ 0-9.]+ token/s$`,
		`(?m)^Total\. latency: [ 0-9.]+ s, throughput: [ 0-9.]+ token/s$`,
		`(?m)^Avg latency: [0-9.e-]+ seconds\nStd latency: [0-9.e-]+ seconds\n10% percentile latency: [0-9.e-]+ seconds$`,
		`(?m)^99% percentile latency: [0-9.e-]+ seconds$`,
		`(?m)^summary`,
		`(?m)^ms: median device time`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stdout lacks %s:\n%s", re, stdout)
		}
	}
	if n := strings.Count(stdout, "Avg latency: "); n != 2 {
		t.Errorf("%d vLLM summaries, want one per shape (2)", n)
	}
	// A second run appends to the JSONL: 2 shapes each time.
	if code, _, stderr := run(t, args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	checkJSONL(t, jsonl, 4)
	for _, name := range []string{"v_batch1_input16_output4.json", "v_batch2_input16_output4.json"} {
		checkVLLM(t, filepath.Join(dir, name), 2)
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Shapes) != 2 || rep.Config.Model.Name != "llama-tiny" || rep.Environment.Backend != "cpu" || rep.Config.NumIters != 2 {
		t.Errorf("native report: %d shapes, model %q, backend %q", len(rep.Shapes), rep.Config.Model.Name, rep.Environment.Backend)
	}
	// 2 iterations × (1 prefill + 3 decode steps).
	if s := rep.Shapes[0]; len(s.Samples) != 8 || s.Noise == nil || s.StopReason != bench.StopNumIters || s.Iterations != 2 {
		t.Errorf("shape 0: %d samples, noise %v, stop %q", len(s.Samples), s.Noise, s.StopReason)
	}
}

// checkJSONL wants n one_batch records of the cpu backend: one_batch's
// keys as Python's json.dumps writes them, then the device that says the
// times are a CPU's (also in the run name: default-cpu).
func checkJSONL(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if !strings.HasPrefix(sc.Text(), `{"run_name": "default-cpu", "batch_size": `) || strings.Contains(sc.Text(), `":0`) ||
			!strings.HasSuffix(sc.Text(), `, "device": "cpu"}`) {
			t.Errorf("line %d is not json.dumps' layout: %s", lines, sc.Text())
		}
		for _, k := range []string{"run_name", "batch_size", "input_len", "output_len", "prefill_latency", "prefill_throughput",
			"median_decode_latency", "median_decode_throughput", "total_latency", "overall_throughput", "device"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("line %d lacks %s", lines, k)
			}
		}
		if len(rec) != 11 {
			t.Errorf("line %d has %d keys, want 11", lines, len(rec))
		}
	}
	if lines != n {
		t.Errorf("%d JSONL lines, want %d", lines, n)
	}
}

func checkVLLM(t *testing.T, path string, iterations int) {
	t.Helper()
	var v struct {
		Avg         *float64           `json:"avg_latency"`
		Latencies   []float64          `json:"latencies"`
		Percentiles map[string]float64 `json:"percentiles"`
		Device      string             `json:"device"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &v); err != nil || v.Avg == nil || len(v.Latencies) != iterations || len(v.Percentiles) != 6 || v.Device != "cpu" {
		t.Errorf("vLLM JSON %s: %v %s", path, err, data)
	}
}

func TestRooflineFloors(t *testing.T) {
	for _, tc := range []struct{ gpu, floor string }{{"h100-sxm", "4.48"}, {"h200", "3.13"}} {
		code, stdout, stderr := run(t, "roofline", "--model", "llama-3-8b", "--gpu", tc.gpu, "--batch-size", "1", "--input-len", "1", "--output-len", "2")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.gpu, code, stderr)
		}
		re := regexp.MustCompile(`(?m)^\s+1\s+1\s+2\s+decode first\s+2\s+[0-9.]+\s+[0-9.]+\s+15\.01\s+[0-9.]+\s+` + regexp.QuoteMeta(tc.floor) + `\s+memory`)
		if !re.MatchString(stdout) {
			t.Errorf("%s: no decode floor of %s ms with 15.01 GB of weights in:\n%s", tc.gpu, tc.floor, stdout)
		}
	}
}

func TestCorrectnessMode(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.txt")
	if err := os.WriteFile(prompts, []byte("1 2 3 4\n9 8 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "logits.jsonl")
	code, stdout, stderr := run(t, "run", "--device", "cpu", "--model", "llama-tiny", "--correctness-test",
		"--prompt-ids", prompts, "--output-len", "3", "--logits-out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^prompt 1: \d+ \d+ \d+\nprompt 2: \d+ \d+ \d+$`).MatchString(stdout) {
		t.Errorf("stdout:\n%s", stdout)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2", len(lines))
	}
	var rec struct {
		Prompt    []int32     `json:"prompt"`
		Generated []int32     `json:"generated"`
		Logits    [][]float32 `json:"logits"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Prompt) != 3 || len(rec.Generated) != 3 || len(rec.Logits) != 3 || len(rec.Logits[0]) != 4096 {
		t.Fatalf("record: prompt %v generated %v, %d logits rows", rec.Prompt, rec.Generated, len(rec.Logits))
	}
	// The generated token is the argmax of its logits.
	for i, row := range rec.Logits {
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) != rec.Generated[i] {
			t.Errorf("token %d: generated %d, argmax of logits %d", i, rec.Generated[i], best)
		}
	}
}

// Bad input exits non-zero with one line naming the flag; never a panic.
func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	kernelsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(kernelsDir, "norm.cu"), []byte("// a kernel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--device", "cpu", "--batch-size", "0"}, "--batch-size"},
		{[]string{"run", "--device", "cpu", "--batch-size="}, "--batch-size"},
		{[]string{"run", "--device", "cpu", "--input-len", "-3"}, "--input-len"},
		{[]string{"run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "2000", "--output-len", "100"}, "--input-len 2000 + --output-len 100"},
		{[]string{"run", "--device", "cpu", "--model", "gpt-5"}, "--model"},
		{[]string{"run", "--device", "cpu", "--model-path", filepath.Join(dir, "missing")}, "--model-path"},
		{[]string{"run", "--device", "tpu"}, "--device"},
		{[]string{"run", "--device", "cpu", "--load-format", "gguf"}, "--load-format"},
		{[]string{"run", "--device", "cpu", "--num-iters", "0"}, "--num-iters"},
		{[]string{"run", "--device", "cpu", "--batch-size", "x"}, "batch-size"},
		{[]string{"run", "--device", "cpu", "--correctness-test"}, "--prompt-ids"},
		{[]string{"run", "--device", "cpu", "--prompt-ids", "p"}, "--correctness-test"},
		{[]string{"run", "--device", "cpu", "--load-format", "safetensors"}, "--model-path"},
		{[]string{"run", "--device", "cpu", "--gpu", "v100"}, "--gpu"},
		{[]string{"roofline", "--gpu", "tpu-v5"}, "--gpu"},
		{[]string{"roofline", "--output-len", "0"}, "--output-len"},
		{[]string{"bogus"}, "unknown command"},
		{[]string{"run", "extra-arg"}, "unexpected argument"},
		{[]string{"run", "--device", "cpu", "--num-iters", "3", "--target-noise", "1"}, "--target-noise is for adaptive sampling"},
		{[]string{"run", "--device", "cpu", "--target-noise", "0"}, "--target-noise"},
		{[]string{"run", "--device", "cpu", "--max-seconds", "0"}, "--max-seconds"},
		{[]string{"run", "--device", "cpu", "--min-iters", "0"}, "--min-iters"},
		{[]string{"run", "--device", "cpu", "--kernels-dir", filepath.Join(dir, "missing")}, "--kernels-dir"},
		{[]string{"run", "--device", "cpu", "--kernels-dir", dir}, "holds no *.cu file"},
		{[]string{"run", "--device", "cpu", "--kernels-dir", kernelsDir}, "the cpu backend runs kernels/ref"},
		{[]string{"run", "--correctness-test", "--prompt-ids", "p", "--batch-size", "2"}, "--correctness-test does not use --batch-size"},
		{[]string{"run", "--correctness-test", "--prompt-ids", "p", "--json-out", "x"}, "does not use --json-out"},
		{[]string{"kernel", "flash_decode"}, `unknown op "flash_decode"`},
		{[]string{"kernel", "attention", "--kernels-dir", filepath.Join(dir, "missing")}, "--kernels-dir"},
		{[]string{"verify", "--kernels-dir", dir}, "--kernels-dir"},
		{[]string{"compare", "a.json"}, "want OLD.json NEW.json"},
		{[]string{"compare", "a.json", "b.json", "--alpha", "2"}, "--alpha"},
		{[]string{"ab", "--kernels-dir", kernelsDir, "--num-iters", "0"}, "--num-iters"},
		{[]string{"run", "--device", "cpu", "--kernel", "argmax=1"}, "--kernel: the cpu backend"},
		{[]string{"run", "--kernel", "attn_prefill=9"}, "attn_prefill has versions [1 2 3 4 5]"},
		{[]string{"verify", "--kernel", "silu_mul=1"}, "silu_mul has no versions"},
		{[]string{"run", "--kernel", "attn_decode=5,rope_kv_write=1"}, "--kernel: attn_decode=5 fuses rope_kv_write version 2 into decode attention; it cannot run with rope_kv_write=1"},
		{[]string{"ab", "--model", "llama-tiny", "--kv-layout", "contiguous", "--kernel", "attn_prefill=2"}, "--kernel: llama-tiny: attn_prefill=2 cannot run head_dim 32"},
		{[]string{"ab", "--model", "llama-tiny", "--kernel", "argmax=2"}, "the arms are the same (both run argmax=2"},
	} {
		code, _, stderr := run(t, tc.args...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code == 0 || !strings.Contains(stderr, tc.want) || len(lines) != 1 {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and one line containing %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestMissingModelFiles(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := run(t, "run", "--device", "cpu", "--model-path", dir)
	if code == 0 || !strings.Contains(stderr, "config.json") {
		t.Errorf("empty model dir: exit %d, stderr %q", code, stderr)
	}
}

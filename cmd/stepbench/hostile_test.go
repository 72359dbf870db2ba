package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/internal/seeded"
	"stepbench/runner"
)

// The tests of this file feed the command hostile input (issue 22): files
// that are no regular file, counts past every limit, malformed model files
// and reports. Each must end at once with one line naming the file, field
// or flag and exit 2; none may hang, crash or panic.

// runProcess runs the command in a child process (this test binary as
// stepbench), killed after timeout: a hang is a failure, not a stuck test.
func runProcess(t *testing.T, timeout time.Duration, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	code, stdout, stderr, _ = runProcessPID(t, timeout, env, args...)
	return code, stdout, stderr
}

// runProcessPID is runProcess that also returns the child's pid.
func runProcessPID(t *testing.T, timeout time.Duration, env []string, args ...string) (code int, stdout, stderr string, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "STEPBENCH_TEST_MAIN=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after %s (hangs?)\nstderr:\n%s", args, timeout, errb.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("%v: %v", args, err)
	}
	return code, out.String(), errb.String(), cmd.Process.Pid
}

// wantOneLine checks a refusal: exit code, one line on stderr holding every
// want, and no crash.
func wantOneLine(t *testing.T, label string, code int, stderr string, wantCode int, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	ok := code == wantCode && len(lines) == 1
	for _, w := range want {
		ok = ok && strings.Contains(stderr, w)
	}
	for _, crash := range []string{"panic", "fatal error", "SIGBUS", "SIGSEGV", "goroutine "} {
		ok = ok && !strings.Contains(stderr, crash)
	}
	if !ok {
		t.Errorf("%s: exit %d, stderr:\n%s\nwant exit %d and one line with %q", label, code, stderr, wantCode, want)
	}
}

// tinyModelDir is llamaTinyDir with llama-tiny's weights (seed 1) in
// model.safetensors, or split over two shards by an index.
func tinyModelDir(t *testing.T, sharded bool) string {
	t.Helper()
	dir := llamaTinyDir(t)
	cfg, _ := runner.Preset("llama-tiny")
	var tensors []runner.HostTensor
	for _, spec := range runner.ExpectedTensors(cfg) {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		data := make([]byte, 2*n)
		for i := 1; i < len(data); i += 2 {
			data[i] = 0x3c // bf16 0x3c00: 2^-7
		}
		tensors = append(tensors, runner.HostTensor{Name: spec.Name, DType: "BF16", Shape: spec.Shape, Data: data})
	}
	if !sharded {
		if err := runner.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	weightMap := map[string]string{}
	half := len(tensors) / 2
	for i, part := range [][]runner.HostTensor{tensors[:half], tensors[half:]} {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		if err := runner.WriteSafetensors(filepath.Join(dir, name), part, nil); err != nil {
			t.Fatal(err)
		}
		for _, tensor := range part {
			weightMap[tensor.Name] = name
		}
	}
	data, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

var tinyRun = []string{"run", "--device", "cpu", "--batch-size", "1", "--input-len", "4", "--output-len", "2", "--num-iters", "1"}

// A FIFO (or a directory, or a device) in place of any file the run reads:
// one line naming the file, exit 2, at once. A FIFO blocked the open
// forever; /dev/zero as config.json ran out of memory; a directory as a
// shard said "mmap: no such device".
func TestIrregularInputFilesRefusedAtOnce(t *testing.T) {
	seeded.Expect(t, "a FIFO, a directory or /dev/zero as an input file")
	if testing.Short() {
		t.Skip("child processes")
	}
	for _, tc := range []struct {
		name, file string
		sharded    bool
		replace    func(t *testing.T, path string)
		want       string
	}{
		{"fifo config.json", "config.json", false, replaceWithFIFO, "a named pipe (FIFO)"},
		{"fifo model.safetensors", "model.safetensors", false, replaceWithFIFO, "a named pipe (FIFO)"},
		{"fifo index", "model.safetensors.index.json", true, replaceWithFIFO, "a named pipe (FIFO)"},
		{"fifo shard", "model-00002-of-00002.safetensors", true, replaceWithFIFO, "a named pipe (FIFO)"},
		{"directory shard", "model-00001-of-00002.safetensors", true, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "a directory, not a regular file"},
		{"config.json linked to /dev/zero", "config.json", false, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "a character device, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tinyModelDir(t, tc.sharded)
			path := filepath.Join(dir, tc.file)
			tc.replace(t, path)
			code, _, stderr := runProcess(t, 30*time.Second, nil, append(tinyRun, "--model-path", dir)...)
			wantOneLine(t, tc.name, code, stderr, exitUsage, path, tc.want)
		})
	}
	t.Run("fifo --prompt-ids", func(t *testing.T) {
		prompts := filepath.Join(t.TempDir(), "prompts.txt")
		replaceWithFIFO(t, prompts)
		code, _, stderr := runProcess(t, 30*time.Second, nil, "run", "--device", "cpu", "--model", "llama-tiny",
			"--correctness-test", "--prompt-ids", prompts, "--output-len", "2")
		wantOneLine(t, "fifo --prompt-ids", code, stderr, exitUsage, "--prompt-ids", prompts, "a named pipe (FIFO)")
	})
}

// The model loads from the files tinyModelDir writes (so the refusals
// above are the files', not the helper's).
func TestTinyModelDirLoads(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		code, _, stderr := run(t, append(tinyRun, "--model-path", tinyModelDir(t, sharded))...)
		if code != 0 {
			t.Errorf("sharded %v: exit %d: %s", sharded, code, stderr)
		}
	}
}

// writeConfig writes llama-tiny's config.json with fields overridden.
func writeConfig(t *testing.T, override map[string]any) string {
	t.Helper()
	dir := llamaTinyDir(t)
	path := filepath.Join(dir, "config.json")
	var hf map[string]any
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &hf); err != nil {
		t.Fatal(err)
	}
	for k, v := range override {
		hf[k] = v
	}
	data, _ = json.Marshal(hf)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Counts in a config.json past their limits are refused before anything
// is allocated, on every path that reads a config: num_hidden_layers 10^15
// passed the memory check (the estimate overflowed negative) and panicked
// in makeslice on the cpu backend, ran out of memory with dummy weights and
// in roofline.
func TestConfigCountsPastTheirLimits(t *testing.T) {
	seeded.Expect(t, "config counts past their limits")
	for _, tc := range []struct {
		field string
		value any
		limit int
	}{
		{"num_hidden_layers", 1_000_000_000_000_000, runner.MaxLayers},
		{"num_hidden_layers", runner.MaxLayers + 1, runner.MaxLayers},
		{"hidden_size", runner.MaxHiddenSize + 1, runner.MaxHiddenSize},
		{"intermediate_size", runner.MaxIntermediateSize + 1, runner.MaxIntermediateSize},
		{"num_attention_heads", runner.MaxHeads + 1, runner.MaxHeads},
		{"num_key_value_heads", runner.MaxHeads + 1, runner.MaxHeads},
		{"head_dim", runner.MaxHeadDim + 2, runner.MaxHeadDim},
		{"vocab_size", runner.MaxVocabSize + 1, runner.MaxVocabSize},
		{"max_position_embeddings", runner.MaxPositions + 1, runner.MaxPositions},
		{"max_position_embeddings", 9007199254740992, runner.MaxPositions},
	} {
		dir := writeConfig(t, map[string]any{tc.field: tc.value})
		for _, args := range [][]string{
			append(tinyRun, "--model-path", dir),
			append(tinyRun, "--model-path", dir, "--load-format", "dummy"),
			{"roofline", "--model-path", dir, "--input-len", "4", "--output-len", "2"},
		} {
			code, _, stderr := run(t, args...)
			wantOneLine(t, fmt.Sprintf("%s %v: %s", tc.field, tc.value, args[0]), code, stderr, exitUsage,
				tc.field, fmt.Sprint(tc.limit), filepath.Join(dir, "config.json"))
		}
	}
}

// Shape flags past their limits: --batch-size 2^48 panicked in makeslice
// (bench.PromptIDs), 2^62 failed an allocation after the weights loaded.
func TestShapeFlagsPastTheirLimits(t *testing.T) {
	seeded.Expect(t, "shape flags past their limits")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "281474976710656"}, "--batch-size: 281474976710656 exceeds the limit 65536"},
		{[]string{"--batch-size", "1,4611686018427387904"}, "--batch-size: 4611686018427387904 exceeds the limit 65536"},
		{[]string{"--input-len", "9223372036854775807", "--output-len", "9223372036854775807"}, "--input-len: 9223372036854775807 exceeds llama-tiny's max_position_embeddings 2048"},
		{[]string{"--batch-size", "65536", "--input-len", "65536"}, "exceeds llama-tiny's max_position_embeddings"},
		{[]string{"--num-iters", "100000000"}, "--num-iters: 100000000 exceeds the limit 16777216"},
		{[]string{"--num-iters-warmup", "100000000"}, "--num-iters-warmup: 100000000 must be 0..16777216"},
		{[]string{"--max-seconds", "+Inf", "--num-iters", "0"}, "--num-iters"},
	} {
		args := append([]string{"run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4", "--output-len", "2"}, tc.args...)
		code, _, stderr := run(t, args...)
		wantOneLine(t, strings.Join(tc.args, " "), code, stderr, exitUsage, tc.want)
	}
	code, _, stderr := run(t, "run", "--device", "cpu", "--model", "llama-3.1-8b", "--batch-size", "65536", "--input-len", "65536",
		"--output-len", "2")
	wantOneLine(t, "batch × input", code, stderr, exitUsage, "--batch-size 65536 × --input-len 65536 = 4294967296 prompt tokens", "2147483647")
	code, _, stderr = run(t, "run", "--device", "cpu", "--model", "llama-tiny", "--max-seconds", "+Inf")
	wantOneLine(t, "--max-seconds +Inf", code, stderr, exitUsage, "--max-seconds")
}

// Malformed model files and reports are bad input, exit 2, like a missing
// file: they exited 1, the code of a failure while running.
func TestMalformedInputExitsTwo(t *testing.T) {
	seeded.Expect(t, "malformed model files and reports")
	badConfig := llamaTinyDir(t)
	if err := os.WriteFile(filepath.Join(badConfig, "config.json"), []byte(`{"architectures": ["LlamaForCausalLM"], "hidden_size": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badWeights := tinyModelDir(t, false)
	if err := os.WriteFile(filepath.Join(badWeights, "model.safetensors"), []byte("not safetensors at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	wrongShape := tinyModelDir(t, false)
	wrongConfig := writeConfig(t, map[string]any{"intermediate_size": 512})
	if err := os.Rename(filepath.Join(wrongShape, "model.safetensors"), filepath.Join(wrongConfig, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	badReport := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badReport, []byte(`{"schema": "stepbench/v1", "shapes": [{"batch_size": 0}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(t.TempDir(), "not.json")
	if err := os.WriteFile(notJSON, []byte("]"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(tinyRun, "--model-path", badConfig), "field hidden_size"},
		{append(tinyRun, "--model-path", badWeights), "header length"},
		{append(tinyRun, "--model-path", wrongConfig), "shape [384 128], want [512 128]"},
		{[]string{"compare", badReport, badReport}, "batch_size, input_len and output_len must be >= 1"},
		{[]string{"compare", notJSON, badReport}, "not a JSON object"},
		{[]string{"compare", filepath.Join(t.TempDir(), "missing.json"), badReport}, "no such file"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "stepbench ") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one error with %q", tc.args, code, stderr, tc.want)
		}
	}
}

// A panic is a bug: exit 1 with its message and stack, never Go's 2 (the
// code of bad usage).
func TestPanicIsNotBadUsage(t *testing.T) {
	err := runRecovered(func([]string, io.Writer, io.Writer) error {
		var m map[string]int
		m["x"] = 1 // a nil map write: a runtime panic
		return nil
	}, nil, nil, nil)
	if err == nil || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "internal error") ||
		!strings.Contains(err.Error(), "assignment to entry in nil map") || !strings.Contains(err.Error(), "hostile_test.go") {
		t.Errorf("a panicking command: %v (exit %d)", err, exitCode(err))
	}
}

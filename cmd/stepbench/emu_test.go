package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
)

// The tests of this file run stepbench end to end on the emulated CUDA
// device (cuda/emu): the cuda backend's real code, kernels, graphs, cuBLAS
// calls and NVML reads, on the CPU. They are what proves the GPU path runs
// before a GPU is ever lent.

// emuCacheHome is the user cache directory the emulated runs share, so the
// kernels are compiled once per test process (TestMain makes and removes it).
var emuCacheHome string

// onEmulator makes the test use the emulated device, with a cubin and
// calibration cache of the tests' own, on this goroutine's OS thread (CUDA's
// threading rule).
func onEmulator(t *testing.T) {
	t.Helper()
	emutest.Use(t)
	t.Setenv("XDG_CACHE_HOME", emuCacheHome)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func mustRun(t *testing.T, args ...string) (string, string) {
	t.Helper()
	code, stdout, stderr := run(t, args...)
	if code != 0 {
		t.Fatalf("stepbench %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout, stderr
}

func TestEmulatedDevices(t *testing.T) {
	onEmulator(t)
	stdout, _ := mustRun(t, "devices")
	for _, want := range []string{"stepbench emulated GPU", "emulated", "compute capability   9.0"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("devices output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestEmulatedRunGraphsAndEager(t *testing.T) {
	onEmulator(t)
	for _, eager := range []bool{false, true} {
		dir := t.TempDir()
		native := filepath.Join(dir, "n.json")
		// Decode positions 16..67 cross a 64-key split of decode attention: the
		// captured graph replays at every one of them.
		args := []string{"run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "16",
			"--output-len", "52", "--num-iters", "1", "--num-iters-warmup", "0", "--json-out", native, "-v"}
		if eager {
			args = append(args, "--disable-cuda-graph")
		}
		stdout, stderr := mustRun(t, args...)
		for _, want := range []string{"Decode 0. Batch size: 2", "summary", "power_W"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("eager=%v: stdout lacks %q:\n%s", eager, want, stdout)
			}
		}
		if !strings.Contains(stdout+stderr, "not GPU times") {
			t.Errorf("eager=%v: no line saying emulated times are not GPU times:\n%s\n%s", eager, stdout, stderr)
		}
		var rep map[string]any
		data, err := os.ReadFile(native)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("native JSON: %v", err)
		}
		if !strings.Contains(string(data), "emulated") {
			t.Errorf("eager=%v: the native report's environment does not say emulated", eager)
		}
		// The paged default takes the block table's versions (attention
		// 4 and 6, rope_kv_write 3); llama-tiny's vocab and widths take
		// the others' newest.
		if want := `"kernel_versions": "argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=1 linear=3 rope_kv_write=3"`; !strings.Contains(string(data), want) {
			t.Errorf("eager=%v: the native report lacks %s", eager, want)
		}
	}
}

// correctnessRun generates greedily on device and returns the generated ids
// and first-step logits of each prompt (from --logits-out).
func correctnessRun(t *testing.T, device, prompts string) []correctnessRecord {
	t.Helper()
	out := filepath.Join(t.TempDir(), device+".jsonl")
	mustRun(t, "run", "--device", device, "--model", "llama-tiny", "--correctness-test", "--prompt-ids", prompts,
		"--output-len", "8", "--logits-out", out)
	return readRecords(t, out)
}

func TestEmulatedCorrectnessEqualsCPU(t *testing.T) {
	onEmulator(t)
	prompts := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(prompts, []byte("1 2 3 4 5 6 7 8\n42\n100 200 300 400 500 600 700 800 900 1000 1100 1200 1300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gpu, cpu := correctnessRun(t, "cuda", prompts), correctnessRun(t, "cpu", prompts)
	if len(gpu) != 3 || len(cpu) != 3 {
		t.Fatalf("%d cuda and %d cpu records, want 3 each", len(gpu), len(cpu))
	}
	sameGeneration(t, "cuda against cpu", gpu, cpu)
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEmulatedVerify(t *testing.T) {
	onEmulator(t)
	stdout, _ := mustRun(t, "verify", "--model", "llama-tiny")
	if !strings.Contains(stdout, "checks passed") {
		t.Errorf("verify output:\n%s", stdout)
	}
	// The emulated GPU has FP8 (9.0): the FP8 GEMM against its twin, and
	// llama-tiny quantized at load end to end against the cpu backend.
	for _, want := range []string{"linear_fp8 (cuBLASLt)", "llama-tiny-fp8 prompt 2"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("verify output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestEmulatedBreakdownKernelCalibrateAB(t *testing.T) {
	onEmulator(t)
	// The contiguous layout: the launch and node counts below are its kernels'.
	stdout, _ := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "2", "--input-len", "16",
		"--output-len", "4", "--num-iters", "1", "--breakdown", "--disable-cuda-graph", "--kv-layout", "contiguous")
	for _, want := range []string{"prefill breakdown", "decode breakdown", "attention", "lm_head"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("breakdown lacks %q:\n%s", want, stdout)
		}
	}
	checkLaunchCounts(t, stdout)
	stdout, _ = mustRun(t, "kernel", "attention", "--model", "llama-tiny", "--input-len", "32", "--min-samples", "3",
		"--max-samples", "5", "--timeout", "10s")
	if !strings.Contains(stdout, "attention") || !strings.Contains(stdout, "not GPU times") {
		t.Errorf("kernel output (the op, said emulated):\n%s", stdout)
	}
	// Emulated rates are thousands of times below a GPU's: printed in the
	// unit that fits (GFLOP/s, GB/s), never as 0.0 TFLOP/s.
	stdout, _ = mustRun(t, "calibrate", "--copy-mib", "4", "--gemm-size", "128", "--repeats", "3", "--force")
	rates := regexp.MustCompile(`copy: [1-9][0-9.]* [kMG]?B/s .*\n.*GEMM 128³: +[1-9][0-9.]* [kMG]?FLOP/s .*\n +ridge: [0-9.e+-]+ FLOP/byte\n` +
		` +cuBLASLt FP8 GEMM 128³: [1-9][0-9.]* [kMG]?FLOP/s \(E4M3`)
	if !strings.Contains(stdout, "not GPU times") || !rates.MatchString(stdout) || strings.Contains(stdout, " 0.0 ") {
		t.Errorf("calibrate output (said emulated, rates in units that fit):\n%s", stdout)
	}
	stdout, _ = mustRun(t, "verify", "--model", "llama-tiny", "--check", "add_i32")
	if !strings.Contains(stdout, "not GPU times") {
		t.Errorf("verify output does not say it ran on the emulated device:\n%s", stdout)
	}
	// A/B of the embedded kernels against an identical copy on disk.
	dir := kernelsWith(t)
	stdout, _ = mustRun(t, "ab", "--model", "llama-tiny", "--batch-size", "1", "--input-len", "16", "--output-len", "4",
		"--num-iters", "4", "--kernels-dir", dir)
	if !strings.Contains(stdout, "prefill") || !strings.Contains(stdout, "not GPU times") ||
		!strings.Contains(stdout, "(the embedded sources): the embedded kernels, nothing to check") {
		t.Errorf("ab output (said emulated, the identical directory named):\n%s", stdout)
	}
	// A/B of two versions of one op, the embedded sources in both arms.
	stdout, stderr := mustRun(t, "ab", "--model", "llama-tiny", "--batch-size", "1", "--input-len", "16", "--output-len", "3",
		"--num-iters", "2", "--kernel", "argmax=1")
	for _, want := range []string{"arm A: kernels embedded, versions argmax=1 ", "arm B: kernels embedded, versions argmax=2 ", "sign test"} {
		if !strings.Contains(stdout+stderr, want) {
			t.Errorf("ab --kernel argmax=1 lacks %q:\n%s\n%s", want, stdout, stderr)
		}
	}
}

// TestEmulatedFaultKeepsFinishedShapes seeds a fault that fires only at
// batch 2 (an embedding copy one vector past the end of its output): the
// run must stop with the CUDA error named and keep batch 1's results.
func TestEmulatedFaultKeepsFinishedShapes(t *testing.T) {
	onEmulator(t)
	dir := kernelsWith(t, kernelEdit{"copy.cu", "for (int i = threadIdx.x; i < vecs; i += blockDim.x) out[dst + i] = table[src + i];",
		"for (int i = threadIdx.x; i < vecs + (tokens > 16 ? 1 : 0); i += blockDim.x) out[dst + i] = table[src + i];"})
	out := t.TempDir()
	jsonl, native := filepath.Join(out, "r.jsonl"), filepath.Join(out, "n.json")
	args := []string{"run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "1,2",
		"--input-len", "16", "--output-len", "4", "--num-iters", "1", "--kernels-dir", dir,
		"--result-filename", jsonl, "--json-out", native}
	// Checked first, the kernel faults before anything is timed or written.
	code, stdout, stderr := run(t, args...)
	if code != exitFailure || !strings.Contains(stderr, "embed failed its check before timing") || strings.Contains(stdout, "Prefill.") {
		t.Fatalf("the checked run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(jsonl); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote %s (%v)", jsonl, err)
	}
	// Unchecked (--no-verify), it faults in batch 2's first step.
	code, stdout, stderr = run(t, append(args, "--no-verify")...)
	if code == 0 {
		t.Fatalf("the faulting run exited 0\n%s\n%s", stdout, stderr)
	}
	for _, want := range []string{"CUDA_ERROR_ILLEGAL_ADDRESS", "embed", "past its end"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatalf("batch 1's JSONL record is lost: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(string(data)), "\n") + 1; n != 1 || !strings.Contains(string(data), `"batch_size": 1`) && !strings.Contains(string(data), `"batch_size":1`) {
		t.Errorf("JSONL after the fault:\n%s", data)
	}
	var rep map[string]any
	data, err = os.ReadFile(native)
	if err != nil {
		t.Fatalf("native report lost: %v", err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("native report is not valid JSON: %v", err)
	}
}

// checkLaunchCounts: llama-tiny's eager decode step (the breakdown's) makes
// as many launches as its replayed CUDA graph has nodes (run -v says), 42:
// per layer two norms, qkv, rope, attention's split and combine (head_dim
// 32: version 1), o, gate_up with SiLU·mul fused, down; then embed, the
// final norm, lm_head, argmax's two kernels and the position's add_i32.
func checkLaunchCounts(t *testing.T, breakdown string) {
	t.Helper()
	i := strings.Index(breakdown, "decode breakdown")
	if i < 0 {
		t.Fatalf("no decode breakdown:\n%s", breakdown)
	}
	step := regexp.MustCompile(`(?m)^ +step +- +(\d+) `).FindStringSubmatch(breakdown[i:])
	if step == nil || step[1] != "42" {
		t.Errorf("decode step launches %v, want 42:\n%s", step, breakdown[i:])
	}
	if strings.Contains(breakdown[i:], "silu_mul") {
		t.Errorf("decode breakdown has a silu_mul row: gate_up_proj should fuse it")
	}
	_, stderr := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "2", "--input-len", "16",
		"--output-len", "4", "--num-iters", "1", "-v", "--kv-layout", "contiguous")
	if !strings.Contains(stderr, "decode step of batch 2 (cache of 19 positions) replays a CUDA graph of 42 nodes") {
		t.Errorf("run -v does not give the decode graph's 42 nodes:\n%s", stderr)
	}
}

// At batch 32 linear version 3 runs the projections on its own kernels and
// fuses silu_mul into gate_up (llama-tiny's decode graph: 42 nodes, as at
// batch 2, and no silu_mul row in the breakdown); version 2 takes at most
// 16 rows, so its batch-32 step is cuBLAS's GEMMs and a silu_mul per
// layer: 46 nodes.
func TestEmulatedLinear3FusesAtBatch32(t *testing.T) {
	onEmulator(t)
	for _, c := range []struct {
		kernel string
		nodes  int
	}{{"linear=3", 42}, {"linear=2", 46}} {
		stdout, stderr := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--kernel", c.kernel, "--batch-size", "32",
			"--input-len", "16", "--output-len", "4", "--num-iters", "1", "-v", "--kv-layout", "contiguous")
		want := fmt.Sprintf("decode step of batch 32 (cache of 19 positions) replays a CUDA graph of %d nodes", c.nodes)
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: run -v lacks %q:\n%s\n%s", c.kernel, want, stdout, stderr)
		}
	}
	stdout, _ := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "32", "--input-len", "16",
		"--output-len", "4", "--num-iters", "1", "--disable-cuda-graph", "--breakdown", "--kv-layout", "contiguous")
	i := strings.Index(stdout, "decode breakdown")
	if i < 0 {
		t.Fatalf("no decode breakdown:\n%s", stdout)
	}
	if strings.Contains(stdout[i:], "silu_mul") {
		t.Errorf("batch 32's decode breakdown has a silu_mul row under linear 3:\n%s", stdout[i:])
	}
	if step := regexp.MustCompile(`(?m)^ +step +- +(\d+) `).FindStringSubmatch(stdout[i:]); step == nil || step[1] != "42" {
		t.Errorf("batch 32's decode step launches %v, want 42:\n%s", step, stdout[i:])
	}
}

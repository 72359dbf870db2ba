package main

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// TestEmulatedProgrammaticLaunch runs, as a user does, --kernel launch=2
// (programmatic dependent launch) on the head_dim-64 llama-tiny with dummy
// weights, in a child process with 2 emulated GPUs and every access before
// griddepcontrol.wait checked (STEPBENCH_EMU_CHECK_PDL=1): with --tp-size 2
// (graphs and eager), the generated tokens and every step's logits are
// launch=1's bits; run -v says which kernels launch programmatically on one
// GPU; ab compares the two versions there, checking every step's logits
// against launch=1's. (One GPU's bits, under four thread orders:
// runner/gpu's TestCUDAProgrammaticLaunchMatchesPlain.)
func TestEmulatedProgrammaticLaunch(t *testing.T) {
	onEmulator(t)
	if os.Getenv("STEPBENCH_TEST_TP") != "child" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedProgrammaticLaunch$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_TP=child", "STEPBENCH_EMU_DEVICES=2", "STEPBENCH_EMU_CHECK_PDL=1",
			"STEPBENCH_TEST_EMU_CACHE="+emuCacheHome)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child with 2 emulated GPUs: %v\n%s", err, out)
		}
		return
	}
	model, prompts := headDim64Model(t)
	correctness := func(extra ...string) []correctnessRecord {
		return correctnessOf(t, model, prompts, append([]string{"--device", "cuda"}, extra...)...)
	}
	for _, extra := range [][]string{{"--tp-size", "2"}, {"--tp-size", "2", "--disable-cuda-graph"}} {
		pdl := correctness(append([]string{"--kernel", "launch=2"}, extra...)...)
		plain := correctness(append([]string{"--kernel", "launch=1"}, extra...)...)
		if len(pdl) == 0 || !reflect.DeepEqual(pdl, plain) {
			t.Errorf("%v: launch=2's tokens and logits are not launch=1's bits", extra)
		}
	}
	args := append([]string{"run", "--device", "cuda", "--kernel", "launch=2", "--batch-size", "3", "--input-len", "8",
		"--output-len", "4", "--num-iters", "1", "-v"}, model...)
	_, stderr := mustRun(t, args...)
	if want := "stepbench: launch=2: 113 kernel entry points launch with programmatic stream serialization"; !strings.Contains(stderr, want) {
		t.Errorf("run -v lacks %q:\n%s", want, stderr)
	}
	stdout, _ := mustRun(t, "ab", "--model", "llama-tiny", "--kernel", "launch=2", "--baseline-kernel", "launch=1", "--batch-size", "1",
		"--input-len", "8", "--output-len", "4", "--num-iters", "2")
	for _, want := range []string{"arm A: --kernel launch=2", "both fed B's tokens"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ab launch=2 against launch=1 lacks %q:\n%s", want, stdout)
		}
	}
}

// launch=2 below compute capability 9.0 (the emulated device reporting
// 8.0) is refused in one line naming the device, exit 2 (a choice the
// device cannot run), before any weight loads.
func TestEmulatedLaunch2NeedsComputeCapability90(t *testing.T) {
	onEmulator(t)
	t.Setenv("STEPBENCH_EMU_CC", "8.0")
	code, _, stderr := process(t, "run", "--device", "cuda", "--model", "llama-tiny", "--kernel", "launch=2",
		"--batch-size", "1", "--input-len", "8", "--output-len", "2", "--num-iters", "1")
	want := "--kernel launch=2: programmatic dependent launch needs compute capability 9.0 or newer; stepbench emulated GPU is 8.0 (use launch=1)"
	if code != 2 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr, want)
	}
	if strings.Contains(stderr, "weights (") {
		t.Errorf("weights loaded before the refusal:\n%s", stderr)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/internal/seeded"
)

// TestEmulatedRankFailure runs --tp-size 4 in a child process with 4
// emulated GPUs in which rank 1's third collective fails on its stream
// (STEPBENCH_EMU_NCCL_FAIL=1:3, in the prefill's second layer) while the
// other ranks wait for it there. The run stops with rank 1's error first
// and the others' as consequences of the abort that woke them. The child's
// NCCL timeout is 600 s, so only the abort ends it quickly; a hang shows
// as the go test timeout.
func TestEmulatedRankFailure(t *testing.T) {
	onEmulator(t)
	if os.Getenv("STEPBENCH_TEST_TP") != "rank-failure" {
		seeded.Expect(t, "a rank's collective fails (STEPBENCH_EMU_NCCL_FAIL)")
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedRankFailure$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_TP=rank-failure", "STEPBENCH_EMU_DEVICES=4",
			"STEPBENCH_EMU_NCCL_TIMEOUT_S=600", "STEPBENCH_EMU_NCCL_FAIL=1:3", "STEPBENCH_TEST_EMU_CACHE="+emuCacheHome)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child with 4 emulated GPUs: %v\n%s", err, out)
		}
		return
	}
	prompts := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(prompts, []byte(tpPrompts), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "run", "--device", "cuda", "--model", "llama-tiny", "--correctness-test", "--prompt-ids", prompts,
		"--output-len", "6", "--tp-size", "4")
	t.Logf("exit %d, stderr:\n%s", code, stderr)
	if code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	const abort = "rank 1 aborted the communicator (ncclCommAbort)"
	wants := []string{
		"rank 1: ",
		"STEPBENCH_EMU_NCCL_FAIL=1:3",
		"rank 0: aborted after rank 1 failed: ", abort,
		"rank 2: aborted after rank 1 failed: ", abort,
		"rank 3: aborted after rank 1 failed: ", abort,
	}
	rest := stderr
	for _, want := range wants {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("stderr lacks %q after the failure's earlier parts (want, in order: %q)", want, wants)
		}
		rest = rest[i+len(want):]
	}
	// Nothing after rank 3's line: closing the group (aborted communicators
	// are not destroyed again) adds no error of its own.
	if nl := strings.IndexByte(rest, '\n'); nl >= 0 && strings.TrimSpace(rest[nl:]) != "" {
		t.Errorf("stderr goes on after the failure:%s", rest[nl:])
	}
}

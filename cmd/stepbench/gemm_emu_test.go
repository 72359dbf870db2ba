package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"stepbench/kernels/ref"
)

// gemmRun generates greedily on the emulated device with --kernel
// gemm=VERSION, returning the records.
func gemmRun(t *testing.T, version, prompts string) []correctnessRecord {
	t.Helper()
	out := filepath.Join(t.TempDir(), "gemm"+version+".jsonl")
	mustProcess(t, "run", "--device", "cuda", "--model", "llama-tiny", "--kernel", "gemm="+version,
		"--correctness-test", "--prompt-ids", prompts, "--output-len", "8", "--logits-out", out)
	return readRecords(t, out)
}

// gemmTimedRun is a timed gemm=2 run of a 40-token prefill with -v; its stderr.
func gemmTimedRun(t *testing.T) string {
	t.Helper()
	_, stderr := mustProcess(t, "run", "--device", "cuda", "--model", "llama-tiny", "--kernel", "gemm=2", "-v",
		"--batch-size", "1", "--input-len", "40", "--output-len", "2", "--num-iters", "1")
	return stderr
}

// --kernel gemm=2 (cuBLASLt, tuned per shape) generates what gemm=1
// (cublasGemmEx) does: the same tokens, logits within the end-to-end bound;
// -v shows each prefill shape's choice, EMULATED, tuned on the first run
// and read from the cache on the next; ab compares the two versions.
func TestEmulatedGemmV2MatchesGemmEx(t *testing.T) {
	onEmulator(t)
	if err := os.RemoveAll(filepath.Join(emuCacheHome, "stepbench", "cubin", "gemm-lt")); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(t.TempDir(), "prompts.txt")
	// 23 and 37 tokens: prefills of more rows than linear version 2 takes.
	var lines []string
	for _, n := range []int{23, 37} {
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, strconv.Itoa(1+(i*37)%900))
		}
		lines = append(lines, strings.Join(ids, " "))
	}
	if err := os.WriteFile(prompts, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lt, ex := gemmRun(t, "2", prompts), gemmRun(t, "1", prompts)
	if len(lt) != 2 || len(ex) != 2 {
		t.Fatalf("%d gemm=2 and %d gemm=1 records, want 2 each", len(lt), len(ex))
	}
	for i := range lt {
		if !equalIDs(lt[i].Generated, ex[i].Generated) {
			t.Errorf("prompt %d: gemm=2 generated %v, gemm=1 %v", i+1, lt[i].Generated, ex[i].Generated)
		}
		for step := range lt[i].Logits {
			if rel, err := ref.RelErr(lt[i].Logits[step], ex[i].Logits[step]); err != nil || rel > 2e-2 {
				t.Errorf("prompt %d step %d: logits rel err %.3g > 2e-2 (%v)", i+1, step, rel, err)
			}
		}
	}
	first := gemmTimedRun(t)
	for _, want := range []string{"stepbench: gemm v2 m=40 n=", "EMULATED (CPU time, not GPU time), tuned "} {
		if !strings.Contains(first, want) {
			t.Errorf("gemm=2 -v stderr lacks %q:\n%s", want, first)
		}
	}
	again := gemmTimedRun(t)
	if !strings.Contains(again, "from cache ") || strings.Contains(again, ", tuned ") {
		t.Errorf("a second gemm=2 run tuned again instead of reading the cache:\n%s", again)
	}
	stdout, _ := mustProcess(t, "ab", "--model", "llama-tiny", "--kernel", "gemm=2", "--baseline-kernel", "gemm=1",
		"--batch-size", "1", "--input-len", "40", "--output-len", "4", "--num-iters", "2")
	for _, want := range []string{"arm A: --kernel gemm=2", "both fed B's tokens"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ab gemm=2 against gemm=1 lacks %q:\n%s", want, stdout)
		}
	}
}

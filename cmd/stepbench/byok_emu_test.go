package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench/report"
	"stepbench/kernels"
)

// The tests of this file hold issue 21's promises ("bring your own kernel")
// with real processes on the emulated device.

// overlayDir writes one embedded source, edited, alone into a new
// directory: what a user's --kernels-dir holds.
func overlayDir(t *testing.T, file, old, replacement string) string {
	t.Helper()
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(srcs[file], old) != 1 {
		t.Fatalf("%s no longer holds %q once: update the edit", file, old)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strings.Replace(srcs[file], old, replacement, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var tinyRunShape = []string{"--model", "llama-tiny", "--batch-size", "1", "--input-len", "16", "--output-len", "4"}

// A directory holding only an edited attention.cu runs in verify, run and
// ab (the other files come from the embedded sources), and every output
// names the file with its sha256.
func TestEmulatedOverlayOfOneFile(t *testing.T) {
	onEmulator(t)
	dir := overlayDir(t, "attention.cu", "    const int keys = min(*startPos + 1, maxSeq);\n    if (split * chunk >= keys) return;",
		"    const int keys = min(*startPos + 1, maxSeq); // an edit of mine\n    if (split * chunk >= keys) return;")
	over, err := kernels.Overrides(dir)
	if err != nil || len(over) != 1 {
		t.Fatalf("Overrides: %v, %v", over, err)
	}
	sum := over[0].SHA256
	stdout, _ := mustProcess(t, append([]string{"verify", "--kernels-dir", dir, "--check", "attention"}, tinyRunShape...)...)
	if !strings.Contains(stdout, "checks passed at the run shapes") {
		t.Errorf("verify of the overlay:\n%s", stdout)
	}
	native := filepath.Join(t.TempDir(), "n.json")
	stdout, stderr := mustProcess(t, append([]string{"run", "--device", "cuda", "--kernels-dir", dir, "--num-iters", "2", "--json-out", native}, tinyRunShape...)...)
	if !strings.Contains(stderr, "kernels from "+dir+" (attention.cu changed)") || !strings.Contains(stdout, "kernel source attention.cu from "+filepath.Join(dir, "attention.cu")+" (sha256 "+sum) {
		t.Errorf("run does not name the overridden file with its sha256:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	if v := rep.Verification; v == nil || v.Status != report.VerificationPassed || len(v.Files) != 1 || v.Files[0].SHA256 != sum || !v.Files[0].Changed {
		t.Errorf("native report's verification: %+v", rep.Verification)
	}
	stdout, _ = mustProcess(t, append([]string{"ab", "--kernels-dir", dir, "--num-iters", "2"}, tinyRunShape...)...)
	if !strings.Contains(stdout, "arm A: kernel source attention.cu") || !strings.Contains(stdout, sum) || !strings.Contains(stdout, "prefill_device") {
		t.Errorf("ab of the overlay:\n%s", stdout)
	}
}

// A source that does not compile is named as a compile error (file, line,
// NVRTC's message), exit 1, not as a missing GPU.
func TestEmulatedCompileErrorIsNamed(t *testing.T) {
	onEmulator(t)
	dir := overlayDir(t, "norm.cu", "    const int row = blockIdx.x;\n", "    const int row = blockIdx.x\n")
	for _, args := range [][]string{
		{"verify", "--kernels-dir", dir, "--check", "add_rmsnorm"},
		append([]string{"run", "--device", "cuda", "--kernels-dir", dir, "--num-iters", "1"}, tinyRunShape...),
		append([]string{"ab", "--kernels-dir", dir, "--num-iters", "1"}, tinyRunShape...),
	} {
		code, _, stderr := process(t, args...)
		if code != exitFailure || !strings.Contains(stderr, "compile error: norm.cu:") || strings.Contains(stderr, "no usable GPU") || !strings.Contains(stderr, "error:") {
			t.Errorf("%s: exit %d, want 1 and the compile error first:\n%s", args[0], code, stderr)
		}
	}
}

// A source of --kernels-dir includes a header of the user's own from an
// --include directory: verify passes, and an edit of the header alone (the
// source unchanged) is compiled and caught: the off-by-one it introduces
// fails the same verify, which a stale cached cubin would have passed.
func TestEmulatedIncludeOfAUsersHeader(t *testing.T) {
	onEmulator(t)
	dir := overlayDir(t, "attention.cu", "    const int keys = min(*startPos + 1, maxSeq);\n    if (split * chunk >= keys) return;",
		"    const int keys = min(*startPos + MY_NEWEST_KEY, maxSeq);\n    if (split * chunk >= keys) return;")
	srcPath := filepath.Join(dir, "attention.cu")
	src, err := os.ReadFile(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srcPath, append([]byte("#include \"my_keys.cuh\"\n"), src...), 0o644); err != nil {
		t.Fatal(err)
	}
	inc := t.TempDir()
	header := filepath.Join(inc, "my_keys.cuh")
	verify := append([]string{"verify", "--kernels-dir", dir, "--include", inc, "--check", "attention", "--kernel", "attn_decode=1"}, tinyRunShape...)
	for _, c := range []struct {
		define string
		code   int
	}{{"#define MY_NEWEST_KEY 1\n", 0}, {"#define MY_NEWEST_KEY 0 // drops the newest key\n", exitFailure}} {
		if err := os.WriteFile(header, []byte(c.define), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := process(t, verify...)
		if code != c.code {
			t.Errorf("header %q: verify exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.define, code, c.code, stdout, stderr)
		}
	}
	if code, _, stderr := process(t, append([]string{"verify", "--include", filepath.Join(inc, "nope")}, tinyRunShape...)...); code != exitUsage || !strings.Contains(stderr, "--include") {
		t.Errorf("--include of a missing directory: exit %d: %s", code, stderr)
	}
}

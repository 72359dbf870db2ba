package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"stepbench/bench/report"
	"stepbench/internal/seeded"
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
	seeded.Expect(t, "a kernel source that does not compile")
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
	seeded.Expect(t, "a user's header edited to drop the newest key")
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

// exampleLibs builds the example op libraries with make examples (gcc
// alone) and returns their directory.
func exampleLibs(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "-C", root, "examples")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make examples: %v\n%s", err, out)
	}
	return filepath.Join(root, "build", "examples")
}

// The C example op library (examples/ops/attn_decode) replaces decode
// attention: verify passes it at the run's shapes, a run names it with its
// sha256 in every output, ab times it against the built-in kernel and gives
// a verdict, and its off-by-one build is refused by verify and before
// anything is timed.
func TestEmulatedExampleOpLibrary(t *testing.T) {
	seeded.Expect(t, "libattn_decode_off_by_one.so: the example op library's wrong build")
	onEmulator(t)
	libs := exampleLibs(t)
	good, bad := filepath.Join(libs, "libattn_decode.so"), filepath.Join(libs, "libattn_decode_off_by_one.so")
	stdout, _ := mustProcess(t, append([]string{"verify", "--op", "attn_decode=" + good, "--check", "attention,decode_graph"}, tinyRunShape...)...)
	if !strings.Contains(stdout, "attention decode [op library libattn_decode.so]") || !strings.Contains(stdout, "checks passed") {
		t.Errorf("verify --op:\n%s", stdout)
	}
	code, stdout, _ := process(t, append([]string{"verify", "--op", "attn_decode=" + bad, "--check", "attention"}, tinyRunShape...)...)
	if code != exitFailure || !strings.Contains(stdout, "FAIL") {
		t.Errorf("verify of the off-by-one build: exit %d, want 1 with FAIL rows:\n%s", code, stdout)
	}
	native := filepath.Join(t.TempDir(), "n.json")
	code, stdout, stderr := process(t, append([]string{"run", "--device", "cuda", "--op", "attn_decode=" + bad, "--num-iters", "2", "--json-out", native}, tinyRunShape...)...)
	if code != exitFailure || strings.Contains(stdout, "Prefill.") || !strings.Contains(stderr, "[op library libattn_decode_off_by_one.so] failed its check before timing") {
		t.Errorf("run of the off-by-one build: exit %d, want 1 before timing:\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	stdout, _ = mustProcess(t, append([]string{"run", "--device", "cuda", "--op", "attn_decode=" + good, "--num-iters", "2", "--json-out", native}, tinyRunShape...)...)
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Verification
	if v == nil || v.Status != report.VerificationPassed || len(v.OpLibraries) != 1 || v.OpLibraries[0].Path != good || len(v.OpLibraries[0].SHA256) != 64 {
		t.Fatalf("native report's verification: %+v", v)
	}
	if !strings.Contains(stdout, "op attn_decode from "+good+" (sha256 "+v.OpLibraries[0].SHA256) {
		t.Errorf("run's text does not name the library with its sha256:\n%s", stdout)
	}
	stdout, _ = mustProcess(t, "ab", "--op", "attn_decode="+good, "--model", "llama-tiny", "--batch-size", "1", "--input-len", "16", "--output-len", "8", "--num-iters", "10")
	rows := verdicts(t, stdout)
	if !strings.Contains(stdout, "arm A: op attn_decode from "+good+" (sha256 "+v.OpLibraries[0].SHA256) || len(rows["decode_device"]) != 1 {
		t.Fatalf("ab --op: no decode_device verdict or no library in the header:\n%s", stdout)
	}
	t.Logf("ab --op attn_decode=example against the built-in kernel: decode_device %s", rows["decode_device"][0])
}

// Every op a library may replace runs from one (examples/ops/reference's
// plain kernels): each passes its check at the run's shapes (linear at
// every GEMM, the captured decode step with the library's rope and
// attention inside the graph), and ab's check of the whole generation
// against the built-in kernels passes. A library that lacks an op, and a
// file that is no op library, are errors naming the library and the op.
func TestEmulatedEveryOpByALibrary(t *testing.T) {
	onEmulator(t)
	lib := filepath.Join(exampleLibs(t), "libreference_ops.so")
	var all []string
	for _, op := range []string{"linear", "attn_prefill", "attn_decode", "rope_kv_write", "add_rmsnorm", "silu_mul", "argmax"} {
		all = append(all, op+"="+lib)
	}
	ops := strings.Join(all, ",")
	stdout, _ := mustProcess(t, append([]string{"verify", "--op", ops}, tinyRunShape...)...)
	for _, want := range []string{"llama-tiny lm_head rows=16 n=4096 k=128", "add_rmsnorm [op library", "silu_mul [op library",
		"argmax [op library", "rope_kv_write [op library", "attention prefill [op library", "attention decode [op library", "decode graph replay", "checks passed"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("verify --op (every op) lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _ = mustProcess(t, "ab", "--op", ops, "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "16", "--output-len", "6", "--num-iters", "2")
	if !strings.Contains(stdout, "every decode step of every shape (12 steps, both fed B's tokens)") {
		t.Errorf("ab --op (every op) did not check the generation:\n%s", stdout)
	}
	decodeOnly := filepath.Join(exampleLibs(t), "libattn_decode.so")
	code, _, stderr := process(t, append([]string{"verify", "--op", "linear=" + decodeOnly}, tinyRunShape...)...)
	// A library that refuses its op is bad input (issue 30): exit 2, named by the probe.
	if code != exitUsage || !strings.Contains(stderr, "--op linear="+decodeOnly+": op linear: stepbench_op_get returned 1: attn_decode example: implements attn_decode only") {
		t.Errorf("--op linear= a library without linear: exit %d\n%s", code, stderr)
	}
	notALib := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(notALib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = process(t, append([]string{"verify", "--op", "argmax=" + notALib}, tinyRunShape...)...)
	if code != exitUsage || !strings.Contains(stderr, "--op argmax="+notALib+": file too short") || strings.Contains(stderr, "no usable GPU") {
		t.Errorf("--op argmax= a file that is no library: exit %d\n%s", code, stderr)
	}
	for _, bad := range []string{"nope=" + lib, "linear=", "linear=" + filepath.Join(t.TempDir(), "missing.so")} {
		if code, _, stderr := process(t, append([]string{"verify", "--op", bad}, tinyRunShape...)...); code != exitUsage || !strings.Contains(stderr, "--op") {
			t.Errorf("--op %s: exit %d, want 2 naming the flag\n%s", bad, code, stderr)
		}
	}
}

// stepbench kernel writes a native report (--json-out) that compare reads,
// op by op; with a baseline it times both arms interleaved, launch by
// launch, and gives bench/compare's paired verdict, naming both arms.
func TestEmulatedKernelReportAndOpLevelAB(t *testing.T) {
	onEmulator(t)
	lib := filepath.Join(exampleLibs(t), "libattn_decode.so")
	dir := t.TempDir()
	base := []string{"kernel", "attention", "--model", "llama-tiny", "--shape", "batch=1,seq=1,pos=64", "--min-samples", "10", "--max-samples", "12", "--timeout", "60s"}
	old, new := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	mustProcess(t, append(base, "--json-out", old)...)
	// --no-verify: the checks of this library are TestEmulatedExampleOpLibrary's; here the report.
	mustProcess(t, append(base, "--op", "attn_decode="+lib, "--no-verify", "--json-out", new)...)
	rep, err := report.Read(new)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.KernelResults) != 1 || len(rep.KernelResults[0].DeviceSeconds) < 10 || rep.Verification == nil || len(rep.Verification.OpLibraries) != 1 ||
		rep.Verified == nil || *rep.Verified {
		t.Fatalf("kernel --json-out: %+v", rep)
	}
	stdout, _ := mustProcess(t, "compare", old, new)
	if !strings.Contains(stdout, "| attention | batch=1/seq=1/pos=64/paged=16 | kernel_device |") {
		t.Errorf("compare of two kernel reports:\n%s", stdout)
	}
	ab := filepath.Join(dir, "ab.json")
	stdout, _ = mustProcess(t, append(base, "--op", "attn_decode="+lib, "--baseline-builtin", "--json-out", ab)...)
	rows := kernelVerdicts(stdout)
	if len(rows["kernel_device"]) != 1 || !strings.Contains(stdout, "launches are paired") || !strings.Contains(stdout, "arm A: op attn_decode from "+lib) ||
		!strings.Contains(stdout, "arm B: the embedded kernels at their default versions") {
		t.Fatalf("kernel --baseline-builtin:\n%s", stdout)
	}
	t.Logf("kernel attention, the example library against the built-in decode attention: %s", rows["kernel_device"][0])
	if rep, err := report.Read(ab); err != nil || len(rep.BaselineKernelResults) != 1 ||
		len(rep.BaselineKernelResults[0].DeviceSeconds) != len(rep.KernelResults[0].DeviceSeconds) {
		t.Errorf("the A/B's report does not pair its arms' samples: %v", err)
	}
}

// kernelVerdicts are the verdict cells of an op-level comparison's rows, by metric.
func kernelVerdicts(markdown string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(markdown, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 12 || strings.TrimSpace(cells[3]) != "kernel_device" {
			continue
		}
		out["kernel_device"] = append(out["kernel_device"], strings.Fields(cells[10])[0])
	}
	return out
}

// A library that replaces linear runs gate_up_proj itself: the decode step
// keeps its silu_mul op instead of taking linear version 2's kernel with
// SiLU·mul fused (which would run ours, not the library's, for gate_up).
func TestEmulatedLinearLibraryKeepsGateUpUnfused(t *testing.T) {
	onEmulator(t)
	lib := filepath.Join(exampleLibs(t), "libreference_ops.so")
	stdout, _ := mustProcess(t, "run", "--device", "cuda", "--model", "llama-tiny", "--op", "linear="+lib, "--batch-size", "1",
		"--input-len", "16", "--output-len", "4", "--num-iters", "1", "--disable-cuda-graph", "--breakdown")
	_, decode, found := strings.Cut(stdout, "decode breakdown:")
	if !found || !regexp.MustCompile(`(?m)^ +silu_mul `).MatchString(decode) {
		t.Errorf("--op linear=LIB: the decode breakdown has no silu_mul row (gate_up fused past the library):\n%s", stdout)
	}
}

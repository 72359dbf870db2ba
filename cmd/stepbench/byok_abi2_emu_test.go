package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// The tests of this file hold issue 28's promises about op ABI 2 with real
// processes on the emulated device: a library of another ABI or whose caps
// do not take the run's cache is refused in one line before any weight is
// loaded; the paged example library passes verify (page sizes, ragged
// lengths, the log-sum-exp, a captured graph) and runs in ab against the
// built-in kernel.

// abiFixture compiles one of cuda/testdata's op libraries with gcc.
func abiFixture(t *testing.T, src string, defines ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	out := filepath.Join(t.TempDir(), "lib"+strings.TrimSuffix(src, ".c")+".so")
	args := append([]string{"-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-I../../include", "-o", out,
		filepath.Join("../../cuda/testdata", src)}, defines...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// refusedInOneLine runs args and wants exit 2 with the error as the last
// line of stderr, one line holding every want, nothing timed and no weights
// loaded (the line "llama-tiny weights (dummy, ...) on cuda in ..." never
// printed).
func refusedInOneLine(t *testing.T, args []string, wants ...string) {
	t.Helper()
	code, stdout, stderr := process(t, args...)
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	ok := code == exitUsage && strings.HasPrefix(last, "stepbench "+args[0]+": ") && !strings.Contains(stderr, "weights (dummy") && !strings.Contains(stdout, "Prefill")
	for _, w := range wants {
		ok = ok && strings.Contains(last, w)
	}
	if !ok {
		t.Errorf("stepbench %s: exit %d, want 2 and one line holding %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wants, stdout, stderr)
	}
}

// A library built for op ABI 1 is refused by every command that takes
// --op, in one line naming it with its sha256 and both versions, exit 2,
// before any weight is loaded.
func TestEmulatedOpLibraryOfABI1IsRefused(t *testing.T) {
	seeded.Expect(t, "an op library built for op ABI 1")
	onEmulator(t)
	lib := abiFixture(t, "abi1_op.c")
	named := "op library " + lib + " (sha256 " + sha256Of(t, lib) + "): built for stepbench_op ABI 1.0, this stepbench speaks ABI 2.1"
	for _, args := range [][]string{
		append([]string{"verify", "--op", "attn_decode=" + lib}, tinyRunShape...),
		append([]string{"run", "--device", "cuda", "--op", "attn_decode=" + lib, "--num-iters", "1"}, tinyRunShape...),
		append([]string{"ab", "--op", "attn_decode=" + lib, "--num-iters", "1"}, tinyRunShape...),
		{"kernel", "attention", "--model", "llama-tiny", "--shape", "batch=1,seq=1,pos=64", "--op", "attn_decode=" + lib, "--timeout", "10s"},
	} {
		refusedInOneLine(t, args, named)
	}
}

// A library whose caps do not take the run's cache is refused the same
// way: one that takes only pages of 48 tokens, on the contiguous layout
// (whose page is a sequence's whole cache) and on pages of 16 (run and
// ab); one that takes only HND, wherever (verify included: stepbench's
// cache is NHD).
func TestEmulatedOpLibraryCapsMismatchIsRefused(t *testing.T) {
	seeded.Expect(t, "an op library whose caps do not take the run's cache")
	onEmulator(t)
	pages48 := abiFixture(t, "record_op.c", "-DCAPS_PAGES_48")
	hnd := abiFixture(t, "record_op.c", "-DCAPS_HND_ONLY")
	named := func(lib, lacks string) string {
		return "op library " + lib + " (sha256 " + sha256Of(t, lib) + "): " + lacks
	}
	run := func(op, lib string, more ...string) []string {
		return append(append([]string{"run", "--device", "cuda", "--op", op + "=" + lib, "--num-iters", "1"}, more...), tinyRunShape...)
	}
	refusedInOneLine(t, run("attn_decode", pages48, "--kv-layout", "contiguous"), named(pages48,
		"op attn_decode does not take the contiguous layout, whose page is a sequence's whole cache (it takes pages of 48 tokens: run with --kv-layout paged --page-size 48)"))
	paged16 := "op attn_decode does not take pages of 16 tokens (it takes pages of 48 tokens: run with --page-size 48)"
	refusedInOneLine(t, run("attn_decode", pages48, "--kv-layout", "paged", "--page-size", "16"), named(pages48, paged16))
	refusedInOneLine(t, append([]string{"ab", "--op", "attn_decode=" + pages48, "--kv-layout", "paged", "--num-iters", "1"}, tinyRunShape...),
		"arm A: ", named(pages48, paged16))
	lacksNHD := named(hnd, "op rope_kv_write does not take stepbench's NHD cache layout (it declares HND)")
	refusedInOneLine(t, run("rope_kv_write", hnd), lacksNHD)
	refusedInOneLine(t, append([]string{"verify", "--op", "rope_kv_write=" + hnd}, tinyRunShape...), lacksNHD)
}

// The paged example library (examples/ops/paged: split-KV, a plan, the
// log-sum-exp) passes verify at the run's shapes: page sizes 1, 7, 16 and
// 64 shuffled, ragged lengths of 1, a page boundary and the table's
// maximum, the contiguous layout as a table, the caches laid out HND (it
// declares HND: the same call, other strides), the log-sum-exp, and the
// captured graph replayed while the view moves on; its build that reads a
// full last page as empty fails at the page-boundary cases and is refused
// before timing; and it runs in ab against the built-in kernel, both arms
// generating the same tokens.
func TestEmulatedPagedExampleOpLibrary(t *testing.T) {
	seeded.Expect(t, "libattn_decode_paged_off_by_one.so: a full last page read as empty")
	onEmulator(t)
	libs := exampleLibs(t)
	good, bad := filepath.Join(libs, "libattn_decode_paged.so"), filepath.Join(libs, "libattn_decode_paged_off_by_one.so")
	stdout, _ := mustProcess(t, append([]string{"verify", "--op", "attn_decode=" + good, "--check", "attention,decode_graph"}, tinyRunShape...)...)
	for _, want := range []string{"attention decode [op library libattn_decode_paged.so]", "with the log-sum-exp", "paged 1 shuffled", "paged 7 shuffled",
		"seq_lens=[1 16 17 48] h=4 kv=2 d=32, paged 16 shuffled", "paged 64 shuffled", "contiguous as a table", "paged 7 shuffled, HND, with the log-sum-exp",
		"decode graph replay [op library libattn_decode_paged.so]", "checks passed"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("verify --op attn_decode=paged example lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ := process(t, append([]string{"verify", "--op", "attn_decode=" + bad, "--check", "attention"}, tinyRunShape...)...)
	if code != exitFailure || !strings.Contains(stdout, "seq_lens=[1 16 17 48] h=4 kv=2 d=32, paged 16 shuffled, with the log-sum-exp") ||
		!strings.Contains(stdout, "FAIL") {
		t.Errorf("verify of the page-boundary off-by-one build: exit %d, want 1 failing at the boundary:\n%s", code, stdout)
	}
	code, stdout, stderr := process(t, append([]string{"run", "--device", "cuda", "--op", "attn_decode=" + bad, "--num-iters", "1"}, tinyRunShape...)...)
	if code != exitFailure || strings.Contains(stdout, "Prefill.") || !strings.Contains(stderr, "failed its check before timing") {
		t.Errorf("run of the off-by-one build: exit %d, want 1 before timing:\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	stdout, _ = mustProcess(t, "ab", "--op", "attn_decode="+good, "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "16", "--output-len", "8", "--num-iters", "6")
	rows := verdicts(t, stdout)
	if !strings.Contains(stdout, "arm A: op attn_decode from "+good) || len(rows["decode_device"]) != 2 || !strings.Contains(stdout, "both fed B's tokens") {
		t.Fatalf("ab --op attn_decode=paged example: no decode_device verdicts, library or token check:\n%s", stdout)
	}
	t.Logf("ab --op attn_decode=paged example against the built-in kernel: decode_device %v", rows["decode_device"])
}

// A library that faults inside a run call (after the probe, which only
// loads it and looks its op up) ends the process by its signal after one
// line naming the library, the op and the call: every call into an ABI 2
// library is labelled for the crash handler, not a Go dump of every
// goroutine.
func TestEmulatedOpLibraryCrashInRunIsNamed(t *testing.T) {
	seeded.Expect(t, "an op library that faults in its run call")
	onEmulator(t)
	lib := abiFixture(t, "record_op.c", "-DCRASH_IN_RUN")
	code, _, stderr := process(t, append([]string{"verify", "--op", "attn_decode=" + lib, "--check", "attention"}, tinyRunShape...)...)
	want := "stepbench: op library " + lib + " crashed in attn_decode's run: SIGSEGV"
	if code == 0 || !strings.Contains(stderr, want) || strings.Contains(stderr, "goroutine ") {
		t.Errorf("verify of a library that faults in run: exit %d, want death by SIGSEGV naming it (%q)\n%s", code, want, stderr)
	}
}

// A library whose run never returns is a step timeout naming the library,
// the op and the call (--step-timeout watches every ABI 2 call), exit 1.
func TestEmulatedOpLibraryHangInRunIsNamed(t *testing.T) {
	onEmulator(t)
	lib := abiFixture(t, "record_op.c", "-DHANG_IN_RUN")
	code, _, stderr := runProcess(t, 120*time.Second, nil, append([]string{"verify", "--op", "attn_decode=" + lib, "--check", "attention", "--step-timeout", "2s"}, tinyRunShape...)...)
	want := "stepbench verify: step timeout: op library " + lib + ": attn_decode's run did not finish within 2s"
	if code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("verify of a library whose run hangs: exit %d, want 1 and %q\n%s", code, want, stderr)
	}
}

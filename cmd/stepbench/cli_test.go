package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/runner"
)

// TestMain lets a test run this binary as the stepbench command
// (STEPBENCH_TEST_MAIN=1): a real process to send a real signal to.
func TestMain(m *testing.M) {
	if os.Getenv("STEPBENCH_TEST_MAIN") == "1" {
		runtime.LockOSThread() // as main does: every CUDA call on one thread
		if err := limitFileSize(os.Getenv(fileSizeLimitEnv)); err != nil {
			panic(err)
		}
		os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
	}
	// The emulated runs share one user cache directory, so the kernels are
	// compiled once per test process (emu_test.go).
	// A child test process (tp_emu_test.go) shares its parent's cache.
	if dir := os.Getenv("STEPBENCH_TEST_EMU_CACHE"); dir != "" {
		emuCacheHome = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "stepbench-cmd-test-cache")
	if err != nil {
		panic(err)
	}
	emuCacheHome = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"help", "run"}, {"compare", "-h"}, {"--version"}} {
		code, stdout, stderr := run(t, args...)
		if code != 0 || stdout == "" || stderr != "" {
			t.Errorf("%v: exit %d, %d bytes on stdout, stderr %q; want 0, text on stdout only", args, code, len(stdout), stderr)
		}
	}
	if _, stdout, _ := run(t, "help", "run"); !strings.Contains(stdout, "--batch-size") || !strings.Contains(stdout, "--target-noise") {
		t.Errorf("help run lacks the flags:\n%s", stdout)
	}
	if _, stdout, _ := run(t, "--version"); !strings.HasPrefix(stdout, "stepbench ") {
		t.Errorf("--version: %q", stdout)
	}
	if code, _, stderr := run(t); code != exitUsage || !strings.Contains(stderr, "usage") {
		t.Errorf("no arguments: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := run(t, "help", "bogus"); code != exitUsage {
		t.Errorf("help bogus: exit %d", code)
	}
}

// one_batch's "--batch-size 1 2 4" works as well as "1,2,4".
func TestListFlagsTakeSeveralArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--batch-size", "1", "2", "4", "--input-len", "4", "8"},
		{"--batch-size", "1,2", "4", "--input-len=4", "8"},
		{"--batch-size=1,2,4", "--input-len", "4,8"},
	} {
		full := append([]string{"roofline", "--model", "llama-tiny", "--output-len", "2", "--format", "json"}, args...)
		code, stdout, stderr := run(t, full...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var doc struct {
			Shapes []struct {
				Batch int `json:"batch_size"`
			} `json:"shapes"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc.Shapes) != 6 || doc.Shapes[4].Batch != 4 {
			t.Errorf("%v: %d shapes (%v), want 3 batch sizes × 2 input lengths", args, len(doc.Shapes), err)
		}
	}
	if code, _, stderr := run(t, "roofline", "--batch-size", "1", "2", "extra"); code != exitUsage || !strings.Contains(stderr, `"extra"`) {
		t.Errorf("a stray word after a list: exit %d, %s", code, stderr)
	}
}

// llamaTinyDir writes an HF model directory with llama-tiny's config.json.
func llamaTinyDir(t *testing.T) string {
	t.Helper()
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	hf := map[string]any{"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama"}
	data, _ := json.Marshal(cfg)
	if err := json.Unmarshal(data, &hf); err != nil {
		t.Fatal(err)
	}
	delete(hf, "name")
	if cfg.RopeScaling == nil {
		delete(hf, "rope_scaling")
	}
	dir := filepath.Join(t.TempDir(), "tiny-model")
	data, _ = json.Marshal(hf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// vLLM's habit: --model takes a model directory.
func TestModelFlagTakesADirectory(t *testing.T) {
	dir := llamaTinyDir(t)
	code, stdout, stderr := run(t, "roofline", "--model", dir, "--batch-size", "1", "--input-len", "4", "--output-len", "2")
	if code != 0 || !strings.Contains(stdout, "tiny-model") {
		t.Errorf("roofline --model DIR: exit %d, %s%s", code, stdout, stderr)
	}
	code, _, stderr = run(t, "run", "--device", "cpu", "--model", dir, "--load-format", "dummy", "--batch-size", "1",
		"--input-len", "4", "--output-len", "2", "--num-iters", "1")
	if code != 0 {
		t.Errorf("run --model DIR: exit %d: %s", code, stderr)
	}
}

// A missing config.json is bad input, as a missing directory is.
func TestMissingModelFilesExitCodes(t *testing.T) {
	empty := t.TempDir()
	codeDir, _, _ := run(t, "run", "--device", "cpu", "--model-path", filepath.Join(empty, "missing"))
	codeConfig, _, stderr := run(t, "run", "--device", "cpu", "--model-path", empty)
	if codeDir != exitUsage || codeConfig != codeDir || !strings.Contains(stderr, "config.json") {
		t.Errorf("missing directory: exit %d; missing config.json: exit %d (%s)", codeDir, codeConfig, stderr)
	}
}

func TestOutputsCheckedBeforeLoading(t *testing.T) {
	dir := t.TempDir()
	history := filepath.Join(dir, "history.jsonl")
	six := strings.Repeat(`{"run_name": "old"}`+"\n", 6)
	if err := os.WriteFile(history, []byte(six), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4", "--output-len", "2", "--num-iters", "1"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--result-filename", history, "--json-out", history}, "--result-filename and --json-out name the same file"},
		{[]string{"--json-out", filepath.Join(dir, "nope", "n.json")}, "directory " + filepath.Join(dir, "nope") + " does not exist"},
		{[]string{"--output-json", history, "--result-filename", history}, "same file"},
		{[]string{"--batch-size", "1,1", "--output-json", filepath.Join(dir, "v.json")}, "item 2 of 2, 1, is listed twice"},
		{[]string{"--plot", filepath.Join(dir, "p.pdf")}, "--plot"},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, append(base, tc.args...)...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code != exitUsage || !strings.Contains(stderr, tc.want) || len(lines) != 1 || strings.Contains(stderr, "weights") {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q before any weight is loaded", tc.args, code, stderr, tc.want)
		}
	}
	if data, _ := os.ReadFile(history); string(data) != six {
		t.Errorf("the history changed:\n%s", data)
	}
}

// Off a GPU the defaults pick llama-tiny: --device cpu without --model runs
// it and says so (it chose llama-3-8b and stopped on a 49 GB message);
// a named model runs as named, without the note.
func TestCPUWithoutModelRunsLlamaTiny(t *testing.T) {
	native := filepath.Join(t.TempDir(), "n.json")
	code, _, stderr := runBinary(t, nil, "run", "--device", "cpu", "--input-len", "8", "--output-len", "2", "--num-iters", "1", "--json-out", native)
	rep, err := report.Read(native)
	if code != 0 || err != nil || rep.Config.Model.Name != "llama-tiny" ||
		!strings.Contains(stderr, "--device cpu runs llama-tiny unless --model names another") {
		t.Errorf("exit %d (%v), model %q; stderr:\n%s", code, err, rep.Config.Model.Name, stderr)
	}
	var notes strings.Builder
	fs := newFlagSet("run", &notes)
	var f runFlags
	f.register(fs)
	if err := parseFlags(fs, []string{"--device", "cpu", "--model", "llama-3-8b"}); err != nil {
		t.Fatal(err)
	}
	if s, err := f.prepare(fs, &notes); err != nil || s.cfg.Name != "llama-3-8b" || notes.Len() != 0 {
		t.Errorf("--model llama-3-8b: %v, model %q, notes %q", err, s.cfg.Name, notes.String())
	}
}

func TestCompareExitCodes(t *testing.T) {
	dir := t.TempDir()
	makeReport := func(name string, scale float64, batch int) string {
		r := report.Report{Schema: report.Schema}
		s := report.ShapeReport{Shape: bench.Shape{Batch: batch, InputLen: 8, OutputLen: 1}, Complete: true}
		for i := 0; i < 8; i++ {
			x := scale * (0.010 + 0.0001*float64(i%3))
			s.Samples = append(s.Samples, report.SampleReport{Phase: bench.PhasePrefill, Iter: i, HostSeconds: x, DeviceSeconds: x})
		}
		r.Shapes = []report.ShapeReport{s}
		path := filepath.Join(dir, name)
		if err := report.Write(path, r); err != nil {
			t.Fatal(err)
		}
		return path
	}
	old, slower, other := makeReport("old.json", 1, 1), makeReport("slower.json", 1.2, 1), makeReport("other.json", 1, 4)
	edit := func(name, from string, change func(*report.Report)) string {
		r, err := report.Read(from)
		if err != nil {
			t.Fatal(err)
		}
		change(&r)
		path := filepath.Join(dir, name)
		if err := report.Write(path, r); err != nil {
			t.Fatal(err)
		}
		return path
	}
	twice := edit("twice.json", old, func(r *report.Report) { r.Shapes = append(r.Shapes, r.Shapes[0]) })
	zeros := edit("zeros.json", slower, func(r *report.Report) {
		for i := range r.Shapes[0].Samples {
			r.Shapes[0].Samples[i].DeviceSeconds = 0
		}
	})
	gpu := edit("gpu.json", old, func(r *report.Report) { r.Environment = report.Environment{Backend: "cuda", GPUName: "NVIDIA H200"} })
	emulated := edit("emu.json", old, func(r *report.Report) {
		r.Environment = report.Environment{Backend: "cuda", Emulated: "stepbench emulated GPU"}
	})
	tests := []struct {
		args       []string
		code       int
		want, says string
	}{
		{[]string{old, slower}, exitOK, "SLOWER", ""},
		{[]string{old, slower, "--fail-on-regression"}, exitRegression, "SLOWER", "2 of 2 rows are SLOWER"},
		{[]string{old, old, "--fail-on-regression"}, exitOK, "SAME (within ±3%)", ""},
		{[]string{old, other}, exitFailure, "", "no shape is in both runs"},
		{[]string{old, slower, "--threshold", "-1"}, exitUsage, "", "--threshold"},
		{[]string{old, slower, "--threshold", "NaN"}, exitUsage, "", "--threshold: NaN"},
		{[]string{old, slower, "--alpha", "NaN"}, exitUsage, "", "--alpha: NaN"},
		{[]string{old, slower, "--alpha", "0.7"}, exitUsage, "", "(0, 0.5]"},
		{[]string{old, slower, "--confidence", "0.4"}, exitUsage, "", "--confidence: 0.4"},
		{[]string{twice, old}, exitUsage, "", "OLD lists shape batch_size=1 input_len=8 output_len=1 twice"},
		{[]string{gpu, emulated}, exitUsage, "", "NEW was made on the emulated CUDA device"},
		// A metric with no usable times: listed, and with --fail-on-regression exit 4.
		{[]string{old, zeros}, exitOK, "not compared (no verdict):\n- b1 i8 o1 prefill_device: NEW has 8 of 8 iterations", ""},
		{[]string{old, zeros, "--fail-on-regression", "--threshold", "50"}, exitUnjudged, "prefill_device: NEW has", "1 metric(s) could not be compared"},
		// A row without a verdict is no pass either.
		{[]string{old, slower, "--fail-on-regression", "--threshold", "19"}, exitUnjudged, "INCONCLUSIVE", "2 of 2 rows are INCONCLUSIVE"},
	}
	for _, tc := range tests {
		code, stdout, stderr := run(t, append([]string{"compare"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout, tc.want) || !strings.Contains(stderr, tc.says) {
			t.Errorf("compare %v: exit %d (want %d), stdout %q, stderr %q", tc.args[2:], code, tc.code, stdout, stderr)
		}
	}
	if _, _, stderr := run(t, "compare", old, other); !strings.Contains(stderr, "no shape is in both runs") {
		t.Errorf("no shape in common: %q", stderr)
	}
}

// A real SIGINT during the third of six shapes: exit 130, the two finished
// shapes' records and a valid native report.
func TestRunInterruptedBySIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command in a child process")
	}
	dir := t.TempDir()
	jsonl, native := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "n.json")
	// Shapes (batch 1): input 8 × output 2, 4; then input 1500 (long: the
	// signal lands in it); then input 16.
	cmd := exec.Command(os.Args[0], "run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1",
		"--input-len", "8", "1500", "16", "--output-len", "2", "4", "--num-iters", "20", "--num-iters-warmup", "0",
		"--result-filename", jsonl, "--json-out", native)
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "shape 3/6") {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d (%v), want 130; stderr:\n%s", code, err, log.String())
	}
	if !strings.Contains(log.String(), "interrupt: stopped at a timed-region boundary after 2 finished shapes") {
		t.Errorf("stderr lacks the interruption message:\n%s", log.String())
	}
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 2 {
		t.Errorf("%d JSONL records, want 2", n)
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatalf("native report: %v", err)
	}
	if len(rep.Shapes) < 2 || !rep.Shapes[0].Complete || !rep.Shapes[1].Complete {
		t.Errorf("native report: %d shapes", len(rep.Shapes))
	}
	if len(rep.Shapes) == 3 && (rep.Shapes[2].Complete || rep.Shapes[2].StopReason != bench.StopInterrupted) {
		t.Errorf("third shape: complete %v, stop %q", rep.Shapes[2].Complete, rep.Shapes[2].StopReason)
	}
}

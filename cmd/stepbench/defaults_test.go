package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"stepbench/bench/report"
)

// runBinary runs this test binary as the stepbench command (see TestMain)
// in a child process, as a user runs it: exit code, stdout, stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "STEPBENCH_TEST_MAIN=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// On the emulated device, as on the cpu backend, --device auto without
// --model runs llama-tiny and says so (it ran llama-3-8b, minutes per step).
func TestEmulatedAutoRunsLlamaTiny(t *testing.T) {
	onEmulator(t)
	dir := t.TempDir()
	native, jsonl, vllm := filepath.Join(dir, "n.json"), filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "v.json")
	code, _, stderr := runBinary(t, nil, "run", "--batch-size", "1", "--input-len", "8", "--output-len", "2", "--num-iters", "1",
		"--json-out", native, "--result-filename", jsonl, "--output-json", vllm)
	if code != 0 || !strings.Contains(stderr, "the emulated CUDA device (STEPBENCH_CUDA_LIBS) runs the GPU path on the CPU: model llama-tiny") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	rep, err := report.Read(native)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Config.Model.Name != "llama-tiny" || rep.Environment.Backend != "cuda" || rep.Environment.Emulated == "" {
		t.Errorf("model %q on %q (emulated %q)", rep.Config.Model.Name, rep.Environment.Backend, rep.Environment.Emulated)
	}
	// The compatible files say their times are emulated, in a field and in the run name.
	record, _ := os.ReadFile(jsonl)
	latency, _ := os.ReadFile(vllm)
	if !strings.HasPrefix(string(record), `{"run_name": "default-emulated", `) || !strings.HasSuffix(string(record), `, "device": "emulated"}`+"\n") ||
		!strings.HasSuffix(string(latency), `"device": "emulated"`+"\n}") {
		t.Errorf("one_batch record %q, vLLM file %q: no emulated mark", record, latency)
	}
	// Named, the model runs as asked: --device cuda warns as --device cpu does.
	code, _, stderr = runBinary(t, nil, "run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "1", "--input-len", "8",
		"--output-len", "2", "--num-iters", "1")
	if code != 0 || strings.Contains(stderr, "unless --model") {
		t.Errorf("--model llama-tiny: exit %d, stderr:\n%s", code, stderr)
	}
}

// calibrate sizes itself to the emulated device (seconds, not the ten
// minutes an 8192³ GEMM takes there) and says what it measures.
func TestEmulatedCalibrateSizesItself(t *testing.T) {
	onEmulator(t)
	code, stdout, stderr := runBinary(t, nil, "calibrate", "--force", "--cache-dir", t.TempDir())
	if code != 0 || !strings.Contains(stderr, "64 MiB copy and 512³ bf16 GEMM, 5 runs each") || !strings.Contains(stdout, "GEMM 512³") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// Ctrl-C stops a calibration at the next run: exit 130, one line saying
// so, nothing cached (it was killed silently, after minutes).
func TestCalibrateInterruptedBySIGINT(t *testing.T) {
	onEmulator(t)
	cache := t.TempDir()
	cmd := exec.Command(os.Args[0], "calibrate", "--force", "--gemm-size", "1024", "--repeats", "1000", "--cache-dir", cache)
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
		if strings.HasPrefix(sc.Text(), "stepbench: calibrating ") {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(log.String(), "interrupt: calibrate") ||
		!strings.Contains(log.String(), "nothing was cached") {
		t.Errorf("exit %d, want 130; stderr:\n%s", code, log.String())
	}
	t.Logf("stderr:\n%s", log.String())
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("the cache holds %d files after an interruption", len(entries))
	}
}

// makeRunArgs are the Makefile's RUN_ARGS: what make run runs.
func makeRunArgs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if args, ok := strings.CutPrefix(line, "RUN_ARGS ?= "); ok {
			return strings.Fields(args)
		}
	}
	t.Fatal("the Makefile has no RUN_ARGS")
	return nil
}

// make run without a GPU, and on the emulated device, prints under 40
// lines (it printed 1,261: a line per iteration, a load line per 10%), a
// summary within 120 columns (it was 223 wide) and stops each shape within
// the host's time budget (it ran every shape to the 15 s cap).
func TestMakeRunIsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make run's command twice")
	}
	for _, emulated := range []bool{false, true} {
		env := []string{"STEPBENCH_CUDA_LIBS=" + t.TempDir()} // no CUDA driver there: the cpu backend
		if emulated {
			onEmulator(t)
			env = nil
		}
		code, stdout, stderr := runBinary(t, env, append([]string{"run"}, makeRunArgs(t)...)...)
		if code != 0 {
			t.Fatalf("emulated %v: exit %d\n%s", emulated, code, stderr)
		}
		lines := strings.Count(stdout, "\n") + strings.Count(stderr, "\n")
		if lines >= 40 || strings.Contains(stdout, "Prefill. latency") || strings.Contains(stderr, "loading dummy weights") {
			t.Errorf("emulated %v: %d lines\nstdout:\n%s\nstderr:\n%s", emulated, lines, stdout, stderr)
		}
		for _, l := range strings.Split(stdout, "\n") {
			if len([]rune(l)) > 120 {
				t.Errorf("emulated %v: a %d-column line: %q", emulated, len([]rune(l)), l)
			}
		}
		if !strings.Contains(stderr, "stopped at --max-seconds 3") || !strings.Contains(stderr, "--num-iters N fixes the count") {
			t.Errorf("emulated %v: the stop is not explained:\n%s", emulated, stderr)
		}
	}
}

// Without a CUDA driver, every command that needs a GPU says how to get
// the emulated device (it said only "no CUDA driver: libcuda.so.1 ...").
func TestNoDriverPointsToTheEmulator(t *testing.T) {
	env := []string{"STEPBENCH_CUDA_LIBS="}
	if code, _, _ := runBinary(t, env, "devices"); code == 0 {
		t.Skip("a CUDA driver opens here")
	}
	for _, args := range [][]string{{"devices"}, {"verify"}, {"calibrate"}, {"kernel", "attention"}, {"ab", "--model", "llama-tiny", "--kernel", "argmax=1"},
		{"run", "--batch-size", "1", "--input-len", "4", "--output-len", "2", "--num-iters", "1"}} {
		_, _, stderr := runBinary(t, env, args...)
		if !strings.Contains(stderr, "export STEPBENCH_CUDA_LIBS=$PWD/build/emu") {
			t.Errorf("%v: stderr %q lacks the pointer to the emulated device", args, stderr)
		}
	}
}

// make install puts stepbench on the PATH: PREFIX/bin/stepbench runs, and
// the target says so, or what to add to the PATH when its directory is not on it.
func TestMakeInstallPutsStepbenchOnThePath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	prefix := t.TempDir()
	out, err := exec.Command("make", "-C", "../..", "install", "PREFIX="+prefix).CombinedOutput()
	if err != nil || !strings.Contains(string(out), prefix+"/bin is not on your PATH: export PATH="+prefix+"/bin:$PATH") {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", "-c", "stepbench version") // found through the PATH, as a user types it
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(prefix, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if version, err := cmd.Output(); err != nil || !strings.HasPrefix(string(version), "stepbench ") {
		t.Errorf("stepbench version from the PATH: %v, %q", err, version)
	}
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
)

// spinningKernels is a --kernels-dir whose embed kernel (the first of
// every prefill) never returns: a kernel stuck on the GPU.
func spinningKernels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	srcs, _ := filepath.Glob("../../kernels/*.cu")
	for _, src := range srcs {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if filepath.Base(src) == "copy.cu" {
			const at = "    if (t >= tokens) return;\n    const int vecs = hidden / 8;"
			if !strings.Contains(text, at) {
				t.Fatal("copy.cu changed: put the spin elsewhere")
			}
			text = strings.Replace(text, at, "    if (t >= tokens) return;\n    volatile int spin = 1;\n    while (spin) {}\n    const int vecs = hidden / 8;", 1)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	precompile(t, dir)
	return dir
}

// precompile builds the kernels of dir into the tests' cubin cache (the
// user cache directory emuCacheHome) before a test sets a time limit: the
// compile, slow on a busy host, is then no part of the time the limit
// allows the run (it once took the whole 2 minutes at load 17).
func precompile(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "build", "--arch", "90", "--kernels-dir", dir)
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1", "XDG_CACHE_HOME="+emuCacheHome)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build --kernels-dir %s: %v\n%s", dir, err, out)
	}
}

func spinningRun(kernelsDir string, extra ...string) []string {
	return append([]string{"run", "--device", "cuda", "--model", "llama-tiny", "--kernels-dir", kernelsDir, "--input-len", "4",
		"--output-len", "2", "--num-iters", "1", "--num-iters-warmup", "0", "--no-telemetry", "--energy-window-seconds", "0"}, extra...)
}

// A kernel that never returns ends the run at --step-timeout with exit 1
// and one line naming the region, on one emulated GPU and on a
// tensor-parallel group of two (whose collectives are aborted: no shared
// segment is left), and in the check of changed kernels before timing.
// Before, the run waited forever.
func TestEmulatedStepTimeout(t *testing.T) {
	seeded.Expect(t, "a kernel that never returns (run)")
	onEmulator(t)
	kernels := spinningKernels(t)
	env := []string{"XDG_CACHE_HOME=" + emuCacheHome, "STEPBENCH_EMU_DEVICES=2"}
	const region = "step timeout: the prefill of batch_size=1 input_len=4 output_len=2, iteration 1 did not finish within 2s"
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--step-timeout", "2s", "--no-verify"}, region},
		{[]string{"--step-timeout", "2s", "--no-verify", "--tp-size", "2"}, region},
		// The kernels --kernels-dir changed are checked before timing: that check spins too.
		{[]string{"--step-timeout", "2s"}, "step timeout: the kernel check before timing did not finish within 2s"},
	} {
		extra, want := tc.extra, tc.want
		code, _, stderr, pid := runProcessPID(t, 120*time.Second, env, spinningRun(kernels, extra...)...)
		if code != exitFailure || !strings.Contains(stderr, want) || strings.Count(stderr, "step timeout") != 1 {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 1 and once %q", extra, code, stderr, want)
		}
		if left := shmSegmentsOf(pid); len(left) > 0 {
			t.Errorf("%v: shared segments left: %v", extra, left)
		}
	}
}

// Ctrl-C while a step is stuck on the GPU says at once that the run waits
// for the step and that a second Ctrl-C exits now; the second exits 130.
// Before, the first Ctrl-C printed nothing.
func TestEmulatedInterruptStuckStep(t *testing.T) {
	seeded.Expect(t, "Ctrl-C during a kernel that never returns")
	emutest.Use(t)
	cmd := exec.Command(os.Args[0], spinningRun(spinningKernels(t), "--step-timeout", "0", "--no-verify")...)
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1", "XDG_CACHE_HOME="+emuCacheHome)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log strings.Builder
	waitFor := func(prefix string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("exited before %q:\n%s", prefix, log.String())
				}
				log.WriteString(line + "\n")
				if strings.Contains(line, prefix) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q after 60 s:\n%s", prefix, log.String())
			}
		}
	}
	waitFor("shape 1/1:") // the shape whose prefill never ends has begun
	time.Sleep(200 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor("interrupt: stopping when the step that runs now ends (the finished shapes' results are written); a second Ctrl-C exits at once")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor("interrupt again: exiting now")
	for range lines {
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != exitInterrupted {
		t.Errorf("exit %d (%v), want 130", cmd.ProcessState.ExitCode(), err)
	}
}

// shmSegmentsOf lists the emulated NCCL's shared-memory segments whose
// unique id the process pid made (its pid is in the name): the tests of
// other packages, running at the same time, have segments of their own.
func shmSegmentsOf(pid int) []string {
	names, _ := filepath.Glob(fmt.Sprintf("/dev/shm/sbemu-nccl-%d-*", pid))
	return names
}

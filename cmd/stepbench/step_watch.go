package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/spf13/pflag"

	"stepbench/cuda"
	"stepbench/internal/watchdog"
	"stepbench/runner"
)

// stepTimeoutFlag is --step-timeout of the commands that launch work
// outside run's timed regions (verify, kernel, calibrate, ab): every call
// that may block on the device or a library (a synchronisation behind a
// kernel that never returns, a compile, a module load, an op library's
// load and calls) is watched (cuda.SetWatcher), and one past the timeout
// ends the command with exit 1 and one line naming it.
type stepTimeoutFlag struct{ value string }

func (s *stepTimeoutFlag) register(fs *pflag.FlagSet, cmd string) {
	fs.StringVar(&s.value, "step-timeout", stepTimeoutAuto, "a call that blocks (a kernel's synchronisation, a compile, a module load, an op library's call) not done after this long ends "+
		cmd+" with exit 1, naming it: a duration such as 90s, 0 for none, or auto: 60s plus the largest prefill's FLOPs at 10^12 FLOP/s (10^9 on the emulated device)")
}

// parseStepTimeout reads a --step-timeout: auto (auto true), 0 (none) or
// a duration up to maxStepTimeout.
func parseStepTimeout(value string) (d time.Duration, auto bool, err error) {
	switch value {
	case stepTimeoutAuto:
		return 0, true, nil
	case "0":
		return 0, false, nil
	}
	d, err = time.ParseDuration(value)
	if err != nil || d < 0 || d > maxStepTimeout {
		return 0, false, usagef("%s: %q is not auto, 0 or a duration such as 90s up to %s", stepTimeoutFlagNameQuote, value, maxStepTimeout)
	}
	return d, false, nil
}

func (s *stepTimeoutFlag) check() error {
	_, _, err := parseStepTimeout(s.value)
	return err
}

// resolve is the timeout: the flag's, or when auto, 60 s plus the prefill
// of batch × input tokens of cfg at the device's floor rate (0: none).
func (s *stepTimeoutFlag) resolve(cfg runner.Config, batch, input int, emulated bool) time.Duration {
	d, auto, _ := parseStepTimeout(s.value) // checked
	if !auto {
		return d
	}
	return stepTimeoutFor(float64(cfg.ParamCount()), cfg, []int{batch}, []int{input}, "cuda", emulated)
}

// resolveFLOPs is the timeout of a command whose largest step does flops
// (calibrate's GEMM): the flag's, or when auto, 60 s plus flops at the
// device's floor rate.
func (s *stepTimeoutFlag) resolveFLOPs(flops float64, emulated bool) time.Duration {
	d, auto, _ := parseStepTimeout(s.value) // checked
	if !auto {
		return d
	}
	rate := gpuFloorFLOPsPerSec
	if emulated {
		rate = cpuFloorFLOPsPerSec
	}
	return stepTimeoutBase + time.Duration(min(flops/rate, maxStepTimeout.Seconds())*float64(time.Second))
}

// stepTimeoutFor is the auto step timeout of a prefill of params
// parameters at the shapes' largest batch × input (autoStepTimeout's rule).
func stepTimeoutFor(params float64, c runner.Config, batches, inputs []int, backend string, emulated bool) time.Duration {
	worst := 0.0
	for _, b := range batches {
		for _, in := range inputs {
			tokens := float64(b) * float64(in)
			attn := 2 * float64(c.NumHiddenLayers) * tokens * float64(in) * float64(c.NumAttentionHeads) * float64(c.HeadDim)
			worst = math.Max(worst, 2*params*tokens+attn)
		}
	}
	rate := gpuFloorFLOPsPerSec
	if backend != "cuda" || emulated {
		rate = cpuFloorFLOPsPerSec
	}
	if worst/rate > maxStepTimeout.Seconds() {
		return maxStepTimeout
	}
	return stepTimeoutBase + time.Duration(worst/rate*float64(time.Second))
}

// setupTimeoutFloor is the least a compile or an op library's load is
// given, whatever --step-timeout: a cold compile of one source takes tens
// of seconds (the emulated NVRTC's g++ more on a busy host), which a step
// timeout of a few seconds must not cut off. STEPBENCH_SETUP_TIMEOUT (a
// duration) replaces it, for tests.
const setupTimeoutFloor = 10 * time.Minute

func setupTimeout(step time.Duration) time.Duration {
	floor := setupTimeoutFloor
	if d, err := time.ParseDuration(os.Getenv("STEPBENCH_SETUP_TIMEOUT")); err == nil && d > 0 {
		floor = d
	}
	return max(step, floor)
}

// stepWatcher is the cuda package's Watcher over a Dog: a synchronisation,
// a module load and an op library's call get the step timeout; a compile
// and a library's load the setup timeout.
type stepWatcher struct {
	dog         *watchdog.Dog
	step, setup time.Duration
}

func (w stepWatcher) Enter(kind cuda.CallKind, what fmt.Stringer) int64 {
	if kind == cuda.Compile || kind == cuda.LibraryLoad {
		return w.dog.Enter(what, w.setup)
	}
	return w.dog.Enter(what, w.step)
}

func (w stepWatcher) Leave(token int64) { w.dog.Leave(token) }

// watchSteps watches every blocking call of the cuda package with the step
// timeout (0: none): past its timeout, before (when set) runs, one line
// names the call and the process exits 1. The function it returns ends
// the watch.
func watchSteps(cmd string, timeout time.Duration, stderr io.Writer, before func()) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	dog := watchdog.Start(min(timeout/8, time.Second), func(what string, d time.Duration) {
		if before != nil {
			before()
		}
		fmt.Fprintf(stderr, "stepbench %s: step timeout: %s did not finish within %s (%s)\n", cmd, what, d, stepTimeoutFlagNameQuote)
		os.Exit(exitFailure)
	})
	cuda.SetWatcher(stepWatcher{dog, timeout, setupTimeout(timeout)})
	return func() {
		cuda.SetWatcher(nil)
		dog.Stop()
	}
}

// driverEmulated says whether the CUDA driver found is the emulated one
// (false when there is none: the command then fails as it would).
func driverEmulated() bool {
	drv, err := cuda.OpenDriver()
	return err == nil && drv.Emulated() != ""
}

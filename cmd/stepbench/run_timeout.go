package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
)

// The auto --step-timeout: a minute, plus the largest prefill's FLOPs at a
// rate no backend falls below (so a slow but working run is never cut off),
// at most maxStepTimeout.
const (
	stepTimeoutBase          = 60 * time.Second
	gpuFloorFLOPsPerSec      = 1e12 // a GPU, the slowest sm_80 at its worst shapes
	cpuFloorFLOPsPerSec      = 1e9  // the cpu backend and the emulated device
	maxStepTimeout           = 1e6 * time.Second
	stepTimeoutAuto          = "auto"
	stepTimeoutFlagNameQuote = "--step-timeout"
)

// checkStepTimeout parses --step-timeout: auto, or a duration >= 0.
func (f *runFlags) checkStepTimeout(*pflag.FlagSet) error {
	_, _, err := parseStepTimeout(f.stepTimeout)
	return err
}

// autoStepTimeout is the auto --step-timeout of the run: 60 s plus the
// largest prefill's FLOPs (2 × parameters × tokens + 2 × layers × batch ×
// input_len² × heads × head_dim: the weights and the attention) at the
// backend's floor rate.
func autoStepTimeout(s runSetup, shapes shapeFlags, backend string, emulated bool) time.Duration {
	params := float64(s.est.WeightBytes) / 2 // one GPU's (a rank's) share
	return stepTimeoutFor(params, s.cfg, shapes.batch, shapes.input, backend, emulated)
}

// stepTimeouts are the harness's step timeout and what it does when a
// region does not end in time: say so, naming the region, abort the
// collectives of a tensor-parallel group (its peers fail instead of
// waiting, and the shared segments go) and end the process with exit 1,
// the finished shapes' results already written.
func (f *runFlags) stepTimeouts(s runSetup, d runDeps, guard *exitGuard, stderr io.Writer) (time.Duration, func(error)) {
	timeout := f.resolvedStepTimeout(s, d.env)
	if timeout <= 0 {
		return 0, nil
	}
	return timeout, func(err error) {
		guard.exit(exitFailure, func() {
			fmt.Fprintf(stderr, "stepbench run: %v (%s); the finished shapes' results are written\n", err, stepTimeoutFlagNameQuote)
			if a, ok := d.target.(collectivesAborter); ok {
				abortWithin(a, 10*time.Second)
			}
		})
	}
}

// deadline bounds work outside the timed regions that runs kernels (the
// kernel check before timing) by the run's step timeout: past it, one line
// names the work and the process exits 1 (nothing is written yet). stop
// ends the wait.
func (f *runFlags) deadline(s runSetup, env report.Environment, what string, stderr io.Writer) (stop func()) {
	timeout := f.resolvedStepTimeout(s, env)
	if timeout <= 0 {
		return func() {}
	}
	timer := time.AfterFunc(timeout, func() {
		fmt.Fprintf(stderr, "stepbench run: %v: %s did not finish within %s (a kernel that never returns?; %s)\n",
			bench.ErrStepTimeout, what, timeout, stepTimeoutFlagNameQuote)
		os.Exit(exitFailure)
	})
	return func() { timer.Stop() }
}

// watchSetup watches the blocking calls of opening the backend (each
// source's compile, each op library's load and first calls) with the run's
// step timeout (watchSteps); the function it returns ends the watch, which
// the timed regions (the harness's own deadline) and the kernel check
// (deadline) do not need.
func (f *runFlags) watchSetup(s runSetup, stderr io.Writer) (stop func()) {
	env := report.Environment{Backend: s.device}
	if s.emulated {
		env.Emulated = "emulated"
	}
	return watchSteps("run", f.resolvedStepTimeout(s, env), stderr, nil)
}

// resolvedStepTimeout is --step-timeout on the run's backend (0: none).
func (f *runFlags) resolvedStepTimeout(s runSetup, env report.Environment) time.Duration {
	if d, auto, _ := parseStepTimeout(f.stepTimeout); !auto { // checked
		return d
	}
	return autoStepTimeout(s, f.shapes, env.Backend, env.Emulated != "")
}

// collectivesAborter is a tensor-parallel group.
type collectivesAborter interface{ AbortCollectives() error }

// abortWithin aborts a's collectives, waiting at most wait: the process is
// about to end, and an abort that hangs must not keep it.
func abortWithin(a collectivesAborter, wait time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = a.AbortCollectives()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

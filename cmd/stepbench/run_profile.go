package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/cuda"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// profileFlags open a profiler capture window around chosen steps (run).
type profileFlags struct {
	profile          bool
	phase            string
	startStep, steps int
}

func (p *profileFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&p.profile, "profile", false, "open a profiler capture window (cuProfilerStart/Stop) around the steps chosen by --profile-phase, --profile-start-step and --profile-steps, in each shape's first timed iteration, outside every timed region: for nsys --capture-range=cudaProfilerApi and ncu --profile-from-start off")
	fs.StringVar(&p.phase, "profile-phase", bench.ProfileBoth, "with --profile: prefill (the prefill alone), decode (decode steps from --profile-start-step), or both (the prefill and decode steps 0..--profile-steps-1)")
	fs.IntVar(&p.startStep, "profile-start-step", 0, "with --profile-phase decode: the first decode step in the window (0-based, as one_batch's 'Decode N' lines)")
	fs.IntVar(&p.steps, "profile-steps", 1, "with --profile-phase decode or both: how many decode steps the window holds")
}

// window is the flags' profile window, checked against the sweep's output
// lengths (nil without --profile).
func (p *profileFlags) window(fs *pflag.FlagSet, outputLens []int) (*bench.ProfileWindow, error) {
	if !p.profile {
		for _, name := range []string{"profile-phase", "profile-start-step", "profile-steps"} {
			if fs.Changed(name) {
				return nil, usagef("--%s needs --profile", name)
			}
		}
		return nil, nil
	}
	w := bench.ProfileWindow{Phase: p.phase, StartStep: p.startStep, Steps: p.steps}
	switch p.phase {
	case bench.ProfilePrefill:
		for _, name := range []string{"profile-start-step", "profile-steps"} {
			if fs.Changed(name) {
				return nil, usagef("--%s counts decode steps; --profile-phase prefill captures the prefill alone", name)
			}
		}
		w.StartStep, w.Steps = 0, 0
	case bench.ProfileBoth:
		if fs.Changed("profile-start-step") && p.startStep != 0 {
			return nil, usagef("--profile-start-step %d: a window of both phases starts at the prefill; use --profile-phase decode", p.startStep)
		}
	}
	if err := w.Validate(outputLens); err != nil {
		return nil, usagef("--profile: %v", err)
	}
	return &w, nil
}

// describe says what the window captures, for stderr.
func describeWindow(w *bench.ProfileWindow) string {
	switch w.Phase {
	case bench.ProfilePrefill:
		return "the prefill"
	case bench.ProfileDecode:
		return fmt.Sprintf("decode steps %d..%d", w.StartStep, w.StartStep+w.Steps-1)
	}
	return fmt.Sprintf("the prefill and decode steps 0..%d", w.Steps-1)
}

// hostProfiler gives the cpu backend NVTX ranges; it has no capture window.
type hostProfiler struct{ nvtx *cuda.NVTX }

func (h hostProfiler) Start() error     { return errors.New("the cpu backend has no CUDA profiler") }
func (h hostProfiler) Stop() error      { return nil }
func (h hostProfiler) Push(name string) { h.nvtx.Push(name) }
func (h hostProfiler) Pop()             { h.nvtx.Pop() }

// attachProfiler attaches NVTX (when a profiler named its injection
// library) to the engine's ops and returns the run's profiler: nil when
// there is neither a tool nor a window.
func attachProfiler(engine *runner.Engine, be runner.Backend, window *bench.ProfileWindow, stderr io.Writer) bench.Profiler {
	nvtx := openNVTX(stderr)
	if nvtx.Attached() {
		engine.Ranges = nvtx
	}
	if window != nil {
		fmt.Fprintf(stderr, "stepbench: profiler window: %s of each shape's first timed iteration\n", describeWindow(window))
	}
	if !nvtx.Attached() && window == nil {
		return nil
	}
	if g, ok := be.(*gpu.Backend); ok {
		return g.Profiler(nvtx)
	}
	return hostProfiler{nvtx}
}

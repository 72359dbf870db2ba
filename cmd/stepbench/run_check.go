package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/bench/tracker"
)

// samplingFlags choose how many timed iterations a shape gets (run and ab).
type samplingFlags struct {
	numIters       int
	targetNoisePct float64
	maxSeconds     float64
	minIters       int
	machine        machine // what runs the steps (fitMachine)
}

// machine is what runs the steps, for the defaults that fit it.
type machine string

const (
	machineGPU      machine = "a GPU"
	machineCPU      machine = "the cpu backend"
	machineEmulated machine = "the emulated CUDA device"
)

// machineKind names the machine of a run on device (cpu or cuda).
func machineKind(device string, emulated bool) machine {
	switch {
	case device == "cpu":
		return machineCPU
	case emulated:
		return machineEmulated
	}
	return machineGPU
}

// hostMaxSeconds is --max-seconds' default where the steps run on the CPU
// (the cpu backend, the emulated device): their timings never get within
// the target noise, so every shape would take the whole GPU budget.
const hostMaxSeconds = 3

// fitMachine fits adaptive sampling's time budget to m: hostMaxSeconds
// off a GPU, unless --max-seconds was given.
func (s *samplingFlags) fitMachine(fs *pflag.FlagSet, m machine) {
	s.machine = m
	if m != machineGPU && s.numIters == 0 && !fs.Changed("max-seconds") {
		s.maxSeconds = hostMaxSeconds
	}
}

// maxSecondsNote explains, in one line, shapes whose adaptive sampling
// stopped at --max-seconds before the target noise: on a CPU or the
// emulated device why, and what fixes the count; "" when none did.
func (s *samplingFlags) maxSecondsNote(shapes []bench.ShapeResult) string {
	stopped, worst := 0, 0.0
	for _, sh := range shapes {
		if sh.StopReason != bench.StopMaxSeconds {
			continue
		}
		stopped++
		for _, n := range []float64{sh.Noise.PrefillHost, sh.Noise.PrefillDevice, sh.Noise.DecodeHost, sh.Noise.DecodeDevice} {
			if !math.IsNaN(n) && !math.IsInf(n, 0) {
				worst = max(worst, n)
			}
		}
	}
	if stopped == 0 {
		return ""
	}
	note := fmt.Sprintf("%d of %d shapes stopped at --max-seconds %g with noise up to %.2g%% (--target-noise %g%%)",
		stopped, len(shapes), s.maxSeconds, 100*worst, s.targetNoisePct)
	if s.machine != machineGPU && s.machine != "" {
		note += fmt.Sprintf(": timings on %s are the CPU's, rarely that steady, so it stops at %d s (15 s on a GPU)", s.machine, hostMaxSeconds)
	}
	return note + "; --num-iters N fixes the count instead"
}

func (s *samplingFlags) register(fs *pflag.FlagSet) {
	d := bench.DefaultAdaptive()
	fs.IntVar(&s.numIters, "num-iters", 0, "a fixed count of timed iterations per shape (default: adaptive, see --target-noise)")
	fs.Float64Var(&s.targetNoisePct, "target-noise", 100*d.TargetNoise,
		"adaptive: iterate a shape until every median's 95% interval half-width is at most this percent of it")
	fs.Float64Var(&s.maxSeconds, "max-seconds", d.MaxSeconds, fmt.Sprintf("adaptive: stop a shape's timed iterations after this many seconds (%d on the cpu backend and the emulated device)", hostMaxSeconds))
	fs.IntVar(&s.minIters, "min-iters", d.MinIters, "adaptive: never fewer timed iterations per shape")
}

// maxIters bounds every iteration count of a flag.
const maxIters = 1 << 24

// maxSeconds bounds every length of time given in seconds (about 31 years).
const maxSeconds = 1e9

func (s *samplingFlags) check(fs *pflag.FlagSet) error {
	if fs.Changed("num-iters") && s.numIters < 1 {
		return usagef("--num-iters: %d must be at least 1", s.numIters)
	}
	for _, n := range []struct {
		flag  string
		value int
	}{{"--num-iters", s.numIters}, {"--min-iters", s.minIters}} {
		if n.value > maxIters {
			return usagef("%s: %d exceeds the limit %d", n.flag, n.value, maxIters)
		}
	}
	if s.numIters > 0 {
		for _, name := range []string{"target-noise", "max-seconds", "min-iters"} {
			if fs.Changed(name) {
				return usagef("--%s is for adaptive sampling; --num-iters %d fixes the count", name, s.numIters)
			}
		}
		return nil
	}
	switch {
	case !(s.targetNoisePct > 0) || s.targetNoisePct >= 100:
		return usagef("--target-noise: %g%% is not in (0, 100)", s.targetNoisePct)
	case !(s.maxSeconds > 0) || s.maxSeconds > maxSeconds:
		return usagef("--max-seconds: %g must be positive and at most %g", s.maxSeconds, maxSeconds)
	case s.minIters < 1:
		return usagef("--min-iters: %d must be at least 1", s.minIters)
	}
	return nil
}

// options sets the sampling fields of opt.
func (s *samplingFlags) options(opt *bench.Options) {
	opt.NumIters = s.numIters
	if s.numIters == 0 {
		opt.Adaptive = bench.Adaptive{TargetNoise: s.targetNoisePct / 100, MaxSeconds: s.maxSeconds, MinIters: s.minIters}
	}
}

// correctnessFlags are the flags --correctness-test uses; it refuses the
// others rather than ignore them.
var correctnessFlags = []string{"model", "model-path", "load-format", "quantization", "device", "seed", "correctness-test", "prompt-ids",
	"prompt", "prompt-file", "chat", "stop-at-eos", "logits-out", "output-len", "kernels-dir", "include", "op", "kernel", "disable-cuda-graph", "nvrtc", "cublas",
	"tp-size", "nnodes", "node-rank", "dist-init-addr", "dist-timeout", "nccl",
	"tokenizer", "trust-remote-code", "dtype", "kv-cache-dtype", "n", "ragged-batch", "kv-layout", "page-size", "page-order"}

// check validates flags that need no model.
func (f *runFlags) check(fs *pflag.FlagSet) error {
	checks := []func(*pflag.FlagSet) error{f.checkChoices, f.sampling.check, f.checkModes, func(*pflag.FlagSet) error { return f.output.check() }, func(*pflag.FlagSet) error {
		return errors.Join(checkKernelsDir(f.backend.kernelsDir), checkIncludeDirs(f.backend.includeDirs))
	}, func(*pflag.FlagSet) error {
		_, err := f.backend.selection()
		return err
	}, func(*pflag.FlagSet) error { return f.telemetry.check() }, func(fs *pflag.FlagSet) error { return f.tp.check(fs, f) },
		f.checkStepTimeout, f.serving.check, f.kv.check, f.checkKVModes}
	for _, check := range checks {
		if err := check(fs); err != nil {
			return err
		}
	}
	return nil
}

func (f *runFlags) checkChoices(fs *pflag.FlagSet) error {
	if err := f.weights.check(); err != nil {
		return err
	}
	switch {
	case f.format != "text" && f.format != "gobench" && tracker.Formats[f.format] == nil:
		return usagef("--format: %q is not text, gobench, pytorch-benchmark, github-action-benchmark or bencher", f.format)
	case !slices.Contains([]string{"auto", "cuda", "cpu"}, f.device):
		return usagef("--device: %q is not auto, cuda or cpu", f.device)
	case f.warmupIters < 0 || f.warmupIters > maxIters:
		return usagef("--num-iters-warmup: %d must be 0..%d", f.warmupIters, maxIters)
	case f.logDecodeStep < 0:
		return usagef("--log-decode-step: %d must not be negative", f.logDecodeStep)
	}
	if f.gpu != "auto" && f.gpu != "none" {
		if _, err := roofline.LookupPreset(f.gpu); err != nil {
			return usagef("--gpu: %v", err)
		}
	}
	return nil
}

func (f *runFlags) checkModes(fs *pflag.FlagSet) error {
	if !f.correctness {
		for _, name := range []string{"prompt-ids", "logits-out", "prompt", "chat", "stop-at-eos"} {
			if fs.Changed(name) {
				return usagef("--%s needs --correctness-test", name)
			}
		}
		return nil
	}
	var refused error
	fs.Visit(func(fl *pflag.Flag) {
		if refused == nil && !slices.Contains(correctnessFlags, fl.Name) {
			refused = usagef("--correctness-test does not use --%s: leave it out", fl.Name)
		}
	})
	switch {
	case refused != nil:
		return refused
	case f.promptIDs == "" && !f.text.given():
		return usagef("--correctness-test needs --prompt-ids FILE, --prompt TEXT or --prompt-file FILE")
	case f.promptIDs != "" && f.text.given():
		return usagef("--prompt-ids gives token ids; --prompt and --prompt-file give text: use one or the other")
	case (f.text.chat || f.text.stopAtEOS) && !f.text.given():
		return usagef("--chat and --stop-at-eos are for text prompts (--prompt, --prompt-file)")
	case len(f.shapes.output) != 1:
		return usagef("--correctness-test takes one --output-len, not %v", f.shapes.output)
	case f.shapes.output[0] < 1:
		return usagef("--output-len: %d must be at least 1", f.shapes.output[0])
	}
	return nil
}

// checkKernelsDir checks --kernels-dir before anything else, on every
// backend: it must be a directory holding *.cu files.
func checkKernelsDir(dir string) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return usagef("--kernels-dir: %v", err)
	}
	if !st.IsDir() {
		return usagef("--kernels-dir: %s is not a directory", dir)
	}
	if sources, _ := filepath.Glob(filepath.Join(dir, "*.cu")); len(sources) == 0 {
		return usagef("--kernels-dir: %s holds no *.cu file", dir)
	}
	return nil
}

// checkKVModes refuses the layout flags where they mean nothing.
func (f *runFlags) checkKVModes(fs *pflag.FlagSet) error {
	if f.raggedBatch && !f.correctness {
		return usagef("--ragged-batch checks --correctness-test's prompts as one batch; a timed ragged batch is --context-lens")
	}
	if f.raggedBatch && (f.logitsOut != "" || f.text.stopAtEOS) {
		return usagef("--ragged-batch compares every step of every prompt; it writes no --logits-out and does not stop at end of turn")
	}
	return nil
}

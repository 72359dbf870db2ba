package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// runFlags are the flags of 'stepbench run'.
type runFlags struct {
	model         modelFlags
	shapes        shapeFlags
	sampling      samplingFlags
	weights       weightFlags // --load-format, --quantization
	device        string
	seed          uint64
	runName       string
	warmupIters   int
	logDecodeStep int
	resultFile    string
	outputJSON    string
	jsonOut       string
	gpu           string
	correctness   bool
	raggedBatch   bool // --ragged-batch: --correctness-test's prompts as one batch, against each alone
	promptIDs     string
	text          textFlags // --prompt, --prompt-file, --chat, --stop-at-eos
	logitsOut     string
	stepTimeout   string // --step-timeout: "auto", a duration, or 0 (none)
	breakdown     bool   // per-op breakdown pass per shape
	format        string // "text", "gobench" or a tracker.Formats name
	backend       backendFlags
	telemetry     telemetryFlags
	profile       profileFlags
	tp            tpFlags
	kv            kvFlags // --kv-layout, --page-size, --page-order, --context-lens, --kv-fill
	output        outputFlags
	serving       servingFlags // vLLM's and SGLang's habits
	modelNote     string       // why the model is not the --model default (said after the checks)
	noVerify      bool
}

func (f *runFlags) register(fs *pflag.FlagSet) {
	f.model.register(fs)
	f.shapes.register(fs, []int{1024}, []int{16})
	f.weights.register(fs)
	fs.StringVar(&f.device, "device", "auto", "backend: auto (cuda when a GPU is usable, else cpu), cuda, cpu")
	fs.Uint64Var(&f.seed, "seed", 42, "seed of the dummy weights and of every prompt's token ids")
	fs.StringVar(&f.runName, "run-name", "default", "run_name field of --result-filename records")
	f.sampling.register(fs)
	fs.IntVar(&f.warmupIters, "num-iters-warmup", 1, "untimed warmup iterations before every shape")
	fs.IntVar(&f.logDecodeStep, "log-decode-step", 0, "also print every Nth decode step (the first 5 are always printed)")
	fs.StringVar(&f.resultFile, "result-filename", "", "append one_batch JSONL records (one per shape, written as each shape ends) to this file")
	fs.StringVar(&f.outputJSON, "output-json", "", "write vLLM 'bench latency' JSON per shape: this file for one shape, else FILE_batchB_inputI_outputO.ext each")
	fs.StringVar(&f.jsonOut, "json-out", "", "write the native JSON report (environment, config, every sample, summaries, noise), rewritten as each shape ends")
	fs.StringVar(&f.gpu, "gpu", report.RoofAuto, "the run's one roof, of every floor and attainment: auto (a cached calibration of this GPU, else its SM count and maximum clocks, else the datasheet preset matching its name; none on cpu), none, or a preset's datasheet: "+joinNames(roofline.PresetNames()))
	fs.BoolVar(&f.correctness, "correctness-test", false, "greedy generation from --prompt-ids or text prompts (--prompt, --prompt-file), printing the generated ids and text (compare with HF transformers)")
	fs.BoolVar(&f.raggedBatch, "ragged-batch", false, "with --correctness-test: run all the prompts as one ragged batch (each its own length and positions) and check that every sequence generates the tokens and logits (within 2e-2) it generates alone; exit 1 when one does not")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "with --correctness-test: file with one prompt per line, token ids separated by spaces")
	f.text.register(fs)
	fs.StringVar(&f.logitsOut, "logits-out", "", "with --correctness-test: append one JSON object per prompt {prompt, generated, logits; with text prompts also prompt_text, generated_text}")
	f.backend.register(fs)
	f.telemetry.register(fs)
	fs.StringVar(&f.stepTimeout, "step-timeout", "auto", "a timed region (or energy-window repetition, or the kernel check before timing) not done after this long ends the run with exit 1, naming it (a kernel that never returns): a duration such as 90s, 0 for none, or auto: 60s plus the largest prefill's FLOPs at 10^12 FLOP/s (10^9 on the cpu backend and the emulated device)")
	fs.BoolVar(&f.breakdown, "breakdown", false, "after timing, one eager pass per shape with an event at every op boundary: a per-op table per phase")
	fs.StringVar(&f.format, "format", "text", "stdout: text (one_batch lines and tables), gobench (Go benchmark lines for benchstat), "+
		"or a dashboard's file: pytorch-benchmark (the PyTorch OSS benchmark database's records, as vLLM writes them), "+
		"github-action-benchmark (customSmallerIsBetter), bencher (Bencher Metric Format); all but text put the text on stderr")
	f.profile.register(fs)
	f.tp.register(fs)
	f.kv.register(fs, true)
	f.output.register(fs)
	f.serving.register(fs)
	registerNoVerify(fs, &f.noVerify)
}

// runSetup is what runCmd resolved before loading weights.
type runSetup struct {
	device, loadFormat string
	emulated           bool // the cuda backend is the emulated device (cuda/emu)
	cfg                runner.Config
	est                runner.MemoryEstimate
	prompts            [][]int32            // --correctness-test's; run --prompt-file's, tokenized
	text               *textPrompts         // --correctness-test with text prompts
	textSource         *bench.TextPrompts   // run --prompt-file: the timed iterations' prompts
	window             *bench.ProfileWindow // --profile
	gate               kernelGate           // what to check before timing
	shapes             []bench.Shape        // the sweep, lengths resolved (not with --correctness-test)
	kvScales           kvScaleInputs        // an FP8 cache's scales, as far as known before loading
}

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var f runFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.check(fs); err != nil {
		return err
	}
	stderr = f.output.progressOn(stderr)
	defer statusOf(stderr).Status("")
	setup, err := f.prepare(fs, stderr)
	if err != nil {
		return err
	}
	if f.tp.grouped(fs) {
		if len(f.backend.ops) > 0 {
			return usagef("--op: op libraries run on one GPU, not with --tp-size")
		}
		return f.runGroup(fs, setup, stdout, stderr)
	}
	if err := checkFP8Arch(setup.device, setup.cfg); err != nil {
		return err
	}
	// The op libraries' caps are checked against the layout as the backend opens.
	kv := f.kv.options(f.seed)
	f.backend.kv, f.backend.tabled = &kv, f.kv.tabled()
	stopWatch := f.watchSetup(setup, stderr) // the compile and the op libraries' loads
	be, env, err := openBackend(setup.device, f.backend, setup.cfg.KernelShape(), setup.est, stderr)
	stopWatch()
	if err != nil {
		return err
	}
	defer be.Close()
	if cpu, ok := be.(*runner.CPU); ok {
		if err := cpu.CheckMemory(setup.est); err != nil {
			return fmt.Errorf("--device cpu: %w", err)
		}
	}
	if err := checkFP8Device(be, setup.cfg); err != nil {
		return err
	}
	verification := report.Verification{Status: report.VerificationReference}
	if g, ok := be.(*gpu.Backend); ok && !f.correctness {
		// Checked before the weights load: a wrong kernel costs no load.
		shapes := runGateShapes(setup.shapes, f.kv.options(f.seed))
		stop := f.deadline(setup, env, "the kernel check before timing", stderr)
		verification, err = setup.gate.check(g, setup.cfg, shapes, f.seed, stderr)
		stop()
		if err != nil {
			return err
		}
	}
	engine, err := f.loadEngine(setup, be, stderr)
	if err != nil {
		return err
	}
	defer engine.Close()
	if f.correctness {
		if f.raggedBatch {
			return f.runRaggedCorrectness(engine, setup, stdout)
		}
		return f.runCorrectness(engine, setup, stdout)
	}
	deps := engineDeps(engine, env)
	deps.verification = verification
	deps.profiler = attachProfiler(engine, be, setup.window, stderr)
	return f.benchmark(fs, setup, deps, stdout, stderr)
}

// prepare resolves the device, the model and the load format, and checks
// every output path, before any weight is loaded.
func (f *runFlags) prepare(fs *pflag.FlagSet, stderr io.Writer) (runSetup, error) {
	var s runSetup
	var err error
	if s.device, s.emulated, err = f.resolveDevice(fs, stderr); err != nil {
		return s, err
	}
	f.tp.oneRankOn(s.device)
	f.sampling.fitMachine(fs, machineKind(s.device, s.emulated))
	if s.window, err = f.profile.window(fs, f.shapes.output); err != nil {
		return s, err
	}
	if s.window != nil && s.device != "cuda" {
		return s, usagef("--profile opens a CUDA profiler window: it needs --device cuda")
	}

	if s.cfg, err = f.model.resolve(); err != nil {
		return s, err
	}
	if s.cfg, err = applyQuantization(s.cfg, f.weights.quantization); err != nil {
		return s, err
	}
	if f.tp.grouped(fs) {
		if err := f.tp.checkModel(s.cfg, s.device); err != nil {
			return s, err
		}
	}
	if !f.correctness {
		checked := f.shapes
		if f.kv.contextLens != "" {
			checked.input = []int{1} // the lengths are checked as they are drawn (sweep)
		}
		if err := checked.validate(s.cfg); err != nil {
			return s, err
		}
		if s.shapes, err = sweep(&f.kv, f.shapes, f.seed, s.cfg); err != nil {
			return s, err
		}
		if err := f.serving.checkShapes(fs, s.cfg, f.shapes, f.backend.disableCUDAGraph); err != nil {
			return s, err
		}
	}
	if s.loadFormat, err = f.weights.resolve(f.model.modelPath); err != nil {
		return s, err
	}
	if s.kvScales, err = f.kv.readKVScales(s.loadFormat, f.model.modelPath, s.cfg); err != nil {
		return s, err
	}
	if f.correctness {
		if s.prompts, s.text, err = f.correctnessPrompts(s.cfg); err != nil {
			return s, err
		}
	} else if f.text.promptFile != "" {
		if s.prompts, err = f.timingPrompts(s.cfg, stderr); err != nil {
			return s, err
		}
		if s.textSource, err = bench.NewTextPrompts(s.prompts, f.seed); err != nil {
			return s, usagef("--prompt-file: %v", err)
		}
	}
	if err := report.CheckOutputs(f.outputFiles(s.shapes), f.inputFiles()); err != nil {
		return s, usageError{err}
	}
	if s.device == "cuda" {
		if s.gate, err = f.backend.gate(f.noVerify); err != nil {
			return s, err
		}
	}
	s.est = f.memoryEstimate(fs, s.cfg, s.prompts, s.shapes)
	if f.modelNote != "" { // said once nothing was refused: an error stays one line
		fmt.Fprintln(stderr, "stepbench: "+f.modelNote)
	}
	return s, nil
}

// resolveDevice turns --device auto into cuda or cpu, and says whether the
// cuda backend is the emulated device. Without a GPU, auto falls back to
// the cpu backend and, unless a model was named, to the llama-tiny preset:
// an 8B model on two cores is no run; so does the emulated device, which
// runs the GPU path on the CPU.
func (f *runFlags) resolveDevice(fs *pflag.FlagSet, stderr io.Writer) (device string, emulated bool, err error) {
	device = f.device
	defaultModel := !fs.Changed("model") && f.model.modelPath == ""
	if device == "auto" {
		gpuWhy := probeGPU()
		switch {
		case gpuWhy != nil:
			device = "cpu"
			if f.backend.kernelsDir != "" {
				return "", false, usagef("--kernels-dir needs a GPU, and there is none usable (%v)", gpuWhy)
			}
			if defaultModel {
				f.model.model = "llama-tiny"
			}
			why, hint := gpuWhy, ""
			if nd := (noDriverError{}); errors.As(gpuWhy, &nd) && os.Getenv("STEPBENCH_CUDA_LIBS") == "" {
				why, hint = nd.err, "stepbench: "+emulatorHint+"\n"
			}
			fmt.Fprintf(stderr, "stepbench: no usable GPU (%v); running the cpu reference backend with model %s\n%s",
				why, modelLabel(f.model), hint)
		case emulatedDriver():
			device, emulated = "cuda", true
			if f.model.fitEmulated(fs) {
				fmt.Fprintln(stderr, "stepbench: "+emulatedNote)
			}
		default:
			device = "cuda"
		}
	} else if device == "cuda" {
		emulated = emulatedDriver()
		if emulated && f.model.fitEmulated(fs) {
			f.modelNote = emulatedNote
		}
	} else if device == "cpu" && defaultModel {
		// An 8B model is 16 GB of weights and minutes per step on a CPU.
		f.model.model = "llama-tiny"
		f.modelNote = "--device cpu runs llama-tiny unless --model names another (llama-3-8b: 16 GB of weights, minutes per step)"
	}
	if err := f.checkDevice(device); err != nil {
		return "", false, err
	}
	return device, emulated, nil
}

// checkDevice refuses what the device cannot run.
func (f *runFlags) checkDevice(device string) error {
	if device == "cpu" && f.backend.kernelsDir != "" {
		return usagef("--kernels-dir: the cpu backend runs kernels/ref, not CUDA kernels; use --device cuda")
	}
	if device == "cpu" && len(f.backend.ops) > 0 {
		return usagef("--op: the cpu backend runs kernels/ref, not op libraries; use --device cuda")
	}
	if device == "cpu" && len(f.backend.kernelVersions) > 0 {
		return usagef("--kernel: the cpu backend has one implementation of each op, not CUDA kernel versions; use --device cuda")
	}
	if f.breakdown && device == "cuda" && !f.backend.disableCUDAGraph {
		// A replayed graph has no op boundaries to put events at.
		return usagef("--breakdown on the cuda backend needs --disable-cuda-graph")
	}
	return nil
}

// memoryEstimate is what one GPU (or the host) needs: with --tp-size, one
// rank's share.
func (f *runFlags) memoryEstimate(fs *pflag.FlagSet, cfg runner.Config, prompts [][]int32, shapes []bench.Shape) runner.MemoryEstimate {
	maxBatch, maxTokens, maxSeq := f.shapes.maxima()
	if f.correctness {
		maxBatch, maxTokens, maxSeq = 1, 0, 0
		for _, p := range prompts {
			maxTokens = max(maxTokens, len(p))
			maxSeq = max(maxSeq, runner.Positions(len(p), f.shapes.output[0]))
		}
	}
	if f.correctness {
		if f.tp.grouped(fs) {
			return f.tp.rankEstimate(cfg, maxBatch, maxTokens, maxSeq)
		}
		return runner.EstimateMemory(cfg, maxBatch, maxTokens, maxSeq)
	}
	return kvEstimate(cfg, f.tp.rankLayout(cfg, f.tp.grouped(fs)), shapes, f.kv.options(f.seed))
}

func (f *runFlags) loadEngine(s runSetup, be runner.Backend, stderr io.Writer) (*runner.Engine, error) {
	src, closeSrc, err := openWeights(s.loadFormat, f.model.modelPath, f.seed, s.cfg)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	loadStart := time.Now()
	engine, err := runner.NewEngine(s.cfg, be, src, loadProgress(stderr, s.loadFormat))
	if err != nil {
		return nil, err
	}
	if err := engine.SetKVOptions(f.kv.options(f.seed)); err != nil {
		return nil, errors.Join(err, engine.Close())
	}
	if err := f.kv.applyKVScales(engine, s.kvScales, f.calibrationInputs(s), stderr); err != nil {
		return nil, errors.Join(err, engine.Close())
	}
	fmt.Fprintf(stderr, "stepbench: %s weights (%s, %s) on %s in %.1f s\n", s.cfg.Name, s.loadFormat,
		weightsLabel(s.cfg, s.est), be.Name(), time.Since(loadStart).Seconds())
	return engine, nil
}

func modelLabel(m modelFlags) string {
	if m.modelPath != "" {
		return m.modelPath
	}
	return m.model
}

// maxima are the largest batch, prefill token count and positions of the sweep.
func (s *shapeFlags) maxima() (batch, tokens, seq int) {
	for _, b := range s.batch {
		for _, in := range s.input {
			for _, out := range s.output {
				batch, tokens, seq = max(batch, b), max(tokens, b*in), max(seq, runner.Positions(in, out))
			}
		}
	}
	return batch, tokens, seq
}

// hostEnvironment is what every report says about the machine.
func hostEnvironment(backend string) report.Environment {
	host, _ := os.Hostname()
	return report.Environment{Backend: backend, Hostname: host, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// checkRankKernels is a tensor-parallel run's kernelGate: the kernels every
// rank runs are checked at rank 0's shapes on this node's first GPU, on a
// backend of its own opened and closed before the group forms (a rank that
// failed while the others join the communicator could not be aborted).
func (f *runFlags) checkRankKernels(s runSetup, stderr io.Writer) (report.Verification, error) {
	if f.correctness {
		return report.Verification{}, nil // nothing is timed
	}
	if len(s.gate.checks) == 0 || s.gate.noVerify {
		return s.gate.check(nil, s.cfg, nil, f.seed, stderr) // says so without a device
	}
	sel, err := f.backend.selection()
	if err != nil {
		return report.Verification{}, err
	}
	be, err := gpu.New(gpu.Options{KernelsDir: f.backend.kernelsDir, IncludeDirs: f.backend.includeDirs, NVRTCPath: f.backend.nvrtcPath, CublasPath: f.backend.cublasPath,
		DisableGraphs: f.backend.disableCUDAGraph, Kernels: sel, Progress: stderr})
	if err != nil {
		return report.Verification{}, openFailure("--device cuda", err)
	}
	rank := s.cfg
	m := f.tp.rankShape(s.cfg)
	rank.NumAttentionHeads, rank.NumKeyValueHeads, rank.IntermediateSize, rank.VocabSize = m.Heads, m.KVHeads, m.Inter, m.Vocab
	v, err := s.gate.check(be, rank, runShapes(f.shapes.batch, f.shapes.input, f.shapes.output), f.seed, stderr)
	return v, errors.Join(err, be.Close())
}

// calibrationInputs are the run's --kv-scales calibrate inputs.
func (f *runFlags) calibrationInputs(s runSetup) func() ([]runner.SeqSpec, []int32, error) {
	return func() ([]runner.SeqSpec, []int32, error) {
		return calibrationInputs(s.shapes, s.prompts, s.textSource, f.seed, s.cfg.VocabSize)
	}
}

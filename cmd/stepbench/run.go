package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/runner"
)

// runFlags are the flags of 'stepbench run'.
type runFlags struct {
	model         modelFlags
	shapes        shapeFlags
	loadFormat    string
	device        string
	seed          uint64
	runName       string
	numIters      int
	warmupIters   int
	logDecodeStep int
	resultFile    string
	outputJSON    string
	jsonOut       string
	gpu           string
	correctness   bool
	promptIDs     string
	logitsOut     string
	breakdown     bool   // per-op breakdown pass per shape
	format        string // "text" or "gobench"
	backend       backendFlags
	telemetry     telemetryFlags
}

func (f *runFlags) register(fs *pflag.FlagSet) {
	f.model.register(fs)
	f.shapes.register(fs, []int{1024}, []int{16})
	fs.StringVar(&f.loadFormat, "load-format", "auto", "weights: auto (safetensors with --model-path, else dummy), dummy, safetensors")
	fs.StringVar(&f.device, "device", "auto", "backend: auto (cuda when a GPU is usable, else cpu), cuda, cpu")
	fs.Uint64Var(&f.seed, "seed", 42, "seed of the dummy weights and of every prompt's token ids")
	fs.StringVar(&f.runName, "run-name", "default", "run_name field of --result-filename records")
	fs.IntVar(&f.numIters, "num-iters", 3, "timed iterations per shape (each: prefill + output-len-1 decode steps, fresh prompts)")
	fs.IntVar(&f.warmupIters, "num-iters-warmup", 1, "untimed warmup iterations before every shape")
	fs.IntVar(&f.logDecodeStep, "log-decode-step", 0, "also print every Nth decode step (the first 5 are always printed)")
	fs.StringVar(&f.resultFile, "result-filename", "", "append one_batch JSONL records (one per shape) to this file")
	fs.StringVar(&f.outputJSON, "output-json", "", "write vLLM 'bench latency' JSON (one latency per iteration) to this file")
	fs.StringVar(&f.jsonOut, "json-out", "", "write the native JSON report (environment, config, every sample, summaries) to this file")
	fs.StringVar(&f.gpu, "gpu", "auto", "GPU preset for the floors in the summary: auto (from the device's name; none on cpu), none, or "+joinNames(bench.GPUPresetNames()))
	fs.BoolVar(&f.correctness, "correctness-test", false, "greedy generation from --prompt-ids, printing the generated ids (compare with HF transformers)")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "with --correctness-test: file with one prompt per line, token ids separated by spaces")
	fs.StringVar(&f.logitsOut, "logits-out", "", "with --correctness-test: append one JSON object per prompt {prompt, generated, logits}")
	f.backend.register(fs)
	f.telemetry.register(fs)
	fs.BoolVar(&f.breakdown, "breakdown", false, "after timing, one eager pass per shape with an event at every op boundary: a per-op table per phase")
	fs.StringVar(&f.format, "format", "text", "stdout: text (one_batch lines and tables) or gobench (Go benchmark lines for benchstat; the text goes to stderr)")
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
	// Without a GPU, 'auto' falls back to the cpu backend and, unless a model
	// was named, to the llama-tiny preset: an 8B model on two cores is no run.
	device := f.device
	var gpuWhy error
	if device == "auto" {
		if gpuWhy = probeGPU(); gpuWhy != nil {
			device = "cpu"
			if !fs.Changed("model") && f.model.modelPath == "" {
				f.model.model = "llama-tiny"
			}
			fmt.Fprintf(stderr, "stepbench: no usable GPU (%v); running the cpu reference backend with model %s\n",
				gpuWhy, modelLabel(f.model))
		} else {
			device = "cuda"
		}
	}
	if f.breakdown && device == "cuda" && !f.backend.disableCUDAGraph {
		// A replayed graph has no op boundaries to put events at.
		return usagef("--breakdown on the cuda backend needs --disable-cuda-graph")
	}
	cfg, err := f.model.resolve()
	if err != nil {
		return err
	}
	if !f.correctness {
		if err := f.shapes.validate(cfg); err != nil {
			return err
		}
	}
	loadFormat := f.loadFormat
	if loadFormat == "auto" {
		loadFormat = "dummy"
		if f.model.modelPath != "" {
			loadFormat = "safetensors"
		}
	}
	if loadFormat == "safetensors" && f.model.modelPath == "" {
		return usagef("--load-format safetensors needs --model-path")
	}
	var prompts [][]int32
	if f.correctness {
		if prompts, err = readPrompts(f.promptIDs, cfg, f.shapes.output); err != nil {
			return err
		}
	}

	maxBatch, maxTokens, maxSeq := f.shapes.maxima()
	if f.correctness {
		maxBatch, maxTokens, maxSeq = 1, 0, 0
		for _, p := range prompts {
			maxTokens = max(maxTokens, len(p))
			maxSeq = max(maxSeq, len(p)+f.shapes.output[0])
		}
	}
	est := runner.EstimateMemory(cfg, maxBatch, maxTokens, maxSeq)
	be, env, err := openBackend(device, f.backend, est, stderr)
	if err != nil {
		return err
	}
	defer be.Close()

	var src runner.WeightSource
	src.Seed = f.seed
	if loadFormat == "safetensors" {
		st, err := runner.OpenSafetensors(f.model.modelPath)
		if err != nil {
			return err
		}
		defer st.Close()
		if err := st.Check(cfg); err != nil {
			return err
		}
		src.Reader = st
	}
	loadStart := time.Now()
	engine, err := runner.NewEngine(cfg, be, src, loadProgress(stderr, loadFormat))
	if err != nil {
		return err
	}
	defer engine.Close()
	fmt.Fprintf(stderr, "stepbench: %s weights (%s, %.2f GB bf16) on %s in %.1f s\n", cfg.Name, loadFormat,
		float64(est.WeightBytes)/1e9, be.Name(), time.Since(loadStart).Seconds())

	if f.correctness {
		return runCorrectness(engine, prompts, f.shapes.output[0], f.logitsOut, stdout)
	}

	opt := bench.Options{
		BatchSizes: f.shapes.batch, InputLens: f.shapes.input, OutputLens: f.shapes.output,
		NumIters: f.numIters, WarmupIters: f.warmupIters, Seed: f.seed, VocabSize: cfg.VocabSize,
		LogDecodeStep: f.logDecodeStep, RunName: f.runName, Stdout: stdout, Progress: stderr,
	}
	textOut := stdout
	if f.format == "gobench" {
		textOut, opt.Stdout = stderr, stderr // stdout carries only benchmark lines
	}
	f.telemetry.run = startTelemetry(!f.telemetry.noTelemetry, f.telemetry.discardThrottled, f.telemetry.energyWindowSeconds, &env, &opt, stderr)
	shapes, runErr := bench.Run(engine, opt)
	shapes = f.telemetry.run.finish(shapes, &env, stderr)
	gpu, gpuErr := f.floorGPU(env)
	floors := floorFunc(cfg, gpu)
	// Whatever was measured is written even when the run stopped early.
	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	}
	if gpuErr != nil {
		errs = append(errs, gpuErr)
	}
	if len(shapes) > 0 {
		fmt.Fprintln(textOut)
		if env.Emulated != "" {
			fmt.Fprintln(textOut, emulatedNote)
		}
		if gpu != nil {
			fmt.Fprintf(textOut, "summary (floors: %s datasheet peaks, %s)\n", gpu.Description, "derived by the cost model")
		} else {
			fmt.Fprintln(textOut, "summary")
		}
		if err := bench.WriteSummaryTable(textOut, shapes, floors); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, f.telemetry.report(textOut, shapes, cfg, &env, gpu, stderr))
		errs = append(errs, f.writeOutputs(shapes, cfg, env, loadFormat, fs, gpu)...)
		if f.format == "gobench" {
			errs = append(errs, bench.WriteGoBench(stdout, cfg.Name, bench.GoBenchConfig{"backend": env.Backend, "gpu": env.GPUName,
				"driver": env.DriverVersion, "goos": runtime.GOOS, "goarch": runtime.GOARCH}, shapes))
		}
	}
	if f.breakdown && runErr == nil {
		for _, s := range shapes {
			sb, err := bench.MeasureBreakdown(engine, s.Batch, s.InputLen, s.OutputLen, f.seed, gpu)
			if err != nil {
				errs = append(errs, err)
				break
			}
			errs = append(errs, bench.WriteBreakdownTable(textOut, sb))
		}
	}
	return errors.Join(errs...)
}

// check validates flags that need no model.
func (f *runFlags) check(fs *pflag.FlagSet) error {
	switch f.loadFormat {
	case "auto", "dummy", "safetensors":
	default:
		return usagef("--load-format: %q is not auto, dummy or safetensors", f.loadFormat)
	}
	if f.format != "text" && f.format != "gobench" {
		return usagef("--format: %q is not text or gobench", f.format)
	}
	switch f.device {
	case "auto", "cuda", "cpu":
	default:
		return usagef("--device: %q is not auto, cuda or cpu", f.device)
	}
	if f.numIters < 1 {
		return usagef("--num-iters: %d must be at least 1", f.numIters)
	}
	if f.warmupIters < 0 {
		return usagef("--num-iters-warmup: %d must not be negative", f.warmupIters)
	}
	if f.logDecodeStep < 0 {
		return usagef("--log-decode-step: %d must not be negative", f.logDecodeStep)
	}
	if f.correctness {
		if f.promptIDs == "" {
			return usagef("--correctness-test needs --prompt-ids FILE")
		}
		if len(f.shapes.output) != 1 {
			return usagef("--correctness-test takes one --output-len, not %v", f.shapes.output)
		}
		if f.shapes.output[0] < 1 {
			return usagef("--output-len: %d must be at least 1", f.shapes.output[0])
		}
	} else {
		for _, name := range []string{"prompt-ids", "logits-out"} {
			if fs.Changed(name) {
				return usagef("--%s needs --correctness-test", name)
			}
		}
	}
	if err := f.telemetry.check(); err != nil {
		return err
	}
	if f.gpu != "auto" && f.gpu != "none" {
		if _, err := bench.GPUPreset(f.gpu); err != nil {
			return usagef("--gpu: %v", err)
		}
	}
	return nil
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
				batch, tokens, seq = max(batch, b), max(tokens, b*in), max(seq, in+out)
			}
		}
	}
	return batch, tokens, seq
}

// floorGPU is the GPU whose datasheet peaks give the summary's floors.
func (f *runFlags) floorGPU(env bench.Environment) (*bench.GPUSpec, error) {
	switch f.gpu {
	case "none":
		return nil, nil
	case "auto":
		if env.GPUName == "" {
			return nil, nil
		}
		g, ok := bench.GPUPresetForDevice(env.GPUName)
		if !ok {
			return nil, nil
		}
		return &g, nil
	}
	g, err := bench.GPUPreset(f.gpu)
	if err != nil {
		return nil, usagef("--gpu: %v", err)
	}
	return &g, nil
}

func floorFunc(cfg runner.Config, g *bench.GPUSpec) bench.FloorFunc {
	if g == nil {
		return nil
	}
	return func(batch, inputLen, outputLen int) (float64, float64) {
		sf, err := bench.ComputeFloors(cfg, *g, batch, inputLen, outputLen)
		if err != nil {
			return 0, 0
		}
		return sf.PrefillFloor.Seconds, sf.MedianDecodeFloorSeconds()
	}
}

func (f *runFlags) writeOutputs(shapes []bench.ShapeResult, cfg runner.Config, env bench.Environment, loadFormat string, fs *pflag.FlagSet, gpu *bench.GPUSpec) []error {
	var errs []error
	if f.resultFile != "" {
		recs := make([]bench.OneBatchRecord, len(shapes))
		for i, s := range shapes {
			recs[i] = bench.NewOneBatchRecord(f.runName, s)
		}
		if err := bench.AppendOneBatchJSONL(f.resultFile, recs); err != nil {
			errs = append(errs, fmt.Errorf("--result-filename: %w", err))
		}
	}
	if f.outputJSON != "" {
		if err := bench.WriteVLLMJSON(f.outputJSON, bench.IterationLatencies(shapes)); err != nil {
			errs = append(errs, fmt.Errorf("--output-json: %w", err))
		}
	}
	if f.jsonOut != "" {
		flags := map[string]string{}
		fs.VisitAll(func(fl *pflag.Flag) { flags[fl.Name] = fl.Value.String() })
		rep := bench.Report{
			ToolVersion: versionString(),
			CreatedAt:   time.Now().UTC().Format(time.RFC3339),
			Environment: env,
			Config: bench.RunConfig{Model: cfg, ModelPath: f.model.modelPath, LoadFormat: loadFormat, RunName: f.runName,
				Seed: f.seed, NumIters: f.numIters, WarmupIters: f.warmupIters, Flags: flags},
		}
		for _, s := range shapes {
			sr := bench.NewShapeReport(s)
			f.telemetry.run.fillShape(&sr, s, cfg, f.telemetry.roof)
			if gpu != nil {
				if sf, err := bench.ComputeFloors(cfg, *gpu, s.Batch, s.InputLen, s.OutputLen); err == nil {
					sr.PrefillFloorSeconds, sr.PrefillFLOPs, sr.PrefillBytes = sf.PrefillFloor.Seconds, sf.Prefill.FLOPs, sf.Prefill.Bytes
					if len(sf.Decode) > 0 {
						sr.DecodeFloorSeconds, sr.DecodeFLOPs, sr.DecodeBytes = sf.DecodeFloors[0].Seconds, sf.Decode[0].FLOPs, sf.Decode[0].Bytes
					}
				}
			}
			rep.Shapes = append(rep.Shapes, sr)
		}
		if err := bench.WriteReport(f.jsonOut, rep); err != nil {
			errs = append(errs, fmt.Errorf("--json-out: %w", err))
		}
	}
	return errs
}

// loadProgress reports weight loading on stderr every 10%.
func loadProgress(stderr io.Writer, format string) func(done, total int) {
	last := -1
	return func(done, total int) {
		pct := done * 10 / total
		if pct != last && total > 20 {
			last = pct
			fmt.Fprintf(stderr, "stepbench: loading %s weights %3d%% (%d/%d tensors)\n", format, pct*10, done, total)
		}
	}
}

// readPrompts reads and checks the correctness prompts.
func readPrompts(path string, cfg runner.Config, outputLens []int) ([][]int32, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, usagef("--prompt-ids: %v", err)
	}
	defer file.Close()
	prompts, err := runner.ParsePromptIDs(file, path, cfg.VocabSize)
	if err != nil {
		return nil, usagef("--prompt-ids: %v", err)
	}
	for i, p := range prompts {
		if n := len(p) + outputLens[0]; n > cfg.MaxPositionEmbeddings {
			return nil, usagef("--prompt-ids: prompt %d has %d tokens; with --output-len %d that is %d positions, beyond %s's %d",
				i+1, len(p), outputLens[0], n, cfg.Name, cfg.MaxPositionEmbeddings)
		}
	}
	return prompts, nil
}

// correctnessRecord is one line of --logits-out.
type correctnessRecord struct {
	Prompt    []int32     `json:"prompt"`
	Generated []int32     `json:"generated"`
	Logits    [][]float32 `json:"logits"`
}

// runCorrectness generates greedily from each prompt on its own (batch 1,
// so prompts may differ in length) and prints the generated ids.
func runCorrectness(e *runner.Engine, prompts [][]int32, outputLen int, logitsOut string, stdout io.Writer) error {
	var out *os.File
	if logitsOut != "" {
		var err error
		if out, err = os.OpenFile(logitsOut, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return fmt.Errorf("--logits-out: %w", err)
		}
		defer out.Close()
	}
	for i, p := range prompts {
		rec := correctnessRecord{Prompt: p}
		if err := e.Begin(1, len(p), outputLen, p); err != nil {
			return fmt.Errorf("prompt %d: %w", i+1, err)
		}
		for step := 0; step < outputLen; step++ {
			var err error
			if step == 0 {
				err = e.Prefill()
			} else {
				err = e.Decode()
			}
			if err != nil {
				return fmt.Errorf("prompt %d step %d: %w", i+1, step, err)
			}
			ids, err := e.NextTokens()
			if err != nil {
				return fmt.Errorf("prompt %d step %d: %w", i+1, step, err)
			}
			rec.Generated = append(rec.Generated, ids[0])
			if out != nil {
				logits, err := e.Logits()
				if err != nil {
					return fmt.Errorf("prompt %d step %d: %w", i+1, step, err)
				}
				rec.Logits = append(rec.Logits, logits[0])
			}
		}
		fmt.Fprintf(stdout, "prompt %d: %s\n", i+1, joinIDs(rec.Generated))
		if out != nil {
			line, err := json.Marshal(rec)
			if err != nil {
				return fmt.Errorf("--logits-out: prompt %d: %w", i+1, err)
			}
			if _, err := out.Write(append(line, '\n')); err != nil {
				return fmt.Errorf("--logits-out: %w", err)
			}
		}
	}
	return nil
}

func joinIDs(ids []int32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
}

// hostEnvironment is what every report says about the machine.
func hostEnvironment(backend string) bench.Environment {
	host, _ := os.Hostname()
	return bench.Environment{Backend: backend, Hostname: host, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

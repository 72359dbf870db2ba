package bench

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"stepbench/runner"
)

// Target is the engine under test.
type Target interface {
	// Begin starts a fresh run: KV cache reset and sized for batch × (inputLen+outputLen); prompts is
	// batch*inputLen token ids (row-major). Not timed. It may copy the ids to pinned host memory.
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	Prefill() error // enqueue: input copy, forward over the prompts, argmax of each sequence's last token
	Decode() error  // enqueue one decode step fed by the previous step's argmax (stays on the device)
	Sync() error
	NewEvent() (runner.Event, error)
	Elapsed(start, end runner.Event) (time.Duration, error)
}

// Phase names of a Sample.
const (
	PhasePrefill = "prefill"
	PhaseDecode  = "decode"
)

// Options configures Run.
type Options struct {
	// BatchSizes, InputLens and OutputLens span the sweep: their cross product,
	// batch outermost, then input length, then output length.
	BatchSizes, InputLens, OutputLens []int
	// NumIters timed iterations per shape, each preceded (per shape, not only
	// for the first one) by WarmupIters untimed-in-results iterations.
	NumIters, WarmupIters int
	// Seed and VocabSize define the prompts: ids uniform in [0, VocabSize)
	// from a PCG seeded by (Seed, shape, iteration); see PromptIDs.
	Seed      uint64
	VocabSize int
	// LogDecodeStep is one_batch's --log-decode-step: decode step i is
	// printed when i < 5 or (LogDecodeStep > 0 and i%LogDecodeStep == 0).
	LogDecodeStep int
	RunName       string
	// Stdout receives one_batch's lines; Progress receives "shape i/n" lines.
	// Either may be nil (discarded).
	Stdout, Progress io.Writer
	// BetweenRegions, when set, is called after every timed region (warmup
	// ones too, with Sample.Warmup set), outside any region: the place to
	// read telemetry such as NVML without disturbing the timing.
	BetweenRegions func(last Sample)
	// BeforeShape, when set, is called before each shape's warmup, untimed
	// (e.g. to file telemetry under the shape).
	BeforeShape func(batch, inputLen, outputLen int)
	// EnergyMeter, when set, makes Run measure each complete shape's energy
	// after its timed iterations over windows of at least
	// EnergyWindowSeconds (DefaultEnergyWindowSeconds when <= 0); see
	// ShapeEnergy. These windows are not timed regions.
	EnergyMeter         EnergyMeter
	EnergyWindowSeconds float64
}

// Sample is one timed region.
type Sample struct {
	Phase string `json:"phase"` // PhasePrefill or PhaseDecode
	// Iter is the timed iteration (0-based); Step the decode step (0-based,
	// 0 for prefill).
	Iter int `json:"iter"`
	Step int `json:"step"`
	// Position is the KV cache length of every sequence before the step:
	// 0 for prefill, inputLen+Step for decode.
	Position      int     `json:"position"`
	HostSeconds   float64 `json:"host_seconds"`
	DeviceSeconds float64 `json:"device_seconds"`
	// Warmup marks samples of warmup iterations; they reach BetweenRegions
	// but are never kept in results.
	Warmup bool `json:"warmup,omitempty"`
}

// IterationResult is one timed iteration of a shape: a prefill and
// outputLen−1 decode steps, as one_batch.
type IterationResult struct {
	Iter int
	// PromptStream is the PCG stream its prompts came from (PromptIDs with
	// Options.Seed reproduces them).
	PromptStream uint64
	Prefill      Sample
	Decode       []Sample
	// TotalHostSeconds is prefill + Σ decode host times (one_batch's total).
	TotalHostSeconds   float64
	TotalDeviceSeconds float64
}

// ShapeSummary summarises a shape's samples over all its timed iterations.
type ShapeSummary struct {
	PrefillHostSeconds   Summary
	PrefillDeviceSeconds Summary
	DecodeHostSeconds    Summary // every decode step of every iteration
	DecodeDeviceSeconds  Summary
	TotalHostSeconds     Summary // per-iteration totals
	TotalDeviceSeconds   Summary
}

// ShapeResult is everything measured for one (batch, input, output) shape.
type ShapeResult struct {
	Batch, InputLen, OutputLen int
	Iterations                 []IterationResult
	Summary                    ShapeSummary
	// Complete is false when an error stopped the shape before all its timed
	// iterations ran; Iterations then holds the finished ones.
	Complete bool
	// Energy is set when Options.EnergyMeter was.
	Energy *ShapeEnergy
}

// Samples returns every kept sample of the shape, in the order measured.
func (s ShapeResult) Samples() []Sample {
	var samples []Sample
	for _, it := range s.Iterations {
		samples = append(samples, it.Prefill)
		samples = append(samples, it.Decode...)
	}
	return samples
}

// Run measures every shape of opt's sweep on t. On an error (a faulted
// kernel, a shape that does not fit) it stops and returns the shapes measured
// so far, the interrupted one included when at least one of its timed
// iterations finished (Complete false), together with the error.
func Run(t Target, opt Options) ([]ShapeResult, error) {
	if t == nil {
		return nil, errors.New("bench: nil target")
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	h, err := newHarness(t, opt, opt.Stdout, opt.Progress)
	if err != nil {
		return nil, err
	}
	var results []ShapeResult
	shapes := opt.shapes()
	for i, sh := range shapes {
		fmt.Fprintf(h.progress, "shape %d/%d: batch_size=%d input_len=%d output_len=%d\n",
			i+1, len(shapes), sh.batch, sh.inputLen, sh.outputLen)
		shape, err := h.runShape(sh.batch, sh.inputLen, sh.outputLen)
		if len(shape.Iterations) > 0 {
			results = append(results, shape)
		}
		if err != nil {
			return results, fmt.Errorf("shape %s: %w", sh, err)
		}
	}
	return results, nil
}

// shape is one point of the sweep.
type shape struct{ batch, inputLen, outputLen int }

func (s shape) String() string {
	return fmt.Sprintf("batch_size=%d input_len=%d output_len=%d", s.batch, s.inputLen, s.outputLen)
}

// shapes is the sweep: the cross product, batch outermost.
func (o Options) shapes() []shape {
	var out []shape
	for _, b := range o.BatchSizes {
		for _, in := range o.InputLens {
			for _, ol := range o.OutputLens {
				out = append(out, shape{b, in, ol})
			}
		}
	}
	return out
}

// newHarness makes a harness on t with its one pair of events: creating
// events per region would put allocation next to the timed regions.
func newHarness(t Target, opt Options, stdout, progress io.Writer) (harness, error) {
	h := harness{target: t, opt: opt, stdout: orDiscard(stdout), progress: orDiscard(progress)}
	var err error
	if h.start, err = t.NewEvent(); err != nil {
		return h, fmt.Errorf("create start event: %w", err)
	}
	if h.end, err = t.NewEvent(); err != nil {
		return h, fmt.Errorf("create end event: %w", err)
	}
	return h, nil
}

func (o Options) validate() error {
	for _, list := range []struct {
		name   string
		values []int
		min    int
	}{{"batch sizes", o.BatchSizes, 1}, {"input lengths", o.InputLens, 1}, {"output lengths", o.OutputLens, 1}} {
		if len(list.values) == 0 {
			return fmt.Errorf("bench: no %s given", list.name)
		}
		for _, v := range list.values {
			if v < list.min {
				return fmt.Errorf("bench: %s must be >= %d, got %d", list.name, list.min, v)
			}
		}
	}
	if o.NumIters < 1 {
		return fmt.Errorf("bench: num iterations must be >= 1, got %d", o.NumIters)
	}
	if o.WarmupIters < 0 {
		return fmt.Errorf("bench: warmup iterations must be >= 0, got %d", o.WarmupIters)
	}
	if o.VocabSize < 1 {
		return fmt.Errorf("bench: vocab size must be >= 1, got %d", o.VocabSize)
	}
	if o.LogDecodeStep < 0 {
		return fmt.Errorf("bench: log decode step must be >= 0, got %d", o.LogDecodeStep)
	}
	return nil
}

type harness struct {
	target           Target
	opt              Options
	stdout, progress io.Writer
	start, end       runner.Event
}

func (h *harness) runShape(batch, inputLen, outputLen int) (ShapeResult, error) {
	shape := ShapeResult{Batch: batch, InputLen: inputLen, OutputLen: outputLen}
	if h.opt.BeforeShape != nil {
		h.opt.BeforeShape(batch, inputLen, outputLen)
	}
	for w := 0; w < h.opt.WarmupIters; w++ {
		fmt.Fprintf(h.progress, "  warmup %d/%d\n", w+1, h.opt.WarmupIters)
		fmt.Fprintf(h.stdout, "Warmup %d/%d: batch_size=%d, input_len=%d, output_len=%d\n",
			w+1, h.opt.WarmupIters, batch, inputLen, outputLen)
		key := PromptKey{Batch: batch, InputLen: inputLen, OutputLen: outputLen, Iter: w, Warmup: true}
		if _, err := h.runIteration(key); err != nil {
			return shape, fmt.Errorf("warmup %d: %w", w, err)
		}
	}
	for i := 0; i < h.opt.NumIters; i++ {
		fmt.Fprintf(h.progress, "  iteration %d/%d\n", i+1, h.opt.NumIters)
		fmt.Fprintf(h.stdout, "Benchmark %d/%d: batch_size=%d, input_len=%d, output_len=%d\n",
			i+1, h.opt.NumIters, batch, inputLen, outputLen)
		key := PromptKey{Batch: batch, InputLen: inputLen, OutputLen: outputLen, Iter: i}
		it, err := h.runIteration(key)
		if err != nil {
			shape.Summary = summarizeShape(shape.Iterations)
			return shape, fmt.Errorf("iteration %d: %w", i, err)
		}
		shape.Iterations = append(shape.Iterations, it)
	}
	shape.Summary = summarizeShape(shape.Iterations)
	shape.Complete = true
	if h.opt.EnergyMeter != nil {
		energy, err := h.measureEnergy(batch, inputLen, outputLen)
		shape.Energy = energy
		if err != nil {
			return shape, fmt.Errorf("energy: %w", err)
		}
	}
	return shape, nil
}

// runIteration is one_batch's latency_test_run_once: a fresh run, a timed
// prefill, outputLen−1 timed decode steps, and its stdout lines.
func (h *harness) runIteration(key PromptKey) (IterationResult, error) {
	it := IterationResult{Iter: key.Iter, PromptStream: key.stream()}
	prompts, err := PromptIDs(h.opt.Seed, h.opt.VocabSize, key)
	if err != nil {
		return it, err
	}
	if err := h.target.Begin(key.Batch, key.InputLen, key.OutputLen, prompts); err != nil {
		return it, fmt.Errorf("begin: %w", err)
	}

	it.Prefill, err = h.timeRegion(h.target.Prefill, Sample{Phase: PhasePrefill, Iter: key.Iter, Warmup: key.Warmup})
	if err != nil {
		return it, fmt.Errorf("prefill: %w", err)
	}
	fmt.Fprintln(h.stdout, prefillLine(key.Batch, key.InputLen, it.Prefill.HostSeconds))
	it.TotalHostSeconds = it.Prefill.HostSeconds
	it.TotalDeviceSeconds = it.Prefill.DeviceSeconds

	decodeHostSeconds := make([]float64, 0, key.OutputLen-1)
	for step := 0; step < key.OutputLen-1; step++ {
		sample, err := h.timeRegion(h.target.Decode, Sample{
			Phase: PhaseDecode, Iter: key.Iter, Step: step, Position: key.InputLen + step, Warmup: key.Warmup,
		})
		if err != nil {
			return it, fmt.Errorf("decode step %d: %w", step, err)
		}
		it.Decode = append(it.Decode, sample)
		it.TotalHostSeconds += sample.HostSeconds
		it.TotalDeviceSeconds += sample.DeviceSeconds
		decodeHostSeconds = append(decodeHostSeconds, sample.HostSeconds)
		if step < 5 || (h.opt.LogDecodeStep > 0 && step%h.opt.LogDecodeStep == 0) {
			fmt.Fprintln(h.stdout, decodeStepLine(step, key.Batch, sample.HostSeconds))
		}
	}
	if key.OutputLen > 1 {
		fmt.Fprintln(h.stdout, decodeMedianLine(key.Batch, Median(decodeHostSeconds)))
	}
	fmt.Fprintln(h.stdout, totalLine(key.Batch, key.InputLen, key.OutputLen, it.TotalHostSeconds))
	return it, nil
}

// One_batch's stdout lines (SGLang bench_one_batch.py, latency_test_run_once),
// byte for byte: Python's {x:6.5f} and {x:9.2f} are Go's %6.5f and %9.2f.

func prefillLine(batch, inputLen int, latencySeconds float64) string {
	return fmt.Sprintf("Prefill. latency: %6.5f s, throughput: %9.2f token/s",
		latencySeconds, tokensPerSecond(batch*inputLen, latencySeconds))
}

func decodeStepLine(step, batch int, latencySeconds float64) string {
	return fmt.Sprintf("Decode %d. Batch size: %d, latency: %6.5f s, throughput: %9.2f token/s",
		step, batch, latencySeconds, tokensPerSecond(batch, latencySeconds))
}

func decodeMedianLine(batch int, medianSeconds float64) string {
	return fmt.Sprintf("Decode.  median latency: %6.5f s, median throughput: %9.2f token/s",
		medianSeconds, tokensPerSecond(batch, medianSeconds))
}

func totalLine(batch, inputLen, outputLen int, totalSeconds float64) string {
	return fmt.Sprintf("Total. latency: %6.3f s, throughput: %9.2f token/s",
		totalSeconds, tokensPerSecond((inputLen+outputLen)*batch, totalSeconds))
}

// timeRegion is DESIGN.md's timed region: synchronise; host clock; record
// start; enqueue the step; record end; synchronise; host clock. The host time
// is what one_batch reports, the event time is the device's view of it.
func (h *harness) timeRegion(step func() error, sample Sample) (Sample, error) {
	if err := h.target.Sync(); err != nil {
		return sample, fmt.Errorf("sync before region: %w", err)
	}
	t0 := time.Now()
	if err := h.start.Record(); err != nil {
		return sample, fmt.Errorf("record start event: %w", err)
	}
	if err := step(); err != nil {
		return sample, fmt.Errorf("enqueue: %w", err)
	}
	if err := h.end.Record(); err != nil {
		return sample, fmt.Errorf("record end event: %w", err)
	}
	if err := h.target.Sync(); err != nil {
		return sample, fmt.Errorf("sync after region: %w", err)
	}
	host := time.Since(t0) // monotonic clock: never negative
	device, err := h.target.Elapsed(h.start, h.end)
	if err != nil {
		return sample, fmt.Errorf("event elapsed time: %w", err)
	}
	sample.HostSeconds = host.Seconds()
	sample.DeviceSeconds = device.Seconds()
	if h.opt.BetweenRegions != nil {
		h.opt.BetweenRegions(sample)
	}
	return sample, nil
}

func summarizeShape(iterations []IterationResult) ShapeSummary {
	summary, _ := summarizeKept(iterations, nil)
	return summary
}

// summarizeKept summarises the samples for which drop is false (every
// sample when drop is nil); an iteration's total counts only when none of
// its samples was dropped. It also returns how many samples were dropped.
func summarizeKept(iterations []IterationResult, drop func(Sample) bool) (ShapeSummary, int) {
	var prefillHost, prefillDevice, decodeHost, decodeDevice, totalHost, totalDevice []float64
	dropped := 0
	for _, it := range iterations {
		clean := true
		for i, sample := range append([]Sample{it.Prefill}, it.Decode...) {
			if drop != nil && drop(sample) {
				dropped++
				clean = false
				continue
			}
			if i == 0 {
				prefillHost = append(prefillHost, sample.HostSeconds)
				prefillDevice = append(prefillDevice, sample.DeviceSeconds)
			} else {
				decodeHost = append(decodeHost, sample.HostSeconds)
				decodeDevice = append(decodeDevice, sample.DeviceSeconds)
			}
		}
		if clean {
			totalHost = append(totalHost, it.TotalHostSeconds)
			totalDevice = append(totalDevice, it.TotalDeviceSeconds)
		}
	}
	return ShapeSummary{
		PrefillHostSeconds:   Summarize(prefillHost),
		PrefillDeviceSeconds: Summarize(prefillDevice),
		DecodeHostSeconds:    Summarize(decodeHost),
		DecodeDeviceSeconds:  Summarize(decodeDevice),
		TotalHostSeconds:     Summarize(totalHost),
		TotalDeviceSeconds:   Summarize(totalDevice),
	}, dropped
}

// tokensPerSecond is tokens/seconds, or 0 when no time was measured (a
// division by zero would make the result unencodable as JSON).
func tokensPerSecond(tokens int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(tokens) / seconds
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// PromptKey names the prompts of one iteration of one shape.
type PromptKey struct {
	Batch, InputLen, OutputLen int
	Iter                       int
	// Warmup iterations draw from their own streams, so the timed
	// iterations' prompts do not depend on the warmup count.
	Warmup bool
}

// stream is the PCG's second seed word: the key's fields mixed with
// splitmix64's finaliser so that neighbouring shapes get unrelated streams.
func (k PromptKey) stream() uint64 {
	warmup := uint64(0)
	if k.Warmup {
		warmup = 1
	}
	state := uint64(0x73746570_62656e63) // "stepbenc"
	for _, field := range []uint64{uint64(k.Batch), uint64(k.InputLen), uint64(k.OutputLen), uint64(k.Iter), warmup} {
		state = mix64(state ^ field)
	}
	return state
}

func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// PromptIDs returns the key.Batch×key.InputLen prompt ids (row-major) of one
// iteration: uniform in [0, vocabSize) from math/rand/v2's PCG seeded by
// (seed, key's stream). The same arguments always give the same ids.
func PromptIDs(seed uint64, vocabSize int, key PromptKey) ([]int32, error) {
	if vocabSize < 1 || int64(vocabSize) > 1<<31 {
		return nil, fmt.Errorf("prompt ids: vocab size %d out of range [1, 2^31]", vocabSize)
	}
	if key.Batch < 1 || key.InputLen < 1 {
		return nil, fmt.Errorf("prompt ids: batch %d and input length %d must be >= 1", key.Batch, key.InputLen)
	}
	rng := rand.New(rand.NewPCG(seed, key.stream()))
	ids := make([]int32, key.Batch*key.InputLen)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocabSize))
	}
	return ids, nil
}

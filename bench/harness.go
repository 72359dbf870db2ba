package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"stepbench/bench/hostload"
	"stepbench/runner"
)

// Target is the engine under test.
type Target interface {
	// Begin starts a fresh run: KV cache reset and sized for batch × (inputLen+outputLen−1) positions; prompts is
	// batch*inputLen token ids (row-major). Not timed. It may copy the ids to pinned host memory.
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	Prefill() error // enqueue: input copy, forward over the prompts, argmax of each sequence's last token
	Decode() error  // enqueue one decode step fed by the previous step's argmax (stays on the device)
	Sync() error
	NewEvent() (runner.Event, error)
	Elapsed(start, end runner.Event) (time.Duration, error)
}

// Options configures Run.
type Options struct {
	// BatchSizes, InputLens and OutputLens span the sweep: their cross product,
	// batch outermost, then input length, then output length.
	BatchSizes, InputLens, OutputLens []int
	// ContextLens, when set, replaces InputLens: each batch size's
	// sequences get their own lengths (LengthSpec.Lengths, seeded by Seed,
	// clipped so that every position fits MaxPositions); KVFill says how
	// their contexts are filled (KVFillPrefill or KVFillSynthetic; the
	// synthetic fill applies to uniform input lengths too). Ragged shapes
	// need a RaggedTarget.
	ContextLens  LengthSpec
	KVFill       string
	MaxPositions int
	// NumIters > 0 is a fixed count of timed iterations per shape; 0 means
	// adaptive sampling by Adaptive. Every shape (not only the first) is
	// preceded by WarmupIters untimed-in-results iterations.
	NumIters, WarmupIters int
	Adaptive              Adaptive
	// Seed and VocabSize define the prompts: ids uniform in [0, VocabSize)
	// from a PCG seeded by (Seed, shape, iteration); see PromptIDs.
	Seed      uint64
	VocabSize int
	// Prompts, when set, makes the prompts instead (TextPrompts: real text).
	Prompts PromptSource
	// LogDecodeStep is one_batch's --log-decode-step: decode step i is
	// printed when i < 5 or (LogDecodeStep > 0 and i%LogDecodeStep == 0).
	LogDecodeStep int
	RunName       string
	// Stdout receives one_batch's lines; Progress receives "shape i/n" lines.
	// Either may be nil (discarded).
	Stdout, Progress io.Writer
	// Status, when set, gets the progress that changes at every warmup and
	// timed iteration (a terminal shows it as one updating line); when nil,
	// each goes to Progress as a line of its own.
	Status func(msg string)
	// Context, when cancelled (SIGINT, SIGTERM), stops the run at the next
	// timed-region boundary: the unfinished iteration is dropped and Run
	// returns what finished with an error wrapping ErrInterrupted.
	Context context.Context
	// AfterShape, when set, is called with every shape that has at least
	// one finished timed iteration, as soon as it ends (complete or not):
	// the place to write its results so that a later failure loses nothing.
	// An error stops the run.
	AfterShape func(ShapeResult) error
	// BetweenRegions, when set, is called after every timed region (warmup
	// ones too, with Sample.Warmup set), outside any region: the place to
	// read telemetry such as NVML without disturbing the timing.
	BetweenRegions func(last Sample)
	// BeforeShape, when set, is called before each shape's warmup, untimed
	// (e.g. to file telemetry under the shape).
	BeforeShape func(Shape)
	// EnergyMeter, when set, makes Run measure each complete shape's energy
	// after its timed iterations over windows of at least
	// EnergyWindowSeconds (DefaultEnergyWindowSeconds when <= 0); see
	// ShapeEnergy. These windows are not timed regions.
	EnergyMeter         EnergyMeter
	EnergyWindowSeconds float64

	// Profiler, when set, gets a named range around every timed region
	// (warmup ones too); with Profile set too, it also opens and closes that
	// capture window in each shape's first timed iteration (see
	// ProfileWindow).
	Profiler Profiler
	Profile  *ProfileWindow

	// Now is the host clock of timed regions, adaptive sampling and energy
	// windows (time.Now when nil); tests give a virtual one.
	Now func() time.Time
	// HostLoad samples the host's CPU counters around each shape's timed
	// iterations (hostload.Now when nil; tests give a fixed one).
	HostLoad func() hostload.Sample

	// StepTimeout > 0 bounds every timed region (warmup ones too) and every
	// repetition of an energy window, on the wall clock: one that has not
	// ended by then is reported to OnStepTimeout, from another goroutine,
	// with an error wrapping ErrStepTimeout that names the region. The
	// region's goroutine may never return (a kernel that spins), so
	// OnStepTimeout may end the process; while it runs the harness writes
	// nothing. If it returns, the region's error, once it ends, is that
	// timeout.
	StepTimeout   time.Duration
	OnStepTimeout func(error)
}

// ErrInterrupted is wrapped by the error of a run stopped by its Context.
var ErrInterrupted = errors.New("interrupted")

// Run measures every shape of opt's sweep on t. On an error (a faulted
// kernel, a shape that does not fit, an interruption) it stops and returns
// the shapes measured so far, the interrupted one included when at least one
// of its timed iterations finished (Complete false), together with the error.
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
		fmt.Fprintf(h.progress, "shape %d/%d: %s\n", i+1, len(shapes), sh)
		h.statusPrefix = fmt.Sprintf("shape %d/%d: ", i+1, len(shapes))
		shape, err := h.runShape(sh)
		if err != nil {
			err = fmt.Errorf("shape %s: %w", sh, err)
		}
		if len(shape.Iterations) > 0 {
			results = append(results, shape)
			if writeErr := opt.afterShape(shape); writeErr != nil {
				return results, errors.Join(err, writeErr)
			}
		}
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

func (o Options) afterShape(s ShapeResult) error {
	if o.AfterShape == nil {
		return nil
	}
	return o.AfterShape(s)
}

// shapes is the sweep: the cross product, batch outermost (validate
// first: it resolves the lengths without errors then).
func (o Options) shapes() []Shape {
	shapes, _ := o.Shapes()
	return shapes
}

// Shapes is the sweep: the cross product of batch sizes, input lengths (or
// each batch size's context lengths) and output lengths, batch outermost.
func (o Options) Shapes() ([]Shape, error) {
	var out []Shape
	for _, b := range o.BatchSizes {
		if !o.ContextLens.IsZero() {
			for _, ol := range o.OutputLens {
				longest := o.MaxPositions - ol + 1
				if o.MaxPositions == 0 {
					longest = runner.MaxTokens
				}
				lens, err := o.ContextLens.Lengths(b, o.Seed, longest)
				if err != nil {
					return nil, fmt.Errorf("bench: %w", err)
				}
				out = append(out, RaggedShape(lens, ol, o.KVFill))
			}
			continue
		}
		for _, in := range o.InputLens {
			for _, ol := range o.OutputLens {
				sh := Shape{Batch: b, InputLen: in, OutputLen: ol}
				if o.KVFill == KVFillSynthetic {
					sh.KVFill = KVFillSynthetic
				}
				out = append(out, sh)
			}
		}
	}
	return out, nil
}

func (o Options) validate() error {
	inputLens := o.InputLens
	if !o.ContextLens.IsZero() {
		inputLens = []int{1} // the lengths are checked as they are drawn (Shapes)
	}
	switch o.KVFill {
	case "", KVFillPrefill, KVFillSynthetic:
	default:
		return fmt.Errorf("bench: kv fill %q: want %s or %s", o.KVFill, KVFillPrefill, KVFillSynthetic)
	}
	for _, list := range []struct {
		name   string
		values []int
	}{{"batch sizes", o.BatchSizes}, {"input lengths", inputLens}, {"output lengths", o.OutputLens}} {
		if len(list.values) == 0 {
			return fmt.Errorf("bench: no %s given", list.name)
		}
		for _, v := range list.values {
			if v < 1 {
				return fmt.Errorf("bench: %s must be >= 1, got %d", list.name, v)
			}
		}
	}
	for _, b := range o.BatchSizes {
		for _, in := range inputLens {
			if b > runner.MaxBatch || b > runner.MaxTokens/in {
				return fmt.Errorf("bench: batch %d × input length %d beyond the limits (batch %d, %d prompt tokens)",
					b, in, runner.MaxBatch, runner.MaxTokens)
			}
		}
	}
	shapes, err := o.Shapes()
	if err != nil {
		return err
	}
	for _, sh := range shapes {
		if sh.KVTokens() > runner.MaxTokens/2 {
			return fmt.Errorf("bench: %s: %d tokens beyond the limit of %d", sh, sh.KVTokens(), runner.MaxTokens/2)
		}
	}
	switch {
	case o.NumIters < 0:
		return fmt.Errorf("bench: num iterations must be >= 1 (or 0: adaptive), got %d", o.NumIters)
	case o.NumIters == 0:
		if err := o.Adaptive.validate(); err != nil {
			return err
		}
	}
	if o.WarmupIters < 0 {
		return fmt.Errorf("bench: warmup iterations must be >= 0, got %d", o.WarmupIters)
	}
	if o.VocabSize < 1 {
		return fmt.Errorf("bench: vocab size must be >= 1, got %d", o.VocabSize)
	}
	if o.Profile != nil {
		if o.Profiler == nil {
			return errors.New("bench: a profile window needs a profiler")
		}
		if err := o.Profile.Validate(o.OutputLens); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if o.LogDecodeStep < 0 {
		return fmt.Errorf("bench: log decode step must be >= 0, got %d", o.LogDecodeStep)
	}
	return nil
}

type harness struct {
	target           Target
	opt              Options
	ctx              context.Context
	now              func() time.Time
	stdout, progress io.Writer
	statusPrefix     string // names the shape in a Status
	start, end       runner.Event
	watchdog         *watchdog // nil without a step timeout
	iteration        PromptKey // the iteration running, for the watchdog's message
}

// status shows msg as the progress that changes (Options.Status), or as a
// line of Progress.
func (h *harness) status(msg string) {
	if h.opt.Status != nil {
		h.opt.Status(h.statusPrefix + msg)
		return
	}
	fmt.Fprintf(h.progress, "  %s\n", msg)
}

// newHarness makes a harness on t with its one pair of events: creating
// events per region would put allocation next to the timed regions.
func newHarness(t Target, opt Options, stdout, progress io.Writer) (harness, error) {
	h := harness{target: t, opt: opt, ctx: opt.Context, now: opt.Now, stdout: orDiscard(stdout), progress: orDiscard(progress),
		watchdog: newWatchdog(opt.StepTimeout, opt.OnStepTimeout)}
	if h.ctx == nil {
		h.ctx = context.Background()
	}
	if h.now == nil {
		h.now = time.Now
	}
	var err error
	if h.start, err = t.NewEvent(); err != nil {
		return h, fmt.Errorf("create start event: %w", err)
	}
	if h.end, err = t.NewEvent(); err != nil {
		return h, fmt.Errorf("create end event: %w", err)
	}
	return h, nil
}

// promptIDs are the prompts of key's iteration: Options.Prompts', or the
// random ones.
func (h *harness) promptIDs(key PromptKey) ([]int32, error) {
	if h.opt.Prompts != nil {
		return h.opt.Prompts.PromptIDs(key)
	}
	return PromptIDs(h.opt.Seed, h.opt.VocabSize, key)
}

func (h *harness) newStopper() *stopper {
	return newStopper(h.opt.NumIters, h.opt.Adaptive, h.now)
}

func (h *harness) runShape(sh Shape) (shape ShapeResult, err error) {
	shape = ShapeResult{Shape: sh}
	if h.opt.BeforeShape != nil {
		h.opt.BeforeShape(sh)
	}
	if err := h.warmup(sh, ""); err != nil {
		return shape, err
	}
	stop := h.newStopper()
	sample := h.opt.HostLoad
	if sample == nil {
		sample = hostload.Now
	}
	load := sample()
	defer func() {
		if f, ok := hostload.OtherFraction(load, sample()); ok {
			shape.HostOtherCPU = &f
		}
	}()
	for i := 0; !stop.done(i, func() float64 { return maxNoise(shape.Iterations) }); i++ {
		h.status("iteration " + stop.iterationLabel(i) + stop.elapsed())
		fmt.Fprintf(h.stdout, "Benchmark %s: batch_size=%d, input_len=%d, output_len=%d\n",
			stop.iterationLabel(i), sh.Batch, sh.InputLen, sh.OutputLen)
		it, err := h.runIteration(PromptKey{Shape: sh, Iter: i})
		if err != nil {
			shape.Finish(stopReason(err))
			return shape, fmt.Errorf("iteration %d: %w", i, err)
		}
		shape.Iterations = append(shape.Iterations, it)
	}
	shape.Finish(stop.reason)
	shape.Complete = true
	fmt.Fprintf(h.progress, "  %s\n", shape.NoiseLine(h.opt))
	if h.opt.EnergyMeter != nil {
		energy, err := h.measureEnergy(sh)
		shape.Energy = energy
		if err != nil {
			return shape, fmt.Errorf("energy: %w", err)
		}
	}
	return shape, nil
}

// warmup runs the shape's warmup iterations (label names the arm in A/B).
func (h *harness) warmup(sh Shape, label string) error {
	for w := 0; w < h.opt.WarmupIters; w++ {
		h.status(fmt.Sprintf("warmup %d/%d%s", w+1, h.opt.WarmupIters, label))
		fmt.Fprintf(h.stdout, "Warmup %d/%d: batch_size=%d, input_len=%d, output_len=%d\n",
			w+1, h.opt.WarmupIters, sh.Batch, sh.InputLen, sh.OutputLen)
		key := PromptKey{Shape: sh, Iter: w, Warmup: true}
		if _, err := h.runIteration(key); err != nil {
			return fmt.Errorf("warmup %d%s: %w", w, label, err)
		}
	}
	return nil
}

func stopReason(err error) string {
	if errors.Is(err, ErrInterrupted) {
		return StopInterrupted
	}
	return StopError
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

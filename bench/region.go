package bench

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"stepbench/bench/stats"
	"stepbench/runner"
)

// runIteration is one_batch's latency_test_run_once: a fresh run, a timed
// prefill, outputLen−1 timed decode steps, and its stdout lines.
func (h *harness) runIteration(key PromptKey) (IterationResult, error) {
	it := IterationResult{Iter: key.Iter}
	if h.opt.Prompts == nil {
		it.PromptStream = key.stream()
	}
	h.iteration = key
	prompts, err := h.promptIDs(key)
	if err != nil {
		return it, err
	}
	if err := h.ctx.Err(); err != nil {
		return it, fmt.Errorf("%w: %v", ErrInterrupted, err)
	}
	if err := begin(h.target, key.Shape, prompts); err != nil {
		return it, fmt.Errorf("begin: %w", err)
	}

	window := h.windowFor(key)
	it, err = h.iterationRegions(key, it, window)
	return it, errors.Join(err, window.close())
}

// iterationRegions times the prefill and the decode steps of one iteration,
// opening and closing window (nil: none) between regions.
func (h *harness) iterationRegions(key PromptKey, it IterationResult, window *profileWindow) (IterationResult, error) {
	var err error
	it.Prefill, err = h.profiledRegion(window, prefillRangeName(key.Batch, key.InputLen), h.target.Prefill,
		Sample{Phase: PhasePrefill, Iter: key.Iter, Warmup: key.Warmup})
	if err != nil {
		return it, fmt.Errorf("prefill: %w", err)
	}
	fmt.Fprintln(h.stdout, prefillLine(key.PromptTokens(), it.Prefill.HostSeconds))
	it.TotalHostSeconds = it.Prefill.HostSeconds
	it.TotalDeviceSeconds = it.Prefill.DeviceSeconds

	decodeHostSeconds := make([]float64, 0, key.OutputLen-1)
	for step := 0; step < key.OutputLen-1; step++ {
		sample, err := h.profiledRegion(window, decodeRangeName(step), h.target.Decode, Sample{
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
		fmt.Fprintln(h.stdout, decodeMedianLine(key.Batch, stats.Median(decodeHostSeconds)))
	}
	fmt.Fprintln(h.stdout, totalLine(key.IterationTokens(), it.TotalHostSeconds))
	return it, nil
}

// profiledRegion is one timed region inside a named profiler range, with the
// profile window opened before it or closed after it where it begins or
// ends the window: both outside the region's synchronisations and clocks.
func (h *harness) profiledRegion(window *profileWindow, name string, step func() error, sample Sample) (Sample, error) {
	if err := window.beforeRegion(sample.Phase, sample.Step); err != nil {
		return sample, err
	}
	p := h.opt.Profiler
	if p != nil {
		p.Push(name)
	}
	sample, err := h.timeRegion(step, sample)
	if p != nil {
		p.Pop()
	}
	if err != nil {
		return sample, err
	}
	return sample, window.afterRegion(sample.Phase, sample.Step)
}

// timeRegion is the design's timed region (docs/design.md, Timing): synchronise; host clock; record
// start; enqueue the step; record end; synchronise; host clock. The host time
// is what one_batch reports, the event time is the device's view of it. A
// cancelled Context stops the run here, at a region boundary. The watchdog
// times it all, both synchronisations included.
func (h *harness) timeRegion(step func() error, sample Sample) (Sample, error) {
	if err := h.ctx.Err(); err != nil {
		return sample, fmt.Errorf("%w: %v", ErrInterrupted, err)
	}
	key := h.iteration
	what := func() string { return regionName(key, sample) }
	var out Sample
	err := h.watchdog.guarded(what, func() error {
		var err error
		out, err = h.region(step, sample)
		return err
	})
	return out, err
}

// regionName is a region for people: "decode step 3 of batch_size=1
// input_len=64 output_len=16, iteration 2".
func regionName(key PromptKey, s Sample) string {
	step := "the prefill"
	if s.Phase == PhaseDecode {
		step = fmt.Sprintf("decode step %d", s.Step)
	}
	iter := fmt.Sprintf("iteration %d", key.Iter+1)
	if key.Warmup {
		iter = fmt.Sprintf("warmup %d", key.Iter+1)
	}
	return fmt.Sprintf("%s of %s, %s", step, key.Shape, iter)
}

func (h *harness) region(step func() error, sample Sample) (Sample, error) {
	if err := h.target.Sync(); err != nil {
		return sample, fmt.Errorf("sync before region: %w", err)
	}
	t0 := h.now()
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
	host := h.now().Sub(t0) // monotonic clock: never negative
	device, ranks, err := h.deviceTime()
	if err != nil {
		return sample, fmt.Errorf("event elapsed time: %w", err)
	}
	sample.HostSeconds = host.Seconds()
	sample.DeviceSeconds = device.Seconds()
	sample.StartUnixNanos = t0.UnixNano()
	sample.RankDeviceSeconds = ranks
	if h.opt.BetweenRegions != nil {
		h.opt.BetweenRegions(sample)
	}
	return sample, nil
}

// RankTimer is a target of several GPUs (a tensor-parallel group): its
// device time is per rank; a region's device time is the slowest rank's.
type RankTimer interface {
	RankElapsed(start, end runner.Event) ([]time.Duration, error)
}

// deviceTime is the region's device time and, for a RankTimer, each rank's.
func (h *harness) deviceTime() (time.Duration, []float64, error) {
	rt, ok := h.target.(RankTimer)
	if !ok {
		d, err := h.target.Elapsed(h.start, h.end)
		return d, nil, err
	}
	per, err := rt.RankElapsed(h.start, h.end)
	if err != nil {
		return 0, nil, err
	}
	if len(per) == 0 {
		return 0, nil, errors.New("no rank reported a device time")
	}
	secs := make([]float64, len(per))
	for i, d := range per {
		secs[i] = d.Seconds()
	}
	return slices.Max(per), secs, nil
}

// RaggedTarget is a Target that runs ragged shapes (Shape.Ragged): each
// sequence its own prompt over its own context (runner.Engine.BeginSeqs).
type RaggedTarget interface {
	BeginSeqs(seqs []runner.SeqSpec, outputLen int, prompts []int32) error
}

// begin starts a fresh run of sh on t with prompts.
func begin(t Target, sh Shape, prompts []int32) error {
	if !sh.Ragged() {
		return t.Begin(sh.Batch, sh.InputLen, sh.OutputLen, prompts)
	}
	rt, ok := t.(RaggedTarget)
	if !ok {
		return fmt.Errorf("%s: this target runs uniform batches only (%T)", sh, t)
	}
	return rt.BeginSeqs(sh.Seqs(), sh.OutputLen, prompts)
}

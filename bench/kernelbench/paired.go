package kernelbench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"stepbench/bench/stats"
	"stepbench/runner"
)

// arm is one target of a paired measurement with its events.
type arm struct {
	t          Target
	start, end runner.Event
	res        Result
}

func newArm(t Target, opt Options) (*arm, error) {
	if t == nil {
		return nil, errors.New("kernel bench: nil target")
	}
	a := &arm{t: t}
	var err error
	if a.start, err = t.NewEvent(); err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	if a.end, err = t.NewEvent(); err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	for i := 0; i < opt.WarmupLaunches; i++ {
		if err := t.Launch(); err != nil {
			return nil, fmt.Errorf("warmup launch: %w", err)
		}
	}
	return a, t.Sync()
}

// sample takes one cold sample of the arm (L2 flushed first).
func (a *arm) sample() error {
	t := a.t
	if err := t.FlushL2(); err != nil {
		return fmt.Errorf("flush L2: %w", err)
	}
	if err := t.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := a.start.Record(); err != nil {
		return fmt.Errorf("record start: %w", err)
	}
	if err := t.Launch(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if err := a.end.Record(); err != nil {
		return fmt.Errorf("record end: %w", err)
	}
	if err := t.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	d, err := t.Elapsed(a.start, a.end)
	if err != nil {
		return fmt.Errorf("elapsed: %w", err)
	}
	a.res.DeviceSeconds = append(a.res.DeviceSeconds, d.Seconds())
	return nil
}

// MeasurePaired times a candidate and a baseline of the same op at the same
// shape cold, in pairs taken back to back, A B then B A alternately (so a
// drift linear in time favours neither), until the median of the pairs'
// ratios A/B has a noise of at most MaxNoise (checked as Measure checks
// its median), or Timeout or MaxSamples pairs. Each result's DeviceSeconds
// are its arm's samples, pair by pair: the i-th of both is pair i, what
// bench/compare's Paired method takes.
func MeasurePaired(candidate, baseline Target, opt Options) (Result, Result, error) {
	if opt.MinSamples < 2 || opt.MaxSamples < opt.MinSamples || opt.MaxNoise <= 0 || opt.Timeout <= 0 {
		return Result{}, Result{}, fmt.Errorf("kernel bench: need min samples >= 2, max samples >= min, max noise > 0, timeout > 0 (got %d, %d, %g, %v)",
			opt.MinSamples, opt.MaxSamples, opt.MaxNoise, opt.Timeout)
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	a, err := newArm(candidate, opt)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("candidate: %w", err)
	}
	b, err := newArm(baseline, opt)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("baseline: %w", err)
	}
	began, nextCheck, reason := now(), opt.MinSamples, ""
	for n := 1; reason == ""; n++ {
		first, second := a, b
		if n%2 == 0 {
			first, second = b, a
		}
		if err := first.sample(); err != nil {
			return a.res, b.res, err
		}
		if err := second.sample(); err != nil {
			return a.res, b.res, err
		}
		switch {
		case n >= opt.MaxSamples:
			reason = "max-samples"
		case now().Sub(began) >= opt.Timeout:
			reason = "timeout"
		case n >= nextCheck:
			nextCheck = n + max(1, n/10)
			if pairedNoise(b.res.DeviceSeconds, a.res.DeviceSeconds) <= opt.MaxNoise {
				reason = "noise"
			}
		}
	}
	for _, x := range []*arm{a, b} {
		x.res.Summary = stats.Summarize(x.res.DeviceSeconds)
		x.res.Noise = stats.MedianNoise(x.res.DeviceSeconds)
		x.res.StopReason = reason
	}
	return a.res, b.res, nil
}

// pairedNoise is the noise of the median of the pairs' ratios.
func pairedNoise(baseline, candidate []float64) float64 {
	ratios := stats.PairRatios(baseline, candidate)
	for _, r := range ratios {
		if math.IsNaN(r) {
			return math.Inf(1)
		}
	}
	return stats.MedianNoise(ratios)
}

package bench

import (
	"fmt"
	"time"
)

// Adaptive sampling, nvbench style: a shape's timed iterations go on until
// the noise of every compared median (prefill and decode, host and device
// time; see RelativeNoise) is at most TargetNoise or MaxSeconds of wall
// clock have passed since its first timed iteration, but never fewer than
// MinIters. The defaults are nvbench's (0.5%, 15 s) and 10 iterations.
type Adaptive struct {
	TargetNoise float64 // relative: 0.005 is 0.5%
	MaxSeconds  float64
	MinIters    int
}

// DefaultAdaptive is the sampling of run and ab without --num-iters.
func DefaultAdaptive() Adaptive { return Adaptive{TargetNoise: 0.005, MaxSeconds: 15, MinIters: 10} }

func (a Adaptive) validate() error {
	if !(a.TargetNoise > 0) || !(a.MaxSeconds > 0) || a.MinIters < 1 {
		return fmt.Errorf("bench: adaptive sampling needs target noise > 0, max seconds > 0 and min iterations >= 1 (got %g, %g, %d)",
			a.TargetNoise, a.MaxSeconds, a.MinIters)
	}
	return nil
}

// Stop reasons of a shape.
const (
	StopNumIters    = "num_iters"    // the fixed count (--num-iters) ran
	StopTargetNoise = "target_noise" // every compared median reached the target noise
	StopMaxSeconds  = "max_seconds"  // the time budget ran out first
	StopInterrupted = "interrupted"  // SIGINT/SIGTERM (Options.Context)
	StopError       = "error"        // a step failed
)

// stopper applies the stopping rule to one shape.
type stopper struct {
	fixed     int // > 0: a fixed count
	rule      Adaptive
	now       func() time.Time
	began     time.Time
	nextCheck int
	reason    string
}

func newStopper(fixed int, rule Adaptive, now func() time.Time) *stopper {
	return &stopper{fixed: fixed, rule: rule, now: now, began: now(), nextCheck: rule.MinIters}
}

// done says whether a shape with n timed iterations is finished; noise
// gives the largest noise of its compared medians. It sets reason.
func (s *stopper) done(n int, noise func() float64) bool {
	switch {
	case s.fixed > 0:
		if n >= s.fixed {
			s.reason = StopNumIters
		}
	case n < s.rule.MinIters:
	case s.now().Sub(s.began).Seconds() >= s.rule.MaxSeconds:
		s.reason = StopMaxSeconds
	case n >= s.nextCheck:
		// Each check sorts every value: check at ~6% growth steps.
		s.nextCheck = n + max(1, n/16)
		if noise() <= s.rule.TargetNoise {
			s.reason = StopTargetNoise
		}
	}
	return s.reason != ""
}

// elapsed is "" with a fixed count, else the time spent of the budget:
// " (2.3 of 15 s)".
func (s *stopper) elapsed() string {
	if s.fixed > 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f of %g s)", s.now().Sub(s.began).Seconds(), s.rule.MaxSeconds)
}

// iterationLabel is "i/n" with a fixed count, else "i".
func (s *stopper) iterationLabel(i int) string {
	if s.fixed > 0 {
		return fmt.Sprintf("%d/%d", i+1, s.fixed)
	}
	return fmt.Sprint(i + 1)
}

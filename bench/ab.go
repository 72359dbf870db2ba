package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"stepbench/bench/stats"
)

// ABTarget is a candidate (A) and a baseline (B) built on the same weights,
// measured in one process. RunAB alternates them iteration by iteration so
// that slow drift (clocks, temperature, other tenants) hits both arms alike
// instead of whichever ran second.
type ABTarget struct {
	A, B Target
}

// RunAB measures every shape of opt's sweep on both arms: per shape, the
// warmup iterations of A and B alternate, then the timed iterations run in
// pairs A B, B A, A B … (see runPair), each pair on the same prompts, until
// opt's stopping rule holds (a fixed count, or adaptive: the interval of the
// median A/B ratio of every compared metric within the target noise, or the
// time budget spent). It returns the baseline's and the candidate's results
// (in that order, as ComparePaired takes them). On an error or an interruption (opt.Context) it returns
// what both arms finished so far, trimmed to the same iterations, with the
// error (wrapping ErrInterrupted for an interruption).
func RunAB(pair ABTarget, opt Options) (baseline, candidate []ShapeResult, err error) {
	if pair.A == nil || pair.B == nil {
		return nil, nil, errors.New("bench: A/B run needs two targets")
	}
	if err := opt.validate(); err != nil {
		return nil, nil, err
	}
	// Only the A arm prints one_batch's lines; B's would interleave with them.
	armA, err := newHarness(pair.A, opt, opt.Stdout, opt.Progress)
	if err != nil {
		return nil, nil, err
	}
	armB, err := newHarness(pair.B, opt, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	shapes := opt.shapes()
	for i, sh := range shapes {
		fmt.Fprintf(armA.progress, "A/B shape %d/%d: %s\n", i+1, len(shapes), sh)
		armA.statusPrefix = fmt.Sprintf("A/B shape %d/%d: ", i+1, len(shapes))
		a, b, err := runABShape(&armA, &armB, sh)
		if len(a.Iterations) > 0 {
			candidate = append(candidate, a)
			baseline = append(baseline, b)
		}
		if err != nil {
			return baseline, candidate, fmt.Errorf("A/B shape %s: %w", sh, err)
		}
	}
	return baseline, candidate, nil
}

func runABShape(armA, armB *harness, sh Shape) (a, b ShapeResult, err error) {
	a = ShapeResult{Shape: sh}
	b = a
	finish := func(reason string, complete bool) {
		a.Finish(reason)
		b.Finish(reason)
		a.Complete, b.Complete = complete, complete
	}
	for w := 0; w < armA.opt.WarmupIters; w++ {
		key := PromptKey{Shape: sh, Iter: w, Warmup: true}
		if _, err := armA.runIteration(key); err != nil {
			return a, b, fmt.Errorf("A warmup %d: %w", w, err)
		}
		if _, err := armB.runIteration(key); err != nil {
			return a, b, fmt.Errorf("B warmup %d: %w", w, err)
		}
	}
	stop := armA.newStopper()
	noise := func() float64 { return pairedNoise(b.Iterations, a.Iterations) }
	for i := 0; !stop.done(i, noise); i++ {
		key := PromptKey{Shape: sh, Iter: i}
		itA, itB, err := runPair(armA, armB, key, stop.iterationLabel(i))
		if err != nil {
			finish(stopReason(err), false)
			return a, b, err
		}
		// Kept in pairs, so that a failure leaves both arms equally long.
		a.Iterations = append(a.Iterations, itA)
		b.Iterations = append(b.Iterations, itB)
	}
	finish(stop.reason, true)
	fmt.Fprintf(armA.progress, "  A: %s\n  B: %s\n", a.NoiseLine(armA.opt), b.NoiseLine(armA.opt))
	return a, b, nil
}

// runPair runs one iteration on each arm, A first in even iterations and
// B first in odd ones (A B B A A B …), so that a drift linear in time
// favours neither arm.
func runPair(armA, armB *harness, key PromptKey, label string) (itA, itB IterationResult, err error) {
	first, second, order := armA, armB, "A then B"
	if key.Iter%2 == 1 {
		first, second, order = armB, armA, "B then A"
	}
	armA.status(fmt.Sprintf("iteration %s (%s)", label, order))
	it1, err := first.runIteration(key)
	if err != nil {
		return itA, itB, fmt.Errorf("%c iteration %d: %w", order[0], key.Iter, err)
	}
	it2, err := second.runIteration(key)
	if err != nil {
		return itA, itB, fmt.Errorf("%c iteration %d: %w", order[len(order)-1], key.Iter, err)
	}
	if key.Iter%2 == 1 {
		return it2, it1, nil
	}
	return it1, it2, nil
}

// pairedNoise is the largest noise of the median pair ratio over the
// compared metrics: what an A/B run's stopping rule holds to the target.
func pairedNoise(baseline, candidate []IterationResult) float64 {
	bSeries, aSeries := IterationSeries(baseline), IterationSeries(candidate)
	worst, seen := 0.0, false
	for _, bs := range bSeries {
		j := slices.IndexFunc(aSeries, func(s MetricSeries) bool { return s.Metric == bs.Metric })
		if j < 0 {
			continue
		}
		ratios := stats.PairRatios(bs.Values, aSeries[j].Values)
		noise := math.Inf(1)
		if !slices.ContainsFunc(ratios, math.IsNaN) {
			noise = stats.RelativeNoise(ratios)
		}
		worst, seen = math.Max(worst, noise), true
	}
	if !seen {
		return math.Inf(1)
	}
	return worst
}

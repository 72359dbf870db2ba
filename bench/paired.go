package bench

import (
	"fmt"
	"math"
	"slices"

	"golang.org/x/perf/benchmath"
)

// ComparePaired compares the two arms of an A/B run (RunAB), whose
// iterations come in pairs measured back to back on the same prompts: per
// shape and metric, the ratio is the median of the per-pair ratios
// candidate/baseline with the order-statistic interval of that median
// (benchmath's AssumeNothing summary), and p the exact two-sided sign test
// of the ratios against 1. Pairing cancels what both arms share (drift,
// prompts); the verdict rule is Compare's.
func ComparePaired(baseline, candidate []ShapeResult, opt CompareOptions) (CompareResult, error) {
	opt = opt.withDefaults()
	res := CompareResult{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: opt.Threshold, Paired: true}
	if len(baseline) != len(candidate) || len(baseline) == 0 {
		return res, fmt.Errorf("%w: %d baseline and %d candidate shapes", ErrNoCommonShape, len(baseline), len(candidate))
	}
	for i, b := range baseline {
		a := candidate[i]
		if !b.Complete {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape %s stopped early (%s): its finished pairs are compared",
				shape{b.Batch, b.InputLen, b.OutputLen}, orDash(b.StopReason)))
		}
		bSeries, aSeries := iterationSeries(b.Iterations), iterationSeries(a.Iterations)
		for _, bs := range bSeries {
			j := slices.IndexFunc(aSeries, func(s metricSeries) bool { return s.metric == bs.metric })
			if j < 0 {
				continue
			}
			row := CompareRow{BatchSize: b.Batch, InputLen: b.InputLen, OutputLen: b.OutputLen, Metric: bs.metric}
			row.fillPaired(bs.values, aSeries[j].values, opt)
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// pairRatios are candidate[i]/baseline[i]; NaN when a time is not positive.
func pairRatios(baseline, candidate []float64) []float64 {
	n := min(len(baseline), len(candidate))
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = math.NaN()
		if baseline[i] > 0 && candidate[i] > 0 {
			ratios[i] = candidate[i] / baseline[i]
		}
	}
	return ratios
}

func (r *CompareRow) fillPaired(baselineValues, candidateValues []float64, opt CompareOptions) {
	thresholds := benchmath.DefaultThresholds
	r.Old = medianCI(benchmath.NewSample(slices.Clone(baselineValues), &thresholds), opt.Confidence)
	r.New = medianCI(benchmath.NewSample(slices.Clone(candidateValues), &thresholds), opt.Confidence)
	ratios := pairRatios(baselineValues, candidateValues)
	nan := math.NaN()
	r.Ratio, r.RatioLow, r.RatioHigh, r.PValue = nan, nan, nan, 1
	if slices.ContainsFunc(ratios, math.IsNaN) || len(ratios) == 0 {
		r.Verdict = VerdictInconclusive
		r.Notes = []string{"no ratio: a time is zero or negative"}
		return
	}
	ci := medianCI(benchmath.NewSample(slices.Clone(ratios), &thresholds), opt.Confidence)
	r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence = ci.MedianSeconds, ci.LowSeconds, ci.HighSeconds, ci.Confidence
	r.PValue = signTest(ratios)
	r.Verdict = verdict(r.PValue, r.Ratio, r.RatioLow, r.RatioHigh, opt.Alpha, opt.Threshold)
	conf := fmt.Sprintf("%g%%", 100*opt.Confidence)
	minimum := minMedianSamples(opt.Confidence)
	if math.IsNaN(r.RatioLow) {
		r.Notes = append(r.Notes, fmt.Sprintf("no %s interval of a median with fewer than %d iterations", conf, minimum))
	}
	if r.Verdict == VerdictInconclusive {
		// The median's standard error is ≈ 1.2533·σ/√n for normal samples.
		fallback := zTwoSided95 * 1.2533 * ci.spread / math.Sqrt(float64(len(ratios)))
		r.SamplesNeeded = samplesNeeded(len(ratios), minimum, r.Ratio, r.RatioLow, r.RatioHigh, fallback, opt.Threshold)
	}
}

// signTest is the exact two-sided sign test of the ratios' median against
// 1: with k of the n ratios that differ from 1 above it, p = 2·P(X <=
// min(k, n−k)) for X ~ Binomial(n, 1/2), at most 1.
func signTest(ratios []float64) float64 {
	n, above := 0, 0
	for _, r := range ratios {
		if r != 1 {
			n++
			if r > 1 {
				above++
			}
		}
	}
	if n == 0 {
		return 1
	}
	k := min(above, n-above)
	tail := 0.0
	if n <= 1000 {
		// C(n,i)/2^n term by term: exact enough to give 2/64 for 6 of 6.
		term := math.Ldexp(1, -n)
		for i := 0; i <= k; i++ {
			tail += term
			term = term * float64(n-i) / float64(i+1)
		}
	} else {
		for i := 0; i <= k; i++ {
			tail += math.Exp(logChoose(n, i) - float64(n)*math.Ln2)
		}
	}
	return math.Min(1, 2*tail)
}

func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// pairedNoise is the largest noise of the median pair ratio over the
// compared metrics: what an A/B run's stopping rule holds to the target.
func pairedNoise(baseline, candidate []IterationResult) float64 {
	bSeries, aSeries := iterationSeries(baseline), iterationSeries(candidate)
	worst, seen := 0.0, false
	for _, bs := range bSeries {
		j := slices.IndexFunc(aSeries, func(s metricSeries) bool { return s.metric == bs.metric })
		if j < 0 {
			continue
		}
		ratios := pairRatios(bs.values, aSeries[j].values)
		noise := math.Inf(1)
		if !slices.ContainsFunc(ratios, math.IsNaN) {
			noise = RelativeNoise(ratios)
		}
		worst, seen = math.Max(worst, noise), true
	}
	if !seen {
		return math.Inf(1)
	}
	return worst
}

package bench

import (
	"fmt"
	"math"
	"slices"

	"golang.org/x/perf/benchmath"

	"stepbench/bench/stats"
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
				b.Shape, orDash(b.StopReason)))
		}
		bSeries, aSeries := iterationSeries(b.Iterations), iterationSeries(a.Iterations)
		for _, bs := range bSeries {
			j := slices.IndexFunc(aSeries, func(s metricSeries) bool { return s.metric == bs.metric })
			if j < 0 {
				continue
			}
			row := CompareRow{Shape: b.Shape, Metric: bs.metric}
			row.fillPaired(bs.values, aSeries[j].values, opt)
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

func (r *CompareRow) fillPaired(baselineValues, candidateValues []float64, opt CompareOptions) {
	thresholds := benchmath.DefaultThresholds
	r.Old = stats.NewMedianCI(benchmath.NewSample(slices.Clone(baselineValues), &thresholds), opt.Confidence)
	r.New = stats.NewMedianCI(benchmath.NewSample(slices.Clone(candidateValues), &thresholds), opt.Confidence)
	ratios := stats.PairRatios(baselineValues, candidateValues)
	nan := math.NaN()
	r.Ratio, r.RatioLow, r.RatioHigh, r.PValue = nan, nan, nan, 1
	if slices.ContainsFunc(ratios, math.IsNaN) || len(ratios) == 0 {
		r.Verdict = stats.VerdictInconclusive
		r.Notes = []string{"no ratio: a time is zero or negative"}
		return
	}
	ci := stats.NewMedianCI(benchmath.NewSample(slices.Clone(ratios), &thresholds), opt.Confidence)
	r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence = ci.MedianSeconds, ci.LowSeconds, ci.HighSeconds, ci.Confidence
	r.PValue = stats.SignTest(ratios)
	r.Verdict = stats.Decide(r.PValue, r.Ratio, r.RatioLow, r.RatioHigh, opt.Alpha, opt.Threshold)
	conf := fmt.Sprintf("%g%%", 100*opt.Confidence)
	minimum := stats.MinMedianSamples(opt.Confidence)
	if math.IsNaN(r.RatioLow) {
		r.Notes = append(r.Notes, fmt.Sprintf("no %s interval of a median with fewer than %d iterations", conf, minimum))
	}
	if r.Verdict == stats.VerdictInconclusive {
		// The median's standard error is ≈ 1.2533·σ/√n for normal samples.
		fallback := stats.Z95 * 1.2533 * ci.Spread / math.Sqrt(float64(len(ratios)))
		r.SamplesNeeded = stats.SamplesNeeded(len(ratios), minimum, r.Ratio, r.RatioLow, r.RatioHigh, fallback, opt.Threshold)
	}
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
		ratios := stats.PairRatios(bs.values, aSeries[j].values)
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

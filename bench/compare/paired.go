package compare

import (
	"fmt"
	"math"
	"slices"

	"golang.org/x/perf/benchmath"

	"stepbench/bench"
	"stepbench/bench/stats"
)

// Paired compares the two arms of an A/B run (RunAB), whose
// iterations come in pairs measured back to back on the same prompts: per
// shape and metric, the ratio is the median of the per-pair ratios
// candidate/baseline with the order-statistic interval of that median
// (benchmath's AssumeNothing summary), and p the exact two-sided sign test
// of the ratios against 1. Pairing cancels what both arms share (drift,
// prompts); the verdict rule is Compare's.
func Paired(baseline, candidate []bench.ShapeResult, opt Options) (Result, error) {
	if err := opt.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrIncomparable, err)
	}
	opt = opt.withDefaults()
	res := Result{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: opt.Threshold, Paired: true}
	if len(baseline) != len(candidate) || len(baseline) == 0 {
		return res, fmt.Errorf("%w: %d baseline and %d candidate shapes", ErrNoCommonShape, len(baseline), len(candidate))
	}
	for i, b := range baseline {
		a := candidate[i]
		if !b.Complete {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape %s stopped early (%s): its finished pairs are compared",
				b.Shape, orDash(b.StopReason)))
		}
		bValues, aValues := iterationValues(b.Iterations), iterationValues(a.Iterations)
		for _, metric := range expectedMetrics(b.Shape) {
			reason := unusable("B", bValues[metric])
			if reason == "" {
				reason = unusable("A", aValues[metric])
			}
			if reason != "" {
				res.Unjudged = append(res.Unjudged, Unjudged{Shape: b.Shape, Metric: metric, Reason: reason})
				continue
			}
			row := Row{Shape: b.Shape, Metric: metric}
			row.fillPaired(bValues[metric], aValues[metric], opt)
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

func (r *Row) fillPaired(baselineValues, candidateValues []float64, opt Options) {
	thresholds := benchmath.DefaultThresholds
	r.Old = stats.NewMedianCI(benchmath.NewSample(slices.Clone(baselineValues), &thresholds), opt.Confidence)
	r.New = stats.NewMedianCI(benchmath.NewSample(slices.Clone(candidateValues), &thresholds), opt.Confidence)
	ratios := stats.PairRatios(baselineValues, candidateValues)
	nan := math.NaN()
	r.Ratio, r.RatioLow, r.RatioHigh, r.PValue = nan, nan, nan, 1
	if slices.ContainsFunc(ratios, math.IsNaN) || len(ratios) == 0 {
		r.Verdict = stats.VerdictInconclusive
		r.Notes = []string{"no ratio: no pairs"}
		return
	}
	ci := stats.NewMedianCI(benchmath.NewSample(slices.Clone(ratios), &thresholds), opt.Confidence)
	r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence = ci.MedianSeconds, ci.LowSeconds, ci.HighSeconds, ci.Confidence
	r.PValue = stats.SignTest(ratios)
	r.Verdict = stats.Decide(r.PValue, r.RatioLow, r.RatioHigh, opt.rule())
	conf := fmt.Sprintf("%g%%", 100*opt.Confidence)
	minimum := stats.MinMedianSamples(opt.Confidence)
	if math.IsNaN(r.RatioLow) {
		r.Notes = append(r.Notes, fmt.Sprintf("no %s interval of a median with fewer than %d iterations", conf, minimum))
	}
	if r.Verdict == stats.VerdictInconclusive {
		// The median's standard error is ≈ 1.2533·σ/√n for normal samples.
		fallback := stats.Z95 * 1.2533 * ci.Spread / math.Sqrt(float64(len(ratios)))
		r.SamplesNeeded = stats.SamplesNeeded(len(ratios), minimum, r.Ratio, r.RatioLow, r.RatioHigh, fallback, opt.rule())
	}
}

// Package stats is the statistics of stepbench's measurements, in the style
// of golang.org/x/perf/benchmath (which it builds on): functions of samples,
// with no knowledge of what was measured.
//
// Its numbers mean:
//   - Summary: numpy's view of a sample, bit for bit (np.mean with pairwise
//     summation, the population std, np.median, np.percentile's linear
//     interpolation), so that vLLM's and one_batch's files come out the same.
//   - RelativeNoise: the half-width of the distribution-free 95% interval of
//     the median (order statistics) over the median; +Inf with fewer than 6
//     values. Adaptive sampling stops when every compared median's noise is
//     at most the target.
//   - MedianCI: a median with that interval at any level.
//   - HodgesLehmannRatio: new/old as the median of all pairwise ratios, with
//     Moses' interval from the Mann-Whitney U null distribution, so the
//     interval excludes 1 exactly when the U test rejects.
//   - PairRatios and SignTest: the paired (A/B) view, the median of per-pair
//     ratios and the exact two-sided sign test.
//   - Decide: FASTER or SLOWER only when p < alpha and the interval excludes
//     1 (and lies beyond ±threshold when one is given, widened by what the
//     host's load could explain), SAME only when the interval lies within the
//     SAME band on a host quiet enough to trust it, else INCONCLUSIVE;
//     SamplesNeeded estimates the iterations an INCONCLUSIVE row would need.
//
// Times are whatever unit the samples have (seconds everywhere in
// stepbench); noise and ratios are dimensionless.
package stats

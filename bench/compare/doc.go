// Package compare compares two runs shape by shape and metric by metric
// (prefill and decode, host and device time), on one value per iteration:
// the prefill's time and the iteration's median decode step, so decode
// steps at different KV lengths are never pooled.
//
// Its numbers mean: for two independent runs (Reports), new/old is the
// Hodges-Lehmann ratio with Moses' distribution-free interval and p the
// Mann-Whitney U test; for an interleaved A/B run (Paired), the median of
// the per-pair ratios with its order-statistic interval and p the exact
// sign test. A row is FASTER or SLOWER only when p < alpha and the interval
// excludes 1 (and lies beyond ±threshold when given), SAME only when the
// interval lies within ±threshold (±1% by default), else INCONCLUSIVE with
// an estimate of the iterations a verdict would need. Ratios below 1 are
// faster.
package compare

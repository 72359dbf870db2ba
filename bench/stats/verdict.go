package stats

import "math"

// Verdicts of a comparison row.
const (
	VerdictFaster       = "FASTER"
	VerdictSlower       = "SLOWER"
	VerdictSame         = "SAME"
	VerdictInconclusive = "INCONCLUSIVE"
)

// DefaultSameBand is the ±1% around a ratio of 1 inside which an interval
// means SAME when no --threshold is given.
const DefaultSameBand = 0.01

// Decide decides a comparison row from its p-value and ratio interval, claiming no
// more than the samples support:
//   - FASTER or SLOWER when p < alpha and the ratio's interval excludes 1
//     (and, with a threshold t > 0, lies entirely beyond 1±t);
//   - SAME when the interval lies within 1±t (1±1% without a threshold);
//   - else INCONCLUSIVE.
func Decide(p, ratio, low, high, alpha, threshold float64) string {
	if math.IsNaN(low) || math.IsNaN(high) {
		return VerdictInconclusive
	}
	if p < alpha && high < 1-threshold {
		return VerdictFaster
	}
	if p < alpha && low > 1+threshold {
		return VerdictSlower
	}
	band := SameBand(threshold)
	if low >= 1-band && high <= 1+band {
		return VerdictSame
	}
	return VerdictInconclusive
}

// SameBand is the half-width of the SAME band: threshold when > 0, else
// DefaultSameBand.
func SameBand(threshold float64) float64 {
	if threshold > 0 {
		return threshold
	}
	return DefaultSameBand
}

// SamplesNeeded estimates, for an INCONCLUSIVE row, how many iterations
// per run would give a verdict: an interval's half-width w shrinks as 1/√n,
// so n·(w/gap)², gap being the distance from the estimate to the nearer
// decision (beyond 1±t for FASTER/SLOWER, within the SAME band). w is the
// ratio interval's half-width, or fallbackHalfWidth (the method's
// large-sample approximation from the runs' spread) without an interval. It
// is never below minimum (the least n that gives an interval) nor below n+1;
// 0 means no estimate (the ratio sits on a decision bound).
func SamplesNeeded(n, minimum int, ratio, low, high, fallbackHalfWidth, threshold float64) int {
	d := math.Abs(ratio - 1)
	gap := math.Max(d-threshold, SameBand(threshold)-d)
	w := (high - low) / 2
	if math.IsNaN(w) {
		w = fallbackHalfWidth
	}
	if math.IsNaN(d) || !(gap > 0) {
		return 0
	}
	need := math.Ceil(float64(n) * (w / gap) * (w / gap))
	if math.IsNaN(need) || need > 1e9 {
		return 0
	}
	return max(int(need), minimum, n+1)
}

// Z95 is the standard normal quantile of a two-sided 95% interval.
const Z95 = 1.96

package stats

import (
	"math"
	"slices"
)

// RatioEstimate is NEW/OLD of two sets of per-iteration times, without
// assuming a distribution: Ratio is the median of the ratios of all m×n
// (old, new) pairs (the Hodges-Lehmann estimate on a log scale) and
// [Low, High] the order statistics of those ratios that make a confidence
// interval of at least Confidence under the Mann-Whitney U null
// distribution (Moses' interval): it excludes 1 exactly when the U test
// rejects at 1−Confidence, and it needs no resampling. Low and High are NaN
// when the samples are too few for an interval at the requested level (at
// 95%: fewer than 4 values in either).
type RatioEstimate struct {
	Ratio, Low, High float64
	Confidence       float64 // the interval's actual level (>= the requested); 0 without one
}

// HodgesLehmannRatio estimates new/old of two sets of per-iteration times;
// every value must be positive (else all fields are NaN).
func HodgesLehmannRatio(oldValues, newValues []float64, confidence float64) RatioEstimate {
	nan := math.NaN()
	est := RatioEstimate{Ratio: nan, Low: nan, High: nan}
	if len(oldValues) == 0 || len(newValues) == 0 || !allPositive(oldValues) || !allPositive(newValues) {
		return est
	}
	x, y := slices.Clone(oldValues), slices.Clone(newValues)
	slices.Sort(x)
	slices.Sort(y)
	pairs := len(x) * len(y)
	est.Ratio = kthRatio(x, y, (pairs+1)/2)
	if pairs%2 == 0 {
		est.Ratio = (est.Ratio + kthRatio(x, y, pairs/2+1)) / 2
	}
	k, level := MannWhitneyCritical(len(x), len(y), confidence)
	if k >= 1 {
		est.Low, est.High, est.Confidence = kthRatio(x, y, k), kthRatio(x, y, pairs+1-k), level
	}
	return est
}

func allPositive(xs []float64) bool {
	for _, x := range xs {
		if !(x > 0) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// kthRatio is the k-th smallest (1-based) of y[j]/x[i] over all pairs of
// the sorted positive samples, found by bisection on the ratio with an
// O(m+n) count per step, so that m×n ratios are never materialised.
func kthRatio(x, y []float64, k int) float64 {
	lo, hi := y[0]/x[len(x)-1], y[len(y)-1]/x[0] // the smallest and largest ratios
	if ratiosAtMost(x, y, lo) >= k {
		return lo
	}
	// Invariant: fewer than k ratios are <= lo, at least k are <= hi.
	for range 2000 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if ratiosAtMost(x, y, mid) >= k {
			hi = mid
		} else {
			lo = mid
		}
	}
	// No float lies between lo and hi: the k-th ratio is the largest ratio <= hi.
	return largestRatioAtMost(x, y, hi)
}

// ratiosAtMost counts the pairs with y[j]/x[i] <= r. As x[i] grows the
// ratios shrink, so the count per x[i] never decreases: one pass.
func ratiosAtMost(x, y []float64, r float64) int {
	count, j := 0, 0
	for _, xi := range x {
		for j < len(y) && y[j]/xi <= r {
			j++
		}
		count += j
	}
	return count
}

func largestRatioAtMost(x, y []float64, r float64) float64 {
	best, j := math.Inf(-1), 0
	for _, xi := range x {
		for j < len(y) && y[j]/xi <= r {
			j++
		}
		if j > 0 {
			best = math.Max(best, y[j-1]/xi)
		}
	}
	return best
}

// MannWhitneyCritical returns the largest k >= 1 with P(U <= k−1) <=
// (1−confidence)/2 under the null distribution of the Mann-Whitney U of
// samples of m and n values (no ties), and the level 1 − 2·P(U <= k−1) of
// the interval it gives; k = 0 when no k qualifies (too few values). The
// distribution is exact up to m·n = 2500, else normal with a
// continuity correction.
func MannWhitneyCritical(m, n int, confidence float64) (k int, level float64) {
	tail := (1 - confidence) / 2
	if m*n > 2500 {
		mean, sd := float64(m*n)/2, math.Sqrt(float64(m*n*(m+n+1))/12)
		cdf := func(u float64) float64 { return 0.5 * math.Erfc(-(u+0.5-mean)/sd/math.Sqrt2) }
		z := math.Sqrt2 * math.Erfinv(confidence)
		k = int(math.Floor(mean-0.5-z*sd)) + 1
		for k > 1 && cdf(float64(k-1)) > tail {
			k--
		}
		if k < 1 || cdf(float64(k-1)) > tail {
			return 0, 0
		}
		return k, 1 - 2*cdf(float64(k-1))
	}
	dist := mannWhitneyDistribution(m, n)
	cumulative := 0.0
	for u := 0; u <= m*n; u++ {
		if cumulative+dist[u] > tail {
			break
		}
		cumulative += dist[u]
		k = u + 1
	}
	if k == 0 {
		return 0, 0
	}
	return k, 1 - 2*cumulative
}

// mannWhitneyDistribution is P(U = u), u = 0..m·n, for samples of m and n
// values without ties, from the recurrence f(i,j,u) = f(i−1,j,u−j) +
// f(i,j−1,u) on the counts of orderings (additions only: no cancellation).
func mannWhitneyDistribution(m, n int) []float64 {
	// prev[j] is f(i−1, j, ·), cur[j] is f(i, j, ·).
	prev := make([][]float64, n+1)
	for j := range prev {
		prev[j] = []float64{1} // f(0, j, 0) = 1
	}
	for i := 1; i <= m; i++ {
		cur := make([][]float64, n+1)
		cur[0] = []float64{1} // f(i, 0, 0) = 1
		for j := 1; j <= n; j++ {
			f := make([]float64, i*j+1)
			copy(f, cur[j-1])
			for u, c := range prev[j] {
				f[u+j] += c
			}
			cur[j] = f
		}
		prev = cur
	}
	counts := prev[n]
	total := PairwiseSum(counts)
	for u := range counts {
		counts[u] /= total
	}
	return counts
}

// PairRatios are candidate[i]/baseline[i]; NaN when a time is not positive.
func PairRatios(baseline, candidate []float64) []float64 {
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

// SignTest is the exact two-sided sign test of the ratios' median against
// 1: with k of the n ratios that differ from 1 above it, p = 2·P(X <=
// min(k, n−k)) for X ~ Binomial(n, 1/2), at most 1.
func SignTest(ratios []float64) float64 {
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

// MinRatioSamples is the least n per run with a Moses interval of the
// ratio at the confidence level (4 at 95%).
func MinRatioSamples(confidence float64) int {
	for n := 1; n < 1000; n++ {
		if k, _ := MannWhitneyCritical(n, n, confidence); k >= 1 {
			return n
		}
	}
	return 1000
}

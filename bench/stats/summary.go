package stats

import (
	"encoding/json"
	"math"
	"slices"
)

// Summary describes a set of samples as numpy does, bit for bit: Mean is
// np.mean (pairwise summation in the samples' order), Std the population
// standard deviation (ddof=0, np.std's default, which vLLM reports), Median
// np.median, and the percentiles np.percentile's default linear
// interpolation between order statistics (Hyndman and Fan type 7), so P50
// may differ from Median in the last bit. The unit is that of the samples.
// A Summary of no samples (N == 0) is written to JSON as null.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Std    float64 `json:"std"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P25    float64 `json:"p25"`
	P50    float64 `json:"p50"`
	P75    float64 `json:"p75"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
}

// Summarize returns the summary of xs (in any order; xs is not modified).
// An empty xs gives the zero Summary (N == 0).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	mean, std := meanStd(xs)
	return Summary{
		N:      len(sorted),
		Mean:   mean,
		Std:    std,
		Min:    sorted[0],
		Max:    sorted[len(sorted)-1],
		Median: medianSorted(sorted),
		P10:    PercentileSorted(sorted, 10),
		P25:    PercentileSorted(sorted, 25),
		P50:    PercentileSorted(sorted, 50),
		P75:    PercentileSorted(sorted, 75),
		P90:    PercentileSorted(sorted, 90),
		P99:    PercentileSorted(sorted, 99),
	}
}

// meanStd is np.mean(xs) and np.std(xs) for a non-empty xs: the mean is
// the pairwise sum over n; the variance the pairwise sum of the squared
// deviations from it over n (two passes: stable where E[x²]−E[x]² is not).
func meanStd(xs []float64) (mean, std float64) {
	n := float64(len(xs))
	mean = PairwiseSum(xs) / n
	squares := make([]float64, len(xs))
	for i, x := range xs {
		d := x - mean
		squares[i] = float64(d * d) // the conversion forbids a fused multiply-add
	}
	return mean, math.Sqrt(PairwiseSum(squares) / n)
}

// PairwiseSum is numpy's pairwise_sum (the float64 add.reduce of a
// contiguous array): a plain loop below 8 values, 8 interleaved
// accumulators up to 128, else the two halves (split at a multiple of 8)
// summed recursively. Its rounding is numpy's, so means match bit for bit.
func PairwiseSum(xs []float64) float64 {
	n := len(xs)
	switch {
	case n < 8:
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		return sum
	case n <= 128:
		var r [8]float64
		copy(r[:], xs[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range r {
				r[j] += xs[i+j]
			}
		}
		sum := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			sum += xs[i]
		}
		return sum
	}
	half := n / 2
	half -= half % 8
	return PairwiseSum(xs[:half]) + PairwiseSum(xs[half:])
}

// Percentile returns the p-th percentile (0 <= p <= 100) of xs as
// np.percentile(xs, p) computes it by default (linear, type 7): the value at
// rank h = (n−1)·(p/100) of the sorted samples, interpolated between the two
// nearest order statistics. xs may be unsorted and is not modified. It
// returns NaN for an empty xs or a p outside [0, 100].
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return PercentileSorted(sorted, p)
}

// Median is np.median(xs): the middle sample, or the mean of the two middle
// ones, (a+b)/2; NaN for an empty xs. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return medianSorted(sorted)
}

func medianSorted(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// PercentileSorted is Percentile over an already sorted, non-empty slice.
func PercentileSorted(sorted []float64, p float64) float64 {
	rank := float64(len(sorted)-1) * (p / 100) // numpy divides q by 100 first
	lower := math.Floor(rank)
	lowerIndex := int(lower)
	if lowerIndex >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	fraction := rank - lower
	below, above := sorted[lowerIndex], sorted[lowerIndex+1]
	if fraction == 0 {
		return below
	}
	// numpy's _lerp: exact at both ends and monotone in the fraction. The
	// conversions forbid fused multiply-adds, which numpy does not use.
	if fraction >= 0.5 {
		return above - float64((above-below)*(1-fraction))
	}
	return below + float64((above-below)*fraction)
}

// MarshalJSON writes a summary of no samples (an output_len of 1 has no
// decode steps) as null rather than as zeros that look measured.
func (s Summary) MarshalJSON() ([]byte, error) {
	if s.N == 0 {
		return []byte("null"), nil
	}
	type plain Summary // without this method
	return json.Marshal(plain(s))
}

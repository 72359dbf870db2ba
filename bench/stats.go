package bench

import (
	"math"
	"slices"
)

// Summary describes a set of samples. Std is the population standard
// deviation (ddof=0, numpy's np.std default, which vLLM reports). Percentiles
// use linear interpolation between order statistics (numpy's default, Hyndman
// and Fan type 7); Median equals P50. The unit is that of the samples.
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
// An empty xs gives the zero Summary (N == 0), so that it can always be
// encoded as JSON.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	sum := 0.0
	for _, x := range sorted {
		sum += x
	}
	mean := sum / float64(len(sorted))
	// Two passes: the sum of squared deviations from the mean is stable where
	// E[x²]−E[x]² is not (latencies share most of their leading digits).
	squares := 0.0
	for _, x := range sorted {
		d := x - mean
		squares += d * d
	}
	median := percentileSorted(sorted, 50)
	return Summary{
		N:      len(sorted),
		Mean:   mean,
		Std:    math.Sqrt(squares / float64(len(sorted))),
		Min:    sorted[0],
		Max:    sorted[len(sorted)-1],
		Median: median,
		P10:    percentileSorted(sorted, 10),
		P25:    percentileSorted(sorted, 25),
		P50:    median,
		P75:    percentileSorted(sorted, 75),
		P90:    percentileSorted(sorted, 90),
		P99:    percentileSorted(sorted, 99),
	}
}

// Percentile returns the p-th percentile (0 <= p <= 100) of xs as
// np.percentile(xs, p) computes it by default (linear, type 7): the value at
// rank h = (n−1)·p/100 of the sorted samples, interpolated between the two
// nearest order statistics. xs may be unsorted and is not modified. It
// returns NaN for an empty xs or a p outside [0, 100].
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return percentileSorted(sorted, p)
}

// Median is Percentile(xs, 50), np.median's value.
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// percentileSorted is Percentile over an already sorted, non-empty slice.
func percentileSorted(sorted []float64, p float64) float64 {
	rank := float64(len(sorted)-1) * p / 100
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
	// numpy's _lerp form: exact at both ends and monotone in the fraction.
	if fraction >= 0.5 {
		return above - (above-below)*(1-fraction)
	}
	return below + (above-below)*fraction
}

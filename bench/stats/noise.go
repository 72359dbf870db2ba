package stats

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"golang.org/x/perf/benchmath"
)

// NoiseConfidence is the level of the median intervals that define noise.
const NoiseConfidence = 0.95

// RelativeNoise is the noise of a median: the half-width of the
// distribution-free 95% confidence interval of the median of xs (order
// statistics; golang.org/x/perf/benchmath's AssumeNothing summary) over the
// median. +Inf when xs are too few for such an interval (fewer than 6) or
// the median is not positive. xs is not modified.
func RelativeNoise(xs []float64) float64 {
	if len(xs) == 0 {
		return math.Inf(1)
	}
	sample := benchmath.NewSample(slices.Clone(xs), &benchmath.DefaultThresholds)
	sum := benchmath.AssumeNothing.Summary(sample, NoiseConfidence)
	if !(sum.Center > 0) || math.IsInf(sum.Lo, 0) || math.IsInf(sum.Hi, 0) {
		return math.Inf(1)
	}
	return (sum.Hi - sum.Lo) / 2 / sum.Center
}

// MedianNoise is the relative half-width of the distribution-free 95%
// interval of the median: the order statistics n/2 ± 1.96·√n/2 (the normal
// approximation of the binomial), over the median. +Inf with too few
// samples for such an interval.
func MedianNoise(xs []float64) float64 {
	n := len(xs)
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	half := 1.96 * math.Sqrt(float64(n)) / 2
	lo, hi := int(math.Floor(float64(n)/2-half)), int(math.Ceil(float64(n)/2+half))
	if n == 0 || lo < 0 || hi > n-1 {
		return math.Inf(1)
	}
	median := PercentileSorted(sorted, 50)
	if median <= 0 {
		return math.Inf(1)
	}
	return (sorted[hi] - sorted[lo]) / 2 / median
}

// NoiseText prints a relative noise as ±0.31%; "n/a" when too few
// iterations gave no interval, "-" when not measured.
func NoiseText(noise float64) string {
	switch {
	case math.IsNaN(noise):
		return "-"
	case math.IsInf(noise, 0):
		return "n/a"
	}
	return fmt.Sprintf("±%.2f%%", 100*noise)
}

// Finite is x, or nil for NaN and ±Inf, which encoding/json refuses: how
// every statistic that may not exist is written (null).
func Finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

package stats

import (
	"encoding/json"
	"math"

	"golang.org/x/perf/benchmath"
)

// MedianCI is a run's median of one metric's per-iteration values with its
// order-statistic confidence interval (benchmath's AssumeNothing summary),
// in seconds. Without enough values for an interval, Low and High are NaN.
type MedianCI struct {
	N             int     `json:"n"`
	MedianSeconds float64 `json:"median_seconds"`
	LowSeconds    float64 `json:"ci_low_seconds"`
	HighSeconds   float64 `json:"ci_high_seconds"`
	Confidence    float64 `json:"confidence"` // the interval's actual level (>= the requested)
	// RelativeNoise is the run's achieved noise: the interval's half-width
	// over the median (what run's --target-noise aims at); +Inf without one.
	RelativeNoise float64 `json:"relative_noise"`
	// Spread is the robust relative spread of the values (IQR/1.349 over
	// the median), what a comparison without an interval uses to estimate
	// the samples a verdict needs.
	Spread float64 `json:"-"`
}

// NewMedianCI is the median of a sample with its order-statistic
// interval at confidence (benchmath's AssumeNothing summary).
func NewMedianCI(s *benchmath.Sample, confidence float64) MedianCI {
	sum := benchmath.AssumeNothing.Summary(s, confidence)
	m := MedianCI{N: len(s.Values), MedianSeconds: sum.Center, LowSeconds: sum.Lo, HighSeconds: sum.Hi,
		Confidence: sum.Confidence, RelativeNoise: RelativeNoise(s.Values)}
	if math.IsInf(sum.Lo, 0) || math.IsInf(sum.Hi, 0) {
		m.LowSeconds, m.HighSeconds, m.Confidence = math.NaN(), math.NaN(), 0
	}
	if sum.Center > 0 && len(s.Values) > 0 {
		iqr := PercentileSorted(s.Values, 75) - PercentileSorted(s.Values, 25)
		m.Spread = iqr / 1.349 / sum.Center
	}
	return m
}

// MinMedianSamples is the least n with an order-statistic interval of the
// median at the confidence level (6 at 95%).
func MinMedianSamples(confidence float64) int {
	for n := 1; n < 1000; n++ {
		s := benchmath.NewSample(make([]float64, n), &benchmath.DefaultThresholds)
		if sum := benchmath.AssumeNothing.Summary(s, confidence); !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) {
			return n
		}
	}
	return 1000
}

// MarshalJSON writes non-finite values as null.
func (m MedianCI) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		N             int      `json:"n"`
		MedianSeconds *float64 `json:"median_seconds"`
		LowSeconds    *float64 `json:"ci_low_seconds"`
		HighSeconds   *float64 `json:"ci_high_seconds"`
		Confidence    *float64 `json:"confidence"`
		RelativeNoise *float64 `json:"relative_noise"`
	}{m.N, Finite(m.MedianSeconds), Finite(m.LowSeconds), Finite(m.HighSeconds), Finite(nonZero(m.Confidence)), Finite(m.RelativeNoise)})
}

// nonZero is x, or NaN for 0 (a confidence level of no interval).
func nonZero(x float64) float64 {
	if x == 0 {
		return math.NaN()
	}
	return x
}

package stats

import (
	"math"
	"strconv"
	"strings"
)

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

// Rule is what a row's evidence must clear for each verdict.
type Rule struct {
	// Alpha is the significance level FASTER and SLOWER need.
	Alpha float64
	// Threshold (a fraction: 0.03 is 3%), when > 0, is the least change
	// FASTER or SLOWER may claim and the band of SAME; 0: FASTER or SLOWER
	// need the interval to exclude 1, SAME lies within DefaultSameBand.
	Threshold float64
	// Load is how far other processes' load alone could have slowed either
	// run (a fraction: 1.5 is up to 2.5×): FASTER then needs the interval
	// below (1 − Threshold)/(1 + Load), SLOWER above (1 + Threshold)·(1 + Load).
	Load float64
	// Busy says the host was too busy for SAME: a load that can hide a
	// change can also hide one inside the band.
	Busy bool
}

// Decide decides a comparison row from its p-value and ratio interval
// [low, high], claiming no more than the samples support:
//   - FASTER or SLOWER when p < alpha and the interval lies beyond the
//     Bounds (with no threshold and no load: excludes 1);
//   - SAME when the host was not busy and the interval lies within
//     1 ± SameBand(Threshold), even where p < alpha (Significant says so);
//   - else INCONCLUSIVE.
//
// A verdict never contradicts its interval: SAME is never given to an
// interval that leaves the band, whatever the load.
func Decide(p, low, high float64, r Rule) string {
	if math.IsNaN(low) || math.IsNaN(high) {
		return VerdictInconclusive
	}
	lower, upper := r.Bounds()
	if p < r.Alpha && high < lower {
		return VerdictFaster
	}
	if p < r.Alpha && low > upper {
		return VerdictSlower
	}
	band := SameBand(r.Threshold)
	if !r.Busy && low >= 1-band && high <= 1+band {
		return VerdictSame
	}
	return VerdictInconclusive
}

// Bounds are the ratios FASTER must lie below and SLOWER above: the
// threshold's band, divided and multiplied by what the load could explain.
func (r Rule) Bounds() (lower, upper float64) {
	return (1 - r.Threshold) / (1 + r.Load), (1 + r.Threshold) * (1 + r.Load)
}

// Significant says whether the row's difference is significant: p < alpha
// and the interval excludes 1. A SAME row may be significant (a change
// smaller than the band).
func Significant(p, low, high, alpha float64) bool {
	return p < alpha && (high < 1 || low > 1)
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
// decision (beyond the Bounds for FASTER/SLOWER, within the SAME band). w is the ratio interval's half-width, or fallbackHalfWidth
// (the method's large-sample approximation from the runs' spread) without
// an interval. It is never below minimum (the least n that gives an
// interval) nor below n+1; 0 means no estimate (the ratio sits on a
// decision bound, or the host was busy: more iterations do not remove
// another process's load).
func SamplesNeeded(n, minimum int, ratio, low, high, fallbackHalfWidth float64, r Rule) int {
	if r.Busy {
		return 0
	}
	d := math.Abs(ratio - 1)
	lower, upper := r.Bounds()
	gap := math.Max(math.Max(ratio-upper, lower-ratio), SameBand(r.Threshold)-d)
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

// PercentText prints a fraction as a percentage with at most two
// significant figures and no exponent: 0.3 as "30%", 0.025 as "2.5%",
// 1.948 as "190%".
func PercentText(fraction float64) string {
	pct := 100 * fraction
	if pct == 0 || math.IsNaN(pct) || math.IsInf(pct, 0) {
		return strconv.FormatFloat(pct, 'g', -1, 64) + "%"
	}
	magnitude := int(math.Floor(math.Log10(math.Abs(pct))))
	scale := math.Pow(10, float64(magnitude-1))
	rounded := math.Round(pct/scale) * scale
	text := strconv.FormatFloat(rounded, 'f', max(0, 1-magnitude), 64)
	if strings.Contains(text, ".") {
		text = strings.TrimRight(strings.TrimRight(text, "0"), ".")
	}
	return text + "%"
}

// Z95 is the standard normal quantile of a two-sided 95% interval.
const Z95 = 1.96

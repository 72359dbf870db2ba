package bench

import "math"

// closeTo compares within a relative 1e-12 (exact formulas, float rounding).
func closeTo(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

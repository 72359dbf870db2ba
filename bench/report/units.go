package report

import (
	"fmt"
	"math"
)

// SI prints x with the SI prefix that keeps three significant digits
// readable: 9.33e9 FLOP/s is "9.33 GFLOP/s", 3.35e12 B/s "3.35 TB/s". A
// rate on the emulated device is a thousand times below a GPU's: a fixed
// prefix would print it as 0.0.
func SI(x float64, unit string) string {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return fmt.Sprintf("%g %s", x, unit)
	}
	prefixes := []string{"", "k", "M", "G", "T", "P", "E"}
	i := 0
	for math.Abs(x) >= 999.5 && i < len(prefixes)-1 {
		x /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %s%s", x, prefixes[i], unit)
}

package stats

import (
	"math"
	"slices"
	"testing"
)

func closeTo(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

// The expected values follow numpy's default (type 7) by hand: rank
// h = (n−1)·p/100, value = x[⌊h⌋] + (h−⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
func TestPercentileMatchesNumpyLinear(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"p0 is min", []float64{1, 2, 3, 4, 10}, 0, 1},
		{"p10", []float64{1, 2, 3, 4, 10}, 10, 1.4},  // h=0.4
		{"p25", []float64{1, 2, 3, 4, 10}, 25, 2},    // h=1
		{"p50", []float64{1, 2, 3, 4, 10}, 50, 3},    // h=2
		{"p75", []float64{1, 2, 3, 4, 10}, 75, 4},    // h=3
		{"p90", []float64{1, 2, 3, 4, 10}, 90, 7.6},  // h=3.6: 4+0.6·6
		{"p99", []float64{1, 2, 3, 4, 10}, 99, 9.76}, // h=3.96: 4+0.96·6
		{"p100 is max", []float64{1, 2, 3, 4, 10}, 100, 10},
		{"unsorted input", []float64{10, 3, 1, 4, 2}, 90, 7.6},
		{"even count median", []float64{4, 1, 3, 2}, 50, 2.5},    // h=1.5
		{"even count p25", []float64{1, 2, 3, 4}, 25, 1.75},      // h=0.75
		{"even count p75", []float64{1, 2, 3, 4}, 75, 3.25},      // h=2.25
		{"classic p40", []float64{15, 20, 35, 40, 50}, 40, 29},   // h=1.6: 20+0.6·15
		{"classic p10", []float64{15, 20, 35, 40, 50}, 10, 17},   // h=0.4: 15+0.4·5
		{"classic p99", []float64{15, 20, 35, 40, 50}, 99, 49.6}, // h=3.96: 40+0.96·10
		{"two values p10", []float64{3, 1}, 10, 1.2},             // h=0.1
		{"single value", []float64{5}, 37, 5},                    // h=0
		{"duplicates", []float64{2, 2, 2, 9}, 90, 6.9},           // h=2.7: 2+0.7·7
		{"negative values", []float64{-4, -1, -2, -3}, 50, -2.5}, // h=1.5
		{"fractional p", []float64{0, 10, 20, 30, 40}, 12.5, 5},  // h=0.5
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.xs)
			got := Percentile(tc.xs, tc.p)
			if !closeTo(got, tc.want) {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
			}
			if !slices.Equal(before, tc.xs) {
				t.Errorf("Percentile modified its input: %v, was %v", tc.xs, before)
			}
		})
	}
}

func TestPercentileInvalidIsNaN(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
	}{
		{"empty", nil, 50},
		{"p below 0", []float64{1, 2}, -1},
		{"p above 100", []float64{1, 2}, 100.5},
		{"p NaN", []float64{1, 2}, math.NaN()},
	}
	for _, tc := range tests {
		if got := Percentile(tc.xs, tc.p); !math.IsNaN(got) {
			t.Errorf("%s: Percentile = %v, want NaN", tc.name, got)
		}
	}
}

func TestSummarize(t *testing.T) {
	// Mean 5; squared deviations 9,1,1,1,0,0,4,16 sum to 32; 32/8 = 4, so
	// the population std (ddof=0) is 2 (the sample std would be 2.138).
	xs := []float64{9, 4, 2, 4, 5, 4, 7, 5}
	got := Summarize(xs)
	want := Summary{N: 8, Mean: 5, Std: 2, Min: 2, Max: 9, Median: 4.5,
		P10: 2 + 0.7*2, // h=0.7 between 2 and 4
		P25: 4,         // h=1.75 between 4 and 4
		P50: 4.5,
		P75: 5.5,  // h=5.25 between 5 and 7
		P90: 7.6,  // h=6.3 between 7 and 9
		P99: 8.86, // h=6.93
	}
	fields := []struct {
		name      string
		got, want float64
	}{
		{"N", float64(got.N), float64(want.N)}, {"Mean", got.Mean, want.Mean}, {"Std", got.Std, want.Std},
		{"Min", got.Min, want.Min}, {"Max", got.Max, want.Max}, {"Median", got.Median, want.Median},
		{"P10", got.P10, want.P10}, {"P25", got.P25, want.P25}, {"P50", got.P50, want.P50},
		{"P75", got.P75, want.P75}, {"P90", got.P90, want.P90}, {"P99", got.P99, want.P99},
	}
	for _, f := range fields {
		if !closeTo(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if xs[0] != 9 {
		t.Errorf("Summarize sorted its input in place: %v", xs)
	}
	if empty := Summarize(nil); empty != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", empty)
	}
}

func FuzzPercentileWithinBoundsAndMonotone(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, 4.0, 10.0, 35.0)
	f.Add(-1e300, 0.0, 1e300, 5.0, 5.0, 99.9)
	f.Fuzz(func(t *testing.T, a, b, c, d, e, p float64) {
		xs := []float64{a, b, c, d, e}
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return
			}
		}
		if !(p >= 0 && p <= 100) {
			return
		}
		got := Percentile(xs, p)
		lo, hi := slices.Min(xs), slices.Max(xs)
		if got < lo || got > hi {
			t.Fatalf("Percentile(%v, %v) = %v outside [%v, %v]", xs, p, got, lo, hi)
		}
		if higher := Percentile(xs, math.Min(100, p+1)); higher < got {
			t.Fatalf("Percentile not monotone: p=%v gives %v, p+1 gives %v", p, got, higher)
		}
	})
}

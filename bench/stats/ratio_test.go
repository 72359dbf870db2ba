package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestPairwiseRatioOrderStatistics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := 0; trial < 50; trial++ {
		x, y := make([]float64, 1+rng.IntN(9)), make([]float64, 1+rng.IntN(9))
		for i := range x {
			x[i] = 0.5 + float64(rng.IntN(20))/10 // ties included
		}
		for i := range y {
			y[i] = 0.5 + float64(rng.IntN(20))/10
		}
		var all []float64
		for _, xi := range x {
			for _, yj := range y {
				all = append(all, yj/xi)
			}
		}
		sort.Float64s(all)
		sort.Float64s(x)
		sort.Float64s(y)
		for k := 1; k <= len(all); k++ {
			if got := kthRatio(x, y, k); got != all[k-1] {
				t.Fatalf("x %v y %v: k=%d gives %v, want %v", x, y, k, got, all[k-1])
			}
		}
	}
}

func TestMannWhitneyCritical(t *testing.T) {
	// Two-sided 5% critical values of U (tables): reject when U <= c, so k = c+1.
	for _, tc := range []struct{ m, n, k int }{{3, 3, 0}, {4, 4, 1}, {5, 5, 3}, {10, 10, 24}, {20, 20, 128}, {8, 12, 23}} {
		k, level := MannWhitneyCritical(tc.m, tc.n, 0.95)
		if k != tc.k || (k > 0 && level < 0.95) {
			t.Errorf("m=%d n=%d: k=%d (level %.4f), want %d", tc.m, tc.n, k, level, tc.k)
		}
	}
	// The normal approximation (beyond m·n = 2500) stays at the level.
	if k, level := MannWhitneyCritical(60, 60, 0.95); k < 1300 || k > 1450 || level < 0.95 || level > 0.96 {
		t.Errorf("m=n=60: k=%d level %.4f", k, level)
	}
	if MinRatioSamples(0.95) != 4 || MinMedianSamples(0.95) != 6 {
		t.Errorf("minimum samples %d (ratio), %d (median)", MinRatioSamples(0.95), MinMedianSamples(0.95))
	}
	if d := mannWhitneyDistribution(2, 2); !slices.Equal(d, []float64{1.0 / 6, 1.0 / 6, 2.0 / 6, 1.0 / 6, 1.0 / 6}) {
		t.Errorf("U distribution for 2×2: %v", d)
	}
	if math.IsNaN(HodgesLehmannRatio([]float64{1, 2}, []float64{2, 4}, 0.95).Ratio) {
		t.Error("no ratio of positive samples")
	}
}

func TestSignTest(t *testing.T) {
	if p := SignTest([]float64{1.1, 1.2, 1.3, 1.4, 1.5, 1.6}); p != 2.0/64 {
		t.Errorf("sign test of 6 ratios above 1: p = %v, want 2/64", p)
	}
	if p := SignTest([]float64{1, 1}); p != 1 {
		t.Errorf("sign test of ties: %v", p)
	}
}

package ref

import (
	"math"
	"math/rand/v2"
	"testing"
)

// newRand returns a deterministic generator so failures reproduce.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randomBF16 returns n bf16 values drawn from N(0, scale²).
func randomBF16(r *rand.Rand, n int, scale float64) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = F32ToBF16(float32(r.NormFloat64() * scale))
	}
	return out
}

// f64 widens a bf16 value to float64 (exact).
func f64(b uint16) float64 { return float64(BF16ToF32(b)) }

// relErr is ‖got−want‖/‖want‖ over bf16 outputs against a float64 truth.
func relErr(got []uint16, want []float64) float64 {
	var diff, norm float64
	for i, w := range want {
		d := f64(got[i]) - w
		diff += d * d
		norm += w * w
	}
	if norm == 0 {
		return math.Sqrt(diff)
	}
	return math.Sqrt(diff / norm)
}

// checkRelErr fails the test when got is further than tol from want or holds a NaN.
func checkRelErr(t *testing.T, what string, got []uint16, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i, g := range got {
		if v := BF16ToF32(g); v != v {
			t.Fatalf("%s: out[%d] is NaN", what, i)
		}
	}
	if e := relErr(got, want); e > tol || math.IsNaN(e) {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// mustPanic fails the test unless f panics.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

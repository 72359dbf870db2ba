package ref

import (
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

// checkRelErr fails the test when got is further than tol (RelErr) from
// the float64 truth want, rounded to float32, or holds a NaN.
func checkRelErr(t *testing.T, what string, got []uint16, want []float64, tol float64) {
	t.Helper()
	g, w := make([]float32, len(got)), make([]float32, len(want))
	ToF32(g, got)
	for i, v := range want {
		w[i] = float32(v)
	}
	e, err := RelErr(g, w)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if e > tol {
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

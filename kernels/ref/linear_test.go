package ref

import (
	"fmt"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"
)

// directLinear is x · wᵀ in float64.
func directLinear(x, w []uint16, m, n, k int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var sum float64
			for kk := 0; kk < k; kk++ {
				sum += f64(x[i*k+kk]) * f64(w[j*k+kk])
			}
			out[i*n+j] = sum
		}
	}
	return out
}

func TestLinearAgainstDirect(t *testing.T) {
	tests := []struct{ m, n, k int }{
		{1, 1, 1},
		{1, 8, 16},
		{4, 96, 64},
		{3, 17, 31},                   // odd everywhere
		{linearBlockRows + 5, 19, 40}, // more than one block, last one partial
		{2 * linearBlockRows, 3, 5},   // whole blocks only
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%dx%d", tc.m, tc.n, tc.k), func(t *testing.T) {
			r := newRand(30)
			x := randomBF16(r, tc.m*tc.k, 1)
			w := randomBF16(r, tc.n*tc.k, 0.1)
			out := make([]uint16, tc.m*tc.n)
			Linear(out, x, w, tc.m, tc.n, tc.k)
			checkRelErr(t, "Linear", out, directLinear(x, w, tc.m, tc.n, tc.k), 1e-2)
		})
	}
}

// TestLinearExactSmallIntegers uses products and sums that float32 and bf16
// hold exactly, so any layout mistake shows as a wrong value, not a small error.
func TestLinearExactSmallIntegers(t *testing.T) {
	const m, n, k = 3, 4, 5
	x := make([]uint16, m*k)
	w := make([]uint16, n*k)
	for i := range x {
		x[i] = F32ToBF16(float32(i%7 - 3))
	}
	for i := range w {
		w[i] = F32ToBF16(float32(i%5 - 2))
	}
	out := make([]uint16, m*n)
	Linear(out, x, w, m, n, k)
	want := directLinear(x, w, m, n, k)
	for i := range out {
		if f64(out[i]) != want[i] {
			t.Errorf("out[%d] = %g, want %g", i, BF16ToF32(out[i]), want[i])
		}
	}
}

func TestLinearEmptyK(t *testing.T) {
	out := []uint16{0x1234, 0x5678}
	Linear(out, nil, nil, 1, 2, 0)
	if out[0] != 0 || out[1] != 0 {
		t.Errorf("k=0 gives %#v, want zeros", out)
	}
}

func TestLinearShortSlicePanics(t *testing.T) {
	mustPanic(t, "short w", func() { Linear(make([]uint16, 4), make([]uint16, 4), make([]uint16, 3), 2, 2, 2) })
}

func BenchmarkLinear(b *testing.B) {
	const m, n, k = 4, 1024, 1024
	r := newRand(31)
	x := randomBF16(r, m*k, 1)
	w := randomBF16(r, n*k, 0.03)
	out := make([]uint16, m*n)
	b.SetBytes(int64(2 * (m*k + n*k + m*n)))
	for b.Loop() {
		Linear(out, x, w, m, n, k)
	}
}

// dotLinear is every output as one float32 dot product over the whole of k.
func dotLinear(out, x []uint16, w []float32, m, n, k int) {
	xf := make([]float32, m*k)
	ToF32(xf, x[:m*k])
	for i := range m {
		for j := range n {
			out[i*n+j] = F32ToBF16(blas32.Dot(blas32.Vector{N: k, Inc: 1, Data: xf[i*k : (i+1)*k]},
				blas32.Vector{N: k, Inc: 1, Data: w[j*k : (j+1)*k]}))
		}
	}
}

// Linear's outputs are each one dot product over the whole of k, whatever
// the shape (one row or many, more outputs than a chunk) and the number of
// LinearWide's workers: a row's result does not depend on the batch.
func TestLinearWideSameBitsAnyWorkers(t *testing.T) {
	for _, tc := range []struct{ m, n, k int }{
		{1, 4096, 128}, {1, 768, 128}, {4, 256, 128}, {1, 7, 5}, {3, 17, 31}, {64, 384, 128}, {linearBlockRows + 3, 300, 64},
	} {
		r := newRand(31)
		x := randomBF16(r, tc.m*tc.k, 1)
		w := randomBF16(r, tc.n*tc.k, 0.1)
		wide := make([]float32, len(w))
		ToF32(wide, w)
		want := make([]uint16, tc.m*tc.n)
		dotLinear(want, x, wide, tc.m, tc.n, tc.k)
		got := make([]uint16, tc.m*tc.n)
		Linear(got, x, w, tc.m, tc.n, tc.k)
		if !slices.Equal(got, want) {
			t.Errorf("%dx%dx%d: Linear differs from a dot product per output", tc.m, tc.n, tc.k)
		}
		for _, workers := range []int{1, 2, 3, 8} {
			clear(got)
			LinearWide(got, x, wide, tc.m, tc.n, tc.k, workers)
			if !slices.Equal(got, want) {
				t.Errorf("%dx%dx%d, %d workers: LinearWide differs from a dot product per output", tc.m, tc.n, tc.k, workers)
			}
		}
	}
}

// Gemv is Linear, bit for bit, whatever the shape; GemvSiluMul is Linear
// then SiluMul.
func TestGemvIsLinear(t *testing.T) {
	rng := newRand(19)
	for _, s := range []struct{ m, n, k int }{{1, 300, 200}, {16, 1003, 136}, {5, 8, 4104}} {
		x, w := randomBF16(rng, s.m*s.k, 1), randomBF16(rng, s.n*s.k, 1)
		want, got := make([]uint16, s.m*s.n), make([]uint16, s.m*s.n)
		Linear(want, x, w, s.m, s.n, s.k)
		Gemv(got, x, w, s.m, s.n, s.k)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: Gemv differs from Linear", s)
		}
		if s.n%2 == 0 {
			inter := s.n / 2
			wantAct, gotAct := make([]uint16, s.m*inter), make([]uint16, s.m*inter)
			SiluMul(wantAct, want, s.m, inter)
			GemvSiluMul(gotAct, x, w, s.m, inter, s.k)
			if !slices.Equal(gotAct, wantAct) {
				t.Errorf("%+v: GemvSiluMul differs from Linear then SiluMul", s)
			}
		}
	}
}

package ref

import (
	"reflect"
	"testing"
)

// GemvResidual is Gemv rounded to bf16 and added into the residual, and
// its squared sums cover NormPartCols columns each, the last block the
// rest: small integers, exact in bf16 and float32, at widths with a full
// last block and a partial one.
func TestGemvResidualAddsAndSumsBlocks(t *testing.T) {
	for _, tt := range []struct{ m, n, k int }{{1, 16, 3}, {2, 20, 5}, {3, 33, 1}} {
		x, w, res := make([]uint16, tt.m*tt.k), make([]uint16, tt.n*tt.k), make([]uint16, tt.m*tt.n)
		for i := range x {
			x[i] = F32ToBF16(float32(i%3 - 1))
		}
		for i := range w {
			w[i] = F32ToBF16(float32(i%5 - 2))
		}
		for i := range res {
			res[i] = F32ToBF16(float32(i % 7))
		}
		want := append([]uint16(nil), res...)
		y := make([]uint16, tt.m*tt.n)
		Gemv(y, x, w, tt.m, tt.n, tt.k)
		for i := range want {
			want[i] = F32ToBF16(BF16ToF32(want[i]) + BF16ToF32(y[i]))
		}
		parts := (tt.n + NormPartCols - 1) / NormPartCols
		wantPart := make([]float32, tt.m*parts)
		for i := range tt.m {
			for j := range tt.n {
				v := BF16ToF32(want[i*tt.n+j])
				wantPart[i*parts+j/NormPartCols] += v * v
			}
		}
		part := make([]float32, tt.m*parts)
		GemvResidual(res, part, x, w, tt.m, tt.n, tt.k)
		if !reflect.DeepEqual(res, want) || !reflect.DeepEqual(part, wantPart) {
			t.Errorf("m=%d n=%d k=%d: residual %v part %v, want %v %v", tt.m, tt.n, tt.k, res, part, want, wantPart)
		}
	}
}

// NormGemv is AddRMSNorm (no add) then Gemv, and leaves the residual as it
// was; NormGemvSiluMul the same before GemvSiluMul.
func TestNormGemvIsNormThenGemv(t *testing.T) {
	const m, n, k, eps = 2, 6, 8, 1e-5
	res, normW, w := make([]uint16, m*k), make([]uint16, k), make([]uint16, 2*n*k)
	for i := range res {
		res[i] = F32ToBF16(float32(i%9) - 4)
	}
	for i := range normW {
		normW[i] = F32ToBF16(1 + float32(i)/8)
	}
	for i := range w {
		w[i] = F32ToBF16(float32(i%5)/4 - 0.5)
	}
	kept := append([]uint16(nil), res...)
	normed := make([]uint16, m*k)
	AddRMSNorm(normed, append([]uint16(nil), res...), nil, normW, m, k, eps)
	want, got := make([]uint16, m*n), make([]uint16, m*n)
	Gemv(want, normed, w, m, n, k)
	NormGemv(got, res, normW, w, m, n, k, eps)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(res, kept) {
		t.Errorf("NormGemv = %v, want %v (residual %v, was %v)", got, want, res, kept)
	}
	GemvSiluMul(want, normed, w, m, n, k)
	NormGemvSiluMul(got, res, normW, w, m, n, k, eps)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NormGemvSiluMul = %v, want %v", got, want)
	}
}

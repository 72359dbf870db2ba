package ref

import (
	"fmt"
	"math"
	"testing"
)

func TestAddRMSNormAgainstDirect(t *testing.T) {
	tests := []struct {
		rows, hidden int
		withAdd      bool
		eps          float32
	}{
		{1, 64, false, 1e-5},
		{3, 127, true, 1e-5},
		{5, 4096, true, 1e-6},
		{2, 1, true, 1e-5},
		{4, 33, false, 1e-1}, // large eps: checks eps sits inside the sqrt
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%d add=%v eps=%g", tc.rows, tc.hidden, tc.withAdd, tc.eps), func(t *testing.T) {
			r := newRand(10)
			n := tc.rows * tc.hidden
			residual := randomBF16(r, n, 1)
			before := append([]uint16(nil), residual...)
			weight := randomBF16(r, tc.hidden, 0.5)
			var add []uint16
			if tc.withAdd {
				add = randomBF16(r, n, 0.7)
			}

			out := make([]uint16, n)
			AddRMSNorm(out, residual, add, weight, tc.rows, tc.hidden, tc.eps)

			wantResidual := make([]float64, n)
			wantOut := make([]float64, n)
			for row := 0; row < tc.rows; row++ {
				var sumSquares float64
				for i := row * tc.hidden; i < (row+1)*tc.hidden; i++ {
					wantResidual[i] = f64(before[i])
					if add != nil {
						wantResidual[i] += f64(add[i])
					}
					sumSquares += wantResidual[i] * wantResidual[i]
				}
				rms := math.Sqrt(sumSquares/float64(tc.hidden) + float64(tc.eps))
				for i := row * tc.hidden; i < (row+1)*tc.hidden; i++ {
					// The direct formula uses the exact sum, so its only input is the bf16 residual.
					x := f64(residual[i])
					wantOut[i] = f64(weight[i%tc.hidden]) * x / rms
				}
			}
			// The residual is one bf16 rounding of an exact sum: half an ulp, 2^-9.
			checkRelErr(t, "residual", residual, wantResidual, 1.0/512)
			checkRelErr(t, "out", out, wantOut, 1e-2)
		})
	}
}

func TestAddRMSNormNilAddLeavesResidual(t *testing.T) {
	residual := randomBF16(newRand(11), 2*16, 1)
	before := append([]uint16(nil), residual...)
	weight := make([]uint16, 16)
	for i := range weight {
		weight[i] = 0x3f80
	}
	out := make([]uint16, len(residual))
	AddRMSNorm(out, residual, nil, weight, 2, 16, 1e-5)
	for i := range residual {
		if residual[i] != before[i] {
			t.Fatalf("residual[%d] changed without add", i)
		}
	}
}

func TestAddRMSNormInPlace(t *testing.T) {
	r := newRand(12)
	residual := randomBF16(r, 3*40, 1)
	add := randomBF16(r, 3*40, 1)
	weight := randomBF16(r, 40, 1)
	separate := make([]uint16, len(residual))
	residualCopy := append([]uint16(nil), residual...)
	AddRMSNorm(separate, residualCopy, add, weight, 3, 40, 1e-5)
	AddRMSNorm(residual, residual, add, weight, 3, 40, 1e-5)
	for i := range residual {
		if residual[i] != separate[i] {
			t.Fatalf("in-place out[%d] = %#04x, separate out %#04x", i, residual[i], separate[i])
		}
	}
}

// TestQKNormAgainstDirect holds QKNorm against the float64 formulas: the
// bias on every column, the norm on each q and k head (each head its own
// mean square), v untouched but for the bias.
func TestQKNormAgainstDirect(t *testing.T) {
	tests := []struct {
		tokens, heads, kvHeads, headDim int
		bias, norm                      bool
	}{
		{3, 4, 2, 64, false, true},  // Qwen3: norm only
		{2, 4, 2, 32, true, false},  // Qwen2: bias only
		{1, 32, 8, 128, true, true}, // both, at Qwen3-8B's heads
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("t%d h%d/%d d%d bias=%v norm=%v", tc.tokens, tc.heads, tc.kvHeads, tc.headDim, tc.bias, tc.norm), func(t *testing.T) {
			r := newRand(11)
			D, width := tc.headDim, (tc.heads+2*tc.kvHeads)*tc.headDim
			qkv := randomBF16(r, tc.tokens*width, 2)
			before := append([]uint16(nil), qkv...)
			var bias, qNorm, kNorm []uint16
			if tc.bias {
				bias = randomBF16(r, width, 0.5)
			}
			if tc.norm {
				qNorm, kNorm = randomBF16(r, D, 1), randomBF16(r, D, 1)
			}
			QKNorm(qkv, bias, qNorm, kNorm, tc.tokens, tc.heads, tc.kvHeads, D, 1e-6)
			want := make([]float64, len(qkv))
			for i := range want {
				want[i] = f64(before[i])
				if bias != nil {
					want[i] = f64(F32ToBF16(float32(want[i] + f64(bias[i%width])))) // the sum is stored in bf16
				}
			}
			for h := 0; tc.norm && h < tc.tokens*(tc.heads+2*tc.kvHeads); h++ {
				inRow := h % (tc.heads + 2*tc.kvHeads)
				if inRow >= tc.heads+tc.kvHeads {
					continue // v
				}
				w := qNorm
				if inRow >= tc.heads {
					w = kNorm
				}
				x := want[h*D : (h+1)*D]
				var ss float64
				for _, v := range x {
					ss += v * v
				}
				rms := math.Sqrt(ss/float64(D) + 1e-6)
				for i := range x {
					x[i] = f64(w[i]) * x[i] / rms
				}
			}
			checkRelErr(t, "qkv", qkv, want, 1e-2)
		})
	}
}

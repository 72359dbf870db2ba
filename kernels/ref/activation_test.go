package ref

import (
	"fmt"
	"math"
	"testing"
)

func TestSiluMulAgainstDirect(t *testing.T) {
	tests := []struct{ rows, inter int }{{1, 1}, {1, 64}, {3, 17}, {7, 14336 / 64}}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%d", tc.rows, tc.inter), func(t *testing.T) {
			gateUp := randomBF16(newRand(20), tc.rows*2*tc.inter, 3)
			out := make([]uint16, tc.rows*tc.inter)
			SiluMul(out, gateUp, tc.rows, tc.inter)
			want := make([]float64, len(out))
			for r := 0; r < tc.rows; r++ {
				for i := 0; i < tc.inter; i++ {
					g := f64(gateUp[r*2*tc.inter+i])
					up := f64(gateUp[r*2*tc.inter+tc.inter+i])
					want[r*tc.inter+i] = g / (1 + math.Exp(-g)) * up
				}
			}
			checkRelErr(t, "SiluMul", out, want, 1e-2)
		})
	}
}

func TestSiluMulExtremes(t *testing.T) {
	one := F32ToBF16(1)
	tests := []struct {
		gate float32
		want float32
	}{
		{0, 0},
		{-100, 0},  // exp(100) is finite in float64; silu → -0
		{100, 100}, // silu(x) = x for large x
		{-1e30, 0}, // exp overflows to +Inf: g/Inf = -0, never NaN
		{1e30, 1e30},
	}
	for _, tc := range tests {
		gateUp := []uint16{F32ToBF16(tc.gate), one}
		out := make([]uint16, 1)
		SiluMul(out, gateUp, 1, 1)
		if got := BF16ToF32(out[0]); got != RoundBF16(tc.want) {
			t.Errorf("silu(%g)*1 = %g, want %g", tc.gate, got, tc.want)
		}
	}
}

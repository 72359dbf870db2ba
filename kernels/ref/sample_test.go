package ref

import (
	"math"
	"testing"
)

func TestArgmax(t *testing.T) {
	nan := F32ToBF16(float32(math.NaN()))
	inf := F32ToBF16(float32(math.Inf(1)))
	negInf := F32ToBF16(float32(math.Inf(-1)))
	bf := func(vs ...float32) []uint16 {
		out := make([]uint16, len(vs))
		ToBF16(out, vs)
		return out
	}
	tests := []struct {
		name   string
		logits []uint16
		want   int32
	}{
		{"single", bf(-3), 0},
		{"max in middle", bf(1, 5, 2), 1},
		{"max last", bf(1, 2, 3), 2},
		{"all negative", bf(-4, -1, -2), 1},
		{"tie takes lowest", bf(1, 7, 3, 7, 7), 1},
		{"tie at start", bf(2, 2), 0},
		{"values equal after bf16 rounding", bf(1.0, 1.001), 0},
		{"NaN first never wins", []uint16{nan, F32ToBF16(-5), F32ToBF16(-6)}, 1},
		{"NaN among values", []uint16{F32ToBF16(1), nan, F32ToBF16(2), nan}, 2},
		{"all NaN gives 0", []uint16{nan, nan, nan}, 0},
		{"+Inf wins", []uint16{F32ToBF16(1e30), inf, F32ToBF16(3)}, 1},
		{"all -Inf gives first", []uint16{negInf, negInf}, 0},
		{"-0 and +0 tie", []uint16{0x8000, 0x0000}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := []int32{-7}
			Argmax(out, tc.logits, 1, len(tc.logits))
			if out[0] != tc.want {
				t.Errorf("Argmax = %d, want %d", out[0], tc.want)
			}
		})
	}
}

func TestArgmaxRowsAgainstDirect(t *testing.T) {
	const rows, vocab = 6, 1001
	logits := randomBF16(newRand(3), rows*vocab, 4)
	out := make([]int32, rows)
	Argmax(out, logits, rows, vocab)
	for r := 0; r < rows; r++ {
		best := 0
		for j := 1; j < vocab; j++ {
			if f64(logits[r*vocab+j]) > f64(logits[r*vocab+best]) {
				best = j
			}
		}
		if out[r] != int32(best) {
			t.Errorf("row %d: Argmax = %d, want %d", r, out[r], best)
		}
	}
}

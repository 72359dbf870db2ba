package ref

import (
	"math"
	"slices"
	"testing"
)

func TestEmbedExact(t *testing.T) {
	tests := []struct {
		name          string
		vocab, hidden int
		ids           []int32
	}{
		{"one token", 5, 8, []int32{3}},
		{"repeats and ends", 7, 13, []int32{0, 6, 6, 2, 0}},
		{"hidden 1", 3, 1, []int32{2, 1, 0}},
		{"no tokens", 4, 4, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table := randomBF16(newRand(1), tc.vocab*tc.hidden, 1)
			out := make([]uint16, len(tc.ids)*tc.hidden+1)
			const sentinel = 0xdead
			out[len(out)-1] = sentinel
			Embed(out, table, tc.ids, tc.hidden)
			for tok, id := range tc.ids {
				for j := 0; j < tc.hidden; j++ {
					if got, want := out[tok*tc.hidden+j], table[int(id)*tc.hidden+j]; got != want {
						t.Fatalf("out[%d,%d] = %#04x, want %#04x", tok, j, got, want)
					}
				}
			}
			if out[len(out)-1] != sentinel {
				t.Errorf("Embed wrote past len(ids)*hidden")
			}
		})
	}
}

func TestEmbedBadIDPanics(t *testing.T) {
	table := make([]uint16, 4*2)
	out := make([]uint16, 2*2)
	mustPanic(t, "id = vocab", func() { Embed(out, table, []int32{0, 4}, 2) })
	mustPanic(t, "negative id", func() { Embed(out, table, []int32{-1}, 2) })
	mustPanic(t, "short out", func() { Embed(out[:3], table, []int32{0, 1}, 2) })
}

func TestGatherLast(t *testing.T) {
	tests := []struct{ batch, seqLen, width int }{{1, 1, 4}, {3, 5, 7}, {2, 1, 3}, {4, 9, 1}}
	for _, tc := range tests {
		in := randomBF16(newRand(2), tc.batch*tc.seqLen*tc.width, 1)
		out := make([]uint16, tc.batch*tc.width)
		GatherLast(out, in, tc.batch, tc.seqLen, tc.width)
		for b := 0; b < tc.batch; b++ {
			want := in[((b+1)*tc.seqLen-1)*tc.width:][:tc.width]
			if got := out[b*tc.width:][:tc.width]; !slices.Equal(got, want) {
				t.Errorf("%+v: row %d = %v, want %v", tc, b, got, want)
			}
		}
	}
}

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

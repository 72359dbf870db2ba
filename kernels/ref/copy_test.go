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

func TestAddI32(t *testing.T) {
	buf := []int32{0, -5, 7, math.MaxInt32}
	AddI32(buf, 3)
	if want := []int32{3, -2, 10, math.MinInt32 + 2}; !slices.Equal(buf, want) {
		t.Errorf("AddI32 = %v, want %v", buf, want)
	}
}

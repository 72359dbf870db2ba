package ref

import (
	"math/rand/v2"
	"testing"
)

// Splitting a row's vocabulary over ranks, taking each shard's key and the
// maximum over the ranks gives exactly Argmax of the whole row: ties to the
// first index, NaN never winning, -0 equal to +0, all-NaN rows giving 0.
func TestArgmaxKeysOverShardsEqualArgmax(t *testing.T) {
	const vocab, rows = 1000, 8
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]uint16, rows*vocab)
	for i := range logits {
		logits[i] = F32ToBF16(float32(rng.NormFloat64()))
	}
	row := func(r int) []uint16 { return logits[r*vocab : (r+1)*vocab] }
	const nan = 0x7fc0
	row(1)[700], row(1)[300] = F32ToBF16(50), F32ToBF16(50) // a tie across shards: 300 wins
	for i := range row(2) {
		row(2)[i] = nan
	}
	for i := range row(3) {
		row(3)[i] = F32ToBF16(-1)
	}
	row(3)[999], row(3)[2] = 0x8000, 0x0000 // -0 at 999, +0 at 2: equal, 2 wins
	for i := range row(4) {
		row(4)[i] = 0x8000
	}
	row(4)[5] = 0 // all zeros of either sign: the first index
	row(5)[0], row(5)[999] = nan, F32ToBF16(1e30)
	for i := range row(6) {
		row(6)[i] = 0xff80 // -inf everywhere: index 0
	}
	want := make([]int32, rows)
	Argmax(want, logits, rows, vocab)
	for _, size := range []int{1, 2, 3, 7} {
		best := make([]uint64, rows)
		for rank := 0; rank < size; rank++ {
			start, end := rank*vocab/size, (rank+1)*vocab/size
			shard := make([]uint16, 0, rows*(end-start))
			for r := 0; r < rows; r++ {
				shard = append(shard, row(r)[start:end]...)
			}
			keys := make([]uint64, rows)
			ArgmaxKeys(keys, shard, rows, end-start, start)
			for r := range best {
				best[r] = max(best[r], keys[r])
			}
		}
		got := make([]int32, rows)
		KeyIndex(got, best, rows)
		for r := range got {
			if got[r] != want[r] {
				t.Errorf("%d shards, row %d: %d, Argmax %d", size, r, got[r], want[r])
			}
		}
	}
}

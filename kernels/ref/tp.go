// tp.go is the twin of kernels/tp.cu: the vocabulary-parallel argmax of
// tensor parallelism.

package ref

import "math"

// ArgmaxKey is the 64-bit key of logit v at vocabulary index i: keys order
// as ref.Argmax orders candidates (a larger value wins; among equal values
// the lower index), so the largest key over any split of a row is the key
// of the row's argmax. The high word is v's bits made to order as unsigned
// integers (-0 taken as +0, so equal values have equal words); the low word
// is 0xFFFFFFFF − i. Every such key is above 0, which stands for "no value"
// (a row of NaN).
func ArgmaxKey(v float32, i int) uint64 {
	if v == 0 {
		v = 0 // -0 → +0
	}
	u := math.Float32bits(v)
	if u&0x80000000 != 0 {
		u = ^u
	} else {
		u |= 0x80000000
	}
	return uint64(u)<<32 | uint64(0xFFFFFFFF-uint32(i))
}

// ArgmaxKeys writes, for each of `rows` rows of `vocab` bf16 logits whose
// column j is the vocabulary's index vocabStart+j, the largest ArgmaxKey
// of the row's non-NaN values, or 0 when there are none.
//
// Preconditions: rows >= 0, vocab >= 1, vocabStart >= 0, len(keys) >= rows,
// len(logits) >= rows*vocab.
func ArgmaxKeys(keys []uint64, logits []uint16, rows, vocab, vocabStart int) {
	needShape("ArgmaxKeys", rows >= 0 && vocab >= 1 && vocabStart >= 0, "bad shape rows %d vocab %d start %d", rows, vocab, vocabStart)
	needLen("ArgmaxKeys", "keys", len(keys), rows)
	needLen("ArgmaxKeys", "logits", len(logits), rows*vocab)
	for r := 0; r < rows; r++ {
		var best uint64
		for j, bits := range logits[r*vocab : (r+1)*vocab] {
			v := BF16ToF32(bits)
			if v != v { // NaN never wins
				continue
			}
			best = max(best, ArgmaxKey(v, vocabStart+j))
		}
		keys[r] = best
	}
}

// KeyIndex writes out[r] = the vocabulary index keys[r] holds, 0 for the
// key 0 (a row of NaN), as ref.Argmax gives for such a row.
//
// Preconditions: rows >= 0, len(out) >= rows, len(keys) >= rows.
func KeyIndex(out []int32, keys []uint64, rows int) {
	needShape("KeyIndex", rows >= 0, "bad rows %d", rows)
	needLen("KeyIndex", "out", len(out), rows)
	needLen("KeyIndex", "keys", len(keys), rows)
	for r := 0; r < rows; r++ {
		if keys[r] == 0 {
			out[r] = 0
			continue
		}
		out[r] = int32(0xFFFFFFFF - uint32(keys[r]))
	}
}

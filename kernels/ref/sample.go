// sample.go is the twin of kernels/sample.cu: greedy sampling.

package ref

// Argmax writes, for each of `rows` rows of `vocab` bf16 logits, the index of
// the largest value. Ties go to the lowest index and NaN never wins; a row
// that is all NaN yields 0 (the CUDA kernel must do the same).
//
// Preconditions: rows >= 0, vocab >= 1, len(out) >= rows, len(logits) >= rows*vocab.
func Argmax(out []int32, logits []uint16, rows, vocab int) {
	needShape("Argmax", rows >= 0 && vocab >= 1, "bad shape rows %d vocab %d", rows, vocab)
	needLen("Argmax", "out", len(out), rows)
	needLen("Argmax", "logits", len(logits), rows*vocab)
	for r := 0; r < rows; r++ {
		row := logits[r*vocab : (r+1)*vocab]
		best := -1
		var bestValue float32
		for j, bits := range row {
			v := BF16ToF32(bits)
			if v != v { // NaN
				continue
			}
			// Strictly greater: the first of equal values stays.
			if best < 0 || v > bestValue {
				best, bestValue = j, v
			}
		}
		if best < 0 {
			best = 0
		}
		out[r] = int32(best)
	}
}

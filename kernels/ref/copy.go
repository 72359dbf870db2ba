// copy.go is the twin of kernels/copy.cu: row copies and the position counter.

package ref

// Embed copies one table row per token: out[t*hidden+j] = table[ids[t]*hidden+j]
// for t < len(ids). table is [vocab, hidden].
//
// Preconditions: hidden >= 0, len(out) >= len(ids)*hidden, and every id lies in
// [0, len(table)/hidden); otherwise Embed panics before writing.
func Embed(out, table []uint16, ids []int32, hidden int) {
	needShape("Embed", hidden >= 0, "hidden %d < 0", hidden)
	needLen("Embed", "out", len(out), len(ids)*hidden)
	if hidden == 0 {
		return
	}
	vocab := len(table) / hidden
	for t, id := range ids {
		needShape("Embed", id >= 0 && int(id) < vocab, "ids[%d] = %d outside [0, %d)", t, id, vocab)
	}
	for t, id := range ids {
		copy(out[t*hidden:(t+1)*hidden], table[int(id)*hidden:(int(id)+1)*hidden])
	}
}

// GatherLast copies the last row of each sequence: out[b, :] = in[b*seqLen+seqLen-1, :],
// width columns each. It picks the rows the LM head needs after prefill.
//
// Preconditions: batch, width >= 0, seqLen >= 1, len(in) >= batch*seqLen*width,
// len(out) >= batch*width.
func GatherLast(out, in []uint16, batch, seqLen, width int) {
	needShape("GatherLast", batch >= 0 && width >= 0 && seqLen >= 1,
		"bad shape batch %d seqLen %d width %d", batch, seqLen, width)
	needLen("GatherLast", "in", len(in), batch*seqLen*width)
	needLen("GatherLast", "out", len(out), batch*width)
	for b := 0; b < batch; b++ {
		row := b*seqLen + seqLen - 1
		copy(out[b*width:(b+1)*width], in[row*width:(row+1)*width])
	}
}

// AddI32 adds delta to every element of buf (int32 wrap-around, as the
// kernel's add). The engine advances its device-side position with it at
// the end of every step.
func AddI32(buf []int32, delta int32) {
	for i := range buf {
		buf[i] += delta
	}
}

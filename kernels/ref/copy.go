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

// GatherLastRagged copies the last new row of each sequence of a ragged
// step: out[b, :] = in[queryStart[b+1]−1, :], width columns each (the rows
// the LM head needs after a varlen prefill).
//
// Preconditions: width >= 0, queryStart [batch+1] increasing strictly from
// 0 (every sequence brings a token), len(in) >= queryStart[batch]*width,
// len(out) >= batch*width.
func GatherLastRagged(out, in []uint16, queryStart []int32, width int) {
	const op = "GatherLastRagged"
	batch := max(len(queryStart)-1, 0)
	needShape(op, width >= 0 && len(queryStart) >= 1 && queryStart[0] == 0, "bad shape width %d query starts %v", width, queryStart)
	for b := range batch {
		needShape(op, queryStart[b+1] > queryStart[b], "sequence %d has no new rows (%v)", b, queryStart)
	}
	needLen(op, "in", len(in), int(queryStart[batch])*width)
	needLen(op, "out", len(out), batch*width)
	for b := range batch {
		row := int(queryStart[b+1]) - 1
		copy(out[b*width:(b+1)*width], in[row*width:(row+1)*width])
	}
}

// KVAdvance moves a decode step's paged-cache view one token on, as the
// engine does on the device after every decode step (one new token per
// sequence, row b of the step is sequence b): positions[b]++,
// seqLens[b]++, and slots[b] becomes the slot of the new positions[b]
// through the block table ([batch][maxPages], pages of pageSize tokens),
// −1 where that position lies past the table. pos, when non-nil, is the
// contiguous kernels' one start position: pos[0]++.
//
// Preconditions: pageSize and maxPages >= 1, every slice as long as its
// shape, and positions non-negative.
func KVAdvance(positions, seqLens []int32, slots []int64, blockTable, pos []int32, batch, pageSize, maxPages int) {
	const op = "KVAdvance"
	needShape(op, batch >= 0 && pageSize >= 1 && maxPages >= 1, "bad shape batch %d page size %d pages %d", batch, pageSize, maxPages)
	needLen(op, "positions", len(positions), batch)
	needLen(op, "seqLens", len(seqLens), batch)
	needLen(op, "slots", len(slots), batch)
	needLen(op, "blockTable", len(blockTable), batch*maxPages)
	for b := range batch {
		positions[b]++
		seqLens[b]++
		page := int(positions[b]) / pageSize
		if page >= maxPages {
			slots[b] = -1
			continue
		}
		slots[b] = int64(blockTable[b*maxPages+page])*int64(pageSize) + int64(positions[b])%int64(pageSize)
	}
	if len(pos) > 0 {
		pos[0]++
	}
}

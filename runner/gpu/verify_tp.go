package gpu

import (
	"fmt"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// verifyArgmaxKeys checks tensor parallelism's vocabulary-parallel argmax
// (kernels/tp.cu) against its twins, bit for bit: argmax_keys on a slice of
// the model's vocabulary (odd width, offset start) with ties, NaN, -0 and
// all-NaN rows, then key_index on the keys it wrote.
func (v *Verifier) verifyArgmaxKeys(m kernels.ModelShape) {
	const rows = 6
	vocab := m.Vocab/3 + 1 // a rank's slice: odd, so the scalar path runs too
	start := m.Vocab - vocab
	logits := RandomBF16(v.rng, rows*vocab, 0, 3)
	row := func(r int) []uint16 { return logits[r*vocab : (r+1)*vocab] }
	const nan, bigValue = 0x7fc0, 0x4300
	row(1)[vocab-2], row(1)[vocab/3] = bigValue, bigValue // a tie: the first index wins
	for i := range row(2) {
		row(2)[i] = poisonBF16 // all NaN: key 0, index 0
	}
	for i := range row(3) {
		row(3)[i] = 0x8000 // -0 everywhere but one +0: all equal, the first wins
	}
	row(3)[vocab-1] = 0
	row(4)[0], row(4)[vocab-1] = nan, bigValue
	want := make([]uint64, rows)
	ref.ArgmaxKeys(want, logits, rows, vocab, start)
	wantIdx := make([]int32, rows)
	ref.KeyIndex(wantIdx, want, rows)
	keys, idx, dLogits := v.alloc(8*rows), v.alloc(4*rows), v.bf16(logits)
	if v.err == nil {
		v.fail(v.stream.Memset32(keys, 0xFFFFFFFF, 2*rows))
		v.fail(v.stream.Memset32(idx, 0xFFFFFFFF, rows))
	}
	v.launch(func() error { return v.set.ArgmaxKeys(v.stream, keys, dLogits, rows, vocab, start) })
	v.launch(func() error { return v.set.KeyIndex(v.stream, idx, keys, rows) })
	raw := v.getI32(keys, 2*rows)
	got := make([]uint64, rows)
	for r := range got {
		got[r] = uint64(uint32(raw[2*r])) | uint64(uint32(raw[2*r+1]))<<32
	}
	err := equalBits(got, want)
	if err == nil {
		err = equalBits(v.getI32(idx, rows), wantIdx)
	}
	v.record("argmax_keys", fmt.Sprintf("%s rows=%d vocab=%d from %d", m.Name, rows, vocab, start), 0, true, err)
}

package gpu

import (
	"errors"
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// ropeAttentionTheta is the RoPE base of the fused decode check's inverse
// frequencies (Llama-3's); any base exercises the same code.
const ropeAttentionTheta = 500000

// verifyRopeAttentionAt checks attn_decode version 5 (RopeAttention, the
// rope_kv_write and decode attention of one step in one launch) at c's
// shape: from the same qkv rows and caches, its output and both caches
// (every row: the new token's, and all the others untouched) must have the
// bits of rope_kv_write version 2 then attn_decode version 4, and its
// output must match the reference within the bound. The fused run's new
// cache rows start poisoned, so that a missing write, or a read before
// the write, shows.
func (v *Verifier) verifyRopeAttentionAt(check string, c *attentionCase) {
	a := c.a
	qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qkv := RandomBF16(v.rng, a.Batch*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, ropeAttentionTheta, nil)
	// The reference: rope_kv_write, then attention, on host copies.
	wantK, wantV := append([]uint16(nil), c.kCache...), append([]uint16(nil), c.vCache...)
	q := make([]uint16, a.Batch*qWidth)
	ref.RopeKVWrite(q, wantK, wantV, qkv, invFreq, a.Batch, 1, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
	want := make([]uint16, a.Batch*qWidth)
	ref.Attention(want, q, wantK, wantV, a.Batch, 1, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)

	unfused := v.set.With(kernels.Selection{kernels.OpRope: 2, kernels.OpAttnDecode: 4})
	fused := v.set.With(kernels.Selection{kernels.OpRope: 2, kernels.OpAttnDecode: 5})
	dQKV, dFreq, pos := v.bf16(qkv), v.f32(invFreq), v.i32([]int32{int32(a.StartPos)})
	wsBytes := fused.AttentionWorkspaceBytes(a)
	ws := v.alloc(wsBytes)
	v.launch(func() error { return fused.ZeroAttentionWorkspace(v.stream, ws, wsBytes) })

	k4, v4, q4, out4 := v.bf16(c.kCache), v.bf16(c.vCache), v.poisoned(len(q)), v.poisoned(len(want))
	v.launch(func() error { return unfused.RopeKVWrite(v.stream, q4, k4, v4, dQKV, dFreq, KVPtrs{Pos: pos}, a) })
	v.launch(func() error { return unfused.Attention(v.stream, out4, q4, k4, v4, KVPtrs{Pos: pos}, ws, wsBytes, a) })

	k5, v5, out5 := v.bf16(c.kCache), v.bf16(c.vCache), v.poisoned(len(want))
	for b := 0; b < a.Batch && v.err == nil; b++ {
		at := cuda.DevPtr(2 * (b*a.MaxSeq + a.StartPos) * kvWidth)
		v.fail(v.stream.Memset16(k5+at, poisonBF16, kvWidth))
		v.fail(v.stream.Memset16(v5+at, poisonBF16, kvWidth))
	}
	v.launch(func() error {
		return fused.RopeAttention(v.stream, out5, dQKV, k5, v5, dFreq, KVPtrs{Pos: pos}, ws, wsBytes, a)
	})

	got := v.getBF16(out5, len(want))
	rel, err := closeBF16(got, want)
	for _, cmp := range []struct {
		what      string
		got, want []uint16
	}{
		{"output", got, v.getBF16(out4, len(want))},
		{"k cache", v.getBF16(k5, len(c.kCache)), v.getBF16(k4, len(c.kCache))},
		{"v cache", v.getBF16(v5, len(c.vCache)), v.getBF16(v4, len(c.vCache))},
	} {
		if e := equalBits(cmp.got, cmp.want); e != nil {
			err = errors.Join(err, fmt.Errorf("%s not bit-identical to rope_kv_write v2 + attn_decode v4: %w", cmp.what, e))
		}
	}
	// The fused launch's bytes in the cost model: rope_kv_write's and
	// attention's, as the step counts them (the counters list the unfused
	// reference's kernels beside attn_decode5's, each by name).
	v.modelBytes = costBytes("rope_kv_write", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.RopeKVWrite(b(1), b(1), b(1), b(1), b(1), runner.KVView{Pos: b(1)}, a)
	}) + costBytes("attention", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Attention(b(1), b(1), b(1), b(1), runner.KVView{Pos: b(1)}, a)
	})
	v.record(check, FormatShape(a), rel, false, err)
}

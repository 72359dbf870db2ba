package gpu

import (
	"fmt"
	"math"
	"slices"

	"stepbench/cuda"
	"stepbench/kernels"
)

// KVPtrs are the device addresses of a step's view of the cache
// (runner.KVView): Pos alone for a uniform contiguous step, the rest for a
// tabled one (kernels.AttnShape.Tabled).
type KVPtrs struct {
	Pos, BlockTable, SeqLens, QueryStart, Positions, SlotMapping cuda.DevPtr
	// KScale and VScale are an FP8 cache's layer's scales, F32[kvHeads]
	// (runner.KVView); 0 for a bf16 cache.
	KScale, VScale cuda.DevPtr
}

// checkFP8Scales checks an FP8 cache's scale pointers (a bf16 cache
// takes none).
func checkFP8Scales(c *argCheck, a kernels.AttnShape, kv KVPtrs) {
	if a.Cache.FP8() {
		c.pointer("k scale", kv.KScale, 4)
		c.pointer("v scale", kv.VScale, 4)
	}
}

// fp8Flag is the FP8 kernels' e5m2 argument.
func fp8Flag(a kernels.AttnShape) int32 {
	if a.Cache == kernels.CacheE5M2 {
		return 1
	}
	return 0
}

// checkTabledShape checks what every block-table kernel needs of a tabled
// shape: the cache's geometry (slots addressable by int32 rows), the
// lengths' count, and the pointers of the view.
func checkTabledShape(c *argCheck, a kernels.AttnShape, kv KVPtrs) {
	c.count("batch", a.Batch)
	c.positive("heads", a.Heads)
	c.positive("kvHeads", a.KVHeads)
	c.positive("headDim", a.HeadDim)
	c.positive("pageSize", a.PageSize)
	c.positive("numPages", a.NumPages)
	c.positive("maxPages", a.MaxPages)
	c.require(a.KVHeads > 0 && a.Heads%a.KVHeads == 0, "heads = %d is not a multiple of kvHeads = %d", a.Heads, a.KVHeads)
	c.require(int64(a.NumPages)*int64(a.PageSize) <= math.MaxInt32 && int64(a.MaxPages)*int64(a.PageSize) <= math.MaxInt32,
		"%d or %d pages of %d tokens: more slots than int32 positions", a.NumPages, a.MaxPages, a.PageSize)
	c.require(a.QLens == nil || len(a.QLens) == a.Batch, "%d query lengths for batch %d", len(a.QLens), a.Batch)
	c.require(a.SeqLens == nil || len(a.SeqLens) == a.Batch, "%d sequence lengths for batch %d", len(a.SeqLens), a.Batch)
	c.require(int64(a.Tokens()) <= math.MaxInt32, "%d tokens", a.Tokens())
	c.pointer("block table", kv.BlockTable, 4)
	c.pointer("sequence lengths", kv.SeqLens, 4)
	c.pointer("query starts", kv.QueryStart, 4)
}

// maxQueryLen is the most new tokens of any sequence of a tabled shape.
func maxQueryLen(a kernels.AttnShape) int {
	if a.QLens == nil {
		return a.SeqLen
	}
	return max(a.SeqLen, slices.Max(append([]int{0}, a.QLens...)))
}

// ropeKVWriteTabled is RopeKVWrite at a tabled shape: rope_kv_write
// version 3 (rope_kv_write3), each token's position and slot read from kv.
func (k *Kernels) ropeKVWriteTabled(s *cuda.Stream, q, kCache, vCache, qkv, invFreq cuda.DevPtr, kv KVPtrs, a kernels.AttnShape) error {
	if ran, err := k.libRopeKVWrite(s, q, kCache, vCache, qkv, invFreq, kv, a); ran || err != nil {
		return err
	}
	c := argCheck{op: "rope_kv_write"}
	checkTabledShape(&c, a, kv)
	checkFP8Scales(&c, a, kv)
	c.require(a.HeadDim%16 == 0 && a.HeadDim <= kernels.RopeMaxHeadDim, "headDim = %d, want a multiple of 16 <= %d", a.HeadDim, kernels.RopeMaxHeadDim)
	for _, p := range []struct {
		name  string
		ptr   cuda.DevPtr
		align int
	}{{"q", q, 16}, {"kCache", kCache, 16}, {"vCache", vCache, 16}, {"qkv", qkv, 16}, {"invFreq", invFreq, 4},
		{"positions", kv.Positions, 4}, {"slot mapping", kv.SlotMapping, 8}} {
		c.pointer(p.name, p.ptr, p.align)
	}
	tokens := a.Tokens()
	if err := c.err(); err != nil || tokens == 0 {
		return err
	}
	if _, err := k.sel.RopeVersionAt(a); err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	if a.Cache.FP8() {
		return k.launch(s, c.op, "rope_kv_write4", cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
			cuda.Dim3{X: kernels.RopeThreads, Y: 1, Z: 1}, 0,
			q, kCache, vCache, qkv, invFreq, kv.Positions, kv.SlotMapping, int32(tokens),
			int32(a.Heads), int32(a.KVHeads), int32(a.HeadDim), int64(a.NumPages)*int64(a.PageSize),
			kv.KScale, kv.VScale, fp8Flag(a))
	}
	return k.launch(s, c.op, "rope_kv_write3", cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.RopeThreads, Y: 1, Z: 1}, 0,
		q, kCache, vCache, qkv, invFreq, kv.Positions, kv.SlotMapping, int32(tokens),
		int32(a.Heads), int32(a.KVHeads), int32(a.HeadDim), int64(a.NumPages)*int64(a.PageSize))
}

// attentionTabled is Attention at a tabled shape: decode (every sequence
// one new token) on attn_decode version 6, anything else on attn_prefill
// version 4, the lengths, starts and pages read from kv.
func (k *Kernels) attentionTabled(s *cuda.Stream, out, q, kCache, vCache cuda.DevPtr, kv KVPtrs, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	if ran, err := k.libAttention(s, out, q, kCache, vCache, kv, a); ran || err != nil {
		return err
	}
	c := argCheck{op: "attention"}
	checkTabledShape(&c, a, kv)
	checkFP8Scales(&c, a, kv)
	c.require(slices.Contains(kernels.SupportedHeadDims, a.HeadDim), "headDim = %d, want one of %v", a.HeadDim, kernels.SupportedHeadDims)
	c.require(a.Heads <= kernels.MaxGridYZ && a.KVHeads <= kernels.MaxGridYZ && a.Batch <= kernels.MaxGridYZ,
		"heads %d, kvHeads %d, batch %d: each at most %d", a.Heads, a.KVHeads, a.Batch, kernels.MaxGridYZ)
	c.pointer("out", out, 4)
	c.pointer("q", q, 16)
	c.pointer("kCache", kCache, 16)
	c.pointer("vCache", vCache, 16)
	if err := c.err(); err != nil || a.Batch == 0 || a.Tokens() == 0 {
		return err
	}
	decode := tabledDecode(a)
	if decode {
		return k.decodeTabled(s, &c, out, q, kCache, vCache, kv, workspace, workspaceBytes, a)
	}
	if _, err := k.sel.PrefillVersion(a); err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	if a.Cache.FP8() {
		return k.launch(s, c.op, kernels.EntryPoint("attn_prefill5", a.HeadDim),
			cuda.Dim3{X: uint32(kernels.CeilDiv(maxQueryLen(a), kernels.Prefill4QueryTile)), Y: uint32(a.Heads), Z: uint32(a.Batch)},
			cuda.Dim3{X: kernels.Prefill4Threads, Y: 1, Z: 1}, kernels.Prefill5SharedBytes(a.HeadDim),
			out, q, kCache, vCache, kv.BlockTable, kv.SeqLens, kv.QueryStart, int32(a.Heads), int32(a.KVHeads),
			int32(a.PageSize), int32(kernels.PageShift(a.PageSize)), int32(a.MaxPages), kv.KScale, kv.VScale, fp8Flag(a))
	}
	return k.launch(s, c.op, kernels.EntryPoint("attn_prefill4", a.HeadDim),
		cuda.Dim3{X: uint32(kernels.CeilDiv(maxQueryLen(a), kernels.Prefill4QueryTile)), Y: uint32(a.Heads), Z: uint32(a.Batch)},
		cuda.Dim3{X: kernels.Prefill4Threads, Y: 1, Z: 1}, kernels.Prefill4SharedBytes(a.HeadDim),
		out, q, kCache, vCache, kv.BlockTable, kv.SeqLens, kv.QueryStart, int32(a.Heads), int32(a.KVHeads),
		int32(a.PageSize), int32(kernels.PageShift(a.PageSize)), int32(a.MaxPages))
}

// tabledDecode reports whether a tabled shape is a decode step: one new
// token per sequence, row b sequence b's.
func tabledDecode(a kernels.AttnShape) bool {
	return maxQueryLen(a) == 1 && a.Tokens() == a.Batch
}

// decodeTabled launches attn_decode version 6 (attn_decode6_dD_gG) over
// the grid kernels.Decode6Grid sizes from the batch and the GPU alone.
func (k *Kernels) decodeTabled(s *cuda.Stream, c *argCheck, out, q, kCache, vCache cuda.DevPtr, kv KVPtrs, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	if _, err := k.sel.DecodeVersion(a); err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	g := kernels.Decode2Group(a)
	target, items := kernels.Decode6Grid(a, k.smCount)
	need := kernels.Decode6WorkspaceBytes(a, k.smCount)
	c.pointer("workspace", workspace, 16)
	c.require(workspaceBytes >= need, "workspace has %d bytes, need %d (see AttentionWorkspaceBytes)", workspaceBytes, need)
	c.require(items <= math.MaxInt32, "%d blocks per kv head", items)
	if err := c.err(); err != nil {
		return err
	}
	if a.Cache.FP8() {
		return k.launch(s, c.op, kernels.GroupEntryPoint("attn_decode7", a.HeadDim, g),
			cuda.Dim3{X: uint32(items), Y: uint32(a.KVHeads), Z: 1}, cuda.Dim3{X: kernels.Decode6Warps * 32, Y: 1, Z: 1},
			kernels.Decode6SharedBytes(a.HeadDim, g),
			out, workspace, q, kCache, vCache, kv.BlockTable, kv.SeqLens, int32(a.Batch), int32(a.Heads), int32(a.KVHeads),
			int32(a.PageSize), int32(kernels.PageShift(a.PageSize)), int32(a.MaxPages), int32(target), kv.KScale, kv.VScale, fp8Flag(a))
	}
	return k.launch(s, c.op, kernels.GroupEntryPoint("attn_decode6", a.HeadDim, g),
		cuda.Dim3{X: uint32(items), Y: uint32(a.KVHeads), Z: 1}, cuda.Dim3{X: kernels.Decode6Warps * 32, Y: 1, Z: 1},
		kernels.Decode6SharedBytes(a.HeadDim, g),
		out, workspace, q, kCache, vCache, kv.BlockTable, kv.SeqLens, int32(a.Batch), int32(a.Heads), int32(a.KVHeads),
		int32(a.PageSize), int32(kernels.PageShift(a.PageSize)), int32(a.MaxPages), int32(target))
}

// AdvanceKV moves a tabled decode step's view one token on
// (ref.KVAdvance), one thread per sequence: positions, lengths and slots
// of kv, and the start position kv.Pos when it is set.
func (k *Kernels) AdvanceKV(s *cuda.Stream, kv KVPtrs, a kernels.AttnShape) error {
	c := argCheck{op: "advance_kv"}
	c.count("batch", a.Batch)
	c.positive("pageSize", a.PageSize)
	c.positive("maxPages", a.MaxPages)
	c.require(a.Tokens() == a.Batch, "%d tokens for batch %d: a decode step's view has one per sequence", a.Tokens(), a.Batch)
	c.pointer("positions", kv.Positions, 4)
	c.pointer("sequence lengths", kv.SeqLens, 4)
	c.pointer("slot mapping", kv.SlotMapping, 8)
	c.pointer("block table", kv.BlockTable, 4)
	c.require(kv.Pos%4 == 0, "pos = %#x is not 4-byte aligned", uint64(kv.Pos))
	if err := c.err(); err != nil || (a.Batch == 0 && kv.Pos == 0) {
		return err
	}
	return k.launch(s, c.op, "kv_advance", cuda.Dim3{X: uint32(max(1, kernels.CeilDiv(a.Batch, kernels.KVAdvanceThreads))), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.KVAdvanceThreads, Y: 1, Z: 1}, 0,
		kv.Positions, kv.SeqLens, kv.SlotMapping, kv.BlockTable, kv.Pos, int32(a.Batch), int32(a.PageSize), int32(a.MaxPages))
}

// GatherLastRagged copies each sequence's last new row (ref.GatherLastRagged):
// out[b, :] = in[queryStart[b+1]−1, :]; in holds inRows rows of width.
func (k *Kernels) GatherLastRagged(s *cuda.Stream, out, in, queryStart cuda.DevPtr, batch, width, inRows int) error {
	c := argCheck{op: "gather_last"}
	c.count("batch", batch)
	c.positive("width", width)
	c.count("inRows", inRows)
	c.pointer("out", out, 2)
	c.pointer("in", in, 2)
	c.pointer("query starts", queryStart, 4)
	if err := c.err(); err != nil || batch == 0 {
		return err
	}
	vec := aligned16(width, out, in)
	return k.launch(s, c.op, "gather_last_ragged", cuda.Dim3{X: uint32(batch), Y: 1, Z: 1},
		cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, out, in, queryStart, int32(batch), int32(width), int32(inRows), flag(vec))
}

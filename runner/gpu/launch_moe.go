package gpu

import (
	"stepbench/cuda"
	"stepbench/kernels"
)

// MoE version 1 (kernels/moe.cu; twins in kernels/ref/moe.go).

// MoETopK: each token's k experts and weights from its router logits
// [tokens, experts] (ref.RouterTopK): ids, weights [tokens, k] int32 and
// float32; renormalize divides the k weights by their sum.
func (k *Kernels) MoETopK(s *cuda.Stream, ids, weights, logits cuda.DevPtr, tokens, experts, topK int, renormalize bool) error {
	c := argCheck{op: "moe_topk"}
	c.count("tokens", tokens)
	c.require(experts >= 1 && experts <= kernels.MoEMaxExperts, "experts = %d, want 1..%d", experts, kernels.MoEMaxExperts)
	c.require(topK >= 1 && topK <= min(experts, 32), "k = %d, want 1..min(experts, 32)", topK)
	c.pointer("ids", ids, 4)
	c.pointer("weights", weights, 4)
	c.pointer("logits", logits, 2)
	if err := c.err(); err != nil || tokens == 0 {
		return err
	}
	perBlock := kernels.MoEThreads / 32
	return k.launch(s, c.op, "moe_topk", cuda.Dim3{X: uint32(kernels.CeilDiv(tokens, perBlock)), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.MoEThreads, Y: 1, Z: 1}, 0, ids, weights, logits, int32(tokens), int32(experts), int32(topK), flag(renormalize))
}

// MoEAlignSortedLen is the length of MoEAlign's sorted buffer: every slot
// and each expert's padding at most (vLLM's max_num_tokens_padded).
func MoEAlignSortedLen(slots, experts, block int) int { return slots + experts*(block-1) }

// MoEAlign groups the slots of ids [slots] by expert, each group padded to
// a multiple of block with the value slots (ref.MoEAlign): sorted holds
// MoEAlignSortedLen ints, expertOf one per block of it, numPadded one.
func (k *Kernels) MoEAlign(s *cuda.Stream, sorted, expertOf, numPadded, ids cuda.DevPtr, slots, experts, block int) error {
	c := argCheck{op: "moe_align"}
	c.count("slots", slots)
	c.require(experts >= 1 && experts <= kernels.MoEAlignMaxExperts, "experts = %d, want 1..%d", experts, kernels.MoEAlignMaxExperts)
	c.positive("block", block)
	c.pointer("sorted", sorted, 4)
	c.pointer("expertOf", expertOf, 4)
	c.pointer("numPadded", numPadded, 4)
	c.pointer("ids", ids, 4)
	if err := c.err(); err != nil {
		return err
	}
	return k.launch(s, c.op, "moe_align", cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: kernels.MoEAlignThreads, Y: 1, Z: 1}, 0,
		sorted, expertOf, numPadded, ids, int32(slots), int32(experts), int32(block))
}

// MoEDecode is the fused MoE layer of a few tokens (ref.FusedMoE): act
// [tokens·k, inter] and y [tokens·k, hidden] are bf16 scratch; w13 [E,
// 2·inter, hidden], w2 [E, hidden, inter]; ids, weights [tokens, k] from
// MoETopK. Three launches: gate_up with SiLU·mul, down with the routing
// weight, the sum over the top-k.
func (k *Kernels) MoEDecode(s *cuda.Stream, out, x, w13, w2, ids, weights, act, y cuda.DevPtr, tokens, topK, hidden, inter int) error {
	c := argCheck{op: "moe_decode"}
	c.count("tokens", tokens)
	c.positive("k", topK)
	c.require(hidden > 0 && hidden%8 == 0, "hidden = %d, want a positive multiple of 8", hidden)
	c.require(inter > 0 && inter%8 == 0, "inter = %d, want a positive multiple of 8", inter)
	c.require(tokens*topK <= kernels.MaxGridYZ, "tokens·k = %d, want at most %d", tokens*topK, kernels.MaxGridYZ)
	for i, p := range []cuda.DevPtr{out, x, w13, w2, act, y} {
		c.pointer([]string{"out", "x", "w13", "w2", "act", "y"}[i], p, 16)
	}
	c.pointer("ids", ids, 4)
	c.pointer("weights", weights, 4)
	if err := c.err(); err != nil || tokens == 0 {
		return err
	}
	block := cuda.Dim3{X: kernels.MoEThreads, Y: 1, Z: 1}
	slots := uint32(tokens * topK)
	if err := k.launch(s, c.op, "moe_gate_up", cuda.Dim3{X: uint32(kernels.CeilDiv(inter, kernels.MoERowsPerBlock)), Y: slots, Z: 1}, block, 0,
		act, x, w13, ids, int32(topK), int32(hidden), int32(inter)); err != nil {
		return err
	}
	if err := k.launch(s, c.op, "moe_down", cuda.Dim3{X: uint32(kernels.CeilDiv(hidden, kernels.MoERowsPerBlock)), Y: slots, Z: 1}, block, 0,
		y, act, w2, ids, weights, int32(hidden), int32(inter)); err != nil {
		return err
	}
	return k.launch(s, c.op, "moe_sum", cuda.Dim3{X: k.gridStrideBlocks(tokens*hidden, kernels.GridStrideThreads), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GridStrideThreads, Y: 1, Z: 1}, 0, out, y, int32(tokens), int32(topK), int32(hidden))
}

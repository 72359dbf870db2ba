// moe.go holds the twins of the mixture-of-experts ops (issue 34): the
// router's top-k, the token-to-expert alignment of vLLM's
// moe_align_block_size, and the fused MoE layer (gate_up, SiLU·mul, down,
// the weighted sum over the top-k). Their CUDA kernels come later; these
// fix the math each must match.

package ref

import (
	"math"
	"slices"
)

// RouterTopK picks each token's k experts from its router logits [tokens,
// experts] (bf16, the router GEMM's output), as vLLM's fused_topk: the
// softmax over the experts in float32 (the largest logit subtracted first,
// exp in float64 rounded to float32), the k largest probabilities (a tie
// goes to the lower expert index), and with renormalize the k weights
// divided by their float32 sum (Mixtral always; Qwen3-MoE when its
// config's norm_topk_prob). ids [tokens, k] are int32 expert indices,
// weights [tokens, k] float32, each token's in descending weight.
//
// Preconditions: tokens >= 0, 1 <= k <= experts, len(logits) >= tokens*experts,
// len(ids), len(weights) >= tokens*k.
func RouterTopK(ids []int32, weights []float32, logits []uint16, tokens, experts, k int, renormalize bool) {
	needShape("RouterTopK", tokens >= 0 && k >= 1 && k <= experts, "bad shape tokens %d experts %d k %d", tokens, experts, k)
	needLen("RouterTopK", "logits", len(logits), tokens*experts)
	needLen("RouterTopK", "ids", len(ids), tokens*k)
	needLen("RouterTopK", "weights", len(weights), tokens*k)
	prob := make([]float32, experts)
	order := make([]int, experts)
	for t := 0; t < tokens; t++ {
		row := logits[t*experts : (t+1)*experts]
		peak := float32(math.Inf(-1))
		for _, l := range row {
			peak = max(peak, BF16ToF32(l))
		}
		var sum float32
		for e, l := range row {
			prob[e] = float32(math.Exp(float64(BF16ToF32(l) - peak)))
			sum += prob[e]
		}
		for e := range prob {
			prob[e] /= sum
			order[e] = e
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case prob[a] > prob[b]:
				return -1
			case prob[a] < prob[b]:
				return 1
			}
			return 0
		})
		var kept float32
		for j := 0; j < k; j++ {
			ids[t*k+j], weights[t*k+j] = int32(order[j]), prob[order[j]]
			kept += prob[order[j]]
		}
		if renormalize {
			for j := 0; j < k; j++ {
				weights[t*k+j] /= kept
			}
		}
	}
}

// MoEAlign is vLLM's moe_align_block_size: the top-k slots (flat index
// t*k + j of ids [tokens, k]) grouped by expert, each expert's group
// padded with the pad value tokens*k to a multiple of block, the groups in
// expert order (an expert with no slot has none). sorted holds the slots
// (len numPadded), expertOf the expert of each block of block slots
// (len numPadded/block). Within a group the slots are in flat order here;
// a kernel may order them otherwise (vLLM's uses atomics), so a check
// compares each block's slots as a set.
//
// Preconditions: block >= 1, every id in [0, experts).
func MoEAlign(ids []int32, experts, block int) (sorted, expertOf []int32, numPadded int) {
	needShape("MoEAlign", block >= 1 && experts >= 1, "bad shape experts %d block %d", experts, block)
	pad := int32(len(ids))
	groups := make([][]int32, experts)
	for i, e := range ids {
		needShape("MoEAlign", e >= 0 && int(e) < experts, "slot %d routes to expert %d of %d", i, e, experts)
		groups[e] = append(groups[e], int32(i))
	}
	for e, g := range groups {
		if len(g) == 0 {
			continue
		}
		padded := (len(g) + block - 1) / block * block
		sorted = append(sorted, g...)
		for range padded - len(g) {
			sorted = append(sorted, pad)
		}
		for b := 0; b < padded/block; b++ {
			expertOf = append(expertOf, int32(e))
		}
		numPadded += padded
	}
	return sorted, expertOf, numPadded
}

// FusedMoE is the MoE layer of one block: for each token t and each of its
// k experts e = ids[t*k+j] (weights [tokens, k] float32),
//
//	g   = bf16( x[t] · w13[e][n] )             n in [0, 2*inter): gate rows, then up rows (w13 = [gate; up])
//	a   = SiluMul(g)                            (inter values, as the dense MLP's gate)
//	y_j = bf16( weight[t,j] · f32(a · w2[e][h]) )   h in [0, hidden)
//	out[t] = bf16( Σ_j f32(y_j) )               summed in float32 in j order
//
// each dot product accumulated in float32 (LinearWide's order). w13 is
// [experts, 2*inter, hidden], w2 [experts, hidden, inter], bf16, PyTorch's
// layout (vLLM's fused w13_weight and w2_weight).
//
// Preconditions: tokens >= 0; hidden, inter, experts, k >= 1; the slices long enough;
// every id in [0, experts).
func FusedMoE(out, x, w13, w2 []uint16, ids []int32, weights []float32, tokens, hidden, inter, experts, k int) {
	needShape("FusedMoE", tokens >= 0 && hidden >= 1 && inter >= 1 && experts >= 1 && k >= 1,
		"bad shape tokens %d hidden %d inter %d experts %d k %d", tokens, hidden, inter, experts, k)
	needLen("FusedMoE", "x", len(x), tokens*hidden)
	needLen("FusedMoE", "w13", len(w13), experts*2*inter*hidden)
	needLen("FusedMoE", "w2", len(w2), experts*hidden*inter)
	needLen("FusedMoE", "ids", len(ids), tokens*k)
	needLen("FusedMoE", "weights", len(weights), tokens*k)
	needLen("FusedMoE", "out", len(out), tokens*hidden)
	gu := make([]uint16, 2*inter)
	act := make([]uint16, inter)
	actWide, y := make([]float32, inter), make([]float32, hidden)
	acc := make([]float32, hidden)
	wideUp, wideDown := map[int32][]float32{}, map[int32][]float32{}
	for t := 0; t < tokens; t++ {
		clear(acc)
		for j := 0; j < k; j++ {
			e := ids[t*k+j]
			needShape("FusedMoE", e >= 0 && int(e) < experts, "token %d slot %d routes to expert %d of %d", t, j, e, experts)
			up, ok := wideUp[e]
			if !ok {
				up, wideDown[e] = make([]float32, 2*inter*hidden), make([]float32, hidden*inter)
				ToF32(up, w13[int(e)*2*inter*hidden:(int(e)+1)*2*inter*hidden])
				ToF32(wideDown[e], w2[int(e)*hidden*inter:(int(e)+1)*hidden*inter])
				wideUp[e] = up
			}
			LinearWide(gu, x[t*hidden:(t+1)*hidden], up, 1, 2*inter, hidden, 1)
			SiluMul(act, gu, 1, inter)
			ToF32(actWide, act)
			for c := 0; c < hidden; c += linearChunkCols { // LinearWide's chunks: its order, unrounded
				linearColumns(y, actWide, wideDown[e], 1, hidden, inter, c, min(hidden, c+linearChunkCols))
			}
			for h, v := range y {
				acc[h] += RoundBF16(weights[t*k+j] * v)
			}
		}
		ToBF16(out[t*hidden:(t+1)*hidden], acc)
	}
}

// ExpectedExpertsTouched is how many of experts a step of tokens touches
// on average when each token routes to k distinct experts uniformly at
// random: experts · (1 − (1 − k/experts)^tokens), since one expert is
// missed by one token with probability 1 − k/experts, independently per
// token. The bytes a memory-bound MoE layer must read scale with it.
func ExpectedExpertsTouched(experts, k, tokens int) float64 {
	if experts <= 0 || tokens <= 0 {
		return 0
	}
	return float64(experts) * (1 - math.Pow(1-float64(k)/float64(experts), float64(tokens)))
}

// paged_lse.go defines the log-sum-exp an op library's attention writes
// when asked (include/stepbench_op.h, STEPBENCH_CAP_LSE): stepbench's own
// kernels do not compute it.

package ref

import "math"

// AttentionPagedLSE writes lse [T, heads] (token-major): for row t and
// head h, ln Σ_j exp(scale · q[t,h]·k_j) over the keys AttentionPaged's
// row t attends to (positions 0..p of its sequence, through the block
// table), scale = 1/√headDim, the dot products of the bf16 values in
// float32 as AttentionPaged sums them, the sum in float64. Natural log.
// tokens, when non-nil, lists the rows to compute; the others are left.
//
// Preconditions: AttentionPaged's; len(lse) >= T·heads.
func AttentionPagedLSE(lse []float32, q, kCache []uint16, kv PagedKV, heads, kvHeads, headDim int, tokens []int) {
	const op = "AttentionPagedLSE"
	needShape(op, kvHeads >= 1 && heads >= kvHeads && heads%kvHeads == 0 && headDim >= 1,
		"bad shape heads %d kvHeads %d headDim %d", heads, kvHeads, headDim)
	if err := kv.Check(); err != nil {
		needShape(op, false, "%v", err)
	}
	T, qWidth, kvWidth := kv.Tokens(), heads*headDim, kvHeads*headDim
	needLen(op, "q", len(q), T*qWidth)
	needLen(op, "lse", len(lse), T*heads)
	needLen(op, "kCache", len(kCache), kv.NumPages*kv.PageSize*kvWidth)
	scale := float32(1 / math.Sqrt(float64(headDim)))
	query, scores := make([]float32, headDim), []float64(nil)
	group := heads / kvHeads
	seqOf := kv.sequenceOf()
	if tokens == nil {
		tokens = make([]int, T)
		for t := range tokens {
			tokens[t] = t
		}
	}
	for _, t := range tokens {
		needShape(op, t >= 0 && t < T, "token %d outside [0, %d)", t, T)
		b := seqOf[t]
		qLen := int(kv.QueryStart[b+1] - kv.QueryStart[b])
		keys := int(kv.SeqLens[b]) - qLen + (t - int(kv.QueryStart[b])) + 1
		for h := range heads {
			ToF32(query, q[t*qWidth+h*headDim:][:headDim])
			scores = scores[:0]
			best := math.Inf(-1)
			for j := range keys {
				k := kCache[int(kv.Slot(b, j))*kvWidth+(h/group)*headDim:][:headDim]
				var dot float32
				for d, x := range query {
					dot += x * BF16ToF32(k[d])
				}
				s := float64(dot * scale)
				scores = append(scores, s)
				best = math.Max(best, s)
			}
			var sum float64
			for _, s := range scores {
				sum += math.Exp(s - best)
			}
			lse[t*heads+h] = float32(best + math.Log(sum))
		}
	}
}

// attention.go is the twin of kernels/attention.cu: causal GQA attention (prefill and decode).

package ref

import "math"

// Attention is causal grouped-query attention over the KV cache. q is
// [T, H*D], T = batch*seqLen; token (b, s) at position p = startPos+s attends
// to cache positions 0..p of sequence b, query head h reading kv head
// h/(H/KV). With scale = float32(1/sqrt(D)):
//
//	score_j = float32 dot(q, k_j) * scale       (float32 products summed in index order)
//	prob_j  = exp(score_j − max) / sum          (float32 softmax)
//	o       = sum_j prob_j * f32(v_j)           (float32)
//	out[t, h*D+d] = bf16(o[d])
//
// These are SDPA/flash numerics: fp32 scores and softmax, one bf16 rounding at
// the end. The caches are [batch][maxSeq][KV][D] as written by RopeKVWrite.
//
// Preconditions: heads a positive multiple of kvHeads, startPos >= 0,
// startPos+seqLen <= maxSeq, and every slice as long as its shape.
func Attention(out, q, kCache, vCache []uint16, batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq int) {
	AttentionTokens(out, q, kCache, vCache, batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq, nil)
}

// AttentionTokens is Attention for the listed tokens only (t = b*seqLen+s,
// every head of each); nil lists every token. Rows of out not listed are
// left as they were. It lets a check run a kernel at a large shape and
// compare a sample of its rows without computing all of them in Go.
func AttentionTokens(out, q, kCache, vCache []uint16, batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq int, tokens []int) {
	const op = "AttentionTokens"
	needShape(op, batch >= 0 && seqLen >= 0 && startPos >= 0 && kvHeads >= 1 && heads >= kvHeads &&
		heads%kvHeads == 0 && headDim >= 1 && startPos+seqLen <= maxSeq,
		"bad shape batch %d seqLen %d startPos %d heads %d kvHeads %d headDim %d maxSeq %d",
		batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq)
	qWidth, kvWidth := heads*headDim, kvHeads*headDim
	needLen(op, "q", len(q), batch*seqLen*qWidth)
	needLen(op, "out", len(out), batch*seqLen*qWidth)
	needLen(op, "kCache", len(kCache), batch*maxSeq*kvWidth)
	needLen(op, "vCache", len(vCache), batch*maxSeq*kvWidth)
	for _, t := range tokens {
		needShape(op, t >= 0 && t < batch*seqLen, "token %d outside [0, %d)", t, batch*seqLen)
	}
	if tokens == nil {
		tokens = make([]int, batch*seqLen)
		for t := range tokens {
			tokens[t] = t
		}
	}
	rows := make([]int, startPos+seqLen)
	var a attender
	a.init(heads, kvHeads, headDim, startPos+seqLen)
	for _, t := range tokens {
		b, s := t/seqLen, t%seqLen
		keys := startPos + s + 1 // positions 0..p
		for j := range keys {
			rows[j] = (b*maxSeq + j) * kvWidth
		}
		a.token(out[t*qWidth:(t+1)*qWidth], q[t*qWidth:(t+1)*qWidth], kCache, vCache, rows[:keys])
	}
}

// attender is the arithmetic Attention and AttentionPaged share, so that
// the two give the same bits wherever they see the same keys: the scratch
// of one query token and the loop over its heads.
type attender struct {
	heads, kvHeads, headDim int
	scale                   float32
	query, scores, acc      []float32
}

func (a *attender) init(heads, kvHeads, headDim, maxKeys int) {
	*a = attender{heads: heads, kvHeads: kvHeads, headDim: headDim,
		scale: float32(1 / math.Sqrt(float64(headDim))),
		query: make([]float32, headDim), scores: make([]float32, maxKeys), acc: make([]float32, headDim)}
}

// token writes out [heads*headDim] for one query row q [heads*headDim]
// attending to the keys whose rows (element offsets into the caches of kv
// head 0) are rows, in key order.
func (a *attender) token(out, q, kCache, vCache []uint16, rows []int) {
	headDim := a.headDim
	groupSize := a.heads / a.kvHeads
	if cap(a.scores) < len(rows) {
		a.scores = make([]float32, len(rows))
	}
	scores := a.scores[:len(rows)]
	for h := 0; h < a.heads; h++ {
		ToF32(a.query, q[h*headDim:(h+1)*headDim])
		kvOffset := (h / groupSize) * headDim

		maxScore := float32(math.Inf(-1))
		for j, r := range rows {
			k := kCache[r+kvOffset:][:headDim]
			var dot float32
			for d, qd := range a.query {
				dot += qd * BF16ToF32(k[d])
			}
			scores[j] = dot * a.scale
			maxScore = max(maxScore, scores[j])
		}
		var sum float32
		for j := range scores {
			scores[j] = float32(math.Exp(float64(scores[j] - maxScore)))
			sum += scores[j]
		}

		clear(a.acc)
		for j, r := range rows {
			prob := scores[j] / sum
			v := vCache[r+kvOffset:][:headDim]
			for d := range a.acc {
				a.acc[d] += prob * BF16ToF32(v[d])
			}
		}
		ToBF16(out[h*headDim:(h+1)*headDim], a.acc)
	}
}

package ref

import (
	"math"
	"slices"
	"testing"
)

// attentionInputs fills q and both caches at random for one shape.
func attentionInputs(seed uint64, c ropeCase) (q, kCache, vCache []uint16) {
	r := newRand(seed)
	q = randomBF16(r, c.batch*c.seqLen*c.heads*c.headDim, 1)
	kCache = randomBF16(r, c.batch*c.maxSeq*c.kvHeads*c.headDim, 1)
	vCache = randomBF16(r, len(kCache), 1)
	return q, kCache, vCache
}

func runAttention(c ropeCase, q, kCache, vCache []uint16) []uint16 {
	out := make([]uint16, len(q))
	Attention(out, q, kCache, vCache, c.batch, c.seqLen, c.startPos, c.heads, c.kvHeads, c.headDim, c.maxSeq)
	return out
}

// directAttention is causal GQA softmax attention in float64.
func directAttention(c ropeCase, q, kCache, vCache []uint16) []float64 {
	qWidth, kvWidth := c.heads*c.headDim, c.kvHeads*c.headDim
	out := make([]float64, c.batch*c.seqLen*qWidth)
	for b := 0; b < c.batch; b++ {
		for s := 0; s < c.seqLen; s++ {
			tok, pos := b*c.seqLen+s, c.startPos+s
			for h := 0; h < c.heads; h++ {
				kvHead := h * c.kvHeads / c.heads
				weights := make([]float64, pos+1)
				var total float64
				for j := range weights {
					var dot float64
					for d := 0; d < c.headDim; d++ {
						dot += f64(q[tok*qWidth+h*c.headDim+d]) * f64(kCache[(b*c.maxSeq+j)*kvWidth+kvHead*c.headDim+d])
					}
					weights[j] = math.Exp(dot / math.Sqrt(float64(c.headDim)))
					total += weights[j]
				}
				for d := 0; d < c.headDim; d++ {
					var o float64
					for j, w := range weights {
						o += w / total * f64(vCache[(b*c.maxSeq+j)*kvWidth+kvHead*c.headDim+d])
					}
					out[tok*qWidth+h*c.headDim+d] = o
				}
			}
		}
	}
	return out
}

func TestAttentionAgainstDirect(t *testing.T) {
	for _, tc := range ropeCases {
		t.Run(tc.String(), func(t *testing.T) {
			q, kCache, vCache := attentionInputs(50, tc)
			// Sharpen the scores a little so the softmax is not nearly uniform.
			for i := range q {
				q[i] = F32ToBF16(BF16ToF32(q[i]) * 2)
			}
			got := runAttention(tc, q, kCache, vCache)
			checkRelErr(t, "Attention", got, directAttention(tc, q, kCache, vCache), 1e-2)
		})
	}
}

// One key that wins the softmax outright: the output is its value, which
// bf16 holds exactly, so a wrong kv head or cache slot gives a wrong value.
func TestAttentionPicksDominantKey(t *testing.T) {
	c := ropeCase{batch: 2, seqLen: 2, startPos: 3, heads: 4, kvHeads: 2, headDim: 4, maxSeq: 6}
	q, kCache, vCache := attentionInputs(51, c)
	kvWidth := c.kvHeads * c.headDim
	clear(kCache)
	for i := range q {
		q[i] = F32ToBF16(1)
	}
	// Sequence 1, kv head 1 (query heads 2, 3): position 2 dominates.
	for d := 0; d < c.headDim; d++ {
		kCache[(1*c.maxSeq+2)*kvWidth+c.headDim+d] = F32ToBF16(100)
	}
	out := runAttention(c, q, kCache, vCache)
	for s := 0; s < c.seqLen; s++ {
		tok := 1*c.seqLen + s
		for h := 2; h < 4; h++ {
			got := out[tok*c.heads*c.headDim+h*c.headDim:][:c.headDim]
			want := vCache[(1*c.maxSeq+2)*kvWidth+c.headDim:][:c.headDim]
			if !slices.Equal(got, want) {
				t.Errorf("token %d head %d = %v, want v at position 2 %v", tok, h, got, want)
			}
		}
	}
}

func TestAttentionIsCausal(t *testing.T) {
	for _, tc := range []ropeCase{
		{batch: 2, seqLen: 6, startPos: 0, heads: 4, kvHeads: 2, headDim: 16, maxSeq: 6},
		{batch: 1, seqLen: 5, startPos: 3, heads: 8, kvHeads: 1, headDim: 8, maxSeq: 9},
	} {
		t.Run(tc.String(), func(t *testing.T) {
			q, kCache, vCache := attentionInputs(52, tc)
			before := runAttention(tc, q, kCache, vCache)

			// Change the key and value at a later position; rows before it must not move.
			future := tc.startPos + tc.seqLen/2
			kvWidth := tc.kvHeads * tc.headDim
			for b := 0; b < tc.batch; b++ {
				for p := future; p < tc.maxSeq; p++ {
					for d := 0; d < kvWidth; d++ {
						kCache[(b*tc.maxSeq+p)*kvWidth+d] = F32ToBF16(7)
						vCache[(b*tc.maxSeq+p)*kvWidth+d] = F32ToBF16(-9)
					}
				}
			}
			after := runAttention(tc, q, kCache, vCache)

			qWidth := tc.heads * tc.headDim
			for b := 0; b < tc.batch; b++ {
				for s := 0; s < tc.seqLen; s++ {
					row := (b*tc.seqLen + s) * qWidth
					same := slices.Equal(before[row:row+qWidth], after[row:row+qWidth])
					if pos := tc.startPos + s; pos < future && !same {
						t.Errorf("b%d position %d changed when position %d did", b, pos, future)
					} else if pos >= future && same {
						t.Errorf("b%d position %d ignored its own key/value", b, pos)
					}
				}
			}
		})
	}
}

// The last row of a prefill and a single decode step at the same position
// read the same cache and must agree bit for bit.
func TestAttentionDecodeMatchesPrefill(t *testing.T) {
	for _, n := range []int{1, 2, 7, 33} {
		prefill := ropeCase{batch: 2, seqLen: n, startPos: 0, heads: 8, kvHeads: 2, headDim: 32, maxSeq: n + 1}
		q, kCache, vCache := attentionInputs(53, prefill)
		full := runAttention(prefill, q, kCache, vCache)

		decode := prefill
		decode.seqLen, decode.startPos = 1, n-1
		qWidth := prefill.heads * prefill.headDim
		lastQ := make([]uint16, prefill.batch*qWidth)
		GatherLast(lastQ, q, prefill.batch, n, qWidth)
		step := runAttention(decode, lastQ, kCache, vCache)

		wantLast := make([]uint16, prefill.batch*qWidth)
		GatherLast(wantLast, full, prefill.batch, n, qWidth)
		if !slices.Equal(step, wantLast) {
			t.Errorf("n=%d: decode step differs from prefill's last row", n)
		}
	}
}

// AttentionTokens computes exactly Attention's rows for the tokens listed
// and leaves every other row as it was.
func TestAttentionTokensIsAttentionOnItsRows(t *testing.T) {
	r := newRand(11)
	const batch, seqLen, startPos, heads, kvHeads, d, maxSeq = 2, 9, 3, 4, 2, 16, 16
	q := randomBF16(r, batch*seqLen*heads*d, 1)
	k, v := randomBF16(r, batch*maxSeq*kvHeads*d, 1), randomBF16(r, batch*maxSeq*kvHeads*d, 1)
	full := make([]uint16, len(q))
	Attention(full, q, k, v, batch, seqLen, startPos, heads, kvHeads, d, maxSeq)
	const untouched = 0x1234
	some := make([]uint16, len(q))
	for i := range some {
		some[i] = untouched
	}
	tokens := []int{0, 8, 9, 17}
	AttentionTokens(some, q, k, v, batch, seqLen, startPos, heads, kvHeads, d, maxSeq, tokens)
	width := heads * d
	for tok := 0; tok < batch*seqLen; tok++ {
		listed := slices.Contains(tokens, tok)
		for i := tok * width; i < (tok+1)*width; i++ {
			if listed && some[i] != full[i] || !listed && some[i] != untouched {
				t.Fatalf("token %d (listed %v) element %d: %#x, Attention %#x", tok, listed, i-tok*width, some[i], full[i])
			}
		}
	}
}

// paged_attention.go is the twin of kernels/paged_attention.cu: causal GQA
// attention of a ragged batch over a paged KV cache (prefill, chunked
// prefill over a cached context, and decode, in one call).

package ref

import (
	"fmt"
	"math"
)

// PagedKV is a batch's view of a paged KV cache, as vLLM's FlashAttention
// backend passes it: each layer's K (and V) cache is NumPages pages of
// PageSize tokens, [NumPages][PageSize][KV][D]; slot = page·PageSize +
// offset numbers its token rows. Sequence b's cache positions 0, 1, ...
// live in its pages BlockTable[b·MaxPages+0], [b·MaxPages+1], ...: position
// j at slot BlockTable[b·MaxPages + j/PageSize]·PageSize + j%PageSize.
//
// The contiguous layout [Batch][MaxSeq][KV][D] is the special case
// PageSize = MaxSeq, NumPages = Batch, MaxPages = 1, BlockTable[b] = b.
type PagedKV struct {
	PageSize, NumPages, MaxPages int
	// BlockTable is [batch][MaxPages] int32; entries past a sequence's last
	// page are never read (vLLM fills them with 0; verify poisons them).
	BlockTable []int32
	// SeqLens is [batch]: the tokens in each sequence's cache after this
	// step's write (its context plus its new tokens).
	SeqLens []int32
	// QueryStart is [batch+1]: sequence b's new tokens are rows
	// QueryStart[b] .. QueryStart[b+1]−1 of the activations (vLLM's
	// query_start_loc); QueryStart[batch] is the step's token count T.
	QueryStart []int32
}

// Batch is the number of sequences.
func (kv PagedKV) Batch() int { return max(len(kv.QueryStart)-1, 0) }

// Tokens is the step's new tokens, T = QueryStart[batch].
func (kv PagedKV) Tokens() int {
	if len(kv.QueryStart) == 0 {
		return 0
	}
	return int(kv.QueryStart[len(kv.QueryStart)-1])
}

// Slot is the cache slot of position j of sequence b.
func (kv PagedKV) Slot(b, j int) int64 {
	page := kv.BlockTable[b*kv.MaxPages+j/kv.PageSize]
	return int64(page)*int64(kv.PageSize) + int64(j%kv.PageSize)
}

// Check reports the first way kv is inconsistent: lengths and widths, a
// sequence with more new tokens than its length or more pages than the
// table holds, query starts that decrease or do not begin at 0, and a page
// id outside the pool among the pages a sequence uses. Backends that read
// the view from memory (the cpu backend) call it before the op; the twins
// panic on what it reports.
func (kv PagedKV) Check() error {
	batch := kv.Batch()
	switch {
	case kv.PageSize < 1 || kv.NumPages < 1 || kv.MaxPages < 1:
		return fmt.Errorf("page size %d, %d pages, %d per sequence: each must be at least 1", kv.PageSize, kv.NumPages, kv.MaxPages)
	case len(kv.QueryStart) < 1:
		return fmt.Errorf("no query starts")
	case len(kv.SeqLens) < batch:
		return fmt.Errorf("%d sequence lengths for %d sequences", len(kv.SeqLens), batch)
	case len(kv.BlockTable) < batch*kv.MaxPages:
		return fmt.Errorf("block table of %d entries for %d sequences × %d pages", len(kv.BlockTable), batch, kv.MaxPages)
	case kv.QueryStart[0] != 0:
		return fmt.Errorf("query_start_loc[0] = %d, want 0", kv.QueryStart[0])
	}
	for b := range batch {
		qLen, seqLen := int(kv.QueryStart[b+1]-kv.QueryStart[b]), int(kv.SeqLens[b])
		if qLen < 0 || seqLen < qLen {
			return fmt.Errorf("sequence %d: %d new tokens, length %d", b, qLen, seqLen)
		}
		pages := (seqLen + kv.PageSize - 1) / kv.PageSize
		if pages > kv.MaxPages {
			return fmt.Errorf("sequence %d: length %d needs %d pages of %d, the table holds %d", b, seqLen, pages, kv.PageSize, kv.MaxPages)
		}
		for i := range pages {
			if p := kv.BlockTable[b*kv.MaxPages+i]; p < 0 || int(p) >= kv.NumPages {
				return fmt.Errorf("sequence %d: page %d of its table is %d, outside the pool's %d", b, i, p, kv.NumPages)
			}
		}
	}
	return nil
}

// AttentionPaged is causal grouped-query attention of a ragged batch over a
// paged cache. Sequence b has qLen = QueryStart[b+1]−QueryStart[b] new
// tokens and SeqLens[b] tokens in all; its new token i (row QueryStart[b]+i
// of q and out) sits at position p = SeqLens[b] − qLen + i (the causal
// mask aligned bottom-right, so chunked prefill over a cached context and
// decode are the same call) and attends to positions 0..p of its own cache,
// read through the block table. The arithmetic is Attention's, key by key
// in position order: where both see the same keys they give the same bits.
//
// q and out are [T, H·D]; kCache and vCache are [NumPages·PageSize, KV·D].
// tokens, when non-nil, lists the rows to compute (every head of each);
// other rows of out are left as they were.
//
// Preconditions: kv.Check() passes, heads a positive multiple of kvHeads,
// and every slice as long as its shape.
func AttentionPaged(out, q, kCache, vCache []uint16, kv PagedKV, heads, kvHeads, headDim int, tokens []int) {
	const op = "AttentionPaged"
	slots := kv.NumPages * kv.PageSize * kvHeads * headDim
	needLen(op, "kCache", len(kCache), slots)
	needLen(op, "vCache", len(vCache), slots)
	walkPaged(op, out, q, kv, heads, kvHeads, headDim, tokens, func(a *attender, out, q []uint16, rows []int) {
		a.token(out, q, kCache, vCache, rows)
	})
}

// walkPaged checks a paged attention's shapes and calls attend for each of
// tokens (nil: every row) with its output and query rows and the cache
// rows (element offsets of KV head 0) of positions 0..p it attends to: the
// driver AttentionPaged and AttentionPagedFP8 share.
func walkPaged(op string, out, q []uint16, kv PagedKV, heads, kvHeads, headDim int, tokens []int,
	attend func(a *attender, out, q []uint16, rows []int)) {
	needShape(op, kvHeads >= 1 && heads >= kvHeads && heads%kvHeads == 0 && headDim >= 1,
		"bad shape heads %d kvHeads %d headDim %d", heads, kvHeads, headDim)
	if err := kv.Check(); err != nil {
		needShape(op, false, "%v", err)
	}
	T := kv.Tokens()
	qWidth, kvWidth := heads*headDim, kvHeads*headDim
	needLen(op, "q", len(q), T*qWidth)
	needLen(op, "out", len(out), T*qWidth)
	if tokens == nil {
		tokens = make([]int, T)
		for t := range tokens {
			tokens[t] = t
		}
	}
	seqOf := kv.sequenceOf()
	maxLen := 0
	for b := range kv.Batch() {
		maxLen = max(maxLen, int(kv.SeqLens[b]))
	}
	var a attender
	a.init(heads, kvHeads, headDim, maxLen)
	rows := make([]int, maxLen)
	rowsOf := -1 // the sequence rows holds
	for _, t := range tokens {
		needShape(op, t >= 0 && t < T, "token %d outside [0, %d)", t, T)
		b := seqOf[t]
		if b != rowsOf {
			for j := range int(kv.SeqLens[b]) {
				rows[j] = int(kv.Slot(b, j)) * kvWidth
			}
			rowsOf = b
		}
		qLen := int(kv.QueryStart[b+1] - kv.QueryStart[b])
		p := int(kv.SeqLens[b]) - qLen + (t - int(kv.QueryStart[b]))
		attend(&a, out[t*qWidth:(t+1)*qWidth], q[t*qWidth:(t+1)*qWidth], rows[:p+1])
	}
}

// sequenceOf maps each of the step's rows to its sequence.
func (kv PagedKV) sequenceOf() []int {
	seq := make([]int, kv.Tokens())
	for b := range kv.Batch() {
		for t := kv.QueryStart[b]; t < kv.QueryStart[b+1]; t++ {
			seq[t] = b
		}
	}
	return seq
}

// AttentionPagedFP8 is AttentionPaged over FP8 caches, reading them as
// the file's comment says (the K scale in the softmax scale, the V scale on
// the output).
func AttentionPagedFP8(out, q []uint16, kCache, vCache []uint8, kv PagedKV, heads, kvHeads, headDim int, tokens []int,
	f FP8Cache, kScale, vScale []float32) {
	const op = "AttentionPagedFP8"
	slots := kv.NumPages * kv.PageSize * kvHeads * headDim
	needLen(op, "kCache", len(kCache), slots)
	needLen(op, "vCache", len(vCache), slots)
	needScales(op, kScale, vScale, kvHeads)
	values := f.table()
	walkPaged(op, out, q, kv, heads, kvHeads, headDim, tokens, func(a *attender, out, q []uint16, rows []int) {
		a.tokenFP8(out, q, kCache, vCache, rows, values, kScale, vScale)
	})
}

// tokenFP8 is token over FP8 caches (values: the format's table).
func (a *attender) tokenFP8(out, q []uint16, kCache, vCache []uint8, rows []int, values *[256]float32, kScale, vScale []float32) {
	headDim := a.headDim
	groupSize := a.heads / a.kvHeads
	if cap(a.scores) < len(rows) {
		a.scores = make([]float32, len(rows))
	}
	scores := a.scores[:len(rows)]
	for h := 0; h < a.heads; h++ {
		ToF32(a.query, q[h*headDim:(h+1)*headDim])
		g := h / groupSize
		kvOffset := g * headDim
		scale := a.scale * kScale[g]

		maxScore := float32(math.Inf(-1))
		for j, r := range rows {
			k := kCache[r+kvOffset:][:headDim]
			var dot float32
			for d, qd := range a.query {
				dot += qd * values[k[d]]
			}
			scores[j] = dot * scale
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
				a.acc[d] += prob * values[v[d]]
			}
		}
		for d := range a.acc {
			a.acc[d] *= vScale[g]
		}
		ToBF16(out[h*headDim:(h+1)*headDim], a.acc)
	}
}

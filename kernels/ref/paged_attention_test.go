package ref

import (
	"fmt"
	"slices"
	"testing"
)

// pagedCase is a ragged batch: each sequence's context (cached tokens
// before the step) and new tokens, on pages of pageSize.
type pagedCase struct {
	context, newTokens []int
	pageSize           int
	shuffled           bool
}

func (c pagedCase) String() string {
	return fmt.Sprintf("ctx%v_new%v_page%d_shuffled%v", c.context, c.newTokens, c.pageSize, c.shuffled)
}

// pagedView lays c's sequences out on pages (in order, or in a seeded
// permutation of the pool), entries past each sequence's pages poisoned.
func pagedView(c pagedCase, seed uint64) PagedKV {
	batch := len(c.context)
	kv := PagedKV{PageSize: c.pageSize, SeqLens: make([]int32, batch), QueryStart: make([]int32, batch+1)}
	for b := range batch {
		n := c.context[b] + c.newTokens[b]
		kv.SeqLens[b] = int32(n)
		kv.QueryStart[b+1] = kv.QueryStart[b] + int32(c.newTokens[b])
		kv.MaxPages = max(kv.MaxPages, (n+c.pageSize-1)/c.pageSize)
		kv.NumPages += (n + c.pageSize - 1) / c.pageSize
	}
	pool := make([]int32, kv.NumPages)
	for i := range pool {
		pool[i] = int32(i)
	}
	if c.shuffled {
		r := newRand(seed)
		r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	}
	kv.BlockTable = make([]int32, batch*kv.MaxPages)
	for i := range kv.BlockTable {
		kv.BlockTable[i] = int32(kv.NumPages + 1000) // poison: past the pool
	}
	next := 0
	for b := range batch {
		for i := range (int(kv.SeqLens[b]) + c.pageSize - 1) / c.pageSize {
			kv.BlockTable[b*kv.MaxPages+i] = pool[next]
			next++
		}
	}
	return kv
}

var pagedCases = []pagedCase{
	{context: []int{0}, newTokens: []int{5}, pageSize: 16},
	{context: []int{0, 0, 0}, newTokens: []int{1, 17, 16}, pageSize: 16, shuffled: true},
	{context: []int{3, 40, 0}, newTokens: []int{1, 1, 1}, pageSize: 1, shuffled: true},
	{context: []int{10, 0, 63}, newTokens: []int{6, 64, 1}, pageSize: 64},
	{context: []int{5, 29}, newTokens: []int{9, 3}, pageSize: 7, shuffled: true},
}

// TestAttentionPagedIsEachSequenceAlone: every sequence of a ragged batch
// on (shuffled) pages gets the bits Attention gives it alone on the
// contiguous layout.
func TestAttentionPagedIsEachSequenceAlone(t *testing.T) {
	const heads, kvHeads, headDim = 4, 2, 16
	kvWidth, qWidth := kvHeads*headDim, heads*headDim
	for _, c := range pagedCases {
		t.Run(c.String(), func(t *testing.T) {
			kv := pagedView(c, 7)
			r := newRand(9)
			slots := kv.NumPages * kv.PageSize
			kCache, vCache := randomBF16(r, slots*kvWidth, 1), randomBF16(r, slots*kvWidth, 1)
			q := randomBF16(r, kv.Tokens()*qWidth, 1)
			out := make([]uint16, len(q))
			AttentionPaged(out, q, kCache, vCache, kv, heads, kvHeads, headDim, nil)
			for b := range kv.Batch() {
				n, qLen := int(kv.SeqLens[b]), c.newTokens[b]
				k, v := make([]uint16, n*kvWidth), make([]uint16, n*kvWidth)
				for j := range n {
					s := int(kv.Slot(b, j)) * kvWidth
					copy(k[j*kvWidth:], kCache[s:s+kvWidth])
					copy(v[j*kvWidth:], vCache[s:s+kvWidth])
				}
				t0 := int(kv.QueryStart[b])
				want := make([]uint16, qLen*qWidth)
				Attention(want, q[t0*qWidth:(t0+qLen)*qWidth], k, v, 1, qLen, n-qLen, heads, kvHeads, headDim, n)
				if got := out[t0*qWidth : (t0+qLen)*qWidth]; !slices.Equal(got, want) {
					t.Errorf("sequence %d: paged attention differs from the sequence alone", b)
				}
			}
		})
	}
}

// TestAttentionPagedContiguousIsAttention: the contiguous layout as a
// table of one page per sequence gives Attention's bits.
func TestAttentionPagedContiguousIsAttention(t *testing.T) {
	c := ropeCase{batch: 3, seqLen: 4, startPos: 5, heads: 4, kvHeads: 1, headDim: 32, maxSeq: 12}
	q, kCache, vCache := attentionInputs(3, c)
	want := runAttention(c, q, kCache, vCache)
	kv := PagedKV{PageSize: c.maxSeq, NumPages: c.batch, MaxPages: 1, BlockTable: []int32{0, 1, 2},
		SeqLens: []int32{9, 9, 9}, QueryStart: []int32{0, 4, 8, 12}}
	got := make([]uint16, len(q))
	AttentionPaged(got, q, kCache, vCache, kv, c.heads, c.kvHeads, c.headDim, nil)
	if !slices.Equal(got, want) {
		t.Error("contiguous view: AttentionPaged differs from Attention")
	}
}

func TestPagedKVCheck(t *testing.T) {
	good := pagedView(pagedCase{context: []int{3, 0}, newTokens: []int{1, 20}, pageSize: 16}, 1)
	if err := good.Check(); err != nil {
		t.Fatalf("good view: %v", err)
	}
	bad := map[string]func(kv *PagedKV){
		"page past the pool": func(kv *PagedKV) { kv.BlockTable[kv.MaxPages] = int32(kv.NumPages) },
		"negative page":      func(kv *PagedKV) { kv.BlockTable[0] = -1 },
		"too long":           func(kv *PagedKV) { kv.SeqLens[1] = int32(kv.MaxPages*kv.PageSize + 1) },
		"fewer than new":     func(kv *PagedKV) { kv.SeqLens[1] = 19 },
		"starts not at 0":    func(kv *PagedKV) { kv.QueryStart[0] = 1 },
		"short table":        func(kv *PagedKV) { kv.BlockTable = kv.BlockTable[:1] },
		"page size 0":        func(kv *PagedKV) { kv.PageSize = 0 },
	}
	for name, spoil := range bad {
		kv := good
		kv.BlockTable = slices.Clone(good.BlockTable)
		kv.SeqLens = slices.Clone(good.SeqLens)
		kv.QueryStart = slices.Clone(good.QueryStart)
		spoil(&kv)
		if kv.Check() == nil {
			t.Errorf("%s: Check passed", name)
		}
	}
}

// TestRopeKVWritePagedIsRopeKVWrite: through the contiguous slots, the
// paged write gives RopeKVWrite's q and caches; a negative slot writes
// nothing.
func TestRopeKVWritePagedIsRopeKVWrite(t *testing.T) {
	const batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq = 2, 3, 4, 4, 2, 16, 9
	r := newRand(5)
	rowWidth := (heads + 2*kvHeads) * headDim
	qkv := randomBF16(r, batch*seqLen*rowWidth, 1)
	invFreq := RopeInvFreq(headDim, 500000, nil)
	cache := batch * maxSeq * kvHeads * headDim
	wantQ, wantK, wantV := make([]uint16, batch*seqLen*heads*headDim), make([]uint16, cache), make([]uint16, cache)
	RopeKVWrite(wantQ, wantK, wantV, qkv, invFreq, batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq)
	positions := make([]int32, batch*seqLen)
	slots := make([]int64, batch*seqLen)
	for b := range batch {
		for s := range seqLen {
			positions[b*seqLen+s] = int32(startPos + s)
			slots[b*seqLen+s] = int64(b*maxSeq + startPos + s)
		}
	}
	gotQ, gotK, gotV := make([]uint16, len(wantQ)), make([]uint16, cache), make([]uint16, cache)
	RopeKVWritePaged(gotQ, gotK, gotV, qkv, invFreq, positions, slots, batch*seqLen, heads, kvHeads, headDim, batch*maxSeq)
	if !slices.Equal(gotQ, wantQ) || !slices.Equal(gotK, wantK) || !slices.Equal(gotV, wantV) {
		t.Fatal("paged write through contiguous slots differs from RopeKVWrite")
	}
	for i := range slots {
		slots[i] = -1
	}
	clear(gotK)
	RopeKVWritePaged(gotQ, gotK, gotV[:0:0], qkv, invFreq, positions, slots, batch*seqLen, heads, kvHeads, headDim, 0)
	if !slices.Equal(gotQ, wantQ) || slices.ContainsFunc(gotK, func(v uint16) bool { return v != 0 }) {
		t.Fatal("padding slots: q must be rotated and nothing written")
	}
}

func TestGatherLastRagged(t *testing.T) {
	in := []uint16{1, 1, 2, 2, 3, 3, 4, 4, 5, 5}
	out := make([]uint16, 6)
	GatherLastRagged(out, in, []int32{0, 1, 4, 5}, 2)
	if want := []uint16{1, 1, 4, 4, 5, 5}; !slices.Equal(out, want) {
		t.Fatalf("got %v, want %v", out, want)
	}
	mustPanic(t, "empty sequence", func() { GatherLastRagged(out, in, []int32{0, 1, 1}, 2) })
}

func TestKVAdvance(t *testing.T) {
	table := []int32{7, 2, 5, 4, 9, 9} // two sequences, three pages each
	positions, seqLens := []int32{3, 7}, []int32{4, 8}
	slots := []int64{7*4 + 3, 4*4 + 3}
	pos := []int32{11}
	KVAdvance(positions, seqLens, slots, table, pos, 2, 4, 3)
	if !slices.Equal(positions, []int32{4, 8}) || !slices.Equal(seqLens, []int32{5, 9}) || pos[0] != 12 {
		t.Fatalf("positions %v, lengths %v, pos %v", positions, seqLens, pos)
	}
	if want := []int64{2*4 + 0, 9*4 + 0}; !slices.Equal(slots, want) {
		t.Fatalf("slots %v, want %v", slots, want)
	}
	KVAdvance(positions, seqLens, slots, table, nil, 2, 4, 3)
	KVAdvance(positions, seqLens, slots, table, nil, 2, 4, 3)
	KVAdvance(positions, seqLens, slots, table, nil, 2, 4, 3)
	KVAdvance(positions, seqLens, slots, table, nil, 2, 4, 3)
	if slots[1] != -1 || positions[1] != 12 {
		t.Fatalf("past the table: slot %d at position %d, want -1", slots[1], positions[1])
	}
}

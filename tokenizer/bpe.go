package tokenizer

// merge is one entry of the merge list: its rank (its index: lower merges
// first) and the token the pair becomes.
type merge struct {
	rank   int32
	result int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// symbol is one token of a word being merged: a doubly linked list over a
// slice, so a merge is O(1); removed symbols keep their slot, marked dead.
type symbol struct {
	id         int32
	prev, next int32 // -1: none
	dead       bool
}

// candidate is a pair that may merge: the left symbol's slot, and the
// rank and result of its merge when it was queued.
type candidate struct {
	rank, pos, result int32
}

// scratch is what one Encode call reuses from word to word.
type scratch struct {
	symbols []symbol
	heap    []candidate
	ends    []int
}

// bpe appends the ids of one pre-tokenized word (raw bytes) to out. With
// ignore_merges a word that is itself a vocabulary entry is that entry.
// Otherwise each byte starts as its own token and the pair of lowest rank is
// merged, the leftmost first among equal ranks, until no pair merges: the
// library's order (models/bpe/word.rs merge_all), through a min-heap of
// candidates; a queued candidate whose pair has changed since is dropped
// when it comes up.
func (t *Tokenizer) bpe(word []byte, out []int32, sc *scratch) []int32 {
	if len(word) == 0 {
		return out
	}
	if t.ignoreMerges || len(word) == 1 {
		if id, ok := t.pieces[string(word)]; ok {
			return append(out, id)
		}
	}
	syms := sc.symbols[:0]
	for i, b := range word {
		syms = append(syms, symbol{id: t.byteIDs[b], prev: int32(i) - 1, next: int32(i) + 1})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = heapPush(h, candidate{m.rank, int32(i), m.result})
		}
	}
	for len(h) > 0 {
		var top candidate
		h, top = heapPop(h)
		left := &syms[top.pos]
		if left.dead || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		if m, ok := t.merges[pairKey(left.id, right.id)]; !ok || m.result != top.result {
			continue // stale: one side has merged since it was queued
		}
		left.id, left.next = top.result, right.next
		right.dead = true
		if left.next >= 0 {
			syms[left.next].prev = top.pos
			if m, ok := t.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h = heapPush(h, candidate{m.rank, top.pos, m.result})
			}
		}
		if left.prev >= 0 {
			if m, ok := t.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h = heapPush(h, candidate{m.rank, left.prev, m.result})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	sc.symbols, sc.heap = syms, h
	return out
}

// less orders candidates: lower rank first, then the leftmost.
func (c candidate) less(o candidate) bool {
	return c.rank < o.rank || (c.rank == o.rank && c.pos < o.pos)
}

func heapPush(h []candidate, c candidate) []candidate {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].less(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	return h
}

func heapPop(h []candidate) ([]candidate, candidate) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].less(h[small]) {
			small = l
		}
		if r < len(h) && h[r].less(h[small]) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	return h, top
}

package kernelbench

import "stepbench/runner"

// tabledView is attn's contiguous cache as the block table sees it, for a
// backend that takes only the tabled form (runner.KVTableUser: an op
// library of op ABI 2 replaces the op): one page of MaxSeq positions per
// sequence (block_table[b] = b), every sequence at StartPos with SeqLen
// new tokens. It uploads the view and, outside anything timed, hands its
// host copy to the backend's plan (runner.KVPlanner), as the engine does
// at Begin.
func (b *opBuilder) tabledView(attn runner.AttnShape) (runner.AttnShape, runner.KVView) {
	B, S, P := attn.Batch, attn.SeqLen, attn.StartPos
	t := attn
	t.PageSize, t.NumPages, t.MaxPages = attn.MaxSeq, B, 1
	t.QLens, t.SeqLens = make([]int, B), make([]int, B)
	host := runner.KVHostView{BlockTable: make([]int32, B), SeqLens: make([]int32, B), QueryStart: make([]int32, B+1)}
	for i := range B {
		t.QLens[i], t.SeqLens[i] = S, P+S
		host.BlockTable[i], host.SeqLens[i], host.QueryStart[i+1] = int32(i), int32(P+S), int32((i+1)*S)
		for s := range S {
			host.Positions = append(host.Positions, int32(P+s))
			host.SlotMapping = append(host.SlotMapping, int64(i*attn.MaxSeq+P+s))
		}
	}
	be := b.be
	kv := runner.KVView{BlockTable: b.alloc(runner.I32, B), SeqLens: b.alloc(runner.I32, B), QueryStart: b.alloc(runner.I32, B+1),
		Positions: b.alloc(runner.I32, B*S), SlotMapping: b.alloc(runner.I64, B*S)}
	for _, u := range []struct {
		buf  runner.Buffer
		vals []int32
	}{{kv.BlockTable, host.BlockTable}, {kv.SeqLens, host.SeqLens}, {kv.QueryStart, host.QueryStart}, {kv.Positions, host.Positions}} {
		b.upload(u.buf, func() error { return be.UploadI32(u.buf, u.vals) })
	}
	b.upload(kv.SlotMapping, func() error { return be.UploadI64(kv.SlotMapping, host.SlotMapping) })
	if p, ok := be.(runner.KVPlanner); ok && b.err == nil {
		if S == 1 {
			b.err = p.PlanKV(runner.KVHostView{}, runner.AttnShape{}, host, t)
		} else {
			b.err = p.PlanKV(host, t, runner.KVHostView{}, runner.AttnShape{})
		}
	}
	return t, kv
}

// takesTable reports whether be takes only the tabled form.
func takesTable(be runner.Backend) bool {
	u, ok := be.(runner.KVTableUser)
	return ok && u.UsesKVTable()
}

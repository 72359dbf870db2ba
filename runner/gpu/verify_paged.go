package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// The block table's kernels (rope_kv_write 3, attn_prefill 4, attn_decode
// 6, gather_last_ragged, kv_advance) against their twins on paged and
// ragged geometries: page sizes 1, 16, 64 and 24 (neither a power of two
// nor a divisor of the lengths), pages in order and shuffled over the
// pool, the contiguous layout's one page per sequence, ragged lengths from
// 1 to the table's capacity (the longest sequence fills its row of the
// table), sequences ending exactly on a page boundary, and the table's
// unused entries poisoned with page ids past the pool: a kernel that reads
// a page a sequence does not have faults, and one that reads a slot past a
// sequence's length in its last page reads NaN (every slot no sequence
// holds is poisoned).

// pagedGeometry is one case's layout: the cache's layout (the zero
// value: the contiguous layout's one page per sequence), each sequence's
// cached context and new tokens, and extra positions of capacity past them.
type pagedGeometry struct {
	kv    runner.KVOptions
	ctx   []int
	qLens []int
	extra int
}

// pages is the paged layout of pages of size tokens handed out in order.
func pages(size int, order string) runner.KVOptions {
	return runner.KVOptions{Layout: runner.KVPaged, PageSize: size, Order: order}
}

// pagedView is a geometry laid out: the tabled shape, the plan (block
// table), the twins' view and the step's new tokens' positions and slots.
type pagedView struct {
	a         kernels.AttnShape
	plan      runner.KVPlan
	kv        ref.PagedKV
	positions []int32
	slots     []int64
	label     string
}

// layout lays g out for heads of m (PlanKV's pools: exactly the pages the
// sequences' capacities need, handed out in g's order, the table poisoned
// past each sequence's pages).
func (g pagedGeometry) layout(m kernels.ModelShape, seed uint64) *pagedView {
	batch := len(g.qLens)
	lens, capacity := make([]int, batch), make([]int, batch)
	for b := range batch {
		lens[b] = g.ctx[b] + g.qLens[b]
		capacity[b] = lens[b] + g.extra
	}
	o := g.kv
	if o.Seed == 0 {
		o.Seed = seed
	}
	o.PoisonTable = true
	p := runner.PlanKV(capacity, o)
	v := &pagedView{plan: p, label: fmt.Sprintf("%s %s", m.Name, o)}
	v.a = kernels.AttnShape{Batch: batch, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim,
		MaxSeq: p.MaxPages * p.PageSize, QLens: slices.Clone(g.qLens), SeqLens: lens,
		PageSize: p.PageSize, NumPages: p.NumPages, MaxPages: p.MaxPages, Paged: o.Paged(), Cache: o.DType}
	v.kv = ref.PagedKV{PageSize: p.PageSize, NumPages: p.NumPages, MaxPages: p.MaxPages, BlockTable: p.Table,
		SeqLens: make([]int32, batch), QueryStart: make([]int32, batch+1)}
	for b := range batch {
		v.a.SeqLen = max(v.a.SeqLen, g.qLens[b])
		v.kv.SeqLens[b] = int32(lens[b])
		v.kv.QueryStart[b+1] = v.kv.QueryStart[b] + int32(g.qLens[b])
		for i := range g.qLens[b] {
			v.positions = append(v.positions, int32(g.ctx[b]+i))
			v.slots = append(v.slots, p.Slot(b, g.ctx[b]+i))
		}
	}
	v.label += fmt.Sprintf(" lens=%s q=%s (table %d x %d pages of %d)", joinInts(lens), joinInts(g.qLens), batch, p.MaxPages, p.PageSize)
	return v
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// pagedModels are the head shapes the paged checks run at: Llama-3-8B's,
// Llama-3.2-1B's and llama-tiny's (head_dim 32), whatever the run's
// models, then each model of
// models whose heads differ and that the block table's attention takes.
func pagedModels(models []kernels.ModelShape) []kernels.ModelShape {
	var out []kernels.ModelShape
	for _, name := range []string{"llama-3-8b", "llama-3.2-1b", "llama-tiny"} {
		if cfg, err := runner.Preset(name); err == nil {
			out = append(out, cfg.KernelShape())
		}
	}
	for _, m := range models {
		same := func(o kernels.ModelShape) bool {
			return o.Heads == m.Heads && o.KVHeads == m.KVHeads && o.HeadDim == m.HeadDim
		}
		if !slices.ContainsFunc(out, same) && supportedHeadDim(m.HeadDim) && m.KVHeads > 0 && m.Heads%m.KVHeads == 0 &&
			m.Heads/m.KVHeads <= kernels.Decode2Groups[len(kernels.Decode2Groups)-1] {
			out = append(out, m)
		}
	}
	return out
}

// pagedDecodeGeometries are decode steps (one new token per sequence): a
// sequence of 1 token, ones ending on a page boundary, the longest filling
// its table row, and one long enough to take many splits of attn_decode 6.
var pagedDecodeGeometries = []pagedGeometry{
	{kv: pages(16, runner.PagesShuffled), ctx: []int{0, 36, 63, 199, 255}, qLens: []int{1, 1, 1, 1, 1}},
	{kv: pages(1, runner.PagesShuffled), ctx: []int{0, 4, 32, 99}, qLens: []int{1, 1, 1, 1}},
	{kv: pages(64, runner.PagesSequential), ctx: []int{63, 0, 129, 190}, qLens: []int{1, 1, 1, 1}},
	{kv: pages(24, runner.PagesShuffled), ctx: []int{24, 0, 47, 70}, qLens: []int{1, 1, 1, 1}},
	{ctx: []int{2, 149, 76}, qLens: []int{1, 1, 1}},
	{kv: pages(16, runner.PagesShuffled), ctx: []int{999, 16, 0}, qLens: []int{1, 1, 1}},
}

// pagedPrefillGeometries are varlen prefills: prompts of 1 token and of
// more than one 128-row query tile, chunked prefill over cached contexts,
// boundaries as above.
var pagedPrefillGeometries = []pagedGeometry{
	{kv: pages(16, runner.PagesShuffled), ctx: []int{0, 40, 3, 16}, qLens: []int{5, 1, 130, 16}},
	{kv: pages(1, runner.PagesShuffled), ctx: []int{9, 0}, qLens: []int{7, 64}},
	{kv: pages(24, runner.PagesShuffled), ctx: []int{18, 45}, qLens: []int{30, 3}},
	{kv: pages(64, runner.PagesSequential), ctx: []int{0, 63}, qLens: []int{70, 1}},
	{ctx: []int{0, 5}, qLens: []int{12, 3}},
}

// pagedCaches draws a view's K and V caches: random rows at every slot a
// sequence holds (positions below its length), the NaN poison at every
// other slot of the pool.
func (v *Verifier) pagedCaches(pv *pagedView) (kCache, vCache []uint16) {
	kvWidth := pv.a.KVHeads * pv.a.HeadDim
	n := pv.plan.Slots() * kvWidth
	kCache, vCache = make([]uint16, n), make([]uint16, n)
	for i := range kCache {
		kCache[i], vCache[i] = poisonBF16, poisonBF16
	}
	for b, l := range pv.a.SeqLens {
		for j := range l {
			at := int(pv.plan.Slot(b, j)) * kvWidth
			copy(kCache[at:at+kvWidth], RandomBF16(v.rng, kvWidth, 0, 1))
			copy(vCache[at:at+kvWidth], RandomBF16(v.rng, kvWidth, 0, 1))
		}
	}
	return kCache, vCache
}

// i64 uploads int64s.
func (v *Verifier) i64(data []int64) cuda.DevPtr {
	p := v.alloc(8 * len(data))
	if len(data) > 0 {
		v.upload(p, unsafe.Pointer(&data[0]), 8*len(data))
	}
	return p
}

func (v *Verifier) getI64(p cuda.DevPtr, n int) []int64 {
	out := make([]int64, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, 8*n)
	}
	return out
}

// uploadView puts a view's table, lengths, starts, positions and slots on
// the device.
func (v *Verifier) uploadView(pv *pagedView) KVPtrs {
	return KVPtrs{BlockTable: v.i32(pv.plan.Table), SeqLens: v.i32(pv.kv.SeqLens), QueryStart: v.i32(pv.kv.QueryStart),
		Positions: v.i32(pv.positions), SlotMapping: v.i64(pv.slots)}
}

// verifyPagedAttentions checks the block table's attention at m's heads
// over every decode and prefill geometry.
func (v *Verifier) verifyPagedAttentions(m kernels.ModelShape) {
	for i, g := range slices.Concat(pagedDecodeGeometries, pagedPrefillGeometries) {
		if v.dead == nil {
			v.verifyPagedAttention(g.layout(m, uint64(i+1)))
		}
	}
}

// verifyPagedAttention checks the block-table version of attention at a
// view (decode when every sequence brings one token) against
// ref.AttentionPaged.
func (v *Verifier) verifyPagedAttention(pv *pagedView) {
	a := pv.a
	op, name := kernels.OpAttnPrefill, "attention prefill"
	if tabledDecode(a) {
		op, name = kernels.OpAttnDecode, "attention decode"
	}
	if v.set.Replaces(op) {
		return // an op library (op ABI 1) takes the contiguous layout only
	}
	for _, ver := range v.versions(op) {
		set := v.pinned(op, ver)
		if ver != kernels.TabledVersion(op) {
			continue // the block table's version only
		}
		if _, err := pickFor(set, op, a); err != nil {
			continue
		}
		got, want := v.runPagedAttention(set, pv, nil)
		rel, err := closeBF16(got, want)
		v.record(v.checkName(op, name, ver)+" paged", pv.label, rel, false, err)
	}
}

// pickFor is the selection's version of op at a.
func pickFor(set *Kernels, op string, a kernels.AttnShape) (int, error) {
	if op == kernels.OpAttnPrefill {
		return set.Selection().PrefillVersion(a)
	}
	return set.Selection().DecodeVersion(a)
}

// runPagedAttention draws q and the caches of a view, launches attention
// (output poisoned first) and returns its output and the twin's of the
// rows tokens lists (nil: every row).
func (v *Verifier) runPagedAttention(set *Kernels, pv *pagedView, tokens []int) (got, want []uint16) {
	if pv.a.Cache.FP8() {
		return v.runPagedAttentionFP8(set, pv, tokens)
	}
	a := pv.a
	width := a.Heads * a.HeadDim
	T := a.Tokens()
	q := RandomBF16(v.rng, T*width, 0, 1)
	kCache, vCache := v.pagedCaches(pv)
	want = make([]uint16, T*width)
	ref.AttentionPaged(want, q, kCache, vCache, pv.kv, a.Heads, a.KVHeads, a.HeadDim, tokens)
	wsBytes := set.AttentionWorkspaceBytes(a)
	var ws cuda.DevPtr
	if wsBytes > 0 {
		ws = v.alloc(wsBytes)
		v.launch(func() error { return set.ZeroAttentionWorkspace(v.stream, ws, wsBytes) })
	}
	out := v.poisoned(T * width)
	dQ, dK, dV, kv := v.bf16(q), v.bf16(kCache), v.bf16(vCache), v.uploadView(pv)
	v.launch(func() error { return set.Attention(v.stream, out, dQ, dK, dV, kv, ws, wsBytes, a) })
	v.modelBytes = costBytes("attention", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Attention(b(1), b(1), b(1), b(1), runner.KVView{}, a)
	})
	return v.getBF16(out, T*width), want
}

// verifyPagedRopes checks rope_kv_write 3 at m over the prefill
// geometries, one with a padding token (slot −1: q rotated, nothing
// written).
func (v *Verifier) verifyPagedRopes(m kernels.ModelShape) {
	if v.set.Replaces(kernels.OpRope) || m.HeadDim%16 != 0 || m.HeadDim > kernels.RopeMaxHeadDim {
		return
	}
	for _, ver := range v.versions(kernels.OpRope) {
		if ver != kernels.RopeTabledVersion {
			continue
		}
		set := v.pinned(kernels.OpRope, ver)
		for i, g := range pagedPrefillGeometries {
			pv := g.layout(m, uint64(i+1))
			if i == 0 {
				pv.slots[len(pv.slots)-1] = -1 // a padding token
				pv.label += " (last token padding: slot -1)"
			}
			if v.dead == nil {
				v.verifyPagedRopeAt(set, versioned("rope_kv_write", ver)+" paged", m, pv)
			}
		}
	}
}

// verifyPagedRopeAt checks one view: q and the written k rows within the
// bound, the written v rows exact, every other cache row untouched.
func (v *Verifier) verifyPagedRopeAt(set *Kernels, check string, m kernels.ModelShape, pv *pagedView) {
	if pv.a.Cache.FP8() {
		v.verifyPagedRopeFP8At(set, check+" "+pv.a.Cache.String(), m, pv)
		return
	}
	a := pv.a
	T, qWidth, kvWidth := a.Tokens(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qkv := RandomBF16(v.rng, T*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, m.RopeTheta, nil)
	kCache, vCache := v.pagedCaches(pv)
	wantK, wantV, wantQ := slices.Clone(kCache), slices.Clone(vCache), make([]uint16, T*qWidth)
	ref.RopeKVWritePaged(wantQ, wantK, wantV, qkv, invFreq, pv.positions, pv.slots, T, a.Heads, a.KVHeads, a.HeadDim, pv.plan.Slots())
	dK, dV := v.bf16(kCache), v.bf16(vCache)
	for _, s := range pv.slots { // poison exactly the rows the kernel writes
		if s >= 0 && v.err == nil {
			v.fail(v.stream.Memset16(dK+cuda.DevPtr(2*int(s)*kvWidth), poisonBF16, kvWidth))
			v.fail(v.stream.Memset16(dV+cuda.DevPtr(2*int(s)*kvWidth), poisonBF16, kvWidth))
		}
	}
	q, dQKV, dFreq, kv := v.poisoned(T*qWidth), v.bf16(qkv), v.f32(invFreq), v.uploadView(pv)
	v.launch(func() error { return set.RopeKVWrite(v.stream, q, dK, dV, dQKV, dFreq, kv, a) })
	rel, err := closeBF16(v.getBF16(q, T*qWidth), wantQ)
	gotK, gotV := v.getBF16(dK, len(kCache)), v.getBF16(dV, len(vCache))
	written := map[int64]bool{}
	for _, s := range pv.slots {
		if s < 0 {
			continue
		}
		written[s] = true
		lo, hi := int(s)*kvWidth, int(s+1)*kvWidth
		kRel, kErr := closeBF16(gotK[lo:hi], wantK[lo:hi])
		rel = max(rel, kRel)
		if kErr != nil {
			err = errors.Join(err, fmt.Errorf("k row of slot %d: %w", s, kErr))
		}
		if vErr := equalBits(gotV[lo:hi], wantV[lo:hi]); vErr != nil {
			err = errors.Join(err, fmt.Errorf("v row of slot %d: %w", s, vErr))
		}
	}
	for s := range int64(pv.plan.Slots()) {
		lo, hi := int(s)*kvWidth, int(s+1)*kvWidth
		if !written[s] && (!slices.Equal(gotK[lo:hi], kCache[lo:hi]) || !slices.Equal(gotV[lo:hi], vCache[lo:hi])) {
			err = errors.Join(err, fmt.Errorf("slot %d, which no token of the step maps to, was written", s))
			break
		}
	}
	v.record(check, pv.label, rel, false, err)
}

// verifyGatherLastRagged checks gather_last_ragged: sequences of 1 to 19
// new rows, hidden and vocab wide.
func (v *Verifier) verifyGatherLastRagged(m kernels.ModelShape) {
	for _, width := range []int{m.Hidden, m.Vocab} {
		v.gatherLastRaggedAt(m, []int32{0, 1, 20, 27, 28}, width)
	}
}

// gatherLastRaggedAt checks gather_last_ragged at query starts (the input's
// rows capped within gateMaxElements: the last sequences' starts are
// clamped, the rows the kernel reads stay the ones it must).
func (v *Verifier) gatherLastRaggedAt(m kernels.ModelShape, starts []int32, width int) {
	batch := len(starts) - 1
	rows := capRows(int(starts[batch]), width)
	if rows < int(starts[batch]) {
		starts = slices.Clone(starts)
		for b := 1; b <= batch; b++ {
			starts[b] = max(starts[b-1]+1, min(starts[b], int32(rows-batch+b)))
		}
		rows = int(starts[batch])
	}
	in := RandomBF16(v.rng, rows*width, 0, 1)
	want := make([]uint16, batch*width)
	ref.GatherLastRagged(want, in, starts, width)
	out, dIn, dStarts := v.poisoned(batch*width), v.bf16(in), v.i32(starts)
	v.launch(func() error { return v.set.GatherLastRagged(v.stream, out, dIn, dStarts, batch, width, rows) })
	err := equalBits(v.getBF16(out, batch*width), want)
	label := fmt.Sprintf("%s query starts %v width=%d", m.Name, starts, width)
	if len(starts) > 8 {
		label = fmt.Sprintf("%s %d sequences, %d rows, width=%d", m.Name, batch, rows, width)
	}
	v.record("gather_last ragged", label, 0, true, err)
}

// verifyKVAdvance checks kv_advance on a shuffled table of pages of 16:
// positions inside a page, at its last slot, and at the table's last one
// (the next slot past the table: −1), with and without the start position.
func (v *Verifier) verifyKVAdvance() {
	capacity := []int{5, 16, 47, 33, 1, 64}
	plan := runner.PlanKV(capacity, runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesShuffled, Seed: 5, PoisonTable: true})
	batch := len(capacity)
	positions, lens, slots := make([]int32, batch), make([]int32, batch), make([]int64, batch)
	for b, c := range capacity {
		positions[b] = int32(min(c-1, 15*b)) // 0, 15, 30, 32, 0, 63 (the table's last position)
		lens[b], slots[b] = positions[b]+1, plan.Slot(b, int(positions[b]))
	}
	for _, withPos := range []bool{true, false} {
		wantP, wantL, wantS := slices.Clone(positions), slices.Clone(lens), slices.Clone(slots)
		var pos []int32
		kv := KVPtrs{Positions: v.i32(positions), SeqLens: v.i32(lens), SlotMapping: v.i64(slots), BlockTable: v.i32(plan.Table)}
		if withPos {
			pos = []int32{41}
			kv.Pos = v.i32(pos)
		}
		ref.KVAdvance(wantP, wantL, wantS, plan.Table, pos, batch, plan.PageSize, plan.MaxPages)
		a := kernels.AttnShape{Batch: batch, SeqLen: 1, PageSize: plan.PageSize, NumPages: plan.NumPages, MaxPages: plan.MaxPages,
			QLens: slices.Repeat([]int{1}, batch)}
		v.launch(func() error { return v.set.AdvanceKV(v.stream, kv, a) })
		err := errors.Join(equalBits(v.getI32(kv.Positions, batch), wantP), equalBits(v.getI32(kv.SeqLens, batch), wantL),
			equalBits(v.getI64(kv.SlotMapping, batch), wantS))
		if withPos {
			err = errors.Join(err, equalBits(v.getI32(kv.Pos, 1), pos))
		}
		v.record("kv_advance", fmt.Sprintf("batch=%d pages of 16 shuffled, start position %v", batch, withPos), 0, true, err)
	}
}

// verifyPagedAll runs the block table's checks VerifyAll names (or all of
// them for the name "paged"): at the paged head shapes (pagedModels)
// attention, rope_kv_write and the replayed decode step; gather_last_ragged
// at each model's widths; kv_advance once.
func (v *Verifier) verifyPagedAll(models []kernels.ModelShape) {
	wants := func(check string) bool { return v.dead == nil && (v.wants(check) || slices.Contains(v.only, "paged")) }
	wantsFP8 := func(check string) bool {
		return v.dead == nil && (wants(check) || slices.Contains(v.only, "paged_fp8"))
	}
	for _, m := range pagedModels(models) {
		if wants("rope_kv_write") {
			v.verifyPagedRopes(m)
		}
		if wantsFP8("rope_kv_write") {
			v.verifyPagedRopesFP8(m)
		}
		if wants("attention") {
			v.verifyPagedAttentions(m)
		}
		if wantsFP8("attention") {
			v.verifyPagedAttentionsFP8(m)
		}
		if wants("decode_graph") {
			v.verifyPagedDecodeGraph(m)
		}
		if wantsFP8("decode_graph") {
			v.verifyPagedDecodeGraphFP8(m)
		}
	}
	for _, m := range models {
		if wants("gather_last") {
			v.verifyGatherLastRagged(m)
		}
	}
	if wants("kv_advance") {
		v.verifyKVAdvance()
	}
}

package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// verify_oplib_kv.go checks an op library's KV ops (op ABI 2: the tabled
// form only) against ref.RopeKVWritePaged, ref.AttentionPaged and
// ref.AttentionPagedLSE: at the contiguous shapes the other checks use
// (as the engine runs them for a library: the contiguous layout as a
// table, and paged at a page size the library takes, shuffled), at a
// suite of its own (page sizes 1, 7, 16 and 64 or those the library
// declares; ragged lengths of 1, a page boundary and the table's maximum;
// chunked prefill over a context; a padding token), and inside a captured
// graph replayed while the view moves on in device memory. The block
// table's unused entries hold page ids past the pool, so a library that
// reads past a sequence's pages faults. Each op's plan entry point, if it
// has one, is called before its calls, as the engine calls it.

// libKVCase is one tabled case: each sequence's cached and new tokens, the
// page size (0: the contiguous layout as a table, one page of maxSeq
// positions per sequence) and order, and the new tokens at the end whose
// slot is padding (-1; rope_kv_write only).
type libKVCase struct {
	cached, newTokens []int
	pageSize, maxSeq  int
	shuffled          bool
	pad               int
	hnd               bool // the caches laid out HND (the same tensors, other strides)
}

// layout is the case's cache layout (cuda.OpKVNHD or OpKVHND).
func (c libKVCase) layout() uint32 {
	if c.hnd {
		return cuda.OpKVHND
	}
	return cuda.OpKVNHD
}

// hndOrder permutes a cache of pages [pages][ps][kv][d] (NHD) into
// [pages][kv][ps][d] (HND), or back with back set.
func hndOrder(cache []uint16, a kernels.AttnShape, back bool) []uint16 {
	out := make([]uint16, len(cache))
	ps, kv, d := a.PageSize, a.KVHeads, a.HeadDim
	for p := range a.NumPages {
		for o := range ps {
			for h := range kv {
				nhd, hnd := ((p*ps+o)*kv+h)*d, ((p*kv+h)*ps+o)*d
				if back {
					nhd, hnd = hnd, nhd
				}
				copy(out[hnd:hnd+d], cache[nhd:nhd+d])
			}
		}
	}
	return out
}

// cacheOn uploads a host cache (NHD) laid out as c says.
func (v *Verifier) cacheOn(cache []uint16, a kernels.AttnShape, c libKVCase) cuda.DevPtr {
	if c.hnd {
		return v.bf16(hndOrder(cache, a, false))
	}
	return v.bf16(cache)
}

// cacheOff downloads a device cache laid out as c says, as NHD.
func (v *Verifier) cacheOff(p cuda.DevPtr, n int, a kernels.AttnShape, c libKVCase) []uint16 {
	got := v.getBF16(p, n)
	if c.hnd {
		return hndOrder(got, a, true)
	}
	return got
}

// libKVTable is a case laid out on the device.
type libKVTable struct {
	a         kernels.AttnShape
	plan      runner.KVPlan
	pk        ref.PagedKV
	positions []int32
	slots     []int64
	host      runner.KVHostView
	ptrs      KVPtrs
	label     string
}

// layOut plans c's pages (runner.PlanKV, the table's unused entries
// poisoned) and uploads its view. Sequences get pages for positions[b]
// positions: their length, or maxSeq each when the case is a run's.
func (v *Verifier) layOut(m kernels.ModelShape, c libKVCase, positions []int) *libKVTable {
	B := len(c.cached)
	lens := make([]int, B)
	for b := range B {
		lens[b] = c.cached[b] + c.newTokens[b]
	}
	if positions == nil {
		positions = lens
	}
	opts := runner.KVOptions{Layout: runner.KVPaged, PageSize: c.pageSize, Seed: v.rng.Uint64(), PoisonTable: true}
	where := fmt.Sprintf("paged %d", c.pageSize)
	if c.shuffled {
		opts.Order, where = runner.PagesShuffled, where+" shuffled"
	}
	if c.pageSize == 0 {
		positions = slices.Repeat([]int{max(c.maxSeq, slices.Max(positions))}, B)
		opts = runner.KVOptions{}
	}
	t := &libKVTable{plan: runner.PlanKV(positions, opts)}
	if c.pageSize == 0 {
		where = fmt.Sprintf("contiguous as a table (page %d)", t.plan.PageSize)
	}
	t.a = kernels.AttnShape{Batch: B, SeqLen: slices.Max(c.newTokens), Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim,
		MaxSeq: t.plan.MaxPages * t.plan.PageSize, QLens: slices.Clone(c.newTokens), SeqLens: lens, PageSize: t.plan.PageSize,
		NumPages: t.plan.NumPages, MaxPages: t.plan.MaxPages, Paged: c.pageSize > 0}
	t.setView(c.cached, c.newTokens, c.pad)
	t.label = strings.TrimSpace(fmt.Sprintf("%s b=%d q=%v seq_lens=%v h=%d kv=%d d=%d, %s", m.Name, B, c.newTokens, lens, m.Heads, m.KVHeads, m.HeadDim, where))
	if c.pad > 0 {
		t.label += fmt.Sprintf(", %d padding token(s)", c.pad)
	}
	if c.hnd {
		t.label += ", HND"
	}
	t.ptrs = KVPtrs{BlockTable: v.i32(t.plan.Table), SeqLens: v.i32(t.pk.SeqLens), QueryStart: v.i32(t.pk.QueryStart),
		Positions: v.i32(t.positions), SlotMapping: v.i64(t.slots)}
	return t
}

// setView fills the host view of a step in which sequence b brings
// newTokens[b] tokens after cached[b], its last pad tokens padding.
func (t *libKVTable) setView(cached, newTokens []int, pad int) {
	B := len(cached)
	t.pk = ref.PagedKV{PageSize: t.plan.PageSize, NumPages: t.plan.NumPages, MaxPages: t.plan.MaxPages, BlockTable: t.plan.Table,
		SeqLens: make([]int32, B), QueryStart: make([]int32, B+1)}
	t.positions, t.slots = t.positions[:0], t.slots[:0]
	for b := range B {
		t.pk.SeqLens[b] = int32(cached[b] + newTokens[b])
		t.pk.QueryStart[b+1] = t.pk.QueryStart[b] + int32(newTokens[b])
		for i := range newTokens[b] {
			t.positions = append(t.positions, int32(cached[b]+i))
			t.slots = append(t.slots, t.plan.Slot(b, cached[b]+i))
		}
	}
	for i := len(t.slots) - pad; i < len(t.slots); i++ {
		t.slots[i] = -1
	}
	t.host = runner.KVHostView{BlockTable: t.plan.Table, SeqLens: t.pk.SeqLens, QueryStart: t.pk.QueryStart, Positions: t.positions, SlotMapping: t.slots}
}

// uploadLibView writes the host view's lengths, positions and slots over the
// device view (the table stays).
func (v *Verifier) uploadLibView(t *libKVTable) {
	v.upload(t.ptrs.SeqLens, unsafe.Pointer(&t.pk.SeqLens[0]), 4*len(t.pk.SeqLens))
	v.upload(t.ptrs.QueryStart, unsafe.Pointer(&t.pk.QueryStart[0]), 4*len(t.pk.QueryStart))
	v.upload(t.ptrs.Positions, unsafe.Pointer(&t.positions[0]), 4*len(t.positions))
	v.upload(t.ptrs.SlotMapping, unsafe.Pointer(&t.slots[0]), 8*len(t.slots))
}

// libPhase is the plan phase of a step of shape a: decode when every
// sequence brings one token.
func libPhase(a kernels.AttnShape) int {
	if libAttentionOp(a) == kernels.OpAttnDecode {
		return cuda.OpPhaseDecode
	}
	return cuda.OpPhasePrefill
}

// libLayouts are the layouts a library's op is checked on at the other
// checks' shapes: the contiguous layout as a table when it takes any page
// size, and pages of 16 tokens (or the first size it takes), shuffled.
func (v *Verifier) libLayouts(op string) []libKVCase {
	caps := v.set.opLib(op).Caps()
	var out []libKVCase
	if caps.AnyPageSize() {
		out = append(out, libKVCase{})
	}
	ps := runner.DefaultPageSize
	if !caps.TakesPageSize(ps) {
		ps = firstPageSize(caps)
	}
	return append(out, libKVCase{pageSize: ps, shuffled: true})
}

// libSuitePageSizes are the page sizes of the suite: 1, 7 (dividing no
// length of it), 16 and 64, or the library's own (up to four), and those
// of extra (the run's) the library takes.
func (v *Verifier) libSuitePageSizes(op string, extra []int) []int {
	caps := v.set.opLib(op).Caps()
	out := []int{1, 7, 16, 64}
	switch {
	case caps.PageSizes != nil:
		out = slices.Clone(caps.PageSizes[:min(4, len(caps.PageSizes))])
	case caps.PageSizeMultiple > 1:
		out = []int{caps.PageSizeMultiple, 4 * caps.PageSizeMultiple}
	}
	for _, ps := range extra {
		if caps.TakesPageSize(ps) && !slices.Contains(out, ps) {
			out = append(out, ps)
		}
	}
	return out
}

// RunPageSizes are the page sizes of the paged layouts of shapes (the
// suite adds them to its own).
func RunPageSizes(shapes []RunShape) []int {
	var out []int
	for _, s := range shapes {
		ps := s.KV.PageSize
		if ps == 0 {
			ps = runner.DefaultPageSize
		}
		if s.KV.Paged() && !slices.Contains(out, ps) {
			out = append(out, ps)
		}
	}
	return out
}

// libAttentionAt checks the attention library that replaces a's op at a's
// lengths (a contiguous, uniform shape of the other checks) on the
// layouts the engine would run it on; false when no library replaces it
// or a is tabled already (the checks then call the library as they call
// a tabled kernel).
func (v *Verifier) libAttentionAt(a kernels.AttnShape) bool {
	if v.set.opLib(attentionOp(a)) == nil || a.Tabled() {
		return false
	}
	m := kernels.ModelShape{Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim}
	for _, c := range v.libLayouts(attentionOp(a)) {
		c.cached, c.newTokens, c.maxSeq = slices.Repeat([]int{a.StartPos}, a.Batch), slices.Repeat([]int{a.SeqLen}, a.Batch), a.MaxSeq
		if v.dead == nil {
			v.libAttentionCase(m, c)
		}
	}
	return true
}

// libRopeAt is libAttentionAt for rope_kv_write.
func (v *Verifier) libRopeAt(m kernels.ModelShape, a kernels.AttnShape) bool {
	if v.set.opLib(kernels.OpRope) == nil || a.Tabled() {
		return false
	}
	if a.Tokens()*(a.Heads+2*a.KVHeads)*a.HeadDim > gateMaxElements {
		return true // a prefill too large to draw in Go: its decode steps are checked
	}
	for _, c := range v.libLayouts(kernels.OpRope) {
		c.cached, c.newTokens, c.maxSeq = slices.Repeat([]int{a.StartPos}, a.Batch), slices.Repeat([]int{a.SeqLen}, a.Batch), a.MaxSeq
		if v.dead == nil {
			v.libRopeCase(m, c)
		}
	}
	return true
}

// verifyLibKVSuite runs the library suite of each model's shape: for every
// page size, decode over lengths 1, a page, a page and one and three
// pages (the table's maximum); prefill of 1, 7 and page+3 tokens over
// contexts of a page, none and two pages less three (chunked); rope over
// both, the prefill's last token padding.
func (v *Verifier) verifyLibKVSuite(models []kernels.ModelShape, extraPageSizes ...int) {
	for _, m := range models {
		if v.wants("rope_kv_write") && v.set.Replaces(kernels.OpRope) {
			for _, ps := range v.libSuitePageSizes(kernels.OpRope, extraPageSizes) {
				for _, c := range libSuiteCases(ps, ps == hndPageSize(v.libSuitePageSizes(kernels.OpRope, extraPageSizes)) && v.takesHND(kernels.OpRope)) {
					if v.dead == nil {
						v.libRopeCase(m, c)
					}
				}
			}
		}
		if !v.wants("attention") {
			v.verifyLibKVSuiteFP8(m, extraPageSizes)
			continue
		}
		for _, op := range []string{kernels.OpAttnDecode, kernels.OpAttnPrefill} {
			if !v.set.Replaces(op) {
				continue
			}
			for _, ps := range v.libSuitePageSizes(op, extraPageSizes) {
				for _, c := range libSuiteCases(ps, ps == hndPageSize(v.libSuitePageSizes(op, extraPageSizes)) && v.takesHND(op)) {
					c.pad = 0
					if v.dead == nil && (op == kernels.OpAttnPrefill) == (slices.Max(c.newTokens) > 1) {
						v.libAttentionCase(m, c)
					}
				}
			}
		}
		v.verifyLibKVSuiteFP8(m, extraPageSizes)
	}
}

// libSuiteCases are the suite's decode and prefill cases at page size ps,
// and with hnd both again with the caches laid out HND.
func libSuiteCases(ps int, hnd bool) []libKVCase {
	cases := []libKVCase{
		{cached: []int{0, ps - 1, ps, 3*ps - 1}, newTokens: []int{1, 1, 1, 1}, pageSize: ps, shuffled: true},
		{cached: []int{ps, 0, max(0, 2*ps-3)}, newTokens: []int{1, 7, ps + 3}, pageSize: ps, shuffled: true, pad: 1},
	}
	if hnd {
		for _, c := range cases[:2] {
			c.hnd = true
			cases = append(cases, c)
		}
	}
	return cases
}

// hndPageSize is the page size of sizes the HND cases run at: the first
// above 1 (at one token a page, HND and NHD are the same bytes).
func hndPageSize(sizes []int) int {
	for _, ps := range sizes {
		if ps > 1 {
			return ps
		}
	}
	return sizes[0]
}

// takesHND reports whether op's library declares the HND layout.
func (v *Verifier) takesHND(op string) bool { return v.set.opLib(op).Caps().Layouts&cuda.OpKVHND != 0 }

// libAttentionCase checks the attention library at case c: the output
// (every row written; the rows of a sample when the reference of all
// would cost more than gateAttentionFLOPs) and, when the library declares
// it, the log-sum-exp.
func (v *Verifier) libAttentionCase(m kernels.ModelShape, c libKVCase) {
	t := v.layOut(m, c, nil)
	a := t.a
	op := libAttentionOp(a)
	o := v.set.opLib(op)
	name := "attention decode"
	if op == kernels.OpAttnPrefill {
		name = "attention prefill"
	}
	T, qWidth, kvWidth := a.Tokens(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	q := RandomBF16(v.rng, T*qWidth, 0, 1)
	kC, vC := RandomBF16(v.rng, a.CacheSlots()*kvWidth, 0, 1), RandomBF16(v.rng, a.CacheSlots()*kvWidth, 0, 1)
	tokens := sampleTabledRows(t, gateAttentionFLOPs, v.rng.Uint64())
	want := make([]uint16, T*qWidth)
	ref.AttentionPaged(want, q, kC, vC, t.pk, a.Heads, a.KVHeads, a.HeadDim, tokens)
	dQ, dK, dV, out := v.bf16(q), v.cacheOn(kC, a, c), v.cacheOn(vC, a, c), v.poisoned(T*qWidth)
	var lse cuda.DevPtr
	if o.Caps().Flags&cuda.OpCapLSE != 0 {
		lse = v.alloc(4 * T * a.Heads)
		if v.err == nil {
			v.fail(v.stream.Memset32(lse, 0x7fc00000, T*a.Heads)) // NaN: a row never written fails
		}
	}
	v.launch(func() error { return v.set.planLib(v.stream, op, t.host, a, libPhase(a), lse != 0, c.layout()) })
	v.launch(func() error {
		_, err := v.set.libAttentionLSE(v.stream, out, dQ, dK, dV, lse, t.ptrs, a, c.layout())
		return err
	})
	got := v.getBF16(out, T*qWidth)
	label := t.label
	if err := allWritten(got, qWidth); err != nil {
		v.record(v.checkName(op, name, 0), label, 0, false, err)
		return
	}
	if tokens != nil {
		got, want = pickRows(got, tokens, qWidth), pickRows(want, tokens, qWidth)
		label += fmt.Sprintf(" (%d of %d query rows compared, every row written)", len(tokens), T)
	}
	rel, err := closeBF16(got, want)
	if lse != 0 {
		label += ", with the log-sum-exp"
		err = errors.Join(err, v.checkLSE(lse, q, kC, t, tokens))
	}
	v.record(v.checkName(op, name, 0), label, rel, false, err)
}

// libLSETolerance bounds |lse − ref| / max(1, |ref|).
const libLSETolerance = 2e-3

// checkLSE compares the library's log-sum-exp with the reference's.
func (v *Verifier) checkLSE(lse cuda.DevPtr, q, kC []uint16, t *libKVTable, tokens []int) error {
	a := t.a
	want := make([]float32, a.Tokens()*a.Heads)
	ref.AttentionPagedLSE(want, q, kC, t.pk, a.Heads, a.KVHeads, a.HeadDim, tokens)
	got := v.getF32(lse, len(want))
	rows := tokens
	if rows == nil {
		rows = make([]int, a.Tokens())
		for i := range rows {
			rows[i] = i
		}
	}
	for _, r := range rows {
		for h := range a.Heads {
			g, w := float64(got[r*a.Heads+h]), float64(want[r*a.Heads+h])
			if !(math.Abs(g-w) <= libLSETolerance*max(1, math.Abs(w))) {
				return fmt.Errorf("lse row %d head %d = %g, want %g (tolerance %g)", r, h, g, w, libLSETolerance)
			}
		}
	}
	return nil
}

// sampleTabledRows is nil when the reference of every row of t costs at
// most budget FLOPs; else each sequence's first and last rows, then rows
// drawn at random, within the budget.
func sampleTabledRows(t *libKVTable, budget float64, seed uint64) []int {
	a := t.a
	T := a.Tokens()
	seqOf := make([]int, T)
	cost := func(r int) float64 {
		b := seqOf[r]
		qLen := int(t.pk.QueryStart[b+1] - t.pk.QueryStart[b])
		return float64(4*a.Heads*a.HeadDim) * float64(int(t.pk.SeqLens[b])-qLen+r-int(t.pk.QueryStart[b])+1)
	}
	total := 0.0
	for b := range a.Batch {
		for r := t.pk.QueryStart[b]; r < t.pk.QueryStart[b+1]; r++ {
			seqOf[r] = b
		}
	}
	for r := range T {
		total += cost(r)
	}
	if total <= budget {
		return nil
	}
	var picked []int
	spent := 0.0
	take := func(r int) {
		if r >= 0 && r < T && !slices.Contains(picked, r) && spent+cost(r) <= budget {
			picked, spent = append(picked, r), spent+cost(r)
		}
	}
	for b := range a.Batch {
		take(int(t.pk.QueryStart[b]))
		take(int(t.pk.QueryStart[b+1]) - 1)
	}
	state := seed | 1
	for tries := 0; tries < 4*T && spent < budget; tries++ {
		state = state*6364136223846793005 + 1442695040888963407
		take(int((state >> 17) % uint64(T)))
	}
	slices.Sort(picked)
	return picked
}

// libRopeCase checks the rope_kv_write library at case c: q (within the
// bound), the written K rows (within the bound) and V rows (exact), every
// other cache row untouched, a padding token's rows never written.
func (v *Verifier) libRopeCase(m kernels.ModelShape, c libKVCase) {
	t := v.layOut(m, c, nil)
	a := t.a
	T, qWidth, kvWidth := a.Tokens(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qkv := RandomBF16(v.rng, T*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, ropeTheta(m), nil)
	kC, vC := RandomBF16(v.rng, a.CacheSlots()*kvWidth, 0, 1), RandomBF16(v.rng, a.CacheSlots()*kvWidth, 0, 1)
	wantQ, wantK, wantV := make([]uint16, T*qWidth), slices.Clone(kC), slices.Clone(vC)
	ref.RopeKVWritePaged(wantQ, wantK, wantV, qkv, invFreq, t.positions, t.slots, T, a.Heads, a.KVHeads, a.HeadDim, a.CacheSlots())
	kP, vP := slices.Clone(kC), slices.Clone(vC)
	for _, s := range t.slots { // poison exactly the rows the library must write
		if s >= 0 {
			for i := int(s) * kvWidth; i < int(s+1)*kvWidth; i++ {
				kP[i], vP[i] = poisonBF16, poisonBF16
			}
		}
	}
	dK, dV := v.cacheOn(kP, a, c), v.cacheOn(vP, a, c)
	q, dQKV, dFreq := v.poisoned(T*qWidth), v.bf16(qkv), v.f32(invFreq)
	v.launch(func() error {
		return v.set.planLib(v.stream, kernels.OpRope, t.host, a, libPhase(a), false, c.layout())
	})
	v.launch(func() error {
		_, err := v.set.libRopeLayout(v.stream, q, dK, dV, dQKV, dFreq, t.ptrs, a, c.layout())
		return err
	})
	rel, err := closeBF16(v.getBF16(q, T*qWidth), wantQ)
	kRel, kErr := compareCache(v.cacheOff(dK, len(kC), a, c), wantK, t.slots, kvWidth, false)
	_, vErr := compareCache(v.cacheOff(dV, len(vC), a, c), wantV, t.slots, kvWidth, true)
	if kErr != nil {
		kErr = fmt.Errorf("k cache: %w", kErr)
	}
	if vErr != nil {
		vErr = fmt.Errorf("v cache: %w", vErr)
	}
	v.record(v.checkName(kernels.OpRope, "rope_kv_write", 0), t.label, max(rel, kRel), false, errors.Join(err, kErr, vErr))
}

// ropeTheta is the model's RoPE base, Llama-3's when the shape has none.
func ropeTheta(m kernels.ModelShape) float64 {
	if m.RopeTheta > 0 {
		return m.RopeTheta
	}
	return ropeAttentionTheta
}

// compareCache compares a cache with the reference: the rows at slots
// within the bound (exact: bit for bit), every other row bit for bit.
func compareCache(got, want []uint16, slots []int64, width int, exact bool) (float64, error) {
	var gotRows, wantRows []uint16
	gotRest, wantRest := slices.Clone(got), slices.Clone(want)
	for _, s := range slots {
		if s < 0 {
			continue
		}
		lo, hi := int(s)*width, int(s+1)*width
		gotRows, wantRows = append(gotRows, got[lo:hi]...), append(wantRows, want[lo:hi]...)
		clear(gotRest[lo:hi])
		clear(wantRest[lo:hi])
	}
	var rel float64
	var err error
	if exact {
		err = equalBits(gotRows, wantRows)
	} else {
		rel, err = closeBF16(gotRows, wantRows)
	}
	if e := equalBits(gotRest, wantRest); e != nil {
		err = errors.Join(err, fmt.Errorf("outside the written rows: %w", e))
	}
	return rel, err
}

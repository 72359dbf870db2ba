package gpu

import (
	"fmt"
	"slices"

	"stepbench/kernels"
	"stepbench/runner"
)

// The gate before timing, for a run the engine takes through the block
// table: the table's kernels at the run's own layout (page size, order and
// seed: the same table the run gets, its unused entries poisoned), its
// sequences' lengths and the decode steps' growing ones.

// check names what is wrong with a run shape.
func (s RunShape) check() error {
	if s.OutputLen < 1 {
		return fmt.Errorf("output %d: want at least 1", s.OutputLen)
	}
	if s.Seqs == nil {
		if s.Batch < 1 || s.InputLen < 1 {
			return fmt.Errorf("batch %d, input %d, output %d: each must be at least 1", s.Batch, s.InputLen, s.OutputLen)
		}
		return s.KV.Validate()
	}
	if len(s.Seqs) == 0 {
		return fmt.Errorf("no sequences")
	}
	for b, q := range s.Seqs {
		if q.Prompt < 1 || q.Context < 0 {
			return fmt.Errorf("sequence %d: prompt %d, context %d", b, q.Prompt, q.Context)
		}
	}
	return s.KV.Validate()
}

// normalized sets Batch from Seqs, and InputLen (their mean prompt) when
// unset.
func (s RunShape) normalized() RunShape {
	if s.Seqs != nil {
		s.Batch = len(s.Seqs)
		if s.InputLen < 1 {
			s.InputLen = max(1, s.tokens()/len(s.Seqs))
		}
	}
	return s
}

// runSeqs are the run's sequences: Seqs, or Batch prompts of InputLen.
func (s RunShape) runSeqs() []runner.SeqSpec {
	if s.Seqs != nil {
		return s.Seqs
	}
	return slices.Repeat([]runner.SeqSpec{{Prompt: s.InputLen}}, s.Batch)
}

// tokens is the prefill's token rows: the prompts' sum.
func (s RunShape) tokens() int {
	n := 0
	for _, q := range s.runSeqs() {
		n += q.Prompt
	}
	return n
}

// tabled reports whether the engine runs s through the block table under
// sel (runner.Engine.BeginSeqs): the paged layout, an FP8 cache, a ragged
// batch, or a selection of the table's versions.
func (s RunShape) tabled(sel kernels.Selection) bool {
	return s.KV.Paged() || s.KV.DType.FP8() || !runner.Uniform(s.runSeqs()) || sel.UsesKVTable()
}

// splitTabled parts shapes into those the contiguous kernels run and those
// the block table's run.
func (v *Verifier) splitTabled(shapes []RunShape) (contiguous, tabled []RunShape) {
	for _, s := range shapes {
		if s.tabled(v.set.Selection()) {
			tabled = append(tabled, s)
		} else {
			contiguous = append(contiguous, s)
		}
	}
	return contiguous, tabled
}

// decodeSteps are the first, a middle and the last decode step's index,
// without repeats.
func (s RunShape) decodeSteps() []int {
	if s.OutputLen < 2 {
		return nil
	}
	var out []int
	for _, k := range []int{0, (s.OutputLen - 2) / 2, s.OutputLen - 2} {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// pagedGeometries are the run's prefill and its decodeSteps as geometries
// of its layout, each sequence's capacity the engine's (context + prompt +
// output − 1): the run's own table.
func (s RunShape) pagedGeometries() []pagedGeometry {
	seqs := s.runSeqs()
	prefill := pagedGeometry{kv: s.KV, extra: s.OutputLen - 1}
	for _, q := range seqs {
		prefill.ctx, prefill.qLens = append(prefill.ctx, q.Context), append(prefill.qLens, q.Prompt)
	}
	out := []pagedGeometry{prefill}
	for _, k := range s.decodeSteps() {
		d := pagedGeometry{kv: s.KV, extra: s.OutputLen - 2 - k}
		for _, q := range seqs {
			d.ctx, d.qLens = append(d.ctx, q.Context+q.Prompt+k), append(d.qLens, 1)
		}
		out = append(out, d)
	}
	return out
}

// gatePaged checks the block table's kernels at a tabled run shape: the
// selection's attention and rope_kv_write at the prefill and decode steps,
// the ragged gather of the prefill's last rows, kv_advance, and (graphs)
// the captured decode step replayed over the run's decode steps.
func (v *Verifier) gatePaged(m kernels.ModelShape, s RunShape, graphs bool) {
	geoms := s.pagedGeometries()
	for i, g := range geoms {
		if v.dead != nil {
			return
		}
		pv := g.layout(m, uint64(i+1))
		what := "prefill"
		if i > 0 {
			what = fmt.Sprintf("decode step %d", s.decodeSteps()[i-1])
		}
		pv.label += " (the run's " + what + ")"
		if v.wants("attention") {
			v.gatePagedAttention(pv)
		}
		if v.wants("rope_kv_write") && v.dead == nil && pv.a.Tokens()*(m.Heads+2*m.KVHeads)*m.HeadDim <= gateMaxElements &&
			pv.plan.Slots()*m.KVHeads*m.HeadDim <= gateMaxElements {
			if ver, err := v.set.Selection().RopeVersionAt(pv.a); err == nil && !v.set.Replaces(kernels.OpRope) {
				v.verifyPagedRopeAt(v.pinned(kernels.OpRope, ver), versioned("rope_kv_write", ver)+" paged", m, pv)
			}
		}
	}
	if v.wants("gather_last") && v.dead == nil && s.tokens() > s.Batch {
		v.gatherLastRaggedAt(m, geoms[0].queryStarts(), m.Hidden)
	}
	if v.wants("kv_advance") && v.dead == nil {
		v.verifyKVAdvance()
	}
	if v.wants("decode_graph") && graphs && len(geoms) > 1 && v.dead == nil {
		pv := geoms[1].layout(m, 2)
		if pv.plan.Slots()*m.KVHeads*m.HeadDim <= gateMaxElements {
			v.pagedDecodeGraphAt(m, geoms[1], 2, s.OutputLen-1, s.decodeSteps())
		}
	}
}

// queryStarts is the geometry's query_start_loc.
func (g pagedGeometry) queryStarts() []int32 {
	out := make([]int32, len(g.qLens)+1)
	for b, q := range g.qLens {
		out[b+1] = out[b] + int32(q)
	}
	return out
}

// gatePagedAttention checks the version the selection picks at a tabled
// view, the reference of a sample of its rows when all would cost more
// than gateAttentionFLOPs (every row must be written).
func (v *Verifier) gatePagedAttention(pv *pagedView) {
	op, name := kernels.OpAttnPrefill, "attention prefill"
	if tabledDecode(pv.a) {
		op, name = kernels.OpAttnDecode, "attention decode"
	}
	ver, err := pickFor(v.set, op, pv.a)
	if err != nil || v.dead != nil || v.set.Replaces(op) {
		return // no version takes the shape: neither can the run
	}
	tokens := samplePagedRows(pv, gateAttentionFLOPs, v.rng.Uint64())
	got, want := v.runPagedAttention(v.pinned(op, ver), pv, tokens)
	label := pv.label
	if tokens != nil {
		width := pv.a.Heads * pv.a.HeadDim
		if err := allWritten(got, width); err != nil {
			v.record(v.checkName(op, name, ver)+" paged", label, 0, false, err)
			return
		}
		got, want = pickRows(got, tokens, width), pickRows(want, tokens, width)
		label += fmt.Sprintf(" (%d of %d query rows compared, every row written)", len(tokens), pv.a.Tokens())
	}
	rel, cmpErr := closeBF16(got, want)
	check := v.checkName(op, name, ver) + " paged"
	if pv.a.Cache.FP8() {
		check += " " + pv.a.Cache.String()
	}
	v.record(check, label, rel, false, cmpErr)
}

// samplePagedRows is nil when the reference of every row of a view costs
// at most budget FLOPs; else each sequence's first and last new rows, the
// rows on either side of every 128-row query tile edge of the first and
// last sequences, then rows drawn at random, within the budget.
func samplePagedRows(pv *pagedView, budget float64, seed uint64) []int {
	T := pv.a.Tokens()
	cost := func(t int) float64 { return float64(4*pv.a.Heads*pv.a.HeadDim) * float64(pv.positions[t]+1) }
	total := 0.0
	for t := range T {
		total += cost(t)
	}
	if total <= budget {
		return nil
	}
	var picked []int
	spent := 0.0
	take := func(t int) {
		if t >= 0 && t < T && !slices.Contains(picked, t) && spent+cost(t) <= budget {
			picked, spent = append(picked, t), spent+cost(t)
		}
	}
	starts := pv.kv.QueryStart
	for b := range pv.a.Batch {
		take(int(starts[b]))
		take(int(starts[b+1]) - 1)
	}
	for _, b := range []int{0, pv.a.Batch - 1} {
		for edge := int(starts[b]) + kernels.Prefill4QueryTile; edge < int(starts[b+1]); edge += kernels.Prefill4QueryTile {
			take(edge - 1)
			take(edge)
		}
	}
	state := seed | 1
	for tries := 0; tries < 4*T && spent < budget; tries++ {
		state = state*6364136223846793005 + 1442695040888963407
		take(int((state >> 17) % uint64(T)))
	}
	slices.Sort(picked)
	return picked
}

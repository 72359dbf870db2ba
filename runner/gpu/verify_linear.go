package gpu

import (
	"fmt"
	"slices"

	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// linearMaxElements caps a checked weight matrix (rows of n are dropped
// beyond it, k never is): the kernel's blocks each own 16 rows over the
// whole of k, so more rows change only how many blocks run, and drawing
// and multiplying Llama-3-8B's 525M-element lm_head in Go would take
// minutes.
const linearMaxElements = 1 << 25

// linearShape is one projection of a model: out[m, n] = x[m, k] · w[n, k]ᵀ.
type linearShape struct {
	name string
	n, k int
}

// linearShapes are the projections of m's decoder layer and its lm_head.
func linearShapes(m kernels.ModelShape) []linearShape {
	return []linearShape{
		{"qkv_proj", (m.Heads + 2*m.KVHeads) * m.HeadDim, m.Hidden},
		{"o_proj", m.Hidden, m.Heads * m.HeadDim},
		{"gate_up_proj", 2 * m.Inter, m.Hidden},
		{"down_proj", m.Hidden, m.Inter},
		{"lm_head", m.Vocab, m.Hidden},
	}
}

// linearEdge is one product at a kernel's edges: m rows of shape p.
type linearEdge struct {
	m int
	linearShape
}

// linearEdgeShapes are products at each version's kernels' edges whatever
// the model. Version 2: a partial last k chunk (k % 64 != 0), n not a
// multiple of the block's 16 columns, 8 and 9 rows (one mma token block,
// then two), a single chunk. Version 3's own (17..32 rows, blocks of 32
// columns): 17 rows (one row in the third token block), 24 and 32, n past
// a block's first tile (40, 1003, 48: the second tile partly or wholly
// past n), n under one tile (24, 17), a partial k chunk (200, 136, 72,
// 4104) and a lone one (k = 8: one lane in four loads).
func linearEdgeShapes(ver int) []linearEdge {
	if ver >= 3 {
		return []linearEdge{
			{17, linearShape{"edge", 40, 200}},
			{24, linearShape{"edge", 1003, 136}},
			{32, linearShape{"edge", 24, 72}},
			{17, linearShape{"edge", 17, 8}},
			{32, linearShape{"edge", 48, 4104}},
		}
	}
	return []linearEdge{
		{3, linearShape{"edge", 40, 200}},
		{8, linearShape{"edge", 1003, 136}},
		{9, linearShape{"edge", 24, 72}},
		{16, linearShape{"edge", 17, 8}},
		{1, linearShape{"edge", 16, 4104}},
	}
}

// linearRows are the row counts checked at every model's projections.
// Version 2: batch 1, an odd batch, and its largest. Version 3: batch 1
// (version 2's kernel, reached through version 3), then its own kernels'
// smallest, an odd middle and largest.
func linearRows(ver int) []int {
	if ver >= 3 {
		return []int{1, kernels.GemvMaxRows + 1, 24, kernels.Gemv32MaxRows}
	}
	return []int{1, 5, kernels.GemvMaxRows}
}

// verifyLinear checks an op library that replaces linear at 1 and 37 rows,
// and linear versions 2 and 3 (ours: version 1 is cuBLAS, which the
// verifier holds no handle of; the end-to-end comparison with the cpu
// backend covers it) at the model's projections, and their gate_up kernels
// with SiLU·mul fused.
func (v *Verifier) verifyLinear(m kernels.ModelShape) {
	for _, rows := range []int{1, 37} {
		v.libLinearAt(m, rows)
	}
	versions := v.versions(kernels.OpLinear)
	for _, ver := range versions {
		if ver == 1 {
			continue
		}
		if ver == 4 {
			// Version 4 runs version 3's kernels but at the fused chains:
			// checked as version 3 when that is checked too.
			v.verifyLinearNorm(m)
			if slices.Contains(versions, 3) {
				continue
			}
		}
		if ver == 5 && slices.Contains(versions, 3) {
			continue // version 3's kernels for bf16 products; its own: verifyLinearFP8
		}
		set := v.pinned(kernels.OpLinear, ver)
		for _, rows := range linearRows(ver) {
			for _, p := range linearShapes(m) {
				v.linearAt(set, ver, m.Name, p, rows)
			}
			v.linearSiluAt(set, ver, m, rows)
		}
	}
}

// verifyLinearEdges checks the edge shapes once (VerifyAll).
func (v *Verifier) verifyLinearEdges() {
	for _, ver := range v.versions(kernels.OpLinear) {
		if ver == 1 {
			continue
		}
		if ver == 5 && slices.Contains(v.versions(kernels.OpLinear), 3) {
			continue
		}
		if ver == 4 {
			for _, e := range linearNormEdges() {
				v.linearNormAt(v.pinned(kernels.OpLinear, 4), "edge", e.hidden, e.normPair, e.rows)
			}
			continue
		}
		for _, e := range linearEdgeShapes(ver) {
			v.linearAt(v.pinned(kernels.OpLinear, ver), ver, "edge", e.linearShape, e.m)
		}
	}
}

// cappedN is n, or fewer rows (a multiple of 32, whole blocks of every
// gemv kernel) so that n×k stays within linearMaxElements, and a label
// saying so.
func cappedN(n, k int) (int, string) {
	capped := max(kernels.Gemv32Cols, linearMaxElements/max(k, 1)/kernels.Gemv32Cols*kernels.Gemv32Cols)
	if n <= capped {
		return n, fmt.Sprintf("n=%d", n)
	}
	return capped, fmt.Sprintf("n=%d (of %d: capped)", capped, n)
}

// linearAt checks one product of rows rows at projection p with set's
// linear version (skipped where that version does not take k or the rows).
func (v *Verifier) linearAt(set *Kernels, ver int, model string, p linearShape, rows int) {
	if _, err := set.Selection().LinearVersion(p.k); err != nil || v.dead != nil || !kernels.LinearUsesGemv(ver, rows) {
		return
	}
	n, nLabel := cappedN(p.n, p.k)
	x, w := RandomBF16(v.rng, rows*p.k, 0, 1), RandomBF16(v.rng, n*p.k, 0, 1)
	want := make([]uint16, rows*n)
	ref.Gemv(want, x, w, rows, n, p.k)
	out, dX, dW := v.poisoned(rows*n), v.bf16(x), v.bf16(w)
	v.launch(func() error { return ranLinear(ver, rows)(set.Linear(v.stream, out, dX, dW, rows, n, p.k)) })
	v.modelBytes = costBytes("linear", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Linear(b(1), b(1), b(1), rows, n, p.k)
	})
	rel, err := closeBF16(v.getBF16(out, rows*n), want)
	v.record(versioned("linear", ver), fmt.Sprintf("%s %s m=%d %s k=%d", model, p.name, rows, nLabel, p.k), rel, false, err)
}

// linearSiluAt checks gate_up_proj with SiLU·mul fused at rows rows.
func (v *Verifier) linearSiluAt(set *Kernels, ver int, m kernels.ModelShape, rows int) {
	if _, err := set.Selection().LinearVersion(m.Hidden); err != nil || v.dead != nil || !kernels.LinearUsesGemv(ver, rows) {
		return
	}
	// Capping drops whole columns of both halves: inter rows of gate, as many of up.
	inter, label := cappedN(m.Inter, 2*m.Hidden)
	if inter < m.Inter {
		label = fmt.Sprintf("inter=%d (of %d: capped)", inter, m.Inter)
	} else {
		label = fmt.Sprintf("inter=%d", inter)
	}
	x, w := RandomBF16(v.rng, rows*m.Hidden, 0, 1), RandomBF16(v.rng, 2*inter*m.Hidden, 0, 1)
	want := make([]uint16, rows*inter)
	ref.GemvSiluMul(want, x, w, rows, inter, m.Hidden)
	out, dX, dW := v.poisoned(rows*inter), v.bf16(x), v.bf16(w)
	v.launch(func() error {
		return ranLinear(ver, rows)(set.LinearSiluMul(v.stream, out, dX, dW, rows, inter, m.Hidden))
	})
	rel, err := closeBF16(v.getBF16(out, rows*inter), want)
	v.record(versioned("linear silu_mul", ver), fmt.Sprintf("%s gate_up_proj m=%d %s k=%d", m.Name, rows, label, m.Hidden), rel, false, err)
}

// ranLinear turns a launch that ran nothing into an error: a check of
// version ver must run that version's kernel.
func ranLinear(ver, rows int) func(bool, error) error {
	return func(ran bool, err error) error {
		if err == nil && !ran {
			return fmt.Errorf("linear version %d's kernel did not run at m=%d", ver, rows)
		}
		return err
	}
}

// gateLinear checks linear version 2 or 3 at a run's decode row count, when
// the run's selection takes it there.
func (v *Verifier) gateLinear(m kernels.ModelShape, rows int) {
	ver, err := v.set.Selection().LinearVersion(m.Hidden)
	if err != nil || !kernels.LinearUsesGemv(ver, rows) || v.set.Replaces(OpLinear) {
		return
	}
	set := v.pinned(kernels.OpLinear, ver)
	for _, p := range linearShapes(m) {
		v.linearAt(set, ver, m.Name, p, rows)
	}
	v.linearSiluAt(set, ver, m, rows)
	if kernels.LinearFusesNorm(ver, rows) {
		for _, p := range normPairs(m) {
			v.linearNormAt(set, m.Name, m.Hidden, p, rows)
		}
	}
}

// libLinearAt checks the op library that replaces linear (--op linear=LIB)
// at every GEMM of m at rows rows (the run's count): each
// weight is capped at gateMaxElements (a 128k-row lm_head keeps its width,
// loses rows), the rows likewise, and the reference computes a sample of
// them once the whole would cost more than gateAttentionFLOPs.
func (v *Verifier) libLinearAt(m kernels.ModelShape, rows int) {
	if !v.set.Replaces(OpLinear) {
		return
	}
	for _, g := range linearShapes(m) {
		if v.dead != nil {
			return
		}
		n := max(1, min(g.n, gateMaxElements/g.k))
		r := capRows(rows, max(n, g.k))
		x, w := RandomBF16(v.rng, r*g.k, 0, 1), RandomBF16(v.rng, n*g.k, 0, 0.05)
		out, dX, dW := v.poisoned(r*n), v.bf16(x), v.bf16(w)
		v.launch(func() error { return v.set.LibLinear(v.stream, out, dX, dW, r, n, g.k) })
		got := v.getBF16(out, r*n)
		picked := sampleRows(r, int(gateAttentionFLOPs/float64(2*n*g.k)))
		xs := pickRows(x, picked, g.k)
		want := make([]uint16, len(picked)*n)
		ref.Linear(want, xs, w, len(picked), n, g.k)
		shape := fmt.Sprintf("%s %s %s n=%d k=%d", m.Name, g.name, rowsLabel(r, rows), n, g.k)
		if n != g.n {
			shape += fmt.Sprintf(" (of the model's n=%d: capped)", g.n)
		}
		if len(picked) < r {
			shape += fmt.Sprintf(" (%d of %d rows compared, every row written)", len(picked), r)
		}
		var rel float64
		err := allWritten(got, n)
		if err == nil {
			rel, err = closeBF16(pickRows(got, picked, n), want)
		}
		v.record(OpLinear+v.set.libLabel(OpLinear), shape, rel, false, err)
	}
}

// sampleRows are rows 0..rows-1, or at most budget of them (at least the
// first and the last, then evenly spaced).
func sampleRows(rows, budget int) []int {
	budget = max(budget, 2)
	var out []int
	if rows <= budget {
		for r := range rows {
			out = append(out, r)
		}
		return out
	}
	for i := range budget {
		out = append(out, i*(rows-1)/(budget-1))
	}
	return out
}

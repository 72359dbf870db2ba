package gpu

import (
	"fmt"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// linearShapes are the model's GEMMs: name, n (output features), k (input).
func linearShapes(m kernels.ModelShape) []struct {
	name string
	n, k int
} {
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	return []struct {
		name string
		n, k int
	}{{"qkv_proj", q + 2*kv, m.Hidden}, {"o_proj", m.Hidden, q}, {"gate_up_proj", 2 * m.Inter, m.Hidden},
		{"down_proj", m.Hidden, m.Inter}, {"lm_head", m.Vocab, m.Hidden}}
}

// verifyLinear checks the op library that replaces linear at every GEMM of
// m at 1 and 37 rows. The backend's own GEMMs are cuBLAS's, not stepbench's
// kernels, and are not checked here.
func (v *Verifier) verifyLinear(m kernels.ModelShape) {
	for _, rows := range []int{1, 37} {
		v.linearAt(m, rows)
	}
}

// linearAt checks every GEMM of m at rows rows (the run's count): each
// weight is capped at gateMaxElements (a 128k-row lm_head keeps its width,
// loses rows), the rows likewise, and the reference computes a sample of
// them once the whole would cost more than gateAttentionFLOPs.
func (v *Verifier) linearAt(m kernels.ModelShape, rows int) {
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
		v.launch(func() error { return v.set.Linear(v.stream, out, dX, dW, r, n, g.k) })
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

package gpu

import (
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// verify_gemm.go checks gemm version 2 (cuBLASLt with the tuned algorithm
// of each shape, Backend.linearLt) against ref.Linear at a model's
// projections with prefill row counts. Version 1 is cublasGemmEx, which the
// tuning itself checks version 2 against at every shape's first use.

// gemmMaxMACs caps a checked product's multiply-adds (n, then rows, are
// cut to fit): ref.Linear and the emulated cuBLASLt (which times every
// candidate) stay at seconds at Llama-3-8B's widths. cuBLASLt's choice
// depends on the shape, so a capped product checks the algorithm of its
// own shape; the run's own shapes are checked against cublasGemmEx when
// tuned.
const gemmMaxMACs = 1 << 27

// gemmRows are the prefill row counts checked at every model: the fewest
// that linear version 2 leaves to the library, the fewest that version 3
// leaves, and a 64-token prefill.
var gemmRows = []int{kernels.GemvMaxRows + 1, kernels.Gemv32MaxRows + 1, 64}

// verifyGemm checks gemm version 2 at m's projections (skipped where the
// selection pins version 1 or no cuBLASLt is at hand).
func (v *Verifier) verifyGemm(m kernels.ModelShape) {
	if v.gemmLt == nil {
		return
	}
	for _, ver := range v.versions(kernels.OpGemm) {
		if ver != 2 {
			continue
		}
		for _, rows := range gemmRows {
			for _, p := range linearShapes(m) {
				v.gemmAt(m.Name, p, rows)
			}
		}
	}
}

// gemmShape is rows × n × k cut to gemmMaxMACs (n to a multiple of 16
// first, then rows), with labels saying what was cut.
func gemmShape(rows, n, k int) (int, int, string) {
	cn := min(n, max(kernels.GemvRows, gemmMaxMACs/max(rows*k, 1)/kernels.GemvRows*kernels.GemvRows))
	cr := min(rows, max(1, gemmMaxMACs/max(cn*k, 1)))
	label := rowsLabel(cr, rows)
	if cn == n {
		return cr, cn, fmt.Sprintf("%s n=%d", label, n)
	}
	return cr, cn, fmt.Sprintf("%s n=%d (of %d: capped)", label, cn, n)
}

// gemmAt checks one product of rows rows at projection p through gemm
// version 2 (its tuning included) against ref.Linear.
func (v *Verifier) gemmAt(model string, p linearShape, rows int) {
	if v.dead != nil {
		return
	}
	r, n, label := gemmShape(rows, p.n, p.k)
	x, w := RandomBF16(v.rng, r*p.k, 0, 1), RandomBF16(v.rng, n*p.k, 0, 1)
	want := make([]uint16, r*n)
	ref.Linear(want, x, w, r, n, p.k)
	out, dX, dW := v.poisoned(r*n), v.bf16(x), v.bf16(w)
	v.launch(func() error { return v.gemmLt(out, dX, dW, r, n, p.k) })
	rel, err := closeBF16(v.getBF16(out, r*n), want)
	v.record(versioned(kernels.OpGemm, 2), fmt.Sprintf("%s %s %s k=%d", model, p.name, label, p.k), rel, false, err)
}

// gateGemm checks gemm version 2 at a run's row count where the run gives
// the library those rows (linear version 2 takes 1..16 rows itself).
func (v *Verifier) gateGemm(m kernels.ModelShape, rows int) {
	if v.gemmLt == nil || v.set.Selection().GemmVersion() != 2 || v.dead != nil {
		return
	}
	for _, p := range linearShapes(m) {
		if takes, err := v.set.GemvTakes(rows, p.k); err == nil && takes {
			continue
		}
		v.gemmAt(m.Name, p, rows)
	}
}

// gemmRunner is Backend.linearLt as the verifier calls it.
type gemmRunner func(out, x, w cuda.DevPtr, m, n, k int) error

package gpu

import (
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
)

// linear.go launches linear versions 2 and 3 (kernels/gemv.cu): decode's
// products of a few token rows. The backend's Linear asks Linear first and
// runs cuBLAS (version 1) when it launched nothing.

// GemvTakes reports whether the selection runs an m-row product over k on
// gemv.cu's kernels (version 2 or 3 chosen or newest, up to
// kernels.LinearGemvMaxRows rows), given 16-byte aligned operands; an error
// when a chosen version cannot take k.
func (k *Kernels) GemvTakes(m, kk int) (bool, error) {
	version, err := k.sel.LinearVersion(kk)
	if err != nil {
		return false, err
	}
	return kernels.LinearUsesGemv(version, m), nil
}

// gemvRuns is GemvTakes with x and w 16-byte aligned (a chosen version 2 or
// 3 with unaligned operands is an error: it would silently time cuBLAS).
func (k *Kernels) gemvRuns(op string, m, kk int, x, w cuda.DevPtr) (bool, error) {
	takes, err := k.GemvTakes(m, kk)
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	if !takes {
		return false, nil
	}
	if x%16 != 0 || w%16 != 0 {
		if v, chosen := k.sel.Chosen(kernels.OpLinear); chosen {
			return false, fmt.Errorf("%s: --kernel linear=%d needs 16-byte aligned x and w (m=%d k=%d)", op, v, m, kk)
		}
		return false, nil
	}
	return true, nil
}

// Linear launches out[m, n] = x[m, k] · w[n, k]ᵀ (bf16, fp32 accumulation)
// on linear version 2's or 3's kernels when the selection runs this product
// there (1..16 or 1..32 rows, k % 8 == 0); ran is false, and nothing is
// launched, when the product belongs to cuBLAS.
func (k *Kernels) Linear(s *cuda.Stream, out, x, w cuda.DevPtr, m, n, kk int) (ran bool, err error) {
	return k.gemv(s, "linear", out, x, w, m, n, kk, false)
}

// LinearSiluMul launches gate_up_proj and silu_mul as one kernel: with w the
// fused [2*inter, k] gate_up matrix, out[m, inter] = SiLU(gate)·up of x · wᵀ
// (ref.GemvSiluMul), when linear version 2 or 3 runs the product; ran is false,
// and nothing is launched, otherwise (the caller runs the two ops).
func (k *Kernels) LinearSiluMul(s *cuda.Stream, out, x, w cuda.DevPtr, m, inter, kk int) (ran bool, err error) {
	return k.gemv(s, "linear_silu_mul", out, x, w, m, inter, kk, true)
}

// gemv checks the arguments and launches one gemv.cu entry point over n
// output columns (inter with silu), its grid from kernels.GemvGrid.
func (k *Kernels) gemv(s *cuda.Stream, op string, out, x, w cuda.DevPtr, m, n, kk int, silu bool) (bool, error) {
	c := argCheck{op: op}
	c.count("m", m)
	c.positive("n", n)
	c.positive("k", kk)
	if silu {
		c.require(2*int64(n) <= 1<<31-1, "2*inter = %d too large", 2*int64(n))
	}
	c.pointer("out", out, 2)
	c.pointer("x", x, 2)
	c.pointer("w", w, 2)
	if err := c.err(); err != nil {
		return false, err
	}
	runs, err := k.gemvRuns(op, m, kk, x, w)
	if err != nil || !runs {
		return false, err
	}
	blocks, threads := kernels.GemvGrid(m, n, silu)
	return true, k.launch(s, op, kernels.GemvEntryPoint(m, silu), cuda.Dim3{X: uint32(blocks), Y: 1, Z: 1},
		cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, 0, out, x, w, int32(m), int32(n), int32(kk))
}

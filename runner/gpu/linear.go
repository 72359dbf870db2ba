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

// NormFuses reports whether the selection fuses the residual add and
// RMSNorm into a decode step's projections of m rows over hidden (linear
// version 4 chosen; 1..16 rows; hidden a multiple of 8 whose norm weights
// fit 48 KB of shared memory), and no op library replaces linear, the norm
// or silu_mul (the library's op must run as itself).
func (k *Kernels) NormFuses(m, hidden int) bool {
	if k.Replaces(OpLinear) || k.Replaces(OpNorm) || k.Replaces(OpSiluMul) {
		return false
	}
	version, err := k.sel.LinearVersion(hidden)
	return err == nil && kernels.LinearFusesNorm(version, m) && kernels.NormSharedBytes(hidden) <= 48<<10
}

// NormProduces reports whether linear version 4's producer (gemv_res_*)
// takes an inner dimension of k (a multiple of 8).
func (k *Kernels) NormProduces(kk int) bool {
	_, err := k.sel.LinearVersion(kk)
	return err == nil && kk > 0
}

// LinearResidual launches linear version 4's o_proj or down_proj
// (gemv_res_*): residual[m, n] += bf16(x[m, k] · w[n, k]ᵀ) in place, and
// part[m, NormParts(n)] the squared sums of the new residual's column
// blocks, which NormLinear reads (ref.GemvResidual).
func (k *Kernels) LinearResidual(s *cuda.Stream, residual, part, x, w cuda.DevPtr, m, n, kk int) error {
	c := argCheck{op: "linear_residual"}
	c.count("m", m)
	c.positive("n", n)
	c.positive("k", kk)
	c.pointer("residual", residual, 16)
	c.pointer("part", part, 4)
	c.pointer("x", x, 16)
	c.pointer("w", w, 16)
	c.require(k.NormFuses(m, n) && k.NormProduces(kk), "linear version 4 does not fuse m=%d n=%d k=%d", m, n, kk)
	if err := c.err(); err != nil {
		return err
	}
	return k.launch(s, "linear_residual", kernels.GemvResEntryPoint(m),
		cuda.Dim3{X: uint32(kernels.CeilDiv(n, kernels.GemvRows)), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GemvThreads, Y: 1, Z: 1}, 0, residual, part, x, w, int32(m), int32(n), int32(kk))
}

// NormLinear launches linear version 4's qkv_proj or lm_head (gemv_norm_*):
// out[m, n] = RMSNorm(residual[m, k]) · w[n, k]ᵀ with the norm's weights
// normW and the squared sums part that LinearResidual wrote over k columns
// (ref.NormGemv); with silu, gate_up_proj and SiLU·mul (gemv_silu_norm_*, n
// being inter and w the fused [2*inter, k] matrix; ref.NormGemvSiluMul).
func (k *Kernels) NormLinear(s *cuda.Stream, out, residual, part, normW, w cuda.DevPtr, m, n, kk int, eps float32, silu bool) error {
	op := "norm_linear"
	if silu {
		op = "norm_linear_silu_mul"
		if 2*int64(n) > 1<<31-1 {
			return fmt.Errorf("%s: 2*inter = %d too large", op, 2*int64(n))
		}
	}
	c := argCheck{op: op}
	c.count("m", m)
	c.positive("n", n)
	c.positive("k", kk)
	c.pointer("out", out, 2)
	c.pointer("residual", residual, 16)
	c.pointer("part", part, 4)
	c.pointer("norm weight", normW, 16)
	c.pointer("w", w, 16)
	c.require(k.NormFuses(m, kk), "linear version 4 does not fuse m=%d k=%d", m, kk)
	if err := c.err(); err != nil {
		return err
	}
	return k.launch(s, op, kernels.GemvNormEntryPoint(m, silu),
		cuda.Dim3{X: uint32(kernels.CeilDiv(n, kernels.GemvRows)), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GemvThreads, Y: 1, Z: 1}, kernels.NormSharedBytes(kk),
		out, residual, part, normW, w, int32(m), int32(n), int32(kk), int32(kernels.NormParts(kk)), eps)
}

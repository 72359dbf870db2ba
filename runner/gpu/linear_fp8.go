package gpu

import (
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
)

// linear_fp8.go launches linear version 5's FP8 kernels (fp8.cu's
// gemv_fp8_*): a quantized model's decode projection in one launch, the
// activation's quantization in the kernel's prologue.

var _ runner.FP8Fuser = (*Backend)(nil)

// FP8GemvRuns reports whether the selection runs an FP8 product of m rows
// over kk on gemv_fp8: linear version 5 chosen, 1..kernels.GemvFP8MaxRows
// rows, kk a positive multiple of 16, and no op library replacing linear.
func (k *Kernels) FP8GemvRuns(m, kk int) bool {
	if k.Replaces(OpLinear) {
		return false
	}
	v, ok := k.sel.Chosen(kernels.OpLinear)
	return ok && kernels.LinearFP8Gemv(v, m) && kk > 0 && kk%16 == 0
}

// fp8Act is the kernels' act argument of an activation scheme.
func fp8Act(a runner.ActQuant) (int32, error) {
	switch a {
	case runner.QuantStatic:
		return kernels.FP8ActStatic, nil
	case runner.QuantDynamicTensor:
		return kernels.FP8ActTensor, nil
	case runner.QuantDynamicToken:
		return kernels.FP8ActToken, nil
	}
	return 0, fmt.Errorf("activation quantization %d", a)
}

// GemvFP8 launches gemv_fp8_* (ref.GemvFP8): out[m, n] (bf16) = x[m, k]
// (bf16, quantized in the prologue by act: kernels.FP8Act*, static with
// xs[0]) · w[n, k]ᵀ (E4M3) · the scales, ws one (wPerRow false) or n;
// with silu gemv_fp8_silu_* (ref.GemvFP8SiluMul): n is inter, w the fused
// [2*inter, k] gate_up matrix, ws one or 2*inter, out [m, inter].
func (k *Kernels) GemvFP8(s *cuda.Stream, out, x, xs cuda.DevPtr, act int32, w, ws cuda.DevPtr, wPerRow bool, m, n, kk int, silu bool) error {
	c := argCheck{op: "linear_fp8_gemv"}
	if silu {
		c.op = "linear_fp8_silu_mul"
	}
	c.require(m >= 1 && m <= kernels.GemvFP8MaxRows, "m = %d (gemv_fp8 takes 1..%d rows)", m, kernels.GemvFP8MaxRows)
	c.positive("n", n)
	c.positive("k", kk)
	c.require(kk%16 == 0, "k = %d (gemv_fp8 takes multiples of 16)", kk)
	c.require(2*int64(n) <= 1<<31-1 && int64(n)*int64(kk) <= 1<<62, "n = %d too large", n)
	c.require(act >= kernels.FP8ActBF16 && act <= kernels.FP8ActToken, "act = %d", act)
	c.pointer("out", out, 2)
	c.pointer("x", x, 16)
	if act == kernels.FP8ActStatic {
		c.pointer("x scale", xs, 4)
	}
	c.pointer("w", w, 16)
	c.pointer("w scale", ws, 4)
	if err := c.err(); err != nil {
		return err
	}
	return k.launch(s, c.op, kernels.GemvFP8EntryPoint(m, silu),
		cuda.Dim3{X: uint32(kernels.CeilDiv(n, kernels.GemvFP8Rows)), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GemvFP8Threads, Y: 1, Z: 1}, 0,
		out, x, xs, act, w, ws, flag(wPerRow), int32(m), int32(n), int32(kk))
}

// FusesFP8 reports whether LinearFP8Act takes m rows over an inner
// dimension of k (runner.FP8Fuser): linear version 5 chosen, 1..32 rows,
// k a multiple of 16.
func (c *Backend) FusesFP8(m, k int) bool { return c.set.FP8GemvRuns(m, k) }

// LinearFP8Act is a quantized projection in one launch (runner.FP8Fuser):
// gemv_fp8, or with silu gemv_fp8_silu (n then being inter).
func (c *Backend) LinearFP8Act(out, x, xScale, w, wScale runner.Buffer, m, n, k int, act runner.ActQuant, wPerRow, silu bool) error {
	op := "linear fp8 gemv"
	if m < 1 || n < 1 || k < 1 {
		return fmt.Errorf("%s: m=%d n=%d k=%d", op, m, n, k)
	}
	if !c.FusesFP8(m, k) {
		return fmt.Errorf("%s: the selected linear version does not take m=%d k=%d (FusesFP8 says which)", op, m, k)
	}
	kAct, err := fp8Act(act)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	outs, rows := n, n
	if silu {
		rows = 2 * n
	}
	ws := 1
	if wPerRow {
		ws = rows
	}
	o := operands{op: op}
	pOut := o.get(out, runner.BF16, m*outs, "out")
	pX := o.get(x, runner.BF16, m*k, "x")
	pXs := o.getOpt(xScale, runner.F32, 1, "x scale", act != runner.QuantStatic)
	pW := o.get(w, runner.F8E4M3, rows*k, "w")
	pWs := o.get(wScale, runner.F32, ws, "w scale")
	if o.err != nil {
		return o.err
	}
	return c.set.GemvFP8(c.stream, pOut, pX, pXs, kAct, pW, pWs, wPerRow, m, n, k, silu)
}

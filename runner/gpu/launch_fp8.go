package gpu

import (
	"stepbench/cuda"
	"stepbench/kernels"
)

// FP8PartialsBytes is the workspace QuantizeFP8Tensor's dynamic scale
// needs: one float per block of fp8_absmax_partial.
const FP8PartialsBytes = 4 * kernels.FP8Partials

// fp8Vec8 reports whether 8-element vector access fits: n a multiple of 8,
// x (bf16) 16-byte and out (E4M3) 8-byte aligned.
func fp8Vec8(n int, out, x cuda.DevPtr) bool { return n%8 == 0 && x%16 == 0 && out%8 == 0 }

// QuantizeFP8Tensor quantizes n bf16 of x into E4M3 out with one scale:
// dynamic (ref.QuantizeFP8Tensor: fp8_absmax_partial's per-block maxima in
// partials, FP8PartialsBytes, then fp8_quant_tensor, which writes the scale
// to scale[0]) or static (ref.QuantizeFP8 with scale[0]).
func (k *Kernels) QuantizeFP8Tensor(s *cuda.Stream, out, scale, partials, x cuda.DevPtr, n int, dynamic bool) error {
	c := argCheck{op: "fp8_quant_tensor"}
	c.count("n", n)
	c.pointer("out", out, 1)
	c.pointer("scale", scale, 4)
	c.pointer("x", x, 2)
	if dynamic {
		c.pointer("partials", partials, 4)
	}
	if err := c.err(); err != nil || n == 0 {
		return err
	}
	vec := fp8Vec8(n, out, x)
	items := n
	if vec {
		items /= 8
	}
	// Small tensors (a decode step's) take small blocks: whole warps, as
	// many threads as items up to FP8Threads.
	nparts := 0
	if dynamic {
		nparts = min(kernels.GridStrideBlocks(items, kernels.FP8Threads, k.smCount), kernels.FP8Partials)
		if err := k.launch(s, c.op, "fp8_absmax_partial", cuda.Dim3{X: uint32(nparts), Y: 1, Z: 1},
			cuda.Dim3{X: threadsFor(items, kernels.FP8Threads), Y: 1, Z: 1}, 0, partials, x, int64(n), flag(vec)); err != nil {
			return err
		}
	}
	return k.launch(s, c.op, "fp8_quant_tensor", cuda.Dim3{X: k.gridStrideBlocks(items, kernels.FP8Threads), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(max(items, nparts), kernels.FP8Threads), Y: 1, Z: 1}, 0,
		out, scale, partials, int32(nparts), x, int64(n), flag(vec))
}

// QuantizeFP8Token quantizes x [rows, cols] (bf16) per row into E4M3 out,
// each row's scale into scales[row] (ref.QuantizeFP8Token).
func (k *Kernels) QuantizeFP8Token(s *cuda.Stream, out, scales, x cuda.DevPtr, rows, cols int) error {
	c := argCheck{op: "fp8_quant_token"}
	c.count("rows", rows)
	c.positive("cols", cols)
	c.pointer("out", out, 1)
	c.pointer("scales", scales, 4)
	c.pointer("x", x, 2)
	c.require(rows <= 1<<31-1, "rows = %d > 2^31-1", rows)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	// Row starts stay aligned only when a row is whole vectors.
	vec := fp8Vec8(cols, out, x)
	return k.launch(s, c.op, "fp8_quant_token", cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(cols/8, kernels.FP8Threads), Y: 1, Z: 1}, 0, out, scales, x, int32(rows), int32(cols), flag(vec))
}

// ScaleFP8Out is the dequantization epilogue (ref.ScaleFP8Out):
// out[i, j] (bf16) = acc[i, j] (fp32) · xs[i·xStride] · ws[j·wStride],
// strides 0 or 1.
func (k *Kernels) ScaleFP8Out(s *cuda.Stream, out, acc, xs cuda.DevPtr, xStride int, ws cuda.DevPtr, wStride, m, n int) error {
	c := argCheck{op: "fp8_scale_out"}
	c.count("m", m)
	c.positive("n", n)
	c.require(xStride == 0 || xStride == 1, "xStride = %d, want 0 or 1", xStride)
	c.require(wStride == 0 || wStride == 1, "wStride = %d, want 0 or 1", wStride)
	c.pointer("out", out, 2)
	c.pointer("acc", acc, 4)
	c.pointer("xs", xs, 4)
	c.pointer("ws", ws, 4)
	if err := c.err(); err != nil || m == 0 {
		return err
	}
	return k.launch(s, c.op, "fp8_scale_out", cuda.Dim3{X: k.gridStrideBlocks(m*n, kernels.FP8Threads), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(m*n, kernels.FP8Threads), Y: 1, Z: 1}, 0, out, acc, xs, int32(xStride), ws, int32(wStride), int32(m), int32(n))
}

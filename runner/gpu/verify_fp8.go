package gpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// verifyFP8 checks fp8.cu's kernels against their twins at the model's
// widths (hidden: qkv_proj's, o_proj's and gate_up_proj's inputs;
// intermediate: down_proj's): every quantizer bit for bit (bytes and
// scales), and the dequantization epilogue bit for bit.
func (v *Verifier) verifyFP8(m kernels.ModelShape) {
	for _, cols := range []int{m.Hidden, m.Inter} {
		for _, rows := range []int{1, 5, 128} {
			v.fp8QuantAt(m, rows, cols, rows)
		}
	}
	for _, rows := range []int{1, 5, 128} {
		v.fp8ScaleOutAt(m, rows, m.Hidden)
	}
	qkv := (m.Heads + 2*m.KVHeads) * m.HeadDim
	if v.fp8 == nil || FP8Widths(m) != nil {
		return // no FP8 GEMM on this GPU (compute capability below 8.9), or not of these widths
	}
	for _, c := range []struct {
		rows, n, k       int
		xPerRow, wPerRow bool
	}{
		{1, qkv, m.Hidden, false, false}, {5, qkv, m.Hidden, false, false}, {33, qkv, m.Hidden, false, false},
		{5, m.Hidden, m.Inter, false, false}, {5, qkv, m.Hidden, true, true}, {3, m.Hidden, m.Inter, true, false},
		{3, 2 * m.Inter, m.Hidden, false, true},
	} {
		v.fp8LinearAt(m, c.rows, c.n, c.k, c.xPerRow, c.wPerRow)
	}
}

// FP8Widths says which of a model's projections cuBLASLt's FP8 GEMM
// cannot take (its rules: in and out features multiples of 16), nil when
// it takes them all.
func FP8Widths(m kernels.ModelShape) error {
	qkv := (m.Heads + 2*m.KVHeads) * m.HeadDim
	for _, p := range []struct {
		name string
		n, k int
	}{{"qkv_proj", qkv, m.Hidden}, {"o_proj", m.Hidden, m.Heads * m.HeadDim}, {"gate_up_proj", 2 * m.Inter, m.Hidden}, {"down_proj", m.Hidden, m.Inter}} {
		if p.n%16 != 0 || p.k%16 != 0 {
			return fmt.Errorf("model %s: %s is %d × %d: cuBLASLt's FP8 GEMM needs in and out features that are multiples of 16", m.Name, p.name, p.n, p.k)
		}
	}
	return nil
}

// fp8LinearAt checks the FP8 GEMM (cuBLASLt, and fp8_scale_out for vector
// scales) against ref.LinearFP8 within the bf16 tolerance: its fp32 sums
// run in another order.
func (v *Verifier) fp8LinearAt(model kernels.ModelShape, m, n, k int, xPerRow, wPerRow bool) {
	xq, wq := make([]uint8, m*k), make([]uint8, n*k)
	xs, ws := []float32{0.02}, []float32{3e-3}
	if xPerRow {
		xs = make([]float32, m)
		ref.QuantizeFP8Token(xq, xs, v.fp8Input(m, k), m, k)
	} else {
		xs[0] = ref.QuantizeFP8Tensor(xq, v.fp8Input(m, k))
	}
	wBF16 := RandomBF16(v.rng, n*k, 0, 0.02)
	if wPerRow {
		ws = make([]float32, n)
		ref.QuantizeFP8Token(wq, ws, wBF16, n, k)
	} else {
		ws[0] = ref.QuantizeFP8Tensor(wq, wBF16)
	}
	xStride, wStride := 0, 0
	if xPerRow {
		xStride = 1
	}
	if wPerRow {
		wStride = 1
	}
	want := make([]uint16, m*n)
	ref.LinearFP8(want, xq, xs, xStride, wq, ws, wStride, m, n, k)
	out, dX, dW, dXs, dWs := v.poisoned(m*n), v.alloc(m*k), v.alloc(n*k), v.f32(xs), v.f32(ws)
	v.upload(dX, unsafe.Pointer(&xq[0]), m*k)
	v.upload(dW, unsafe.Pointer(&wq[0]), n*k)
	v.launch(func() error { return v.fp8.linear(v.stream, v.set, out, dX, dXs, dW, dWs, m, n, k, xPerRow, wPerRow) })
	v.modelBytes = costBytes("linear", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.(runner.FP8Backend).LinearFP8(b(1), b(1), b(1), b(1), b(1), m, n, k, xPerRow, wPerRow)
	})
	rel, err := closeBF16(v.getBF16(out, m*n), want)
	shape := fmt.Sprintf("%s m=%d n=%d k=%d x scales per %s, w scales per %s", model.Name, m, n, k,
		perWhat(xStride, "token"), perWhat(wStride, "channel"))
	v.record("linear_fp8 (cuBLASLt)", shape, rel, false, err)
}

// fp8Input draws bf16 activations of rows × cols: N(0, 1) with a few
// outliers 30× larger (what makes activation scales hard), the last row
// all zero (the least scale).
func (v *Verifier) fp8Input(rows, cols int) []uint16 {
	x := RandomBF16(v.rng, rows*cols, 0, 1)
	for i := 0; i < rows*cols/97; i++ {
		j := v.rng.IntN(rows * cols)
		x[j] = ref.F32ToBF16(30 * ref.BF16ToF32(x[j]))
	}
	if rows > 1 {
		clear(x[(rows-1)*cols:])
	}
	return x
}

// fp8QuantAt checks the static, dynamic per-tensor and dynamic per-token
// quantizers at one shape (of the run's `of` rows).
func (v *Verifier) fp8QuantAt(m kernels.ModelShape, rows, cols, of int) {
	x := v.fp8Input(rows, cols)
	n := rows * cols
	absmax := ref.AbsMaxBF16(x)
	shape := fmt.Sprintf("%s %s cols=%d", m.Name, rowsLabel(rows, of), cols)
	// Static scales: 0.8 of the dynamic one (the outliers saturate), and
	// 512× it (most values fall into E4M3's subnormals).
	for _, static := range []float32{0.8 * absmax / ref.FP8Max, 512 * absmax / ref.FP8Max} {
		want := make([]uint8, n)
		ref.QuantizeFP8(want, x, static)
		got, _ := v.runQuantFP8(x, rows, cols, runner.QuantStatic, []float32{static})
		v.fp8Cost(rows, cols, runner.QuantStatic)
		v.record("fp8_quant_tensor static", fmt.Sprintf("%s scale=%.3g", shape, static), 0, true, equalBits(got, want))
	}
	want := make([]uint8, n)
	wantScale := ref.QuantizeFP8Tensor(want, x)
	got, scales := v.runQuantFP8(x, rows, cols, runner.QuantDynamicTensor, nil)
	v.fp8Cost(rows, cols, runner.QuantDynamicTensor)
	err := equalBits(got, want)
	if e := equalBits(scales[:1], []float32{wantScale}); e != nil {
		err = errors.Join(err, fmt.Errorf("scale: %w", e))
	}
	v.record("fp8_quant_tensor dynamic", shape, 0, true, err)

	wantScales := make([]float32, rows)
	ref.QuantizeFP8Token(want, wantScales, x, rows, cols)
	got, scales = v.runQuantFP8(x, rows, cols, runner.QuantDynamicToken, nil)
	v.fp8Cost(rows, cols, runner.QuantDynamicToken)
	err = equalBits(got, want)
	if e := equalBits(scales, wantScales); e != nil {
		err = errors.Join(err, fmt.Errorf("scales: %w", e))
	}
	v.record("fp8_quant_token", shape, 0, true, err)
}

func (v *Verifier) fp8Cost(rows, cols int, mode runner.ActQuant) {
	v.modelBytes = costBytes("quant", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.(runner.FP8Backend).QuantizeFP8(b(1), b(1), b(1), rows, cols, mode)
	})
}

// runQuantFP8 launches one quantizer on x (outputs poisoned first) and
// returns its bytes and scales (static: the scale given).
func (v *Verifier) runQuantFP8(x []uint16, rows, cols int, mode runner.ActQuant, static []float32) ([]uint8, []float32) {
	n := rows * cols
	out := v.alloc(n)
	nScales := 1
	if mode == runner.QuantDynamicToken {
		nScales = rows
	}
	scale := v.alloc(4 * nScales)
	if v.err == nil {
		v.fail(v.stream.Memset8(out, 0x7f, n)) // NaN
		v.fail(v.stream.Memset32(scale, 0x7fc00000, nScales))
	}
	if static != nil {
		v.upload(scale, unsafe.Pointer(&static[0]), 4)
	}
	dx, partials := v.bf16(x), v.alloc(FP8PartialsBytes)
	v.launch(func() error {
		if mode == runner.QuantDynamicToken {
			return v.set.QuantizeFP8Token(v.stream, out, scale, dx, rows, cols)
		}
		return v.set.QuantizeFP8Tensor(v.stream, out, scale, partials, dx, n, mode == runner.QuantDynamicTensor)
	})
	return v.getBytes(out, n), v.getF32(scale, nScales)
}

// fp8ScaleOutAt checks the dequantization epilogue at m rows × n columns
// with every pair of scale strides.
func (v *Verifier) fp8ScaleOutAt(model kernels.ModelShape, m, n int) {
	acc := make([]float32, m*n)
	for i := range acc {
		acc[i] = float32(v.rng.NormFloat64() * 3e4)
	}
	xs, ws := make([]float32, m), make([]float32, n)
	for i := range xs {
		xs[i] = float32(math.Ldexp(1+v.rng.Float64(), -9))
	}
	for i := range ws {
		ws[i] = float32(math.Ldexp(1+v.rng.Float64(), -7))
	}
	for _, st := range [][2]int{{1, 1}, {1, 0}, {0, 1}} {
		want := make([]uint16, m*n)
		ref.ScaleFP8Out(want, acc, xs, st[0], ws, st[1], m, n)
		out := v.poisoned(m * n)
		dAcc, dXs, dWs := v.f32(acc), v.f32(xs), v.f32(ws)
		v.launch(func() error { return v.set.ScaleFP8Out(v.stream, out, dAcc, dXs, st[0], dWs, st[1], m, n) })
		shape := fmt.Sprintf("%s m=%d n=%d x scales per %s, w scales per %s", model.Name, m, n, perWhat(st[0], "token"), perWhat(st[1], "channel"))
		v.record("fp8_scale_out", shape, 0, true, equalBits(v.getBF16(out, m*n), want))
	}
}

func perWhat(stride int, what string) string {
	if stride == 1 {
		return what
	}
	return "tensor"
}

func (v *Verifier) getBytes(p cuda.DevPtr, n int) []uint8 {
	out := make([]uint8, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, n)
	}
	return out
}

func (v *Verifier) getF32(p cuda.DevPtr, n int) []float32 {
	out := make([]float32, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, 4*n)
	}
	return out
}

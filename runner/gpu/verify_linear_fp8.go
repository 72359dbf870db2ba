package gpu

import (
	"fmt"
	"slices"

	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// fp8GemvCase is one check of linear version 5's gemv_fp8: m rows of a
// projection, an activation mode and a weight-scale layout.
type fp8GemvCase struct {
	m          int
	p          linearShape
	act        ref.FP8Act
	perChannel bool
	silu       bool // gate_up_proj with silu_mul: p.n is 2*inter
}

// fp8ActNames name ref.FP8Act values in check shapes.
var fp8ActNames = map[ref.FP8Act]string{
	ref.FP8ActBF16: "x bf16 (weight-only)", ref.FP8ActStatic: "x static", ref.FP8ActTensor: "x dynamic per tensor",
	ref.FP8ActToken: "x dynamic per token",
}

// fp8GemvCases are the checks at a model's projections: every kernel
// (_t8, _t16, _t32, each with silu), every activation mode and both weight
// scale layouts, spread over qkv_proj, o_proj, gate_up_proj (with silu)
// and down_proj at 1, 9..16 and 32 rows.
func fp8GemvCases(m kernels.ModelShape) []fp8GemvCase {
	ps := linearShapes(m)[:4] // qkv, o, gate_up, down: FP8 (lm_head stays bf16)
	qkv, o, gu, down := ps[0], ps[1], ps[2], ps[3]
	return []fp8GemvCase{
		{1, qkv, ref.FP8ActTensor, false, false},
		{1, o, ref.FP8ActStatic, true, false},
		{1, gu, ref.FP8ActTensor, false, true},
		{1, down, ref.FP8ActToken, true, false},
		{13, qkv, ref.FP8ActStatic, false, false},
		{9, gu, ref.FP8ActBF16, true, true},
		{16, down, ref.FP8ActTensor, false, false},
		{32, qkv, ref.FP8ActToken, true, false},
		{32, o, ref.FP8ActBF16, false, false},
		{32, gu, ref.FP8ActToken, true, true},
		{32, down, ref.FP8ActStatic, true, false},
	}
}

// fp8GemvEdges are the kernel's edges whatever the model, every mode and
// layout: n not a multiple of the block's 16 columns (40, 24 with silu: 12
// of gate and 12 of up), a partial last k chunk (208 = 3 × 64 + 16, 80),
// k = 16 (one lane in four loads), 3, 8, 17 and 31 rows.
func fp8GemvEdges() []fp8GemvCase {
	var out []fp8GemvCase
	acts := []ref.FP8Act{ref.FP8ActBF16, ref.FP8ActStatic, ref.FP8ActTensor, ref.FP8ActToken}
	for i, act := range acts {
		for _, perChannel := range []bool{false, true} {
			out = append(out, fp8GemvCase{[]int{3, 8, 17, 31}[i], linearShape{"edge", 40, 208}, act, perChannel, false})
		}
		out = append(out, fp8GemvCase{[]int{31, 17, 8, 3}[i], linearShape{"edge", 24, 80}, act, i%2 == 1, true})
	}
	return append(out, fp8GemvCase{5, linearShape{"edge", 48, 16}, ref.FP8ActToken, true, false})
}

// verifyLinearFP8 checks linear version 5's FP8 kernels at m's shapes
// (when the selection checks version 5).
func (v *Verifier) verifyLinearFP8(m kernels.ModelShape) {
	if !slices.Contains(v.versions(kernels.OpLinear), 5) || v.set.Replaces(OpLinear) {
		return
	}
	set := v.pinned(kernels.OpLinear, 5)
	for _, c := range fp8GemvCases(m) {
		v.fp8GemvAt(set, m.Name, c)
	}
}

// verifyLinearFP8Edges checks the edge shapes once (VerifyAll).
func (v *Verifier) verifyLinearFP8Edges() {
	if !slices.Contains(v.versions(kernels.OpLinear), 5) || v.set.Replaces(OpLinear) {
		return
	}
	set := v.pinned(kernels.OpLinear, 5)
	for _, c := range fp8GemvEdges() {
		v.fp8GemvAt(set, "edge", c)
	}
}

// fp8GemvWeights draws w [n, k], its rows scaled by 1/2, 1 and 2 in turn
// (so that per-channel scales differ by 4×), and quantizes it per tensor
// or per row (output channel).
func (v *Verifier) fp8GemvWeights(n, k int, perChannel bool) ([]uint8, []float32) {
	w := RandomBF16(v.rng, n*k, 0, 0.02)
	for j := range n {
		f := []float32{0.5, 1, 2}[j%3]
		for i := j * k; i < (j+1)*k; i++ {
			w[i] = ref.F32ToBF16(f * ref.BF16ToF32(w[i]))
		}
	}
	q := make([]uint8, n*k)
	if perChannel {
		s := make([]float32, n)
		ref.QuantizeFP8Token(q, s, w, n, k)
		return q, s
	}
	return q, []float32{ref.QuantizeFP8Tensor(q, w)}
}

// fp8GemvAt checks one case against ref.GemvFP8 (or GemvFP8SiluMul)
// within the bf16 tolerance: the kernel sums k in its own order.
func (v *Verifier) fp8GemvAt(set *Kernels, model string, c fp8GemvCase) {
	if v.dead != nil || !set.FP8GemvRuns(c.m, c.p.k) {
		return
	}
	n, nLabel := cappedN(c.p.n, c.p.k)
	if c.silu {
		n -= n % 2 // whole columns of gate and up
	}
	rows, k := c.m, c.p.k
	x := v.fp8Input(rows, k)
	w, ws := v.fp8GemvWeights(n, k, c.perChannel)
	// A static scale 0.7 of the absmax's: the largest values saturate.
	inScale := 0.7 * ref.FP8Scale(ref.AbsMaxBF16(x))
	wStride, outs := 0, n
	if c.perChannel {
		wStride = 1
	}
	want := make([]uint16, rows*n)
	if c.silu {
		outs = n / 2
		want = want[:rows*outs]
		ref.GemvFP8SiluMul(want, x, inScale, c.act, w, ws, wStride, rows, outs, k)
	} else {
		ref.GemvFP8(want, x, inScale, c.act, w, ws, wStride, rows, n, k)
	}
	out, dX, dXs, dW, dWs := v.poisoned(rows*outs), v.bf16(x), v.f32([]float32{inScale}), v.u8(w), v.f32(ws)
	v.launch(func() error {
		return set.GemvFP8(v.stream, out, dX, dXs, int32(c.act), dW, dWs, c.perChannel, rows, outs, k, c.silu)
	})
	v.modelBytes = costBytes("linear", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.(runner.FP8Backend).LinearFP8(b(1), b(1), b(1), b(1), b(1), rows, n, k, c.act == ref.FP8ActToken, c.perChannel)
	})
	rel, err := closeBF16(v.getBF16(out, rows*outs), want)
	check := "linear_fp8"
	if c.silu {
		check = "linear_fp8 silu_mul"
	}
	shape := fmt.Sprintf("%s %s m=%d %s k=%d %s, w scales per %s", model, c.p.name, rows, nLabel, k,
		fp8ActNames[c.act], perWhat(wStride, "channel"))
	v.record(versioned(check, 5), shape, rel, false, err)
}

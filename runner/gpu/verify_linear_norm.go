package gpu

import (
	"errors"
	"fmt"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// verify_linear_norm.go checks linear version 4's own kernels (gemv.cu's
// gemv_res_* and gemv_norm_*): a producer that adds its product into the
// residual stream and writes the squared sums of its column blocks, then a
// consumer that RMS-normalises that residual from those sums in its
// prologue, as a decode step chains them.

// normPair is one producer → consumer chain of a model: the producer's
// inner dimension (o_proj's or down_proj's k) and the consumer's
// projection (qkv_proj, gate_up_proj with SiLU·mul, lm_head).
type normPair struct {
	producer string
	kProd    int
	consumer linearShape
	silu     bool
}

// normPairs are the chains of m's decode step: o_proj → gate_up_proj,
// down_proj → the next layer's qkv_proj, the last down_proj → lm_head.
func normPairs(m kernels.ModelShape) []normPair {
	return []normPair{
		{"o_proj", m.Heads * m.HeadDim, linearShape{"gate_up_proj", m.Inter, m.Hidden}, true},
		{"down_proj", m.Inter, linearShape{"qkv_proj", (m.Heads + 2*m.KVHeads) * m.HeadDim, m.Hidden}, false},
		{"down_proj", m.Inter, linearShape{"lm_head", m.Vocab, m.Hidden}, false},
	}
}

// linearNormRows are the row counts checked: batch 1, the first of the 16-
// row kernels and their largest.
var linearNormRows = []int{1, 9, kernels.GemvMaxRows}

// linearNormEdges are chains at the kernels' edges: a residual width that
// leaves the producer's last block 8 columns (200, 1003) and the consumer a
// partial k chunk (200 % 64 = 8), consumer widths under a block or past a
// whole one (24, 40), rows 3, 9 and 16.
func linearNormEdges() []linearNormEdge {
	return []linearNormEdge{
		{3, 200, normPair{"edge", 136, linearShape{"edge", 40, 200}, false}},
		{9, 1003, normPair{"edge", 72, linearShape{"edge", 24, 1003}, true}},
		{16, 200, normPair{"edge", 8, linearShape{"edge", 17, 200}, false}},
	}
}

type linearNormEdge struct {
	rows, hidden int
	normPair
}

// verifyLinearNorm checks version 4's chains at m's shapes (when version
// 4 is among the versions checked).
func (v *Verifier) verifyLinearNorm(m kernels.ModelShape) {
	set := v.pinned(kernels.OpLinear, 4)
	for _, rows := range linearNormRows {
		for _, p := range normPairs(m) {
			v.linearNormAt(set, m.Name, m.Hidden, p, rows)
		}
	}
}

// linearNormAt checks one chain at rows rows of a residual stream hidden
// wide: the producer's residual (within bf16 tolerance of
// ref.GemvResidual: its add is exact, its product sums k in its own order)
// and squared sums (within 1e-5 of those of its own residual), then the consumer
// on the producer's own output against ref.NormGemv / NormGemvSiluMul, so
// that each kernel answers for its own error.
func (v *Verifier) linearNormAt(set *Kernels, model string, hidden int, p normPair, rows int) {
	if v.dead != nil || !set.NormFuses(rows, hidden) || !set.NormProduces(p.kProd) {
		return
	}
	// The residual keeps its width (the consumer's norm needs whole rows);
	// the producer's k is capped as cappedN caps rows.
	kLabel := fmt.Sprintf("k=%d", p.kProd)
	if capped := max(kernels.GemvKChunk, linearMaxElements/hidden/kernels.GemvKChunk*kernels.GemvKChunk); p.kProd > capped {
		kLabel = fmt.Sprintf("k=%d (of %d: capped)", capped, p.kProd)
		p.kProd = capped
	}
	parts := kernels.NormParts(hidden)
	residual := RandomBF16(v.rng, rows*hidden, 0, 1)
	x, w := RandomBF16(v.rng, rows*p.kProd, 0, 1), RandomBF16(v.rng, hidden*p.kProd, 0, 0.02)
	wantRes, wantPart := append([]uint16(nil), residual...), make([]float32, rows*parts)
	ref.GemvResidual(wantRes, wantPart, x, w, rows, hidden, p.kProd)
	dRes, dPart := v.bf16(residual), v.f32(make([]float32, rows*parts))
	v.launch(func() error {
		return set.LinearResidual(v.stream, dRes, dPart, v.bf16(x), v.bf16(w), rows, hidden, p.kProd)
	})
	// Weights, x, the residual read and written, the squared sums.
	v.modelBytes = float64(2*hidden*p.kProd + 2*rows*p.kProd + 4*rows*hidden + 4*rows*parts)
	gotRes, gotPart := v.getBF16(dRes, rows*hidden), v.getF32(dPart, rows*parts)
	rel, err := closeBF16(gotRes, wantRes)
	// The squared sums of the kernel's own residual (whose bf16 error is
	// the product's): the epilogue's float32 sums within 1e-5.
	ref.ResidualSquares(wantPart, gotRes, rows, hidden)
	if partRel, partErr := ref.RelErr(gotPart, wantPart); partErr != nil || partRel > 1e-5 {
		err = errors.Join(err, fmt.Errorf("squared sums: relative error %.3g > 1e-5 (%v)", partRel, partErr))
	}
	v.record(versioned("linear residual", 4), fmt.Sprintf("%s %s m=%d n=%d %s", model, p.producer, rows, hidden, kLabel), rel, false, err)
	if err != nil || v.dead != nil {
		return
	}
	v.normConsumerAt(set, model, hidden, p, rows, gotRes, gotPart)
}

// normConsumerAt checks the chain's consumer on the producer's residual
// and squared sums (each check owns its device memory: uploaded again).
func (v *Verifier) normConsumerAt(set *Kernels, model string, hidden int, p normPair, rows int, res []uint16, part []float32) {
	const eps = 1e-5
	n, label := cappedN(p.consumer.n, hidden)
	wRows := n
	if p.silu {
		n, label = cappedN(p.consumer.n, 2*hidden)
		wRows, label = 2*n, fmt.Sprintf("inter=%d", n)
		if n < p.consumer.n {
			label = fmt.Sprintf("inter=%d (of %d: capped)", n, p.consumer.n)
		}
	}
	normW, w := RandomBF16(v.rng, hidden, 1, 0.1), RandomBF16(v.rng, wRows*hidden, 0, 1)
	want := make([]uint16, rows*n)
	if p.silu {
		ref.NormGemvSiluMul(want, res, normW, w, rows, n, hidden, eps)
	} else {
		ref.NormGemv(want, res, normW, w, rows, n, hidden, eps)
	}
	out, dRes, dPart := v.poisoned(rows*n), v.bf16(res), v.f32(part)
	v.launch(func() error {
		return set.NormLinear(v.stream, out, dRes, dPart, v.bf16(normW), v.bf16(w), rows, n, hidden, eps, p.silu)
	})
	// Weights, the residual, the norm weights, the squared sums, the output.
	v.modelBytes = float64(2*wRows*hidden + 2*rows*hidden + 2*hidden + 4*rows*kernels.NormParts(hidden) + 2*rows*n)
	rel, err := closeBF16(v.getBF16(out, rows*n), want)
	check := "linear norm"
	if p.silu {
		check = "linear norm silu_mul"
	}
	v.record(versioned(check, 4), fmt.Sprintf("%s %s m=%d %s k=%d", model, p.consumer.name, rows, label, hidden), rel, false, err)
}

package gpu

import (
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// verifyQKNorm checks qk_norm at the heads of a model that runs it (Qwen3's
// q/k norm, Qwen2's q/k/v bias): a decode step's rows (1, 5) and a
// prefill's (128), in the model's own variant.
func (v *Verifier) verifyQKNorm(m kernels.ModelShape) {
	if !m.QKNorm && !m.QKVBias {
		return
	}
	for _, rows := range []int{1, 5, 128} {
		v.qkNormAt(m, rows, rows)
	}
}

// qkNormAt checks qk_norm over rows tokens (of the run's `of`) against
// ref.QKNorm: q and k heads normalised with their weights (QKNorm), the bias
// on every column (QKVBias), v heads otherwise untouched.
func (v *Verifier) qkNormAt(m kernels.ModelShape, rows, of int) {
	width := (m.Heads + 2*m.KVHeads) * m.HeadDim
	qkv := RandomBF16(v.rng, rows*width, 0.5, 2)
	var bias, qNorm, kNorm []uint16
	var pBias, pQ, pK cuda.DevPtr // 0: absent
	if m.QKVBias {
		bias = RandomBF16(v.rng, width, 0, 1)
		pBias = v.bf16(bias)
	}
	if m.QKNorm {
		qNorm, kNorm = RandomBF16(v.rng, m.HeadDim, 1, 0.1), RandomBF16(v.rng, m.HeadDim, 1, 0.1)
		pQ, pK = v.bf16(qNorm), v.bf16(kNorm)
	}
	const eps = 1e-6
	want := append([]uint16(nil), qkv...)
	ref.QKNorm(want, bias, qNorm, kNorm, rows, m.Heads, m.KVHeads, m.HeadDim, eps)
	dQKV := v.bf16(qkv)
	v.launch(func() error {
		return v.set.QKNorm(v.stream, dQKV, pBias, pQ, pK, rows, m.Heads, m.KVHeads, m.HeadDim, eps)
	})
	v.modelBytes = costBytes("qk_norm", func(be runner.Backend, b func(int) runner.Buffer) error {
		var bb, qb, kb runner.Buffer
		if m.QKVBias {
			bb = b(width)
		}
		if m.QKNorm {
			qb, kb = b(m.HeadDim), b(m.HeadDim)
		}
		return be.QKNorm(b(rows*width), bb, qb, kb, rows, m.Heads, m.KVHeads, m.HeadDim, eps)
	})
	rel, err := closeBF16(v.getBF16(dQKV, rows*width), want)
	shape := fmt.Sprintf("%s %s heads=%d/%d head_dim=%d norm=%v bias=%v", m.Name, rowsLabel(rows, of),
		m.Heads, m.KVHeads, m.HeadDim, m.QKNorm, m.QKVBias)
	v.record("qk_norm", shape, rel, false, err)
}

package runner

import (
	"fmt"
	"strings"

	"stepbench/kernels/ref"
)

// layerWeights holds one decoder layer on the backend, with q/k/v and
// gate/up fused into one matrix each so each is a single GEMM.
type layerWeights struct {
	inputNorm, postNorm Buffer // [hidden]
	qkv                 Buffer // [(H+2KV)*D, hidden]: q rows, then k rows, then v rows
	o                   Buffer // [hidden, H*D]
	gateUp              Buffer // [2*inter, hidden]: gate rows, then up rows
	down                Buffer // [hidden, inter]
}

// Weights is a model's parameters on a backend.
type Weights struct {
	embed     Buffer // [vocab, hidden]
	lmHead    Buffer // [vocab, hidden]; the embedding buffer when tied
	finalNorm Buffer // [hidden]
	invFreq   Buffer // F32 [head_dim/2]
	layers    []layerWeights
	owned     []Buffer
}

// TensorReader yields the bf16 contents of an HF-named tensor (already
// shape-checked against the config).
type TensorReader interface {
	BF16(name string) ([]uint16, error)
}

// WeightSource says where weights come from: Reader for real weights, or
// nil Reader for dummy weights drawn from Seed.
type WeightSource struct {
	Reader TensorReader
	Seed   uint64
}

// part is one HF tensor placed at an element offset of a backend buffer.
type part struct {
	name   string
	offset int
	n      int
	kind   ref.DummyKind
}

// LoadWeights allocates every parameter on be and fills it from src.
// progress, when non-nil, is called after each tensor with (done, total).
func LoadWeights(be Backend, cfg Config, src WeightSource, progress func(done, total int)) (*Weights, error) {
	h, inter, D := cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim
	qDim, kvDim := cfg.NumAttentionHeads*D, cfg.NumKeyValueHeads*D
	w := &Weights{}
	total := 3 + 9*cfg.NumHiddenLayers // embed, lm_head, norm; 9 HF tensors per layer
	done := 0
	alloc := func(n int, parts ...part) (Buffer, error) {
		b, err := be.Alloc(BF16, n)
		if err != nil {
			return nil, fmt.Errorf("allocate %s (%d bf16): %w", parts[0].name, n, err)
		}
		w.owned = append(w.owned, b)
		names := make([]string, len(parts))
		for i, p := range parts {
			names[i] = p.name
		}
		nameBuffer(be, b, strings.Join(names, " + "))
		for _, p := range parts {
			if err := fillPart(be, b, p, src); err != nil {
				return nil, err
			}
			done++
			if progress != nil {
				progress(done, total)
			}
		}
		return b, nil
	}
	var err error
	if w.embed, err = alloc(cfg.VocabSize*h, part{"model.embed_tokens.weight", 0, cfg.VocabSize * h, ref.DummyUniform}); err != nil {
		return nil, w.freeOnError(be, err)
	}
	if cfg.TieWordEmbeddings {
		w.lmHead = w.embed
		done++
	} else if w.lmHead, err = alloc(cfg.VocabSize*h, part{"lm_head.weight", 0, cfg.VocabSize * h, ref.DummyUniform}); err != nil {
		return nil, w.freeOnError(be, err)
	}
	if w.finalNorm, err = alloc(h, part{"model.norm.weight", 0, h, ref.DummyOnes}); err != nil {
		return nil, w.freeOnError(be, err)
	}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		pre := fmt.Sprintf("model.layers.%d.", i)
		var lw layerWeights
		steps := []struct {
			dst   *Buffer
			n     int
			parts []part
		}{
			{&lw.inputNorm, h, []part{{pre + "input_layernorm.weight", 0, h, ref.DummyOnes}}},
			{&lw.qkv, (qDim + 2*kvDim) * h, []part{
				{pre + "self_attn.q_proj.weight", 0, qDim * h, ref.DummyUniform},
				{pre + "self_attn.k_proj.weight", qDim * h, kvDim * h, ref.DummyUniform},
				{pre + "self_attn.v_proj.weight", (qDim + kvDim) * h, kvDim * h, ref.DummyUniform},
			}},
			{&lw.o, h * qDim, []part{{pre + "self_attn.o_proj.weight", 0, h * qDim, ref.DummyUniform}}},
			{&lw.postNorm, h, []part{{pre + "post_attention_layernorm.weight", 0, h, ref.DummyOnes}}},
			{&lw.gateUp, 2 * inter * h, []part{
				{pre + "mlp.gate_proj.weight", 0, inter * h, ref.DummyUniform},
				{pre + "mlp.up_proj.weight", inter * h, inter * h, ref.DummyUniform},
			}},
			{&lw.down, h * inter, []part{{pre + "mlp.down_proj.weight", 0, h * inter, ref.DummyUniform}}},
		}
		for _, s := range steps {
			if *s.dst, err = alloc(s.n, s.parts...); err != nil {
				return nil, w.freeOnError(be, err)
			}
		}
		w.layers = append(w.layers, lw)
	}
	inv := cfg.RopeInvFreq()
	if w.invFreq, err = be.Alloc(F32, len(inv)); err != nil {
		return nil, w.freeOnError(be, fmt.Errorf("allocate rope inv_freq: %w", err))
	}
	w.owned = append(w.owned, w.invFreq)
	if err := be.UploadF32(w.invFreq, inv); err != nil {
		return nil, w.freeOnError(be, fmt.Errorf("upload rope inv_freq: %w", err))
	}
	return w, nil
}

func fillPart(be Backend, dst Buffer, p part, src WeightSource) error {
	if src.Reader == nil {
		if err := be.FillDummy(dst, p.offset, p.n, src.Seed, p.name, 0, p.kind); err != nil {
			return fmt.Errorf("dummy %s: %w", p.name, err)
		}
		return nil
	}
	data, err := src.Reader.BF16(p.name)
	if err != nil {
		return fmt.Errorf("read %s: %w", p.name, err)
	}
	if len(data) != p.n {
		return fmt.Errorf("tensor %s: %d elements, want %d", p.name, len(data), p.n)
	}
	if err := be.UploadBF16(dst, p.offset, data); err != nil {
		return fmt.Errorf("upload %s: %w", p.name, err)
	}
	return nil
}

// Free releases every parameter buffer.
func (w *Weights) Free(be Backend) error {
	var first error
	for _, b := range w.owned {
		if err := be.Free(b); err != nil && first == nil {
			first = err
		}
	}
	w.owned = nil
	return first
}

func (w *Weights) freeOnError(be Backend, err error) error {
	_ = w.Free(be) // the load error is the one worth reporting
	return err
}

// RopeInvFreq is the model's RoPE inverse frequencies (llama3-scaled when configured).
func (c Config) RopeInvFreq() []float32 {
	var s *ref.Llama3Scaling
	if c.RopeScaling != nil {
		s = &ref.Llama3Scaling{
			Factor:               c.RopeScaling.Factor,
			LowFreqFactor:        c.RopeScaling.LowFreqFactor,
			HighFreqFactor:       c.RopeScaling.HighFreqFactor,
			OriginalMaxPositions: c.RopeScaling.OriginalMaxPositionEmbeddings,
		}
	}
	return ref.RopeInvFreq(c.HeadDim, c.RopeTheta, s)
}

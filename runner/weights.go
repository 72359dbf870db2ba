package runner

import (
	"fmt"
	"strings"

	"stepbench/kernels/ref"
)

// layerWeights holds one decoder layer on the backend, with q/k/v and
// gate/up fused into one matrix each so each is a single GEMM.
type layerWeights struct {
	inputNorm, postNorm Buffer       // [hidden]
	qkvBias             Buffer       // [(H+2*KV)*D] (QKVBias), else nil
	qNorm, kNorm        Buffer       // [head_dim] (QKNorm), else nil
	qkv                 linearWeight // [(H+2KV)*D, hidden]: q rows, then k rows, then v rows
	o                   linearWeight // [hidden, H*D]
	gateUp              linearWeight // [2*inter, hidden]: gate rows, then up rows
	down                linearWeight // [hidden, inter]
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

// part is a block of an HF tensor of shape [rows, cols] (row-major) placed
// contiguously at an element offset of a backend buffer: rows
// [row0, row0+nrows) and columns [col0, col0+ncols). A whole tensor is the
// block of all its rows and columns; a tensor-parallel rank takes a block of
// rows (column-parallel layers) or of columns (row-parallel ones).
type part struct {
	name                     string
	offset                   int
	kind                     ref.DummyKind
	rows, cols               int
	row0, nrows, col0, ncols int
}

// whole is the part holding all of a [rows, cols] tensor at offset.
func whole(name string, offset, rows, cols int, kind ref.DummyKind) part {
	return part{name: name, offset: offset, kind: kind, rows: rows, cols: cols, nrows: rows, ncols: cols}
}

// rowBlock is rows [row0, row0+n) of a [rows, cols] tensor.
func rowBlock(name string, offset, rows, cols, row0, n int) part {
	return part{name: name, offset: offset, kind: ref.DummyUniform, rows: rows, cols: cols, row0: row0, nrows: n, ncols: cols}
}

// colBlock is columns [col0, col0+n) of every row of a [rows, cols] tensor.
func colBlock(name string, offset, rows, cols, col0, n int) part {
	return part{name: name, offset: offset, kind: ref.DummyUniform, rows: rows, cols: cols, nrows: rows, col0: col0, ncols: n}
}

func (p part) len() int { return p.nrows * p.ncols }

// LoadWeights allocates every parameter on be and fills it from src.
// progress, when non-nil, is called after each tensor with (done, total).
func LoadWeights(be Backend, cfg Config, src WeightSource, progress func(done, total int)) (*Weights, error) {
	return loadWeights(be, cfg, cfg.FullLayout(), src, progress)
}

// weightLoader allocates and fills one rank's parameters.
type weightLoader struct {
	be          Backend
	cfg         Config
	src         WeightSource
	w           *Weights
	done, total int
	progress    func(done, total int)
}

func (ld *weightLoader) alloc(n int, parts ...part) (Buffer, error) {
	b, err := ld.be.Alloc(BF16, n)
	if err != nil {
		return nil, fmt.Errorf("allocate %s (%d bf16): %w", parts[0].name, n, err)
	}
	ld.w.owned = append(ld.w.owned, b)
	nameBuffer(ld.be, b, strings.Join(partNames(parts), " + "))
	for _, p := range parts {
		if err := fillPart(ld.be, b, p, ld.src); err != nil {
			return nil, err
		}
		ld.step()
	}
	return b, nil
}

// step counts one HF tensor loaded.
func (ld *weightLoader) step() {
	ld.done++
	if ld.progress != nil {
		ld.progress(ld.done, ld.total)
	}
}

// loadWeights loads layout's share of the model: the whole of it for
// cfg.FullLayout(). The embedding and the norms are whole on every rank.
func loadWeights(be Backend, cfg Config, lay TPLayout, src WeightSource, progress func(done, total int)) (*Weights, error) {
	h, V := cfg.HiddenSize, cfg.VocabSize
	ld := &weightLoader{be: be, cfg: cfg, src: src, w: &Weights{}, progress: progress,
		total: 3 + cfg.TensorsPerLayer()*cfg.NumHiddenLayers} // embed, lm_head, norm; the layers' HF tensors
	w := ld.w
	var err error
	if cfg.Quantization != nil {
		fb, ok := be.(FP8Backend)
		if !ok {
			return nil, fmt.Errorf("%s backend: %w", be.Name(), ErrNoFP8)
		}
		if err := fb.EnableFP8(); err != nil {
			return nil, err
		}
	}
	if w.embed, err = ld.alloc(V*h, whole("model.embed_tokens.weight", 0, V, h, ref.DummyUniform)); err != nil {
		return nil, w.freeOnError(be, err)
	}
	// A rank's lm_head is its block of the vocabulary's rows, of the
	// embedding when the two are tied.
	headName := "lm_head.weight"
	if cfg.TieWordEmbeddings {
		headName = "model.embed_tokens.weight"
	}
	if cfg.TieWordEmbeddings && lay.Vocab == V {
		w.lmHead = w.embed
		ld.done++
	} else if w.lmHead, err = ld.alloc(lay.Vocab*h, rowBlock(headName, 0, V, h, lay.VocabStart, lay.Vocab)); err != nil {
		return nil, w.freeOnError(be, err)
	}
	if w.finalNorm, err = ld.alloc(h, whole("model.norm.weight", 0, 1, h, ref.DummyOnes)); err != nil {
		return nil, w.freeOnError(be, err)
	}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		lw, err := ld.layer(cfg, lay, i)
		if err != nil {
			return nil, w.freeOnError(be, err)
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
	if p, ok := be.(WeightPreparer); ok {
		if err := p.PrepareWeights(w.matrices()); err != nil {
			return nil, w.freeOnError(be, fmt.Errorf("prepare weights: %w", err))
		}
	}
	return w, nil
}

// matrices are the weights Linear reads: lm_head and every layer's bf16
// projections (an FP8 one is LinearFP8's).
func (w *Weights) matrices() []Buffer {
	out := []Buffer{w.lmHead}
	for _, l := range w.layers {
		for _, lw := range []linearWeight{l.qkv, l.o, l.gateUp, l.down} {
			if !lw.fp8() {
				out = append(out, lw.w)
			}
		}
	}
	return out
}

// layer loads decoder layer i's share: q/k/v rows of the rank's heads and
// gate/up rows of its intermediate columns (column-parallel), o_proj's and
// down_proj's columns of the same (row-parallel).
func (ld *weightLoader) layer(cfg Config, lay TPLayout, i int) (layerWeights, error) {
	h, inter, D := cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim
	H, KV := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	qRows, kvRows := lay.Heads*D, lay.KVHeads*D
	pre := fmt.Sprintf("model.layers.%d.", i)
	var lw layerWeights
	var err error
	if lw.inputNorm, err = ld.alloc(h, whole(pre+"input_layernorm.weight", 0, 1, h, ref.DummyOnes)); err != nil {
		return lw, err
	}
	if lw.postNorm, err = ld.alloc(h, whole(pre+"post_attention_layernorm.weight", 0, 1, h, ref.DummyOnes)); err != nil {
		return lw, err
	}
	steps := []struct {
		dst   *linearWeight
		n     int
		parts []part
	}{
		{&lw.qkv, (qRows + 2*kvRows) * h, []part{
			rowBlock(pre+"self_attn.q_proj.weight", 0, H*D, h, lay.HeadStart*D, qRows),
			rowBlock(pre+"self_attn.k_proj.weight", qRows*h, KV*D, h, lay.KVHeadStart*D, kvRows),
			rowBlock(pre+"self_attn.v_proj.weight", (qRows+kvRows)*h, KV*D, h, lay.KVHeadStart*D, kvRows),
		}},
		{&lw.o, h * qRows, []part{colBlock(pre+"self_attn.o_proj.weight", 0, h, H*D, lay.HeadStart*D, qRows)}},
		{&lw.gateUp, 2 * lay.Inter * h, []part{
			rowBlock(pre+"mlp.gate_proj.weight", 0, inter, h, lay.InterStart, lay.Inter),
			rowBlock(pre+"mlp.up_proj.weight", lay.Inter*h, inter, h, lay.InterStart, lay.Inter),
		}},
		{&lw.down, h * lay.Inter, []part{colBlock(pre+"mlp.down_proj.weight", 0, h, inter, lay.InterStart, lay.Inter)}},
	}
	for _, s := range steps {
		if *s.dst, err = ld.linear(s.n, s.parts...); err != nil {
			return lw, err
		}
	}
	return lw, ld.attentionExtras(cfg, lay, pre, &lw)
}

// attentionExtras loads Qwen2's q/k/v bias (the rank's heads' rows) and
// Qwen3's q/k norm weights (whole on every rank: one [head_dim] vector
// each, shared by the heads).
func (ld *weightLoader) attentionExtras(cfg Config, lay TPLayout, pre string, lw *layerWeights) error {
	D, H, KV := cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	qRows, kvRows := lay.Heads*D, lay.KVHeads*D
	var err error
	if cfg.QKVBias {
		if lw.qkvBias, err = ld.alloc(qRows+2*kvRows,
			rowBlock(pre+"self_attn.q_proj.bias", 0, H*D, 1, lay.HeadStart*D, qRows),
			rowBlock(pre+"self_attn.k_proj.bias", qRows, KV*D, 1, lay.KVHeadStart*D, kvRows),
			rowBlock(pre+"self_attn.v_proj.bias", qRows+kvRows, KV*D, 1, lay.KVHeadStart*D, kvRows)); err != nil {
			return err
		}
	}
	if cfg.QKNorm {
		if lw.qNorm, err = ld.alloc(D, whole(pre+"self_attn.q_norm.weight", 0, 1, D, ref.DummyOnes)); err != nil {
			return err
		}
		if lw.kNorm, err = ld.alloc(D, whole(pre+"self_attn.k_norm.weight", 0, 1, D, ref.DummyOnes)); err != nil {
			return err
		}
	}
	return nil
}

// TensorsPerLayer is how many HF tensors a decoder layer has: Llama's 9,
// Qwen3's 11 (q_norm, k_norm), Qwen2's 12 (three biases).
func (c Config) TensorsPerLayer() int {
	n := 9
	if c.QKNorm {
		n += 2
	}
	if c.QKVBias {
		n += 3
	}
	return n
}

// fillPart fills p's block: dummy weights are generated from their global
// element indices (so every rank's block is the same model's), real ones
// copied from the whole tensor.
func fillPart(be Backend, dst Buffer, p part, src WeightSource) error {
	if src.Reader == nil {
		if p.ncols == p.cols {
			if err := be.FillDummy(dst, p.offset, p.len(), src.Seed, p.name, uint64(p.row0*p.cols), p.kind); err != nil {
				return fmt.Errorf("dummy %s: %w", p.name, err)
			}
			return nil
		}
		first := uint64(p.row0*p.cols + p.col0)
		if err := be.FillDummyRows(dst, p.offset, p.nrows, p.ncols, src.Seed, p.name, first, uint64(p.cols), p.kind); err != nil {
			return fmt.Errorf("dummy %s columns %d..%d: %w", p.name, p.col0, p.col0+p.ncols, err)
		}
		return nil
	}
	data, err := src.Reader.BF16(p.name)
	if err != nil {
		return fmt.Errorf("read %s: %w", p.name, err)
	}
	if len(data) != p.rows*p.cols {
		return fmt.Errorf("tensor %s: %d elements, want %d", p.name, len(data), p.rows*p.cols)
	}
	block := data[p.row0*p.cols : (p.row0+p.nrows)*p.cols]
	if p.ncols != p.cols {
		block = make([]uint16, 0, p.len())
		for r := p.row0; r < p.row0+p.nrows; r++ {
			block = append(block, data[r*p.cols+p.col0:r*p.cols+p.col0+p.ncols]...)
		}
	}
	if err := be.UploadBF16(dst, p.offset, block); err != nil {
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

package runner

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// Engine runs the Llama forward pass on a Backend for one fixed batch at a
// time. It owns the KV cache and the activations; Begin resets both, so no
// run ever sees another run's prefix.
type Engine struct {
	cfg Config
	be  Backend
	w   *Weights
	// tp is this engine's share of the model (the whole model unless it is
	// a tensor-parallel rank); coll, set for a rank, runs the collectives.
	tp   TPLayout
	coll Collectives
	// fp8 runs the FP8 projections of a quantized model (nil otherwise).
	fp8 FP8Backend

	// kv is how the cache is laid out (SetKVOptions).
	kv KVOptions
	// kvScales are an FP8 cache's per-layer K and V scales, one per KV head
	// of the whole model (SetKVScales; nil: 1.0 each).
	kvScales *KVScales
	// calibrating is the FP8 cache's options while a calibration runs on
	// a bf16 cache (BeginCalibration).
	calibrating KVOptions

	// Shape of the current run: batch sequences (seqs) that generate
	// outputLen tokens each; inputLen is their prompt length when the
	// batch is uniform (0 otherwise), maxSeq the cache positions a
	// sequence can hold.
	batch, inputLen, outputLen, maxSeq int
	seqs                               []SeqSpec
	pos                                int   // tokens already in the cache of every sequence of a uniform batch (host view)
	lens                               []int // tokens already in each sequence's cache (host view)
	decoded                            int   // decode steps run
	// tabled runs the step through the block table (AttnShape.Tabled):
	// the paged layout, a ragged batch, or a backend whose chosen kernels
	// take only the table (KVTableUser); plan is the run's table.
	tabled           bool
	plan             KVPlan
	begun, prefilled bool
	// costOnly is the cost model's engine (stepCost): BeginSeqs takes nil
	// prompts and never materialises one id per token.
	costOnly bool

	capTokens, capBatch int  // what the buffers below are sized for
	capSlots, capPages  int  // the cache's slots per layer, the table's pages per sequence
	capTabled           bool // whether the views below are allocated
	capCache            kernels.CacheDType
	act                 activations
	kCache, vCache      []Buffer
	// kScale and vScale are an FP8 cache's scales per layer, F32[KVHeads]
	// of this engine's heads (nil for a bf16 cache).
	kScale, vScale []Buffer
	posBuf         Buffer // I32[1]: the device's view of pos
	// prefillKV and decodeKV are the prefill's and the decode steps'
	// views of the cache (tabled runs; both share posBuf and one block
	// table); decodeKV moves on at the end of every decode step.
	prefillKV, decodeKV KVView
	ids                 Buffer // I32[capTokens]: prefill input ids
	next                Buffer // I32[capBatch]: argmax of the last step; decode input
	keys                Buffer // I32[2*capBatch]: a rank's argmax keys (uint64 each)
	prompts             []int32
	graphs              decodeGraphs // captured decode steps of the buffers above

	// OnOp, when set, is called before every backend op with the op's
	// label (e.g. "qkv_proj"); the cost model and per-op breakdowns use it.
	OnOp func(op string)
	// Ranges, when set, gets a range named by the op's label around every
	// op launched from the host (a replayed decode graph launches none):
	// NVTX ranges a profiler shows. It must cost nothing when no profiler
	// is attached.
	Ranges      RangeMarker
	opRangeOpen bool
}

// RangeMarker opens and closes named ranges on the calling thread (NVTX's
// push and pop).
type RangeMarker interface {
	Push(name string)
	Pop()
}

type activations struct {
	x, normed, qkv, q, attn, o, gateUp, act, down Buffer // per token
	lastX, lastDown, lastNormed, logits           Buffer // per sequence
	// A quantized model's FP8 projection input and its scales (F32: one
	// per token for per-token scales, else one).
	xq, xScale Buffer
	// normParts are the residual stream's squared sums that a
	// NormLinearFuser's projections pass on (F32; nil without one).
	normParts Buffer
}

// NewEngine loads the weights on be.
func NewEngine(cfg Config, be Backend, src WeightSource, progress func(done, total int)) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := LoadWeights(be, cfg, src, progress)
	if err != nil {
		return nil, fmt.Errorf("load weights: %w", err)
	}
	e := &Engine{cfg: cfg, be: be, w: w, tp: cfg.FullLayout()}
	e.fp8, _ = be.(FP8Backend)
	return e, nil
}

// NewEngineRank loads one tensor-parallel rank's share of the weights (see
// TPLayout) on be, which must have Collectives; the engine then all-reduces
// after o_proj and down_proj and combines the argmax over the ranks. Every
// rank's engine must run the same steps in the same order (Group does).
func NewEngineRank(cfg Config, layout TPLayout, be Backend, src WeightSource, progress func(done, total int)) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	want, err := cfg.TPLayout(layout.Rank, layout.Size)
	if err != nil {
		return nil, err
	}
	if layout != want {
		return nil, fmt.Errorf("rank %d of %d: layout %+v is not the model's %+v", layout.Rank, layout.Size, layout, want)
	}
	coll, ok := be.(Collectives)
	if !ok {
		return nil, fmt.Errorf("%s backend: %w", be.Name(), ErrNoCollectives)
	}
	w, err := loadWeights(be, cfg, layout, src, progress)
	if err != nil {
		return nil, fmt.Errorf("load rank %d's weights: %w", layout.Rank, err)
	}
	e := &Engine{cfg: cfg, be: be, w: w, tp: layout, coll: coll}
	e.fp8, _ = be.(FP8Backend)
	return e, nil
}

// Layout is the engine's share of the model.
func (e *Engine) Layout() TPLayout { return e.tp }

// Config is the model's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Backend is the backend the engine runs on.
func (e *Engine) Backend() Backend { return e.be }

// Positions is how many KV positions a run of inputLen prompt tokens that
// generates outputLen tokens writes: inputLen + outputLen − 1.
func Positions(inputLen, outputLen int) int { return inputLen + outputLen - 1 }

// KVTableUser is implemented by backends whose chosen kernels take only
// the block table (a kernel version for the paged layout chosen on the
// contiguous one): the engine then runs even a uniform contiguous batch
// through the table (one page per sequence).
type KVTableUser interface {
	UsesKVTable() bool
}

// SetKVOptions lays the cache out as o from the next Begin on (the zero
// KVOptions is the contiguous layout).
func (e *Engine) SetKVOptions(o KVOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if _, ok := e.be.(FP8Backend); o.DType.FP8() && !ok && !e.costOnly {
		return fmt.Errorf("kv cache dtype %s: the %s backend has no FP8 path", o.DType, e.be.Name())
	}
	e.kv = o
	return nil
}

// KVScales are an FP8 cache's dequantization multipliers (x ≈ byte ·
// scale): per layer, one per KV head of the whole model (a per-tensor
// scale repeated).
type KVScales struct {
	K, V [][]float32
}

// Check names what is wrong with s for a model of layers layers and
// kvHeads KV heads.
func (s KVScales) Check(layers, kvHeads int) error {
	if len(s.K) != layers || len(s.V) != layers {
		return fmt.Errorf("kv scales: %d K and %d V layers for a model of %d", len(s.K), len(s.V), layers)
	}
	for l := range layers {
		for i, sc := range [][]float32{s.K[l], s.V[l]} {
			if len(sc) != kvHeads {
				return fmt.Errorf("kv scales: layer %d's %s: %d scales for %d KV heads", l, "KV"[i:i+1], len(sc), kvHeads)
			}
			for g, x := range sc {
				if !(x > 0) || math.IsInf(float64(x), 0) {
					return fmt.Errorf("kv scales: layer %d's %s scale of KV head %d is %v: want positive and finite", l, "kv"[i:i+1], g, x)
				}
			}
		}
	}
	return nil
}

// UnitKVScales is 1.0 for every layer and KV head (vLLM's default without
// scales in the checkpoint).
func UnitKVScales(layers, kvHeads int) KVScales {
	s := KVScales{K: make([][]float32, layers), V: make([][]float32, layers)}
	for l := range layers {
		s.K[l], s.V[l] = make([]float32, kvHeads), make([]float32, kvHeads)
		for g := range kvHeads {
			s.K[l][g], s.V[l][g] = 1, 1
		}
	}
	return s
}

// SetKVScales sets an FP8 cache's scales from the next Begin on.
func (e *Engine) SetKVScales(s KVScales) error {
	if err := s.Check(e.cfg.NumHiddenLayers, e.cfg.NumKeyValueHeads); err != nil {
		return err
	}
	e.kvScales = &s
	return nil
}

// KVScales is the scales an FP8 cache is read with (1.0 unless set).
func (e *Engine) KVScales() KVScales {
	if e.kvScales != nil {
		return *e.kvScales
	}
	return UnitKVScales(e.cfg.NumHiddenLayers, e.cfg.NumKeyValueHeads)
}

// KVOptions is the cache's layout.
func (e *Engine) KVOptions() KVOptions { return e.kv }

// Begin starts a fresh run of batch sequences of inputLen prompt tokens that
// will generate outputLen tokens: the KV cache is emptied and sized for the
// positions the run writes, inputLen + outputLen − 1 (the prefill's
// inputLen, then one per decode step; the last token generated is never
// fed back). prompts holds batch*inputLen ids, row-major.
func (e *Engine) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	if batch < 1 || inputLen < 1 {
		return fmt.Errorf("begin: batch %d, input %d, output %d: each must be at least 1", batch, inputLen, outputLen)
	}
	seqs := make([]SeqSpec, batch)
	for b := range seqs {
		seqs[b].Prompt = inputLen
	}
	return e.BeginSeqs(seqs, outputLen, prompts)
}

// BeginSeqs starts a fresh run of the sequences seqs, each generating
// outputLen tokens: sequence b's cache holds seqs[b].Context tokens of a
// deterministic fill (never computed), its prefill runs its Prompt tokens
// over them, and each decode step adds one. prompts holds the prompts'
// ids one sequence after another (Σ Prompt). The cache is sized for the
// positions each sequence writes, Context + Prompt + outputLen − 1.
func (e *Engine) BeginSeqs(seqs []SeqSpec, outputLen int, prompts []int32) error {
	tokens, positions, err := e.checkSeqs(seqs, outputLen, prompts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	uniform := Uniform(seqs)
	// An FP8 cache is read through the table only (the block table's
	// kernels have FP8 versions; a contiguous cache is one page per sequence).
	tabled := e.kv.Paged() || !uniform || e.kv.DType.FP8()
	if u, ok := e.be.(KVTableUser); ok && u.UsesKVTable() {
		tabled = true
	}
	plan := PlanKV(positions, e.kv)
	if err := e.ensureBuffers(len(seqs), tokens, plan, tabled); err != nil {
		return err
	}
	e.batch, e.outputLen, e.tabled, e.plan = len(seqs), outputLen, tabled, plan
	e.maxSeq = plan.MaxPages * plan.PageSize
	e.inputLen = 0
	if uniform {
		e.inputLen = seqs[0].Prompt
	}
	e.seqs = append(e.seqs[:0], seqs...)
	e.lens = e.lens[:0]
	for _, s := range seqs {
		e.lens = append(e.lens, s.Context)
	}
	e.pos, e.decoded = 0, 0
	e.prompts = append(e.prompts[:0], prompts...)
	e.begun, e.prefilled = true, false
	// The cache is not cleared: attention never reads a position the run has
	// not written (a decode at pos p reads 0..p), so stale entries are dead.
	if err := e.be.UploadI32(e.posBuf, []int32{0}); err != nil {
		return fmt.Errorf("begin: reset position: %w", err)
	}
	if tabled {
		if err := e.uploadViews(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
	}
	if err := e.uploadKVScales(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := e.fillContexts(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return e.be.Sync()
}

// checkSeqs validates a run's sequences and prompts; it returns the
// prefill's token count and the positions each sequence writes.
func (e *Engine) checkSeqs(seqs []SeqSpec, outputLen int, prompts []int32) (int, []int, error) {
	if len(seqs) < 1 || outputLen < 1 {
		return 0, nil, fmt.Errorf("%d sequences, output %d: each must be at least 1", len(seqs), outputLen)
	}
	tokens := 0
	positions := make([]int, len(seqs))
	for b, s := range seqs {
		if s.Prompt < 1 || s.Context < 0 {
			return 0, nil, fmt.Errorf("sequence %d: prompt %d, context %d: want a prompt of at least 1 token and a context of at least 0", b, s.Prompt, s.Context)
		}
		positions[b] = s.Context + Positions(s.Prompt, outputLen)
		if positions[b] > e.cfg.MaxPositionEmbeddings {
			return 0, nil, fmt.Errorf("sequence %d: context %d + input %d + output %d − 1 = %d positions exceeds the model's %d",
				b, s.Context, s.Prompt, outputLen, positions[b], e.cfg.MaxPositionEmbeddings)
		}
		tokens += s.Prompt
	}
	if e.costOnly && prompts == nil {
		return tokens, positions, nil
	}
	if len(seqs) > 1 && Uniform(seqs) && len(prompts) != tokens {
		return 0, nil, fmt.Errorf("%d prompt ids for batch %d × input %d", len(prompts), len(seqs), seqs[0].Prompt)
	}
	if len(prompts) != tokens {
		return 0, nil, fmt.Errorf("%d prompt ids for %d prompt tokens", len(prompts), tokens)
	}
	for i, id := range prompts {
		if id < 0 || int(id) >= e.cfg.VocabSize {
			return 0, nil, fmt.Errorf("prompt id %d at %d outside the vocabulary [0, %d)", id, i, e.cfg.VocabSize)
		}
	}
	return tokens, positions, nil
}

// uploadViews writes a tabled run's block table and the views of its
// prefill and first decode step.
func (e *Engine) uploadViews() error {
	cached, prompt, ones := make([]int, e.batch), make([]int, e.batch), make([]int, e.batch)
	for b, s := range e.seqs {
		cached[b], prompt[b], ones[b] = s.Context, s.Prompt, 1
	}
	if err := e.be.UploadI32(e.prefillKV.BlockTable, e.plan.Table); err != nil {
		return fmt.Errorf("upload block table: %w", err)
	}
	prefill := e.plan.stepView(cached, prompt)
	if err := e.uploadView(e.prefillKV, prefill); err != nil {
		return fmt.Errorf("upload the prefill's view: %w", err)
	}
	var decode kvStep
	var decodeShape AttnShape
	if e.outputLen >= 2 {
		for b, s := range e.seqs {
			cached[b] = s.Context + s.Prompt
		}
		decode = e.plan.stepView(cached, ones)
		if err := e.uploadView(e.decodeKV, decode); err != nil {
			return fmt.Errorf("upload the first decode step's view: %w", err)
		}
		decodeShape = e.shapeAfter(false, cached)
	}
	if p, ok := e.be.(KVPlanner); ok {
		if err := p.PlanKV(prefill.host(e.plan.Table), e.shapeAfter(true, e.lens), decode.host(e.plan.Table), decodeShape); err != nil {
			return fmt.Errorf("plan the steps: %w", err)
		}
	}
	return nil
}

func (e *Engine) uploadView(kv KVView, v kvStep) error {
	return errors.Join(e.be.UploadI32(kv.SeqLens, v.seqLens), e.be.UploadI32(kv.QueryStart, v.queryStart),
		e.be.UploadI32(kv.Positions, v.positions), e.be.UploadI64(kv.SlotMapping, v.slots))
}

// contextFillSeed keys the deterministic values of the sequences'
// contexts (ref.FillDummy, uniform in ±1/8 like the dummy weights' norms'
// neighbours): the same every run, never a prefix of another run.
const contextFillSeed = 0x6b76_f111

// fillContexts writes every layer's whole cache with deterministic values
// when a sequence has a context: its positions 0..Context−1 are read by
// the prefill and never written by the run. The values depend on the slot,
// not on the sequence (documented in run.md: they stand in for a context's
// bytes, not its meaning).
func (e *Engine) fillContexts() error {
	if !slices.ContainsFunc(e.seqs, func(s SeqSpec) bool { return s.Context > 0 }) {
		return nil
	}
	n := e.plan.Slots() * e.tp.KVHeads * e.cfg.HeadDim
	if e.kv.DType.FP8() {
		return e.fillContextsFP8(n)
	}
	for l := range e.kCache {
		for _, c := range []struct {
			buf  Buffer
			name string
		}{{e.kCache[l], "k"}, {e.vCache[l], "v"}} {
			if err := e.be.FillDummy(c.buf, 0, n, contextFillSeed, fmt.Sprintf("context.%d.%s", l, c.name), 0, ref.DummyUniform); err != nil {
				return fmt.Errorf("fill layer %d's %s cache: %w", l, c.name, err)
			}
		}
	}
	return nil
}

// fillContextsFP8 is fillContexts of an FP8 cache: the same values,
// quantized by a scale of one (E4M3 bytes: a synthetic context's bytes
// are written for the E4M3 format only), through a bf16 scratch of one
// layer's cache.
func (e *Engine) fillContextsFP8(n int) error {
	if e.costOnly {
		return nil
	}
	if e.kv.DType != kernels.CacheE4M3 {
		return fmt.Errorf("a synthetic context in an %s cache: its fill writes E4M3 bytes only (use fp8_e4m3, or --kv-fill prefill)", e.kv.DType)
	}
	fp8 := e.be.(FP8Backend) // SetKVOptions checked
	scratch, err := e.be.Alloc(BF16, n)
	if err != nil {
		return fmt.Errorf("fill the contexts: a scratch of %d bf16: %w", n, err)
	}
	one, err := e.be.Alloc(F32, 1)
	if err != nil {
		return errors.Join(fmt.Errorf("fill the contexts: %w", err), e.be.Free(scratch))
	}
	defer func() { _ = e.be.Free(one) }()
	defer func() { _ = e.be.Free(scratch) }()
	if err := e.be.UploadF32(one, []float32{1}); err != nil {
		return fmt.Errorf("fill the contexts: %w", err)
	}
	rows, cols := e.plan.Slots(), e.tp.KVHeads*e.cfg.HeadDim
	for l := range e.kCache {
		for _, c := range []struct {
			buf  Buffer
			name string
		}{{e.kCache[l], "k"}, {e.vCache[l], "v"}} {
			if err := e.be.FillDummy(scratch, 0, n, contextFillSeed, fmt.Sprintf("context.%d.%s", l, c.name), 0, ref.DummyUniform); err != nil {
				return fmt.Errorf("fill layer %d's %s cache: %w", l, c.name, err)
			}
			if err := fp8.QuantizeFP8(c.buf, one, scratch, rows, cols, QuantStatic); err != nil {
				return fmt.Errorf("fill layer %d's %s cache: %w", l, c.name, err)
			}
		}
	}
	// The scratch is freed when the work that reads it is done.
	return e.be.Sync()
}

// uploadKVScales writes an FP8 cache's scales of this engine's KV heads.
func (e *Engine) uploadKVScales() error {
	if e.kScale == nil {
		return nil
	}
	sc := e.KVScales()
	g0, g1 := e.tp.KVHeadStart, e.tp.KVHeadStart+e.tp.KVHeads
	for l := range e.kScale {
		if err := errors.Join(e.be.UploadF32(e.kScale[l], sc.K[l][g0:g1]), e.be.UploadF32(e.vScale[l], sc.V[l][g0:g1])); err != nil {
			return fmt.Errorf("upload layer %d's kv scales: %w", l, err)
		}
	}
	return nil
}

// ensureBuffers (re)allocates activations, cache and views when the run's
// shape differs from what they are sized for.
func (e *Engine) ensureBuffers(batch, tokens int, plan KVPlan, tabled bool) error {
	if e.posBuf != nil && tokens <= e.capTokens && batch == e.capBatch && plan.Slots() == e.capSlots &&
		plan.MaxPages == e.capPages && tabled == e.capTabled && e.kv.DType == e.capCache {
		return nil
	}
	// Captured decode steps point at the buffers about to be freed.
	if err := e.graphs.invalidate(); err != nil {
		return err
	}
	if err := e.freeRunBuffers(); err != nil {
		return err
	}
	c, lay := e.cfg, e.tp
	h, D := c.HiddenSize, c.HeadDim
	var err error
	alloc := func(dst *Buffer, dt DType, n int, what string) {
		if err != nil {
			return
		}
		if *dst, err = e.be.Alloc(dt, n); err != nil {
			err = fmt.Errorf("allocate %s (%d %s): %w", what, n, dt, err)
			return
		}
		nameBuffer(e.be, *dst, what)
	}
	a := &e.act
	alloc(&a.x, BF16, tokens*h, "residual")
	alloc(&a.normed, BF16, tokens*h, "normed")
	alloc(&a.qkv, BF16, tokens*lay.QKVDim(D), "qkv")
	alloc(&a.q, BF16, tokens*lay.Heads*D, "q")
	alloc(&a.attn, BF16, tokens*lay.Heads*D, "attention output")
	alloc(&a.o, BF16, tokens*h, "o_proj output")
	alloc(&a.gateUp, BF16, tokens*2*lay.Inter, "gate_up")
	alloc(&a.act, BF16, tokens*lay.Inter, "silu*mul")
	alloc(&a.down, BF16, tokens*h, "down_proj output")
	alloc(&a.lastX, BF16, batch*h, "last residual")
	alloc(&a.lastDown, BF16, batch*h, "last down")
	alloc(&a.lastNormed, BF16, batch*h, "last normed")
	alloc(&a.logits, BF16, batch*lay.Vocab, "logits")
	if c.Quantization != nil {
		alloc(&a.xq, F8E4M3, tokens*max(h, lay.Heads*D, lay.Inter), "FP8 projection input")
		alloc(&a.xScale, F32, max(tokens, 1), "FP8 activation scales")
	}
	if f, ok := e.be.(NormLinearFuser); ok && e.mayFuseNorms(f, batch) {
		alloc(&a.normParts, F32, f.NormParts(batch, h), "residual squared sums")
	}
	alloc(&e.posBuf, I32, 1, "position")
	alloc(&e.ids, I32, tokens, "input ids")
	alloc(&e.next, I32, batch, "next ids")
	if e.coll != nil {
		alloc(&e.keys, I32, 2*batch, "argmax keys")
	}
	e.allocKV(alloc, batch, tokens, plan, tabled)
	if err != nil {
		return errors.Join(err, e.freeRunBuffers())
	}
	e.capTokens, e.capBatch, e.capSlots, e.capPages, e.capTabled = tokens, batch, plan.Slots(), plan.MaxPages, tabled
	e.capCache = e.kv.DType
	if r, ok := e.be.(AttentionReserver); ok {
		if err := r.ReserveAttention(e.decodeReserveShape(batch, plan, tabled)); err != nil {
			return fmt.Errorf("reserve attention workspace: %w", err)
		}
	}
	return nil
}

// allocKV allocates the caches and, for a tabled run, the prefill's and
// decode steps' views (sharing posBuf and one block table), through alloc.
func (e *Engine) allocKV(alloc func(*Buffer, DType, int, string), batch, tokens int, plan KVPlan, tabled bool) {
	e.prefillKV, e.decodeKV = KVView{Pos: e.posBuf}, KVView{Pos: e.posBuf}
	if tabled {
		alloc(&e.prefillKV.BlockTable, I32, batch*plan.MaxPages, "block table")
		e.decodeKV.BlockTable = e.prefillKV.BlockTable
		for _, v := range []struct {
			view *KVView
			rows int
			name string
		}{{&e.prefillKV, tokens, "prefill"}, {&e.decodeKV, batch, "decode"}} {
			alloc(&v.view.SeqLens, I32, batch, v.name+" sequence lengths")
			alloc(&v.view.QueryStart, I32, batch+1, v.name+" query starts")
			alloc(&v.view.Positions, I32, v.rows, v.name+" positions")
			alloc(&v.view.SlotMapping, I64, v.rows, v.name+" slot mapping")
		}
	}
	e.kCache = make([]Buffer, e.cfg.NumHiddenLayers)
	e.vCache = make([]Buffer, e.cfg.NumHiddenLayers)
	dt := BF16
	if e.kv.DType.FP8() {
		dt = F8E4M3 // bytes: an E5M2 cache's format is the shape's Cache
		e.kScale, e.vScale = make([]Buffer, e.cfg.NumHiddenLayers), make([]Buffer, e.cfg.NumHiddenLayers)
	}
	for l := range e.kCache {
		n := plan.Slots() * e.tp.KVHeads * e.cfg.HeadDim
		alloc(&e.kCache[l], dt, n, fmt.Sprintf("layer %d K cache", l))
		alloc(&e.vCache[l], dt, n, fmt.Sprintf("layer %d V cache", l))
		if e.kScale != nil {
			alloc(&e.kScale[l], F32, e.tp.KVHeads, fmt.Sprintf("layer %d k_scale", l))
			alloc(&e.vScale[l], F32, e.tp.KVHeads, fmt.Sprintf("layer %d v_scale", l))
		}
	}
}

// decodeReserveShape is the decode step a run of plan's geometry may run
// (and the one-token prefill of a context fill): the shape the attention
// workspace is reserved for.
func (e *Engine) decodeReserveShape(batch int, plan KVPlan, tabled bool) AttnShape {
	s := AttnShape{Batch: batch, SeqLen: 1, Heads: e.tp.Heads, KVHeads: e.tp.KVHeads, HeadDim: e.cfg.HeadDim,
		MaxSeq: plan.MaxPages * plan.PageSize, Cache: e.kv.DType}
	if tabled {
		s.PageSize, s.NumPages, s.MaxPages, s.Paged = plan.PageSize, plan.NumPages, plan.MaxPages, e.kv.Paged()
		s.QLens, s.SeqLens = make([]int, batch), make([]int, batch)
		for b := range batch {
			s.QLens[b], s.SeqLens[b] = 1, 1
		}
	}
	return s
}

func (e *Engine) freeRunBuffers() error {
	var errs []error
	free := func(b *Buffer) {
		if *b != nil {
			errs = append(errs, e.be.Free(*b))
			*b = nil
		}
	}
	a := &e.act
	for _, b := range []*Buffer{&a.x, &a.normed, &a.qkv, &a.q, &a.attn, &a.o, &a.gateUp, &a.act, &a.down,
		&a.lastX, &a.lastDown, &a.lastNormed, &a.logits, &a.xq, &a.xScale, &a.normParts, &e.posBuf, &e.ids, &e.next, &e.keys,
		&e.prefillKV.BlockTable, &e.prefillKV.SeqLens, &e.prefillKV.QueryStart, &e.prefillKV.Positions, &e.prefillKV.SlotMapping,
		&e.decodeKV.SeqLens, &e.decodeKV.QueryStart, &e.decodeKV.Positions, &e.decodeKV.SlotMapping} {
		free(b)
	}
	e.prefillKV, e.decodeKV = KVView{}, KVView{}
	for l := range e.kCache {
		free(&e.kCache[l])
		free(&e.vCache[l])
	}
	for l := range e.kScale {
		free(&e.kScale[l])
		free(&e.vScale[l])
	}
	e.kScale, e.vScale = nil, nil
	e.capTokens, e.capBatch, e.capSlots, e.capPages, e.capTabled = 0, 0, 0, 0, false
	return errors.Join(errs...)
}

// Close frees everything the engine allocated (not the backend itself).
func (e *Engine) Close() error {
	return errors.Join(e.graphs.invalidate(), e.freeRunBuffers(), e.w.Free(e.be))
}

// Prefill enqueues the prompt upload, the forward pass over every prompt
// token and the argmax of each sequence's last token.
func (e *Engine) Prefill() error {
	if !e.begun || e.prefilled {
		return errors.New("prefill: call Begin first (once per run)")
	}
	if err := e.be.UploadI32(e.ids, e.prompts); err != nil {
		return fmt.Errorf("prefill: upload prompt ids: %w", err)
	}
	if err := e.forward(e.ids, true); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	e.prefilled = true
	return nil
}

// Decode enqueues one decode step fed by the previous step's argmax, which
// stays on the backend.
func (e *Engine) Decode() error {
	if !e.prefilled {
		return errors.New("decode: prefill first")
	}
	if e.decoded >= e.outputLen-1 {
		return fmt.Errorf("decode: the run's %d decode steps (output length %d) are done", e.decoded, e.outputLen)
	}
	if sc, ok := e.be.(StepCapturer); ok && sc.CaptureEnabled() {
		if err := e.decodeCaptured(sc); err != nil {
			return fmt.Errorf("decode at %s: %w", e.where(), err)
		}
		return nil
	}
	if err := e.forward(e.next, false); err != nil {
		return fmt.Errorf("decode at %s: %w", e.where(), err)
	}
	return nil
}

// where is the next step's place in the run, for errors: the position of a
// uniform batch, else the decode step.
func (e *Engine) where() string {
	if !e.tabled || e.inputLen > 0 {
		return fmt.Sprintf("position %d", e.lens[0])
	}
	return fmt.Sprintf("decode step %d", e.decoded)
}

// decodeCaptured replays the decode step captured for this batch and cache
// length, capturing it first when there is none (after one eager step). The step reads its input
// ids from e.next and the position from e.posBuf and advances both on the
// device, so one recording serves every position. OnOp sees the ops only
// while they are captured.
func (e *Engine) decodeCaptured(sc StepCapturer) error {
	key := graphKey{batch: e.batch, maxSeq: e.maxSeq, slots: e.plan.Slots(), tabled: e.tabled}
	step := e.graphs.get(key)
	if step == nil && !e.graphs.ranEager(key) {
		// The first step of a key runs eagerly, so that every kernel is
		// loaded before any capture; the next one is captured.
		return e.forward(e.next, false)
	}
	if step == nil {
		if err := sc.BeginCapture(); err != nil {
			return err
		}
		pos, lens, decoded := e.pos, slices.Clone(e.lens), e.decoded
		fwdErr := e.forward(e.next, false)
		// Nothing ran yet: the launch below advances the host's view.
		e.pos, e.decoded = pos, decoded
		copy(e.lens, lens)
		captured, endErr := sc.EndCapture()
		if err := errors.Join(fwdErr, endErr); err != nil {
			if captured != nil {
				err = errors.Join(err, captured.Destroy())
			}
			return fmt.Errorf("capture: %w", err)
		}
		e.graphs.put(key, captured)
		step = captured
	}
	if err := step.Launch(); err != nil {
		return err
	}
	e.advanceHost(false)
	return nil
}

// advanceHost moves the host's view past a step: each sequence's prompt
// after the prefill, one token after a decode step.
func (e *Engine) advanceHost(prefill bool) {
	for b := range e.lens {
		if prefill {
			e.lens[b] += e.seqs[b].Prompt
		} else {
			e.lens[b]++
		}
	}
	if prefill {
		e.pos += e.inputLen
	} else {
		e.pos++
		e.decoded++
	}
}

// Position is the number of tokens in the cache of every sequence of a
// uniform batch (the first sequence's of a ragged one: Lengths).
func (e *Engine) Position() int {
	if len(e.lens) == 0 {
		return 0
	}
	return e.lens[0]
}

// Lengths is the number of tokens in each sequence's cache.
func (e *Engine) Lengths() []int { return slices.Clone(e.lens) }

// Tabled reports whether the run's steps go through the block table.
func (e *Engine) Tabled() bool { return e.tabled }

// Plan is the run's cache geometry and block table.
func (e *Engine) Plan() KVPlan { return e.plan }

// shape is the attention shape of the prefill or the next decode step.
func (e *Engine) shape(prefill bool) AttnShape { return e.shapeAfter(prefill, e.lens) }

// shapeAfter is the attention shape of the prefill or a decode step once
// sequence b holds lens[b] tokens.
func (e *Engine) shapeAfter(prefill bool, lens []int) AttnShape {
	s := AttnShape{Batch: e.batch, SeqLen: 1, StartPos: e.pos, Heads: e.tp.Heads,
		KVHeads: e.tp.KVHeads, HeadDim: e.cfg.HeadDim, MaxSeq: e.maxSeq, Cache: e.kv.DType}
	if prefill {
		s.SeqLen = e.inputLen
	}
	if !e.tabled {
		return s
	}
	s.PageSize, s.NumPages, s.MaxPages, s.Paged = e.plan.PageSize, e.plan.NumPages, e.plan.MaxPages, e.kv.Paged()
	s.QLens, s.SeqLens = make([]int, e.batch), make([]int, e.batch)
	s.SeqLen = 0
	for b := range e.batch {
		s.QLens[b] = 1
		if prefill {
			s.QLens[b] = e.seqs[b].Prompt
		}
		s.SeqLens[b] = lens[b] + s.QLens[b]
		s.SeqLen = max(s.SeqLen, s.QLens[b])
	}
	return s
}

// view is the cache view of the prefill or the decode steps.
func (e *Engine) view(prefill bool) KVView {
	if prefill {
		return e.prefillKV
	}
	return e.decodeKV
}

func (e *Engine) op(name string) {
	if e.OnOp != nil {
		e.OnOp(name)
	}
	if e.Ranges != nil {
		e.endOpRange()
		e.Ranges.Push(name)
		e.opRangeOpen = true
	}
}

// endOpRange closes the range of the last op, if one is open: each op's
// range runs to the next op's (as the breakdown's boundaries do).
func (e *Engine) endOpRange() {
	if e.opRangeOpen {
		e.Ranges.Pop()
		e.opRangeOpen = false
	}
}

// layerStep is one op of a decoder layer, labelled as OnOp sees it.
type layerStep struct {
	name string
	run  func(l int) error
	// skip, when set, leaves the op out of layer l (a projection of the
	// layer that the quantization's ignore list keeps in bf16 needs no
	// quantized input).
	skip func(l int) bool
}

// layerSteps are the ops of one decoder layer for shape s. A tensor-parallel
// rank runs its slices of the projections and attention (its Layout) and
// all-reduces the partial sums of o_proj and down_proj. Where the backend
// fuses silu_mul into gate_up_proj at s (GateUpFuser) and the weights are
// bf16, or runs a quantized model's FP8 products of s's rows in one op each
// (FP8Fuser: linear version 5), gate_up_proj is the fused op and there is
// no silu_mul step.
func (e *Engine) layerSteps(s AttnShape, kv KVView) []layerStep {
	c, be, w, a := e.cfg, e.be, e.w, &e.act
	T, h, inter := s.Tokens(), c.HiddenSize, e.tp.Inter
	qDim, qkvDim := e.tp.Heads*c.HeadDim, e.tp.QKVDim(c.HeadDim)
	eps := float32(c.RMSNormEps)
	steps := []layerStep{
		{name: "input_norm", run: func(l int) error {
			var add Buffer
			if l > 0 {
				add = a.down
			}
			return be.AddRMSNorm(a.normed, a.x, add, w.layers[l].inputNorm, T, h, eps)
		}},
	}
	steps = append(steps, e.projection("qkv_proj", a.qkv, a.normed, func(l int) linearWeight { return w.layers[l].qkv }, T, qkvDim, h)...)
	steps = append(steps, e.qkNormSteps(T)...)
	steps = append(steps, []layerStep{
		{name: "rope_kv_write", run: func(l int) error {
			return be.RopeKVWrite(a.q, e.kCache[l], e.vCache[l], a.qkv, w.invFreq, kv.Layer(e.kScale, e.vScale, l), s)
		}},
		{name: "attention", run: func(l int) error {
			return be.Attention(a.attn, a.q, e.kCache[l], e.vCache[l], kv.Layer(e.kScale, e.vScale, l), s)
		}},
	}...)
	steps = append(steps, e.projection("o_proj", a.o, a.attn, func(l int) linearWeight { return w.layers[l].o }, T, h, qDim)...)
	steps = append(steps, []layerStep{
		{name: "attn_all_reduce", run: func(int) error { return e.coll.AllReduceSum(a.o, T*h) }},
		{name: "post_attention_norm", run: func(l int) error {
			return be.AddRMSNorm(a.normed, a.x, a.o, w.layers[l].postNorm, T, h, eps)
		}},
	}...)
	steps = append(steps, e.projection("gate_up_proj", a.gateUp, a.normed, func(l int) linearWeight { return w.layers[l].gateUp }, T, 2*inter, h)...)
	steps = append(steps, layerStep{name: "silu_mul", run: func(l int) error { return be.SiluMul(a.act, a.gateUp, T, inter) }})
	steps = append(steps, e.projection("down_proj", a.down, a.act, func(l int) linearWeight { return w.layers[l].down }, T, h, inter)...)
	steps = append(steps, layerStep{name: "mlp_all_reduce", run: func(int) error { return e.coll.AllReduceSum(a.down, T*h) }})
	if e.coll == nil {
		steps = slices.DeleteFunc(steps, func(st layerStep) bool { return strings.HasSuffix(st.name, "_all_reduce") })
	}
	// Not for a quantized model: its gate_up weights may be FP8, a path of
	// their own (FP8Backend) that the bf16 kernel cannot run.
	if f, ok := be.(GateUpFuser); ok && e.cfg.Quantization == nil && f.FusesGateUp(T, inter, h) {
		// One op for both: SiLU·mul in the gate_up product's epilogue.
		for i := range steps {
			if steps[i].name == "gate_up_proj" {
				steps[i].run = func(l int) error { return f.LinearSiluMul(a.act, a.normed, w.layers[l].gateUp.w, T, inter, h) }
			}
		}
		steps = slices.DeleteFunc(steps, func(st layerStep) bool { return st.name == "silu_mul" })
	}
	steps = e.fuseFP8GateUp(steps, T, h, inter)
	return e.fuseNorms(e.fuseRopeAttention(steps, s, kv), s)
}

// qkNormSteps is the op between qkv_proj and rope_kv_write that Qwen's
// attention adds (Backend.QKNorm on the rank's heads): qk_norm, Qwen3's
// per-head RMSNorm of q and k (and a q/k/v bias if there were one);
// qkv_bias, Qwen2's bias alone. Llama has none.
func (e *Engine) qkNormSteps(T int) []layerStep {
	c, w, a := e.cfg, e.w, &e.act
	if !c.QKNorm && !c.QKVBias {
		return nil
	}
	name := "qk_norm"
	if !c.QKNorm {
		name = "qkv_bias"
	}
	eps := float32(c.RMSNormEps)
	return []layerStep{{name: name, run: func(l int) error {
		lw := w.layers[l]
		return e.be.QKNorm(a.qkv, lw.qkvBias, lw.qNorm, lw.kNorm, T, e.tp.Heads, e.tp.KVHeads, c.HeadDim, eps)
	}}}
}

// normFuser is the backend's NormLinearFuser when it fuses the residual add
// and RMSNorm into the projections of shape s: a decode step of a bf16
// model on one GPU (a tensor-parallel rank's o_proj and down_proj are
// partial sums until their all-reduce).
func (e *Engine) normFuser(s AttnShape) (NormLinearFuser, bool) {
	f, ok := e.be.(NormLinearFuser)
	if !ok || s.SeqLen != 1 || e.act.normParts == nil {
		return nil, false
	}
	return f, e.mayFuseNorms(f, s.Tokens())
}

// mayFuseNorms reports whether f fuses the norms into the projections of a
// decode step of rows rows here (one GPU, bf16 weights): the engine
// allocates the squared sums only then.
func (e *Engine) mayFuseNorms(f NormLinearFuser, rows int) bool {
	return e.coll == nil && e.cfg.Quantization == nil &&
		f.FusesNormLinear(rows, e.cfg.HiddenSize, e.tp.Heads*e.cfg.HeadDim, e.tp.Inter)
}

// fuseNorms makes o_proj and down_proj add into the residual stream and
// qkv_proj (past layer 0) and gate_up_proj normalise it, and drops the
// norms (but layer 0's input_norm) and silu_mul, where the backend fuses
// them at s (NormLinearFuser).
func (e *Engine) fuseNorms(steps []layerStep, s AttnShape) []layerStep {
	f, ok := e.normFuser(s)
	if !ok {
		return steps
	}
	c, w, a := e.cfg, e.w, &e.act
	T, h, inter, qDim := s.Tokens(), c.HiddenSize, e.tp.Inter, e.tp.Heads*c.HeadDim
	eps := float32(c.RMSNormEps)
	qkvDim := e.tp.QKVDim(c.HeadDim)
	for i := range steps {
		switch steps[i].name {
		case "input_norm":
			steps[i].skip = func(l int) bool { return l > 0 }
		case "qkv_proj":
			normed := steps[i].run // layer 0's: of input_norm's output
			steps[i].run = func(l int) error {
				if l == 0 {
					return normed(l)
				}
				return f.NormLinear(a.qkv, a.x, a.normParts, w.layers[l].inputNorm, w.layers[l].qkv.w, T, qkvDim, h, eps)
			}
		case "o_proj":
			steps[i].run = func(l int) error { return f.LinearResidual(a.x, a.normParts, a.attn, w.layers[l].o.w, T, h, qDim) }
		case "gate_up_proj":
			steps[i].run = func(l int) error {
				return f.NormLinearSiluMul(a.act, a.x, a.normParts, w.layers[l].postNorm, w.layers[l].gateUp.w, T, inter, h, eps)
			}
		case "down_proj":
			steps[i].run = func(l int) error { return f.LinearResidual(a.x, a.normParts, a.act, w.layers[l].down.w, T, h, inter) }
		}
	}
	return slices.DeleteFunc(steps, func(st layerStep) bool {
		return st.name == "post_attention_norm" || st.name == "silu_mul"
	})
}

// fuseRopeAttention makes the attention step rope_kv_write and attention in
// one op, and drops rope_kv_write, where the backend fuses them at s
// (RopeAttentionFuser: a decode step under attn_decode version 5).
func (e *Engine) fuseRopeAttention(steps []layerStep, s AttnShape, kv KVView) []layerStep {
	f, ok := e.be.(RopeAttentionFuser)
	if !ok || !f.FusesRopeAttention(s) {
		return steps
	}
	a, w := &e.act, e.w
	for i := range steps {
		if steps[i].name == "attention" {
			steps[i].run = func(l int) error {
				return f.RopeAttention(a.attn, a.qkv, e.kCache[l], e.vCache[l], w.invFreq, kv.Layer(e.kScale, e.vScale, l), s)
			}
		}
	}
	return slices.DeleteFunc(steps, func(st layerStep) bool { return st.name == "rope_kv_write" })
}

// projection is the steps of one projection, out[m,n] = x[m,k]·wᵀ: for
// a quantized model's FP8 weights, NAME_quant (x to E4M3 with its scale)
// before NAME (the FP8 GEMM); Backend.Linear for bf16 weights.
func (e *Engine) projection(name string, out, x Buffer, lw func(l int) linearWeight, m, n, k int) []layerStep {
	if f, ok := e.fp8Fuser(m, k); ok {
		// One op: the activation's quantization in the FP8 kernel's prologue.
		return []layerStep{{name: name, run: func(l int) error {
			w := lw(l)
			if !w.fp8() {
				return e.be.Linear(out, x, w.w, m, n, k)
			}
			return f.LinearFP8Act(out, x, w.inputScale, w.w, w.scale, m, n, k, w.act, w.perChannel, false)
		}}}
	}
	var steps []layerStep
	if e.cfg.Quantization != nil {
		steps = append(steps, layerStep{name: name + "_quant", skip: func(l int) bool { return !lw(l).fp8() },
			run: func(l int) error {
				w := lw(l)
				return e.fp8.QuantizeFP8(e.act.xq, e.xScaleOf(w), x, m, k, w.act)
			}})
	}
	return append(steps, layerStep{name: name, run: func(l int) error {
		w := lw(l)
		if !w.fp8() {
			return e.be.Linear(out, x, w.w, m, n, k)
		}
		return e.fp8.LinearFP8(out, e.act.xq, e.xScaleOf(w), w.w, w.scale, m, n, k, w.act == QuantDynamicToken, w.perChannel)
	}})
}

// fp8Fuser is the backend's FP8Fuser when the model is quantized and the
// backend runs its FP8 products of m rows over k in one op each.
func (e *Engine) fp8Fuser(m, k int) (FP8Fuser, bool) {
	f, ok := e.be.(FP8Fuser)
	if !ok || e.cfg.Quantization == nil || !f.FusesFP8(m, k) {
		return nil, false
	}
	return f, true
}

// fuseFP8GateUp makes gate_up_proj of a quantized model gate_up_proj and
// silu_mul in one op, and drops silu_mul, where the backend's FP8Fuser
// takes T rows over h: FP8 weights through its fused kernel, a layer whose
// gate_up the quantization ignores (bf16) through Linear and SiluMul.
func (e *Engine) fuseFP8GateUp(steps []layerStep, T, h, inter int) []layerStep {
	f, ok := e.fp8Fuser(T, h)
	if !ok {
		return steps
	}
	a, w, be := &e.act, e.w, e.be
	for i := range steps {
		if steps[i].name == "gate_up_proj" {
			steps[i].run = func(l int) error {
				gu := w.layers[l].gateUp
				if gu.fp8() {
					return f.LinearFP8Act(a.act, a.normed, gu.inputScale, gu.w, gu.scale, T, inter, h, gu.act, gu.perChannel, true)
				}
				if err := be.Linear(a.gateUp, a.normed, gu.w, T, 2*inter, h); err != nil {
					return err
				}
				return be.SiluMul(a.act, a.gateUp, T, inter)
			}
		}
	}
	return slices.DeleteFunc(steps, func(st layerStep) bool { return st.name == "silu_mul" })
}

// xScaleOf is where w's activation scale lives: its static input scale, or
// the activations' scale buffer that a dynamic quantization writes.
func (e *Engine) xScaleOf(w linearWeight) Buffer {
	if w.act == QuantStatic {
		return w.inputScale
	}
	return e.act.xScale
}

// forward runs every layer over the prefill's or a decode step's new tokens,
// whose ids are in ids, then writes each sequence's greedy next token to
// e.next.
func (e *Engine) forward(ids Buffer, prefill bool) error {
	c, be, w, a := e.cfg, e.be, e.w, &e.act
	s, kv := e.shape(prefill), e.view(prefill)
	defer e.endOpRange()
	e.op("embed")
	if err := be.Embed(a.x, w.embed, ids, s.Tokens(), c.HiddenSize); err != nil {
		return fmt.Errorf("embed: %w", err)
	}
	steps := e.layerSteps(s, kv)
	for l := 0; l < c.NumHiddenLayers; l++ {
		for _, st := range steps {
			if st.skip != nil && st.skip(l) {
				continue
			}
			e.op(st.name)
			if err := st.run(l); err != nil {
				return fmt.Errorf("layer %d %s: %w", l, st.name, err)
			}
		}
	}
	if err := e.head(s, kv); err != nil {
		return err
	}
	if err := e.advance(s, kv, prefill); err != nil {
		return err
	}
	e.advanceHost(prefill)
	return nil
}

// advance moves the device's view past the step: the start position of a
// uniform contiguous run; a tabled decode step's view one token on (the
// prefill's is its own, and the first decode step's was uploaded at Begin).
func (e *Engine) advance(s AttnShape, kv KVView, prefill bool) error {
	if e.tabled && prefill {
		return nil
	}
	e.op("advance_position")
	if e.tabled {
		if err := e.be.AdvanceKV(kv, s); err != nil {
			return fmt.Errorf("advance the cache view: %w", err)
		}
		return nil
	}
	if err := e.be.AddI32(e.posBuf, s.SeqLen); err != nil {
		return fmt.Errorf("advance position: %w", err)
	}
	return nil
}

// head computes each sequence's logits from its last token and its greedy
// next token into e.next.
func (e *Engine) head(s AttnShape, kv KVView) error {
	c, be, w, a := e.cfg, e.be, e.w, &e.act
	h := c.HiddenSize
	// Only each sequence's last token needs logits: gather it before the
	// final norm so the norm and lm_head run on batch rows, not every token.
	x, down := a.x, a.down
	if s.Tokens() != s.Batch {
		gather := func(out, in Buffer) error {
			if s.Ragged() {
				return be.GatherLastRagged(out, in, kv.QueryStart, s.Batch, h)
			}
			return be.GatherLast(out, in, s.Batch, s.SeqLen, h)
		}
		e.op("gather_last")
		if err := gather(a.lastX, a.x); err != nil {
			return fmt.Errorf("gather last residual: %w", err)
		}
		e.op("gather_last")
		if err := gather(a.lastDown, a.down); err != nil {
			return fmt.Errorf("gather last down: %w", err)
		}
		x, down = a.lastX, a.lastDown
	}
	if f, ok := e.normFuser(s); ok {
		// The last down_proj added into the residual stream: lm_head
		// normalises it in its prologue.
		e.op("lm_head")
		if err := f.NormLinear(a.logits, a.x, a.normParts, w.finalNorm, w.lmHead, s.Batch, e.tp.Vocab, h, float32(c.RMSNormEps)); err != nil {
			return fmt.Errorf("lm_head: %w", err)
		}
		return e.argmax(s)
	}
	e.op("final_norm")
	if err := be.AddRMSNorm(a.lastNormed, x, down, w.finalNorm, s.Batch, h, float32(c.RMSNormEps)); err != nil {
		return fmt.Errorf("final norm: %w", err)
	}
	e.op("lm_head")
	if err := be.Linear(a.logits, a.lastNormed, w.lmHead, s.Batch, e.tp.Vocab, h); err != nil {
		return fmt.Errorf("lm_head: %w", err)
	}
	return e.argmax(s)
}

// argmax writes each sequence's greedy next token to e.next.
func (e *Engine) argmax(s AttnShape) error {
	be, a := e.be, &e.act
	e.op("argmax")
	if e.coll == nil {
		if err := be.Argmax(e.next, a.logits, s.Batch, e.tp.Vocab); err != nil {
			return fmt.Errorf("argmax: %w", err)
		}
		return nil
	}
	return e.shardedArgmax(s.Batch)
}

// shardedArgmax combines the ranks' argmaxes of their vocabulary slices: a
// key per row and rank, the largest over the ranks, its index.
func (e *Engine) shardedArgmax(batch int) error {
	if err := e.coll.ArgmaxKeys(e.keys, e.act.logits, batch, e.tp.Vocab, e.tp.VocabStart); err != nil {
		return fmt.Errorf("argmax keys: %w", err)
	}
	e.op("argmax_all_reduce")
	if err := e.coll.AllReduceMaxKeys(e.keys, batch); err != nil {
		return fmt.Errorf("argmax all-reduce: %w", err)
	}
	e.op("argmax")
	if err := e.coll.KeyIndex(e.next, e.keys, batch); err != nil {
		return fmt.Errorf("argmax key index: %w", err)
	}
	return nil
}

// NextTokens waits for the backend and returns each sequence's latest greedy token.
func (e *Engine) NextTokens() ([]int32, error) {
	if !e.prefilled {
		return nil, errors.New("next tokens: nothing generated yet")
	}
	out := make([]int32, e.batch)
	if err := e.be.DownloadI32(e.next, out); err != nil {
		return nil, fmt.Errorf("download next ids: %w", err)
	}
	return out, nil
}

// ForceNextTokens replaces each sequence's greedy token with ids (one per
// sequence) as the input of the next decode step: teacher forcing, so that
// two engines compared step by step read the same tokens even where a near
// tie would make their argmaxes part.
func (e *Engine) ForceNextTokens(ids []int32) error {
	if !e.prefilled {
		return errors.New("force next tokens: prefill first")
	}
	if len(ids) != e.batch {
		return fmt.Errorf("force next tokens: %d ids for batch %d", len(ids), e.batch)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= e.cfg.VocabSize {
			return fmt.Errorf("force next tokens: id %d of sequence %d outside the vocabulary [0, %d)", id, i, e.cfg.VocabSize)
		}
	}
	if err := e.be.UploadI32(e.next, ids); err != nil {
		return fmt.Errorf("force next tokens: upload: %w", err)
	}
	return nil
}

// Logits waits for the backend and returns the last step's logits,
// [batch][vocab] as float32 (widened from the bf16 the model produces); a
// tensor-parallel rank's are its vocabulary slice (Layout().Vocab wide).
func (e *Engine) Logits() ([][]float32, error) {
	if !e.prefilled {
		return nil, errors.New("logits: nothing generated yet")
	}
	v := e.tp.Vocab
	raw := make([]uint16, e.batch*v)
	if err := e.be.DownloadBF16(e.act.logits, raw); err != nil {
		return nil, fmt.Errorf("download logits: %w", err)
	}
	out := make([][]float32, e.batch)
	for b := range out {
		out[b] = make([]float32, v)
		for j := range out[b] {
			out[b][j] = ref.BF16ToF32(raw[b*v+j])
		}
	}
	return out, nil
}

// Sync waits for all enqueued work.
func (e *Engine) Sync() error { return e.be.Sync() }

// NewEvent makes a backend event for timed regions.
func (e *Engine) NewEvent() (Event, error) { return e.be.NewEvent() }

// Elapsed is the backend time between two recorded events.
func (e *Engine) Elapsed(start, end Event) (time.Duration, error) { return e.be.Elapsed(start, end) }

package runner

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"stepbench/kernels/ref"
)

// The cost model counts, for every op of a step, its minimal FLOPs and
// bytes: each input read once and each output written once, from shapes
// alone (what a perfect kernel must move). A step's cost is the sum over its
// ops. It is computed by running the real forward pass against costBackend,
// a Backend that only counts, so the model can never drift from the code.
//
// Per op (T tokens = batch × new tokens, bf16 = 2 bytes, i32/f32 = 4):
//
//	embed          bytes: T ids + T×hidden read + T×hidden written;         FLOPs 0
//	add_rmsnorm    bytes: residual (+add, + residual write-back) + weight + out;
//	               FLOPs: 4 per element (+1 with the add): square, sum, scale, weight
//	linear         bytes: (m×k + n×k + m×n)×2;                               FLOPs 2mnk
//	               (cached elements: 2 bytes for bf16, 1 for an FP8 cache, whose
//	               K and V scales, 4 bytes per KV head each, are read too)
//	qk_norm        (Qwen2's q/k/v bias, Qwen3's q/k norm, in one pass over the row)
//	               bytes: the q/k/v columns it changes read and written (all of them
//	               with a bias, else q and k) + the bias and the two [head_dim] norm
//	               weights; FLOPs: 1 per biased element, 4 per normalised one
//	rope_kv_write  bytes: qkv read, q written, k and v written to the cache, inv_freq;
//	               FLOPs: 3 per rotated element of q and k
//	attention      bytes: q read + out written + each sequence's K and V read once
//	               (its length after the step: startPos+seqLen, or its own in a ragged
//	               batch; the block table's page ids are left out); FLOPs: 4×head_dim per
//	               (query head, visible key), query i of q new ones in a sequence of L
//	               seeing L−q+i+1 keys
//	advance_kv     bytes: per sequence its position and length read and written, a
//	               table entry read, its slot written (28), and the start position (8)
//	gather_last    (ragged) as gather_last, and the batch+1 query starts read
//	silu_mul       bytes: gate and up read, out written; FLOPs 5 per output (silu 4, mul 1)
//	gather_last    bytes: batch×width read and written;                      FLOPs 0
//	argmax         bytes: rows×vocab read, rows ids written;                 FLOPs: rows×vocab compares
//	add_i32        bytes: 8 per element;                                     FLOPs 0
//
// A quantized model's FP8 projections (FP8 FLOPs are counted apart, in
// FP8FLOPs, since tensor cores run them at twice the bf16 rate):
//
//	NAME_quant     bytes: m×k×2 read + m×k written + its scales (4 each);   FLOPs 3 per element
//	               (a dynamic per-tensor scale's second read of x is not a minimum: left out)
//	NAME (FP8)     bytes: m×k + n×k + m×n×2 + the scales (4 each);          FLOPs 2mnk, all FP8
//	               (weight bytes n×k + the weight scales: 1 byte per parameter)
//
// A tensor-parallel rank (N ranks, PrefillCostTP, DecodeCostTP) costs its own
// slices of the ops above, and:
//
//	all-reduce     of n elements of e bytes, in place: bytes 2·n·e (read and
//	               written once); FLOPs (N−1)/N·n (a ring's reduce-scatter adds
//	               N−1 chunks of n/N); comm bytes 2(N−1)/N·n·e, what a ring
//	               all-reduce sends (and receives) per GPU over the interconnect
//	               (nothing for N = 1)
//	argmax keys    bytes: rows×vocab slice read, 8 per row written; FLOPs one compare per logit
//	key index      bytes: 8 per row read, 4 written;                         FLOPs 0

// The two kinds of step; every package that names a phase uses these.
const (
	PhasePrefill = "prefill"
	PhaseDecode  = "decode"
)

// OpCost is what one op must compute and move at minimum.
type OpCost struct {
	Op    string  `json:"op"`
	Calls int     `json:"calls"`
	FLOPs float64 `json:"flops"`
	// FP8FLOPs is the part of FLOPs that FP8 tensor cores run (FP8 GEMMs).
	FP8FLOPs float64 `json:"fp8_flops,omitempty"`
	Bytes    float64 `json:"bytes"`
	// CommBytes is what one GPU sends over the interconnect (collectives of
	// tensor parallelism only).
	CommBytes float64 `json:"comm_bytes,omitempty"`
}

// StepCost is a whole step: the sum of its ops.
type StepCost struct {
	Phase    string `json:"phase"` // PhasePrefill or PhaseDecode
	Batch    int    `json:"batch"`
	SeqLen   int    `json:"seq_len"`   // new tokens per sequence
	StartPos int    `json:"start_pos"` // cached tokens per sequence before the step
	// Tokens and KVTokens, for a ragged batch (SeqLen is then its most new
	// tokens, StartPos 0): the step's new tokens, and the tokens in its
	// caches after the step (the sum of the sequences' lengths).
	Tokens      int     `json:"tokens,omitempty"`
	KVTokens    int     `json:"kv_tokens,omitempty"`
	FLOPs       float64 `json:"flops"`
	FP8FLOPs    float64 `json:"fp8_flops,omitempty"` // the part of FLOPs at the FP8 tensor-core rate
	Bytes       float64 `json:"bytes"`
	WeightBytes float64 `json:"weight_bytes"` // the part of Bytes that is parameters
	// TPSize is the tensor-parallel size the step is costed for (1: one GPU);
	// FLOPs, Bytes and WeightBytes are then one rank's (rank 0, whose
	// vocabulary slice is the largest), CommBytes what it sends to the others.
	TPSize    int     `json:"tp_size,omitempty"`
	CommBytes float64 `json:"comm_bytes,omitempty"`
	// CommCalls counts the collectives (each pays the link's latency,
	// which no floor includes).
	CommCalls int      `json:"comm_calls,omitempty"`
	Ops       []OpCost `json:"ops"`

	calls []OpCost // every backend call of the step, in order (CallCosts)
}

// CallCosts are the costs of each call of op in the step, in the order the
// forward pass made them (Calls 1 each): what one launch of the op's kernel
// must move and compute at the shapes of that call.
func (c StepCost) CallCosts(op string) []OpCost {
	var out []OpCost
	for _, call := range c.calls {
		if call.Op == op {
			out = append(out, call)
		}
	}
	return out
}

// CostOf is the cost model applied to whatever backend calls run makes on
// the backend it is given, all labelled op: the total with Calls the number
// of calls. It allocates nothing (the counting backend's buffers hold only
// a size), so a caller can cost its own launch of an op at any shape by
// making the same calls it makes on a real backend.
func CostOf(op string, run func(be Backend) error) (OpCost, error) {
	cb := &costBackend{ops: map[string]*OpCost{}, label: op, counting: true}
	if err := run(cb); err != nil {
		return OpCost{}, fmt.Errorf("cost of %s: %w", op, err)
	}
	if oc := cb.ops[op]; oc != nil {
		return *oc, nil
	}
	return OpCost{Op: op}, nil
}

// costLens is a step's SeqLen and StartPos (StepCost): a uniform batch's
// new tokens and cached tokens per sequence, a ragged one's most new tokens
// and 0.
func costLens(seqs []SeqSpec, decodeLens []int) (seqLen, startPos int) {
	if decodeLens != nil {
		seqLen = 1
		if Uniform(seqs) {
			startPos = decodeLens[0]
		}
		return seqLen, startPos
	}
	for _, s := range seqs {
		seqLen = max(seqLen, s.Prompt)
	}
	return seqLen, 0
}

// Intensity is FLOPs per byte.
func (c StepCost) Intensity() float64 {
	if c.Bytes == 0 {
		return 0
	}
	return c.FLOPs / c.Bytes
}

// PrefillCost is the cost of prefilling batch prompts of inputLen tokens.
func PrefillCost(cfg Config, batch, inputLen int) (StepCost, error) {
	return PrefillCostTP(cfg, 0, batch, inputLen)
}

// DecodeCost is the cost of one decode step whose sequences already hold
// startPos tokens (the step attends over startPos+1 positions).
func DecodeCost(cfg Config, batch, startPos int) (StepCost, error) {
	return DecodeCostTP(cfg, 0, batch, startPos)
}

// PrefillCostTP is PrefillCost for one rank of tpSize tensor-parallel ranks
// (rank 0, a Group's), all-reduces included.
func PrefillCostTP(cfg Config, tpSize, batch, inputLen int) (StepCost, error) {
	if batch < 1 || inputLen < 1 {
		return StepCost{}, fmt.Errorf("%s cost: batch %d and input length %d must be positive", PhasePrefill, batch, inputLen)
	}
	return PrefillCostSeqs(cfg, tpSize, uniformSeqs(batch, inputLen), KVOptions{})
}

// DecodeCostTP is DecodeCost for one rank of tpSize tensor-parallel ranks.
func DecodeCostTP(cfg Config, tpSize, batch, startPos int) (StepCost, error) {
	if batch < 1 || startPos < 1 {
		return StepCost{}, fmt.Errorf("%s cost: batch %d and input length %d must be positive", PhaseDecode, batch, startPos)
	}
	lens := make([]int, batch)
	for b := range lens {
		lens[b] = startPos
	}
	return DecodeCostSeqs(cfg, tpSize, lens, KVOptions{})
}

func uniformSeqs(batch, inputLen int) []SeqSpec {
	seqs := make([]SeqSpec, batch)
	for b := range seqs {
		seqs[b].Prompt = inputLen
	}
	return seqs
}

// PrefillCostSeqs is the cost of the prefill of seqs (each sequence's
// Prompt tokens over its Context) with the cache laid out as kv, on the
// whole model (tpSize 0) or rank 0 of tpSize ranks.
func PrefillCostSeqs(cfg Config, tpSize int, seqs []SeqSpec, kv KVOptions) (StepCost, error) {
	return stepCost(cfg, tpSize, PhasePrefill, seqs, nil, kv)
}

// DecodeCostSeqs is the cost of one decode step at which sequence b
// already holds lens[b] tokens (it attends over lens[b]+1 positions).
func DecodeCostSeqs(cfg Config, tpSize int, lens []int, kv KVOptions) (StepCost, error) {
	seqs := make([]SeqSpec, len(lens))
	for b, n := range lens {
		seqs[b].Prompt = n
	}
	return stepCost(cfg, tpSize, PhaseDecode, seqs, lens, kv)
}

// DecodeCostAfter is the cost of decode step `step` (0: the first) of a run
// of seqs laid out as kv: sequence b then holds Context+Prompt+step tokens.
// The run is begun with seqs themselves, so the step goes through the block
// table exactly when the engine's does (a uniform batch over synthetic
// contexts does; DecodeCostSeqs's uniform lengths do not).
func DecodeCostAfter(cfg Config, tpSize int, seqs []SeqSpec, step int, kv KVOptions) (StepCost, error) {
	if step < 0 {
		return StepCost{}, fmt.Errorf("%s cost: step %d: want 0 or more", PhaseDecode, step)
	}
	lens := make([]int, len(seqs))
	for b, s := range seqs {
		lens[b] = s.Context + s.Prompt + step
	}
	return stepCost(cfg, tpSize, PhaseDecode, seqs, lens, kv)
}

// stepCost runs one step against the counting backend: on the whole model
// for tpSize 0, else on rank 0 of tpSize ranks. The prefill of seqs, or,
// with decodeLens, the decode step after sequence b holds decodeLens[b].
func stepCost(cfg Config, tpSize int, phase string, seqs []SeqSpec, decodeLens []int, kv KVOptions) (StepCost, error) {
	if len(seqs) < 1 {
		return StepCost{}, fmt.Errorf("%s cost: no sequences", phase)
	}
	for b, s := range seqs {
		if s.Prompt < 1 || s.Context < 0 {
			return StepCost{}, fmt.Errorf("%s cost: sequence %d: prompt %d and context %d: want a positive prompt", phase, b, s.Prompt, s.Context)
		}
	}
	cb := &costBackend{ops: map[string]*OpCost{}, tpSize: max(tpSize, 1)}
	err := runStep(cfg, cb, tpSize, seqs, decodeLens, kv, func(op string) {
		cb.label = op
		cb.counting = true
	})
	if err != nil {
		return StepCost{}, fmt.Errorf("%s cost: %w", phase, err)
	}
	sc := StepCost{Phase: phase, Batch: len(seqs), WeightBytes: cb.weightBytes, calls: cb.calls}
	sc.SeqLen, sc.StartPos = costLens(seqs, decodeLens)
	if !Uniform(seqs) {
		sc.Tokens, sc.KVTokens = cb.tokens, cb.kvTokens
	}
	if tpSize > 0 {
		sc.TPSize = tpSize
	}
	for _, oc := range cb.ops {
		sc.Ops = append(sc.Ops, *oc)
		sc.FLOPs += oc.FLOPs
		sc.FP8FLOPs += oc.FP8FLOPs
		sc.Bytes += oc.Bytes
		sc.CommBytes += oc.CommBytes
	}
	for _, call := range cb.calls {
		if call.CommBytes > 0 {
			sc.CommCalls++
		}
	}
	// Largest first; equal costs by name, so that the order (and every
	// report listing it) does not depend on map iteration.
	sort.Slice(sc.Ops, func(i, j int) bool {
		a, b := sc.Ops[i].Bytes+sc.Ops[i].FLOPs, sc.Ops[j].Bytes+sc.Ops[j].FLOPs
		return a > b || (a == b && sc.Ops[i].Op < sc.Ops[j].Op)
	})
	return sc, nil
}

// TraceStep runs one step of cfg on be as stepCost runs it on the cost
// model's counting backend: the prefill of seqs, or, with decodeLens, the
// decode step after sequence b holds decodeLens[b] (one GPU, no weights
// loaded: be's buffers are filled by FillDummy, no prompt is uploaded).
// onOp is called before every op of the step with its name (Engine.OnOp),
// not before the engine's own setup (weights, buffers, views). The
// estimate runs it on the cuda backend's planner (runner/gpu.NewPlanner),
// so that its launches are the backend's.
func TraceStep(cfg Config, be Backend, seqs []SeqSpec, decodeLens []int, kv KVOptions, onOp func(op string)) error {
	if len(seqs) < 1 {
		return errors.New("trace: no sequences")
	}
	if decodeLens != nil && len(decodeLens) != len(seqs) {
		return fmt.Errorf("trace: %d decode lengths for %d sequences", len(decodeLens), len(seqs))
	}
	return runStep(cfg, be, 0, seqs, decodeLens, kv, onOp)
}

// runStep makes an engine of cfg on be (rank 0 of tpSize ranks, or the
// whole model for 0), begins seqs and runs the step, telling onOp each op.
func runStep(cfg Config, be Backend, tpSize int, seqs []SeqSpec, decodeLens []int, kv KVOptions, onOp func(op string)) error {
	var e *Engine
	var err error
	if tpSize == 0 {
		e, err = NewEngine(cfg, be, WeightSource{}, nil)
	} else {
		var lay TPLayout
		if lay, err = cfg.TPLayout(0, tpSize); err == nil {
			e, err = NewEngineRank(cfg, lay, be, WeightSource{}, nil)
		}
	}
	if err != nil {
		return err
	}
	if err := e.SetKVOptions(kv); err != nil {
		return err
	}
	outLen := 1
	if decodeLens != nil {
		outLen = 2
	}
	// No prompt ids: the counting backend uploads nothing, and batch ×
	// input ids (up to 2^31, 8 GiB) were allocated per cost evaluation.
	e.costOnly = true
	if err := e.BeginSeqs(seqs, outLen, nil); err != nil {
		return err
	}
	e.OnOp = onOp
	if decodeLens == nil {
		return e.forward(e.ids, true)
	}
	copy(e.lens, decodeLens)
	e.pos, e.prefilled = decodeLens[0], true
	return e.forward(e.next, false)
}

// costBackend counts instead of computing. Buffers carry only a size.
type costBackend struct {
	ops         map[string]*OpCost
	calls       []OpCost
	label       string
	counting    bool
	weightBytes float64
	tpSize      int // ranks of the collectives (1 outside tensor parallelism)
	// tokens and kvTokens are the last attention call's new tokens and
	// cached tokens after it (StepCost.Tokens, KVTokens).
	tokens, kvTokens int
}

var (
	_ Collectives = (*costBackend)(nil)
	_ FP8Backend  = (*costBackend)(nil)
)

type costBuffer struct {
	dt DType
	n  int
}

func (b *costBuffer) DType() DType { return b.dt }
func (b *costBuffer) Len() int     { return b.n }

// add counts one call of the current op; weightBytes is the part of bytes
// that reads parameters.
func (c *costBackend) add(flops, bytes, weightBytes float64) { c.addComm(flops, bytes, weightBytes, 0) }

// addComm is add with the bytes the call sends over the interconnect.
func (c *costBackend) addComm(flops, bytes, weightBytes, commBytes float64) {
	c.addOp(OpCost{FLOPs: flops, Bytes: bytes, CommBytes: commBytes}, weightBytes)
}

// addOp counts one call of the current op costing call (its Op and Calls
// are set here).
func (c *costBackend) addOp(call OpCost, weightBytes float64) {
	if !c.counting {
		return
	}
	c.weightBytes += weightBytes
	oc := c.ops[c.label]
	if oc == nil {
		oc = &OpCost{Op: c.label}
		c.ops[c.label] = oc
	}
	oc.Calls++
	oc.FLOPs += call.FLOPs
	oc.FP8FLOPs += call.FP8FLOPs
	oc.Bytes += call.Bytes
	oc.CommBytes += call.CommBytes
	call.Op, call.Calls = c.label, 1
	c.calls = append(c.calls, call)
}

func (c *costBackend) EnableFP8() error                     { return nil }
func (c *costBackend) UploadFP8(Buffer, int, []uint8) error { return nil }
func (c *costBackend) DownloadFP8(Buffer, []uint8) error    { return nil }
func (c *costBackend) DownloadF32(Buffer, []float32) error  { return nil }

func (c *costBackend) QuantizeFP8(_, _, _ Buffer, rows, cols int, mode ActQuant) error {
	n := float64(rows) * float64(cols)
	scales := 1.0
	if mode == QuantDynamicToken {
		scales = float64(rows)
	}
	c.add(3*n, 3*n+4*scales, 0)
	return nil
}

func (c *costBackend) LinearFP8(_, _, _, _, _ Buffer, m, n, k int, xPerRow, wPerRow bool) error {
	M, N, K := float64(m), float64(n), float64(k)
	xScales, wScales := 1.0, 1.0
	if xPerRow {
		xScales = M
	}
	if wPerRow {
		wScales = N
	}
	weight := N*K + 4*wScales
	flops := 2 * M * N * K
	c.addOp(OpCost{FLOPs: flops, FP8FLOPs: flops, Bytes: M*K + weight + 2*M*N + 4*xScales}, weight)
	return nil
}

// allReduce counts an in-place all-reduce of n elements of elemBytes each.
func (c *costBackend) allReduce(n, elemBytes float64) {
	N := float64(c.tpSize)
	if c.tpSize <= 1 {
		c.addComm(0, 0, 0, 0) // one rank: nothing to reduce or send
		return
	}
	c.addComm((N-1)/N*n, 2*n*elemBytes, 0, 2*(N-1)/N*n*elemBytes)
}

func (c *costBackend) AllReduceSum(_ Buffer, n int) error {
	c.allReduce(float64(n), 2)
	return nil
}

func (c *costBackend) ArgmaxKeys(_, _ Buffer, rows, vocab, _ int) error {
	c.add(float64(rows*vocab), 2*float64(rows*vocab)+8*float64(rows), 0)
	return nil
}

func (c *costBackend) AllReduceMaxKeys(_ Buffer, rows int) error {
	c.allReduce(float64(rows), 8)
	return nil
}

func (c *costBackend) KeyIndex(_, _ Buffer, rows int) error {
	c.add(0, 12*float64(rows), 0)
	return nil
}

func (c *costBackend) Name() string { return "cost" }
func (c *costBackend) Alloc(dt DType, n int) (Buffer, error) {
	return &costBuffer{dt: dt, n: n}, nil
}
func (c *costBackend) Free(Buffer) error                      { return nil }
func (c *costBackend) UploadBF16(Buffer, int, []uint16) error { return nil }
func (c *costBackend) UploadF32(Buffer, []float32) error      { return nil }
func (c *costBackend) UploadI32(Buffer, []int32) error        { return nil }
func (c *costBackend) UploadI64(Buffer, []int64) error        { return nil }
func (c *costBackend) DownloadBF16(Buffer, []uint16) error    { return nil }
func (c *costBackend) DownloadI32(Buffer, []int32) error      { return nil }
func (c *costBackend) FillDummy(Buffer, int, int, uint64, string, uint64, ref.DummyKind) error {
	return nil
}
func (c *costBackend) FillDummyRows(Buffer, int, int, int, uint64, string, uint64, uint64, ref.DummyKind) error {
	return nil
}

func (c *costBackend) Embed(_, _, _ Buffer, tokens, hidden int) error {
	c.add(0, float64(4*tokens+2*2*tokens*hidden), 0)
	return nil
}

func (c *costBackend) AddRMSNorm(_, _, add, _ Buffer, rows, hidden int, _ float32) error {
	n := float64(rows * hidden)
	flops, bytes := 4*n, 2*(2*n+float64(hidden)) // residual read, out written, weight read
	if add != nil {
		flops += n
		bytes += 2 * 2 * n // add read, residual written back
	}
	c.add(flops, bytes, 2*float64(hidden))
	return nil
}

func (c *costBackend) Linear(_, _, w Buffer, m, n, k int) error {
	c.add(2*float64(m)*float64(n)*float64(k), 2*(float64(m)*float64(k)+float64(n)*float64(k)+float64(m)*float64(n)),
		2*float64(n)*float64(k))
	return nil
}

func (c *costBackend) QKNorm(_, bias, qNorm, kNorm Buffer, tokens, heads, kvHeads, headDim int, _ float32) error {
	T, D := float64(tokens), float64(headDim)
	var flops, bytes, weight float64
	if bias != nil { // every column read, the bias added, written back
		n := float64(heads+2*kvHeads) * D
		flops, bytes, weight = flops+T*n, bytes+2*2*T*n, weight+2*n
	}
	for _, norm := range []struct {
		w     Buffer
		heads int
	}{{qNorm, heads}, {kNorm, kvHeads}} {
		if norm.w == nil {
			continue
		}
		n := T * float64(norm.heads) * D
		flops += 4 * n // square, sum, scale, weight, as add_rmsnorm's
		weight += 2 * D
		if bias == nil { // else already counted: one pass reads and writes the row
			bytes += 2 * 2 * n
		}
	}
	c.add(flops, bytes+weight, weight)
	return nil
}

func (c *costBackend) RopeKVWrite(_, _, _, _, _ Buffer, _ KVView, s AttnShape) error {
	T, D := float64(s.Tokens()), float64(s.HeadDim)
	H, KV := float64(s.Heads), float64(s.KVHeads)
	bytes := 2*T*(H+2*KV)*D + 2*T*H*D + 2*cacheBytes(s)*T*KV*D + 4*D/2 + scaleBytes(s)
	c.add(3*T*(H+KV)*D, bytes, 0)
	return nil
}

func (c *costBackend) Attention(_, _, _, _ Buffer, _ KVView, s AttnShape) error {
	D, H, KV := float64(s.HeadDim), float64(s.Heads), float64(s.KVHeads)
	var visible float64 // Σ over queries of visible keys
	if s.Ragged() {
		for b, q := range s.QLens {
			Q, L := float64(q), float64(s.SeqLens[b])
			visible += Q*(L-Q+1) + Q*(Q-1)/2
		}
	} else {
		B, S, P := float64(s.Batch), float64(s.SeqLen), float64(s.StartPos)
		visible = B * (S*(P+1) + S*(S-1)/2)
	}
	c.tokens, c.kvTokens = s.Tokens(), s.KVTokens()
	T, kvTokens := float64(s.Tokens()), float64(s.KVTokens())
	bytes := 2*2*T*H*D + 2*cacheBytes(s)*kvTokens*KV*D + scaleBytes(s)
	c.add(4*D*H*visible, bytes, 0)
	return nil
}

// cacheBytes is one cached element's size: 2 (bf16), 1 (FP8).
func cacheBytes(s AttnShape) float64 { return float64(s.Cache.Bytes()) }

// scaleBytes is an FP8 cache's layer's K and V scales read (4 bytes per
// KV head each), none for bf16.
func scaleBytes(s AttnShape) float64 {
	if !s.Cache.FP8() {
		return 0
	}
	return 2 * 4 * float64(s.KVHeads)
}

// AdvanceKV reads and writes each sequence's position and length, reads
// its table entry and writes its slot.
func (c *costBackend) AdvanceKV(_ KVView, s AttnShape) error {
	c.add(0, float64(s.Batch)*(4*4+4+8)+8, 0)
	return nil
}

func (c *costBackend) GatherLastRagged(_, _, _ Buffer, batch, width int) error {
	c.add(0, 2*2*float64(batch*width)+4*float64(batch+1), 0)
	return nil
}

func (c *costBackend) AddI32(buf Buffer, _ int) error {
	c.add(0, 8*float64(buf.Len()), 0)
	return nil
}

func (c *costBackend) SiluMul(_, _ Buffer, rows, inter int) error {
	n := float64(rows * inter)
	c.add(5*n, 2*3*n, 0)
	return nil
}

func (c *costBackend) GatherLast(_, _ Buffer, batch, _, width int) error {
	c.add(0, 2*2*float64(batch*width), 0)
	return nil
}

func (c *costBackend) Argmax(_, _ Buffer, rows, vocab int) error {
	c.add(float64(rows*vocab), 2*float64(rows*vocab)+4*float64(rows), 0)
	return nil
}

type costEvent struct{}

func (costEvent) Record() error                                    { return nil }
func (c *costBackend) NewEvent() (Event, error)                    { return costEvent{}, nil }
func (c *costBackend) Elapsed(Event, Event) (time.Duration, error) { return 0, nil }
func (c *costBackend) Sync() error                                 { return nil }
func (c *costBackend) Close() error                                { return nil }

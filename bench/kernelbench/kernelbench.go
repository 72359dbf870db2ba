package kernelbench

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"stepbench/kernels/ref"
	"stepbench/runner"

	"stepbench/bench/stats"
)

// Target is one op, ready to launch repeatedly on fixed buffers.
type Target interface {
	// FlushL2 overwrites a buffer the size of the GPU's L2 (not timed), so
	// that the next launch starts cold, as inside a real step.
	FlushL2() error
	Launch() error // enqueue the op once
	Sync() error
	NewEvent() (runner.Event, error)
	Elapsed(start, end runner.Event) (time.Duration, error)
}

// Options is the adaptive stopping rule: sample until at least
// MinSamples are taken and the noise (the relative half-width of the
// median's confidence interval) is at most MaxNoise, or until Timeout or
// MaxSamples.
type Options struct {
	WarmupLaunches int
	MinSamples     int
	MaxSamples     int
	MaxNoise       float64 // relative, e.g. 0.005
	Timeout        time.Duration
	// Now is the clock of the Timeout (time.Now when nil); tests give a
	// virtual one.
	Now func() time.Time
}

// Result is one op at one shape.
type Result struct {
	Op            string        `json:"op"`
	ShapeLabel    string        `json:"shape"`
	DeviceSeconds []float64     `json:"device_seconds"` // every cold sample, in order
	Summary       stats.Summary `json:"summary"`
	Noise         float64       `json:"noise"`       // relative half-width of the median interval
	StopReason    string        `json:"stop_reason"` // "noise", "timeout" or "max-samples"
	FLOPs         float64       `json:"flops"`       // the cost model's minimal work per launch
	Bytes         float64       `json:"bytes"`
}

// Measure times t cold (L2 flushed before every sample) until the
// stopping rule holds.
func Measure(t Target, opt Options) (Result, error) {
	var res Result
	if t == nil {
		return res, errors.New("kernel bench: nil target")
	}
	if opt.MinSamples < 2 || opt.MaxSamples < opt.MinSamples || opt.MaxNoise <= 0 || opt.Timeout <= 0 {
		return res, fmt.Errorf("kernel bench: need min samples >= 2, max samples >= min, max noise > 0, timeout > 0 (got %d, %d, %g, %v)",
			opt.MinSamples, opt.MaxSamples, opt.MaxNoise, opt.Timeout)
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	start, err := t.NewEvent()
	if err != nil {
		return res, fmt.Errorf("create event: %w", err)
	}
	end, err := t.NewEvent()
	if err != nil {
		return res, fmt.Errorf("create event: %w", err)
	}
	for i := 0; i < opt.WarmupLaunches; i++ {
		if err := t.Launch(); err != nil {
			return res, fmt.Errorf("warmup launch: %w", err)
		}
	}
	began := now()
	nextCheck := opt.MinSamples
	for {
		if err := t.FlushL2(); err != nil {
			return res, fmt.Errorf("flush L2: %w", err)
		}
		if err := t.Sync(); err != nil {
			return res, fmt.Errorf("sync: %w", err)
		}
		if err := start.Record(); err != nil {
			return res, fmt.Errorf("record start: %w", err)
		}
		if err := t.Launch(); err != nil {
			return res, fmt.Errorf("launch: %w", err)
		}
		if err := end.Record(); err != nil {
			return res, fmt.Errorf("record end: %w", err)
		}
		if err := t.Sync(); err != nil {
			return res, fmt.Errorf("sync: %w", err)
		}
		d, err := t.Elapsed(start, end)
		if err != nil {
			return res, fmt.Errorf("elapsed: %w", err)
		}
		res.DeviceSeconds = append(res.DeviceSeconds, d.Seconds())
		n := len(res.DeviceSeconds)
		switch {
		case n >= opt.MaxSamples:
			res.StopReason = "max-samples"
		case now().Sub(began) >= opt.Timeout:
			res.StopReason = "timeout"
		case n >= nextCheck:
			// Sorting every sample is O(n log n): check at ~10% growth steps.
			nextCheck = n + max(1, n/10)
			if stats.MedianNoise(res.DeviceSeconds) <= opt.MaxNoise {
				res.StopReason = "noise"
			}
		}
		if res.StopReason != "" {
			break
		}
	}
	res.Summary = stats.Summarize(res.DeviceSeconds)
	res.Noise = stats.MedianNoise(res.DeviceSeconds)
	return res, nil
}

// Shape is where an op runs: Batch sequences of SeqLen new tokens
// after StartPos cached ones (prefill: StartPos 0; decode: SeqLen 1), or,
// with Seqs, a ragged step: sequence b brings Seqs[b].Prompt new tokens
// after Seqs[b].Context cached ones (a decode step at each sequence's own
// length: Prompt 1; a varlen prefill: Context 0). KV is the cache's
// layout; a paged layout or Seqs take the step through the block table, as
// the engine does (Tabled).
type Shape struct {
	Batch, SeqLen, StartPos int
	Seqs                    []runner.SeqSpec
	KV                      runner.KVOptions
}

// RaggedShape is the step of seqs: a uniform Shape when every sequence is
// the same (Batch × SeqLen after StartPos), else Seqs with Batch their
// count and SeqLen the most new tokens.
func RaggedShape(seqs []runner.SeqSpec) Shape {
	s := Shape{Batch: len(seqs), SeqLen: 1}
	same := len(seqs) > 0
	for _, q := range seqs {
		same = same && q == seqs[0]
		s.SeqLen = max(s.SeqLen, q.Prompt)
	}
	if same {
		s.SeqLen, s.StartPos = seqs[0].Prompt, seqs[0].Context
		return s
	}
	s.Seqs = slices.Clone(seqs)
	return s
}

// Tabled reports whether the op's step goes through the block table.
func (s Shape) Tabled() bool { return s.Seqs != nil || s.KV.Paged() }

// SeqSpecs are the step's sequences: Seqs, or Batch of them with StartPos
// cached and SeqLen new tokens each.
func (s Shape) SeqSpecs() []runner.SeqSpec {
	if s.Seqs != nil {
		return s.Seqs
	}
	out := make([]runner.SeqSpec, s.Batch)
	for b := range out {
		out[b] = runner.SeqSpec{Context: s.StartPos, Prompt: s.SeqLen}
	}
	return out
}

// Tokens is the step's new tokens: the activation rows of its ops.
func (s Shape) Tokens() int {
	if s.Seqs == nil {
		return s.Batch * s.SeqLen
	}
	n := 0
	for _, q := range s.Seqs {
		n += q.Prompt
	}
	return n
}

// KVTokens is the tokens in the caches after the step.
func (s Shape) KVTokens() int {
	n := 0
	for _, q := range s.SeqSpecs() {
		n += q.Context + q.Prompt
	}
	return n
}

// Longest is the most tokens any sequence holds after the step.
func (s Shape) Longest() int {
	n := 0
	for _, q := range s.SeqSpecs() {
		n = max(n, q.Context+q.Prompt)
	}
	return n
}

// Label names the shape in reports: "batch=B/seq=S/pos=P"; a ragged step's
// seq and pos lists where its sequences differ ("batch=3/seq=1/
// pos=128:4096:512"; past 8 sequences their range, their KV tokens and a
// hash of the lists, "pos=200..8000/kv=131072/h=1a2b3c4d"), and a paged
// layout after it ("/paged=16", "/paged=16/shuffled").
func (s Shape) Label() string {
	out := fmt.Sprintf("batch=%d/seq=%d/pos=%d", s.Batch, s.SeqLen, s.StartPos)
	if s.Seqs != nil {
		prompts, contexts := make([]int, len(s.Seqs)), make([]int, len(s.Seqs))
		for b, q := range s.Seqs {
			prompts[b], contexts[b] = q.Prompt, q.Context
		}
		out = fmt.Sprintf("batch=%d/seq=%s/pos=%s", s.Batch, labelList(prompts), labelList(contexts))
		if len(s.Seqs) > 8 {
			h := fnv.New32a()
			fmt.Fprint(h, prompts, contexts)
			out += fmt.Sprintf("/kv=%d/h=%08x", s.KVTokens(), h.Sum32())
		}
	}
	if s.KV.Paged() {
		out += fmt.Sprintf("/paged=%d", s.KV.PageSize)
		if s.KV.Order == runner.PagesShuffled {
			out += "/shuffled"
		}
	}
	return out
}

// labelList is one value when all are the same, the list joined by ':' up
// to 8 (as --shape reads it), else "least..greatest".
func labelList(xs []int) string {
	if slices.Min(xs) == slices.Max(xs) {
		return strconv.Itoa(xs[0])
	}
	if len(xs) > 8 {
		return fmt.Sprintf("%d..%d", slices.Min(xs), slices.Max(xs))
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ":")
}

// ParseShape parses "batch=B,seq=S,pos=P" (any order; batch and seq
// default to 1, pos to 0). seq and pos take a list, one value per
// sequence, separated by ':' (or ';'): "seq=128:4096:512" (a varlen
// prefill), "pos=128:4096:512" (a decode step at each sequence's length);
// lens=L1:L2:... is pos's list under the name run's --context-lens gives
// it. batch, when given, must be the lists' length.
func ParseShape(text string) (Shape, error) {
	if strings.TrimSpace(text) == "" {
		return Shape{}, errors.New("shape: empty")
	}
	values := map[string][]int{}
	for _, part := range strings.Split(text, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Shape{}, fmt.Errorf("shape: %q is not key=value", part)
		}
		switch key {
		case "batch", "seq", "pos", "lens":
		default:
			return Shape{}, fmt.Errorf("shape: unknown key %q (batch, seq, pos, lens)", key)
		}
		alias := map[string]string{"lens": "pos", "pos": "lens"}[key]
		if _, seen := values[key]; seen || values[alias] != nil {
			return Shape{}, fmt.Errorf("shape: %s given twice (lens is pos's list)", key)
		}
		list, err := parseShapeList(key, value)
		if err != nil {
			return Shape{}, err
		}
		values[key] = list
	}
	if l := values["lens"]; l != nil {
		values["pos"] = l
	}
	return shapeOf(values)
}

// parseShapeList is a key's value or values separated by ':' (or ';',
// which a shell needs quoted), each an integer in [0, 2^24] (batch: one).
func parseShapeList(key, value string) ([]int, error) {
	parts := strings.Split(strings.ReplaceAll(value, ";", ":"), ":")
	if key == "batch" && len(parts) > 1 {
		return nil, fmt.Errorf("shape: batch=%q is one number", value)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 1<<24 {
			return nil, fmt.Errorf("shape: %s=%q is not an integer in [0, 2^24] (or a list of them, 128:4096)", key, value)
		}
		out[i] = v
	}
	return out, nil
}

// shapeOf is the shape of ParseShape's values: uniform when every list
// has one value (or all its values are the same), else ragged
// (RaggedShape).
func shapeOf(values map[string][]int) (Shape, error) {
	batch, n := 0, 1
	if b := values["batch"]; b != nil {
		batch = b[0]
	}
	for _, key := range []string{"seq", "pos"} {
		if l := len(values[key]); l > 1 {
			if n > 1 && l != n || batch > 0 && l != batch {
				if key == "pos" && values["lens"] != nil {
					key = "lens"
				}
				return Shape{}, fmt.Errorf("shape: %s lists %d sequences, the shape %d", key, l, max(n, batch))
			}
			n = l
		}
	}
	if values["batch"] == nil {
		batch = n
	}
	if batch < 1 {
		return Shape{}, fmt.Errorf("shape: batch %d must be >= 1", batch)
	}
	at := func(key string, b, def int) int {
		switch l := values[key]; len(l) {
		case 0:
			return def
		case 1:
			return l[0]
		default:
			return l[b]
		}
	}
	if n == 1 { // no list: the uniform shape (however large its batch)
		s := Shape{Batch: batch, SeqLen: at("seq", 0, 1), StartPos: at("pos", 0, 0)}
		if s.SeqLen < 1 {
			return s, fmt.Errorf("shape: batch %d and seq %d must be >= 1", s.Batch, s.SeqLen)
		}
		return s, nil
	}
	seqs := make([]runner.SeqSpec, batch)
	for b := range seqs {
		seqs[b] = runner.SeqSpec{Context: at("pos", b, 0), Prompt: at("seq", b, 1)}
		if seqs[b].Prompt < 1 {
			return Shape{}, fmt.Errorf("shape: batch %d and seq %d must be >= 1", batch, seqs[b].Prompt)
		}
	}
	return RaggedShape(seqs), nil
}

// Ops lists the ops NewOp knows, as Engine.OnOp labels them.
func Ops() []string {
	return []string{"input_norm", "qkv_proj", "rope_kv_write", "attention", "o_proj", "gate_up_proj", "silu_mul", "down_proj", "lm_head", "argmax"}
}

// Op launches one model op on a backend with buffers of the model's
// dimensions, filled with dummy data once.
type Op struct {
	be      runner.Backend
	launch  func() error
	flush   runner.Buffer
	buffers []runner.Buffer
	flushes uint64
}

// NewOp prepares op of cfg at shape s on be, with an L2 flush buffer of
// l2Bytes. It returns the target and the op's cost per launch (OpCost).
// Close frees its buffers.
func NewOp(be runner.Backend, cfg runner.Config, op string, s Shape, l2Bytes int) (*Op, runner.OpCost, error) {
	cost, err := OpCost(cfg, op, s)
	if err != nil {
		return nil, cost, err
	}
	b := &opBuilder{be: be, cfg: cfg, s: s, fill: true}
	k := &Op{be: be, launch: b.build(op)}
	if l2Bytes > 0 {
		k.flush = b.alloc(runner.BF16, (l2Bytes+1)/2)
	}
	k.buffers = b.buffers
	err = b.err
	if err == nil {
		err = be.Sync()
	}
	if err != nil {
		return nil, cost, errors.Join(fmt.Errorf("kernel %s: %w", op, err), k.Close())
	}
	return k, cost, nil
}

// OpCost is the cost model's cost of one launch of op at shape s: the calls
// NewOp makes, made on the cost model's counting backend. A test checks
// that it is one of the calls of op in the model's own step at s.
func OpCost(cfg runner.Config, op string, s Shape) (runner.OpCost, error) {
	if s.Batch < 1 || s.SeqLen < 1 || s.StartPos < 0 || s.Longest() > cfg.MaxPositionEmbeddings || s.Seqs != nil && len(s.Seqs) != s.Batch {
		return runner.OpCost{Op: op}, fmt.Errorf("kernel %s: shape %s does not fit %s's %d positions", op, s.Label(), cfg.Name, cfg.MaxPositionEmbeddings)
	}
	if !slices.Contains(Ops(), op) {
		return runner.OpCost{Op: op}, fmt.Errorf("kernel: unknown op %q (known: %s)", op, strings.Join(Ops(), ", "))
	}
	return runner.CostOf(op, func(be runner.Backend) error {
		b := &opBuilder{be: be, cfg: cfg, s: s}
		launch := b.build(op)
		if b.err != nil {
			return b.err
		}
		return launch()
	})
}

// opBuilder makes one op's buffers on a backend and its launch; the first
// error stops it (later allocations return nil).
type opBuilder struct {
	be      runner.Backend
	cfg     runner.Config
	s       Shape
	fill    bool // fill bf16 buffers with dummy data (not for the cost model)
	buffers []runner.Buffer
	err     error
}

func (b *opBuilder) alloc(dt runner.DType, n int) runner.Buffer {
	if b.err != nil {
		return nil
	}
	buf, err := b.be.Alloc(dt, n)
	if err != nil {
		b.err = fmt.Errorf("allocate %d %s: %w", n, dt, err)
		return nil
	}
	b.buffers = append(b.buffers, buf)
	if dt == runner.BF16 && b.fill {
		b.err = b.be.FillDummy(buf, 0, n, 1, fmt.Sprintf("kernelbench.%d", len(b.buffers)), 0, ref.DummyUniform)
	}
	return buf
}

// upload runs an upload into dst unless building already failed.
func (b *opBuilder) upload(dst runner.Buffer, upload func() error) {
	if b.err == nil && dst != nil {
		b.err = upload()
	}
}

// build allocates op's operands and returns its launch: the call the
// engine's forward pass makes for op at the builder's shape (layer 0's for
// input_norm: no residual add).
func (b *opBuilder) build(op string) func() error {
	cfg, s, be := b.cfg, b.s, b.be
	T, h, inter := s.Tokens(), cfg.HiddenSize, cfg.IntermediateSize
	qDim := cfg.NumAttentionHeads * cfg.HeadDim
	linear := func(m, n, k int) func() error {
		out, x, w := b.alloc(runner.BF16, m*n), b.alloc(runner.BF16, m*k), b.alloc(runner.BF16, n*k)
		return func() error { return be.Linear(out, x, w, m, n, k) }
	}
	switch op {
	case "qkv_proj":
		return linear(T, cfg.QKVDim(), h)
	case "o_proj":
		return linear(T, h, qDim)
	case "gate_up_proj":
		return linear(T, 2*inter, h)
	case "down_proj":
		return linear(T, h, inter)
	case "lm_head":
		return linear(s.Batch, cfg.VocabSize, h)
	case "input_norm":
		out, residual, weight := b.alloc(runner.BF16, T*h), b.alloc(runner.BF16, T*h), b.alloc(runner.BF16, h)
		eps := float32(cfg.RMSNormEps)
		return func() error { return be.AddRMSNorm(out, residual, nil, weight, T, h, eps) }
	case "silu_mul":
		out, gateUp := b.alloc(runner.BF16, T*inter), b.alloc(runner.BF16, 2*T*inter)
		return func() error { return be.SiluMul(out, gateUp, T, inter) }
	case "rope_kv_write", "attention":
		return b.attentionSide(op)
	case "argmax":
		out, logits := b.alloc(runner.I32, s.Batch), b.alloc(runner.BF16, s.Batch*cfg.VocabSize)
		return func() error { return be.Argmax(out, logits, s.Batch, cfg.VocabSize) }
	}
	b.err = fmt.Errorf("unknown op %q (known: %s)", op, strings.Join(Ops(), ", "))
	return nil
}

// attentionSide builds rope_kv_write or attention over a KV cache of
// StartPos+SeqLen positions, with the position on the device at StartPos
// and RoPE's frequencies the model's (rope_scaling included); a tabled
// shape's through its block table (attentionView).
func (b *opBuilder) attentionSide(op string) func() error {
	cfg, s, be := b.cfg, b.s, b.be
	T, D := s.Tokens(), cfg.HeadDim
	qDim := cfg.NumAttentionHeads * D
	attn := runner.AttnShape{Batch: s.Batch, SeqLen: s.SeqLen, StartPos: s.StartPos, Heads: cfg.NumAttentionHeads,
		KVHeads: cfg.NumKeyValueHeads, HeadDim: D, MaxSeq: s.StartPos + s.SeqLen}
	var view runner.KVView
	if s.Tabled() || takesTable(be) { // an op library of op ABI 2 takes only the table, even a uniform contiguous step
		attn, view = b.attentionView(attn)
	} else {
		view.Pos = b.alloc(runner.I32, 1)
		b.upload(view.Pos, func() error { return be.UploadI32(view.Pos, []int32{int32(s.StartPos)}) })
	}
	cacheLen := attn.CacheSlots() * cfg.NumKeyValueHeads * D
	kCache, vCache := b.alloc(runner.BF16, cacheLen), b.alloc(runner.BF16, cacheLen)
	q, qkv := b.alloc(runner.BF16, T*qDim), b.alloc(runner.BF16, T*cfg.QKVDim())
	if op == "attention" {
		out := b.alloc(runner.BF16, T*qDim)
		return func() error { return be.Attention(out, q, kCache, vCache, view, attn) }
	}
	freqs := cfg.RopeInvFreq()
	invFreq := b.alloc(runner.F32, len(freqs))
	b.upload(invFreq, func() error { return be.UploadF32(invFreq, freqs) })
	return func() error { return be.RopeKVWrite(q, kCache, vCache, qkv, invFreq, view, attn) }
}

// attentionView lays a tabled shape's cache out as the engine does
// (runner.PlanKV under the shape's layout, each sequence's pages for its
// context and new tokens), uploads the step's view (the block table, each
// sequence's length after the step, the query starts, each new token's
// position and cache slot) and returns the step's shape. A backend that
// plans its steps (runner.KVPlanner) plans this one, once, outside every
// timed launch.
func (b *opBuilder) attentionView(a runner.AttnShape) (runner.AttnShape, runner.KVView) {
	s, be := b.s, b.be
	seqs := s.SeqSpecs()
	positions := make([]int, len(seqs))
	a.QLens, a.SeqLens, a.SeqLen, a.StartPos = make([]int, len(seqs)), make([]int, len(seqs)), 0, 0
	for i, q := range seqs {
		positions[i] = q.Context + q.Prompt
		a.QLens[i], a.SeqLens[i], a.SeqLen = q.Prompt, q.Context+q.Prompt, max(a.SeqLen, q.Prompt)
	}
	plan := runner.PlanKV(positions, s.KV)
	a.PageSize, a.NumPages, a.MaxPages, a.Paged, a.MaxSeq = plan.PageSize, plan.NumPages, plan.MaxPages, s.KV.Paged(), plan.MaxPages*plan.PageSize
	host := runner.KVHostView{BlockTable: plan.Table, QueryStart: make([]int32, len(seqs)+1)}
	for i, q := range seqs {
		host.SeqLens = append(host.SeqLens, int32(q.Context+q.Prompt))
		host.QueryStart[i+1] = host.QueryStart[i] + int32(q.Prompt)
		for j := range q.Prompt {
			host.Positions = append(host.Positions, int32(q.Context+j))
			host.SlotMapping = append(host.SlotMapping, plan.Slot(i, q.Context+j))
		}
	}
	v := runner.KVView{Pos: b.alloc(runner.I32, 1), BlockTable: b.alloc(runner.I32, len(plan.Table)), SeqLens: b.alloc(runner.I32, len(seqs)),
		QueryStart: b.alloc(runner.I32, len(seqs)+1), Positions: b.alloc(runner.I32, a.Tokens()), SlotMapping: b.alloc(runner.I64, a.Tokens())}
	b.upload(v.Pos, func() error { return be.UploadI32(v.Pos, []int32{0}) })
	b.upload(v.BlockTable, func() error { return be.UploadI32(v.BlockTable, host.BlockTable) })
	b.upload(v.SeqLens, func() error { return be.UploadI32(v.SeqLens, host.SeqLens) })
	b.upload(v.QueryStart, func() error { return be.UploadI32(v.QueryStart, host.QueryStart) })
	b.upload(v.Positions, func() error { return be.UploadI32(v.Positions, host.Positions) })
	b.upload(v.SlotMapping, func() error { return be.UploadI64(v.SlotMapping, host.SlotMapping) })
	if p, ok := be.(runner.KVPlanner); ok && b.err == nil {
		if a.SeqLen > 1 {
			b.err = p.PlanKV(host, a, runner.KVHostView{}, runner.AttnShape{})
		} else {
			b.err = p.PlanKV(runner.KVHostView{}, runner.AttnShape{}, host, a)
		}
	}
	return a, v
}

// takesTable reports whether be takes only the tabled form
// (runner.KVTableUser: an op library of op ABI 2 replaces the op).
func takesTable(be runner.Backend) bool {
	u, ok := be.(runner.KVTableUser)
	return ok && u.UsesKVTable()
}

// FlushL2 overwrites the flush buffer with fresh dummy data (Target).
func (k *Op) FlushL2() error {
	if k.flush == nil {
		return nil
	}
	// A new dummy tensor name each time: the whole buffer is rewritten.
	k.flushes++
	return k.be.FillDummy(k.flush, 0, k.flush.Len(), k.flushes, "l2_flush", 0, ref.DummyUniform)
}

// Launch, Sync, NewEvent and Elapsed are the Target of Measure.
func (k *Op) Launch() error                   { return k.launch() }
func (k *Op) Sync() error                     { return k.be.Sync() }
func (k *Op) NewEvent() (runner.Event, error) { return k.be.NewEvent() }
func (k *Op) Elapsed(start, end runner.Event) (time.Duration, error) {
	return k.be.Elapsed(start, end)
}

// Close frees the kernel's buffers.
func (k *Op) Close() error {
	var errs []error
	for _, b := range k.buffers {
		if b != nil {
			errs = append(errs, k.be.Free(b))
		}
	}
	k.buffers = nil
	return errors.Join(errs...)
}

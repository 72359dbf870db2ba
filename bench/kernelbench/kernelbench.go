package kernelbench

import (
	"errors"
	"fmt"
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
// after StartPos cached ones (prefill: StartPos 0; decode: SeqLen 1).
type Shape struct {
	Batch, SeqLen, StartPos int
}

// Label names the shape in reports.
func (s Shape) Label() string {
	return fmt.Sprintf("batch=%d/seq=%d/pos=%d", s.Batch, s.SeqLen, s.StartPos)
}

// ParseShape parses "batch=B,seq=S,pos=P" (any order; batch and seq
// default to 1, pos to 0).
func ParseShape(text string) (Shape, error) {
	s := Shape{Batch: 1, SeqLen: 1}
	if strings.TrimSpace(text) == "" {
		return s, errors.New("shape: empty")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(text, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return s, fmt.Errorf("shape: %q is not key=value", part)
		}
		if seen[key] {
			return s, fmt.Errorf("shape: %s given twice", key)
		}
		seen[key] = true
		v, err := strconv.Atoi(value)
		if err != nil || v < 0 || v > 1<<24 {
			return s, fmt.Errorf("shape: %s=%q is not an integer in [0, 2^24]", key, value)
		}
		switch key {
		case "batch":
			s.Batch = v
		case "seq":
			s.SeqLen = v
		case "pos":
			s.StartPos = v
		default:
			return s, fmt.Errorf("shape: unknown key %q (batch, seq, pos)", key)
		}
	}
	if s.Batch < 1 || s.SeqLen < 1 {
		return s, fmt.Errorf("shape: batch %d and seq %d must be >= 1", s.Batch, s.SeqLen)
	}
	return s, nil
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
	if s.Batch < 1 || s.SeqLen < 1 || s.StartPos < 0 || s.StartPos+s.SeqLen > cfg.MaxPositionEmbeddings {
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
	T, h, inter := s.Batch*s.SeqLen, cfg.HiddenSize, cfg.IntermediateSize
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
// and RoPE's frequencies the model's (rope_scaling included).
func (b *opBuilder) attentionSide(op string) func() error {
	cfg, s, be := b.cfg, b.s, b.be
	T, D := s.Batch*s.SeqLen, cfg.HeadDim
	qDim := cfg.NumAttentionHeads * D
	attn := runner.AttnShape{Batch: s.Batch, SeqLen: s.SeqLen, StartPos: s.StartPos, Heads: cfg.NumAttentionHeads,
		KVHeads: cfg.NumKeyValueHeads, HeadDim: D, MaxSeq: s.StartPos + s.SeqLen}
	cacheLen := s.Batch * attn.MaxSeq * cfg.NumKeyValueHeads * D
	kCache, vCache := b.alloc(runner.BF16, cacheLen), b.alloc(runner.BF16, cacheLen)
	q, qkv := b.alloc(runner.BF16, T*qDim), b.alloc(runner.BF16, T*cfg.QKVDim())
	pos := b.alloc(runner.I32, 1)
	b.upload(pos, func() error { return be.UploadI32(pos, []int32{int32(s.StartPos)}) })
	kv := runner.KVView{Pos: pos}
	if takesTable(be) { // an op library of op ABI 2: the same cache, through a table (tabled.go)
		attn, kv = b.tabledView(attn)
	}
	if op == "attention" {
		out := b.alloc(runner.BF16, T*qDim)
		return func() error { return be.Attention(out, q, kCache, vCache, kv, attn) }
	}
	freqs := cfg.RopeInvFreq()
	invFreq := b.alloc(runner.F32, len(freqs))
	b.upload(invFreq, func() error { return be.UploadF32(invFreq, freqs) })
	return func() error { return be.RopeKVWrite(q, kCache, vCache, qkv, invFreq, kv, attn) }
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

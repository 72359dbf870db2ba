package runner

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"stepbench/kernels/ref"
)

// CPU is the reference backend: every op is its kernels/ref twin, run
// synchronously on the calling goroutine (Linear on every core: the
// outputs' column chunks are shared among GOMAXPROCS goroutines, with the
// same bits as on one). It is the truth the cuda backend is compared with
// end to end, and the no-GPU fallback. Each weight matrix is widened to
// float32 once, when loaded (PrepareWeights), not at every Linear: the
// host holds both copies (CheckMemory counts them).
type CPU struct{ workers int }

// NewCPU returns the cpu backend.
func NewCPU() *CPU { return &CPU{workers: runtime.GOMAXPROCS(0)} }

type cpuBuffer struct {
	dt  DType
	b16 []uint16
	f32 []float32
	i32 []int32
	u8  []uint8 // F8E4M3
	i64 []int64
	// wide is the float32 copy of a bf16 weight matrix (PrepareWeights);
	// any write to the buffer drops it.
	wide []float32
}

// PrepareWeights widens each matrix to float32 once, for every Linear
// that reads it.
func (*CPU) PrepareWeights(matrices []Buffer) error {
	for _, m := range matrices {
		cb, err := asCPU(m, BF16, "prepare weights")
		if err != nil {
			return err
		}
		if cb.wide == nil {
			cb.wide = make([]float32, len(cb.b16))
			ref.ToF32(cb.wide, cb.b16)
		}
	}
	return nil
}

func (b *cpuBuffer) DType() DType { return b.dt }
func (b *cpuBuffer) Len() int {
	switch b.dt {
	case BF16:
		return len(b.b16)
	case F32:
		return len(b.f32)
	case F8E4M3:
		return len(b.u8)
	case I64:
		return len(b.i64)
	}
	return len(b.i32)
}

// CheckMemory compares est, with the float32 copy of the weights the cpu
// backend keeps (2 × the bf16 bytes), with the host's available memory
// (/proc/meminfo's MemAvailable) less 1 GB of headroom, as the cuda backend
// does with the GPU's; call it before loading weights. Where meminfo cannot
// be read (not Linux) the check is skipped.
func (*CPU) CheckMemory(est MemoryEstimate) error {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil
	}
	available, total, err := HostMemory(data)
	if err != nil {
		return fmt.Errorf("check memory: /proc/meminfo: %w", err)
	}
	est.WeightBytes *= 3
	return CheckFits(est, available, total, hostMemoryHeadroomBytes, "the host (cpu backend; its weights are counted as bf16 and a float32 copy, 6 bytes per parameter)")
}

// Name is "cpu".
func (*CPU) Name() string { return "cpu" }

// Alloc makes a zeroed host buffer.
func (*CPU) Alloc(dt DType, n int) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc %d %s elements", n, dt)
	}
	b := &cpuBuffer{dt: dt}
	switch dt {
	case BF16:
		b.b16 = make([]uint16, n)
	case F32:
		b.f32 = make([]float32, n)
	case I32:
		b.i32 = make([]int32, n)
	case F8E4M3:
		b.u8 = make([]uint8, n)
	case I64:
		b.i64 = make([]int64, n)
	default:
		return nil, fmt.Errorf("alloc: unknown dtype %d", dt)
	}
	return b, nil
}

// Free drops the buffer's memory.
func (*CPU) Free(b Buffer) error {
	cb, err := asCPU(b, b.DType(), "free")
	if err != nil {
		return err
	}
	*cb = cpuBuffer{dt: cb.dt}
	return nil
}

func asCPU(b Buffer, want DType, op string) (*cpuBuffer, error) {
	cb, ok := b.(*cpuBuffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("%s: not a cpu buffer (%T)", op, b)
	}
	if cb.dt != want {
		return nil, fmt.Errorf("%s: buffer is %s, want %s", op, cb.dt, want)
	}
	return cb, nil
}

// bf16s unwraps bf16 buffers, each holding at least need[i] elements (a nil
// buffer stays nil: an optional operand); the first written of them are
// the op's outputs, whose float32 copies (if any) it drops.
func bf16s(op string, bs []Buffer, need []int, written int) ([][]uint16, error) {
	out := make([][]uint16, len(bs))
	for i, b := range bs {
		if b == nil {
			continue
		}
		cb, err := asCPU(b, BF16, op)
		if err != nil {
			return nil, err
		}
		if len(cb.b16) < need[i] {
			return nil, fmt.Errorf("%s: operand %d holds %d elements, needs %d", op, i, len(cb.b16), need[i])
		}
		if i < written {
			cb.wide = nil
		}
		out[i] = cb.b16[:need[i]]
	}
	return out, nil
}

// UploadBF16 copies src into dst at offset.
func (*CPU) UploadBF16(dst Buffer, offset int, src []uint16) error {
	cb, err := asCPU(dst, BF16, "upload bf16")
	if err != nil {
		return err
	}
	if offset < 0 || offset+len(src) > len(cb.b16) {
		return fmt.Errorf("upload bf16: %d elements at %d overflow a buffer of %d", len(src), offset, len(cb.b16))
	}
	cb.wide = nil
	copy(cb.b16[offset:], src)
	return nil
}

// UploadF32 copies src into dst.
func (*CPU) UploadF32(dst Buffer, src []float32) error {
	cb, err := asCPU(dst, F32, "upload f32")
	if err != nil {
		return err
	}
	if len(src) > len(cb.f32) {
		return fmt.Errorf("upload f32: %d elements into %d", len(src), len(cb.f32))
	}
	copy(cb.f32, src)
	return nil
}

// UploadI32 copies src into dst.
func (*CPU) UploadI32(dst Buffer, src []int32) error {
	cb, err := asCPU(dst, I32, "upload i32")
	if err != nil {
		return err
	}
	if len(src) > len(cb.i32) {
		return fmt.Errorf("upload i32: %d elements into %d", len(src), len(cb.i32))
	}
	copy(cb.i32, src)
	return nil
}

// UploadI64 copies src into dst.
func (*CPU) UploadI64(dst Buffer, src []int64) error {
	cb, err := asCPU(dst, I64, "upload i64")
	if err != nil {
		return err
	}
	if len(src) > len(cb.i64) {
		return fmt.Errorf("upload i64: %d elements into %d", len(src), len(cb.i64))
	}
	copy(cb.i64, src)
	return nil
}

// DownloadBF16 copies the first len(dst) elements of src.
func (*CPU) DownloadBF16(src Buffer, dst []uint16) error {
	cb, err := asCPU(src, BF16, "download bf16")
	if err != nil {
		return err
	}
	if len(dst) > len(cb.b16) {
		return fmt.Errorf("download bf16: %d elements from %d", len(dst), len(cb.b16))
	}
	copy(dst, cb.b16)
	return nil
}

// DownloadI32 copies the first len(dst) elements of src.
func (*CPU) DownloadI32(src Buffer, dst []int32) error {
	cb, err := asCPU(src, I32, "download i32")
	if err != nil {
		return err
	}
	if len(dst) > len(cb.i32) {
		return fmt.Errorf("download i32: %d elements from %d", len(dst), len(cb.i32))
	}
	copy(dst, cb.i32)
	return nil
}

// FillDummy generates dummy weights in place.
func (c *CPU) FillDummy(dst Buffer, offset, n int, seed uint64, name string, first uint64, kind ref.DummyKind) error {
	return c.FillDummyRows(dst, offset, 1, n, seed, name, first, 0, kind)
}

// FillDummyRows generates a block of dummy weights in place.
func (*CPU) FillDummyRows(dst Buffer, offset, rows, cols int, seed uint64, name string, first, rowStride uint64, kind ref.DummyKind) error {
	cb, err := asCPU(dst, BF16, "fill dummy")
	if err != nil {
		return err
	}
	n := rows * cols
	if offset < 0 || rows < 0 || cols < 0 || offset+n > len(cb.b16) {
		return fmt.Errorf("fill dummy %s: %d×%d elements at %d overflow a buffer of %d", name, rows, cols, offset, len(cb.b16))
	}
	cb.wide = nil
	if n > 0 {
		ref.FillDummyRows(cb.b16[offset:offset+n], cols, seed, name, first, rowStride, kind)
	}
	return nil
}

// Embed gathers embedding rows.
func (*CPU) Embed(out, table, ids Buffer, tokens, hidden int) error {
	bs, err := bf16s("embed", []Buffer{out, table}, []int{tokens * hidden, 0}, 1)
	if err != nil {
		return err
	}
	tb := table.(*cpuBuffer).b16
	idb, err := asCPU(ids, I32, "embed ids")
	if err != nil {
		return err
	}
	if len(idb.i32) < tokens {
		return fmt.Errorf("embed: %d ids for %d tokens", len(idb.i32), tokens)
	}
	vocab := len(tb) / hidden
	for t, id := range idb.i32[:tokens] {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("embed: token id %d at row %d outside [0, %d)", id, t, vocab)
		}
	}
	ref.Embed(bs[0], tb, idb.i32[:tokens], hidden)
	return nil
}

// AddRMSNorm is the fused residual add and RMSNorm.
func (*CPU) AddRMSNorm(out, residual, add, weight Buffer, rows, hidden int, eps float32) error {
	n := rows * hidden
	bs, err := bf16s("add_rmsnorm", []Buffer{out, residual, add, weight}, []int{n, n, n, hidden}, 2)
	if err != nil {
		return err
	}
	ref.AddRMSNorm(bs[0], bs[1], bs[2], bs[3], rows, hidden, eps)
	return nil
}

// QKNorm is the q/k/v bias and the per-head RMSNorm of q and k, in place.
func (*CPU) QKNorm(qkv, bias, qNorm, kNorm Buffer, tokens, heads, kvHeads, headDim int, eps float32) error {
	if tokens < 0 || heads < 1 || kvHeads < 1 || headDim < 1 {
		return fmt.Errorf("qk_norm: tokens %d heads %d kvHeads %d headDim %d", tokens, heads, kvHeads, headDim)
	}
	width := (heads + 2*kvHeads) * headDim
	bs, err := bf16s("qk_norm", []Buffer{qkv, bias, qNorm, kNorm}, []int{tokens * width, width, headDim, headDim}, 1)
	if err != nil {
		return err
	}
	ref.QKNorm(bs[0], bs[1], bs[2], bs[3], tokens, heads, kvHeads, headDim, eps)
	return nil
}

// Linear is out = x·wᵀ, from w's float32 copy when it has one
// (PrepareWeights), on every core.
func (c *CPU) Linear(out, x, w Buffer, m, n, k int) error {
	bs, err := bf16s("linear", []Buffer{out, x, w}, []int{m * n, m * k, n * k}, 1)
	if err != nil {
		return err
	}
	wide := w.(*cpuBuffer).wide
	if len(wide) < n*k || out == w {
		wide = make([]float32, n*k)
		ref.ToF32(wide, bs[2])
	}
	ref.LinearWide(bs[0], bs[1], wide, m, n, k, max(1, c.workers))
	return nil
}

func cpuPos(pos Buffer, s AttnShape, op string) error {
	pb, err := asCPU(pos, I32, op+" position")
	if err != nil {
		return err
	}
	if len(pb.i32) < 1 || int(pb.i32[0]) != s.StartPos {
		return fmt.Errorf("%s: position buffer says %v, the shape says %d", op, pb.i32, s.StartPos)
	}
	if s.StartPos+s.SeqLen > s.MaxSeq {
		return fmt.Errorf("%s: positions up to %d exceed the cache's %d", op, s.StartPos+s.SeqLen, s.MaxSeq)
	}
	return nil
}

// cpuView is a tabled step's view as the twins take it, read from kv's
// buffers and checked (ref.PagedKV.Check) against s.
func cpuView(kv KVView, s AttnShape, op string) (ref.PagedKV, error) {
	i32 := func(b Buffer, n int, what string) ([]int32, error) {
		cb, err := asCPU(b, I32, op+" "+what)
		if err != nil {
			return nil, err
		}
		if len(cb.i32) < n {
			return nil, fmt.Errorf("%s: %s holds %d, need %d", op, what, len(cb.i32), n)
		}
		return cb.i32[:n], nil
	}
	var view ref.PagedKV
	var errs [3]error
	view.BlockTable, errs[0] = i32(kv.BlockTable, s.Batch*s.MaxPages, "block table")
	view.SeqLens, errs[1] = i32(kv.SeqLens, s.Batch, "sequence lengths")
	view.QueryStart, errs[2] = i32(kv.QueryStart, s.Batch+1, "query starts")
	if err := errors.Join(errs[:]...); err != nil {
		return view, err
	}
	view.PageSize, view.NumPages, view.MaxPages = s.PageSize, s.NumPages, s.MaxPages
	if err := view.Check(); err != nil {
		return view, fmt.Errorf("%s: %w", op, err)
	}
	if view.Tokens() != s.Tokens() {
		return view, fmt.Errorf("%s: the view holds %d new tokens, the shape %d", op, view.Tokens(), s.Tokens())
	}
	return view, nil
}

// RopeKVWrite rotates q and k and writes k and v to the cache.
func (c *CPU) RopeKVWrite(q, kCache, vCache, qkv, invFreq Buffer, kv KVView, s AttnShape) error {
	if s.Cache.FP8() {
		return c.ropeKVWriteFP8(q, kCache, vCache, qkv, invFreq, kv, s)
	}
	T, D := s.Tokens(), s.HeadDim
	cache := s.CacheSlots() * s.KVHeads * D
	bs, err := bf16s("rope_kv_write", []Buffer{q, kCache, vCache, qkv},
		[]int{T * s.Heads * D, cache, cache, T * (s.Heads + 2*s.KVHeads) * D}, 3)
	if err != nil {
		return err
	}
	fb, err := asCPU(invFreq, F32, "rope_kv_write inv_freq")
	if err != nil {
		return err
	}
	if len(fb.f32) < D/2 {
		return fmt.Errorf("rope_kv_write: %d inverse frequencies for head_dim %d", len(fb.f32), D)
	}
	if !s.Tabled() {
		if err := cpuPos(kv.Pos, s, "rope_kv_write"); err != nil {
			return err
		}
		ref.RopeKVWrite(bs[0], bs[1], bs[2], bs[3], fb.f32, s.Batch, s.SeqLen, s.StartPos, s.Heads, s.KVHeads, D, s.MaxSeq)
		return nil
	}
	pb, err := asCPU(kv.Positions, I32, "rope_kv_write positions")
	if err != nil {
		return err
	}
	sb, err := asCPU(kv.SlotMapping, I64, "rope_kv_write slot mapping")
	if err != nil {
		return err
	}
	if len(pb.i32) < T || len(sb.i64) < T {
		return fmt.Errorf("rope_kv_write: %d positions and %d slots for %d tokens", len(pb.i32), len(sb.i64), T)
	}
	for t := range T {
		if pb.i32[t] < 0 || sb.i64[t] >= int64(s.CacheSlots()) {
			return fmt.Errorf("rope_kv_write: token %d at position %d, slot %d of %d", t, pb.i32[t], sb.i64[t], s.CacheSlots())
		}
	}
	ref.RopeKVWritePaged(bs[0], bs[1], bs[2], bs[3], fb.f32, pb.i32, sb.i64, T, s.Heads, s.KVHeads, D, s.CacheSlots())
	return nil
}

// Attention is causal GQA attention over the cache, its tokens shared
// among the cores (each token's output is its own: the same bits).
func (c *CPU) Attention(out, q, kCache, vCache Buffer, kv KVView, s AttnShape) error {
	if s.Cache.FP8() {
		return c.attentionFP8(out, q, kCache, vCache, kv, s)
	}
	T, D := s.Tokens(), s.HeadDim
	cache := s.CacheSlots() * s.KVHeads * D
	bs, err := bf16s("attention", []Buffer{out, q, kCache, vCache}, []int{T * s.Heads * D, T * s.Heads * D, cache, cache}, 1)
	if err != nil {
		return err
	}
	if s.Tabled() {
		return c.attentionPaged(bs, kv, s)
	}
	if err := cpuPos(kv.Pos, s, "attention"); err != nil {
		return err
	}
	qWidth, kvWidth := s.Heads*D, s.KVHeads*D
	// A part is tokens [s0, s1) of sequence b, each reading its keys 0..p.
	type part struct{ b, s0, s1 int }
	var parts []part
	per := max(1, s.SeqLen/(4*c.workers))
	for b := range s.Batch {
		for s0 := 0; s0 < s.SeqLen; s0 += per {
			parts = append(parts, part{b, s0, min(s.SeqLen, s0+per)})
		}
	}
	c.parallel(len(parts), T*(s.StartPos+s.SeqLen)*qWidth, func(i int) {
		p := parts[i]
		t0 := p.b*s.SeqLen + p.s0
		cacheAt := p.b * s.MaxSeq * kvWidth
		ref.Attention(bs[0][t0*qWidth:], bs[1][t0*qWidth:], bs[2][cacheAt:], bs[3][cacheAt:],
			1, p.s1-p.s0, s.StartPos+p.s0, s.Heads, s.KVHeads, D, s.MaxSeq)
	})
	return nil
}

// attentionPaged is Attention of a tabled step: the step's tokens in
// parts shared among the cores, each part's rows computed by the twin.
func (c *CPU) attentionPaged(bs [][]uint16, kv KVView, s AttnShape) error {
	view, err := cpuView(kv, s, "attention")
	if err != nil {
		return err
	}
	T := view.Tokens()
	per := max(1, T/(8*c.workers))
	c.parallel((T+per-1)/per, T*s.KVTokens()/max(1, s.Batch)*s.Heads*s.HeadDim, func(i int) {
		rows := make([]int, 0, per)
		for t := i * per; t < min(T, (i+1)*per); t++ {
			rows = append(rows, t)
		}
		ref.AttentionPaged(bs[0], bs[1], bs[2], bs[3], view, s.Heads, s.KVHeads, s.HeadDim, rows)
	})
	return nil
}

// AdvanceKV moves a decode step's view one token on (ref.KVAdvance).
func (*CPU) AdvanceKV(kv KVView, s AttnShape) error {
	bufs := map[string]*cpuBuffer{}
	for _, b := range []struct {
		name string
		buf  Buffer
		dt   DType
		n    int
	}{{"positions", kv.Positions, I32, s.Batch}, {"sequence lengths", kv.SeqLens, I32, s.Batch},
		{"slot mapping", kv.SlotMapping, I64, s.Batch}, {"block table", kv.BlockTable, I32, s.Batch * s.MaxPages},
		{"position", kv.Pos, I32, 1}} {
		cb, err := asCPU(b.buf, b.dt, "advance kv "+b.name)
		if err != nil {
			return err
		}
		if cb.Len() < b.n {
			return fmt.Errorf("advance kv: %s holds %d, need %d", b.name, cb.Len(), b.n)
		}
		bufs[b.name] = cb
	}
	if s.PageSize < 1 || s.MaxPages < 1 {
		return fmt.Errorf("advance kv: page size %d, %d pages per sequence", s.PageSize, s.MaxPages)
	}
	ref.KVAdvance(bufs["positions"].i32, bufs["sequence lengths"].i32, bufs["slot mapping"].i64,
		bufs["block table"].i32, bufs["position"].i32, s.Batch, s.PageSize, s.MaxPages)
	return nil
}

// parallelMinWork is the least work (about one multiply-add each) that
// parallel shares among goroutines.
const parallelMinWork = 1 << 15

// parallel runs f(0..n-1) on the backend's cores, each index once; work is
// the whole's size, below parallelMinWork it runs on the caller alone.
func (c *CPU) parallel(n, work int, f func(i int)) {
	workers := min(c.workers, n)
	if workers <= 1 || work < parallelMinWork {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// AddI32 adds delta to every element.
func (*CPU) AddI32(buf Buffer, delta int) error {
	cb, err := asCPU(buf, I32, "add i32")
	if err != nil {
		return err
	}
	ref.AddI32(cb.i32, int32(delta))
	return nil
}

// SiluMul is SiLU(gate)·up, its rows shared among the cores.
func (c *CPU) SiluMul(out, gateUp Buffer, rows, inter int) error {
	bs, err := bf16s("silu_mul", []Buffer{out, gateUp}, []int{rows * inter, rows * 2 * inter}, 1)
	if err != nil {
		return err
	}
	per := max(1, rows/(4*c.workers))
	c.parallel((rows+per-1)/per, 8*rows*inter, func(i int) {
		r0, r1 := i*per, min(rows, (i+1)*per)
		ref.SiluMul(bs[0][r0*inter:r1*inter], bs[1][r0*2*inter:r1*2*inter], r1-r0, inter)
	})
	return nil
}

// GatherLast copies each sequence's last row.
func (*CPU) GatherLast(out, in Buffer, batch, seqLen, width int) error {
	bs, err := bf16s("gather_last", []Buffer{out, in}, []int{batch * width, batch * seqLen * width}, 1)
	if err != nil {
		return err
	}
	ref.GatherLast(bs[0], bs[1], batch, seqLen, width)
	return nil
}

// GatherLastRagged copies each sequence's last new row.
func (*CPU) GatherLastRagged(out, in, queryStart Buffer, batch, width int) error {
	qb, err := asCPU(queryStart, I32, "gather_last query starts")
	if err != nil {
		return err
	}
	if len(qb.i32) < batch+1 {
		return fmt.Errorf("gather_last: %d query starts for %d sequences", len(qb.i32), batch)
	}
	starts := qb.i32[:batch+1]
	if starts[0] != 0 {
		return fmt.Errorf("gather_last: query starts %v do not begin at 0", starts)
	}
	for b := range batch {
		if starts[b+1] <= starts[b] {
			return fmt.Errorf("gather_last: sequence %d has no new rows (query starts %v)", b, starts)
		}
	}
	bs, err := bf16s("gather_last", []Buffer{out, in}, []int{batch * width, int(starts[batch]) * width}, 1)
	if err != nil {
		return err
	}
	ref.GatherLastRagged(bs[0], bs[1], starts, width)
	return nil
}

// Argmax is each row's greedy token.
func (*CPU) Argmax(out, logits Buffer, rows, vocab int) error {
	ob, err := asCPU(out, I32, "argmax")
	if err != nil {
		return err
	}
	if len(ob.i32) < rows {
		return fmt.Errorf("argmax: %d outputs for %d rows", len(ob.i32), rows)
	}
	bs, err := bf16s("argmax", []Buffer{logits}, []int{rows * vocab}, 0)
	if err != nil {
		return err
	}
	ref.Argmax(ob.i32[:rows], bs[0], rows, vocab)
	return nil
}

type cpuEvent struct{ at time.Time }

func (e *cpuEvent) Record() error { e.at = time.Now(); return nil }

// NewEvent makes an event that records the host clock: cpu work is
// synchronous, so the host clock is the device clock.
func (*CPU) NewEvent() (Event, error) { return &cpuEvent{}, nil }

// Elapsed is the time between two recorded events.
func (*CPU) Elapsed(start, end Event) (time.Duration, error) {
	s, ok1 := start.(*cpuEvent)
	e, ok2 := end.(*cpuEvent)
	if !ok1 || !ok2 {
		return 0, errors.New("elapsed: not cpu events")
	}
	if s.at.IsZero() || e.at.IsZero() {
		return 0, errors.New("elapsed: event not recorded")
	}
	return e.at.Sub(s.at), nil
}

// Sync is a no-op: every op has finished when it returns.
func (*CPU) Sync() error { return nil }

// Close releases nothing: buffers are garbage collected.
func (*CPU) Close() error { return nil }

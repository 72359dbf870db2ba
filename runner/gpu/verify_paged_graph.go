package gpu

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// verifyPagedDecodeGraph captures one tabled decode step of m's heads
// (rope_kv_write 3, attention 6, kv_advance) on shuffled pages of 16 and
// replays it as the engine does, its view moved on by kv_advance on the
// device between replays: lengths of 1 to 41 growing past page boundaries
// (the first sequence crosses two), every replay compared with the twins
// at its own lengths.
func (v *Verifier) verifyPagedDecodeGraph(m kernels.ModelShape) {
	g := pagedGeometry{kv: pages(16, runner.PagesShuffled), ctx: []int{0, 14, 40}, qLens: []int{1, 1, 1}, extra: 20}
	v.pagedDecodeGraphAt(m, g, 7, 20, nil)
}

// verifyPagedDecodeGraphFP8 is verifyPagedDecodeGraph on an FP8 cache
// (rope_kv_write 4, attn_decode 7, kv_advance), in both formats, the
// scales read from their buffers at every replay.
func (v *Verifier) verifyPagedDecodeGraphFP8(m kernels.ModelShape) {
	if v.fp8Version(kernels.OpAttnDecode) == 0 || v.fp8Version(kernels.OpRope) == 0 {
		return
	}
	for _, format := range fp8Formats {
		g := pagedGeometry{kv: pages(16, runner.PagesShuffled), ctx: []int{0, 14, 40}, qLens: []int{1, 1, 1}, extra: 20}
		g.kv.DType = format
		v.pagedDecodeGraphAt(m, g, 7, 20, nil)
	}
}

// pagedGraphState is a tabled decode step's device buffers and the host's
// copies the twins advance beside them.
type pagedGraphState struct {
	pv                  *pagedView
	fp8                 *fp8Cache // an FP8 cache's (then kCache and vCache are nil)
	qkv, kCache, vCache []uint16
	invFreq             []float32
	dK, dV, dQKV, dFreq cuda.DevPtr
	q, out, ws          cuda.DevPtr
	wsBytes             int
	kv                  KVPtrs
}

// pagedDecodeGraphAt lays g out (seed), captures its decode step after one
// eager step and replays it replays times, comparing the replays whose
// step index compareAt lists (nil: every one), then the view's positions,
// lengths and slots with the twin's KVAdvance.
func (v *Verifier) pagedDecodeGraphAt(m kernels.ModelShape, g pagedGeometry, seed uint64, replays int, compareAt []int) {
	if v.set.Replaces(kernels.OpAttnDecode) || v.set.Replaces(kernels.OpRope) {
		return // an op library (op ABI 1) takes the contiguous layout only
	}
	if _, err := v.set.Selection().DecodeVersion(g.layout(m, seed).a); err != nil {
		return // the selection pins a version that cannot run tabled: neither can a run
	}
	if _, err := v.set.Selection().RopeVersionAt(g.layout(m, seed).a); err != nil {
		return
	}
	s := v.newPagedGraphState(m, g, seed)
	a := s.pv.a
	step := func() error {
		if err := v.set.RopeKVWrite(v.stream, s.q, s.dK, s.dV, s.dQKV, s.dFreq, s.kv, a); err != nil {
			return err
		}
		if err := v.set.Attention(v.stream, s.out, s.q, s.dK, s.dV, s.kv, s.ws, s.wsBytes, a); err != nil {
			return err
		}
		return v.set.AdvanceKV(v.stream, s.kv, a)
	}
	// One eager step (every kernel loaded before the capture), then the
	// view back where it was: the first replay repeats its cache writes.
	v.launch(step)
	v.upload(s.kv.Positions, unsafe.Pointer(&s.pv.positions[0]), 4*a.Batch)
	v.upload(s.kv.SeqLens, unsafe.Pointer(&s.pv.kv.SeqLens[0]), 4*a.Batch)
	v.upload(s.kv.SlotMapping, unsafe.Pointer(&s.pv.slots[0]), 8*a.Batch)
	var exec *cuda.GraphExec
	if v.err == nil {
		exec = v.captureStep(step)
	}
	worst, cmpErr := v.replayPagedGraph(s, exec, replays, compareAt)
	if exec != nil {
		v.fail(exec.Destroy())
	}
	if cmpErr == nil && v.err == nil {
		batch := a.Batch
		cmpErr = errors.Join(equalBits(v.getI32(s.kv.Positions, batch), s.pv.positions),
			equalBits(v.getI32(s.kv.SeqLens, batch), s.pv.kv.SeqLens), equalBits(v.getI64(s.kv.SlotMapping, batch), s.pv.slots))
		if cmpErr != nil {
			cmpErr = fmt.Errorf("the view after %d replays: %w", replays, cmpErr)
		}
	}
	check := "decode graph replay paged"
	if a.Cache.FP8() {
		check += " " + a.Cache.String()
	}
	v.record(check, fmt.Sprintf("%s, %d replays", s.pv.label, replays), worst, false, cmpErr)
}

// newPagedGraphState draws and uploads a graph check's inputs.
func (v *Verifier) newPagedGraphState(m kernels.ModelShape, g pagedGeometry, seed uint64) *pagedGraphState {
	pv := g.layout(m, seed)
	a := pv.a
	s := &pagedGraphState{pv: pv}
	qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	if a.Cache.FP8() {
		s.fp8 = v.pagedCachesFP8(pv, a.Cache)
		s.fp8.upload(v)
		s.dK, s.dV = s.fp8.dK, s.fp8.dV
	} else {
		s.kCache, s.vCache = v.pagedCaches(pv)
		s.dK, s.dV = v.bf16(s.kCache), v.bf16(s.vCache)
	}
	s.qkv = RandomBF16(v.rng, a.Batch*(qWidth+2*kvWidth), 0, 1)
	s.invFreq = ref.RopeInvFreq(a.HeadDim, m.RopeTheta, nil)
	s.dQKV, s.dFreq = v.bf16(s.qkv), v.f32(s.invFreq)
	s.q, s.out = v.alloc(2*a.Batch*qWidth), v.alloc(2*a.Batch*qWidth)
	s.wsBytes = v.set.AttentionWorkspaceBytes(a)
	s.ws = v.alloc(s.wsBytes)
	v.launch(func() error { return v.set.ZeroAttentionWorkspace(v.stream, s.ws, s.wsBytes) })
	s.kv = v.uploadView(pv)
	if s.fp8 != nil {
		s.kv.KScale, s.kv.VScale = s.fp8.dKS, s.fp8.dVS
	}
	return s
}

// replayPagedGraph replays exec replays times, advancing the twins' view
// and caches beside the device's; it returns the worst relative error of
// the compared replays and the first failure.
func (v *Verifier) replayPagedGraph(s *pagedGraphState, exec *cuda.GraphExec, replays int, compareAt []int) (float64, error) {
	pv, a := s.pv, s.pv.a
	qWidth := a.Heads * a.HeadDim
	wantQ, want := make([]uint16, a.Batch*qWidth), make([]uint16, a.Batch*qWidth)
	worst := 0.0
	for r := 0; r < replays && v.err == nil && exec != nil; r++ {
		v.fail(v.stream.Memset16(s.out, poisonBF16, a.Batch*qWidth))
		v.launch(func() error { return exec.Launch(v.stream) })
		if c := s.fp8; c != nil {
			ref.RopeKVWritePagedFP8(wantQ, c.k, c.v, s.qkv, s.invFreq, pv.positions, pv.slots, a.Batch, a.Heads, a.KVHeads, a.HeadDim,
				pv.plan.Slots(), refFormat(a.Cache), c.kScale, c.vScale)
		} else {
			ref.RopeKVWritePaged(wantQ, s.kCache, s.vCache, s.qkv, s.invFreq, pv.positions, pv.slots, a.Batch, a.Heads, a.KVHeads, a.HeadDim, pv.plan.Slots())
		}
		if compareAt == nil || slices.Contains(compareAt, r) {
			if c := s.fp8; c != nil {
				ref.AttentionPagedFP8(want, wantQ, c.k, c.v, pv.kv, a.Heads, a.KVHeads, a.HeadDim, nil, refFormat(a.Cache), c.kScale, c.vScale)
			} else {
				ref.AttentionPaged(want, wantQ, s.kCache, s.vCache, pv.kv, a.Heads, a.KVHeads, a.HeadDim, nil)
			}
			rel, err := closeBF16(v.getBF16(s.out, a.Batch*qWidth), want)
			worst = max(worst, rel)
			if err != nil {
				return worst, fmt.Errorf("replay %d at lengths %v: %w", r, pv.kv.SeqLens, err)
			}
		}
		ref.KVAdvance(pv.positions, pv.kv.SeqLens, pv.slots, pv.plan.Table, nil, a.Batch, pv.plan.PageSize, pv.plan.MaxPages)
	}
	return worst, nil
}

package gpu

import (
	"fmt"
	"slices"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// libGraph is a decode step of op libraries captured once and replayed
// while the view (lengths, positions, slots) moves on in device memory,
// as a served decode step's graph is: the libraries' rope_kv_write and
// attn_decode in the graph, the other one's work (when only one is a
// library's) done by the reference on the host between replays.
type libGraph struct {
	m               kernels.ModelShape
	t               *libKVTable
	rope, attn      bool
	kC, vC, qkv     []uint16
	invFreq         []float32
	dK, dV, dQKV    cuda.DevPtr
	dFreq, dQ, dOut cuda.DevPtr
	wantQ, wantOut  []uint16
	qWidth, kvWidth int
	batch, maxSeq   int
	cachedAt        func(replay int) []int
	worst           float64
	cmpErr          error
}

// libDecodeGraphAt replaces decodeGraphAt when an op library runs
// rope_kv_write or attn_decode (op ABI 2 takes the tabled form only):
// batch sequences at position start, replayed replays times, compared at
// compareAt (nil: every replay), on each layout libLayouts gives; false
// when no library replaces either op.
func (v *Verifier) libDecodeGraphAt(m kernels.ModelShape, batch, start, replays, maxSeq int, compareAt []int) bool {
	rope, attn := v.set.Replaces(kernels.OpRope), v.set.Replaces(kernels.OpAttnDecode)
	if !rope && !attn {
		return false
	}
	op := kernels.OpAttnDecode
	if !attn {
		op = kernels.OpRope
	}
	for _, c := range v.libLayouts(op) {
		if v.dead != nil {
			break
		}
		c.cached, c.newTokens, c.maxSeq = slices.Repeat([]int{start}, batch), slices.Repeat([]int{1}, batch), maxSeq
		g := &libGraph{m: m, rope: rope, attn: attn, batch: batch, maxSeq: maxSeq}
		g.cachedAt = func(r int) []int { return slices.Repeat([]int{start + r}, batch) }
		v.libGraphRun(g, c, start, replays, compareAt)
	}
	return true
}

// libGraphRun captures g's step after one eager step and replays it.
func (v *Verifier) libGraphRun(g *libGraph, c libKVCase, start, replays int, compareAt []int) {
	m := g.m
	g.t = v.layOut(m, c, slices.Repeat([]int{g.maxSeq}, g.batch)) // pages for every step of the run
	a := g.t.a
	g.qWidth, g.kvWidth = a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	g.kC, g.vC = RandomBF16(v.rng, a.CacheSlots()*g.kvWidth, 0, 1), RandomBF16(v.rng, a.CacheSlots()*g.kvWidth, 0, 1)
	g.qkv = RandomBF16(v.rng, g.batch*(g.qWidth+2*g.kvWidth), 0, 1)
	g.invFreq = ref.RopeInvFreq(a.HeadDim, ropeTheta(m), nil)
	g.dK, g.dV, g.dQKV, g.dFreq = v.bf16(g.kC), v.bf16(g.vC), v.bf16(g.qkv), v.f32(g.invFreq)
	g.dQ, g.dOut = v.alloc(2*g.batch*g.qWidth), v.alloc(2*g.batch*g.qWidth)
	for _, op := range []string{kernels.OpRope, kernels.OpAttnDecode} {
		v.launch(func() error { return v.set.planLib(v.stream, op, g.t.host, a, cuda.OpPhaseDecode, false, cuda.OpKVNHD) })
	}
	step := func() error {
		if g.rope {
			if _, err := v.set.libRopeKVWrite(v.stream, g.dQ, g.dK, g.dV, g.dQKV, g.dFreq, g.t.ptrs, a); err != nil {
				return err
			}
		}
		if g.attn {
			_, err := v.set.libAttention(v.stream, g.dOut, g.dQ, g.dK, g.dV, g.t.ptrs, a)
			return err
		}
		return nil
	}
	// One eager step first (lazy module loading), at the first replay's
	// view: its writes are the ones the first replay repeats.
	v.prepareReplay(g, 0)
	v.launch(step)
	var exec *cuda.GraphExec
	if v.err == nil {
		exec = v.captureStep(step)
	}
	for r := 0; r < replays && v.err == nil && g.cmpErr == nil; r++ {
		v.prepareReplay(g, r)
		if v.err == nil {
			v.fail(v.stream.Memset16(g.dOut, poisonBF16, g.batch*g.qWidth))
		}
		v.launch(func() error { return exec.Launch(v.stream) })
		if compareAt == nil || slices.Contains(compareAt, start+r) {
			v.compareReplay(g, r)
		}
	}
	if exec != nil {
		v.fail(exec.Destroy())
	}
	check := "decode graph replay" + v.set.libLabel(kernels.OpAttnDecode) + v.set.libLabel(kernels.OpRope)
	v.record(check, fmt.Sprintf("%s, replays of positions %d..%d", g.t.label, start, start+replays-1), g.worst, false, g.cmpErr)
}

// prepareReplay moves the device view to replay r (as the engine's
// kv_advance would) and runs, on the host, the reference of the op no
// library replaces: rope_kv_write's q and new cache rows uploaded, or the
// new rows the library's rope will write mirrored into the host caches.
func (v *Verifier) prepareReplay(g *libGraph, r int) {
	t := g.t
	t.setView(g.cachedAt(r), slices.Repeat([]int{1}, g.batch), 0)
	v.uploadLibView(t)
	a := t.a
	g.wantQ = make([]uint16, g.batch*g.qWidth)
	ref.RopeKVWritePaged(g.wantQ, g.kC, g.vC, g.qkv, g.invFreq, t.positions, t.slots, g.batch, a.Heads, a.KVHeads, a.HeadDim, a.CacheSlots())
	if g.rope {
		return
	}
	v.upload(g.dQ, unsafe.Pointer(&g.wantQ[0]), 2*len(g.wantQ))
	for _, s := range t.slots {
		at := int(s) * g.kvWidth
		v.upload(g.dK+cuda.DevPtr(2*at), unsafe.Pointer(&g.kC[at]), 2*g.kvWidth)
		v.upload(g.dV+cuda.DevPtr(2*at), unsafe.Pointer(&g.vC[at]), 2*g.kvWidth)
	}
}

// compareReplay compares replay r with the reference: the attention
// output when a library runs attention, else rope's q and new rows.
func (v *Verifier) compareReplay(g *libGraph, r int) {
	t, a := g.t, g.t.a
	var rel float64
	var err error
	if g.attn {
		pk := t.pk
		want := make([]uint16, g.batch*g.qWidth)
		ref.AttentionPaged(want, g.wantQ, g.kC, g.vC, pk, a.Heads, a.KVHeads, a.HeadDim, nil)
		rel, err = closeBF16(v.getBF16(g.dOut, len(want)), want)
	} else { // rope alone: q, and the new rows (the others are the rope case's check)
		rel, err = closeBF16(v.getBF16(g.dQ, len(g.wantQ)), g.wantQ)
		kRel, kErr := closeBF16(pickSlots(v.getBF16(g.dK, len(g.kC)), t.slots, g.kvWidth), pickSlots(g.kC, t.slots, g.kvWidth))
		vErr := equalBits(pickSlots(v.getBF16(g.dV, len(g.vC)), t.slots, g.kvWidth), pickSlots(g.vC, t.slots, g.kvWidth))
		rel = max(rel, kRel)
		if kErr != nil || vErr != nil {
			err = fmt.Errorf("q: %v; new k rows: %v; new v rows: %v", err, kErr, vErr)
		}
	}
	g.worst = max(g.worst, rel)
	if err != nil {
		g.cmpErr = fmt.Errorf("replay %d (sequences at %v): %w", r, g.cachedAt(r), err)
	}
}

// pickSlots gathers the cache rows at slots (padding's skipped).
func pickSlots(cache []uint16, slots []int64, width int) []uint16 {
	var out []uint16
	for _, s := range slots {
		if s >= 0 {
			out = append(out, cache[int(s)*width:int(s+1)*width]...)
		}
	}
	return out
}

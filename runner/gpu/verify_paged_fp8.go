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

// The FP8 cache's kernels (rope_kv_write 4, attn_prefill 5, attn_decode 7)
// against ref.RopeKVWritePagedFP8 and ref.AttentionPagedFP8, in E4M3 and
// E5M2, on the block table's geometries (a subset of the bf16 checks':
// pages of 16 and 24 shuffled, of 1, the contiguous layout's one page per
// sequence) and, at Llama-3-8B's heads, at contexts of 1k and 8k tokens.
// K and V scales differ per KV head and from each other (fp8Scales), so a
// kernel that applies K's scale to V, or one KV head's to another, fails.
// Every slot no sequence holds holds the format's largest finite byte
// (fp8Poison): a kernel that reads one is far off the twin.

// fp8Formats are the FP8 caches' formats verify checks.
var fp8Formats = []kernels.CacheDType{kernels.CacheE4M3, kernels.CacheE5M2}

// refFormat is the twin's name of an FP8 cache's format.
func refFormat(c kernels.CacheDType) ref.FP8Cache {
	if c == kernels.CacheE5M2 {
		return ref.CacheE5M2
	}
	return ref.CacheE4M3
}

// fp8Poison is the byte of every slot no sequence holds: the format's
// largest finite value (448 in E4M3, 57344 in E5M2), not a NaN code (the
// kernels widen bytes with integer operations: a NaN code widens to a
// finite value), so a read of one swamps the softmax.
func fp8Poison(c kernels.CacheDType) uint8 {
	if c == kernels.CacheE5M2 {
		return 0x7b
	}
	return 0x7e
}

// fp8Scales are a layer's K and V scales of kvHeads heads: every head's
// differs from the others' and K's from V's, their ratio too.
func fp8Scales(kvHeads int) (k, v []float32) {
	k, v = make([]float32, kvHeads), make([]float32, kvHeads)
	for g := range kvHeads {
		k[g] = (1 + 0.5*float32(g)) / 64
		v[g] = (1 + 0.25*float32(kvHeads-1-g)) / 24
	}
	return k, v
}

// fp8PagedDecodeGeometries and fp8PagedPrefillGeometries are the bf16
// checks' geometries the FP8 checks take (the emulated device is slow).
var (
	fp8PagedDecodeGeometries  = []pagedGeometry{pagedDecodeGeometries[0], pagedDecodeGeometries[1], pagedDecodeGeometries[3], pagedDecodeGeometries[4]}
	fp8PagedPrefillGeometries = []pagedGeometry{pagedPrefillGeometries[0], pagedPrefillGeometries[2], pagedPrefillGeometries[4]}
	// fp8LongGeometries are contexts of 1k and 8k tokens (Llama-3-8B's
	// heads only): a decode step after them, and a chunked prefill of 24
	// and 12 tokens over them.
	fp8LongGeometries = []pagedGeometry{
		{kv: pages(16, runner.PagesShuffled), ctx: []int{1023, 8191, 5}, qLens: []int{1, 1, 1}},
		{kv: pages(16, runner.PagesShuffled), ctx: []int{1000, 8180}, qLens: []int{24, 12}},
	}
)

// isLlama3_8BHeads reports whether m has Llama-3-8B's attention heads.
func isLlama3_8BHeads(m kernels.ModelShape) bool {
	return m.Heads == 32 && m.KVHeads == 8 && m.HeadDim == 128
}

// fp8Cache is one view's FP8 caches, host and device, and its scales.
type fp8Cache struct {
	format         kernels.CacheDType
	k, v           []uint8
	kScale, vScale []float32
	dK, dV         cuda.DevPtr
	dKS, dVS       cuda.DevPtr
}

// pagedCachesFP8 draws a view's FP8 caches: bf16 draws quantized by each KV
// head's scale at every slot a sequence holds, fp8Poison elsewhere.
func (v *Verifier) pagedCachesFP8(pv *pagedView, format kernels.CacheDType) *fp8Cache {
	a := pv.a
	kvWidth := a.KVHeads * a.HeadDim
	n := pv.plan.Slots() * kvWidth
	c := &fp8Cache{format: format, k: make([]uint8, n), v: make([]uint8, n)}
	c.kScale, c.vScale = fp8Scales(a.KVHeads)
	f := refFormat(format)
	for i := range c.k {
		c.k[i], c.v[i] = fp8Poison(format), fp8Poison(format)
	}
	for b, l := range a.SeqLens {
		for j := range l {
			at := int(pv.plan.Slot(b, j)) * kvWidth
			ks, vs := RandomBF16(v.rng, kvWidth, 0, 1), RandomBF16(v.rng, kvWidth, 0, 1)
			for i := range kvWidth {
				g := i / a.HeadDim
				c.k[at+i] = f.Quantize(ref.BF16ToF32(ks[i]), c.kScale[g])
				c.v[at+i] = f.Quantize(ref.BF16ToF32(vs[i]), c.vScale[g])
			}
		}
	}
	return c
}

// upload puts the caches and scales on the device.
func (c *fp8Cache) upload(v *Verifier) {
	c.dK, c.dV, c.dKS, c.dVS = v.u8(c.k), v.u8(c.v), v.f32(c.kScale), v.f32(c.vScale)
}

// u8 uploads bytes.
func (v *Verifier) u8(data []uint8) cuda.DevPtr {
	p := v.alloc(len(data))
	if len(data) > 0 {
		v.upload(p, unsafe.Pointer(&data[0]), len(data))
	}
	return p
}

func (v *Verifier) getU8(p cuda.DevPtr, n int) []uint8 {
	out := make([]uint8, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, n)
	}
	return out
}

// fp8Label names a check of an FP8 cache: "attention decode v7 paged fp8_e4m3".
func fp8Label(check string, ver int, format kernels.CacheDType) string {
	return fmt.Sprintf("%s paged %s", versioned(check, ver), format)
}

// verifyPagedAttentionsFP8 checks the FP8 cache's attention at m's heads
// in both formats over the FP8 geometries (the long ones at Llama-3-8B's
// heads with --long or --check paged_fp8: 3.5 CPU-minutes on the emulated
// device, too slow for every verify the tests run).
func (v *Verifier) verifyPagedAttentionsFP8(m kernels.ModelShape) {
	geoms := slices.Concat(fp8PagedDecodeGeometries, fp8PagedPrefillGeometries)
	if isLlama3_8BHeads(m) && (v.long || slices.Contains(v.only, "paged_fp8")) {
		geoms = append(geoms, fp8LongGeometries...)
	}
	for _, format := range fp8Formats {
		for i, g := range geoms {
			if v.dead == nil {
				g.kv.DType = format
				v.verifyPagedAttentionFP8(g.layout(m, uint64(i+1)))
			}
		}
	}
}

// verifyPagedAttentionFP8 checks attn_decode 7 or attn_prefill 5 at a view
// against ref.AttentionPagedFP8.
func (v *Verifier) verifyPagedAttentionFP8(pv *pagedView) {
	a := pv.a
	op, name := kernels.OpAttnPrefill, "attention prefill"
	if tabledDecode(a) {
		op, name = kernels.OpAttnDecode, "attention decode"
	}
	ver := v.fp8Version(op)
	if ver == 0 || v.set.Replaces(op) {
		return // another version pinned, or an op library (checked by its own cases)
	}
	set := v.pinned(op, ver)
	if _, err := pickFor(set, op, a); err != nil {
		return
	}
	got, want := v.runPagedAttentionFP8(set, pv, nil)
	rel, err := closeBF16(got, want)
	v.record(fp8Label(name, ver, a.Cache), pv.label, rel, false, err)
}

// runPagedAttentionFP8 is runPagedAttention on an FP8 cache.
func (v *Verifier) runPagedAttentionFP8(set *Kernels, pv *pagedView, tokens []int) (got, want []uint16) {
	a := pv.a
	width := a.Heads * a.HeadDim
	T := a.Tokens()
	q := RandomBF16(v.rng, T*width, 0, 1)
	c := v.pagedCachesFP8(pv, a.Cache)
	want = make([]uint16, T*width)
	ref.AttentionPagedFP8(want, q, c.k, c.v, pv.kv, a.Heads, a.KVHeads, a.HeadDim, tokens, refFormat(a.Cache), c.kScale, c.vScale)
	wsBytes := set.AttentionWorkspaceBytes(a)
	var ws cuda.DevPtr
	if wsBytes > 0 {
		ws = v.alloc(wsBytes)
		v.launch(func() error { return set.ZeroAttentionWorkspace(v.stream, ws, wsBytes) })
	}
	out := v.poisoned(T * width)
	c.upload(v)
	dQ, kv := v.bf16(q), v.uploadView(pv)
	kv.KScale, kv.VScale = c.dKS, c.dVS
	v.launch(func() error { return set.Attention(v.stream, out, dQ, c.dK, c.dV, kv, ws, wsBytes, a) })
	v.modelBytes = costBytes("attention", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Attention(b(1), b(1), b(1), b(1), runner.KVView{}, a)
	})
	return v.getBF16(out, T*width), want
}

// verifyPagedRopesFP8 checks rope_kv_write 4 at m over the FP8 prefill
// geometries and a decode one, in both formats, the first with a padding
// token.
func (v *Verifier) verifyPagedRopesFP8(m kernels.ModelShape) {
	ver := v.fp8Version(kernels.OpRope)
	if ver == 0 || v.set.Replaces(kernels.OpRope) || m.HeadDim%16 != 0 || m.HeadDim > kernels.RopeMaxHeadDim {
		return
	}
	set := v.pinned(kernels.OpRope, ver)
	for _, format := range fp8Formats {
		for i, g := range append(slices.Clone(fp8PagedPrefillGeometries), fp8PagedDecodeGeometries[0]) {
			g.kv.DType = format
			pv := g.layout(m, uint64(i+1))
			if i == 0 {
				pv.slots[len(pv.slots)-1] = -1 // a padding token
				pv.label += " (last token padding: slot -1)"
			}
			if v.dead == nil {
				v.verifyPagedRopeFP8At(set, fp8Label("rope_kv_write", ver, format), m, pv)
			}
		}
	}
}

// verifyPagedRopeFP8At checks one view: q within the bound, the written K
// rows' values (bytes times scale) within the bound (the rotation's sincosf
// may differ from Go's by an ulp, which can move a byte one code), the
// written V bytes exact, every other byte untouched.
func (v *Verifier) verifyPagedRopeFP8At(set *Kernels, check string, m kernels.ModelShape, pv *pagedView) {
	a := pv.a
	T, qWidth, kvWidth := a.Tokens(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qkv := RandomBF16(v.rng, T*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, m.RopeTheta, nil)
	c := v.pagedCachesFP8(pv, a.Cache)
	f := refFormat(a.Cache)
	wantK, wantV, wantQ := slices.Clone(c.k), slices.Clone(c.v), make([]uint16, T*qWidth)
	ref.RopeKVWritePagedFP8(wantQ, wantK, wantV, qkv, invFreq, pv.positions, pv.slots, T, a.Heads, a.KVHeads, a.HeadDim,
		pv.plan.Slots(), f, c.kScale, c.vScale)
	orig := &fp8Cache{k: slices.Clone(c.k), v: slices.Clone(c.v)}
	for _, s := range pv.slots { // poison exactly the rows the kernel writes
		if s >= 0 {
			for i := int(s) * kvWidth; i < int(s+1)*kvWidth; i++ {
				c.k[i], c.v[i] = 0xff, 0xff
			}
		}
	}
	c.upload(v)
	q, dQKV, dFreq, kv := v.poisoned(T*qWidth), v.bf16(qkv), v.f32(invFreq), v.uploadView(pv)
	kv.KScale, kv.VScale = c.dKS, c.dVS
	v.launch(func() error { return set.RopeKVWrite(v.stream, q, c.dK, c.dV, dQKV, dFreq, kv, a) })
	rel, err := closeBF16(v.getBF16(q, T*qWidth), wantQ)
	gotK, gotV := v.getU8(c.dK, len(c.k)), v.getU8(c.dV, len(c.v))
	written := map[int64]bool{}
	for _, s := range pv.slots {
		if s < 0 {
			continue
		}
		written[s] = true
		lo, hi := int(s)*kvWidth, int(s+1)*kvWidth
		got, want := make([]float32, kvWidth), make([]float32, kvWidth)
		for i := range kvWidth {
			sc := c.kScale[i/a.HeadDim]
			got[i], want[i] = f.Value(gotK[lo+i])*sc, f.Value(wantK[lo+i])*sc
		}
		kRel, kErr := ref.RelErr(got, want)
		if kErr == nil && kRel > MaxRelErrBF16 {
			kErr = fmt.Errorf("relative error %.3g > %g", kRel, MaxRelErrBF16)
		}
		rel = max(rel, kRel)
		if kErr != nil {
			err = errors.Join(err, fmt.Errorf("k row of slot %d: %w", s, kErr))
		}
		if vErr := equalBits(gotV[lo:hi], wantV[lo:hi]); vErr != nil {
			err = errors.Join(err, fmt.Errorf("v row of slot %d: %w", s, vErr))
		}
	}
	for s := range int64(pv.plan.Slots()) {
		lo, hi := int(s)*kvWidth, int(s+1)*kvWidth
		if !written[s] && (!slices.Equal(gotK[lo:hi], orig.k[lo:hi]) || !slices.Equal(gotV[lo:hi], orig.v[lo:hi])) {
			err = errors.Join(err, fmt.Errorf("slot %d, which no token of the step maps to, was written", s))
			break
		}
	}
	v.record(check, pv.label, rel, false, err)
}

// libFP8Formats are the FP8 formats op's library takes: those its caps
// declare, from a library built for op ABI 2.1 or later (the first to pass
// the scales).
func (v *Verifier) libFP8Formats(op string) []kernels.CacheDType {
	o := v.set.opLib(op)
	if o == nil || o.Library().ABI&0xffff < 1 {
		return nil
	}
	var out []kernels.CacheDType
	for _, f := range fp8Formats {
		if o.Caps().DTypes&opKVDType(f) != 0 {
			out = append(out, f)
		}
	}
	return out
}

// verifyLibKVSuiteFP8 checks the KV ops' libraries that declare an FP8
// cache against ref.RopeKVWritePagedFP8 and ref.AttentionPagedFP8 in each
// format they declare, at the suite's page sizes (shuffled): decode over
// lengths 1, a page, a page and one and three pages; prefill of 1, 7 and
// page+3 tokens over a page, none and two pages less three; rope over the
// prefill with its last token padding; fp8Scales's differing K and V
// scales throughout.
func (v *Verifier) verifyLibKVSuiteFP8(m kernels.ModelShape, extraPageSizes []int) {
	for _, op := range []string{kernels.OpRope, kernels.OpAttnDecode, kernels.OpAttnPrefill} {
		check := map[string]string{kernels.OpRope: "rope_kv_write", kernels.OpAttnDecode: "attention decode", kernels.OpAttnPrefill: "attention prefill"}[op]
		if !v.set.Replaces(op) || !v.wants(map[bool]string{true: "rope_kv_write", false: "attention"}[op == kernels.OpRope]) {
			continue
		}
		for _, format := range v.libFP8Formats(op) {
			for _, ps := range v.libSuitePageSizes(op, extraPageSizes) {
				decode := pagedGeometry{kv: pages(ps, runner.PagesShuffled), ctx: []int{0, ps - 1, ps, 3*ps - 1}, qLens: []int{1, 1, 1, 1}}
				prefill := pagedGeometry{kv: pages(ps, runner.PagesShuffled), ctx: []int{ps, 0, max(0, 2*ps-3)}, qLens: []int{1, 7, ps + 3}}
				geoms := []pagedGeometry{decode}
				switch op {
				case kernels.OpAttnPrefill:
					geoms = []pagedGeometry{prefill}
				case kernels.OpRope:
					geoms = append(geoms, prefill)
				}
				for i, g := range geoms {
					if v.dead != nil {
						return
					}
					g.kv.DType = format
					pv := g.layout(m, uint64(i+1))
					name := check + v.set.libLabel(op) + " paged " + format.String()
					if op == kernels.OpRope {
						if i == 1 {
							pv.slots[len(pv.slots)-1] = -1
							pv.label += " (last token padding: slot -1)"
						}
						v.verifyPagedRopeFP8At(v.set, name, m, pv)
						continue
					}
					got, want := v.runPagedAttentionFP8(v.set, pv, nil)
					rel, err := closeBF16(got, want)
					v.record(name, pv.label, rel, false, err)
				}
			}
		}
	}
}

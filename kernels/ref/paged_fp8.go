// paged_fp8.go is the twin of the FP8 KV cache's kernels
// (kernels/paged_attention.cu: rope_kv_write 4, attn_prefill 5,
// attn_decode 7): pages of FP8 bytes with per-layer K and V scales of one
// float per KV head, as vLLM's reshape_and_cache_flash writes them and
// FlashInfer's and FlashAttention's kernels read them.
//
// Write: stored = sat_rne(x / scale), x the bf16 value the bf16 cache
// would hold (K after its rotation), divided in float32 (IEEE division, not
// a multiplication by the inverse), rounded to nearest even and saturated
// to the format's largest finite value (cvt.rn.satfinite).
//
// Read, FlashInfer's way: the K scale folds into the softmax scale and the
// V scale multiplies the output, so the inner loops widen bytes only:
//
//	score_j = (Σ_d q_d · k_jd) · (1/√D · kScale[g])
//	out_d   = bf16((Σ_j p_j · v_jd) · vScale[g])
//
// with k_jd and v_jd the FP8 bytes' exact values and g the KV head.

package ref

import "math"

// E5M2 is OCP FP8 E5M2 (torch.float8_e5m2): 1 sign, 5 exponent (bias 15)
// and 2 mantissa bits, infinities and NaNs as IEEE half's, the largest
// finite value 57344, subnormals down to 2^-16.
const (
	// E5M2Max is E5M2's largest finite value.
	E5M2Max = 57344
	// E5M2NaN is the NaN the conversion writes.
	E5M2NaN = 0x7f
)

// E5M2ToF32 widens an E5M2 bit pattern to float32 (exact).
func E5M2ToF32(b uint8) float32 { return e5m2Table[b] }

var e5m2Table = func() (t [256]float32) {
	for b := range t {
		t[b] = e5m2Value(uint8(b))
	}
	return t
}()

// e5m2Value decodes one E5M2 bit pattern by its definition.
func e5m2Value(b uint8) float32 {
	exp, mant := int(b>>2)&0x1f, int(b&3)
	var v float64
	switch {
	case exp == 0:
		v = float64(mant) / 65536 // 2^-14 · mant/4
	case exp == 31 && mant == 0:
		v = math.Inf(1)
	case exp == 31:
		v = math.NaN()
	default:
		v = math.Ldexp(1+float64(mant)/4, exp-15)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// F32ToE5M2 rounds a float32 to E5M2 to nearest even, saturating to
// ±57344 (infinity included); NaN becomes E5M2NaN. This is PTX's
// cvt.rn.satfinite.e5m2x2.f32, what vLLM's fp8_e5m2 cache writes.
func F32ToE5M2(f float32) uint8 { return F64ToE5M2(float64(f)) }

// F64ToE5M2 is F32ToE5M2 of a float64, rounded once.
func F64ToE5M2(a float64) uint8 {
	if a != a {
		return E5M2NaN
	}
	var sign uint8
	if math.Signbit(a) {
		sign, a = 0x80, -a
	}
	if a >= E5M2Max {
		return sign | 0x7b
	}
	if a < 1.0/16384 { // subnormal range: multiples of 2^-16
		return sign | uint8(math.RoundToEven(a*65536))
	}
	frac, exp := math.Frexp(a)
	e := exp - 1
	m := math.RoundToEven((2*frac - 1) * 4)
	if m == 4 {
		m, e = 0, e+1
	}
	if e+15 > 30 {
		return sign | 0x7b
	}
	return sign | uint8(e+15)<<2 | uint8(m)
}

// FP8Cache names the byte format of an FP8 KV cache.
type FP8Cache uint8

// The FP8 caches' formats.
const (
	CacheE4M3 FP8Cache = iota
	CacheE5M2
)

// table is the format's 256 values.
func (f FP8Cache) table() *[256]float32 {
	if f == CacheE5M2 {
		return &e5m2Table
	}
	return &e4m3Table
}

// Quantize is one cached element: sat_rne(x / scale) in the format.
func (f FP8Cache) Quantize(x, scale float32) uint8 {
	if f == CacheE5M2 {
		return F32ToE5M2(x / scale)
	}
	return F32ToE4M3(x / scale)
}

// Value widens a cached byte (its scale not applied).
func (f FP8Cache) Value(b uint8) float32 { return f.table()[b] }

// RopeKVWritePagedFP8 is RopeKVWritePaged into FP8 caches: q is rotated as
// there (bf16), and each token's rotated K row and its V row, rounded to
// bf16 as the bf16 cache would hold them, are quantized by their KV head's
// scale (kScale, vScale: [kvHeads]) into its slot.
//
// Preconditions: RopeKVWritePaged's, and every scale positive and finite.
func RopeKVWritePagedFP8(q []uint16, kCache, vCache []uint8, qkv []uint16, invFreq []float32, positions []int32, slots []int64,
	tokens, heads, kvHeads, headDim, numSlots int, f FP8Cache, kScale, vScale []float32) {
	const op = "RopeKVWritePagedFP8"
	needShape(op, tokens >= 0 && heads >= 1 && kvHeads >= 1 && headDim >= 0 && headDim%2 == 0 && numSlots >= 0,
		"bad shape tokens %d heads %d kvHeads %d headDim %d slots %d", tokens, heads, kvHeads, headDim, numSlots)
	kvWidth := kvHeads * headDim
	needLen(op, "kCache", len(kCache), numSlots*kvWidth)
	needLen(op, "vCache", len(vCache), numSlots*kvWidth)
	needScales(op, kScale, vScale, kvHeads)
	// The bf16 write into a scratch cache of the step's own slots, then the
	// quantization of each written row: the rotation stays RopeKVWritePaged's.
	needLen(op, "slots", len(slots), tokens)
	scratchK := make([]uint16, tokens*kvWidth)
	scratchV := make([]uint16, tokens*kvWidth)
	local := make([]int64, tokens)
	for t := range tokens {
		local[t] = int64(t)
		if slots[t] < 0 {
			local[t] = -1
		}
		needShape(op, slots[t] < int64(numSlots), "token %d: slot %d of %d", t, slots[t], numSlots)
	}
	RopeKVWritePaged(q, scratchK, scratchV, qkv, invFreq, positions, local, tokens, heads, kvHeads, headDim, tokens)
	for t := range tokens {
		if slots[t] < 0 {
			continue
		}
		dst := int(slots[t]) * kvWidth
		for g := range kvHeads {
			for d := range headDim {
				i := g*headDim + d
				kCache[dst+i] = f.Quantize(BF16ToF32(scratchK[t*kvWidth+i]), kScale[g])
				vCache[dst+i] = f.Quantize(BF16ToF32(scratchV[t*kvWidth+i]), vScale[g])
			}
		}
	}
}

// AttentionPagedFP8 is AttentionPaged over FP8 caches, reading them as
// the file's comment says (the K scale in the softmax scale, the V scale on
// the output).
func AttentionPagedFP8(out, q []uint16, kCache, vCache []uint8, kv PagedKV, heads, kvHeads, headDim int, tokens []int,
	f FP8Cache, kScale, vScale []float32) {
	const op = "AttentionPagedFP8"
	needShape(op, kvHeads >= 1 && heads >= kvHeads && heads%kvHeads == 0 && headDim >= 1,
		"bad shape heads %d kvHeads %d headDim %d", heads, kvHeads, headDim)
	if err := kv.Check(); err != nil {
		needShape(op, false, "%v", err)
	}
	T := kv.Tokens()
	qWidth, kvWidth := heads*headDim, kvHeads*headDim
	needLen(op, "q", len(q), T*qWidth)
	needLen(op, "out", len(out), T*qWidth)
	slots := kv.NumPages * kv.PageSize
	needLen(op, "kCache", len(kCache), slots*kvWidth)
	needLen(op, "vCache", len(vCache), slots*kvWidth)
	needScales(op, kScale, vScale, kvHeads)
	if tokens == nil {
		tokens = make([]int, T)
		for t := range tokens {
			tokens[t] = t
		}
	}
	seqOf := kv.sequenceOf()
	maxLen := 0
	for b := range kv.Batch() {
		maxLen = max(maxLen, int(kv.SeqLens[b]))
	}
	var a attender
	a.init(heads, kvHeads, headDim, maxLen)
	rows := make([]int, maxLen)
	rowsOf := -1
	values := f.table()
	for _, t := range tokens {
		needShape(op, t >= 0 && t < T, "token %d outside [0, %d)", t, T)
		b := seqOf[t]
		if b != rowsOf {
			for j := range int(kv.SeqLens[b]) {
				rows[j] = int(kv.Slot(b, j)) * kvWidth
			}
			rowsOf = b
		}
		qLen := int(kv.QueryStart[b+1] - kv.QueryStart[b])
		p := int(kv.SeqLens[b]) - qLen + (t - int(kv.QueryStart[b]))
		a.tokenFP8(out[t*qWidth:(t+1)*qWidth], q[t*qWidth:(t+1)*qWidth], kCache, vCache, rows[:p+1], values, kScale, vScale)
	}
}

// tokenFP8 is token over FP8 caches (values: the format's table).
func (a *attender) tokenFP8(out, q []uint16, kCache, vCache []uint8, rows []int, values *[256]float32, kScale, vScale []float32) {
	headDim := a.headDim
	groupSize := a.heads / a.kvHeads
	if cap(a.scores) < len(rows) {
		a.scores = make([]float32, len(rows))
	}
	scores := a.scores[:len(rows)]
	for h := 0; h < a.heads; h++ {
		ToF32(a.query, q[h*headDim:(h+1)*headDim])
		g := h / groupSize
		kvOffset := g * headDim
		scale := a.scale * kScale[g]

		maxScore := float32(math.Inf(-1))
		for j, r := range rows {
			k := kCache[r+kvOffset:][:headDim]
			var dot float32
			for d, qd := range a.query {
				dot += qd * values[k[d]]
			}
			scores[j] = dot * scale
			maxScore = max(maxScore, scores[j])
		}
		var sum float32
		for j := range scores {
			scores[j] = float32(math.Exp(float64(scores[j] - maxScore)))
			sum += scores[j]
		}

		clear(a.acc)
		for j, r := range rows {
			prob := scores[j] / sum
			v := vCache[r+kvOffset:][:headDim]
			for d := range a.acc {
				a.acc[d] += prob * values[v[d]]
			}
		}
		for d := range a.acc {
			a.acc[d] *= vScale[g]
		}
		ToBF16(out[h*headDim:(h+1)*headDim], a.acc)
	}
}

// needScales checks an FP8 cache's scales: one positive finite float per
// KV head for K and for V.
func needScales(op string, kScale, vScale []float32, kvHeads int) {
	needLen(op, "kScale", len(kScale), kvHeads)
	needLen(op, "vScale", len(vScale), kvHeads)
	for g := range kvHeads {
		for _, s := range []float32{kScale[g], vScale[g]} {
			needShape(op, s > 0 && !math.IsInf(float64(s), 0), "KV head %d: scale %v (want positive and finite)", g, s)
		}
	}
}

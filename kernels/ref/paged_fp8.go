// paged_fp8.go holds what the twins of the FP8 KV cache's kernels share
// (the twins themselves sit in the files named as their kernels' sources:
// ref/rope.go's RopeKVWritePagedFP8 for rope.cu's rope_kv_write 4,
// ref/paged_attention.go's AttentionPagedFP8 for paged_attention.cu's
// attn_prefill 5 and attn_decode 7): pages of FP8 bytes with per-layer K and V scales of one
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

// rope.go is the twin of kernels/rope.cu: RoPE fused with the KV-cache write.

package ref

import "math"

// Llama3Scaling is rope_scaling of type "llama3" (Llama 3.1 and later):
// frequencies whose wavelength exceeds the original context are slowed down
// by Factor, high ones kept, and the band between them interpolated.
type Llama3Scaling struct {
	Factor               float64
	LowFreqFactor        float64
	HighFreqFactor       float64
	OriginalMaxPositions int
}

// RopeInvFreq returns the headDim/2 RoPE inverse frequencies
// inv_freq[i] = 1 / theta^(2i/headDim), rounded to float32 as HF stores them,
// then, when s is non-nil, adjusted as transformers' _compute_llama3_parameters:
//
//	wavelen = 2π / inv_freq
//	wavelen > orig/LowFreqFactor   → inv_freq / Factor          (low frequency)
//	wavelen < orig/HighFreqFactor  → inv_freq                   (high frequency)
//	otherwise smooth = (orig/wavelen − LowFreqFactor) / (HighFreqFactor − LowFreqFactor)
//	          → (1−smooth)·inv_freq/Factor + smooth·inv_freq    (medium)
//
// The adjustment is computed in float64 and rounded to float32 once.
//
// Precondition: headDim >= 0 (an odd headDim drops its last dimension, as HF's arange does).
func RopeInvFreq(headDim int, theta float64, s *Llama3Scaling) []float32 {
	needShape("RopeInvFreq", headDim >= 0, "headDim %d < 0", headDim)
	invFreq := make([]float32, headDim/2)
	for i := range invFreq {
		base := float64(float32(1 / math.Pow(theta, float64(2*i)/float64(headDim))))
		if s != nil {
			base = llama3Adjust(base, s)
		}
		invFreq[i] = float32(base)
	}
	return invFreq
}

// llama3Adjust applies the llama3 rope_scaling rule to one inverse frequency.
func llama3Adjust(invFreq float64, s *Llama3Scaling) float64 {
	orig := float64(s.OriginalMaxPositions)
	lowFreqWavelen := orig / s.LowFreqFactor
	highFreqWavelen := orig / s.HighFreqFactor
	wavelen := 2 * math.Pi / invFreq
	switch {
	case wavelen > lowFreqWavelen:
		return invFreq / s.Factor
	case wavelen < highFreqWavelen:
		return invFreq
	default:
		smooth := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
		return (1-smooth)*invFreq/s.Factor + smooth*invFreq
	}
}

// RopeKVWrite applies rotate-half RoPE to q and k and writes k and v into the
// KV cache. qkv is the fused projection [T, (H+2*KV)*D], T = batch*seqLen; row
// t = b*seqLen+s is token s of sequence b at position p = startPos+s and holds
// the q heads (H*D), then the k heads (KV*D), then the v heads (KV*D).
//
// For a head vector x of length D, half = D/2, i < half, every op in bf16 as
// HF's q*cos + rotate_half(q)*sin:
//
//	angle = float32(p) * invFreq[i]                  (float32 product)
//	c, sn = bf16(cos(angle)), bf16(sin(angle))       (float64 cos/sin of the float32 angle)
//	out[i]      = bf16( bf16(x[i]*c)      + bf16(-x[i+half]*sn) )
//	out[i+half] = bf16( bf16(x[i+half]*c) + bf16( x[i]*sn) )
//
// Rotated q goes to q [T, H*D]. Rotated k and raw v go to kCache and vCache,
// each [batch][maxSeq][KV][D]: element (b, p, h, d) at ((b*maxSeq+p)*KV+h)*D+d.
//
// Preconditions: headDim even, heads and kvHeads >= 1, startPos >= 0,
// startPos+seqLen <= maxSeq, len(invFreq) >= headDim/2, and every slice as
// long as its shape above.
func RopeKVWrite(q, kCache, vCache, qkv []uint16, invFreq []float32, batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq int) {
	const op = "RopeKVWrite"
	needShape(op, batch >= 0 && seqLen >= 0 && startPos >= 0 && heads >= 1 && kvHeads >= 1 &&
		headDim >= 0 && headDim%2 == 0 && startPos+seqLen <= maxSeq,
		"bad shape batch %d seqLen %d startPos %d heads %d kvHeads %d headDim %d maxSeq %d",
		batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq)
	tokens := batch * seqLen
	qWidth, kvWidth := heads*headDim, kvHeads*headDim
	rowWidth := qWidth + 2*kvWidth
	half := headDim / 2
	needLen(op, "qkv", len(qkv), tokens*rowWidth)
	needLen(op, "q", len(q), tokens*qWidth)
	needLen(op, "kCache", len(kCache), batch*maxSeq*kvWidth)
	needLen(op, "vCache", len(vCache), batch*maxSeq*kvWidth)
	needLen(op, "invFreq", len(invFreq), half)

	cos := make([]float32, half)
	sin := make([]float32, half)
	for b := 0; b < batch; b++ {
		for s := 0; s < seqLen; s++ {
			pos := startPos + s
			for i := range half {
				angle := float64(float32(pos) * invFreq[i])
				cos[i] = RoundBF16(float32(math.Cos(angle)))
				sin[i] = RoundBF16(float32(math.Sin(angle)))
			}
			row := qkv[(b*seqLen+s)*rowWidth : (b*seqLen+s+1)*rowWidth]
			qOut := q[(b*seqLen+s)*qWidth : (b*seqLen+s+1)*qWidth]
			cacheAt := (b*maxSeq + pos) * kvWidth
			for h := 0; h < heads; h++ {
				rotateHalf(qOut[h*headDim:(h+1)*headDim], row[h*headDim:(h+1)*headDim], cos, sin)
			}
			for h := 0; h < kvHeads; h++ {
				kIn := row[qWidth+h*headDim : qWidth+(h+1)*headDim]
				rotateHalf(kCache[cacheAt+h*headDim:cacheAt+(h+1)*headDim], kIn, cos, sin)
			}
			copy(vCache[cacheAt:cacheAt+kvWidth], row[qWidth+kvWidth:rowWidth])
		}
	}
}

// rotateHalf writes x rotated by the per-pair angles whose bf16 cos and sin
// are given, rounding to bf16 after every product and sum as HF does.
func rotateHalf(out, x []uint16, cos, sin []float32) {
	half := len(cos)
	for i := 0; i < half; i++ {
		lo, hi := BF16ToF32(x[i]), BF16ToF32(x[i+half])
		out[i] = F32ToBF16(RoundBF16(lo*cos[i]) + RoundBF16(-hi*sin[i]))
		out[i+half] = F32ToBF16(RoundBF16(hi*cos[i]) + RoundBF16(lo*sin[i]))
	}
}

// RopeKVWritePaged is RopeKVWrite for a ragged batch over a paged cache
// (rope.cu's version 3, vLLM's rotary embedding and reshape_and_cache in
// one): row t of qkv [T, (H+2·KV)·D] sits at position positions[t]; its
// rotated q goes to row t of q [T, H·D] and its rotated k and raw v to slot
// slots[t] of kCache and vCache ([numSlots, KV·D], slot = page·pageSize +
// offset). A negative slot is padding: q is rotated, nothing is written to
// the caches. The rotation is RopeKVWrite's, bit for bit.
//
// Preconditions: headDim even, heads and kvHeads >= 1, every position >= 0,
// every slot below numSlots, len(invFreq) >= headDim/2, len(positions) and
// len(slots) >= tokens, and every slice as long as its shape.
func RopeKVWritePaged(q, kCache, vCache, qkv []uint16, invFreq []float32, positions []int32, slots []int64, tokens, heads, kvHeads, headDim, numSlots int) {
	const op = "RopeKVWritePaged"
	needShape(op, tokens >= 0 && heads >= 1 && kvHeads >= 1 && headDim >= 0 && headDim%2 == 0 && numSlots >= 0,
		"bad shape tokens %d heads %d kvHeads %d headDim %d slots %d", tokens, heads, kvHeads, headDim, numSlots)
	qWidth, kvWidth := heads*headDim, kvHeads*headDim
	rowWidth := qWidth + 2*kvWidth
	half := headDim / 2
	needLen(op, "qkv", len(qkv), tokens*rowWidth)
	needLen(op, "q", len(q), tokens*qWidth)
	needLen(op, "kCache", len(kCache), numSlots*kvWidth)
	needLen(op, "vCache", len(vCache), numSlots*kvWidth)
	needLen(op, "invFreq", len(invFreq), half)
	needLen(op, "positions", len(positions), tokens)
	needLen(op, "slots", len(slots), tokens)
	for t := range tokens {
		needShape(op, positions[t] >= 0 && slots[t] < int64(numSlots), "token %d: position %d, slot %d of %d", t, positions[t], slots[t], numSlots)
	}
	cos := make([]float32, half)
	sin := make([]float32, half)
	for t := range tokens {
		pos := positions[t]
		for i := range half {
			angle := float64(float32(pos) * invFreq[i])
			cos[i] = RoundBF16(float32(math.Cos(angle)))
			sin[i] = RoundBF16(float32(math.Sin(angle)))
		}
		row := qkv[t*rowWidth : (t+1)*rowWidth]
		qOut := q[t*qWidth : (t+1)*qWidth]
		for h := 0; h < heads; h++ {
			rotateHalf(qOut[h*headDim:(h+1)*headDim], row[h*headDim:(h+1)*headDim], cos, sin)
		}
		if slots[t] < 0 {
			continue
		}
		cacheAt := int(slots[t]) * kvWidth
		for h := 0; h < kvHeads; h++ {
			kIn := row[qWidth+h*headDim : qWidth+(h+1)*headDim]
			rotateHalf(kCache[cacheAt+h*headDim:cacheAt+(h+1)*headDim], kIn, cos, sin)
		}
		copy(vCache[cacheAt:cacheAt+kvWidth], row[qWidth+kvWidth:rowWidth])
	}
}

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

// norm.go is the twin of kernels/norm.cu: fused residual add and RMSNorm.

package ref

import "math"

// AddRMSNorm adds `add` into the residual stream and RMS-normalises it, row by
// row, mirroring HF's LlamaRMSNorm in bf16. For each of `rows` rows of width
// `hidden`:
//
//	if add != nil: residual[i] = bf16(f32(residual[i]) + f32(add[i]))   (in place)
//	x      = f32(residual[i])
//	ms     = mean over the row of x*x
//	normed = bf16(x * float32(1/sqrt(ms + eps)))
//	out[i] = bf16(f32(weight[i%hidden]) * f32(normed))
//
// The sum of squares is accumulated in float64 and the mean rounded to float32:
// this is the exact value any float32 reduction order approximates, so it is a
// fair reference for the GPU's float32 block reduction (which differs from it by
// at most a few float32 ulps, far below one bf16 ulp of the output).
//
// Preconditions: rows >= 0, hidden >= 1, len(residual) and len(out) >= rows*hidden,
// len(add) >= rows*hidden when add is non-nil, len(weight) >= hidden.
// out may be residual itself (each element is read before it is written).
func AddRMSNorm(out, residual, add, weight []uint16, rows, hidden int, eps float32) {
	needShape("AddRMSNorm", rows >= 0 && hidden >= 1, "bad shape rows %d hidden %d", rows, hidden)
	n := rows * hidden
	needLen("AddRMSNorm", "out", len(out), n)
	needLen("AddRMSNorm", "residual", len(residual), n)
	if add != nil {
		needLen("AddRMSNorm", "add", len(add), n)
	}
	needLen("AddRMSNorm", "weight", len(weight), hidden)

	for r := 0; r < rows; r++ {
		res := residual[r*hidden : (r+1)*hidden]
		if add != nil {
			a := add[r*hidden : (r+1)*hidden]
			for i := range res {
				res[i] = F32ToBF16(BF16ToF32(res[i]) + BF16ToF32(a[i]))
			}
		}
		var sumSquares float64
		for _, bits := range res {
			x := float64(BF16ToF32(bits))
			sumSquares += x * x
		}
		meanSquare := float32(sumSquares / float64(hidden))
		invRMS := float32(1 / math.Sqrt(float64(meanSquare+eps)))
		o := out[r*hidden : (r+1)*hidden]
		for i, bits := range res {
			normed := RoundBF16(BF16ToF32(bits) * invRMS)
			o[i] = F32ToBF16(BF16ToF32(weight[i]) * normed)
		}
	}
}

// QKNorm is the twin of norm.cu's qk_norm: Qwen2's q/k/v bias and Qwen3's
// per-head RMSNorm of q and k, in place on the rows of a fused q/k/v
// projection, before RoPE. Each of `tokens` rows holds heads q heads, then
// kvHeads k heads, then kvHeads v heads, each headDim wide:
//
//	if bias != nil:  qkv[j] = bf16(f32(qkv[j]) + f32(bias[j]))   for every j of the row
//	if qNorm != nil: each q head x (headDim values) becomes
//	                 bf16(f32(qNorm[i]) * bf16(x[i] * float32(1/sqrt(mean(x*x) + eps))))
//	if kNorm != nil: each k head likewise with kNorm
//
// HF's Qwen2 adds the bias inside nn.Linear (one rounding of the product
// plus the bias), this twin to the product rounded to bf16 (two): the
// difference is at most one bf16 step of an element. The norm is
// AddRMSNorm's arithmetic over one head (Qwen3RMSNorm's: normalised in
// float32, rounded to bf16, times the weight). V is never normalised.
//
// Preconditions: tokens >= 0, heads, kvHeads, headDim >= 1; len(qkv) >=
// tokens*(heads+2*kvHeads)*headDim; len(bias) >= (heads+2*kvHeads)*headDim
// when non-nil; len(qNorm), len(kNorm) >= headDim when non-nil.
func QKNorm(qkv, bias, qNorm, kNorm []uint16, tokens, heads, kvHeads, headDim int, eps float32) {
	needShape("QKNorm", tokens >= 0 && heads >= 1 && kvHeads >= 1 && headDim >= 1,
		"bad shape tokens %d heads %d kvHeads %d headDim %d", tokens, heads, kvHeads, headDim)
	width := (heads + 2*kvHeads) * headDim
	needLen("QKNorm", "qkv", len(qkv), tokens*width)
	if bias != nil {
		needLen("QKNorm", "bias", len(bias), width)
	}
	for _, w := range [][]uint16{qNorm, kNorm} {
		if w != nil {
			needLen("QKNorm", "norm weight", len(w), headDim)
		}
	}
	for t := 0; t < tokens; t++ {
		row := qkv[t*width : (t+1)*width]
		if bias != nil {
			for j := range row {
				row[j] = F32ToBF16(BF16ToF32(row[j]) + BF16ToF32(bias[j]))
			}
		}
		for h := 0; h < heads+kvHeads; h++ {
			w := qNorm
			if h >= heads {
				w = kNorm
			}
			if w != nil {
				headRMSNorm(row[h*headDim:(h+1)*headDim], w, eps)
			}
		}
	}
}

// headRMSNorm RMS-normalises x in place, AddRMSNorm's arithmetic.
func headRMSNorm(x, weight []uint16, eps float32) {
	var sumSquares float64
	for _, bits := range x {
		v := float64(BF16ToF32(bits))
		sumSquares += v * v
	}
	meanSquare := float32(sumSquares / float64(len(x)))
	invRMS := float32(1 / math.Sqrt(float64(meanSquare+eps)))
	for i, bits := range x {
		normed := RoundBF16(BF16ToF32(bits) * invRMS)
		x[i] = F32ToBF16(BF16ToF32(weight[i]) * normed)
	}
}

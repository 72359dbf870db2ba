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

// gemv.go is the twin of kernels/gemv.cu (linear versions 2 and 3): the
// same product as Linear (cuBLAS's twin), and gate_up's product with
// SiLU·mul.

package ref

import "runtime"

// Gemv is Linear: out[m, n] = bf16(x[m, k] · w[n, k]ᵀ) accumulated in
// float32, the same bits (each output one float32 dot product over the
// whole of k), its columns shared among GOMAXPROCS goroutines: the checks
// run it at Llama-3-8B's widths. The kernels take up to 16 rows (version 2)
// or 32 (version 3) and sum k in their own order (bf16 tolerance, as every
// kernel against its twin).
//
// Preconditions: as Linear's.
func Gemv(out, x, w []uint16, m, n, k int) {
	needShape("Gemv", m >= 0 && n >= 0 && k >= 0, "bad shape m %d n %d k %d", m, n, k)
	needLen("Gemv", "w", len(w), n*k)
	wide := make([]float32, n*k)
	ToF32(wide, w[:n*k])
	LinearWide(out, x, wide, m, n, k, runtime.GOMAXPROCS(0))
}

// GemvSiluMul is gate_up_proj followed by silu_mul: with w the fused
// [2*inter, k] gate_up matrix, gateUp = Gemv(x, w) rounded to bf16, then
// out = SiluMul(gateUp) [m, inter].
//
// Preconditions: m, inter, k >= 0, len(x) >= m*k, len(w) >= 2*inter*k,
// len(out) >= m*inter.
func GemvSiluMul(out, x, w []uint16, m, inter, k int) {
	needShape("GemvSiluMul", m >= 0 && inter >= 0 && k >= 0, "bad shape m %d inter %d k %d", m, inter, k)
	gateUp := make([]uint16, m*2*inter)
	Gemv(gateUp, x, w, m, 2*inter, k)
	SiluMul(out, gateUp, m, inter)
}

// NormPartCols is how many columns of the residual stream one squared sum
// of GemvResidual covers: a block of gemv.cu's linear version 4 (its
// GEMV_ROWS, kernels.GemvRows).
const NormPartCols = 16

// GemvResidual is linear version 4's o_proj or down_proj: the product
// rounded to bf16 and added into the residual stream in place,
// residual[i, j] = bf16(residual[i, j] + bf16(x · wᵀ)[i, j]) (AddRMSNorm's
// add), and part[i*P + b] = the sum of squares of the new residual's columns
// NormPartCols*b .. NormPartCols*(b+1)-1 of row i, P = ceil(n /
// NormPartCols) (summed in float64, rounded to float32; the kernel sums in
// float32, a few ulps away).
//
// Preconditions: m, n, k >= 0, len(residual) >= m*n, len(x) >= m*k,
// len(w) >= n*k, len(part) >= m*P.
func GemvResidual(residual []uint16, part []float32, x, w []uint16, m, n, k int) {
	needShape("GemvResidual", m >= 0 && n >= 0 && k >= 0, "bad shape m %d n %d k %d", m, n, k)
	parts := (n + NormPartCols - 1) / NormPartCols
	needLen("GemvResidual", "residual", len(residual), m*n)
	needLen("GemvResidual", "part", len(part), m*parts)
	y := make([]uint16, m*n)
	Gemv(y, x, w, m, n, k)
	for i := range m * n {
		residual[i] = F32ToBF16(BF16ToF32(residual[i]) + BF16ToF32(y[i]))
	}
	ResidualSquares(part, residual, m, n)
}

// ResidualSquares is GemvResidual's squared sums of an m×n residual:
// part[i*P + b] for the NormPartCols-column block b of row i, P = ceil(n /
// NormPartCols), summed in float64 and rounded to float32.
func ResidualSquares(part []float32, residual []uint16, m, n int) {
	parts := (n + NormPartCols - 1) / NormPartCols
	needLen("ResidualSquares", "residual", len(residual), m*n)
	needLen("ResidualSquares", "part", len(part), m*parts)
	for i := range m {
		row := residual[i*n : (i+1)*n]
		for b := range parts {
			var s float64
			for _, bits := range row[b*NormPartCols : min(n, (b+1)*NormPartCols)] {
				v := float64(BF16ToF32(bits))
				s += v * v
			}
			part[i*parts+b] = float32(s)
		}
	}
}

// NormGemv is linear version 4's qkv_proj or lm_head: out[m, n] =
// RMSNorm(residual[m, k]) · w[n, k]ᵀ, the norm AddRMSNorm's without an add
// (residual is not changed) and the product Gemv's.
//
// Preconditions: as AddRMSNorm's (rows m, hidden k) and Gemv's.
func NormGemv(out, residual, normW, w []uint16, m, n, k int, eps float32) {
	Gemv(out, normedCopy(residual, normW, m, k, eps), w, m, n, k)
}

// NormGemvSiluMul is linear version 4's gate_up_proj with SiLU·mul:
// GemvSiluMul of RMSNorm(residual).
//
// Preconditions: as NormGemv's and GemvSiluMul's.
func NormGemvSiluMul(out, residual, normW, w []uint16, m, inter, k int, eps float32) {
	GemvSiluMul(out, normedCopy(residual, normW, m, k, eps), w, m, inter, k)
}

// normedCopy is AddRMSNorm of rows×hidden residual rows into a new slice.
func normedCopy(residual, normW []uint16, rows, hidden int, eps float32) []uint16 {
	needShape("NormGemv", rows >= 0 && hidden >= 1, "bad shape m %d k %d", rows, hidden)
	res := append([]uint16(nil), residual[:rows*hidden]...)
	normed := make([]uint16, rows*hidden)
	AddRMSNorm(normed, res, nil, normW, rows, hidden, eps)
	return normed
}

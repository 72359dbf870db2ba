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

// gemv.go is the twin of kernels/gemv.cu (linear version 2): the same
// product as Linear (cuBLAS's twin), and gate_up's product with SiLU·mul.

package ref

// Gemv is Linear: out[m, n] = bf16(x[m, k] · w[n, k]ᵀ) accumulated in
// float32. The kernel takes up to 16 rows and sums k in its own order
// (bf16 tolerance, as every kernel against its twin).
//
// Preconditions: as Linear's.
func Gemv(out, x, w []uint16, m, n, k int) { Linear(out, x, w, m, n, k) }

// GemvSiluMul is gate_up_proj followed by silu_mul: with w the fused
// [2*inter, k] gate_up matrix, gateUp = Linear(x, w) rounded to bf16, then
// out = SiluMul(gateUp) [m, inter].
//
// Preconditions: m, inter, k >= 0, len(x) >= m*k, len(w) >= 2*inter*k,
// len(out) >= m*inter.
func GemvSiluMul(out, x, w []uint16, m, inter, k int) {
	needShape("GemvSiluMul", m >= 0 && inter >= 0 && k >= 0, "bad shape m %d inter %d k %d", m, inter, k)
	gateUp := make([]uint16, m*2*inter)
	Linear(gateUp, x, w, m, 2*inter, k)
	SiluMul(out, gateUp, m, inter)
}

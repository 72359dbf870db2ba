// linear.go is the twin of the cuBLAS bf16 GEMM (cublasGemmEx) the cuda
// backend runs for every projection; no kernel of ours implements it.

package ref

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// linearBlockRows is how many rows of x Linear converts and multiplies at once:
// enough for a good GEMM, small enough that the float32 copies of x and of the
// output block stay a few tens of MB even for a 128k-wide LM head.
const linearBlockRows = 64

// Linear is nn.Linear without bias in bf16: out = x · wᵀ, x [m, k], w [n, k]
// (PyTorch's weight layout), out [m, n], with
//
//	out[i*n+j] = bf16( sum_k f32(x[i*k+kk]) * f32(w[j*k+kk]) )
//
// accumulated in float32 by gonum's sgemm (its summation order is its own, as
// cuBLAS's is). w is widened to float32 once per call (n*k*4 bytes); x is
// processed linearBlockRows rows at a time.
//
// Preconditions: m, n, k >= 0, len(x) >= m*k, len(w) >= n*k, len(out) >= m*n.
func Linear(out, x, w []uint16, m, n, k int) {
	needShape("Linear", m >= 0 && n >= 0 && k >= 0, "bad shape m %d n %d k %d", m, n, k)
	needLen("Linear", "x", len(x), m*k)
	needLen("Linear", "w", len(w), n*k)
	needLen("Linear", "out", len(out), m*n)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 { // an empty sum; sgemm rejects a zero stride
		clear(out[:m*n])
		return
	}

	weight := make([]float32, n*k)
	ToF32(weight, w[:n*k])
	wMat := blas32.General{Rows: n, Cols: k, Stride: k, Data: weight}

	block := min(m, linearBlockRows)
	xBlock := make([]float32, block*k)
	outBlock := make([]float32, block*n)
	for row := 0; row < m; row += block {
		rows := min(block, m-row)
		ToF32(xBlock[:rows*k], x[row*k:(row+rows)*k])
		xMat := blas32.General{Rows: rows, Cols: k, Stride: k, Data: xBlock[:rows*k]}
		outMat := blas32.General{Rows: rows, Cols: n, Stride: n, Data: outBlock[:rows*n]}
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, xMat, wMat, 0, outMat)
		ToBF16(out[row*n:(row+rows)*n], outBlock[:rows*n])
	}
}

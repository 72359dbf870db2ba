// linear.go is the twin of the cuBLAS bf16 GEMM (cublasGemmEx) the cuda
// backend runs for every projection; no kernel of ours implements it.

package ref

import (
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// linearBlockRows is how many rows of x Linear converts and multiplies at once:
// enough for a good GEMM, small enough that the float32 copies of x and of the
// output block stay a few tens of MB even for a 128k-wide LM head.
const linearBlockRows = 64

// linearSplitMACs is the least work (multiply-adds) of one call that
// LinearWide splits over its workers: below it a goroutine costs more than it saves.
const linearSplitMACs = 1 << 15

// linearChunkCols is how many outputs of a row one sgemm call computes:
// small enough (with at most linearBlockRows rows) that gonum's sgemm takes
// its serial path, where every output is one dot product over the whole of
// k (f32.DotUnitary); its parallel path sums blocks of 64 and would make
// the bits depend on the shape.
const linearChunkCols = 192

// Linear is nn.Linear without bias in bf16: out = x · wᵀ, x [m, k], w [n, k]
// (PyTorch's weight layout), out [m, n], with
//
//	out[i*n+j] = bf16( sum_k f32(x[i*k+kk]) * f32(w[j*k+kk]) )
//
// accumulated in float32, each output one dot product over the whole of k
// in gonum's order (f32.DotUnitary; cuBLAS's order is its own), so that an
// output's bits depend on its row of x and of w only: not on m, n, or how
// the work is split. w is widened to float32 once per call (n*k*4 bytes; a caller
// that multiplies by the same w again widens it once and calls LinearWide);
// x is processed linearBlockRows rows at a time.
//
// Preconditions: m, n, k >= 0, len(x) >= m*k, len(w) >= n*k, len(out) >= m*n.
func Linear(out, x, w []uint16, m, n, k int) {
	needShape("Linear", m >= 0 && n >= 0 && k >= 0, "bad shape m %d n %d k %d", m, n, k)
	needLen("Linear", "w", len(w), n*k)
	weight := make([]float32, n*k)
	ToF32(weight, w[:n*k])
	LinearWide(out, x, weight, m, n, k, 1)
}

// LinearWide is Linear with w already widened to float32 (ToF32 of the bf16
// weight, exactly): the same sums, bit for bit, whatever workers is. With
// workers > 1 and enough work, the outputs' column chunks are shared among
// that many goroutines.
//
// Preconditions: as Linear's, len(w) >= n*k, workers >= 1.
func LinearWide(out, x []uint16, w []float32, m, n, k, workers int) {
	needShape("Linear", m >= 0 && n >= 0 && k >= 0 && workers >= 1, "bad shape m %d n %d k %d workers %d", m, n, k, workers)
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
	chunks := (n + linearChunkCols - 1) / linearChunkCols
	if m*n*k < linearSplitMACs {
		workers = 1
	}
	workers = min(workers, chunks)
	block := min(m, linearBlockRows)
	xBlock := make([]float32, block*k)
	outBlock := make([]float32, block*n)
	for row := 0; row < m; row += block {
		rows := min(block, m-row)
		ToF32(xBlock[:rows*k], x[row*k:(row+rows)*k])
		var wg sync.WaitGroup
		for part := range workers {
			// Worker part takes chunks part, part+workers, ...
			work := func() {
				for c := part; c < chunks; c += workers {
					linearColumns(outBlock, xBlock, w, rows, n, k, c*linearChunkCols, min(n, (c+1)*linearChunkCols))
				}
			}
			if workers == 1 {
				work()
			} else {
				wg.Go(work)
			}
		}
		wg.Wait()
		ToBF16(out[row*n:(row+rows)*n], outBlock[:rows*n])
	}
}

// linearColumns computes columns [j0, j1) of the rows × n product of x's
// rows and w's rows into out (row stride n), through gonum's serial sgemm
// (rows <= linearBlockRows, j1-j0 <= linearChunkCols).
func linearColumns(out, x, w []float32, rows, n, k, j0, j1 int) {
	wMat := blas32.General{Rows: j1 - j0, Cols: k, Stride: k, Data: w[j0*k : j1*k]}
	xMat := blas32.General{Rows: rows, Cols: k, Stride: k, Data: x[:rows*k]}
	outMat := blas32.General{Rows: rows, Cols: j1 - j0, Stride: n, Data: out[j0 : (rows-1)*n+j1]}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, xMat, wMat, 0, outMat)
}

package cuda

import (
	"math"
	"testing"
	"unsafe"
)

// exactBF16 converts a float32 that bf16 represents exactly (small integers
// here), so the GEMM check can demand bit equality.
func exactBF16(t *testing.T, f float32) uint16 {
	t.Helper()
	b := uint16(math.Float32bits(f) >> 16)
	if bf16ToF32(b) != f {
		t.Fatalf("%v is not exact in bf16", f)
	}
	return b
}

func bf16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

func openTestCublas(t *testing.T) *Cublas {
	t.Helper()
	b, err := OpenCublas("")
	if err != nil {
		t.Skipf("cuBLAS not found: %v", err)
	}
	return b
}

func TestCublasGemmBF16(t *testing.T) {
	g := newGPUEnv(t)
	lib := openTestCublas(t)
	v, err := lib.Version()
	if err != nil || (v < 110000 && lib.Emulated() == "") {
		t.Errorf("cuBLAS Version = %d, %v", v, err)
	}
	t.Logf("cuBLAS %d from %s", v, lib.Path())
	h, err := lib.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy()
	const workspaceBytes = 32 << 20
	ws := g.alloc(t, workspaceBytes)
	if err := h.SetStream(g.stream, ws, workspaceBytes); err != nil {
		t.Fatal(err)
	}
	const m, n, k = 5, 3, 7
	const alpha, beta = float32(1), float32(0.5)
	for _, tt := range []struct{ transA, transB bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		gm := newGemmCase(tt.transA, tt.transB, m, n, k, alpha, beta)
		a, b, c := uploadExactBF16(t, g, gm.a), uploadExactBF16(t, g, gm.b), uploadExactBF16(t, g, gm.c)
		if err := h.GemmBF16(tt.transA, tt.transB, m, n, k, alpha, a, gm.lda, b, gm.ldb, beta, c, gm.ldc); err != nil {
			t.Fatalf("transA=%v transB=%v: %v", tt.transA, tt.transB, err)
		}
		got := make([]uint16, m*n)
		if err := g.stream.CopyDtoH(unsafe.Pointer(&got[0]), c, len(got)*2); err != nil {
			t.Fatal(err)
		}
		g.sync(t)
		for i := range got {
			if bf16ToF32(got[i]) != gm.want[i] {
				t.Errorf("transA=%v transB=%v: C[%d] = %v, want %v", tt.transA, tt.transB, i, bf16ToF32(got[i]), gm.want[i])
			}
		}
	}
	if err := h.GemmBF16(false, false, m, n, k, 1, 0, 0, 0, 0, 0, 0, 0); err == nil {
		t.Error("GemmBF16 with lda=0 succeeded")
	}
}

// gemmCase is C = alpha·op(A)·op(B) + beta·C in column-major storage (op(A)
// m×k, op(B) k×n) on small integers, which bf16 and its float32 products
// hold exactly, and its exact result.
type gemmCase struct {
	a, b, c, want []float32
	lda, ldb, ldc int
}

func newGemmCase(transA, transB bool, m, n, k int, alpha, beta float32) gemmCase {
	gm := gemmCase{lda: m, ldb: k, ldc: m, a: make([]float32, m*k), b: make([]float32, k*n), c: make([]float32, m*n)}
	if transA {
		gm.lda = k
	}
	if transB {
		gm.ldb = n
	}
	for i := range gm.a {
		gm.a[i] = float32(i%7 - 3)
	}
	for i := range gm.b {
		gm.b[i] = float32(i%5 - 2)
	}
	for i := range gm.c {
		gm.c[i] = float32(2 * (i%3 - 1))
	}
	opA := func(i, p int) float32 {
		if transA {
			return gm.a[p+i*gm.lda]
		}
		return gm.a[i+p*gm.lda]
	}
	opB := func(p, j int) float32 {
		if transB {
			return gm.b[j+p*gm.ldb]
		}
		return gm.b[p+j*gm.ldb]
	}
	gm.want = make([]float32, m*n)
	for j := range n {
		for i := range m {
			var sum float32
			for p := range k {
				sum += opA(i, p) * opB(p, j)
			}
			gm.want[i+j*gm.ldc] = alpha*sum + beta*gm.c[i+j*gm.ldc]
		}
	}
	return gm
}

// uploadExactBF16 copies vals, each exact in bf16, to new device memory.
func uploadExactBF16(t *testing.T, g *gpuEnv, vals []float32) DevPtr {
	t.Helper()
	bits := make([]uint16, len(vals))
	for i, f := range vals {
		bits[i] = exactBF16(t, f)
	}
	p := g.alloc(t, len(bits)*2)
	if err := g.stream.CopyHtoD(p, unsafe.Pointer(&bits[0]), len(bits)*2); err != nil {
		t.Fatal(err)
	}
	g.sync(t) // bits is pageable Go memory: keep it alive until copied
	return p
}

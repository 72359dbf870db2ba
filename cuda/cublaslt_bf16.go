package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// BF16Matmul is D = op(A)·op(B) through cublasLtMatmul in cuBLAS's
// column-major convention: bf16 A, B and D, fp32 accumulation
// (CUBLAS_COMPUTE_32F, CUDA_R_32F scales, alpha 1, beta 0). op(A) is M×K,
// op(B) K×N, D M×N (ldd ≥ M). For row-major Y[T][N] = X[T][K]·W[N][K]ᵀ:
// TransA, M = N, N = T, K = K, A = W (lda K), B = X (ldb K), D = Y (ldd N),
// the call Backend.Linear makes of cublasGemmEx too.
type BF16Matmul struct {
	M, N, K        int
	TransA, TransB bool
	A              DevPtr
	Lda            int
	B              DevPtr
	Ldb            int
	D              DevPtr
	Ldd            int
	Workspace      DevPtr
	WorkspaceBytes int
}

func (p BF16Matmul) String() string {
	return fmt.Sprintf("cublasLtMatmul(bf16 %s%s, m=%d n=%d k=%d, lda=%d ldb=%d ldd=%d)", opName(p.TransA), opName(p.TransB),
		p.M, p.N, p.K, p.Lda, p.Ldb, p.Ldd)
}

// Check refuses what cuBLASLt would refuse or misread: dimensions out of
// int32 range, leading dimensions below the stored rows, unset or
// misaligned (2-byte) pointers, a workspace pointer without bytes.
func (p BF16Matmul) Check() error {
	var errs []string
	need := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"m", p.M}, {"n", p.N}, {"k", p.K}, {"lda", p.Lda}, {"ldb", p.Ldb}, {"ldd", p.Ldd}} {
		need(d.v >= 1 && d.v <= math.MaxInt32, "%s = %d out of range", d.name, d.v)
	}
	aRows, bRows := p.M, p.K
	if p.TransA {
		aRows = p.K
	}
	if p.TransB {
		bRows = p.N
	}
	need(p.Lda >= aRows && p.Ldb >= bRows && p.Ldd >= p.M, "leading dimensions %d, %d, %d below the stored rows %d, %d, %d",
		p.Lda, p.Ldb, p.Ldd, aRows, bRows, p.M)
	need(p.A != 0 && p.B != 0 && p.D != 0, "A, B and D must be set")
	need(p.A%2 == 0 && p.B%2 == 0 && p.D%2 == 0, "A, B and D must be 2-byte aligned")
	need(p.WorkspaceBytes >= 0 && (p.WorkspaceBytes == 0 || p.Workspace != 0), "workspace of %d bytes at %#x", p.WorkspaceBytes, uint64(p.Workspace))
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", p, strings.Join(errs, "; "))
	}
	return nil
}

// Alignments are the alignments in bytes (at most 256) of A, B and D, which
// the heuristic is told (an algorithm it offers may need them) and a tuned
// choice depends on.
func (p BF16Matmul) Alignments() (a, b, d int) {
	return ptrAlignment(p.A), ptrAlignment(p.B), ptrAlignment(p.D)
}

func ptrAlignment(p DevPtr) int {
	if p == 0 {
		return 256
	}
	return int(min(uint64(p)&-uint64(p), 256))
}

// LtAlgo is one algorithm cublasLtMatmulAlgoGetHeuristic offered for a
// shape: cuBLASLt's opaque cublasLtMatmulAlgo_t (eight 64-bit words, which
// it documents as reusable while the library version and the problem stay
// the same), the workspace it needs and its waves count.
type LtAlgo struct {
	Data           [8]uint64
	WorkspaceBytes int
	Waves          float32
}

// BF16Algos asks cuBLASLt for up to max algorithms of p's shape within
// p.WorkspaceBytes, in the heuristic's order (its best first).
func (h *LtHandle) BF16Algos(p BF16Matmul, max int) ([]LtAlgo, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, fmt.Errorf("%s: asked for %d algorithms", p, max)
	}
	plan, err := h.bf16Plan(p)
	if err != nil {
		return nil, err
	}
	a, b, d := p.Alignments()
	found, err := h.heuristic(plan, p.WorkspaceBytes, max, []int{a, b, d, d})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	out := make([]LtAlgo, len(found))
	for i, r := range found {
		for w := range out[i].Data {
			out[i].Data[w] = uint64(r.algo[w])
		}
		out[i].WorkspaceBytes, out[i].Waves = int(r.workspaceSize), float32(r.wavesCount)
	}
	return out, nil
}

// MatmulBF16 enqueues p on s with algo (one BF16Algos gave for p's shape).
// The shape's descriptors are made at its first call (BF16Algos makes them
// too), so a call inside a graph capture finds them made by an eager one.
func (h *LtHandle) MatmulBF16(s *Stream, p BF16Matmul, algo LtAlgo) error {
	if s == nil {
		return errors.New("cublasLtMatmul: nil stream")
	}
	if err := p.Check(); err != nil {
		return err
	}
	if algo.WorkspaceBytes > p.WorkspaceBytes {
		return fmt.Errorf("%s: the algorithm needs %d bytes of workspace, %d given", p, algo.WorkspaceBytes, p.WorkspaceBytes)
	}
	plan, err := h.bf16Plan(p)
	if err != nil {
		return err
	}
	var chosen C.sb_lt_heuristic // the trampoline passes its algo member
	for w, v := range algo.Data {
		chosen.algo[w] = C.ulonglong(v)
	}
	alpha, beta := C.float(1), C.float(0)
	status := C.sb_cublasLtMatmul(h.lt.api.matmul, h.handle, plan.desc, &alpha, C.CUdeviceptr(p.A), plan.aDesc,
		C.CUdeviceptr(p.B), plan.bDesc, &beta, C.CUdeviceptr(p.D), plan.dDesc, C.CUdeviceptr(p.D), plan.dDesc,
		&chosen, C.CUdeviceptr(p.Workspace), C.size_t(p.WorkspaceBytes), s.stream)
	return cublasError(int(status), "%s", p)
}

// bf16Plan is p's descriptors, made at the shape's first use.
func (h *LtHandle) bf16Plan(p BF16Matmul) (*ltPlan, error) {
	key := ltKey{m: p.M, n: p.N, k: p.K, lda: p.Lda, ldb: p.Ldb, ldd: p.Ldd, transA: p.TransA, transB: p.TransB, bf16: true}
	if plan, ok := h.plans[key]; ok {
		return plan, nil
	}
	plan, err := h.newDescs(planSpec{p.M, p.N, p.K, p.Lda, p.Ldb, p.Ldd, p.TransA, p.TransB, cudaR16BF, cudaR16BF})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	h.plans[key] = plan
	return plan, nil
}

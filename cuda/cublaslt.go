package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"unsafe"
)

// Enum values of cuBLASLt's API, as NVIDIA's cuBLAS documentation lists
// them (cudaDataType, cublasLtMatmulDescAttributes_t,
// cublasLtMatmulPreferenceAttributes_t).
const (
	cudaR32F                = 0  // CUDA_R_32F
	cudaR8FE4M3             = 28 // CUDA_R_8F_E4M3
	ltDescTransA            = 3  // CUBLASLT_MATMUL_DESC_TRANSA (int32 cublasOperation_t)
	ltDescTransB            = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	ltDescAScalePointer     = 17 // CUBLASLT_MATMUL_DESC_A_SCALE_POINTER (const void*, device)
	ltDescBScalePointer     = 18 // CUBLASLT_MATMUL_DESC_B_SCALE_POINTER
	ltPrefMaxWorkspaceBytes = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64)
	ltPrefMinAlignmentA     = 5  // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32; B, C, D follow)
)

// ltAPI holds cuBLASLt's entry points.
type ltAPI struct {
	create, destroy, getVersion, descCreate, descDestroy, descSetAttr, layoutCreate, layoutDestroy,
	prefCreate, prefDestroy, prefSetAttr, heuristic, matmul unsafe.Pointer
}

func (a *ltAPI) slots() []symbolSlot {
	return []symbolSlot{
		{name: "cublasLtCreate", dst: &a.create},
		{name: "cublasLtDestroy", dst: &a.destroy},
		{name: "cublasLtGetVersion", dst: &a.getVersion},
		{name: "cublasLtMatmulDescCreate", dst: &a.descCreate},
		{name: "cublasLtMatmulDescDestroy", dst: &a.descDestroy},
		{name: "cublasLtMatmulDescSetAttribute", dst: &a.descSetAttr},
		{name: "cublasLtMatrixLayoutCreate", dst: &a.layoutCreate},
		{name: "cublasLtMatrixLayoutDestroy", dst: &a.layoutDestroy},
		{name: "cublasLtMatmulPreferenceCreate", dst: &a.prefCreate},
		{name: "cublasLtMatmulPreferenceDestroy", dst: &a.prefDestroy},
		{name: "cublasLtMatmulPreferenceSetAttribute", dst: &a.prefSetAttr},
		{name: "cublasLtMatmulAlgoGetHeuristic", dst: &a.heuristic},
		{name: "cublasLtMatmul", dst: &a.matmul},
	}
}

// CublasLt is an opened cuBLASLt library: the FP8 GEMMs (cuBLAS's
// cublasGemmEx takes no FP8 scales) and the tuned bf16 GEMMs (gemm version 2).
type CublasLt struct {
	lib      *library
	api      ltAPI
	emulated string
}

// LtPathFor is the cuBLASLt beside a cuBLAS: the same folder and version
// (libcublas.so.12 → libcublasLt.so.12; a soname stays a soname).
func LtPathFor(cublasPath string) string {
	dir, base := filepath.Split(cublasPath)
	if rest, ok := strings.CutPrefix(base, "libcublas."); ok {
		return dir + "libcublasLt." + rest
	}
	return dir + "libcublasLt.so"
}

// OpenCublasLt opens the cuBLASLt that belongs to b (LtPathFor its path),
// refusing one of another kind (emulated against real).
func OpenCublasLt(b *Cublas) (*CublasLt, error) {
	path := LtPathFor(b.Path())
	lib, err := openLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("open cuBLASLt %s (beside cuBLAS %s): %w", path, b.Path(), err)
	}
	l := &CublasLt{lib: lib}
	if err := lib.resolve(l.api.slots()); err != nil {
		lib.close()
		return nil, err
	}
	l.emulated = lib.describeEmulator()
	if (l.emulated == "") != (b.Emulated() == "") {
		lib.close()
		return nil, fmt.Errorf("cuBLASLt %s and cuBLAS %s are not both emulated or both real: take them from one place", path, b.Path())
	}
	return l, nil
}

// Path is the file or soname cuBLASLt was opened from.
func (l *CublasLt) Path() string { return l.lib.path }

// Emulated is the emulated cuBLASLt's description, "" for the real one.
func (l *CublasLt) Emulated() string { return l.emulated }

// Version is cublasLtGetVersion: major*10000 + minor*100 + patch.
func (l *CublasLt) Version() int { return int(C.sb_cublasLtGetVersion(l.api.getVersion)) }

// LtHandle is a cuBLASLt handle and the plans (descriptors, chosen
// algorithm) of the shapes it ran, reused at every call of a shape.
type LtHandle struct {
	lt     *CublasLt
	handle C.cublasLtHandle_t
	plans  map[ltKey]*ltPlan
}

// NewHandle creates a handle on the current context.
func (l *CublasLt) NewHandle() (*LtHandle, error) {
	h := &LtHandle{lt: l, plans: map[ltKey]*ltPlan{}}
	if err := cublasError(int(C.sb_cublasLtCreate(l.api.create, &h.handle)), "cublasLtCreate"); err != nil {
		return nil, err
	}
	return h, nil
}

// FP8Matmul is D = scaleA · scaleB · op(A)·op(B) in cuBLAS's column-major
// convention, A and B FP8 E4M3, fp32 accumulation (CUBLAS_COMPUTE_32F,
// CUDA_R_32F scales), D bf16 or fp32: op(A) = Aᵀ is M×K with A stored K×M
// (lda ≥ K), B is K×N (ldb ≥ K), D is M×N (ldd ≥ M). The scales are device
// pointers to one float each (0: 1). For row-major Y[T][N] = X[T][K]·W[N][K]ᵀ:
// M = N, N = T, K = K, A = W, B = X, D = Y.
type FP8Matmul struct {
	M, N, K        int
	A              DevPtr
	Lda            int
	B              DevPtr
	Ldb            int
	D              DevPtr
	Ldd            int
	OutF32         bool // D fp32 (CUDA_R_32F), else bf16
	AScale, BScale DevPtr
	Workspace      DevPtr
	WorkspaceBytes int
}

func (p FP8Matmul) String() string {
	out := "bf16"
	if p.OutF32 {
		out = "fp32"
	}
	return fmt.Sprintf("cublasLtMatmul(e4m3 TN -> %s, m=%d n=%d k=%d, lda=%d ldb=%d ldd=%d)", out, p.M, p.N, p.K, p.Lda, p.Ldb, p.Ldd)
}

// Check is cuBLASLt's FP8 rules, checked before the call so that a
// violation names itself rather than coming back as
// CUBLAS_STATUS_NOT_SUPPORTED: A transposed and B not (TN, the only FP8
// layout on Ada and Hopper), M and K multiples of 16, every pointer
// 16-byte aligned, every leading dimension a multiple of 16 bytes; N (the
// tokens) is free.
func (p FP8Matmul) Check() error {
	var errs []string
	need := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	outBytes := 2
	if p.OutF32 {
		outBytes = 4
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"m", p.M}, {"n", p.N}, {"k", p.K}, {"lda", p.Lda}, {"ldb", p.Ldb}, {"ldd", p.Ldd}} {
		need(d.v >= 0 && d.v <= math.MaxInt32, "%s = %d out of range", d.name, d.v)
	}
	need(p.M%16 == 0 && p.K%16 == 0, "m = %d and k = %d must be multiples of 16", p.M, p.K)
	need(p.Lda >= p.K && p.Ldb >= p.K && p.Ldd >= p.M, "leading dimensions %d, %d, %d below k, k, m", p.Lda, p.Ldb, p.Ldd)
	need(p.Lda%16 == 0 && p.Ldb%16 == 0 && (p.Ldd*outBytes)%16 == 0, "leading dimensions %d, %d (bytes) and %d (×%d bytes) must be multiples of 16 bytes",
		p.Lda, p.Ldb, p.Ldd, outBytes)
	for _, ptr := range []struct {
		name string
		p    DevPtr
	}{{"A", p.A}, {"B", p.B}, {"D", p.D}, {"workspace", p.Workspace}} {
		need(ptr.p%16 == 0, "%s = %#x is not 16-byte aligned", ptr.name, uint64(ptr.p))
	}
	need(p.A != 0 && p.B != 0 && p.D != 0, "A, B and D must be set")
	need(p.AScale%4 == 0 && p.BScale%4 == 0, "scale pointers must be 4-byte aligned")
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", p, strings.Join(errs, "; "))
	}
	return nil
}

// ltKey is what a plan depends on.
type ltKey struct {
	m, n, k, lda, ldb, ldd       int
	outF32, transA, transB, bf16 bool
	wsBytes                      int
}

// ltPlan is one shape's descriptors and algorithm.
type ltPlan struct {
	desc                C.cublasLtMatmulDesc_t
	aDesc, bDesc, dDesc C.cublasLtMatrixLayout_t
	algo                C.sb_lt_heuristic
}

// MatmulFP8 enqueues p on s (p.Check first). The plan of p's shape is made
// (descriptors, cublasLtMatmulAlgoGetHeuristic) at its first call, so that
// a call inside a graph capture finds it made by an eager one.
func (h *LtHandle) MatmulFP8(s *Stream, p FP8Matmul) error {
	if err := p.Check(); err != nil {
		return err
	}
	return h.matmul(s, p, true, false)
}

// matmul is MatmulFP8 with any transposes (tests reach cuBLASLt's own
// refusals through it).
func (h *LtHandle) matmul(s *Stream, p FP8Matmul, transA, transB bool) error {
	if s == nil {
		return errors.New("cublasLtMatmul: nil stream")
	}
	key := ltKey{p.M, p.N, p.K, p.Lda, p.Ldb, p.Ldd, p.OutF32, transA, transB, false, p.WorkspaceBytes}
	plan, ok := h.plans[key]
	if !ok {
		var err error
		if plan, err = h.newPlan(p, transA, transB); err != nil {
			return err
		}
		h.plans[key] = plan
	}
	api := &h.lt.api
	for _, sc := range []struct {
		attr int
		p    DevPtr
	}{{ltDescAScalePointer, p.AScale}, {ltDescBScalePointer, p.BScale}} {
		ptr := C.CUdeviceptr(sc.p)
		if err := cublasError(int(C.sb_cublasLtMatmulDescSetAttribute(api.descSetAttr, plan.desc, C.int(sc.attr),
			unsafe.Pointer(&ptr), C.size_t(unsafe.Sizeof(ptr)))), "cublasLtMatmulDescSetAttribute(%d)", sc.attr); err != nil {
			return err
		}
	}
	alpha, beta := C.float(1), C.float(0)
	status := C.sb_cublasLtMatmul(api.matmul, h.handle, plan.desc, &alpha, C.CUdeviceptr(p.A), plan.aDesc,
		C.CUdeviceptr(p.B), plan.bDesc, &beta, C.CUdeviceptr(p.D), plan.dDesc, C.CUdeviceptr(p.D), plan.dDesc,
		&plan.algo, C.CUdeviceptr(p.Workspace), C.size_t(p.WorkspaceBytes), s.stream)
	return cublasError(int(status), "%s", p)
}

// newPlan makes p's descriptors and asks cuBLASLt for its best algorithm.
func (h *LtHandle) newPlan(p FP8Matmul, transA, transB bool) (*ltPlan, error) {
	dType := cudaR16BF
	if p.OutF32 {
		dType = cudaR32F
	}
	plan, err := h.newDescs(planSpec{p.M, p.N, p.K, p.Lda, p.Ldb, p.Ldd, transA, transB, cudaR8FE4M3, dType})
	if err != nil {
		return nil, err
	}
	if err := h.pickAlgo(plan, p.WorkspaceBytes); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", p, err), h.destroyPlan(plan))
	}
	return plan, nil
}

// planSpec is what a plan's descriptors say: the shape in cuBLAS's
// column-major terms, the transposes, the types of A and B (inType) and D.
type planSpec struct {
	m, n, k, lda, ldb, ldd int
	transA, transB         bool
	inType, dType          int
}

// newDescs makes the matmul descriptor (CUBLAS_COMPUTE_32F, fp32 scales)
// and the layouts of A, B and D (C shares D's).
func (h *LtHandle) newDescs(sp planSpec) (*ltPlan, error) {
	api := &h.lt.api
	plan := &ltPlan{}
	fail := func(err error) (*ltPlan, error) { return nil, errors.Join(err, h.destroyPlan(plan)) }
	if err := cublasError(int(C.sb_cublasLtMatmulDescCreate(api.descCreate, &plan.desc, cublasCompute32F, cudaR32F)),
		"cublasLtMatmulDescCreate"); err != nil {
		return nil, err
	}
	for _, t := range []struct {
		attr  int
		trans bool
	}{{ltDescTransA, sp.transA}, {ltDescTransB, sp.transB}} {
		op := C.int(cublasOpN)
		if t.trans {
			op = cublasOpT
		}
		if err := cublasError(int(C.sb_cublasLtMatmulDescSetAttribute(api.descSetAttr, plan.desc, C.int(t.attr),
			unsafe.Pointer(&op), C.size_t(unsafe.Sizeof(op)))), "cublasLtMatmulDescSetAttribute(%d)", t.attr); err != nil {
			return fail(err)
		}
	}
	aRows, aCols := sp.m, sp.k
	if sp.transA {
		aRows, aCols = sp.k, sp.m
	}
	bRows, bCols := sp.k, sp.n
	if sp.transB {
		bRows, bCols = sp.n, sp.k
	}
	for _, l := range []struct {
		dst             *C.cublasLtMatrixLayout_t
		typ, rows, cols int
		ld              int
	}{{&plan.aDesc, sp.inType, aRows, aCols, sp.lda}, {&plan.bDesc, sp.inType, bRows, bCols, sp.ldb}, {&plan.dDesc, sp.dType, sp.m, sp.n, sp.ldd}} {
		if err := cublasError(int(C.sb_cublasLtMatrixLayoutCreate(api.layoutCreate, l.dst, C.int(l.typ), C.ulonglong(l.rows),
			C.ulonglong(l.cols), C.longlong(l.ld))), "cublasLtMatrixLayoutCreate(%d×%d, ld %d)", l.rows, l.cols, l.ld); err != nil {
			return fail(err)
		}
	}
	return plan, nil
}

// pickAlgo asks cublasLtMatmulAlgoGetHeuristic for one algorithm within
// the workspace.
func (h *LtHandle) pickAlgo(plan *ltPlan, wsBytes int) error {
	found, err := h.heuristic(plan, wsBytes, 1, nil)
	if err != nil {
		return err
	}
	plan.algo = found[0]
	return nil
}

// heuristic asks cublasLtMatmulAlgoGetHeuristic for up to requested
// algorithms of plan within wsBytes of workspace, best first; the ones it
// marks unusable (state other than success) are left out, and none at all
// is an error. align, when given, is the alignment in bytes of A, B, C and
// D (cuBLASLt assumes 256 otherwise and may offer an algorithm that refuses
// a less aligned pointer).
func (h *LtHandle) heuristic(plan *ltPlan, wsBytes, requested int, align []int) ([]C.sb_lt_heuristic, error) {
	api := &h.lt.api
	var pref C.cublasLtMatmulPreference_t
	if err := cublasError(int(C.sb_cublasLtMatmulPreferenceCreate(api.prefCreate, &pref)), "cublasLtMatmulPreferenceCreate"); err != nil {
		return nil, err
	}
	defer C.sb_cublasLtMatmulPreferenceDestroy(api.prefDestroy, pref)
	ws := C.ulonglong(wsBytes)
	if err := cublasError(int(C.sb_cublasLtMatmulPreferenceSetAttribute(api.prefSetAttr, pref, ltPrefMaxWorkspaceBytes,
		unsafe.Pointer(&ws), C.size_t(unsafe.Sizeof(ws)))), "cublasLtMatmulPreferenceSetAttribute(max workspace)"); err != nil {
		return nil, err
	}
	for i, a := range align {
		v := C.uint(a)
		if err := cublasError(int(C.sb_cublasLtMatmulPreferenceSetAttribute(api.prefSetAttr, pref, C.int(ltPrefMinAlignmentA+i),
			unsafe.Pointer(&v), C.size_t(unsafe.Sizeof(v)))), "cublasLtMatmulPreferenceSetAttribute(min alignment %d: %d bytes)", i, a); err != nil {
			return nil, err
		}
	}
	results := make([]C.sb_lt_heuristic, requested)
	var returned C.int
	if err := cublasError(int(C.sb_cublasLtMatmulAlgoGetHeuristic(api.heuristic, h.handle, plan.desc, plan.aDesc, plan.bDesc,
		plan.dDesc, plan.dDesc, pref, C.int(requested), &results[0], &returned)), "cublasLtMatmulAlgoGetHeuristic"); err != nil {
		return nil, err
	}
	var out []C.sb_lt_heuristic
	for _, r := range results[:min(int(returned), requested)] {
		if r.state == 0 {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("cublasLtMatmulAlgoGetHeuristic found no algorithm")
	}
	return out, nil
}

func (h *LtHandle) destroyPlan(p *ltPlan) error {
	api := &h.lt.api
	var errs []error
	for _, l := range []*C.cublasLtMatrixLayout_t{&p.aDesc, &p.bDesc, &p.dDesc} {
		if *l != nil {
			errs = append(errs, cublasError(int(C.sb_cublasLtMatrixLayoutDestroy(api.layoutDestroy, *l)), "cublasLtMatrixLayoutDestroy"))
			*l = nil
		}
	}
	if p.desc != nil {
		errs = append(errs, cublasError(int(C.sb_cublasLtMatmulDescDestroy(api.descDestroy, p.desc)), "cublasLtMatmulDescDestroy"))
		p.desc = nil
	}
	return errors.Join(errs...)
}

// Destroy releases every plan and the handle.
func (h *LtHandle) Destroy() error {
	var errs []error
	for k, p := range h.plans {
		errs = append(errs, h.destroyPlan(p))
		delete(h.plans, k)
	}
	if h.handle != nil {
		errs = append(errs, cublasError(int(C.sb_cublasLtDestroy(h.lt.api.destroy, h.handle)), "cublasLtDestroy"))
		h.handle = nil
	}
	return errors.Join(errs...)
}

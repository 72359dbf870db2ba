package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Enum values passed to cublasGemmEx.
const (
	cudaR16BF         = 14 // cudaDataType CUDA_R_16BF
	cublasCompute32F  = 68 // cublasComputeType_t CUBLAS_COMPUTE_32F
	cublasGemmDefault = -1 // cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
	cublasOpN         = 0  // cublasOperation_t CUBLAS_OP_N
	cublasOpT         = 1  // cublasOperation_t CUBLAS_OP_T
)

// libraryPropertyType values for cublasGetProperty.
const (
	propMajorVersion = 0
	propMinorVersion = 1
	propPatchLevel   = 2
)

// cublasAPI holds cuBLAS's entry points. cublasSetWorkspace_v2 is absent
// from older 11.x releases.
type cublasAPI struct {
	getProperty, create, destroy, setStream, setWorkspace, gemmEx unsafe.Pointer
}

func (a *cublasAPI) slots() []symbolSlot {
	return []symbolSlot{
		{name: "cublasGetProperty", dst: &a.getProperty},
		{name: "cublasCreate_v2", dst: &a.create},
		{name: "cublasDestroy_v2", dst: &a.destroy},
		{name: "cublasSetStream_v2", dst: &a.setStream},
		{name: "cublasSetWorkspace_v2", dst: &a.setWorkspace, optional: true},
		{name: "cublasGemmEx", dst: &a.gemmEx},
	}
}

// Cublas is an opened cuBLAS library.
type Cublas struct {
	lib      *library
	api      cublasAPI
	choice   LibraryChoice
	emulated string
}

// OpenCublas finds and opens cuBLAS from the same kind of candidates as
// OpenNVRTC: explicitPath, $STEPBENCH_CUBLAS, the sonames present in
// $STEPBENCH_CUDA_LIBS=DIR (only there, when set), else
// libcublas.so.13/.12/.11 through the loader path, $CUDA_HOME/lib64,
// /usr/local/cuda*/lib64, then the Python wheels' site-packages/nvidia/cublas/lib
// and nvidia/cu13/lib. Candidates whose major version (from the file name)
// the driver supports are tried first, newest major first, then the search
// order; the first that opens wins (Choice says which and why). Opening
// needs no context; NewHandle needs a current one.
func OpenCublas(explicitPath string) (*Cublas, error) {
	env := hostSearchEnv()
	return openCublas(explicitPath, env, probeDriver(env))
}

func openCublas(explicitPath string, env searchEnv, driver driverInfo) (*Cublas, error) {
	b := &Cublas{}
	lib, choice, err := cublasSpec.open(explicitPath, env, driver, func(l *library) (libVersion, error) {
		if err := l.resolve(b.api.slots()); err != nil {
			return libVersion{}, err
		}
		v, err := cublasVersion(b.api.getProperty)
		return libVersion{major: v / 10000, minor: v % 10000 / 100, patch: v % 100}, err
	})
	if err != nil {
		return nil, err
	}
	// The load function may have run for other candidates too: resolve the
	// chosen one again so that every entry point is its own.
	if err := lib.resolve(b.api.slots()); err != nil {
		lib.close()
		return nil, err
	}
	b.lib, b.choice = lib, choice
	b.emulated = lib.describeEmulator()
	return b, nil
}

// Path is the file or soname cuBLAS was opened from.
func (b *Cublas) Path() string { return b.lib.path }

// Choice says which cuBLAS was chosen, from which candidates, and why.
func (b *Cublas) Choice() LibraryChoice { return b.choice }

// Emulated is the description of stepbench's emulated cuBLAS when that is
// what was opened, "" for the real one.
func (b *Cublas) Emulated() string { return b.emulated }

// Version returns cuBLAS's version as major*10000 + minor*100 + patch
// (the encoding of CUBLAS_VERSION, e.g. 120903 for 12.9.3).
func (b *Cublas) Version() (int, error) { return cublasVersion(b.api.getProperty) }

func cublasVersion(getProperty unsafe.Pointer) (int, error) {
	parts := [3]C.int{}
	for i, prop := range []C.int{propMajorVersion, propMinorVersion, propPatchLevel} {
		if err := cublasError(int(C.sb_cublasGetProperty(getProperty, prop, &parts[i])), "cublasGetProperty(%d)", int(prop)); err != nil {
			return 0, err
		}
	}
	return int(parts[0])*10000 + int(parts[1])*100 + int(parts[2]), nil
}

// CublasHandle is a cuBLAS handle bound to the context current at NewHandle.
type CublasHandle struct {
	lib    *Cublas
	handle C.cublasHandle_t
}

// NewHandle creates a handle on the current context (the primary context
// made current by Driver.NewContext).
func (b *Cublas) NewHandle() (*CublasHandle, error) {
	h := &CublasHandle{lib: b}
	if err := cublasError(int(C.sb_cublasCreate(b.api.create, &h.handle)), "cublasCreate_v2"); err != nil {
		return nil, err
	}
	return h, nil
}

// SetStream makes the handle enqueue on s and then gives it workspace
// (every time, since cublasSetStream resets the workspace to cuBLAS's own
// pool). With a fixed workspace a GEMM never allocates, which graph capture
// requires. workspaceBytes 0 leaves cuBLAS's default.
func (h *CublasHandle) SetStream(s *Stream, workspace DevPtr, workspaceBytes int) error {
	if s == nil {
		return errors.New("cublasSetStream_v2: nil stream")
	}
	if workspaceBytes < 0 {
		return fmt.Errorf("cublasSetWorkspace_v2: negative size %d", workspaceBytes)
	}
	api := &h.lib.api
	if err := cublasError(int(C.sb_cublasSetStream(api.setStream, h.handle, s.stream)), "cublasSetStream_v2"); err != nil {
		return err
	}
	if workspaceBytes == 0 {
		return nil
	}
	if api.setWorkspace == nil {
		return fmt.Errorf("cublasSetWorkspace_v2: not in %s (cuBLAS too old for a fixed workspace)", h.lib.lib.path)
	}
	return cublasError(int(C.sb_cublasSetWorkspace(api.setWorkspace, h.handle, C.CUdeviceptr(workspace), C.size_t(workspaceBytes))),
		"cublasSetWorkspace_v2(%d bytes)", workspaceBytes)
}

// GemmBF16 computes C = alpha*op(A)*op(B) + beta*C in cuBLAS's column-major
// convention: op(A) is m×k, op(B) is k×n, C is m×n, with bf16 inputs and
// output, fp32 accumulation (CUBLAS_COMPUTE_32F) and the default algorithm.
// For row-major Y[M][N] = X[M][K] · W[N][K]ᵀ call
// GemmBF16(true, false, N, M, K, 1, W, K, X, K, 0, Y, N).
func (h *CublasHandle) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a DevPtr, lda int, b DevPtr, ldb int, beta float32, c DevPtr, ldc int) error {
	call := fmt.Sprintf("cublasGemmEx(bf16, %s%s, m=%d n=%d k=%d, lda=%d ldb=%d ldc=%d)", opName(transA), opName(transB), m, n, k, lda, ldb, ldc)
	for _, v := range []int{m, n, k, lda, ldb, ldc} {
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("%s: dimension %d out of range", call, v)
		}
	}
	opA, opB := C.int(cublasOpN), C.int(cublasOpN)
	if transA {
		opA = cublasOpT
	}
	if transB {
		opB = cublasOpT
	}
	// alpha and beta are read from host memory during the call (host pointer
	// mode), also while capturing; C copies keep the cgo rules trivial.
	cAlpha, cBeta := C.float(alpha), C.float(beta)
	api := &h.lib.api
	status := C.sb_cublasGemmEx(api.gemmEx, h.handle, opA, opB, C.int(m), C.int(n), C.int(k),
		&cAlpha, C.CUdeviceptr(a), cudaR16BF, C.int(lda),
		C.CUdeviceptr(b), cudaR16BF, C.int(ldb),
		&cBeta, C.CUdeviceptr(c), cudaR16BF, C.int(ldc),
		cublasCompute32F, cublasGemmDefault)
	return cublasError(int(status), call)
}

func opName(trans bool) string {
	if trans {
		return "T"
	}
	return "N"
}

// Destroy releases the handle.
func (h *CublasHandle) Destroy() error {
	if h.handle == nil {
		return nil
	}
	err := cublasError(int(C.sb_cublasDestroy(h.lib.api.destroy, h.handle)), "cublasDestroy_v2")
	h.handle = nil
	return err
}

package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a failed call into the driver, NVRTC or cuBLAS.
type Error struct {
	Call string // the function and its key arguments, e.g. "cuMemAlloc_v2(1024 bytes)"
	Code int    // the library's numeric status
	Name string // the library's name for Code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	// Detail is what the emulated driver knows about the failure (the
	// allocation, byte offset, block and thread of a fault; the call sites of
	// a barrier divergence); always empty with a real driver.
	Detail string
}

// stickyCodes are the CUresults after which a context is unusable: every
// later call fails with the same code until the context is destroyed.
var stickyCodes = map[int]bool{700: true, 702: true, 710: true, 714: true, 715: true, 716: true, 717: true, 718: true, 719: true}

// Sticky reports whether e left its context unusable (a faulting kernel).
func (e *Error) Sticky() bool { return stickyCodes[e.Code] && strings.HasPrefix(e.Name, "CUDA_ERROR_") }

// IsSticky reports whether err wraps a sticky CUDA error.
func IsSticky(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Sticky()
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Call + ": " + e.Name + " (emulated device: " + e.Detail + ")"
	}
	return e.Call + ": " + e.Name
}

// cublasStatusNames maps cublasStatus_t values to their names; cuBLAS has no
// function for this that works without a handle on every version.
var cublasStatusNames = map[int]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// cublasStatusName names a cublasStatus_t, including values newer than this table.
func cublasStatusName(status int) string {
	if name, ok := cublasStatusNames[status]; ok {
		return name
	}
	return fmt.Sprintf("CUBLAS_STATUS_UNKNOWN(%d)", status)
}

// cublasError turns a non-zero status into an *Error; nil for success.
func cublasError(status int, call string, args ...any) error {
	if status == 0 {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	return &Error{Call: call, Code: status, Name: cublasStatusName(status)}
}

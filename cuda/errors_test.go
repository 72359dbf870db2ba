package cuda

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorMessageNamesCallAndError(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Call: "cuMemAlloc_v2(1073741824 bytes)", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"},
			"cuMemAlloc_v2(1073741824 bytes): CUDA_ERROR_OUT_OF_MEMORY"},
		{&Error{Call: "nvrtcCompileProgram(x.cu)", Code: 6, Name: "NVRTC_ERROR_COMPILATION"},
			"nvrtcCompileProgram(x.cu): NVRTC_ERROR_COMPILATION"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		var target *Error
		if wrapped := fmt.Errorf("load: %w", tt.err); !errors.As(wrapped, &target) || target.Code != tt.err.Code {
			t.Errorf("errors.As lost the *Error of %q", tt.want)
		}
	}
}

func TestCublasStatusName(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{0, "CUBLAS_STATUS_SUCCESS"},
		{1, "CUBLAS_STATUS_NOT_INITIALIZED"},
		{3, "CUBLAS_STATUS_ALLOC_FAILED"},
		{7, "CUBLAS_STATUS_INVALID_VALUE"},
		{8, "CUBLAS_STATUS_ARCH_MISMATCH"},
		{11, "CUBLAS_STATUS_MAPPING_ERROR"},
		{13, "CUBLAS_STATUS_EXECUTION_FAILED"},
		{14, "CUBLAS_STATUS_INTERNAL_ERROR"},
		{15, "CUBLAS_STATUS_NOT_SUPPORTED"},
		{16, "CUBLAS_STATUS_LICENSE_ERROR"},
		{2, "CUBLAS_STATUS_UNKNOWN(2)"},
		{99, "CUBLAS_STATUS_UNKNOWN(99)"},
	}
	for _, tt := range tests {
		if got := cublasStatusName(tt.status); got != tt.want {
			t.Errorf("cublasStatusName(%d) = %q, want %q", tt.status, got, tt.want)
		}
	}
}

func TestCublasError(t *testing.T) {
	if err := cublasError(0, "cublasCreate_v2"); err != nil {
		t.Errorf("status 0: got %v, want nil", err)
	}
	err := cublasError(7, "cublasGemmEx(m=%d)", 5)
	if err == nil || err.Error() != "cublasGemmEx(m=5): CUBLAS_STATUS_INVALID_VALUE" {
		t.Errorf("status 7: got %v", err)
	}
}

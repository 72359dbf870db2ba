package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stepbench_tensor is laid out as DLPack 1.x's DLTensor on LP64: void *data
// (0), DLDevice {int32 device_type, int32 device_id} (8), int32 ndim (16),
// DLDataType {uint8 code, uint8 bits, uint16 lanes} (20), int64 *shape (24),
// int64 *strides (32), uint64 byte_offset (40); 48 bytes.
func TestOpTensorIsDLTensor(t *testing.T) {
	if got, want := OpTensorLayout(), []uintptr{48, 0, 8, 16, 20, 24, 32, 40}; !slices.Equal(got, want) {
		t.Errorf("stepbench_tensor size and offsets %v, DLTensor's are %v", got, want)
	}
}

func TestOpenOpLibraryErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnot.so")
	if err := os.WriteFile(path, []byte("no ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(t.TempDir(), "missing.so")} {
		if _, err := OpenOpLibrary(p); err == nil || !strings.Contains(err.Error(), "op library "+p) {
			t.Errorf("OpenOpLibrary(%s) = %v, want an error naming it", p, err)
		}
	}
}

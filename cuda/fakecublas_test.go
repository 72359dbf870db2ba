package cuda

import "testing"

func TestFakeCublasGemmArguments(t *testing.T) {
	so := buildFake(t, "fakecublas.c", t.TempDir(), "libcublas.so.12")
	lib, err := OpenCublas(so)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := lib.Version(); err != nil || v != 120903 {
		t.Errorf("Version = %d, %v; want 120903", v, err)
	}
	h, err := lib.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	s := &Stream{}
	if err := h.SetStream(s, 0x400, 4096); err != nil {
		t.Errorf("SetStream: %v", err)
	}
	if err := h.SetStream(s, 0x400, 8192); err == nil || err.Error() != "cublasSetWorkspace_v2(8192 bytes): CUBLAS_STATUS_INVALID_VALUE" {
		t.Errorf("SetStream with a wrong size: err = %v", err)
	}
	if err := h.GemmBF16(true, false, 5, 3, 7, 1, 0x100, 7, 0x200, 7, 0.5, 0x300, 5); err != nil {
		t.Errorf("GemmBF16 with the expected arguments: %v", err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"transB", func() error { return h.GemmBF16(true, true, 5, 3, 7, 1, 0x100, 7, 0x200, 7, 0.5, 0x300, 5) }},
		{"beta", func() error { return h.GemmBF16(true, false, 5, 3, 7, 1, 0x100, 7, 0x200, 7, 0, 0x300, 5) }},
		{"ldc", func() error { return h.GemmBF16(true, false, 5, 3, 7, 1, 0x100, 7, 0x200, 7, 0.5, 0x300, 6) }},
		{"negative m", func() error { return h.GemmBF16(true, false, -5, 3, 7, 1, 0x100, 7, 0x200, 7, 0.5, 0x300, 5) }},
	}
	for _, tt := range tests {
		if err := tt.call(); err == nil {
			t.Errorf("%s: fake cuBLAS accepted a wrong argument", tt.name)
		}
	}
	if err := h.Destroy(); err != nil {
		t.Errorf("Destroy: %v", err)
	}
}

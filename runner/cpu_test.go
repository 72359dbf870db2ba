package runner

import (
	"slices"
	"testing"

	"stepbench/kernels/ref"
)

// The cpu backend's Linear reads a prepared matrix's float32 copy: the
// same bits as kernels/ref's Linear, and a write to the matrix (an upload,
// dummy weights, an op writing it) drops the copy instead of leaving it
// stale.
func TestCPULinearPreparedWeights(t *testing.T) {
	be := NewCPU()
	const m, n, k = 3, 500, 128 // several column chunks, on every core
	w, _ := be.Alloc(BF16, n*k)
	x, _ := be.Alloc(BF16, m*k)
	out, _ := be.Alloc(BF16, m*n)
	if err := be.FillDummy(w, 0, n*k, 1, "w", 0, ref.DummyUniform); err != nil {
		t.Fatal(err)
	}
	if err := be.FillDummy(x, 0, m*k, 2, "x", 0, ref.DummyUniform); err != nil {
		t.Fatal(err)
	}
	if err := be.PrepareWeights([]Buffer{w}); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		if err := be.Linear(out, x, w, m, n, k); err != nil {
			t.Fatal(err)
		}
		want := make([]uint16, m*n)
		ref.Linear(want, x.(*cpuBuffer).b16, w.(*cpuBuffer).b16, m, n, k)
		if !slices.Equal(out.(*cpuBuffer).b16, want) {
			t.Errorf("%s: Linear differs from ref.Linear", what)
		}
	}
	check("prepared")
	if err := be.FillDummy(w, 0, n*k, 3, "w", 0, ref.DummyUniform); err != nil {
		t.Fatal(err)
	}
	check("after new dummy weights")
	if err := be.PrepareWeights([]Buffer{w}); err != nil {
		t.Fatal(err)
	}
	if err := be.UploadBF16(w, 7, []uint16{ref.F32ToBF16(3)}); err != nil {
		t.Fatal(err)
	}
	check("after an upload")
	if err := be.PrepareWeights([]Buffer{w}); err != nil {
		t.Fatal(err)
	}
	if err := be.SiluMul(w, x, 1, k/2); err != nil {
		t.Fatal(err)
	}
	check("after an op wrote it")
}

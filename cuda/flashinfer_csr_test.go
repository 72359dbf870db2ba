package cuda

import (
	"os"
	"slices"
	"testing"
	"unsafe"
)

// The FlashInfer recipe's derivation of its CSR paged form from op ABI 2's
// view (examples/ops/flashinfer/csr_from_table.cuh) runs on the device and
// gives the header's formula: lengths 1, a page, a page and one, the
// table's maximum and 0 (an empty sequence), over a shuffled table whose
// unused entries are never copied.
func TestFlashInferCSRFromTable(t *testing.T) {
	g := newGPUEnv(t)
	src, err := os.ReadFile("../examples/ops/flashinfer/csr_from_table.cuh")
	if err != nil {
		t.Fatal(err)
	}
	cubin, log, err := openTestNVRTC(t).Compile(string(src), "csr_from_table.cu", []string{"--gpu-architecture=" + g.arch()})
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, log)
	}
	mod, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	f, err := mod.Function("sb_csr_from_table")
	if err != nil {
		t.Fatal(err)
	}
	const PS, MP = 16, 3
	seqLens := []int32{1, 16, 17, 48, 0}
	table := []int32{7, -9, -9, 3, -9, -9, 0, 5, -9, 2, 6, 1, -9, -9, -9} // -9: never to be read
	B := len(seqLens)
	var wantPtr, wantIdx, wantLast []int32
	wantPtr = append(wantPtr, 0)
	for b, l := range seqLens {
		n := (l + PS - 1) / PS
		wantIdx = append(wantIdx, table[b*MP:b*MP+int(n)]...)
		wantPtr = append(wantPtr, wantPtr[b]+n)
		wantLast = append(wantLast, map[bool]int32{true: l - (n-1)*PS, false: 0}[n > 0])
	}
	dTable, dLens := g.alloc(t, 4*len(table)), g.alloc(t, 4*B)
	dPtr, dIdx, dLast := g.alloc(t, 4*(B+1)), g.alloc(t, 4*B*MP), g.alloc(t, 4*B)
	for _, c := range []struct {
		dst DevPtr
		src []int32
	}{{dTable, table}, {dLens, seqLens}} {
		if err := g.stream.CopyHtoD(c.dst, unsafe.Pointer(&c.src[0]), 4*len(c.src)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.stream.Launch(f, Dim3{X: 1, Y: 1, Z: 1}, Dim3{X: 256, Y: 1, Z: 1}, 0, dTable, dLens, int32(B), int32(MP), int32(PS), dPtr, dIdx, dLast); err != nil {
		t.Fatal(err)
	}
	get := func(p DevPtr, n int) []int32 {
		out := make([]int32, n)
		if err := g.stream.CopyDtoH(unsafe.Pointer(&out[0]), p, 4*n); err != nil {
			t.Fatal(err)
		}
		g.sync(t)
		return out
	}
	if got := get(dPtr, B+1); !slices.Equal(got, wantPtr) {
		t.Errorf("kv_indptr %v, want %v", got, wantPtr)
	}
	if got := get(dIdx, len(wantIdx)); !slices.Equal(got, wantIdx) {
		t.Errorf("kv_indices %v, want %v", got, wantIdx)
	}
	if got := get(dLast, B); !slices.Equal(got, wantLast) {
		t.Errorf("kv_last_page_len %v, want %v", got, wantLast)
	}
}

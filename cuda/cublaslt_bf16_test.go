package cuda

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"stepbench/kernels/ref"
)

// The bf16 matmul's own checks name the rule and the shape.
func TestBF16MatmulCheck(t *testing.T) {
	ok := BF16Matmul{M: 64, N: 17, K: 32, TransA: true, A: 1 << 20, Lda: 32, B: 2 << 20, Ldb: 32, D: 3 << 20, Ldd: 64}
	if err := ok.Check(); err != nil {
		t.Fatalf("a valid bf16 GEMM refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*BF16Matmul)
		want string
	}{
		{"lda below k (TN)", func(p *BF16Matmul) { p.Lda = 16 }, "leading dimensions 16, 32, 64 below the stored rows 32, 32, 64"},
		{"lda below m (NN)", func(p *BF16Matmul) { p.TransA = false }, "below the stored rows 64"},
		{"odd D", func(p *BF16Matmul) { p.D++ }, "2-byte aligned"},
		{"no B", func(p *BF16Matmul) { p.B = 0 }, "A, B and D must be set"},
		{"n zero", func(p *BF16Matmul) { p.N = 0 }, "n = 0 out of range"},
		{"workspace bytes without a pointer", func(p *BF16Matmul) { p.WorkspaceBytes = 1 << 20 }, "workspace of 1048576 bytes"},
	} {
		p := ok
		tc.edit(&p)
		err := p.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "cublasLtMatmul(bf16") {
			t.Errorf("%s: error %v, want %q and the call", tc.name, err, tc.want)
		}
	}
}

// A bf16 GEMM through cuBLASLt (the emulated one without a GPU) against a
// Go reference, TN (stepbench's Linear) and NN: the heuristic offers several
// algorithms within the workspace, each gives the reference's values
// (within bf16 rounding of an fp32 sum) and all of them the same bits; an
// algorithm needing more workspace than the call gives is refused by name.
func TestCublasLtBF16Matmul(t *testing.T) {
	g := newGPUEnv(t)
	lt, err := OpenCublasLt(openTestCublas(t))
	if err != nil {
		t.Fatal(err)
	}
	h, err := lt.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy()
	const m, n, k, wsBytes = 72, 19, 200, 4 << 20 // D is m×n
	a, b := make([]uint16, k*m), make([]uint16, k*n)
	for i := range a {
		a[i] = ref.F32ToBF16(float32(i%7-3) * 0.375)
	}
	for i := range b {
		b[i] = ref.F32ToBF16(float32(i%5-2) * 0.25)
	}
	dA, dB, dD, ws := g.alloc(t, 2*len(a)), g.alloc(t, 2*len(b)), g.alloc(t, 2*m*n), g.alloc(t, wsBytes)
	g.upload(t, dA, unsafe.Pointer(&a[0]), 2*len(a))
	g.upload(t, dB, unsafe.Pointer(&b[0]), 2*len(b))
	for _, transA := range []bool{true, false} {
		lda := k
		aAt := func(i, q int) uint16 { return a[q+i*k] }
		if !transA {
			lda = m
			aAt = func(i, q int) uint16 { return a[i+q*m] }
		}
		want := make([]float32, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for q := 0; q < k; q++ {
					s += float64(ref.BF16ToF32(aAt(i, q))) * float64(ref.BF16ToF32(b[q+j*k]))
				}
				want[i+j*m] = float32(s)
			}
		}
		p := BF16Matmul{M: m, N: n, K: k, TransA: transA, A: dA, Lda: lda, B: dB, Ldb: k, D: dD, Ldd: m, Workspace: ws, WorkspaceBytes: wsBytes}
		algos, err := h.BF16Algos(p, 8)
		if err != nil {
			t.Fatal(err)
		}
		if len(algos) < 2 {
			t.Fatalf("transA %v: the heuristic offered %d algorithms, want several to choose from", transA, len(algos))
		}
		var first []float32
		for i, algo := range algos {
			if err := h.MatmulBF16(g.stream, p, algo); err != nil {
				t.Fatalf("transA %v algo %d: %v", transA, i, err)
			}
			got := g.downloadD(t, dD, m*n, false)
			rel, err := ref.RelErr(got, want)
			if err != nil || rel > 4e-3 {
				t.Fatalf("transA %v algo %d: relative error %.3g (%v), want ≤ 4e-3", transA, i, rel, err)
			}
			if first == nil {
				first = got
			} else if !slicesEqual(got, first) {
				t.Errorf("transA %v: algorithm %d's bits differ from algorithm 0's", transA, i)
			}
		}
	}
	checkLtWorkspaceRules(t, g, h, m, n, k, dA, dB, dD, ws, wsBytes)
}

// checkLtWorkspaceRules: without workspace the heuristic leaves out what
// needs it, an algorithm needing more than given is refused before the
// call, and a forged algorithm is cuBLASLt's own refusal, named.
func checkLtWorkspaceRules(t *testing.T, g *gpuEnv, h *LtHandle, m, n, k int, dA, dB, dD, ws DevPtr, wsBytes int) {
	t.Helper()
	p := BF16Matmul{M: m, N: n, K: k, TransA: true, A: dA, Lda: k, B: dB, Ldb: k, D: dD, Ldd: m}
	algos, err := h.BF16Algos(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := h.BF16Algos(BF16Matmul{M: m, N: n, K: k, TransA: true, A: dA, Lda: k, B: dB, Ldb: k, D: dD, Ldd: m, Workspace: ws, WorkspaceBytes: wsBytes}, 8)
	var needy *LtAlgo
	for i := range all {
		if all[i].WorkspaceBytes > 0 {
			needy = &all[i]
		}
	}
	for _, a := range algos {
		if a.WorkspaceBytes > 0 {
			t.Errorf("no workspace given, yet an algorithm needing %d bytes offered", a.WorkspaceBytes)
		}
	}
	if needy == nil {
		t.Fatal("no algorithm needs workspace: the workspace rule is not exercised")
	}
	if err := h.MatmulBF16(g.stream, p, *needy); err == nil || !strings.Contains(err.Error(), "bytes of workspace") {
		t.Errorf("an algorithm needing workspace run without: %v", err)
	}
	// A's pointer 2 bytes off 16: the heuristic, told so, leaves out the
	// algorithm that needs 16-byte operands, and that algorithm refuses the
	// pointer if called anyway.
	off := BF16Matmul{M: m, N: n, K: k - 1, TransA: true, A: dA + 2, Lda: k, B: dB, Ldb: k, D: dD, Ldd: m}
	if a, _, _ := off.Alignments(); a != 2 {
		t.Fatalf("alignment of A + 2: %d, want 2", a)
	}
	fewer, err := h.BF16Algos(off, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(fewer) >= len(algos) {
		t.Errorf("A 2-byte aligned: %d algorithms offered, want fewer than the aligned %d", len(fewer), len(algos))
	}
	for _, a := range algos {
		if !slices.ContainsFunc(fewer, func(b LtAlgo) bool { return b.Data == a.Data }) {
			if err := h.MatmulBF16(g.stream, off, a); err == nil {
				t.Errorf("an algorithm left out for A's alignment ran with it")
			}
		}
	}
	for _, f := range fewer {
		if err := h.MatmulBF16(g.stream, off, f); err != nil {
			t.Errorf("an algorithm offered for a 2-byte aligned A: %v", err)
		}
	}
	// A forged algorithm is cuBLASLt's own refusal, named.
	var e *Error
	if err := h.MatmulBF16(g.stream, p, LtAlgo{Data: [8]uint64{1, 2, 3}}); !errors.As(err, &e) || !strings.Contains(err.Error(), "cublasLtMatmul(bf16 TN") {
		t.Errorf("a forged algorithm: %v, want a named cuBLAS status", err)
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package cuda

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"stepbench/kernels/ref"
)

func TestLtPathFor(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/cuda/lib64/libcublas.so.12": "/usr/local/cuda/lib64/libcublasLt.so.12",
		"libcublas.so.11":                       "libcublasLt.so.11",
		"/x/build/emu/libcublas.so.13":          "/x/build/emu/libcublasLt.so.13",
		"/opt/my-cublas.so":                     "/opt/libcublasLt.so",
	} {
		if got := LtPathFor(in); got != want {
			t.Errorf("LtPathFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// cuBLASLt's FP8 rules are checked before any call, each named.
func TestFP8MatmulCheck(t *testing.T) {
	ok := FP8Matmul{M: 4096, N: 3, K: 4096, A: 1 << 20, Lda: 4096, B: 2 << 20, Ldb: 4096, D: 3 << 20, Ldd: 4096}
	if err := ok.Check(); err != nil {
		t.Fatalf("a valid FP8 GEMM refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*FP8Matmul)
		want string
	}{
		{"k not a multiple of 16", func(p *FP8Matmul) { p.K, p.Lda, p.Ldb = 4100, 4100, 4100 }, "must be multiples of 16"},
		{"m not a multiple of 16", func(p *FP8Matmul) { p.M, p.Ldd = 4104, 4104 }, "m = 4104 and k = 4096 must be multiples of 16"},
		{"misaligned B", func(p *FP8Matmul) { p.B += 8 }, "B = 0x200008 is not 16-byte aligned"},
		{"leading dimension below k", func(p *FP8Matmul) { p.Lda = 2048 }, "leading dimensions 2048"},
		{"fp32 D leading dimension", func(p *FP8Matmul) { p.OutF32, p.M, p.Ldd = true, 16, 18 }, "must be multiples of 16 bytes"},
		{"no D", func(p *FP8Matmul) { p.D = 0 }, "A, B and D must be set"},
	} {
		p := ok
		tc.edit(&p)
		if err := p.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// An FP8 GEMM through cuBLASLt (the emulated one without a GPU): exact
// small products, the scales read from device memory when the GEMM runs
// (set on the stream just before it), bf16 and fp32 outputs; a layout that
// is not TN is cuBLASLt's own CUBLAS_STATUS_NOT_SUPPORTED.
func TestCublasLtFP8Matmul(t *testing.T) {
	g := newGPUEnv(t)
	if g.props.Major*10+g.props.Minor < 89 {
		t.Skipf("compute capability %d.%d has no FP8 GEMM", g.props.Major, g.props.Minor)
	}
	lt, err := OpenCublasLt(openTestCublas(t))
	if err != nil {
		t.Fatal(err)
	}
	h, err := lt.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy()
	const m, n, k = 32, 3, 48 // D is m×n; A (weights) k×m, B (activations) k×n
	a, b := make([]uint8, k*m), make([]uint8, k*n)
	for i := range a {
		a[i] = ref.F32ToE4M3(float32(i%5) - 2)
	}
	for i := range b {
		b[i] = ref.F32ToE4M3(float32(i%3) * 0.5)
	}
	dA, dB, dD, scales := g.alloc(t, len(a)), g.alloc(t, len(b)), g.alloc(t, 4*m*n), g.alloc(t, 8)
	g.upload(t, dA, unsafe.Pointer(&a[0]), len(a))
	g.upload(t, dB, unsafe.Pointer(&b[0]), len(b))
	ws := g.alloc(t, 1<<20)
	for _, outF32 := range []bool{false, true} {
		// The scales land on the stream right before the GEMM: 2 and 0.25.
		if err := g.stream.Memset32(scales, math.Float32bits(2), 1); err != nil {
			t.Fatal(err)
		}
		if err := g.stream.Memset32(scales+4, math.Float32bits(0.25), 1); err != nil {
			t.Fatal(err)
		}
		p := FP8Matmul{M: m, N: n, K: k, A: dA, Lda: k, B: dB, Ldb: k, D: dD, Ldd: m, OutF32: outF32,
			AScale: scales, BScale: scales + 4, Workspace: ws, WorkspaceBytes: 1 << 20}
		if err := h.MatmulFP8(g.stream, p); err != nil {
			t.Fatal(err)
		}
		got := g.downloadD(t, dD, m*n, outF32)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var want float32
				for q := 0; q < k; q++ {
					want += ref.E4M3ToF32(a[q+i*k]) * ref.E4M3ToF32(b[q+j*k])
				}
				if want *= 0.5; got[i+j*m] != want {
					t.Fatalf("fp32 out %v: D[%d,%d] = %g, want %g", outF32, i, j, got[i+j*m], want)
				}
			}
		}
	}
	nn := FP8Matmul{M: m, N: n, K: k, A: dA, Lda: m, B: dB, Ldb: k, D: dD, Ldd: m, Workspace: ws, WorkspaceBytes: 1 << 20}
	var e *Error
	if err := h.matmul(g.stream, nn, false, false); !errors.As(err, &e) || e.Name != "CUBLAS_STATUS_NOT_SUPPORTED" {
		t.Errorf("an NN FP8 GEMM: %v, want CUBLAS_STATUS_NOT_SUPPORTED", err)
	}
}

func (g *gpuEnv) upload(t *testing.T, dst DevPtr, src unsafe.Pointer, bytes int) {
	t.Helper()
	h := g.allocHost(t, bytes)
	copy(unsafe.Slice((*byte)(h.Ptr), bytes), unsafe.Slice((*byte)(src), bytes))
	if err := g.stream.CopyHtoD(dst, h.Ptr, bytes); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
}

// downloadD reads n elements of D, bf16 or fp32, as float32.
func (g *gpuEnv) downloadD(t *testing.T, src DevPtr, n int, f32 bool) []float32 {
	t.Helper()
	size := 2
	if f32 {
		size = 4
	}
	h := g.allocHost(t, size*n)
	if err := g.stream.CopyDtoH(h.Ptr, src, size*n); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
	out := make([]float32, n)
	for i := range out {
		if f32 {
			out[i] = unsafe.Slice((*float32)(h.Ptr), n)[i]
		} else {
			out[i] = bf16ToF32(unsafe.Slice((*uint16)(h.Ptr), n)[i])
		}
	}
	return out
}

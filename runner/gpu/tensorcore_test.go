package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// mmaCheckSource multiplies one 16x16 by one 16x8 bf16 tile with the
// common.cu tensor-core helpers the way an attention kernel does: cp.async
// into shared memory, ldmatrix (transposed for B, stored [k][n]), mma.
// WAIT is replaced by the wait (or nothing, to seed a missing wait).
const mmaCheckSource = `
extern "C" __global__ void __launch_bounds__(32) mma_check(float* d, const unsigned short* a,
                                                           const unsigned short* b, const float* c) {
    __shared__ alignas(16) unsigned short as[16 * 16];
    __shared__ alignas(16) unsigned short bs[16 * 8];
    const int lane = threadIdx.x;
    cp_async16(as + lane * 8, a + lane * 8);
    if (lane < 16) cp_async16(bs + lane * 8, b + lane * 8);
    cp_async_commit();
    WAIT
    __syncwarp();
    unsigned af[4], bf[2];
    ldmatrix_x4(af, as + (lane % 16) * 16 + (lane / 16) * 8);
    ldmatrix_x2_trans(bf, bs + (lane % 16) * 8);
    const int g = lane >> 2, t = lane & 3;
    float cf[4], df[4];
    for (int i = 0; i < 4; i++) cf[i] = c[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
    mma_m16n8k16_bf16(df, af, bf, cf);
    for (int i = 0; i < 4; i++) d[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = df[i];
}
`

func mmaCheckUnit(t *testing.T, wait bool) string {
	t.Helper()
	srcs := mustSources(t)
	w := "cp_async_wait<0>();"
	if !wait {
		w = ""
	}
	return kernels.TranslationUnit(srcs[kernels.CommonSource], "mma_check.cu", strings.Replace(mmaCheckSource, "WAIT", w, 1))
}

// TestTensorCoreHelpersCompile compiles the helpers' PTX with the real NVRTC
// (11.8 in CI) for Ampere and Hopper: inline PTX is checked by ptxas only.
func TestTensorCoreHelpersCompile(t *testing.T) {
	n := openNVRTCForTest(t)
	for _, arch := range []int{80, 90} {
		cubin, log, err := n.Compile(mmaCheckUnit(t, true), "mma_check.cu", kernels.CompileOptions(arch))
		if err != nil {
			t.Fatalf("sm_%d: %v\n%s", arch, err, log)
		}
		if len(cubin) == 0 {
			t.Errorf("sm_%d: empty cubin", arch)
		}
	}
}

// TestTensorCoreHelpersEmitTensorCoreInstructions reads the PTX: the helpers
// must be the real instructions, not a fallback.
func TestTensorCoreHelpersEmitTensorCoreInstructions(t *testing.T) {
	n := openNVRTCForTest(t)
	if n.Emulated() != "" {
		t.Skip("the emulated NVRTC makes no PTX")
	}
	for _, arch := range []string{"compute_80", "compute_90"} {
		ptx, log, err := n.CompilePTX(mmaCheckUnit(t, true), "mma_check.cu", []string{"--gpu-architecture=" + arch, "-std=c++17", "-default-device"})
		if err != nil {
			t.Fatalf("%s: %v\n%s", arch, err, log)
		}
		for _, want := range []string{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
			"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group 0"} {
			if !strings.Contains(ptx, want) {
				t.Errorf("%s: the PTX lacks %q", arch, want)
			}
		}
	}
}

// emulatedKernel compiles unit with the emulated NVRTC and loads its kernel
// name on a fresh context and stream of the emulated device; done releases
// them. The caller holds its OS thread locked until done has run.
func emulatedKernel(t *testing.T, unit, file, name string) (ctx *cuda.Context, stream *cuda.Stream, fn *cuda.Function, done func()) {
	t.Helper()
	dir := emutest.Use(t)
	nv, err := cuda.OpenNVRTC(dir + "/libnvrtc.so.13")
	if err != nil {
		t.Fatal(err)
	}
	cubin, log, err := nv.Compile(unit, file, kernels.CompileOptions(90))
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	if ctx, err = drv.NewContext(0); err != nil {
		t.Fatal(err)
	}
	done = func() { ctx.Close() }
	if stream, err = ctx.NewStream(); err != nil {
		done()
		t.Fatal(err)
	}
	mod, err := ctx.LoadModule(cubin)
	if err == nil {
		fn, err = mod.Function(name)
	}
	if err != nil {
		done()
		t.Fatal(err)
	}
	done = func() {
		mod.Unload()
		stream.Destroy()
		ctx.Close()
	}
	return ctx, stream, fn, done
}

// runMMACheck runs mma_check on the emulated device and returns D.
func runMMACheck(t *testing.T, unit string, a, b []uint16, c []float32) []float32 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, stream, fn, done := emulatedKernel(t, unit, "mma_check.cu", "mma_check")
	defer done()
	upload := func(p unsafe.Pointer, bytes int) cuda.DevPtr {
		d, err := ctx.Alloc(bytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.CopyHtoD(d, p, bytes); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dA, dB := upload(unsafe.Pointer(&a[0]), 2*len(a)), upload(unsafe.Pointer(&b[0]), 2*len(b))
	dC := upload(unsafe.Pointer(&c[0]), 4*len(c))
	dD, err := ctx.Alloc(4 * 16 * 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Launch(fn, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, 0, dD, dA, dB, dC); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 16*8)
	if err := stream.CopyDtoH(unsafe.Pointer(&out[0]), dD, 4*len(out)); err != nil {
		t.Fatal(err)
	}
	if err := stream.Sync(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTensorCoreHelpersOnEmulator checks the emulated mma/ldmatrix/cp.async
// against a plain matrix product, and that reading a cp.async destination
// without waiting reads its poison.
func TestTensorCoreHelpersOnEmulator(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a, b := RandomBF16(rng, 16*16, 0, 1), RandomBF16(rng, 16*8, 0, 1)
	c := make([]float32, 16*8)
	for i := range c {
		c[i] = float32(rng.NormFloat64())
	}
	got := runMMACheck(t, mmaCheckUnit(t, true), a, b, c)
	for i := 0; i < 16; i++ {
		for j := 0; j < 8; j++ {
			want := float64(c[i*8+j])
			for k := 0; k < 16; k++ {
				want += float64(ref.BF16ToF32(a[i*16+k])) * float64(ref.BF16ToF32(b[k*8+j]))
			}
			if d := math.Abs(float64(got[i*8+j]) - want); d > 1e-4*(1+math.Abs(want)) {
				t.Errorf("D[%d][%d] = %v, want %v", i, j, got[i*8+j], want)
			}
		}
	}
	stale := runMMACheck(t, mmaCheckUnit(t, false), a, b, c)
	nan := 0
	for _, v := range stale {
		if math.IsNaN(float64(v)) {
			nan++
		}
	}
	if nan != len(stale) {
		t.Errorf("without cp_async_wait, %d of %d outputs are NaN; want all (the tiles still hold poison)", nan, len(stale))
	} else {
		seeded.Caught(t, "no cp_async_wait before ldmatrix")
	}
}

// TestPrefillV2RunsOnTensorCores reads the PTX of attention.cu: the body of
// attn_prefill_tc (a function of its own: the entry points call it) uses
// mma.sync, transposed ldmatrix and cp.async; version 1 uses none of them.
func TestPrefillV2RunsOnTensorCores(t *testing.T) {
	n := openNVRTCForTest(t)
	if n.Emulated() != "" {
		t.Skip("the emulated NVRTC makes no PTX")
	}
	srcs := mustSources(t)
	unit := kernels.TranslationUnit(srcs[kernels.CommonSource], "attention.cu", srcs["attention.cu"])
	for _, arch := range []string{"compute_80", "compute_90"} {
		ptx, log, err := n.CompilePTX(unit, "attention.cu", []string{"--gpu-architecture=" + arch, "-std=c++17", "-default-device"})
		if err != nil {
			t.Fatalf("%s: %v\n%s", arch, err, log)
		}
		for _, fn := range []struct {
			stem string
			want bool
		}{{"attn_prefill_tc", true}, {"attn_prefill", false}} {
			body := ptxFunction(ptx, fn.stem)
			if body == "" {
				t.Errorf("%s: no PTX function of %s", arch, fn.stem)
				continue
			}
			for _, instr := range []string{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global"} {
				if strings.Contains(body, instr) != fn.want {
					t.Errorf("%s: %s has %s: %v, want %v", arch, fn.stem, instr, !fn.want, fn.want)
				}
			}
		}
	}
}

// ptxFunction returns the body of the PTX .func definition (not a forward
// declaration) whose mangled name holds stem with template argument 128
// (attn_prefill_tc<128>).
func ptxFunction(ptx, stem string) string {
	mangled := fmt.Sprintf("%d%sILi128E", len(stem), stem)
	for from := 0; ; {
		i := strings.Index(ptx[from:], mangled)
		if i < 0 {
			return ""
		}
		i += from
		from = i + 1
		if !strings.Contains(ptx[max(0, i-40):i], ".func") {
			continue // a use (a call), not the header
		}
		closeParams := strings.Index(ptx[i:], ")")
		if closeParams < 0 {
			return ""
		}
		rest := strings.TrimLeft(ptx[i+closeParams+1:], " \t\n")
		if !strings.HasPrefix(rest, "{") {
			continue // a declaration
		}
		if end := strings.Index(rest, "\n}\n"); end >= 0 {
			return rest[:end]
		}
		return rest
	}
}

// ldmatrixMisalignedSrc loads through ldmatrix_x4 with lane 5's row address
// two bytes off: a GPU may fault, the emulated device always does.
const ldmatrixMisalignedSrc = `
extern "C" __global__ void ldmatrix_misaligned(unsigned* out) {
    __shared__ __align__(16) unsigned short tile[32 * 8 + 8];
    for (int i = threadIdx.x; i < 32 * 8 + 8; i += 32) tile[i] = (unsigned short)i;
    __syncthreads();
    const int lane = threadIdx.x;
    unsigned r[4];
    ldmatrix_x4(r, tile + lane * 8 + (lane == 5 ? 1 : 0));
    out[lane] = r[0] ^ r[1] ^ r[2] ^ r[3];
}
`

func TestEmulatorFaultsOnMisalignedLdmatrix(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unit := kernels.TranslationUnit(mustSources(t)[kernels.CommonSource], "ldmatrix_misaligned.cu", ldmatrixMisalignedSrc)
	ctx, stream, fn, done := emulatedKernel(t, unit, "ldmatrix_misaligned.cu", "ldmatrix_misaligned")
	defer done()
	out, err := ctx.Alloc(4 * 32)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Launch(fn, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, 0, out)
	if err == nil {
		err = stream.Sync()
	}
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_MISALIGNED_ADDRESS" || !strings.Contains(err.Error(), "ldmatrix row address not 16-byte aligned") ||
		!strings.Contains(err.Error(), "thread (5,0,0)") {
		t.Errorf("misaligned ldmatrix: %v; want CUDA_ERROR_MISALIGNED_ADDRESS naming ldmatrix and thread (5,0,0)", err)
	} else {
		seeded.Caught(t, "misaligned ldmatrix row address")
	}
}

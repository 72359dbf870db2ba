package gpu

import (
	"runtime"
	"slices"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/kernels"
)

// testModelShapes are llama-tiny-ish odd widths (scalar paths) and
// llama-3-8b's (the real ones).
var testModelShapes = []kernels.ModelShape{
	{Name: "tiny", Hidden: 256, Inter: 172, Vocab: 1003, Heads: 4, KVHeads: 2, HeadDim: 64, RopeTheta: 10000},
	{Name: "llama-3-8b", Hidden: 4096, Inter: 14336, Vocab: 128256, Heads: 32, KVHeads: 8, HeadDim: 128, RopeTheta: 500000},
}

// TestGPU runs every kernel against its kernels/ref twin through the same
// Verifier as 'stepbench verify'. It uses no subtests: t.Run starts a new
// goroutine, and every call of a CUDA context must come from the goroutine
// (OS thread) that made it current.
func TestGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv, err := cuda.OpenDriver()
	if err != nil || drv.Emulated() != "" {
		// No GPU: the emulated device runs the same checks on the CPU.
		emutest.Use(t)
		if drv, err = cuda.OpenDriver(); err != nil {
			t.Fatal(err)
		}
	}
	count, err := drv.DeviceCount()
	if err != nil || count == 0 {
		t.Skipf("no GPU: %d devices, %v", count, err)
	}
	props, err := drv.Props(0)
	if err != nil {
		t.Fatal(err)
	}
	nv := openNVRTCForTest(t)
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := kernels.Compile(nv, srcs, props.Major*10+props.Minor, testCache())
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
	}()
	stream, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stream.Destroy(); err != nil {
			t.Error(err)
		}
	}()
	set, err := LoadKernels(ctx, compiled, props.SMCount)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("GPU %s (sm_%d%d, %d SMs)", props.Name, props.Major, props.Minor, props.SMCount)

	v := NewVerifier(ctx, stream, set, 1)
	defer func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	}()
	if drv.Emulated() != "" { // the real MoE layers' checks take the emulated device a minute; verify --check moe runs them
		v.SetMoEShapes(kernels.TinyMoEShapes())
	}
	results := v.VerifyAll(testModelShapes)
	if len(results) == 0 {
		t.Fatal("no checks ran")
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		} else {
			t.Logf("ok %s [%s] rel err %.3g", r.Check, r.Shape, r.RelErr)
		}
	}
}

// TestPromptLengthShapes pins the prompt lengths verify checks at Llama-3-8B's
// head shape: 1000 tokens at batch 3 only with --long.
func TestPromptLengthShapes(t *testing.T) {
	type bs struct{ batch, seq int }
	for _, tc := range []struct {
		long bool
		want []bs
	}{
		{false, []bs{{1, 1}, {3, 1}, {1, 7}, {3, 7}, {1, 129}, {3, 129}, {1, 1000}}},
		{true, []bs{{1, 1}, {3, 1}, {1, 7}, {3, 7}, {1, 129}, {3, 129}, {1, 1000}, {3, 1000}}},
	} {
		var got []bs
		for _, a := range promptLengthShapes(128, tc.long) {
			if a.HeadDim != 128 || a.Heads != 4*a.KVHeads {
				t.Errorf("long=%v: shape %+v is not head_dim 128 with 4 query heads per kv head", tc.long, a)
			}
			got = append(got, bs{a.Batch, a.SeqLen})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("long=%v: (batch, prompt) = %v, want %v", tc.long, got, tc.want)
		}
	}
}

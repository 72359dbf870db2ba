package gpu

import (
	"runtime"
	"testing"

	"stepbench/cuda/emutest"
)

// TestPagedKernelsOnEmulator runs the block table's checks (verify's
// "paged": rope_kv_write 3, attn_prefill 4, attn_decode 6, the replayed
// tabled decode step, gather_last_ragged, kv_advance) at Llama-3-8B's,
// Llama-3.2-1B's and the odd widths' heads on the emulated device.
func TestPagedKernelsOnEmulator(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	defer ctx.Close()
	v := NewVerifier(ctx, stream, set.With(emuSelection), 1)
	if err := v.Only("paged"); err != nil {
		t.Fatal(err)
	}
	results := v.VerifyAll(tinyShapes)
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

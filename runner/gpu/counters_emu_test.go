package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/kernels"
)

// The access counters see what reading the kernels shows:
// attn_prefill_tc_d128's output store fills half of each sector (a quad of
// lanes writes 16 bytes of a row), attn_decode2's merge through shared
// memory is bank-conflicted, and its K/V stream is coalesced 16-byte loads.
func TestEmulatorCountsKernelAccesses(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	file := os.Getenv("STEPBENCH_EMU_COUNTERS")
	if os.Getenv(scheduleChild) != "counters" {
		file = filepath.Join(t.TempDir(), "counters.jsonl")
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorCountsKernelAccesses$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), scheduleChild+"=counters", "STEPBENCH_EMU_COUNTERS="+file)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	v := countingVerifier(t, file)
	for _, a := range []kernels.AttnShape{
		{Batch: 1, SeqLen: 64, Heads: 8, KVHeads: 2, HeadDim: 128, MaxSeq: 64},
		{Batch: 1, SeqLen: 1, StartPos: 300, Heads: 8, KVHeads: 2, HeadDim: 128, MaxSeq: 320},
	} {
		v.verifyAttention(a)
	}
	byKernel := map[string]KernelCounters{}
	for _, r := range v.results {
		if r.Err != nil {
			t.Fatalf("%s %s: %v", r.Check, r.Shape, r.Err)
		}
		for _, k := range r.Counters {
			byKernel[k.Kernel] = AddCounters(byKernel[k.Kernel], k)
		}
	}
	tc, dec := byKernel["attn_prefill_tc_d128"], byKernel["attn_decode2_d128_g4"]
	if s, u := tc.GlobalStore.SectorsPerRequest(), tc.GlobalStore.UsedPercent(); s != 8 || u != 50 {
		t.Errorf("attn_prefill_tc_d128's output store: %.3g sectors per request, %.3g%% used; want 8 and 50%%", s, u)
	}
	if s, u := tc.CpAsync.SectorsPerRequest(), tc.CpAsync.UsedPercent(); s != 16 || u != 100 {
		t.Errorf("attn_prefill_tc_d128's cp.async tiles: %.3g sectors per request, %.3g%% used; want 16 and 100%%", s, u)
	}
	if c := dec.SharedStore.ConflictsPerRequest(); c < 1 {
		t.Errorf("attn_decode2_d128_g4's merge: %.3g bank conflicts per shared store request, want the ones the layout has (>= 1)", c)
	}
	if s, u := dec.GlobalLoad.SectorsPerRequest(), dec.GlobalLoad.UsedPercent(); s < 12 || u < 99 { // 16 but where a split's last keys end a request early
		t.Errorf("attn_decode2_d128_g4's K/V loads: %.3g sectors per request, %.3g%% used; want coalesced 16-byte rows", s, u)
	}
	// attn_decode4's V tiles arrive as coalesced cp.async rows (a partial
	// last sub-tile zero-fills instead: a little under 16). Its global
	// loads mix K's 16-sector requests with the fused combine's broadcast
	// reads of the partials, so no figure is held for them here.
	dec4 := byKernel["attn_decode4_d128_g4"]
	if s, u := dec4.CpAsync.SectorsPerRequest(), dec4.CpAsync.UsedPercent(); s < 15.5 || u != 100 {
		t.Errorf("attn_decode4_d128_g4's V tiles: %.3g sectors per request, %.3g%% used; want 16 and 100%%", s, u)
	}
	for _, r := range v.results {
		if r.ModelBytes <= 0 {
			t.Errorf("%s %s: no cost-model bytes beside the counters", r.Check, r.Shape)
		}
	}
}

// countingVerifier is a verifier of the embedded kernels on the emulated
// device whose checks carry the access counters appended to file.
func countingVerifier(t *testing.T, file string) *Verifier {
	t.Helper()
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	t.Cleanup(func() { ctx.Close() })
	v := NewVerifier(ctx, stream, set, 1)
	v.CountAccesses(file)
	t.Cleanup(func() { v.Close() })
	return v
}

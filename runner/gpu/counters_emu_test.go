package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/runner"
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

// Decode attention on shuffled pages of 16 (attn_decode 6) reads no more
// 32-byte sectors per byte the step must read than attn_decode 4 on the
// contiguous layout at the same lengths (Llama-3-8B's heads, 4 sequences
// of 1000 tokens; EMULATED counters: every request's sectors, no cache).
// What a step must read: K and V of every key, q, and for the pages the
// table's live entries and the lengths. The gathers are the contiguous
// kernel's requests (a token's row of a kv head is 256 contiguous bytes
// wherever its page lies): V's cp.async 16 sectors per request, every byte
// used; the table's and lengths' sectors are paid for by reading q once
// per block instead of once per warp.
func TestEmulatorPagedDecodeReadsNoMoreSectors(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	file := os.Getenv("STEPBENCH_EMU_COUNTERS")
	if os.Getenv(scheduleChild) != "paged-counters" {
		file = filepath.Join(t.TempDir(), "counters.jsonl")
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorPagedDecodeReadsNoMoreSectors$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), scheduleChild+"=paged-counters", "STEPBENCH_EMU_COUNTERS="+file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.KernelShape()
	const batch, length = 4, 1000
	v := countingVerifier(t, file)
	a := kernels.AttnShape{Batch: batch, SeqLen: 1, StartPos: length - 1, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, MaxSeq: length}
	v.verifyAttentionAt(v.pinned(kernels.OpAttnDecode, 4), "attention decode v4", v.newAttentionCase(a), nil)
	g := pagedGeometry{kv: pages(16, runner.PagesShuffled), ctx: slices.Repeat([]int{length - 1}, batch), qLens: slices.Repeat([]int{1}, batch)}
	pv := g.layout(m, 3)
	got, want := v.runPagedAttention(v.pinned(kernels.OpAttnDecode, 6), pv, nil)
	rel, cmpErr := closeBF16(got, want)
	v.record("attention decode v6 paged", pv.label, rel, false, cmpErr)
	if len(v.results) != 2 || len(v.results[0].Counters) != 1 || len(v.results[1].Counters) != 1 {
		t.Fatalf("want one kernel's counters per check: %+v", v.results)
	}
	for _, r := range v.results {
		if r.Err != nil {
			t.Fatalf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		}
	}
	contiguous, paged := v.results[0].Counters[0], v.results[1].Counters[0]
	kvBytes := float64(2 * batch * length * m.KVHeads * m.HeadDim * 2)
	qBytes := float64(batch * m.Heads * m.HeadDim * 2)
	tableBytes := float64(batch*kernels.CeilDiv(length, 16)*4 + batch*4)
	per := func(k KernelCounters, need float64) float64 {
		return (k.GlobalLoad.Sectors + k.CpAsync.Sectors) * 32 / need
	}
	perContiguous, perPaged := per(contiguous, kvBytes+qBytes), per(paged, kvBytes+qBytes+tableBytes)
	t.Logf("%s: %.0f sectors read (%.0f loads, %.0f cp.async), %.4f sector bytes per byte needed", contiguous.Kernel,
		contiguous.GlobalLoad.Sectors+contiguous.CpAsync.Sectors, contiguous.GlobalLoad.Sectors, contiguous.CpAsync.Sectors, perContiguous)
	t.Logf("%s on shuffled pages of 16: %.0f sectors read (%.0f loads, %.0f cp.async), %.4f sector bytes per byte needed", paged.Kernel,
		paged.GlobalLoad.Sectors+paged.CpAsync.Sectors, paged.GlobalLoad.Sectors, paged.CpAsync.Sectors, perPaged)
	if perPaged > perContiguous {
		t.Errorf("attn_decode 6 on pages reads %.4f sector bytes per byte needed, attn_decode 4 contiguous %.4f", perPaged, perContiguous)
	}
	if s, u := paged.CpAsync.SectorsPerRequest(), paged.CpAsync.UsedPercent(); s < 15.5 || u != 100 {
		t.Errorf("%s's V gathers: %.3g sectors per request, %.3g%% used; want 16 and 100%%", paged.Kernel, s, u)
	}
}

// attn_decode 7 (an FP8 cache) reads about half the bytes of attn_decode 6
// at the same shape: Llama-3-8B's heads, 4 sequences of 1000 tokens on
// shuffled pages of 16 (EMULATED counters: every request's sectors, no
// cache). Its K and V loads are 16 bytes of FP8 per lane; the table, the
// lengths, q and the scales are what does not halve.
func TestEmulatorFP8DecodeReadsHalf(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	file := os.Getenv("STEPBENCH_EMU_COUNTERS")
	if os.Getenv(scheduleChild) != "fp8-counters" {
		file = filepath.Join(t.TempDir(), "counters.jsonl")
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorFP8DecodeReadsHalf$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), scheduleChild+"=fp8-counters", "STEPBENCH_EMU_COUNTERS="+file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.KernelShape()
	const batch, length = 4, 1000
	v := countingVerifier(t, file)
	g := pagedGeometry{kv: pages(16, runner.PagesShuffled), ctx: slices.Repeat([]int{length - 1}, batch), qLens: slices.Repeat([]int{1}, batch)}
	pv := g.layout(m, 3)
	got, want := v.runPagedAttention(v.pinned(kernels.OpAttnDecode, 6), pv, nil)
	rel, cmpErr := closeBF16(got, want)
	v.record("attention decode v6 paged", pv.label, rel, false, cmpErr)
	g.kv.DType = kernels.CacheE4M3
	pv8 := g.layout(m, 3)
	got, want = v.runPagedAttention(v.pinned(kernels.OpAttnDecode, 7), pv8, nil)
	rel, cmpErr = closeBF16(got, want)
	v.record("attention decode v7 paged fp8_e4m3", pv8.label, rel, false, cmpErr)
	if len(v.results) != 2 || len(v.results[0].Counters) != 1 || len(v.results[1].Counters) != 1 {
		t.Fatalf("want one kernel's counters per check: %+v", v.results)
	}
	for _, r := range v.results {
		if r.Err != nil {
			t.Fatalf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		}
	}
	bf16, fp8 := v.results[0].Counters[0], v.results[1].Counters[0]
	read := func(k KernelCounters) float64 { return (k.GlobalLoad.Sectors + k.CpAsync.Sectors) * 32 }
	kv16 := float64(2 * batch * length * m.KVHeads * m.HeadDim * 2)
	t.Logf("%s: %.0f sectors read (%.0f loads, %.0f cp.async): %.1f MB, %.4f sector bytes per K/V byte", bf16.Kernel,
		read(bf16)/32, bf16.GlobalLoad.Sectors, bf16.CpAsync.Sectors, read(bf16)/1e6, read(bf16)/kv16)
	t.Logf("%s: %.0f sectors read (%.0f loads, %.0f cp.async): %.1f MB, %.4f sector bytes per K/V byte; ratio %.4f", fp8.Kernel,
		read(fp8)/32, fp8.GlobalLoad.Sectors, fp8.CpAsync.Sectors, read(fp8)/1e6, read(fp8)/(kv16/2), read(fp8)/read(bf16))
	if r := read(fp8) / read(bf16); r < 0.45 || r > 0.55 {
		t.Errorf("attn_decode 7 reads %.4f of attn_decode 6's bytes; want about half (0.45..0.55)", r)
	}
}

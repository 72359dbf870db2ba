package gpu

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/runner"
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

// The gate before timing checks a tabled run at its own shapes: its
// layout's table (page size, order, seed), its sequences' lengths at the
// prefill and at the first, middle and last decode step, the ragged
// gather of its prefill, kv_advance and its captured decode step.
func TestGateChecksTheTabledRunsShapes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	defer ctx.Close()
	v := NewVerifier(ctx, stream, set, 1)
	m := tinyShapes[0]
	shape := RunShape{OutputLen: 5, Seqs: []runner.SeqSpec{{Context: 20, Prompt: 3}, {Prompt: 5}, {Prompt: 1}},
		KV: runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesShuffled, Seed: 3}}
	results, err := v.VerifyRunShapes(m, []RunShape{shape}, []string{"attention", "rope_kv_write", "gather_last", "kv_advance", "decode_graph"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		}
		if strings.Contains(r.Check, "paged") || strings.Contains(r.Check, "ragged") || r.Check == "kv_advance" {
			seen = append(seen, r.Check+" ["+r.Shape+"]")
		}
	}
	for _, want := range []string{
		"attention prefill v4 paged [tiny paged 16 shuffled lens=23,5,1 q=3,5,1",
		"attention decode v6 paged [tiny paged 16 shuffled lens=24,6,2 q=1,1,1",
		"attention decode v6 paged [tiny paged 16 shuffled lens=27,9,5 q=1,1,1",
		"rope_kv_write v3 paged [tiny paged 16 shuffled lens=23,5,1",
		"gather_last ragged [tiny query starts [0 3 8 9] width=256]",
		"kv_advance [",
		"decode graph replay paged [tiny paged 16 shuffled lens=24,6,2 q=1,1,1",
	} {
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no check %q among\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

// TestPagedFP8KernelsOnEmulator runs verify's FP8-cache checks
// ("paged_fp8": rope_kv_write 4, attn_prefill 5, attn_decode 7 in E4M3
// and E5M2, contexts of 1k and 8k at Llama-3-8B's heads, the replayed
// decode step) on the emulated device, and demands each kind of check ran.
func TestPagedFP8KernelsOnEmulator(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	defer ctx.Close()
	v := NewVerifier(ctx, stream, set.With(emuSelection), 1)
	if err := v.Only("paged_fp8"); err != nil {
		t.Fatal(err)
	}
	results := v.VerifyAll(tinyShapes)
	var seen []string
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		} else {
			t.Logf("ok %s [%s] rel err %.3g", r.Check, r.Shape, r.RelErr)
		}
		seen = append(seen, r.Check+" ["+r.Shape+"]")
	}
	if len(emuSelection) > 0 {
		return
	}
	for _, want := range []string{
		"attention decode v7 paged fp8_e4m3 [llama-3-8b paged 16 shuffled fp8_e4m3 lens=1024,8192,6",
		"attention decode v7 paged fp8_e5m2 [llama-3-8b paged 16 shuffled fp8_e5m2 lens=1024,8192,6",
		"attention prefill v5 paged fp8_e4m3 [llama-3-8b paged 16 shuffled fp8_e4m3 lens=1024,8192",
		"attention prefill v5 paged fp8_e5m2 [llama-3-8b paged 16 shuffled fp8_e5m2 lens=1024,8192",
		"attention decode v7 paged fp8_e4m3 [llama-3.2-1b",
		"attention prefill v5 paged fp8_e5m2 [tiny",
		"rope_kv_write v4 paged fp8_e4m3 [llama-3-8b",
		"rope_kv_write v4 paged fp8_e5m2 [llama-3-8b",
		"decode graph replay paged fp8_e4m3 [llama-3-8b",
		"decode graph replay paged fp8_e5m2 [llama-3-8b",
	} {
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no check %q among\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

// TestEmulatorCatchesFP8ScaleSwap seeds K's scale in place of V's into
// each FP8 kernel (attn_decode 7's output, attn_prefill 5's output and
// rope_kv_write 4's V write, all in one copy of the sources) and demands
// that verify's FP8 checks of each fail, in E4M3 and E5M2, at Llama-3-8B's
// heads (the K and V scales of fp8Scales differ). seededBugs holds the
// decode one for TestEmulatorCatchesSeededBugs too.
func TestEmulatorCatchesFP8ScaleSwap(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	srcs := mustSources(t)
	for _, r := range []struct{ file, old, new string }{
		{"paged_attention.cu", "vscale = FMT == KV_BF16 ? 1.0f : vScale[kvh];", "vscale = FMT == KV_BF16 ? 1.0f : kScale[kvh];"},
		{"paged_attention.cu", "t, FMT == KV_BF16 ? 1.0f : vScale[kvh]);", "t, FMT == KV_BF16 ? 1.0f : kScale[kvh]);"},
		{"rope.cu", "vScale[(8 * i) / headDim]", "kScale[(8 * i) / headDim]"},
	} {
		if n := strings.Count(srcs[r.file], r.old); n != 1 {
			t.Fatalf("%q occurs %d times in %s", r.old, n, r.file)
		}
		srcs[r.file] = strings.Replace(srcs[r.file], r.old, r.new, 1)
	}
	ctx, stream, set := emulatorKernels(t, srcs, testCache())
	defer ctx.Close()
	v := NewVerifier(ctx, stream, set, 1)
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.KernelShape()
	for _, format := range fp8Formats {
		for _, g := range []pagedGeometry{fp8PagedDecodeGeometries[0], fp8PagedPrefillGeometries[0]} {
			g.kv.DType = format
			v.verifyPagedAttentionFP8(g.layout(m, 1))
			g.kv.DType = format
			v.verifyPagedRopeFP8At(v.pinned("rope_kv_write", 4), fp8Label("rope_kv_write", 4, format), m, g.layout(m, 2))
		}
	}
	if len(v.results) != 8 {
		t.Fatalf("%d checks ran, want 8", len(v.results))
	}
	for _, r := range v.results {
		if r.Err == nil {
			t.Errorf("%s [%s] passed with K's scale for V (rel err %.3g)", r.Check, r.Shape, r.RelErr)
		} else {
			t.Logf("caught: %s [%s]: %v", r.Check, r.Shape, r.Err)
		}
	}
}

// The gate before timing checks an FP8 run at its own shapes through its
// FP8 kernels, on the contiguous layout too (an FP8 cache always runs
// through the block table): attention prefill v5 and decode v7, rope_kv_write
// v4 and the captured decode step, the names ending in the dtype.
func TestGateChecksAnFP8RunsShapes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	defer ctx.Close()
	v := NewVerifier(ctx, stream, set, 1)
	m := tinyShapes[0]
	shape := RunShape{Batch: 2, InputLen: 6, OutputLen: 4, KV: runner.KVOptions{Layout: runner.KVContiguous, DType: kernels.CacheE5M2}}
	results, err := v.VerifyRunShapes(m, []RunShape{shape}, []string{"attention", "rope_kv_write", "decode_graph"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		}
		seen = append(seen, r.Check+" ["+r.Shape+"]")
	}
	for _, want := range []string{
		"attention prefill v5 paged fp8_e5m2 [tiny contiguous fp8_e5m2 lens=6,6 q=6,6",
		"attention decode v7 paged fp8_e5m2 [tiny contiguous fp8_e5m2 lens=7,7 q=1,1",
		"rope_kv_write v4 paged fp8_e5m2 [tiny contiguous fp8_e5m2 lens=6,6",
		"decode graph replay paged fp8_e5m2 [tiny contiguous fp8_e5m2 lens=7,7",
	} {
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no check %q among\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

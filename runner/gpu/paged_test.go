package gpu

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
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

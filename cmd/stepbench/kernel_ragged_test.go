package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"stepbench/bench/kernelbench"
	"stepbench/runner"
)

// kernelShapesOf parses kernel's flags as kernelCmd does and returns the
// shapes it would time (the checks before any GPU is touched).
func kernelShapesOf(t *testing.T, args ...string) ([]kernelbench.Shape, runner.Config, *kernelFlags) {
	t.Helper()
	fs := newFlagSet("kernel", io.Discard)
	var f kernelFlags
	f.register(fs)
	registerOneRank(fs, "kernel")
	positional, err := parsePositional(fs, append([]string{"attention", "--model", "llama-tiny"}, args...), 1, "OP")
	if err != nil {
		t.Fatal(err)
	}
	shapes, cfg, _, err := f.check(fs, positional[0], io.Discard)
	if err != nil {
		t.Fatalf("kernel %s: %v", strings.Join(args, " "), err)
	}
	return shapes, cfg, &f
}

// kernel --context-lens times the ragged batch's varlen prefill and the
// decode step after it, through the block table under the layout flags,
// each at the cost model's cost of that step's op; --shape lens= times one
// ragged decode step. The gate checks the run shapes that cover them.
func TestKernelRaggedShapes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		labels []string
		kv     runner.KVOptions
	}{
		{[]string{"--context-lens", "5,40,17", "--kv-layout", "contiguous"}, []string{"batch=3/seq=5:40:17/pos=0", "batch=3/seq=1/pos=5:40:17"}, runner.KVOptions{Layout: runner.KVContiguous}},
		{[]string{"--context-lens", "5,40,17", "--kv-layout", "paged", "--page-size", "4", "--page-order", "shuffled"},
			[]string{"batch=3/seq=5:40:17/pos=0/paged=4/shuffled", "batch=3/seq=1/pos=5:40:17/paged=4/shuffled"},
			runner.KVOptions{Layout: runner.KVPaged, PageSize: 4, Order: runner.PagesShuffled, Seed: 42}},
		{[]string{"--shape", "batch=3,lens=128:1000:512", "--kv-layout", "paged"}, []string{"batch=3/seq=1/pos=128:1000:512/paged=16"},
			runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesSequential, Seed: 42}},
		{[]string{"--batch-size", "4", "--input-len", "32", "--kv-layout", "contiguous"}, []string{"batch=4/seq=32/pos=0", "batch=4/seq=1/pos=32"}, runner.KVOptions{Layout: runner.KVContiguous}},
		// The default layout is paged, 16-token pages in order.
		{[]string{"--batch-size", "4", "--input-len", "32"}, []string{"batch=4/seq=32/pos=0/paged=16", "batch=4/seq=1/pos=32/paged=16"},
			runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesSequential, Seed: 42}},
	} {
		shapes, cfg, _ := kernelShapesOf(t, tc.args...)
		var labels []string
		for _, s := range shapes {
			labels = append(labels, s.Label())
			if s.KV != tc.kv {
				t.Errorf("%v: %s laid out %+v, want %+v", tc.args, s.Label(), s.KV, tc.kv)
			}
			var cost runner.StepCost
			var err error
			if s.SeqLen == 1 {
				lens := make([]int, s.Batch)
				for b, q := range s.SeqSpecs() {
					lens[b] = q.Context
				}
				cost, err = runner.DecodeCostSeqs(cfg, 0, lens, s.KV)
			} else {
				cost, err = runner.PrefillCostSeqs(cfg, 0, s.SeqSpecs(), s.KV)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range []string{"attention", "rope_kv_write"} {
				got, err := kernelbench.OpCost(cfg, op, s)
				if err != nil || !slices.Contains(cost.CallCosts(op), got) {
					t.Errorf("%v: %s at %s costs %+v (%v), none of the step's", tc.args, op, s.Label(), got, err)
				}
			}
		}
		if !slices.Equal(labels, tc.labels) {
			t.Errorf("%v: shapes %q, want %q", tc.args, labels, tc.labels)
		}
		if g := gateShapes(shapes); len(g) != len(shapes) || shapes[0].Tabled() && (g[0].Seqs == nil || g[0].KV != tc.kv) {
			t.Errorf("%v: gate shapes %+v", tc.args, g)
		}
	}
	// A distribution is drawn for --batch-size with seed 42.
	shapes, _, f := kernelShapesOf(t, "--context-lens", "uniform:10-500", "--batch-size", "6")
	if len(shapes) != 2 || shapes[1].Batch != 6 || len(shapes[1].Seqs) != 6 || f.kvReport() == nil || f.kvReport().ContextLens != "uniform:10-500" {
		t.Errorf("uniform:10-500 at batch 6: %+v", shapes)
	}
}

// Bad ragged flags are refused in one line, exit 2, before any GPU.
func TestKernelRaggedFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--context-lens", "5,40", "--input-len", "8"}, "it replaces --input-len"},
		{[]string{"--context-lens", "5,40", "--batch-size", "2"}, "the batch size is its length"},
		{[]string{"--context-lens", "5,40", "--shape", "lens=5;40"}, "--shape and --context-lens both give the shapes"},
		{[]string{"--shape", "batch=2,lens=5;40;3"}, "lens lists 3 sequences"},
		{[]string{"--shape", "lens=5;x"}, "--shape"},
		{[]string{"--kv-layout", "contiguous", "--page-size", "4"}, "--kv-layout contiguous has none"},
		{[]string{"--context-lens", "5,9000"}, "exceeds"},
	} {
		args := append([]string{"kernel", "attention", "--model", "llama-tiny"}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

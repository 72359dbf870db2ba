package gpu

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/runner"
)

// planned runs the prefill of batch prompts of n tokens and the decode
// step after it on a planner of sms SMs and returns the launches of each.
func plannedSteps(t *testing.T, cfg runner.Config, sel kernels.Selection, sms int, kv runner.KVOptions, batch, n int) (prefill, decode []string) {
	t.Helper()
	seqs := make([]runner.SeqSpec, batch)
	lens := make([]int, batch)
	for b := range seqs {
		seqs[b].Prompt, lens[b] = n, n
	}
	for i, dst := range []*[]string{&prefill, &decode} {
		on := false
		be, err := NewPlanner(sel, sms, func(p PlannedLaunch) {
			if on {
				*dst = append(*dst, launchLine(p))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		var decodeLens []int
		if i == 1 {
			decodeLens = lens
		}
		if err := runner.TraceStep(cfg, be, seqs, decodeLens, kv, func(string) { on = true }); err != nil {
			t.Fatal(err)
		}
	}
	return prefill, decode
}

// launchLine is what the test compares of a launch.
func launchLine(p PlannedLaunch) string {
	return fmt.Sprintf("%s %s grid %v block %v shared %d programmatic %v library %v", p.Op, p.Entry, p.Grid, p.Block, p.SharedBytes, p.Programmatic, p.Library)
}

// TestPlannerRefusesWhatItCannotPlan: no recorder, no SMs, FP8 weights.
func TestPlannerRefusesWhatItCannotPlan(t *testing.T) {
	if _, err := NewPlanner(nil, 0, func(PlannedLaunch) {}); err == nil {
		t.Error("a planner of 0 SMs was made")
	}
	if _, err := NewPlanner(nil, 132, nil); err == nil {
		t.Error("a planner without a recorder was made")
	}
	be, err := NewPlanner(nil, 132, func(PlannedLaunch) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := be.EnableFP8(); err == nil || !strings.Contains(err.Error(), "planner") {
		t.Errorf("EnableFP8 on a planner: %v, want a refusal naming the planner", err)
	}
}

// TestCUDAPlannerMakesTheBackendsLaunches holds the planner (what the
// estimate prices: bench/estimate) to the cuda backend: a head_dim-64
// llama-tiny's prefill and eager decode step make, on the device (emulated
// here), exactly the launches the planner records for the same step, in
// order, with the same grids, blocks, shared memory and launch mode,
// under the defaults, --kernel fast and the rope-fused contiguous set.
func TestCUDAPlannerMakesTheBackendsLaunches(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 256, 512, 64
	paged := runner.KVOptions{Layout: runner.KVPaged, PageSize: 16}
	contiguous := runner.KVOptions{Layout: runner.KVContiguous}
	for _, tc := range []struct {
		kernels []string
		kv      runner.KVOptions
	}{
		{nil, paged},
		{[]string{kernels.SetFast}, paged},
		{[]string{"attn_decode=5", "linear=4", "launch=2"}, contiguous},
	} {
		sel, err := kernels.ParseSelection(tc.kernels)
		if err != nil {
			t.Fatal(err)
		}
		gotPrefill, gotDecode, sms := backendSteps(t, cfg, sel, tc.kv, 2, 5)
		wantPrefill, wantDecode := plannedSteps(t, cfg, sel, sms, tc.kv, 2, 5)
		label := fmt.Sprintf("--kernel %s, %s", sel, tc.kv)
		if !slices.Equal(gotPrefill, wantPrefill) {
			t.Errorf("%s: the prefill launched\n%s\nthe planner planned\n%s", label, strings.Join(gotPrefill, "\n"), strings.Join(wantPrefill, "\n"))
		}
		if !slices.Equal(gotDecode, wantDecode) {
			t.Errorf("%s: the decode step launched\n%s\nthe planner planned\n%s", label, strings.Join(gotDecode, "\n"), strings.Join(wantDecode, "\n"))
		}
		t.Logf("%s: %d prefill launches, %d decode launches, as planned", label, len(gotPrefill), len(gotDecode))
	}
}

// backendSteps runs the prefill of batch prompts of n tokens and one
// eager decode step on the cuda backend and returns the launches of each
// and the device's SM count.
func backendSteps(t *testing.T, cfg runner.Config, sel kernels.Selection, kv runner.KVOptions, batch, n int) (prefill, decode []string, sms int) {
	t.Helper()
	be, err := New(Options{CacheDir: testCache(), DisableGraphs: true, Kernels: sel, KV: &kv})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	eng, err := runner.NewEngine(cfg, be, runner.WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.SetKVOptions(kv); err != nil {
		t.Fatal(err)
	}
	prompts := make([]int32, batch*n)
	for i := range prompts {
		prompts[i] = int32(3 + 5*i)
	}
	if err := eng.Begin(batch, n, 2, prompts); err != nil {
		t.Fatal(err)
	}
	var dst *[]string
	be.ObserveLaunches(func(p PlannedLaunch) { *dst = append(*dst, launchLine(p)) })
	defer be.ObserveLaunches(nil)
	dst = &prefill
	if err := eng.Prefill(); err != nil {
		t.Fatal(err)
	}
	dst = &decode
	if err := eng.Decode(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Sync(); err != nil {
		t.Fatal(err)
	}
	return prefill, decode, be.Info().Device.SMCount
}

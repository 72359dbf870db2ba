package runner_test

import (
	"fmt"
	"testing"

	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// kvScalesFor is a model's FP8 cache scales that differ by layer, by KV
// head and between K and V (so that a kernel reading K's scale for V, or
// head 0's for head 1, is wrong by a factor of 2 or more), in the range a
// calibration over llama-tiny's dummy activations gives (|K|, |V| ≲ 1).
func kvScalesFor(cfg runner.Config) runner.KVScales {
	s := runner.UnitKVScales(cfg.NumHiddenLayers, cfg.NumKeyValueHeads)
	for l := range s.K {
		for g := range s.K[l] {
			s.K[l][g] = float32(1+l+g) / 256
			s.V[l][g] = float32(3+2*g) / 1024
		}
	}
	return s
}

func model64Scales(s runner.KVScales) (k, v [][]float64) {
	conv := func(in [][]float32) [][]float64 {
		out := make([][]float64, len(in))
		for l := range in {
			for _, x := range in[l] {
				out[l] = append(out[l], float64(x))
			}
		}
		return out
	}
	return conv(s.K), conv(s.V)
}

// An FP8 cache (E4M3 with scales that differ, E5M2 without) on the cpu
// backend, paged and contiguous, gives the logits of the float64
// evaluation that fake-quantizes K and V the same way, within the bf16
// activations' bound; the evaluation with K's and V's scales swapped, or
// with the bf16 cache, is far outside it.
func TestFP8KVCacheMatchesFloat64(t *testing.T) {
	cfg := tinyConfig(t)
	m, err := quanttest.DummyModel64(cfg, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	m.BF16Activations = true
	for _, tc := range []struct {
		dtype  kernels.CacheDType
		layout string
		scales runner.KVScales
	}{
		{kernels.CacheE4M3, runner.KVPaged, kvScalesFor(cfg)},
		{kernels.CacheE4M3, runner.KVContiguous, kvScalesFor(cfg)},
		{kernels.CacheE5M2, runner.KVPaged, runner.UnitKVScales(cfg.NumHiddenLayers, cfg.NumKeyValueHeads)},
	} {
		name := fmt.Sprintf("%s %s", tc.dtype, tc.layout)
		e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetKVOptions(runner.KVOptions{Layout: tc.layout, PageSize: 16, DType: tc.dtype, PoisonTable: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.SetKVScales(tc.scales); err != nil {
			t.Fatal(err)
		}
		m.KVCache = tc.dtype
		m.KScale, m.VScale = model64Scales(tc.scales)
		worst, steps, err := quanttest.Compare(e, m, fp8Prompt, 8)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: worst %.3g (steps %.3g)", name, worst, steps)
		if worst > quanttest.MaxRelErrFP8KVCache {
			t.Errorf("%s: logits %.3g from the fake-quantized float64 evaluation, bound %g", name, worst, quanttest.MaxRelErrFP8KVCache)
		}
		if tc.dtype == kernels.CacheE4M3 {
			for _, bug := range []struct {
				name string
				edit func()
			}{
				{"K's and V's scales swapped", func() { m.KScale, m.VScale = m.VScale, m.KScale }},
				{"a bf16 cache", func() { m.KVCache = kernels.CacheBF16 }},
			} {
				m.KScale, m.VScale = model64Scales(tc.scales)
				m.KVCache = tc.dtype
				bug.edit()
				off, _, err := quanttest.Compare(e, m, fp8Prompt, 4)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s, evaluated with %s: %.3g", name, bug.name, off)
				if off < 2*quanttest.MaxRelErrFP8KVCache {
					t.Errorf("%s: the evaluation with %s is only %.3g away: the bound %g cannot tell it", name, bug.name, off, quanttest.MaxRelErrFP8KVCache)
				}
			}
		}
		e.Close()
	}
}

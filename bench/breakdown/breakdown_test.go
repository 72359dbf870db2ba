package breakdown

import (
	"testing"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

func TestBreakdownLlamaTinyCPU(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h100, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := h100.Roof()
	const batch, inputLen, outputLen = 2, 16, 4
	sb, err := Measure(e, bench.Shape{Batch: batch, InputLen: inputLen, OutputLen: outputLen}, 7, &roof)
	if err != nil {
		t.Fatal(err)
	}
	if e.OnOp != nil {
		t.Error("OnOp left set after the breakdown")
	}
	layers := float64(cfg.NumHiddenLayers)
	for _, tc := range []struct {
		phase     Phase
		wantSteps int
		wantCalls map[string]float64
	}{
		{sb.Prefill, 1, map[string]float64{"embed": 1, "qkv_proj": layers, "attention": layers, "down_proj": layers,
			"gather_last": 2, "lm_head": 1, "argmax": 1, "advance_position": 1}},
		{sb.Decode, outputLen - 1, map[string]float64{"embed": 1, "qkv_proj": layers, "silu_mul": layers, "lm_head": 1}},
	} {
		p := tc.phase
		if p.Steps != tc.wantSteps {
			t.Errorf("%s: %d steps, want %d", p.Phase, p.Steps, tc.wantSteps)
		}
		calls := map[string]float64{}
		share := p.OutsideOpsShare
		for _, r := range p.Rows {
			calls[r.Op] = r.CallsPerStep
			share += r.ShareOfStep
			if r.DeviceSecondsPerStep < 0 || r.BytesPerStep <= 0 && r.Op != "advance_position" {
				t.Errorf("%s %s: time %g bytes %g", p.Phase, r.Op, r.DeviceSecondsPerStep, r.BytesPerStep)
			}
		}
		for op, want := range tc.wantCalls {
			if calls[op] != want {
				t.Errorf("%s %s: %g calls per step, want %g", p.Phase, op, calls[op], want)
			}
		}
		if _, ok := calls["gather_last"]; ok && p.Phase == bench.PhaseDecode {
			t.Errorf("decode has gather_last")
		}
		if share > 1+1e-9 || share < 0.999 {
			t.Errorf("%s: op shares + outside share = %.6f, want 1 (ops alone <= 1)", p.Phase, share)
		}
	}
}

// countingBackend counts a launch per Linear and two per Attention (as
// attention's split and combine kernels), like the cuda backend's counter.
type countingBackend struct {
	runner.Backend
	launches int64
}

func (c *countingBackend) Launches() int64 { return c.launches }

func (c *countingBackend) Linear(out, x, w runner.Buffer, m, n, k int) error {
	c.launches++
	return c.Backend.Linear(out, x, w, m, n, k)
}

func (c *countingBackend) Attention(out, q, kCache, vCache runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	c.launches += 2
	return c.Backend.Attention(out, q, kCache, vCache, kv, s)
}

// The breakdown attributes a backend's launches to the op that made them.
func TestBreakdownCountsLaunchesPerOp(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	be := &countingBackend{Backend: runner.NewCPU()}
	e, err := runner.NewEngine(cfg, be, runner.WeightSource{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sb, err := Measure(e, bench.Shape{Batch: 1, InputLen: 8, OutputLen: 3}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers := float64(cfg.NumHiddenLayers)
	want := map[string]float64{"qkv_proj": layers, "o_proj": layers, "attention": 2 * layers, "lm_head": 1, "embed": 0}
	for _, p := range []Phase{sb.Prefill, sb.Decode} {
		got := map[string]float64{}
		for _, r := range p.Rows {
			got[r.Op] = r.LaunchesPerStep
		}
		for op, n := range want {
			if got[op] != n {
				t.Errorf("%s %s: %g launches per step, want %g", p.Phase, op, got[op], n)
			}
		}
		// Four projections and two attention launches per layer, and lm_head.
		if wantStep := 6*layers + 1; p.LaunchesPerStep != wantStep {
			t.Errorf("%s: %g launches per step, want %g", p.Phase, p.LaunchesPerStep, wantStep)
		}
	}
}

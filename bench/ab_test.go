package bench_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/compare"
	"stepbench/bench/stats"
	"stepbench/runner"
)

// abOptions is a fixed-count sweep of two shapes on device's clock.
func abOptions(device *benchtest.Device) bench.Options {
	return bench.Options{BatchSizes: []int{1, 4}, InputLens: []int{32}, OutputLens: []int{6}, NumIters: 12, WarmupIters: 1,
		Seed: 3, VocabSize: 100, Now: device.Clock}
}

func TestRunABInterleavesAndDetects(t *testing.T) {
	tests := []struct {
		name      string
		slowdownA float64
		want      string
	}{
		{"A 5% slower", 1.05, stats.VerdictSlower},
		{"A 2% faster", 0.98, stats.VerdictFaster},
		{"equal arms", 1.0, stats.VerdictSame},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A drift of 0.05% per step: over the run it changes step times by
			// far more than the effects, so running A's iterations and then
			// B's would mislead; pairing and alternating the order cancel it.
			device := benchtest.NewDevice(9)
			device.Drift = 0.0005
			pair := bench.ABTarget{A: &benchtest.Arm{Name: "A", Device: device, Slowdown: tc.slowdownA},
				B: &benchtest.Arm{Name: "B", Device: device, Slowdown: 1}}
			opt := abOptions(device)
			opt.NumIters, opt.Adaptive = 0, bench.DefaultAdaptive() // adaptive, on the virtual clock
			baseline, candidate, err := bench.RunAB(pair, opt)
			if err != nil {
				t.Fatal(err)
			}
			if len(baseline) != 2 || len(candidate) != 2 || len(candidate[0].Iterations) != len(baseline[0].Iterations) {
				t.Fatalf("got %d baseline and %d candidate shapes", len(baseline), len(candidate))
			}
			for _, s := range candidate {
				if s.StopReason != bench.StopTargetNoise || len(s.Iterations) < bench.DefaultAdaptive().MinIters {
					t.Errorf("batch %d: stopped by %s after %d iterations, want target_noise", s.Batch, s.StopReason, len(s.Iterations))
				}
			}
			res, err := compare.Paired(baseline, candidate, compare.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Rows {
				if !strings.HasSuffix(r.Metric, "_device") {
					continue // host times of a virtual device are meaningless
				}
				if r.Verdict != tc.want {
					t.Errorf("batch %d %s: verdict %s (ratio %.4f [%.4f, %.4f], p %.3g), want %s", r.Batch, r.Metric,
						r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, tc.want)
				}
			}
		})
	}
}

func TestRunABOrderAlternates(t *testing.T) {
	device := benchtest.NewDevice(1)
	pair := bench.ABTarget{A: &benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, B: &benchtest.Arm{Name: "B", Device: device, Slowdown: 1}}
	opt := abOptions(device)
	opt.BatchSizes, opt.NumIters = []int{1}, 4
	if _, _, err := bench.RunAB(pair, opt); err != nil {
		t.Fatal(err)
	}
	// Warmup A B, then A B, B A, A B, B A.
	if got, want := strings.Join(device.Log, ""), "AB"+"ABBAABBA"; got != want {
		t.Errorf("arm order %s, want %s", got, want)
	}
}

func TestRunABInterrupted(t *testing.T) {
	device := benchtest.NewDevice(1)
	ctx, cancel := context.WithCancel(context.Background())
	b := &benchtest.Arm{Name: "B", Device: device, Slowdown: 1}
	a := &cancellingArm{Arm: benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, cancelAt: 3 + 4*6, cancel: cancel}
	opt := abOptions(device)
	opt.Context = ctx
	baseline, candidate, err := bench.RunAB(bench.ABTarget{A: a, B: b}, opt)
	if !errors.Is(err, bench.ErrInterrupted) {
		t.Fatalf("error %v, want bench.ErrInterrupted", err)
	}
	if len(baseline) != 1 || len(baseline[0].Iterations) != len(candidate[0].Iterations) || baseline[0].Complete {
		t.Fatalf("baseline %d shapes; want the first, incomplete, with both arms equally long", len(baseline))
	}
	if baseline[0].StopReason != bench.StopInterrupted {
		t.Errorf("stop reason %q", baseline[0].StopReason)
	}
}

// cancellingArm cancels the run at its n-th step.
type cancellingArm struct {
	benchtest.Arm
	cancelAt, steps int
	cancel          func()
}

func (c *cancellingArm) Decode() error {
	if c.steps++; c.steps == c.cancelAt {
		c.cancel()
	}
	return c.Arm.Decode()
}

func TestRunABRejectsMissingArm(t *testing.T) {
	if _, _, err := bench.RunAB(bench.ABTarget{A: &benchtest.Arm{}}, abOptions(&benchtest.Device{})); err == nil {
		t.Fatal("no error for a missing B arm")
	}
}

func TestCheckGenerationComparesEveryStep(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	engine := func(seed uint64) *runner.Engine {
		e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	sh := bench.Shape{Batch: 2, InputLen: 8, OutputLen: 5}
	same := bench.CheckGeneration(engine(1), engine(1), sh, 5, cfg.VocabSize, 1e-2)
	if same.Err != nil || same.Steps != sh.OutputLen || same.WorstRelErr != 0 {
		t.Errorf("identical engines: %+v", same)
	}
	other := bench.CheckGeneration(engine(1), engine(2), sh, 5, cfg.VocabSize, 1e-2)
	if !errors.Is(other.Err, bench.ErrArmsDiffer) || other.Steps != 1 || other.WorstStep != "prefill" {
		t.Errorf("engines with different weights: %+v", other)
	}
	// An arm that agrees at the prefill and goes wrong at decode step 2.
	late := bench.CheckGeneration(&wrongFromStep{GenerationArm: engine(1), step: 2}, engine(1), sh, 5, cfg.VocabSize, 1e-2)
	if !errors.Is(late.Err, bench.ErrArmsDiffer) || late.Steps != 4 || late.WorstStep != "decode step 2" {
		t.Errorf("an arm wrong from decode step 2: %+v", late)
	}
}

// wrongFromStep scales its logits from decode step `step` on, as a decode
// kernel that is right at the prefill and wrong later would.
type wrongFromStep struct {
	bench.GenerationArm
	step, decoded int
}

func (w *wrongFromStep) Decode() error {
	w.decoded++
	return w.GenerationArm.Decode()
}

func (w *wrongFromStep) Logits() ([][]float32, error) {
	l, err := w.GenerationArm.Logits()
	if w.decoded > w.step {
		for _, row := range l {
			for i := range row {
				row[i] *= 1.5
			}
		}
	}
	return l, err
}

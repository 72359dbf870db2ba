package bench

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"stepbench/runner"
)

// abArm is one arm: its prefill and decode steps cost slowdown × base,
// with 1% noise, on the shared virtual device.
type abArm struct {
	name     string
	device   *virtualDevice
	slowdown float64
}

func (a *abArm) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	a.device.log = append(a.device.log, a.name)
	return nil
}

func (a *abArm) step(base time.Duration) error {
	d := a.device
	scale := a.slowdown * (1 + d.drift*float64(d.steps)) * (1 + 0.01*d.rng.NormFloat64())
	d.now += time.Duration(float64(base) * scale)
	d.steps++
	return nil
}

func (a *abArm) Prefill() error                  { return a.step(10 * time.Millisecond) }
func (a *abArm) Decode() error                   { return a.step(time.Millisecond) }
func (a *abArm) Sync() error                     { return nil }
func (a *abArm) NewEvent() (runner.Event, error) { return &virtualEvent{device: a.device}, nil }
func (a *abArm) Elapsed(start, end runner.Event) (time.Duration, error) {
	s, ok1 := start.(*virtualEvent)
	e, ok2 := end.(*virtualEvent)
	if !ok1 || !ok2 {
		return 0, errors.New("foreign event")
	}
	return e.at - s.at, nil
}

func abOptions() Options {
	return Options{BatchSizes: []int{1, 4}, InputLens: []int{32}, OutputLens: []int{6}, NumIters: 12, WarmupIters: 1,
		Seed: 3, VocabSize: 100}
}

func TestRunABInterleavesAndDetects(t *testing.T) {
	tests := []struct {
		name       string
		slowdownA  float64
		wantDevice string
	}{
		{"A 5% slower", 1.05, VerdictSlower},
		{"equal arms", 1.0, VerdictSame},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A drift of 0.05% per step: over the run it changes step times by
			// far more than 5%, so running A's iterations and then B's would
			// mislead; interleaving cancels it.
			device := &virtualDevice{drift: 0.0005, rng: rand.New(rand.NewPCG(9, 9))}
			pair := ABTarget{A: &abArm{name: "A", device: device, slowdown: tc.slowdownA},
				B: &abArm{name: "B", device: device, slowdown: 1}}
			baseline, candidate, err := RunAB(pair, abOptions())
			if err != nil {
				t.Fatal(err)
			}
			if len(baseline) != 2 || len(candidate) != 2 || len(candidate[0].Iterations) != 12 {
				t.Fatalf("got %d baseline and %d candidate shapes", len(baseline), len(candidate))
			}
			// Per shape: warmup A B, then 12 × (A B).
			want := strings.Repeat("AB", 13)
			if got := strings.Join(device.log, ""); got != want+want {
				t.Fatalf("arm order %s, want %s", got, want+want)
			}
			res := CompareShapes(baseline, candidate, CompareOptions{})
			for _, r := range res.Rows {
				if !strings.HasSuffix(r.Metric, "_device") {
					continue // host times of a virtual device are meaningless
				}
				if r.Verdict != tc.wantDevice {
					t.Errorf("batch %d %s: verdict %s (ratio %.4f [%.4f, %.4f], p %.3g), want %s", r.BatchSize, r.Metric,
						r.Verdict, r.Ratio, r.RatioLow, r.RatioHigh, r.PValue, tc.wantDevice)
				}
			}
		})
	}
}

func TestRunABRejectsMissingArm(t *testing.T) {
	if _, _, err := RunAB(ABTarget{A: &abArm{}}, abOptions()); err == nil {
		t.Fatal("no error for a missing B arm")
	}
}

func TestArmsAgreeOnTheSameModel(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	engines := make([]*runner.Engine, 2)
	for i := range engines {
		if engines[i], err = runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: uint64(1 + i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	same, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ArmsAgree(engines[0], same, 1, 8, 5, 1e-2); err != nil {
		t.Errorf("identical engines disagree: %v", err)
	}
	if err := ArmsAgree(engines[0], engines[1], 1, 8, 5, 1e-2); err == nil {
		t.Error("engines with different weights agree")
	}
}

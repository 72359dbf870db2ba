package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"stepbench/runner"

	"stepbench/bench/stats"
)

// abArm is one arm: its prefill and decode steps cost slowdown × base,
// with noise (1% when 0), on the shared virtual device.
type abArm struct {
	name     string
	device   *virtualDevice
	slowdown float64
	noise    float64
}

func (a *abArm) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	a.device.log = append(a.device.log, a.name)
	return nil
}

func (a *abArm) step(base time.Duration) error {
	d := a.device
	noise := a.noise
	if noise == 0 {
		noise = 0.01
	}
	scale := a.slowdown * (1 + d.drift*float64(d.steps)) * (1 + noise*d.rng.NormFloat64())
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

// clock is the virtual device's time as a host clock.
func (d *virtualDevice) clock() time.Time { return time.Unix(0, 0).Add(d.now) }

func abOptions(device *virtualDevice) Options {
	return Options{BatchSizes: []int{1, 4}, InputLens: []int{32}, OutputLens: []int{6}, NumIters: 12, WarmupIters: 1,
		Seed: 3, VocabSize: 100, now: device.clock}
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
			device := &virtualDevice{drift: 0.0005, rng: rand.New(rand.NewPCG(9, 9))}
			pair := ABTarget{A: &abArm{name: "A", device: device, slowdown: tc.slowdownA},
				B: &abArm{name: "B", device: device, slowdown: 1}}
			opt := abOptions(device)
			opt.NumIters, opt.Adaptive = 0, DefaultAdaptive() // adaptive, on the virtual clock
			baseline, candidate, err := RunAB(pair, opt)
			if err != nil {
				t.Fatal(err)
			}
			if len(baseline) != 2 || len(candidate) != 2 || len(candidate[0].Iterations) != len(baseline[0].Iterations) {
				t.Fatalf("got %d baseline and %d candidate shapes", len(baseline), len(candidate))
			}
			for _, s := range candidate {
				if s.StopReason != StopTargetNoise || len(s.Iterations) < DefaultAdaptive().MinIters {
					t.Errorf("batch %d: stopped by %s after %d iterations, want target_noise", s.Batch, s.StopReason, len(s.Iterations))
				}
			}
			res, err := ComparePaired(baseline, candidate, CompareOptions{})
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
	device := &virtualDevice{rng: rand.New(rand.NewPCG(1, 1))}
	pair := ABTarget{A: &abArm{name: "A", device: device, slowdown: 1}, B: &abArm{name: "B", device: device, slowdown: 1}}
	opt := abOptions(device)
	opt.BatchSizes, opt.NumIters = []int{1}, 4
	if _, _, err := RunAB(pair, opt); err != nil {
		t.Fatal(err)
	}
	// Warmup A B, then A B, B A, A B, B A.
	if got, want := strings.Join(device.log, ""), "AB"+"ABBAABBA"; got != want {
		t.Errorf("arm order %s, want %s", got, want)
	}
}

func TestRunABInterrupted(t *testing.T) {
	device := &virtualDevice{rng: rand.New(rand.NewPCG(1, 1))}
	ctx, cancel := context.WithCancel(context.Background())
	b := &abArm{name: "B", device: device, slowdown: 1}
	a := &cancellingArm{abArm: abArm{name: "A", device: device, slowdown: 1}, cancelAt: 3 + 4*6, cancel: cancel}
	opt := abOptions(device)
	opt.Context = ctx
	baseline, candidate, err := RunAB(ABTarget{A: a, B: b}, opt)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("error %v, want ErrInterrupted", err)
	}
	if len(baseline) != 1 || len(baseline[0].Iterations) != len(candidate[0].Iterations) || baseline[0].Complete {
		t.Fatalf("baseline %d shapes; want the first, incomplete, with both arms equally long", len(baseline))
	}
	if baseline[0].StopReason != StopInterrupted {
		t.Errorf("stop reason %q", baseline[0].StopReason)
	}
}

// cancellingArm cancels the run at its n-th step.
type cancellingArm struct {
	abArm
	cancelAt, steps int
	cancel          func()
}

func (c *cancellingArm) Decode() error {
	if c.steps++; c.steps == c.cancelAt {
		c.cancel()
	}
	return c.abArm.Decode()
}

func TestComparePairedNeedsShapes(t *testing.T) {
	res, err := ComparePaired(nil, nil, CompareOptions{})
	if !errors.Is(err, ErrNoCommonShape) || !res.Paired {
		t.Errorf("empty A/B: %v", err)
	}
}

func TestRunABRejectsMissingArm(t *testing.T) {
	if _, _, err := RunAB(ABTarget{A: &abArm{}}, abOptions(&virtualDevice{})); err == nil {
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

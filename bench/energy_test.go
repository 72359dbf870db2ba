package bench

import (
	"math"
	"testing"
	"time"

	"stepbench/runner"
)

// energyTarget is a Target whose work moves a scripted energy counter,
// 100 mJ per prefill and 10 mJ per decode step, and a virtual clock, 1 ms
// per prefill.
type energyTarget struct {
	energyMJ uint64
	begins   int
	now      time.Duration
}

func (e *energyTarget) clock() time.Time { return time.Unix(0, 0).Add(e.now) }

type nopEvent struct{}

func (nopEvent) Record() error { return nil }

func (e *energyTarget) Begin(int, int, int, []int32) error { e.begins++; return nil }
func (e *energyTarget) Prefill() error {
	e.energyMJ += 100
	e.now += time.Millisecond
	return nil
}
func (e *energyTarget) Decode() error                   { e.energyMJ += 10; return nil }
func (e *energyTarget) Sync() error                     { return nil }
func (e *energyTarget) NewEvent() (runner.Event, error) { return nopEvent{}, nil }
func (e *energyTarget) Elapsed(runner.Event, runner.Event) (time.Duration, error) {
	return time.Millisecond, nil
}
func (e *energyTarget) EnergyMillijoules() (uint64, error) { return e.energyMJ, nil }

func TestEnergyWindowsOnAScriptedCounter(t *testing.T) {
	target := &energyTarget{}
	const batch, inputLen, outputLen = 4, 8, 6
	opt := Options{BatchSizes: []int{batch}, InputLens: []int{inputLen}, OutputLens: []int{outputLen}, NumIters: 1,
		VocabSize: 10, EnergyMeter: target, EnergyWindowSeconds: 0.01, Now: target.clock}
	shapes, err := Run(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	e := shapes[0].Energy
	if e == nil || e.Prefill == nil || e.Iteration == nil || e.Decode == nil {
		t.Fatalf("energy windows missing: %+v", e)
	}
	// A prefill takes 1 ms of the virtual clock: ten fill a 10 ms window.
	if e.Prefill.Repetitions != 10 || e.Iteration.Repetitions != 10 || e.Prefill.WindowSeconds < 0.01 {
		t.Errorf("windows of %d and %d repetitions (%+v), want 10 each over at least 10 ms", e.Prefill.Repetitions, e.Iteration.Repetitions, e.Prefill)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want)) }
	// Prefill: 0.1 J per prefill of batch×input_len = 32 tokens.
	if !near(e.Prefill.JoulesPerToken, 0.1/32) || e.Prefill.Method != EnergyMeasured ||
		!near(e.Prefill.Joules, 0.1*float64(e.Prefill.Repetitions)) {
		t.Errorf("prefill window %+v", *e.Prefill)
	}
	// Iteration: 0.1 + 5×0.01 J per batch×(input+output) = 56 tokens.
	if !near(e.Iteration.JoulesPerToken, 0.15/56) {
		t.Errorf("iteration window %+v", *e.Iteration)
	}
	// Decode (derived): 0.05 J per iteration over batch×5 = 20 tokens.
	if !near(e.Decode.JoulesPerToken, 0.05/20) || e.Decode.Method != EnergyDerived {
		t.Errorf("decode window %+v", *e.Decode)
	}
	if !near(e.Prefill.AverageWatts, e.Prefill.Joules/e.Prefill.WindowSeconds) {
		t.Errorf("average power %+v", *e.Prefill)
	}
}

func TestNewEnergyWindow(t *testing.T) {
	w, err := NewEnergyWindow(1000, 3500, 1.25, 5, 8)
	if err != nil {
		t.Fatal(err)
	}
	if w.Joules != 2.5 || w.Tokens != 40 || w.JoulesPerToken != 0.0625 || w.AverageWatts != 2 {
		t.Errorf("window %+v", w)
	}
	if _, err := NewEnergyWindow(5, 4, 1, 1, 1); err == nil {
		t.Error("a counter going backwards gave no error")
	}
	d := DeriveDecodeEnergy(EnergyWindow{Repetitions: 10, Joules: 5}, EnergyWindow{Repetitions: 4, Joules: 1}, 3)
	if d.Joules != 0 || d.JoulesPerToken != 0 || d.Tokens != 12 {
		t.Errorf("negative decode energy not clamped: %+v", d)
	}
}

// raggedEnergyTarget is an energyTarget that runs ragged shapes.
type raggedEnergyTarget struct{ energyTarget }

func (e *raggedEnergyTarget) BeginSeqs([]runner.SeqSpec, int, []int32) error { e.begins++; return nil }

// A ragged batch's J/token counts the tokens its steps ran: the sum of its
// lengths (one per sequence over a synthetic context), not batch × mean.
func TestEnergyWindowsOfARaggedBatch(t *testing.T) {
	for _, tc := range []struct {
		fill              string
		prefill, iterTkns float64
	}{{KVFillPrefill, 3 + 10, 3 + 10 + 2*6}, {KVFillSynthetic, 2, 2 + 2*6}} {
		target := &raggedEnergyTarget{}
		opt := Options{BatchSizes: []int{2}, ContextLens: LengthSpec{List: []int{3, 10}}, KVFill: tc.fill, OutputLens: []int{6}, NumIters: 1,
			VocabSize: 10, EnergyMeter: target, EnergyWindowSeconds: 0.01, Now: target.clock}
		shapes, err := Run(target, opt)
		if err != nil {
			t.Fatal(err)
		}
		e := shapes[0].Energy
		if e == nil || e.Prefill.Tokens != int(tc.prefill)*e.Prefill.Repetitions || e.Iteration.Tokens != int(tc.iterTkns)*e.Iteration.Repetitions {
			t.Errorf("%s fill: windows %+v and %+v, want %v and %v tokens per repetition", tc.fill, e.Prefill, e.Iteration, tc.prefill, tc.iterTkns)
		}
	}
}

package runner

import (
	"errors"
	"testing"
)

type fakeStep struct {
	launches, destroys *int
}

func (s fakeStep) Launch() error  { *s.launches++; return nil }
func (s fakeStep) Destroy() error { *s.destroys++; return nil }

// capturingCPU is the cpu backend pretending to capture: ops still run
// eagerly during the capture (so the engine's checks hold) and a replay
// does nothing; only the engine's bookkeeping is under test.
type capturingCPU struct {
	*CPU
	enabled                          bool
	begins, ends, launches, destroys int
	capturing                        bool
}

func (c *capturingCPU) CaptureEnabled() bool { return c.enabled }
func (c *capturingCPU) BeginCapture() error {
	if c.capturing {
		return errors.New("already capturing")
	}
	c.begins++
	c.capturing = true
	return nil
}
func (c *capturingCPU) EndCapture() (CapturedStep, error) {
	c.ends++
	c.capturing = false
	return fakeStep{&c.launches, &c.destroys}, nil
}

func TestEngineCapturesDecodeOncePerBuffers(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{true, false} {
		be := &capturingCPU{CPU: NewCPU(), enabled: enabled}
		e, err := NewEngine(cfg, be, WeightSource{Seed: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		run := func(batch, input, output int) {
			t.Helper()
			prompts := make([]int32, batch*input)
			if err := e.Begin(batch, input, output, prompts); err != nil {
				t.Fatal(err)
			}
			if err := e.Prefill(); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < output; i++ {
				if err := e.Decode(); err != nil {
					t.Fatal(err)
				}
				if got, want := e.Position(), input+i; got != want {
					t.Fatalf("after decode %d: position %d, want %d", i, got, want)
				}
			}
		}
		run(2, 4, 5) // one eager step (loads every kernel), capture once, replay: 3 launches
		run(2, 4, 5) // same buffers: replay only, 4 launches
		wantBegins, wantLaunches := 1, 7
		if !enabled {
			wantBegins, wantLaunches = 0, 0
		}
		if be.begins != wantBegins || be.ends != wantBegins || be.launches != wantLaunches || be.destroys != 0 {
			t.Errorf("graphs enabled=%v: begins %d ends %d launches %d destroys %d, want %d %d %d 0",
				enabled, be.begins, be.ends, be.launches, be.destroys, wantBegins, wantBegins, wantLaunches)
		}
		run(3, 4, 5) // new batch: buffers reallocated, the old graph destroyed
		if enabled && (be.destroys != 1 || be.begins != 2) {
			t.Errorf("after a new batch: destroys %d begins %d, want 1 and 2", be.destroys, be.begins)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if enabled && be.destroys != 2 {
			t.Errorf("after Close: destroys %d, want 2", be.destroys)
		}
	}
}

func TestDecodeGraphsInvalidate(t *testing.T) {
	var launches, destroys int
	var g decodeGraphs
	if g.get(graphKey{batch: 1, maxSeq: 8}) != nil {
		t.Fatal("empty cache returned a graph")
	}
	g.put(graphKey{batch: 1, maxSeq: 8}, fakeStep{&launches, &destroys})
	g.put(graphKey{batch: 4, maxSeq: 8}, fakeStep{&launches, &destroys})
	if g.get(graphKey{batch: 1, maxSeq: 8}) == nil || g.get(graphKey{batch: 1, maxSeq: 9}) != nil {
		t.Fatal("lookup by (batch, maxSeq) is wrong")
	}
	if err := g.invalidate(); err != nil {
		t.Fatal(err)
	}
	if destroys != 2 || g.len() != 0 {
		t.Errorf("invalidate: %d destroyed, %d left; want 2, 0", destroys, g.len())
	}
}

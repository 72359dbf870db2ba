// Package benchtest is what stepbench's tests share to drive the harness
// without hardware: a virtual device whose clock only steps advance (so
// every time is deterministic), targets on it, shapes with scripted times,
// and golden files. Only tests import it.
package benchtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"stepbench/bench"
	"stepbench/runner"
)

// Device is a virtual GPU: Now advances only when a target works on it.
// Drift slows every step by a further fraction per step taken, as a GPU
// that warms up and throttles would; RNG (when set) draws the noise.
type Device struct {
	Now   time.Duration
	Steps int
	Drift float64
	RNG   *rand.Rand
	Log   []string // the arm of every Begin, in order
}

// NewDevice is a device whose noise comes from seed.
func NewDevice(seed uint64) *Device { return &Device{RNG: rand.New(rand.NewPCG(seed, seed))} }

// Clock is the device's time as a host clock (bench.Options.Now): host and
// device time are the same virtual time.
func (d *Device) Clock() time.Time { return time.Unix(0, 0).Add(d.Now) }

// Event is a runner.Event on a Device.
type Event struct {
	device *Device
	at     time.Duration
}

// Record notes the device's time.
func (e *Event) Record() error { e.at = e.device.Now; return nil }

// NewEvent makes an event on d.
func (d *Device) NewEvent() (runner.Event, error) { return &Event{device: d}, nil }

// Elapsed is the virtual time between two recorded events of d.
func (d *Device) Elapsed(start, end runner.Event) (time.Duration, error) {
	s, ok1 := start.(*Event)
	e, ok2 := end.(*Event)
	if !ok1 || !ok2 {
		return 0, errors.New("benchtest: not events of a virtual device")
	}
	return e.at - s.at, nil
}

// Arm is a bench.Target on a Device: a prefill takes Slowdown × 10 ms and
// a decode step Slowdown × 1 ms, each × (1 + drift) × (1 + Noise·N(0,1))
// (Noise 1% when 0; no noise without an RNG).
type Arm struct {
	Name     string
	Device   *Device
	Slowdown float64
	Noise    float64
}

// Begin logs the arm.
func (a *Arm) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	a.Device.Log = append(a.Device.Log, a.Name)
	return nil
}

func (a *Arm) step(base time.Duration) error {
	d := a.Device
	noise := a.Noise
	if noise == 0 {
		noise = 0.01
	}
	scale := a.Slowdown * (1 + d.Drift*float64(d.Steps))
	if d.RNG != nil {
		scale *= 1 + noise*d.RNG.NormFloat64()
	}
	d.Now += time.Duration(float64(base) * scale)
	d.Steps++
	return nil
}

// Prefill advances the device by one prefill.
func (a *Arm) Prefill() error { return a.step(10 * time.Millisecond) }

// Decode advances the device by one decode step.
func (a *Arm) Decode() error { return a.step(time.Millisecond) }

// Sync does nothing: the virtual device is always done.
func (a *Arm) Sync() error { return nil }

// NewEvent makes an event on the arm's device.
func (a *Arm) NewEvent() (runner.Event, error) { return a.Device.NewEvent() }

// Elapsed is the device's Elapsed.
func (a *Arm) Elapsed(start, end runner.Event) (time.Duration, error) {
	return a.Device.Elapsed(start, end)
}

// ScriptedShape builds a finished shape whose host times are given:
// prefill[i] and decode[i] for iteration i; device times are half of them.
func ScriptedShape(batch, inputLen, outputLen int, prefill []float64, decode [][]float64) bench.ShapeResult {
	s := bench.ShapeResult{Shape: bench.Shape{Batch: batch, InputLen: inputLen, OutputLen: outputLen}, Complete: true}
	for i := range prefill {
		it := bench.IterationResult{Iter: i, Prefill: bench.Sample{Phase: bench.PhasePrefill, Iter: i,
			HostSeconds: prefill[i], DeviceSeconds: prefill[i] / 2}}
		it.TotalHostSeconds = prefill[i]
		it.TotalDeviceSeconds = prefill[i] / 2
		for step, d := range decode[i] {
			it.Decode = append(it.Decode, bench.Sample{Phase: bench.PhaseDecode, Iter: i, Step: step,
				Position: inputLen + step, HostSeconds: d, DeviceSeconds: d / 2})
			it.TotalHostSeconds += d
			it.TotalDeviceSeconds += d / 2
		}
		s.Iterations = append(s.Iterations, it)
	}
	s.Finish(bench.StopNumIters)
	return s
}

// JSONKeys returns the top-level keys of a JSON object in document order.
func JSONKeys(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", data)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// CheckGolden compares got with the test package's testdata/golden/name,
// rewriting the file first when update is set (each package's -update flag).
func CheckGolden(t *testing.T, name string, got []byte, update bool) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update creates it)", err, t.Name())
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s",
			name, t.Name(), got, want)
	}
}

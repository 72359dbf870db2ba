package bench

import (
	"fmt"
	"sync"
	"time"
)

// TelemetrySource gives one reading; *Monitor is one.
type TelemetrySource interface {
	Read() TelemetryReading
}

// DefaultSamplePeriod is the background sampler's period.
const DefaultSamplePeriod = 20 * time.Millisecond

type regionKey struct {
	shape       Shape
	phase       string
	iter, step  int
	shapeRepeat int // a sweep may list a shape twice; later runs overwrite
}

// TelemetryRecorder files readings under the timed region they follow.
// Wire it as Options.BeforeShape = r.BeforeShape and Options.BetweenRegions
// = r.AfterRegion; Start runs the background sampler for long phases.
type TelemetryRecorder struct {
	source TelemetrySource

	mu       sync.Mutex
	shape    Shape
	started  map[Shape][2]int64 // unix nanos of the shape's first and last region
	regions  map[regionKey]TelemetryReading
	between  []TelemetryReading // every between-region reading, warmup included
	timeline []TelemetryReading // the background sampler's readings

	stop chan struct{}
	done chan struct{}
}

// NewTelemetryRecorder records readings of source.
func NewTelemetryRecorder(source TelemetrySource) *TelemetryRecorder {
	return &TelemetryRecorder{source: source, started: map[Shape][2]int64{}, regions: map[regionKey]TelemetryReading{}}
}

// BeforeShape marks the start of a shape (Options.BeforeShape).
func (r *TelemetryRecorder) BeforeShape(s Shape) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shape = s
	now := time.Now().UnixNano()
	r.started[r.shape] = [2]int64{now, now}
}

// AfterRegion reads telemetry right after a timed region (Options.BetweenRegions).
func (r *TelemetryRecorder) AfterRegion(s Sample) {
	reading := r.source.Read()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.between = append(r.between, reading)
	span := r.started[r.shape]
	span[1] = reading.UnixNanos
	r.started[r.shape] = span
	if s.Warmup {
		return
	}
	r.regions[regionKey{shape: r.shape, phase: s.Phase, iter: s.Iter, step: s.Step}] = reading
}

// Start runs the background sampler every period (DefaultSamplePeriod when
// <= 0) until Stop. NVML is thread-safe, so it may read while the harness
// reads too.
func (r *TelemetryRecorder) Start(period time.Duration) {
	if period <= 0 {
		period = DefaultSamplePeriod
	}
	r.mu.Lock()
	if r.stop != nil {
		r.mu.Unlock()
		return
	}
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	stop, done := r.stop, r.done
	r.mu.Unlock()
	go func() {
		defer close(done)
		ticker := time.NewTicker(period)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				reading := r.source.Read()
				r.mu.Lock()
				r.timeline = append(r.timeline, reading)
				r.mu.Unlock()
			}
		}
	}()
}

// Stop ends the background sampler and waits for it.
func (r *TelemetryRecorder) Stop() {
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.stop = nil
	r.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Region returns the reading taken after the given timed region of a shape.
func (r *TelemetryRecorder) Region(s Shape, phase string, iter, step int) (TelemetryReading, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reading, ok := r.regions[regionKey{shape: s, phase: phase, iter: iter, step: step}]
	return reading, ok
}

// Readings returns every between-region reading (warmup included) and every
// sampler reading, each in time order.
func (r *TelemetryRecorder) Readings() (between, sampled []TelemetryReading) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]TelemetryReading(nil), r.between...), append([]TelemetryReading(nil), r.timeline...)
}

// Timeline returns the sampler's readings taken while a shape ran (from its
// start to its last region).
func (r *TelemetryRecorder) Timeline(s Shape) []TelemetryReading {
	r.mu.Lock()
	defer r.mu.Unlock()
	span, ok := r.started[s]
	if !ok {
		return nil
	}
	var out []TelemetryReading
	for _, t := range r.timeline {
		if t.UnixNanos >= span[0] && t.UnixNanos <= span[1] {
			out = append(out, t)
		}
	}
	return out
}

// Throttled says whether the reading after a kept sample was flagged.
func (r *TelemetryRecorder) Throttled(s ShapeResult, sample Sample) bool {
	reading, ok := r.Region(s.Shape, sample.Phase, sample.Iter, sample.Step)
	return ok && reading.Throttled
}

// DiscardThrottled recomputes a shape's summary without the samples whose
// reading was flagged (an iteration total is dropped when any of its
// samples was) and returns the count of dropped samples. Iterations keep
// every sample: the report still shows them, marked.
func DiscardThrottled(s ShapeResult, throttled func(Sample) bool) (ShapeResult, int) {
	var dropped int
	s.Summary, dropped = summarizeKept(s.Iterations, throttled)
	return s, dropped
}

// EnergyMillijoules reads the total energy counter since the driver was
// loaded (Options.EnergyMeter).
func (m *Monitor) EnergyMillijoules() (uint64, error) {
	const symbol = "nvmlDeviceGetTotalEnergyConsumption"
	if !m.available(symbol) {
		return 0, fmt.Errorf("%s: not available on %s", symbol, m.Name)
	}
	mj, ret := m.device.GetTotalEnergyConsumption()
	if !m.ok(symbol, ret) {
		return 0, fmt.Errorf("%s: %s", symbol, nvmlError(m.lib, ret))
	}
	return mj, nil
}

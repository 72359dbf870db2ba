package telemetry

import (
	"sync"
	"time"

	"stepbench/bench"
)

// Source gives one reading; bench/telemetry/nvml's Monitor is one.
type Source interface {
	Read() Reading
}

// DefaultSamplePeriod is the background sampler's period.
const DefaultSamplePeriod = 20 * time.Millisecond

// regionKey names a timed region; a shape listed twice in a sweep files
// its second run's readings over the first's.
type regionKey struct {
	shape      bench.Shape
	phase      string
	iter, step int
}

// Recorder files readings under the timed region they follow.
// Wire it as Options.BeforeShape = r.BeforeShape and Options.BetweenRegions
// = r.AfterRegion; Start runs the background sampler for long phases.
type Recorder struct {
	source Source
	now    func() time.Time

	mu       sync.Mutex
	shape    bench.Shape
	started  map[bench.Shape][2]int64 // unix nanos of the shape's first and last region
	regions  map[regionKey]Reading
	between  []Reading // every between-region reading, warmup included
	timeline []Reading // the background sampler's readings

	stop chan struct{}
	done chan struct{}
}

// NewRecorder records readings of source; now is the clock that marks
// where a shape starts (time.Now when nil), the clock the source's
// readings are stamped with.
func NewRecorder(source Source, now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{source: source, now: now, started: map[bench.Shape][2]int64{}, regions: map[regionKey]Reading{}}
}

// BeforeShape marks the start of a shape (Options.BeforeShape).
func (r *Recorder) BeforeShape(s bench.Shape) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shape = s
	now := r.now().UnixNano()
	r.started[r.shape] = [2]int64{now, now}
}

// AfterRegion reads telemetry right after a timed region (Options.BetweenRegions).
func (r *Recorder) AfterRegion(s bench.Sample) {
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
func (r *Recorder) Start(period time.Duration) {
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
func (r *Recorder) Stop() {
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
func (r *Recorder) Region(s bench.Shape, phase string, iter, step int) (Reading, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reading, ok := r.regions[regionKey{shape: s, phase: phase, iter: iter, step: step}]
	return reading, ok
}

// Readings returns every between-region reading (warmup included) and every
// sampler reading, each in time order.
func (r *Recorder) Readings() (between, sampled []Reading) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Reading(nil), r.between...), append([]Reading(nil), r.timeline...)
}

// Timeline returns the sampler's readings taken while a shape ran (from its
// start to its last region).
func (r *Recorder) Timeline(s bench.Shape) []Reading {
	r.mu.Lock()
	defer r.mu.Unlock()
	span, ok := r.started[s]
	if !ok {
		return nil
	}
	var out []Reading
	for _, t := range r.timeline {
		if t.UnixNanos >= span[0] && t.UnixNanos <= span[1] {
			out = append(out, t)
		}
	}
	return out
}

// Throttled says whether the reading after a sample of shape was flagged.
func (r *Recorder) Throttled(shape bench.Shape, sample bench.Sample) bool {
	reading, ok := r.Region(shape, sample.Phase, sample.Iter, sample.Step)
	return ok && reading.Throttled
}

package bench

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"stepbench/runner"
)

// scriptedGPU is the state behind a go-nvml mock device: an H100 SXM whose
// every reading advances a counter, so each reading is identifiable.
type scriptedGPU struct {
	mu           sync.Mutex
	reads        int      // GetClockInfo(CLOCK_SM) calls so far
	smClocks     []uint32 // per read; the last one repeats
	reasons      []uint64 // per read; the last one repeats
	energyMJ     uint64
	missing      map[string]bool // symbols the "driver" lacks
	fieldsRet    nvml.Return     // GetFieldValues' return
	eventReasons bool            // whether GetCurrentClocksEventReasons is called at all
}

func at[T any](xs []T, i int) T {
	if i >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i]
}

func newMockNVML(t *testing.T, g *scriptedGPU) *mock.Interface {
	t.Helper()
	dev := &mock.Device{
		GetNameFunc:                  func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUUIDFunc:                  func() (string, nvml.Return) { return "GPU-aaaa", nvml.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetMemoryBusWidthFunc:        func() (uint32, nvml.Return) { return 5120, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:    func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
		GetMaxClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_SM {
				return 1980, nvml.SUCCESS
			}
			return 2619, nvml.SUCCESS
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if c == nvml.CLOCK_SM {
				g.reads++
				return at(g.smClocks, g.reads-1), nvml.SUCCESS
			}
			return 2619, nvml.SUCCESS
		},
		GetFieldValuesFunc: func(values []nvml.FieldValue) nvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.fieldsRet != nvml.SUCCESS {
				return g.fieldsRet
			}
			for i := range values {
				values[i].NvmlReturn = uint32(nvml.SUCCESS)
				switch values[i].FieldId {
				case nvml.FI_DEV_POWER_INSTANT: // milliwatts: 100 W + 1 W per read
					values[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
					binary.LittleEndian.PutUint32(values[i].Value[:], uint32(100000+1000*g.reads))
				case nvml.FI_DEV_MEMORY_TEMP:
					values[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
					binary.LittleEndian.PutUint32(values[i].Value[:], 61)
				default:
					values[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				}
			}
			return nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 250000, nvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.energyMJ, nvml.SUCCESS
		},
		GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 55, nvml.SUCCESS },
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.eventReasons = true
			return at(g.reasons, g.reads-1), nvml.SUCCESS
		},
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return at(g.reasons, g.reads-1), nvml.SUCCESS
		},
		GetApplicationsClockFunc:        func(nvml.ClockType) (uint32, nvml.Return) { return 1755, nvml.SUCCESS },
		GetDefaultApplicationsClockFunc: func(nvml.ClockType) (uint32, nvml.Return) { return 1755, nvml.SUCCESS },
	}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
		if g.missing[name] {
			return errors.New("undefined symbol " + name)
		}
		return nil
	}}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		ExtensionsFunc:             func() nvml.ExtendedInterface { return ext },
		ErrorStringFunc:            func(r nvml.Return) string { return "mock error" },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if uuid != "GPU-aaaa" {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return dev, nvml.SUCCESS
		},
	}
}

func openMock(t *testing.T, g *scriptedGPU) *Monitor {
	t.Helper()
	m, err := NewMonitor(newMockNVML(t, g), "GPU-aaaa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMonitorFacts(t *testing.T) {
	m := openMock(t, &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}})
	if m.MaxSMClockMHz != 1980 || m.MaxMemoryClockMHz != 2619 || m.MemoryBusWidthBit != 5120 ||
		m.ComputeMajor != 9 || m.PowerLimitWatts != 700 || m.UUID != "GPU-aaaa" {
		t.Errorf("facts: %+v", m)
	}
	if _, err := NewMonitor(newMockNVML(t, &scriptedGPU{}), "GPU-other"); err == nil {
		t.Error("a UUID NVML does not know opened a device")
	}
}

// Readings land on the region they follow: the mock's SM clock and power
// grow with every read, so read k belongs to the k-th region (warmup
// included) in the harness's order.
func TestTelemetryLandsOnTheRightStep(t *testing.T) {
	clocks := make([]uint32, 100)
	for i := range clocks {
		clocks[i] = uint32(1000 + i)
	}
	g := &scriptedGPU{smClocks: clocks, reasons: []uint64{0}}
	rec := NewTelemetryRecorder(openMock(t, g))
	target := &energyTarget{}
	opt := Options{BatchSizes: []int{1, 2}, InputLens: []int{4}, OutputLens: []int{3}, NumIters: 2, WarmupIters: 1,
		VocabSize: 10, BeforeShape: rec.BeforeShape, BetweenRegions: rec.AfterRegion}
	shapes, err := Run(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Per shape: 1 warmup + 2 timed iterations of 3 regions (prefill, 2 decode).
	cases := []struct {
		batch, iter, step int
		phase             string
		read              int // 0-based read index
	}{
		{1, 0, 0, PhasePrefill, 3},
		{1, 0, 1, PhaseDecode, 5},
		{1, 1, 0, PhasePrefill, 6},
		{1, 1, 1, PhaseDecode, 8},
		{2, 0, 0, PhasePrefill, 12},
		{2, 1, 0, PhaseDecode, 16},
	}
	for _, c := range cases {
		r, ok := rec.Region(Shape{c.batch, 4, 3}, c.phase, c.iter, c.step)
		if !ok {
			t.Fatalf("no reading for batch %d %s iter %d step %d", c.batch, c.phase, c.iter, c.step)
		}
		if want := float64(1000 + c.read); r.SMClockMHz != want {
			t.Errorf("batch %d %s iter %d step %d: SM clock %v, want %v", c.batch, c.phase, c.iter, c.step, r.SMClockMHz, want)
		}
		if want := 100 + float64(c.read+1); r.PowerWatts != want || r.PowerSource != PowerSourceInstant {
			t.Errorf("batch %d %s iter %d step %d: power %v W (%s), want %v W instant", c.batch, c.phase, c.iter, c.step, r.PowerWatts, r.PowerSource, want)
		}
		if r.MemoryTemperatureC != 61 || r.GPUTemperatureC != 55 || r.MemoryClockMHz != 2619 {
			t.Errorf("temperatures/memory clock: %+v", r)
		}
	}
	_ = shapes
}

func TestThrottleFlag(t *testing.T) {
	cases := []struct {
		name      string
		clockMHz  uint32
		reasons   uint64
		throttled bool
	}{
		{"full clock, no reason", 1980, 0, false},
		{"idle only", 1980, nvml.ClocksEventReasonGpuIdle, false},
		{"at 75% exactly", 1485, 0, false},
		{"below 75%", 1484, 0, true},
		{"sw power cap", 1980, nvml.ClocksEventReasonSwPowerCap, true},
		{"hw slowdown", 1980, nvml.ClocksThrottleReasonHwSlowdown, true},
		{"sw thermal", 1980, nvml.ClocksEventReasonSwThermalSlowdown, true},
		{"hw thermal", 1980, nvml.ClocksThrottleReasonHwThermalSlowdown, true},
		{"hw power brake", 1980, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, true},
		{"applications clocks", 1755, nvml.ClocksEventReasonApplicationsClocksSetting, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := openMock(t, &scriptedGPU{smClocks: []uint32{c.clockMHz}, reasons: []uint64{c.reasons}})
			if r := m.Read(); r.Throttled != c.throttled {
				t.Errorf("throttled = %v, want %v (reading %+v)", r.Throttled, c.throttled, r)
			}
		})
	}
	names := ClockEventReasonNames(nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown | 1<<20)
	if !slices.Equal(names, []string{"sw_power_cap", "hw_thermal_slowdown", "0x100000"}) {
		t.Errorf("reason names %v", names)
	}
}

func TestDiscardThrottled(t *testing.T) {
	s := ShapeResult{Shape: Shape{Batch: 1, InputLen: 4, OutputLen: 3}, Iterations: []IterationResult{
		{Iter: 0, Prefill: Sample{Phase: PhasePrefill, HostSeconds: 1}, Decode: []Sample{{Phase: PhaseDecode, HostSeconds: 1}, {Phase: PhaseDecode, Step: 1, HostSeconds: 1}}, TotalHostSeconds: 3},
		{Iter: 1, Prefill: Sample{Phase: PhasePrefill, Iter: 1, HostSeconds: 9}, Decode: []Sample{{Phase: PhaseDecode, Iter: 1, HostSeconds: 9}, {Phase: PhaseDecode, Iter: 1, Step: 1, HostSeconds: 2}}, TotalHostSeconds: 20},
	}}
	got, dropped := DiscardThrottled(s, func(x Sample) bool { return x.HostSeconds == 9 })
	if dropped != 2 {
		t.Errorf("dropped %d, want 2", dropped)
	}
	if got.Summary.PrefillHostSeconds.N != 1 || got.Summary.DecodeHostSeconds.N != 3 || got.Summary.TotalHostSeconds.N != 1 ||
		got.Summary.TotalHostSeconds.Median != 3 || got.Summary.PrefillHostSeconds.Max != 1 {
		t.Errorf("summary after discard: %+v", got.Summary)
	}
}

// A driver without the newer calls: no FI_DEV_POWER_INSTANT field function
// and no clocks-event-reasons symbol. The reading falls back to the 1 s
// average power (labelled) and the older throttle-reasons call, and never
// calls the missing symbol (that would abort a real process).
func TestMissingNVMLSymbols(t *testing.T) {
	g := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{nvml.ClocksEventReasonSwPowerCap},
		missing: map[string]bool{"nvmlDeviceGetFieldValues": true, "nvmlDeviceGetCurrentClocksEventReasons": true}}
	m := openMock(t, g)
	r := m.Read()
	if r.PowerSource != PowerSourceAverage1s || r.PowerWatts != 250 {
		t.Errorf("power %v W from %q, want 250 W from %q", r.PowerWatts, r.PowerSource, PowerSourceAverage1s)
	}
	if g.eventReasons {
		t.Error("called nvmlDeviceGetCurrentClocksEventReasons although the library lacks it")
	}
	if !r.HasReasons || !r.Throttled {
		t.Errorf("fallback reasons not read: %+v", r)
	}
	if !slices.Contains(m.Unsupported(), "nvmlDeviceGetFieldValues") {
		t.Errorf("unsupported = %v", m.Unsupported())
	}

	// A driver that has the symbol but answers NOT_SUPPORTED: same fallback,
	// and the call is not retried.
	g2 := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}, fieldsRet: nvml.ERROR_NOT_SUPPORTED}
	m2 := openMock(t, g2)
	for range 2 {
		if r := m2.Read(); r.PowerSource != PowerSourceAverage1s {
			t.Errorf("power source %q after NOT_SUPPORTED", r.PowerSource)
		}
	}

	// No library at all.
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := NewMonitor(lib, ""); !errors.Is(err, ErrNoNVML) {
		t.Errorf("missing library: %v, want ErrNoNVML", err)
	}
}

func TestClockLockAndVariation(t *testing.T) {
	m := openMock(t, &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}})
	readings := []TelemetryReading{{SMClockMHz: 1980, HasReasons: true}, {SMClockMHz: 1700, HasReasons: true}}
	locked, known := m.ClocksLocked(readings)
	if locked || !known {
		t.Errorf("locked=%v known=%v, want false true", locked, known)
	}
	if ClockVariationWarning(readings, locked) == "" {
		t.Error("no warning for an unlocked clock varying 1700-1980 MHz")
	}
	if ClockVariationWarning(readings, true) != "" {
		t.Error("warning although clocks are locked")
	}
	steady := []TelemetryReading{{SMClockMHz: 1980}, {SMClockMHz: 1975}}
	if ClockVariationWarning(steady, false) != "" {
		t.Error("warning for a steady clock")
	}
	withApp := []TelemetryReading{{HasReasons: true, ClockEventReasons: nvml.ClocksEventReasonApplicationsClocksSetting}}
	if locked, _ := m.ClocksLocked(withApp); !locked {
		t.Error("applications-clocks reason not taken as locked")
	}
}

func TestSamplerRecordsTimeline(t *testing.T) {
	g := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}}
	rec := NewTelemetryRecorder(openMock(t, g))
	rec.BeforeShape(Shape{1, 1, 1})
	rec.Start(time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	rec.AfterRegion(Sample{Phase: PhasePrefill})
	rec.Stop()
	rec.Stop() // idempotent
	_, sampled := rec.Readings()
	if len(sampled) < 3 {
		t.Fatalf("sampler took %d readings in 30 ms at 1 ms", len(sampled))
	}
	for i := 1; i < len(sampled); i++ {
		if sampled[i].UnixNanos < sampled[i-1].UnixNanos {
			t.Fatal("timeline not in time order")
		}
	}
	if tl := rec.Timeline(Shape{1, 1, 1}); len(tl) == 0 || len(tl) > len(sampled) {
		t.Errorf("shape timeline has %d of %d readings", len(tl), len(sampled))
	}
}

// energyTarget is a Target whose work moves a scripted energy counter:
// 100 mJ per prefill and 10 mJ per decode step.
type energyTarget struct {
	energyMJ uint64
	begins   int
}

type nopEvent struct{}

func (nopEvent) Record() error { return nil }

func (e *energyTarget) Begin(int, int, int, []int32) error { e.begins++; return nil }
func (e *energyTarget) Prefill() error {
	e.energyMJ += 100
	time.Sleep(time.Millisecond)
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
		VocabSize: 10, EnergyMeter: target, EnergyWindowSeconds: 0.01}
	shapes, err := Run(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	e := shapes[0].Energy
	if e == nil || e.Prefill == nil || e.Iteration == nil || e.Decode == nil {
		t.Fatalf("energy windows missing: %+v", e)
	}
	if e.Prefill.WindowSeconds < 0.01 || e.Iteration.WindowSeconds < 0.01 {
		t.Errorf("windows shorter than the minimum: %+v %+v", e.Prefill, e.Iteration)
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

package nvml

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/telemetry"
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

// clockInfo is GetClockInfo: the SM clock of the next read, a fixed memory clock.
func (g *scriptedGPU) clockInfo(c nvml.ClockType) (uint32, nvml.Return) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nvml.CLOCK_SM {
		g.reads++
		return at(g.smClocks, g.reads-1), nvml.SUCCESS
	}
	return 2619, nvml.SUCCESS
}

// fieldValues is GetFieldValues: instant power 100 W + 1 W per read, memory
// temperature 61 °C, anything else unsupported.
func (g *scriptedGPU) fieldValues(values []nvml.FieldValue) nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fieldsRet != nvml.SUCCESS {
		return g.fieldsRet
	}
	for i := range values {
		values[i].NvmlReturn = uint32(nvml.SUCCESS)
		switch values[i].FieldId {
		case nvml.FI_DEV_POWER_INSTANT: // milliwatts
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
		GetClockInfoFunc:   g.clockInfo,
		GetFieldValuesFunc: g.fieldValues,
		GetPowerUsageFunc:  func() (uint32, nvml.Return) { return 250000, nvml.SUCCESS },
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
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
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
	m, err := New(newMockNVML(t, g), "GPU-aaaa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMonitorFacts(t *testing.T) {
	m := openMock(t, &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}})
	if m.MaxSMClockMHz != 1980 || m.MaxMemoryClockMHz != 2619 || m.MemoryBusWidthBit != 5120 ||
		m.ComputeMajor != 9 || m.PowerLimitWatts != 700 || m.UUID != "GPU-aaaa" || m.DriverVersion != "580.65.06" {
		t.Errorf("facts: %+v", m)
	}
	if _, err := New(newMockNVML(t, &scriptedGPU{}), "GPU-other"); err == nil {
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
	rec := telemetry.NewRecorder(openMock(t, g), nil)
	target := &benchtest.Arm{Name: "A", Device: benchtest.NewDevice(1), Slowdown: 1}
	opt := bench.Options{BatchSizes: []int{1, 2}, InputLens: []int{4}, OutputLens: []int{3}, NumIters: 2, WarmupIters: 1,
		VocabSize: 10, BeforeShape: rec.BeforeShape, BetweenRegions: rec.AfterRegion}
	if _, err := bench.Run(target, opt); err != nil {
		t.Fatal(err)
	}
	// Per shape: 1 warmup + 2 timed iterations of 3 regions (prefill, 2 decode).
	cases := []struct {
		batch, iter, step int
		phase             string
		read              int // 0-based read index
	}{
		{1, 0, 0, bench.PhasePrefill, 3},
		{1, 0, 1, bench.PhaseDecode, 5},
		{1, 1, 0, bench.PhasePrefill, 6},
		{1, 1, 1, bench.PhaseDecode, 8},
		{2, 0, 0, bench.PhasePrefill, 12},
		{2, 1, 0, bench.PhaseDecode, 16},
	}
	for _, c := range cases {
		r, ok := rec.Region(bench.Shape{Batch: c.batch, InputLen: 4, OutputLen: 3}, c.phase, c.iter, c.step)
		if !ok {
			t.Fatalf("no reading for batch %d %s iter %d step %d", c.batch, c.phase, c.iter, c.step)
		}
		if want := float64(1000 + c.read); r.SMClockMHz != want {
			t.Errorf("batch %d %s iter %d step %d: SM clock %v, want %v", c.batch, c.phase, c.iter, c.step, r.SMClockMHz, want)
		}
		if want := 100 + float64(c.read+1); r.PowerWatts != want || r.PowerSource != telemetry.PowerSourceInstant {
			t.Errorf("batch %d %s iter %d step %d: power %v W (%s), want %v W instant", c.batch, c.phase, c.iter, c.step, r.PowerWatts, r.PowerSource, want)
		}
		if r.MemoryTemperatureC != 61 || r.GPUTemperatureC != 55 || r.MemoryClockMHz != 2619 {
			t.Errorf("temperatures/memory clock: %+v", r)
		}
	}
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
	names := telemetry.ReasonNames(nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown | 1<<20)
	if !slices.Equal(names, []string{"sw_power_cap", "hw_thermal_slowdown", "0x100000"}) {
		t.Errorf("reason names %v", names)
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
	if r.PowerSource != telemetry.PowerSourceAverage1s || r.PowerWatts != 250 {
		t.Errorf("power %v W from %q, want 250 W from %q", r.PowerWatts, r.PowerSource, telemetry.PowerSourceAverage1s)
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
		if r := m2.Read(); r.PowerSource != telemetry.PowerSourceAverage1s {
			t.Errorf("power source %q after NOT_SUPPORTED", r.PowerSource)
		}
	}

	// No library at all.
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := New(lib, ""); !errors.Is(err, ErrNoNVML) {
		t.Errorf("missing library: %v, want ErrNoNVML", err)
	}
}

func TestClockLockAndVariation(t *testing.T) {
	m := openMock(t, &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}})
	readings := []telemetry.Reading{{SMClockMHz: 1980, HasReasons: true}, {SMClockMHz: 1700, HasReasons: true}}
	locked, known := m.ClocksLocked(readings)
	if locked || !known {
		t.Errorf("locked=%v known=%v, want false true", locked, known)
	}
	if telemetry.ClockVariationWarning(readings, locked) == "" {
		t.Error("no warning for an unlocked clock varying 1700-1980 MHz")
	}
	if telemetry.ClockVariationWarning(readings, true) != "" {
		t.Error("warning although clocks are locked")
	}
	steady := []telemetry.Reading{{SMClockMHz: 1980}, {SMClockMHz: 1975}}
	if telemetry.ClockVariationWarning(steady, false) != "" {
		t.Error("warning for a steady clock")
	}
	withApp := []telemetry.Reading{{HasReasons: true, ClockEventReasons: nvml.ClocksEventReasonApplicationsClocksSetting}}
	if locked, _ := m.ClocksLocked(withApp); !locked {
		t.Error("applications-clocks reason not taken as locked")
	}
}

// signallingSource reads through a Monitor and says so on a channel, so
// that a test waits for readings instead of sleeping for them.
type signallingSource struct {
	m    *Monitor
	read chan struct{}
}

func (s signallingSource) Read() telemetry.Reading {
	r := s.m.Read()
	select {
	case s.read <- struct{}{}:
	default:
	}
	return r
}

func TestSamplerRecordsTimeline(t *testing.T) {
	g := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}}
	src := signallingSource{m: openMock(t, g), read: make(chan struct{})}
	rec := telemetry.NewRecorder(src, nil)
	rec.BeforeShape(bench.Shape{Batch: 1, InputLen: 1, OutputLen: 1})
	rec.Start(time.Millisecond)
	for range 3 {
		<-src.read // the sampler's readings
	}
	rec.AfterRegion(bench.Sample{Phase: bench.PhasePrefill})
	rec.Stop()
	rec.Stop() // idempotent
	_, sampled := rec.Readings()
	if len(sampled) < 3 {
		t.Fatalf("sampler kept %d readings, want the 3 it was seen taking", len(sampled))
	}
	for i := 1; i < len(sampled); i++ {
		if sampled[i].UnixNanos < sampled[i-1].UnixNanos {
			t.Fatal("timeline not in time order")
		}
	}
	if tl := rec.Timeline(bench.Shape{Batch: 1, InputLen: 1, OutputLen: 1}); len(tl) == 0 || len(tl) > len(sampled) {
		t.Errorf("shape timeline has %d of %d readings", len(tl), len(sampled))
	}
}

// The telemetry package declares NVML's reason bits itself (it needs no
// cgo): they must be go-nvml's.
func TestReasonBitsAreNVMLs(t *testing.T) {
	for _, c := range []struct {
		ours, nvmls uint64
	}{
		{telemetry.ReasonGPUIdle, nvml.ClocksEventReasonGpuIdle},
		{telemetry.ReasonApplicationsClocksSetting, nvml.ClocksEventReasonApplicationsClocksSetting},
		{telemetry.ReasonSWPowerCap, nvml.ClocksEventReasonSwPowerCap},
		{telemetry.ReasonHWSlowdown, nvml.ClocksThrottleReasonHwSlowdown},
		{telemetry.ReasonSyncBoost, nvml.ClocksEventReasonSyncBoost},
		{telemetry.ReasonSWThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown},
		{telemetry.ReasonHWThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown},
		{telemetry.ReasonHWPowerBrakeSlowdown, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown},
		{telemetry.ReasonDisplayClockSetting, nvml.ClocksEventReasonDisplayClockSetting},
	} {
		if c.ours != c.nvmls {
			t.Errorf("reason bit %#x, NVML's %#x", c.ours, c.nvmls)
		}
	}
}

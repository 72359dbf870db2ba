package nvml

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"stepbench/bench/telemetry"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// These tests drive the telemetry path through go-nvml against the emulated
// device's NVML stand-in (cuda/emu/nvml.c), loaded from
// $STEPBENCH_CUDA_LIBS/libnvidia-ml.so.1. Its telemetry is synthetic and
// fixed (see nvml.c): the tests check that every call the real path makes
// is answered with the emulated GPU's values and the right return codes.

// The emulated GPU's figures (the project's emulated-device constants).
const (
	emuGPUName       = "stepbench emulated GPU"
	emuClockMHz      = 1000
	emuBusWidthBits  = 4096
	emuPowerLimitW   = 700
	emuDefaultPowerW = 100
	emuGPUTempC      = 40
	emuMemoryTempC   = 45
)

// emuSettings are the stand-in's environment settings; every test sets all
// of them so that the caller's environment cannot leak in ("" = default).
var emuSettings = []string{
	"STEPBENCH_EMU_DEVICES",
	"STEPBENCH_EMU_POWER_W",
	"STEPBENCH_EMU_CLOCK_EVENT_REASONS",
	"STEPBENCH_EMU_SM_CLOCK_MHZ",
	"STEPBENCH_EMU_MEM_BYTES",
}

func emuUUID(ordinal int) string {
	return fmt.Sprintf("GPU-5be00000-0000-4000-8000-0000000000%02x", ordinal)
}

// emuNVMLPath returns the stand-in's path, or skips when STEPBENCH_CUDA_LIBS
// is unset. A relative STEPBENCH_CUDA_LIBS is taken from the module root
// (where make runs), since go test runs in the package directory.
func emuNVMLPath(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STEPBENCH_CUDA_LIBS")
	if dir == "" {
		t.Skip("STEPBENCH_CUDA_LIBS is unset: run `make emu` and set STEPBENCH_CUDA_LIBS=$PWD/build/emu to test telemetry on the emulated device")
	}
	if !filepath.IsAbs(dir) {
		root, err := moduleRoot()
		if err != nil {
			t.Fatalf("STEPBENCH_CUDA_LIBS=%s: %v", dir, err)
		}
		dir = filepath.Join(root, dir)
	}
	path := filepath.Join(dir, "libnvidia-ml.so.1")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("STEPBENCH_CUDA_LIBS: %v (run `make emu`)", err)
	}
	return path
}

// moduleRoot is the nearest directory above the working directory that
// holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// openEmuNVML sets the stand-in's settings (unnamed ones to their defaults)
// and returns a go-nvml library bound to it, not initialised (settings are
// read at the first nvmlInit). It skips when the library there is a real
// NVML (no sbemu_describe).
func openEmuNVML(t *testing.T, settings map[string]string) nvml.Interface {
	t.Helper()
	path := emuNVMLPath(t)
	for _, name := range emuSettings {
		t.Setenv(name, settings[name])
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvmlInit with %s: %v", path, ret)
	}
	err := lib.Extensions().LookupSymbol("sbemu_describe")
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Fatalf("nvmlShutdown: %v", ret)
	}
	if err != nil {
		t.Skipf("%s is not the emulated device's NVML (no sbemu_describe)", path)
	}
	return lib
}

// newEmuMonitor opens a Monitor on lib and closes it when the test ends.
func newEmuMonitor(t *testing.T, lib nvml.Interface, uuid string) *Monitor {
	t.Helper()
	m, err := New(lib, uuid)
	if err != nil {
		t.Fatalf("New(%q): %v", uuid, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func TestEmulatedNVMLMonitorFacts(t *testing.T) {
	lib := openEmuNVML(t, nil)
	m := newEmuMonitor(t, lib, "")
	got := struct {
		Name, UUID                           string
		MaxSM, MaxMem, PowerLimit            float64
		BusWidth, ComputeMajor, ComputeMinor int
	}{m.Name, m.UUID, m.MaxSMClockMHz, m.MaxMemoryClockMHz, m.PowerLimitWatts, m.MemoryBusWidthBit, m.ComputeMajor, m.ComputeMinor}
	want := got
	want.Name, want.UUID = emuGPUName, emuUUID(0)
	want.MaxSM, want.MaxMem, want.PowerLimit = emuClockMHz, emuClockMHz, emuPowerLimitW
	want.BusWidth, want.ComputeMajor, want.ComputeMinor = emuBusWidthBits, 9, 0
	if got != want {
		t.Errorf("monitor facts = %+v, want %+v", got, want)
	}

	if v, ret := lib.SystemGetDriverVersion(); ret != nvml.SUCCESS || v != "emulated-1.0" {
		t.Errorf("SystemGetDriverVersion = %q, %v; want emulated-1.0", v, ret)
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS || v != 13000 {
		t.Errorf("SystemGetCudaDriverVersion = %d, %v; want 13000", v, ret)
	}
	if v, ret := lib.SystemGetCudaDriverVersion_v2(); ret != nvml.SUCCESS || v != 13000 {
		t.Errorf("SystemGetCudaDriverVersion_v2 = %d, %v; want 13000", v, ret)
	}
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n != 1 {
		t.Errorf("DeviceGetCount = %d, %v; want 1", n, ret)
	}
	// The stand-in's own wording, so the string came from the library.
	if s := lib.ErrorString(nvml.ERROR_NOT_FOUND); s != "not found" {
		t.Errorf("ErrorString(ERROR_NOT_FOUND) = %q; want \"not found\"", s)
	}
}

func TestEmulatedNVMLMemoryInfo(t *testing.T) {
	const memBytes = 3 << 30
	lib := openEmuNVML(t, map[string]string{"STEPBENCH_EMU_MEM_BYTES": fmt.Sprint(memBytes)})
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS || mem.Total != memBytes || mem.Free > mem.Total || mem.Free+mem.Used != mem.Total {
		t.Errorf("GetMemoryInfo = %+v, %v; want total %d = free + used", mem, ret, memBytes)
	}
	mem2, ret := dev.GetMemoryInfo_v2()
	if ret != nvml.SUCCESS || mem2.Total != memBytes || mem2.Free > mem2.Total || mem2.Free+mem2.Used+mem2.Reserved != mem2.Total {
		t.Errorf("GetMemoryInfo_v2 = %+v, %v; want total %d = free + used + reserved", mem2, ret, memBytes)
	}
}

func TestEmulatedNVMLReading(t *testing.T) {
	m := newEmuMonitor(t, openEmuNVML(t, nil), "")
	r := m.Read()
	if r.SMClockMHz != emuClockMHz || r.MemoryClockMHz != emuClockMHz {
		t.Errorf("clocks = SM %v, memory %v MHz; want %d both", r.SMClockMHz, r.MemoryClockMHz, emuClockMHz)
	}
	// FI_DEV_POWER_INSTANT answers, so the 1 s average is not the source.
	if r.PowerWatts != emuDefaultPowerW || r.PowerSource != telemetry.PowerSourceInstant {
		t.Errorf("power = %v W from %q; want %d W from %q", r.PowerWatts, r.PowerSource, emuDefaultPowerW, telemetry.PowerSourceInstant)
	}
	if !r.HasEnergy {
		t.Errorf("no energy counter in the reading")
	}
	if r.GPUTemperatureC != emuGPUTempC || r.MemoryTemperatureC != emuMemoryTempC {
		t.Errorf("temperatures = GPU %v, memory %v C; want %d, %d", r.GPUTemperatureC, r.MemoryTemperatureC, emuGPUTempC, emuMemoryTempC)
	}
	if !r.HasReasons || r.ClockEventReasons != 0 || r.Throttled {
		t.Errorf("reasons = %#x (read %v), throttled %v; want 0, read, not throttled", r.ClockEventReasons, r.HasReasons, r.Throttled)
	}
	if u := m.Unsupported(); len(u) != 0 {
		t.Errorf("unsupported NVML calls: %v; want none", u)
	}
	// Applications clocks equal their defaults and no reason says otherwise.
	if locked, known := m.ClocksLocked([]telemetry.Reading{r}); locked || !known {
		t.Errorf("ClocksLocked = %v, known %v; want unlocked, known", locked, known)
	}
}

func TestEmulatedNVMLPowerAndEnergy(t *testing.T) {
	tests := []struct {
		powerSetting string
		wantWatts    float64
		wantGrowth   bool // energy grows with time; with 0 W it must stay put
	}{
		{"", emuDefaultPowerW, true},
		{"250", 250, true},
		{"0.5", 0.5, true},
		{"0", 0, false},
	}
	for _, tt := range tests {
		t.Run("power="+tt.powerSetting, func(t *testing.T) {
			m := newEmuMonitor(t, openEmuNVML(t, map[string]string{"STEPBENCH_EMU_POWER_W": tt.powerSetting}), "")
			r := m.Read()
			// A zero instant power is still read from the field (source instant).
			if r.PowerWatts != tt.wantWatts || r.PowerSource != telemetry.PowerSourceInstant {
				t.Errorf("power = %v W from %q; want %v W from %q", r.PowerWatts, r.PowerSource, tt.wantWatts, telemetry.PowerSourceInstant)
			}
			// The 1 s average (used where the instant field is missing) agrees.
			if mw, ret := m.device.GetPowerUsage(); ret != nvml.SUCCESS || float64(mw) != tt.wantWatts*1e3 {
				t.Errorf("GetPowerUsage = %d mW, %v; want %v mW", mw, ret, tt.wantWatts*1e3)
			}
			before, err := m.EnergyMillijoules()
			if err != nil {
				t.Fatal(err)
			}
			// The counter integrates the power over wall time: wait for it to
			// move (it must, at a positive power) or, at 0 W, let time pass and
			// see that it stayed put.
			after := before
			for deadline := time.Now().Add(10 * time.Second); after == before && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				if after, err = m.EnergyMillijoules(); err != nil {
					t.Fatal(err)
				}
				if !tt.wantGrowth {
					break
				}
			}
			if grew := after > before; grew != tt.wantGrowth || after < before {
				t.Errorf("energy counter went from %d to %d mJ at %v W; want growth %v", before, after, tt.wantWatts, tt.wantGrowth)
			}
		})
	}
}

// The energy counter runs from the library's load, not from nvmlInit: a new
// session never sees it go back.
func TestEmulatedNVMLEnergyAcrossSessions(t *testing.T) {
	lib := openEmuNVML(t, nil)
	var last uint64
	for session := range 3 {
		m, err := New(lib, "")
		if err != nil {
			t.Fatalf("session %d: %v", session, err)
		}
		mj, err := m.EnergyMillijoules()
		if cerr := m.Close(); cerr != nil {
			t.Fatalf("session %d: %v", session, cerr)
		}
		if err != nil {
			t.Fatalf("session %d: %v", session, err)
		}
		if mj < last {
			t.Errorf("session %d: energy counter %d mJ, below the previous session's %d mJ", session, mj, last)
		}
		last = mj
	}
}

func TestEmulatedNVMLClockEventReasons(t *testing.T) {
	tests := []struct {
		setting       string
		wantMask      uint64
		wantNames     []string
		wantThrottled bool
		wantLocked    bool
	}{
		{"", 0, nil, false, false},
		{"1", nvml.ClocksEventReasonGpuIdle, []string{"gpu_idle"}, false, false},
		{"0x2", nvml.ClocksEventReasonApplicationsClocksSetting, []string{"applications_clocks_setting"}, false, true},
		{"0x4", nvml.ClocksEventReasonSwPowerCap, []string{"sw_power_cap"}, true, false},
		{"96", 0x60, []string{"sw_thermal_slowdown", "hw_thermal_slowdown"}, true, false},
		{"0X80", nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, []string{"hw_power_brake_slowdown"}, true, false},
		{"0x1000", 0x1000, []string{"0x1000"}, false, false},
	}
	for _, tt := range tests {
		t.Run("reasons="+tt.setting, func(t *testing.T) {
			m := newEmuMonitor(t, openEmuNVML(t, map[string]string{"STEPBENCH_EMU_CLOCK_EVENT_REASONS": tt.setting}), "")
			r := m.Read()
			if !r.HasReasons || r.ClockEventReasons != tt.wantMask || !slices.Equal(r.ReasonNames(), tt.wantNames) {
				t.Errorf("reasons = %#x %v (read %v); want %#x %v", r.ClockEventReasons, r.ReasonNames(), r.HasReasons, tt.wantMask, tt.wantNames)
			}
			if r.Throttled != tt.wantThrottled {
				t.Errorf("throttled = %v; want %v", r.Throttled, tt.wantThrottled)
			}
			if locked, known := m.ClocksLocked([]telemetry.Reading{r}); locked != tt.wantLocked || !known {
				t.Errorf("ClocksLocked = %v, known %v; want %v, known", locked, known, tt.wantLocked)
			}
			// The older call gives the same bits.
			if mask, ret := m.device.GetCurrentClocksThrottleReasons(); ret != nvml.SUCCESS || mask != tt.wantMask {
				t.Errorf("GetCurrentClocksThrottleReasons = %#x, %v; want %#x", mask, ret, tt.wantMask)
			}
		})
	}
}

func TestEmulatedNVMLMultiDevice(t *testing.T) {
	lib := openEmuNVML(t, map[string]string{"STEPBENCH_EMU_DEVICES": "2"})
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n != 2 {
		t.Fatalf("DeviceGetCount = %d, %v; want 2", n, ret)
	}
	for ordinal := range 2 {
		m := newEmuMonitor(t, lib, emuUUID(ordinal))
		if m.UUID != emuUUID(ordinal) || m.Name != emuGPUName {
			t.Errorf("device by UUID %s: got %q %q", emuUUID(ordinal), m.Name, m.UUID)
		}
		byIndex, ret := lib.DeviceGetHandleByIndex(ordinal)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", ordinal, ret)
		}
		if uuid, _ := byIndex.GetUUID(); uuid != m.UUID {
			t.Errorf("device %d by index has UUID %q, by UUID %q", ordinal, uuid, m.UUID)
		}
	}
	// UUIDs are hex: case does not matter.
	if dev, ret := lib.DeviceGetHandleByUUID(strings.ToUpper(emuUUID(1))); ret != nvml.SUCCESS {
		t.Errorf("DeviceGetHandleByUUID(upper case): %v", ret)
	} else if uuid, _ := dev.GetUUID(); uuid != emuUUID(1) {
		t.Errorf("upper-case UUID found %q; want %q", uuid, emuUUID(1))
	}
	for _, uuid := range []string{emuUUID(2), "GPU-00000000-0000-0000-0000-000000000000", "MIG-5be00000-0000-4000-8000-000000000000", ""} {
		if _, ret := lib.DeviceGetHandleByUUID(uuid); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("DeviceGetHandleByUUID(%q) = %v; want ERROR_NOT_FOUND", uuid, ret)
		}
	}
	if _, err := New(lib, emuUUID(2)); err == nil || !strings.Contains(err.Error(), emuUUID(2)) {
		t.Errorf("NewMonitor on a third GPU of two: %v; want an error naming its UUID", err)
	}
	// Past the last index: an invalid argument, and the empty handle it
	// leaves is refused too.
	dev, ret := lib.DeviceGetHandleByIndex(2)
	if ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("DeviceGetHandleByIndex(2) = %v; want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := dev.GetName(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetName on an empty handle = %v; want ERROR_INVALID_ARGUMENT", ret)
	}
}

// Power, clock-event reasons and the SM clock are settable per GPU: a list
// gives GPU i the i-th value and the GPUs past it the last; each GPU's
// energy counter integrates its own power.
func TestEmulatedNVMLPerGPUSettings(t *testing.T) {
	lib := openEmuNVML(t, map[string]string{"STEPBENCH_EMU_DEVICES": "4", "STEPBENCH_EMU_POWER_W": "300,350,0",
		"STEPBENCH_EMU_CLOCK_EVENT_REASONS": "0,0x4", "STEPBENCH_EMU_SM_CLOCK_MHZ": "1000,700"})
	want := []struct {
		watts, smMHz float64
		reasons      uint64
		throttled    bool
	}{
		{300, 1000, 0, false},
		{350, 700, telemetry.ReasonSWPowerCap, true},
		{0, 700, telemetry.ReasonSWPowerCap, true},
		{0, 700, telemetry.ReasonSWPowerCap, true},
	}
	monitors := make([]*Monitor, len(want))
	for i, w := range want {
		m := newEmuMonitor(t, lib, emuUUID(i))
		monitors[i] = m
		r := m.Read()
		if r.PowerWatts != w.watts || r.SMClockMHz != w.smMHz || r.ClockEventReasons != w.reasons || r.Throttled != w.throttled {
			t.Errorf("GPU %d: %v W, SM %v MHz, reasons %#x, throttled %v; want %v W, %v MHz, %#x, %v", i, r.PowerWatts, r.SMClockMHz,
				r.ClockEventReasons, r.Throttled, w.watts, w.smMHz, w.reasons, w.throttled)
		}
		if m.MaxSMClockMHz != emuClockMHz {
			t.Errorf("GPU %d: maximum SM clock %v, want %d whatever the current clock", i, m.MaxSMClockMHz, emuClockMHz)
		}
	}
	// At 0 W GPU 2's counter stays where it was. GPU 1 is read first before
	// and last after GPU 0, so its window holds GPU 0's: at 350 W against
	// 300 W its counter must grow at least 350/300 times as much (1 mJ of
	// truncation at each end aside), whatever the timing.
	read := func(i int) uint64 {
		mj, err := monitors[i].EnergyMillijoules()
		if err != nil {
			t.Fatal(err)
		}
		return mj
	}
	before1, before0, before2 := read(1), read(0), read(2)
	for read(0) < before0+3000 { // the counter must move at a positive power; a hang is the go test timeout's
		time.Sleep(10 * time.Millisecond)
	}
	after2, after0, after1 := read(2), read(0), read(1)
	d0, d1 := after0-before0, after1-before1
	if after2 != before2 || d0 < 3000 || 300*(d1+2) < 350*d0 {
		t.Errorf("energy counters grew by %d (GPU 0, 300 W), %d (GPU 1, 350 W), %d mJ (GPU 2, 0 W); want GPU 1 >= 350/300 x GPU 0 and GPU 2 still",
			d0, d1, after2-before2)
	}
}

// nvmlInit and nvmlShutdown are reference counted across every user of the
// library in the process; a call after the last shutdown is refused.
func TestEmulatedNVMLReferenceCount(t *testing.T) {
	path := emuNVMLPath(t)
	openEmuNVML(t, nil)
	first, second := nvml.New(nvml.WithLibraryPath(path)), nvml.New(nvml.WithLibraryPath(path))
	if ret := first.Init(); ret != nvml.SUCCESS {
		t.Fatalf("first Init: %v", ret)
	}
	dev, ret := first.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	if ret := second.Init(); ret != nvml.SUCCESS {
		t.Fatalf("second Init: %v", ret)
	}
	if ret := first.Shutdown(); ret != nvml.SUCCESS {
		t.Fatalf("first Shutdown: %v", ret)
	}
	if name, ret := dev.GetName(); ret != nvml.SUCCESS || name != emuGPUName {
		t.Errorf("GetName with one session left = %q, %v; want %q", name, ret, emuGPUName)
	}
	if ret := second.Shutdown(); ret != nvml.SUCCESS {
		t.Fatalf("second Shutdown: %v", ret)
	}
	if _, ret := dev.GetName(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("GetName after the last Shutdown = %v; want ERROR_UNINITIALIZED", ret)
	}
}

// A malformed setting fails nvmlInit with one stderr line naming it. The
// library prints from C, so each case runs in a child process whose stderr
// is read back.
func TestEmulatedNVMLBadSettings(t *testing.T) {
	if os.Getenv("STEPBENCH_EMU_NVML_CHILD") == "1" {
		_, err := New(nvml.New(nvml.WithLibraryPath(emuNVMLPath(t))), "")
		fmt.Printf("NewMonitor: %v\n", err)
		return
	}
	emuNVMLPath(t)
	tests := []struct{ name, value string }{
		{"STEPBENCH_EMU_DEVICES", "0"},
		{"STEPBENCH_EMU_DEVICES", "9"},
		{"STEPBENCH_EMU_DEVICES", "two"},
		{"STEPBENCH_EMU_POWER_W", "-1"},
		{"STEPBENCH_EMU_POWER_W", "100W"},
		{"STEPBENCH_EMU_POWER_W", "nan"},
		{"STEPBENCH_EMU_CLOCK_EVENT_REASONS", "0xZZ"},
		{"STEPBENCH_EMU_CLOCK_EVENT_REASONS", "-1"},
		{"STEPBENCH_EMU_CLOCK_EVENT_REASONS", "0x"},
		{"STEPBENCH_EMU_POWER_W", "300,"},
		{"STEPBENCH_EMU_POWER_W", "300,350"}, // one GPU
		{"STEPBENCH_EMU_CLOCK_EVENT_REASONS", "0,0x4"},
		{"STEPBENCH_EMU_SM_CLOCK_MHZ", "0"},
		{"STEPBENCH_EMU_SM_CLOCK_MHZ", "1001"},
		{"STEPBENCH_EMU_MEM_BYTES", "0"},
		{"STEPBENCH_EMU_MEM_BYTES", "1e9"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			openEmuNVML(t, nil)
			cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedNVMLBadSettings$", "-test.count=1")
			cmd.Env = append(os.Environ(), "STEPBENCH_EMU_NVML_CHILD=1", tt.name+"="+tt.value)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			wantLine := fmt.Sprintf("stepbench emulated NVML: %s=%q: want ", tt.name, tt.value)
			if n := strings.Count(stderr.String(), wantLine); n != 1 {
				t.Errorf("stderr has %d lines starting %q, want 1:\n%s", n, wantLine, stderr.String())
			}
			// The stand-in's own wording of NVML_ERROR_INVALID_ARGUMENT.
			if want := "NewMonitor: nvmlInit: invalid argument (2)"; !strings.Contains(stdout.String(), want) {
				t.Errorf("child stdout:\n%s\nwant %q", stdout.String(), want)
			}
		})
	}
}

// cABICheck exercises what go-nvml never sends: NULL pointers, short
// buffers, bad enum values, calls outside a session, and sbemu_describe.
// It prints one line per failed check and exits 1 if there was any.
const cABICheck = `
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct field { unsigned id, scope; long long ts, lat; int type, ret; unsigned long long value; };
struct mem2 { unsigned version; unsigned long long total, reserved, free, used; };
typedef int (*fn)();
static void *lib;
static int failures;
static fn sym(const char *name) {
	fn f = (fn)dlsym(lib, name);
	if (f == NULL) { printf("missing symbol %s\n", name); failures++; }
	return f;
}
#define CALL(name, ...) (sym(#name) ? sym(#name)(__VA_ARGS__) : -1)
#define EXPECT(want, call) do { int got_ = (call); if (got_ != (want)) { printf("%s = %d, want %d\n", #call, got_, (want)); failures++; } } while (0)

int main(int argc, char **argv) {
	if (argc != 2 || (lib = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL)) == NULL) { printf("dlopen: %s\n", dlerror()); return 2; }
	const char *(*describe)(void) = (const char *(*)(void))dlsym(lib, "sbemu_describe");
	if (describe == NULL || strstr(describe(), "stepbench emulated") == NULL || strstr(describe(), "synthetic") == NULL) { printf("sbemu_describe missing or not saying synthetic\n"); failures++; }
	const char *(*errstr)(int) = (const char *(*)(int))dlsym(lib, "nvmlErrorString");
	if (errstr == NULL || errstr(1) == NULL || errstr(12345) == NULL) { printf("nvmlErrorString\n"); failures++; }
	unsigned n = 0, u = 0; unsigned long long e = 0; int a = 0; char buf[128]; void *dev = NULL;
	EXPECT(1, CALL(nvmlShutdown));
	EXPECT(1, CALL(nvmlDeviceGetCount_v2, &n));
	EXPECT(1, CALL(nvmlSystemGetDriverVersion, buf, 128));
	EXPECT(1, CALL(nvmlDeviceGetHandleByIndex_v2, 0, &dev));
	EXPECT(0, CALL(nvmlInit_v2));
	EXPECT(0, CALL(nvmlInit));
	EXPECT(0, CALL(nvmlDeviceGetHandleByIndex_v2, 0, &dev));
	EXPECT(2, CALL(nvmlDeviceGetCount_v2, NULL));
	EXPECT(2, CALL(nvmlDeviceGetHandleByIndex_v2, 0, NULL));
	EXPECT(2, CALL(nvmlDeviceGetHandleByUUID, NULL, &dev));
	EXPECT(2, CALL(nvmlDeviceGetHandleByUUID, "GPU-5be00000-0000-4000-8000-000000000000", NULL));
	EXPECT(2, CALL(nvmlSystemGetDriverVersion, NULL, 128));
	EXPECT(7, CALL(nvmlSystemGetDriverVersion, buf, 12));
	EXPECT(0, CALL(nvmlSystemGetDriverVersion, buf, 13));
	EXPECT(2, CALL(nvmlSystemGetCudaDriverVersion, NULL));
	EXPECT(2, CALL(nvmlSystemGetCudaDriverVersion_v2, NULL));
	EXPECT(2, CALL(nvmlDeviceGetName, NULL, buf, 128));
	EXPECT(2, CALL(nvmlDeviceGetName, dev, NULL, 128));
	EXPECT(7, CALL(nvmlDeviceGetName, dev, buf, 22));
	EXPECT(0, CALL(nvmlDeviceGetName, dev, buf, 23));
	EXPECT(7, CALL(nvmlDeviceGetUUID, dev, buf, 40));
	EXPECT(0, CALL(nvmlDeviceGetUUID, dev, buf, 41));
	EXPECT(2, CALL(nvmlDeviceGetUUID, dev, NULL, 80));
	EXPECT(2, CALL(nvmlDeviceGetIndex, dev, NULL));
	EXPECT(0, CALL(nvmlDeviceGetIndex, dev, &u));
	EXPECT(2, CALL(nvmlDeviceGetClockInfo, dev, 1, NULL));
	EXPECT(3, CALL(nvmlDeviceGetClockInfo, dev, 3, &u));
	EXPECT(2, CALL(nvmlDeviceGetClockInfo, dev, 4, &u));
	EXPECT(2, CALL(nvmlDeviceGetMaxClockInfo, dev, -1, &u));
	EXPECT(2, CALL(nvmlDeviceGetApplicationsClock, NULL, 1, &u));
	EXPECT(2, CALL(nvmlDeviceGetDefaultApplicationsClock, dev, 1, NULL));
	EXPECT(2, CALL(nvmlDeviceGetMemoryBusWidth, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetCudaComputeCapability, dev, &a, NULL));
	EXPECT(2, CALL(nvmlDeviceGetCudaComputeCapability, dev, NULL, &a));
	EXPECT(2, CALL(nvmlDeviceGetEnforcedPowerLimit, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetPowerUsage, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetTotalEnergyConsumption, NULL, &e));
	EXPECT(2, CALL(nvmlDeviceGetTotalEnergyConsumption, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetTemperature, dev, 0, NULL));
	EXPECT(2, CALL(nvmlDeviceGetTemperature, dev, 1, &u));
	EXPECT(2, CALL(nvmlDeviceGetCurrentClocksEventReasons, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetCurrentClocksThrottleReasons, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetMemoryInfo, dev, NULL));
	EXPECT(2, CALL(nvmlDeviceGetMemoryInfo_v2, dev, NULL));
	struct mem2 m2 = {1, 0, 0, 0, 0};
	EXPECT(25, CALL(nvmlDeviceGetMemoryInfo_v2, dev, &m2));
	struct field f[3] = {{186, 0, 0, 0, 0, 0, 0}, {9999, 0, 0, 0, 0, 0, 0}, {83, 0, 0, 0, 0, 0, 0}};
	EXPECT(2, CALL(nvmlDeviceGetFieldValues, dev, 0, f));
	EXPECT(2, CALL(nvmlDeviceGetFieldValues, dev, 1, NULL));
	EXPECT(0, CALL(nvmlDeviceGetFieldValues, dev, 3, f));
	EXPECT(0, f[0].ret);
	EXPECT(1, f[0].type);
	EXPECT(3, f[1].ret);
	EXPECT(0, f[2].ret);
	EXPECT(3, f[2].type);
	if (f[0].ts <= 0) { printf("field timestamp %lld\n", f[0].ts); failures++; }
	EXPECT(0, CALL(nvmlShutdown));
	EXPECT(0, CALL(nvmlDeviceGetName, dev, buf, 128));
	EXPECT(0, CALL(nvmlShutdown));
	EXPECT(1, CALL(nvmlShutdown));
	EXPECT(1, CALL(nvmlDeviceGetName, dev, buf, 128));
	EXPECT(1, CALL(nvmlDeviceGetFieldValues, dev, 3, f));
	// The library pins itself at nvmlInit: it stays mapped after its
	// opener's dlclose, so old handles get an error, not a fault.
	dlclose(lib);
	if ((lib = dlopen(argv[1], RTLD_LAZY | RTLD_NOLOAD)) == NULL) { printf("unloaded by dlclose: not pinned\n"); return 1; }
	EXPECT(1, CALL(nvmlDeviceGetName, dev, buf, 128));
	return failures != 0;
}
`

func TestEmulatedNVMLCABI(t *testing.T) {
	path := emuNVMLPath(t)
	openEmuNVML(t, nil)
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the C ABI check: %v", err)
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "abi.c"), filepath.Join(dir, "abi")
	if err := os.WriteFile(src, []byte(cABICheck), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("build the C ABI check: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, path).CombinedOutput(); err != nil {
		t.Errorf("C ABI check against %s: %v\n%s", path, err, out)
	}
}

package nvml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"stepbench/bench/telemetry"
	"stepbench/cuda/libdir"
)

// ErrNoNVML means libnvidia-ml could not be loaded: the run goes on without
// telemetry.
var ErrNoNVML = errors.New("NVML library not found (libnvidia-ml.so.1)")

// Monitor reads one NVML device. NVML is thread-safe, so a Monitor may be
// read from the sampler goroutine and the harness at once; its own state is
// guarded by mu.
type Monitor struct {
	lib    nvml.Interface
	device nvml.Device
	owned  bool // Close shuts NVML down

	// Fixed facts read once.
	Name              string
	UUID              string // the GPU read; for a MIG instance, the GPU it is part of
	MIGUUID           string // the MIG instance matched, "MIG-..."; "" for a whole GPU
	MaxSMClockMHz     float64
	MaxMemoryClockMHz float64
	MemoryBusWidthBit int
	ComputeMajor      int
	ComputeMinor      int
	PowerLimitWatts   float64
	DriverVersion     string // the NVIDIA driver's version, e.g. "580.65.06"

	// Clock stamps every reading (time.Now when nil): tests give a fixed one.
	Clock func() time.Time

	mu          sync.Mutex
	unsupported map[string]bool // calls this driver lacks, by NVML function name
}

// nvmlSoname is NVML's ABI-stable name, installed with the driver.
const nvmlSoname = "libnvidia-ml.so.1"

// Open loads NVML (libnvidia-ml.so.1 through the loader path, or
// DIR/libnvidia-ml.so.1 only with $STEPBENCH_CUDA_LIBS=DIR set, like every
// CUDA library) and opens the device with the given UUID (as nvidia-smi -L
// prints it, "GPU-..." or "MIG-..."), or device 0 when uuid is empty.
// ErrNoNVML when the library is missing.
func Open(uuid string) (*Monitor, error) {
	path, err := libdir.Resolve(nvmlSoname)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoNVML, err)
	}
	m, err := New(nvml.New(nvml.WithLibraryPath(path)), uuid)
	if err != nil && path != nvmlSoname {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, err
}

// nvmlUUIDCandidates lists the UUIDs to try for a device the CUDA driver
// named uuid. cuDeviceGetUuid_v2 gives a MIG compute instance's own UUID,
// which NVML knows as "MIG-<uuid>"; a driver that cannot tell MIG apart
// prints it "GPU-<uuid>", so that form is tried as "MIG-" too. A "MIG-"
// UUID is never given a "GPU-" prefix.
func nvmlUUIDCandidates(uuid string) []string {
	if rest, ok := strings.CutPrefix(uuid, "GPU-"); ok {
		return []string{uuid, "MIG-" + rest}
	}
	return []string{uuid}
}

// New initialises lib and opens the device with the given UUID
// (device 0 when empty). The Monitor owns the initialisation: Close shuts
// NVML down again. A MIG instance is matched by its own UUID; its readings
// come from the GPU it is part of (power, clocks and temperatures belong to
// the whole GPU, and NVML answers few queries on MIG handles).
func New(lib nvml.Interface, uuid string) (*Monitor, error) {
	ret := lib.Init()
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return nil, ErrNoNVML
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlInit: %s", nvmlError(lib, ret))
	}
	var dev nvml.Device
	var matched string
	if uuid != "" {
		var tried []string
		for _, candidate := range nvmlUUIDCandidates(uuid) {
			dev, ret = lib.DeviceGetHandleByUUID(candidate)
			tried = append(tried, candidate)
			if ret != nvml.ERROR_NOT_FOUND {
				matched = candidate
				break
			}
		}
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("nvmlDeviceGetHandleByUUID(%s): %s", strings.Join(tried, ", then "), nvmlError(lib, ret))
		}
	} else {
		dev, ret = lib.DeviceGetHandleByIndex(0)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("nvmlDeviceGetHandleByIndex(0): %s", nvmlError(lib, ret))
		}
	}
	m := &Monitor{lib: lib, unsupported: map[string]bool{}}
	if strings.HasPrefix(matched, "MIG-") {
		m.MIGUUID = matched
		const parentCall = "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"
		if m.available(parentCall) {
			if parent, ret := dev.GetDeviceHandleFromMigDeviceHandle(); m.ok(parentCall, ret) {
				dev = parent
			}
		}
	}
	m.readFacts(dev)
	m.owned = true
	return m, nil
}

// readFacts makes dev the Monitor's device and reads its fixed facts; any
// it lacks stay zero.
func (m *Monitor) readFacts(dev nvml.Device) {
	m.device = dev
	if m.available("nvmlSystemGetDriverVersion") {
		if v, ret := m.lib.SystemGetDriverVersion(); m.ok("nvmlSystemGetDriverVersion", ret) {
			m.DriverVersion = v
		}
	}
	if name, ret := dev.GetName(); ret == nvml.SUCCESS {
		m.Name = name
	}
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		m.UUID = uuid
	}
	if m.available("nvmlDeviceGetMaxClockInfo") {
		if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_SM); m.ok("nvmlDeviceGetMaxClockInfo", ret) {
			m.MaxSMClockMHz = float64(mhz)
		}
		if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM); m.ok("nvmlDeviceGetMaxClockInfo", ret) {
			m.MaxMemoryClockMHz = float64(mhz)
		}
	}
	if m.available("nvmlDeviceGetMemoryBusWidth") {
		if bits, ret := dev.GetMemoryBusWidth(); m.ok("nvmlDeviceGetMemoryBusWidth", ret) {
			m.MemoryBusWidthBit = int(bits)
		}
	}
	if m.available("nvmlDeviceGetCudaComputeCapability") {
		if major, minor, ret := dev.GetCudaComputeCapability(); m.ok("nvmlDeviceGetCudaComputeCapability", ret) {
			m.ComputeMajor, m.ComputeMinor = major, minor
		}
	}
	if m.available("nvmlDeviceGetEnforcedPowerLimit") {
		if mw, ret := dev.GetEnforcedPowerLimit(); m.ok("nvmlDeviceGetEnforcedPowerLimit", ret) {
			m.PowerLimitWatts = float64(mw) / 1e3
		}
	}
}

// Close shuts NVML down when this Monitor initialised it.
func (m *Monitor) Close() error {
	if m == nil || !m.owned {
		return nil
	}
	m.owned = false
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %s", nvmlError(m.lib, ret))
	}
	return nil
}

// available says whether the loaded library exports symbol and no earlier
// call said the driver does not support it. go-nvml binds lazily: calling a
// symbol an older driver lacks would abort the process, so every optional
// call is looked up first.
func (m *Monitor) available(symbol string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unsupported[symbol] {
		return false
	}
	if ext := m.lib.Extensions(); ext != nil {
		if err := ext.LookupSymbol(symbol); err != nil {
			m.unsupported[symbol] = true
			return false
		}
	}
	return true
}

// ok reports success, and remembers calls the driver does not support so
// that they are not tried again.
func (m *Monitor) ok(symbol string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		m.mu.Lock()
		m.unsupported[symbol] = true
		m.mu.Unlock()
	}
	return false
}

// Unsupported lists the NVML calls this device or driver lacks, sorted.
func (m *Monitor) Unsupported() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.unsupported {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Read takes one reading. Calls the driver lacks are skipped; others that
// fail leave their fields zero.
func (m *Monitor) Read() telemetry.Reading {
	now := m.Clock
	if now == nil {
		now = time.Now
	}
	r := telemetry.Reading{UnixNanos: now().UnixNano()}
	d := m.device
	if m.available("nvmlDeviceGetClockInfo") {
		if mhz, ret := d.GetClockInfo(nvml.CLOCK_SM); m.ok("nvmlDeviceGetClockInfo", ret) {
			r.SMClockMHz = float64(mhz)
		}
		if mhz, ret := d.GetClockInfo(nvml.CLOCK_MEM); m.ok("nvmlDeviceGetClockInfo", ret) {
			r.MemoryClockMHz = float64(mhz)
		}
	}
	m.readFields(&r)
	if r.PowerSource == "" && m.available("nvmlDeviceGetPowerUsage") {
		if mw, ret := d.GetPowerUsage(); m.ok("nvmlDeviceGetPowerUsage", ret) {
			r.PowerWatts, r.PowerSource = float64(mw)/1e3, telemetry.PowerSourceAverage1s
		}
	}
	if m.available("nvmlDeviceGetTotalEnergyConsumption") {
		if mj, ret := d.GetTotalEnergyConsumption(); m.ok("nvmlDeviceGetTotalEnergyConsumption", ret) {
			r.EnergyMillijoules, r.HasEnergy = mj, true
		}
	}
	if m.available("nvmlDeviceGetTemperature") {
		if c, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); m.ok("nvmlDeviceGetTemperature", ret) {
			r.GPUTemperatureC = float64(c)
		}
	}
	// Clock-event reasons: the newer name first, the older one (same bits)
	// on drivers before it existed.
	if m.available("nvmlDeviceGetCurrentClocksEventReasons") {
		if mask, ret := d.GetCurrentClocksEventReasons(); m.ok("nvmlDeviceGetCurrentClocksEventReasons", ret) {
			r.ClockEventReasons, r.HasReasons = mask, true
		}
	}
	if !r.HasReasons && m.available("nvmlDeviceGetCurrentClocksThrottleReasons") {
		if mask, ret := d.GetCurrentClocksThrottleReasons(); m.ok("nvmlDeviceGetCurrentClocksThrottleReasons", ret) {
			r.ClockEventReasons, r.HasReasons = mask, true
		}
	}
	r.Throttled = telemetry.Throttled(r, m.MaxSMClockMHz)
	return r
}

// readFields reads instantaneous power and memory temperature in one
// nvmlDeviceGetFieldValues call; each field has its own return code.
func (m *Monitor) readFields(r *telemetry.Reading) {
	if !m.available("nvmlDeviceGetFieldValues") {
		return
	}
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_POWER_INSTANT}, {FieldId: nvml.FI_DEV_MEMORY_TEMP}}
	if !m.ok("nvmlDeviceGetFieldValues", m.device.GetFieldValues(values)) {
		return
	}
	if v, ok := fieldFloat(values[0]); ok {
		r.PowerWatts, r.PowerSource = v/1e3, telemetry.PowerSourceInstant // milliwatts
	}
	if v, ok := fieldFloat(values[1]); ok && v > 0 {
		r.MemoryTemperatureC = v
	}
}

// fieldFloat decodes a field value (a C union, little-endian) by its type.
func fieldFloat(f nvml.FieldValue) (float64, bool) {
	if nvml.Return(f.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	raw := f.Value[:]
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(raw)), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(raw)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(raw)), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(raw))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(raw))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(raw)), true
	}
	return 0, false
}

// ClocksLocked says whether the SM clock is pinned: application clocks set
// away from their default, or the applications-clocks-setting reason seen
// in a reading (nvidia-smi --lock-gpu-clocks shows up there). known is false
// when NVML could say neither.
func (m *Monitor) ClocksLocked(readings []telemetry.Reading) (locked, known bool) {
	if locked, known = telemetry.LockedByReasons(readings); locked {
		return true, true
	}
	if m.available("nvmlDeviceGetApplicationsClock") && m.available("nvmlDeviceGetDefaultApplicationsClock") {
		app, ret1 := m.device.GetApplicationsClock(nvml.CLOCK_SM)
		def, ret2 := m.device.GetDefaultApplicationsClock(nvml.CLOCK_SM)
		if m.ok("nvmlDeviceGetApplicationsClock", ret1) && m.ok("nvmlDeviceGetDefaultApplicationsClock", ret2) {
			return app != def, true
		}
	}
	return false, known
}

func nvmlError(lib nvml.Interface, ret nvml.Return) string {
	// ErrorString needs the library loaded; the numeric code always works.
	defer func() { _ = recover() }()
	if s := lib.ErrorString(ret); s != "" {
		return fmt.Sprintf("%s (%d)", s, int(ret))
	}
	return fmt.Sprintf("NVML return %d", int(ret))
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

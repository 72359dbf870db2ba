package telemetry

import (
	"fmt"

	"stepbench/bench/stats"
)

// Power sources of a reading.
const (
	// PowerSourceInstant is NVML's FI_DEV_POWER_INSTANT field.
	PowerSourceInstant = "instant"
	// PowerSourceAverage1s is nvmlDeviceGetPowerUsage: a 1 s moving average
	// on Hopper and later, used where the instant field is unsupported.
	PowerSourceAverage1s = "average_1s"
)

// NVML's clock-event reason bits (nvmlClocksEventReason*, formerly
// nvmlClocksThrottleReason*).
const (
	ReasonGPUIdle                   uint64 = 0x1
	ReasonApplicationsClocksSetting uint64 = 0x2
	ReasonSWPowerCap                uint64 = 0x4
	ReasonHWSlowdown                uint64 = 0x8
	ReasonSyncBoost                 uint64 = 0x10
	ReasonSWThermalSlowdown         uint64 = 0x20
	ReasonHWThermalSlowdown         uint64 = 0x40
	ReasonHWPowerBrakeSlowdown      uint64 = 0x80
	ReasonDisplayClockSetting       uint64 = 0x100
)

// ThrottleClockFraction is nvbench's throttle threshold: a sample whose SM
// clock is below this fraction of the maximum SM clock is throttled.
const ThrottleClockFraction = 0.75

// ThrottleReasons are the clock-event reasons that mean power or thermal
// slowdown (nvbench's list): SW power cap, HW slowdown, SW thermal, HW
// thermal, HW power brake.
const ThrottleReasons = ReasonSWPowerCap | ReasonHWSlowdown | ReasonSWThermalSlowdown | ReasonHWThermalSlowdown | ReasonHWPowerBrakeSlowdown

// reasonNames names the clock-event reason bits, lowest first.
var reasonNames = []struct {
	bit  uint64
	name string
}{
	{ReasonGPUIdle, "gpu_idle"},
	{ReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{ReasonSWPowerCap, "sw_power_cap"},
	{ReasonHWSlowdown, "hw_slowdown"},
	{ReasonSyncBoost, "sync_boost"},
	{ReasonSWThermalSlowdown, "sw_thermal_slowdown"},
	{ReasonHWThermalSlowdown, "hw_thermal_slowdown"},
	{ReasonHWPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{ReasonDisplayClockSetting, "display_clock_setting"},
}

// ReasonNames returns the names of the bits set in mask; unknown bits are
// named by their value.
func ReasonNames(mask uint64) []string {
	var names []string
	known := uint64(0)
	for _, r := range reasonNames {
		known |= r.bit
		if mask&r.bit != 0 {
			names = append(names, r.name)
		}
	}
	for bit := uint64(1); bit != 0; bit <<= 1 {
		if mask&bit != 0 && known&bit == 0 {
			names = append(names, fmt.Sprintf("0x%x", bit))
		}
	}
	return names
}

// Reading is one reading of the GPU. Fields the GPU could not give are
// zero (and left out of JSON); Has* say which counters were read.
type Reading struct {
	// UnixNanos is the host clock when the reading started.
	UnixNanos          int64   `json:"unix_nanos"`
	SMClockMHz         float64 `json:"sm_clock_mhz,omitempty"`
	MemoryClockMHz     float64 `json:"memory_clock_mhz,omitempty"`
	PowerWatts         float64 `json:"power_watts,omitempty"`
	PowerSource        string  `json:"power_source,omitempty"` // PowerSourceInstant or PowerSourceAverage1s
	EnergyMillijoules  uint64  `json:"energy_counter_millijoules,omitempty"`
	HasEnergy          bool    `json:"-"`
	GPUTemperatureC    float64 `json:"gpu_temperature_c,omitempty"`
	MemoryTemperatureC float64 `json:"memory_temperature_c,omitempty"`
	ClockEventReasons  uint64  `json:"clock_event_reasons,omitempty"` // NVML's bit mask
	HasReasons         bool    `json:"-"`
	// Throttled is nvbench's rule (Throttled): SM clock < 75% of max, or a
	// power or thermal slowdown reason.
	Throttled bool `json:"throttled,omitempty"`
	// GPUs holds each GPU's own reading when this reading covers several
	// (Combine: the fields above are then the combined figures, and JSON
	// names them by how they combine: power_watts_sum, sm_clock_mhz_min, ...);
	// nil for one GPU.
	GPUs []GPUReading `json:"gpus,omitempty"`
}

// ReasonNames names the clock-event reasons of the reading.
func (r Reading) ReasonNames() []string { return ReasonNames(r.ClockEventReasons) }

// Throttled applies nvbench's rule to a reading of a GPU whose maximum SM
// clock is maxSMClockMHz (0: unknown, the clock is not judged).
func Throttled(r Reading, maxSMClockMHz float64) bool {
	if maxSMClockMHz > 0 && r.SMClockMHz > 0 && r.SMClockMHz < ThrottleClockFraction*maxSMClockMHz {
		return true
	}
	return r.ClockEventReasons&ThrottleReasons != 0
}

// LockedByReasons says whether any reading shows the SM clock pinned (the
// applications-clocks-setting reason, which nvidia-smi --lock-gpu-clocks
// sets); known is false when no reading had reasons.
func LockedByReasons(readings []Reading) (locked, known bool) {
	for _, r := range readings {
		if r.HasReasons {
			known = true
			if r.ClockEventReasons&ReasonApplicationsClocksSetting != 0 {
				return true, true
			}
		}
	}
	return false, known
}

// ClockVariationWarning returns a warning when the SM clock was not locked
// and varied by more than 2% of its median over the readings; "" otherwise.
func ClockVariationWarning(readings []Reading, locked bool) string {
	if locked {
		return ""
	}
	clocks := smClocks(readings)
	if len(clocks) < 2 {
		return ""
	}
	s := stats.Summarize(clocks)
	if s.Max-s.Min <= 0.02*s.Median {
		return ""
	}
	return fmt.Sprintf("SM clock is not locked and varied from %.0f to %.0f MHz (median %.0f) during the run; "+
		"lock it (nvidia-smi --lock-gpu-clocks) for stable timings", s.Min, s.Max, s.Median)
}

// MedianSMClockMHz is the median SM clock of the readings that have one; 0
// when none has.
func MedianSMClockMHz(readings []Reading) float64 {
	clocks := smClocks(readings)
	if len(clocks) == 0 {
		return 0
	}
	return stats.Median(clocks)
}

func smClocks(readings []Reading) []float64 {
	var clocks []float64
	for _, r := range readings {
		if r.SMClockMHz > 0 {
			clocks = append(clocks, r.SMClockMHz)
		}
	}
	return clocks
}

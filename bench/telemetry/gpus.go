package telemetry

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"stepbench/bench"
)

// PowerSourceMixed is the power source of a reading of several GPUs whose
// power came from different NVML calls (some instant, some the 1 s average).
const PowerSourceMixed = "mixed"

// GPUReading is one GPU's own reading within a reading of several GPUs.
type GPUReading struct {
	// Index is the GPU's CUDA ordinal on this node (a tensor-parallel rank
	// runs on ordinal rank − the node's first rank).
	Index   int
	UUID    string
	Reading Reading
}

// Combine is the reading of several GPUs that work in lockstep (the ranks
// of a tensor-parallel step), each GPU's own reading kept in GPUs:
//   - power: the sum over the GPUs (the node's power for the step), only
//     when every GPU gave one (a partial sum would understate it); its
//     source is theirs, or PowerSourceMixed;
//   - energy counter: the sum, only when every GPU has the counter;
//   - SM and memory clocks: the minimum over the GPUs that gave one (the
//     slowest GPU bounds a lockstep step);
//   - GPU and memory temperature: the maximum;
//   - clock-event reasons: the OR of the GPUs' masks;
//   - throttled: any GPU throttled by nvbench's rule against its own
//     maximum clock (Throttled);
//   - the time: the earliest GPU's.
//
// A reading of one GPU is that GPU's reading, with no GPUs breakdown.
func Combine(gpus []GPUReading) Reading {
	if len(gpus) == 0 {
		return Reading{}
	}
	if len(gpus) == 1 {
		return gpus[0].Reading
	}
	c := Reading{UnixNanos: gpus[0].Reading.UnixNanos, PowerSource: gpus[0].Reading.PowerSource, HasEnergy: true,
		GPUs: append([]GPUReading(nil), gpus...)}
	for _, g := range gpus {
		r := g.Reading
		c.UnixNanos = min(c.UnixNanos, r.UnixNanos)
		c.SMClockMHz = minPositive(c.SMClockMHz, r.SMClockMHz)
		c.MemoryClockMHz = minPositive(c.MemoryClockMHz, r.MemoryClockMHz)
		c.PowerWatts += r.PowerWatts
		switch {
		case r.PowerSource == "":
			c.PowerSource = ""
		case c.PowerSource != "" && r.PowerSource != c.PowerSource:
			c.PowerSource = PowerSourceMixed
		}
		c.EnergyMillijoules += r.EnergyMillijoules
		c.HasEnergy = c.HasEnergy && r.HasEnergy
		c.GPUTemperatureC = max(c.GPUTemperatureC, r.GPUTemperatureC)
		c.MemoryTemperatureC = max(c.MemoryTemperatureC, r.MemoryTemperatureC)
		c.ClockEventReasons |= r.ClockEventReasons
		c.HasReasons = c.HasReasons || r.HasReasons
		c.Throttled = c.Throttled || r.Throttled
	}
	if c.PowerSource == "" {
		c.PowerWatts = 0
	}
	if !c.HasEnergy {
		c.EnergyMillijoules = 0
	}
	return c
}

// minPositive is the smaller of two clocks, a zero (unknown) one ignored.
func minPositive(a, b float64) float64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// GPUReadings are GPU i's own readings (the i-th of each reading's GPUs),
// in order; readings of one GPU are their own.
func GPUReadings(readings []Reading, i int) []Reading {
	var out []Reading
	for _, r := range readings {
		switch {
		case len(r.GPUs) == 0 && i == 0:
			out = append(out, r)
		case i < len(r.GPUs):
			out = append(out, r.GPUs[i].Reading)
		}
	}
	return out
}

// GPU is one GPU of a Node: its CUDA ordinal on this node, its UUID, its
// readings and its energy counter (bench/telemetry/nvml's Monitor is both;
// Meter may be nil when the GPU has no counter).
type GPU struct {
	Index  int
	UUID   string
	Source Source
	Meter  bench.EnergyMeter
}

// Node reads the GPUs a run uses on this node as one: a Source whose
// readings Combine every GPU's, and a bench.EnergyMeter whose counter is
// the sum of theirs. The GPUs are read one after the other: after each
// region, and by the recorder's background sampler during regions too, so
// a sample costs one read per GPU.
type Node struct {
	gpus []GPU

	mu   sync.Mutex
	last []uint64 // each GPU's counter at the previous EnergyMillijoules
}

// NewNode reads gpus as one.
func NewNode(gpus []GPU) *Node { return &Node{gpus: gpus} }

// Read reads every GPU and combines the readings (Combine).
func (n *Node) Read() Reading {
	readings := make([]GPUReading, len(n.gpus))
	for i, g := range n.gpus {
		readings[i] = GPUReading{Index: g.Index, UUID: g.UUID, Reading: g.Source.Read()}
	}
	return Combine(readings)
}

// EnergyMillijoules is the sum of every GPU's energy counter, so that a
// window's energy is the sum of each GPU's delta. A GPU without the
// counter, or whose counter went back since the previous call, is an
// error naming it: then there is no node energy to report.
func (n *Node) EnergyMillijoules() (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	counters := make([]uint64, len(n.gpus))
	var sum uint64
	for i, g := range n.gpus {
		if g.Meter == nil {
			return 0, fmt.Errorf("GPU %d (%s): no energy counter", g.Index, g.UUID)
		}
		mj, err := g.Meter.EnergyMillijoules()
		if err != nil {
			return 0, fmt.Errorf("GPU %d (%s): %w", g.Index, g.UUID, err)
		}
		if n.last != nil && mj < n.last[i] {
			return 0, fmt.Errorf("GPU %d (%s): energy counter went backwards (%d -> %d mJ): driver reloaded?", g.Index, g.UUID, n.last[i], mj)
		}
		counters[i] = mj
		sum += mj
	}
	n.last = counters
	return sum, nil
}

// readingFields is a Reading without its methods: its JSON form as one
// GPU's.
type readingFields Reading

// combinedReadingJSON is a reading of several GPUs in JSON: each combined
// figure named by how it combines, each GPU's own reading in gpus.
type combinedReadingJSON struct {
	UnixNanos             int64        `json:"unix_nanos"`
	SMClockMHzMin         float64      `json:"sm_clock_mhz_min,omitempty"`
	MemoryClockMHzMin     float64      `json:"memory_clock_mhz_min,omitempty"`
	PowerWattsSum         float64      `json:"power_watts_sum,omitempty"`
	PowerSource           string       `json:"power_source,omitempty"`
	EnergyMillijoulesSum  uint64       `json:"energy_counter_millijoules_sum,omitempty"`
	GPUTemperatureCMax    float64      `json:"gpu_temperature_c_max,omitempty"`
	MemoryTemperatureCMax float64      `json:"memory_temperature_c_max,omitempty"`
	ClockEventReasonsOr   uint64       `json:"clock_event_reasons_or,omitempty"`
	ThrottledAny          bool         `json:"throttled_any,omitempty"`
	GPUs                  []GPUReading `json:"gpus"`
}

// MarshalJSON writes a reading of one GPU with its plain field names, and
// a reading of several with the combined figures' names (power_watts_sum,
// sm_clock_mhz_min, ...) and every GPU's own reading under "gpus".
func (r Reading) MarshalJSON() ([]byte, error) {
	if len(r.GPUs) == 0 {
		return json.Marshal(readingFields(r))
	}
	return json.Marshal(combinedReadingJSON{UnixNanos: r.UnixNanos, SMClockMHzMin: r.SMClockMHz, MemoryClockMHzMin: r.MemoryClockMHz,
		PowerWattsSum: r.PowerWatts, PowerSource: r.PowerSource, EnergyMillijoulesSum: r.EnergyMillijoules,
		GPUTemperatureCMax: r.GPUTemperatureC, MemoryTemperatureCMax: r.MemoryTemperatureC,
		ClockEventReasonsOr: r.ClockEventReasons, ThrottledAny: r.Throttled, GPUs: r.GPUs})
}

// UnmarshalJSON reads either form MarshalJSON writes.
func (r *Reading) UnmarshalJSON(data []byte) error {
	var c combinedReadingJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("telemetry reading: %w", err)
	}
	if len(c.GPUs) == 0 {
		var one readingFields
		if err := json.Unmarshal(data, &one); err != nil {
			return fmt.Errorf("telemetry reading: %w", err)
		}
		*r = Reading(one)
		return nil
	}
	*r = Reading{UnixNanos: c.UnixNanos, SMClockMHz: c.SMClockMHzMin, MemoryClockMHz: c.MemoryClockMHzMin,
		PowerWatts: c.PowerWattsSum, PowerSource: c.PowerSource, EnergyMillijoules: c.EnergyMillijoulesSum,
		HasEnergy: c.EnergyMillijoulesSum > 0, GPUTemperatureC: c.GPUTemperatureCMax, MemoryTemperatureC: c.MemoryTemperatureCMax,
		ClockEventReasons: c.ClockEventReasonsOr, Throttled: c.ThrottledAny, GPUs: c.GPUs}
	return nil
}

// gpuReadingJSON is one GPU's reading in JSON: its index and UUID, then
// the reading's own fields.
type gpuReadingJSON struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	readingFields
}

// MarshalJSON writes {"index", "uuid", the reading's fields}.
func (g GPUReading) MarshalJSON() ([]byte, error) {
	return json.Marshal(gpuReadingJSON{Index: g.Index, UUID: g.UUID, readingFields: readingFields(g.Reading)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *GPUReading) UnmarshalJSON(data []byte) error {
	var j gpuReadingJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("GPU reading: %w", err)
	}
	if len(j.GPUs) > 0 {
		return errors.New("GPU reading: a GPU's reading has no gpus of its own")
	}
	*g = GPUReading{Index: j.Index, UUID: j.UUID, Reading: Reading(j.readingFields)}
	return nil
}

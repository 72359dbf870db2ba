package telemetry

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// h100 is a reading of an unthrottled H100 at full clock and 600 W.
func h100(power, sm float64, reasons uint64, throttled bool) Reading {
	return Reading{UnixNanos: 10, SMClockMHz: sm, MemoryClockMHz: 2619, PowerWatts: power, PowerSource: PowerSourceInstant,
		EnergyMillijoules: 1000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60,
		ClockEventReasons: reasons, HasReasons: true, Throttled: throttled}
}

func gpus(readings ...Reading) []GPUReading {
	out := make([]GPUReading, len(readings))
	for i, r := range readings {
		out[i] = GPUReading{Index: i, UUID: "GPU-" + string(rune('a'+i)), Reading: r}
	}
	return out
}

func TestCombine(t *testing.T) {
	hot := h100(690, 1980, ReasonSWPowerCap, true)
	hot.UnixNanos, hot.GPUTemperatureC, hot.MemoryTemperatureC, hot.EnergyMillijoules = 5, 71, 80, 3000
	slow := h100(600, 1400, ReasonGPUIdle, true) // below 75% of 1980
	slow.MemoryClockMHz = 2000
	average := h100(500, 1980, 0, false)
	average.PowerSource = PowerSourceAverage1s
	noPower, noEnergy, noReasons := h100(0, 1980, 0, false), h100(600, 1980, 0, false), h100(600, 0, 0, false)
	noPower.PowerSource = ""
	noEnergy.HasEnergy, noEnergy.EnergyMillijoules = false, 0
	noReasons.HasReasons = false
	for _, c := range []struct {
		name      string
		in        []GPUReading
		want      Reading
		breakdown bool // the reading keeps the per-GPU readings
	}{
		{"none", nil, Reading{}, false},
		{"one GPU is itself", gpus(hot), hot, false},
		{"two at full clock", gpus(h100(600, 1980, 0, false), h100(650, 1980, 0, false)),
			Reading{UnixNanos: 10, SMClockMHz: 1980, MemoryClockMHz: 2619, PowerWatts: 1250, PowerSource: PowerSourceInstant,
				EnergyMillijoules: 2000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60, HasReasons: true}, true},
		{"GPU 1 alone throttles by reason; max temperature, OR of reasons, earliest time",
			gpus(h100(600, 1980, ReasonGPUIdle, false), hot),
			Reading{UnixNanos: 5, SMClockMHz: 1980, MemoryClockMHz: 2619, PowerWatts: 1290, PowerSource: PowerSourceInstant,
				EnergyMillijoules: 4000, HasEnergy: true, GPUTemperatureC: 71, MemoryTemperatureC: 80,
				ClockEventReasons: ReasonGPUIdle | ReasonSWPowerCap, HasReasons: true, Throttled: true}, true},
		{"min clocks", gpus(h100(600, 1980, 0, false), slow),
			Reading{UnixNanos: 10, SMClockMHz: 1400, MemoryClockMHz: 2000, PowerWatts: 1200, PowerSource: PowerSourceInstant,
				EnergyMillijoules: 2000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60,
				ClockEventReasons: ReasonGPUIdle, HasReasons: true, Throttled: true}, true},
		{"mixed power sources", gpus(h100(600, 1980, 0, false), average),
			Reading{UnixNanos: 10, SMClockMHz: 1980, MemoryClockMHz: 2619, PowerWatts: 1100, PowerSource: PowerSourceMixed,
				EnergyMillijoules: 2000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60, HasReasons: true}, true},
		{"a GPU without power: no sum", gpus(h100(600, 1980, 0, false), noPower),
			Reading{UnixNanos: 10, SMClockMHz: 1980, MemoryClockMHz: 2619,
				EnergyMillijoules: 2000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60, HasReasons: true}, true},
		{"a GPU without the energy counter: no sum", gpus(h100(600, 1980, 0, false), noEnergy),
			Reading{UnixNanos: 10, SMClockMHz: 1980, MemoryClockMHz: 2619, PowerWatts: 1200, PowerSource: PowerSourceInstant,
				GPUTemperatureC: 50, MemoryTemperatureC: 60, HasReasons: true}, true},
		{"a GPU without SM clock or reasons is left out of their min and OR", gpus(noReasons, h100(600, 1700, ReasonSWPowerCap, true)),
			Reading{UnixNanos: 10, SMClockMHz: 1700, MemoryClockMHz: 2619, PowerWatts: 1200, PowerSource: PowerSourceInstant,
				EnergyMillijoules: 2000, HasEnergy: true, GPUTemperatureC: 50, MemoryTemperatureC: 60,
				ClockEventReasons: ReasonSWPowerCap, HasReasons: true, Throttled: true}, true},
	} {
		got := Combine(c.in)
		if c.breakdown {
			if !reflect.DeepEqual(got.GPUs, c.in) {
				t.Errorf("%s: GPUs %+v, want the inputs", c.name, got.GPUs)
			}
			c.want.GPUs = c.in
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// A reading of one GPU keeps its JSON names; one of several names every
// combined figure by how it combines and lists each GPU's reading.
func TestReadingJSON(t *testing.T) {
	one := Reading{UnixNanos: 7, SMClockMHz: 1980, PowerWatts: 600, PowerSource: PowerSourceInstant, Throttled: true}
	data, err := json.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"unix_nanos":7,"sm_clock_mhz":1980,"power_watts":600,"power_source":"instant","throttled":true}`; string(data) != want {
		t.Errorf("one GPU: %s\nwant %s", data, want)
	}
	two := Combine(gpus(h100(300, 1000, 0, false), h100(350, 900, ReasonSWPowerCap, true)))
	data, err = json.Marshal(two)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"power_watts_sum":650`, `"sm_clock_mhz_min":900`, `"memory_clock_mhz_min":2619`,
		`"energy_counter_millijoules_sum":2000`, `"gpu_temperature_c_max":50`, `"clock_event_reasons_or":4`, `"throttled_any":true`,
		`"gpus":[{"index":0,"uuid":"GPU-a","unix_nanos":10,"sm_clock_mhz":1000,`, `{"index":1,"uuid":"GPU-b",`, `"power_watts":350,`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("two GPUs: %s\nlacks %s", data, want)
		}
	}
	if strings.Contains(string(data), `"power_watts":650`) {
		t.Errorf("two GPUs: the sum is written under one GPU's name: %s", data)
	}
	var back Reading
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.PowerWatts != 650 || back.SMClockMHz != 900 || !back.Throttled || len(back.GPUs) != 2 || back.GPUs[1].Reading.PowerWatts != 350 ||
		back.GPUs[1].UUID != "GPU-b" || !back.GPUs[1].Reading.Throttled {
		t.Errorf("round trip of two GPUs: %+v", back)
	}
	back = Reading{}
	if err := json.Unmarshal([]byte(`{"unix_nanos":7,"power_watts":600}`), &back); err != nil || back.PowerWatts != 600 || back.GPUs != nil {
		t.Errorf("one GPU read back: %+v %v", back, err)
	}
}

// meter is a scripted energy counter.
type meter struct {
	mj  []uint64
	err error
}

func (m *meter) EnergyMillijoules() (uint64, error) {
	if m.err != nil {
		return 0, m.err
	}
	v := m.mj[0]
	if len(m.mj) > 1 {
		m.mj = m.mj[1:]
	}
	return v, nil
}

type fixed Reading

func (f fixed) Read() Reading { return Reading(f) }

func TestNode(t *testing.T) {
	node := NewNode([]GPU{
		{Index: 0, UUID: "GPU-a", Source: fixed(h100(300, 1000, 0, false)), Meter: &meter{mj: []uint64{100, 400}}},
		{Index: 1, UUID: "GPU-b", Source: fixed(h100(350, 900, ReasonSWPowerCap, true)), Meter: &meter{mj: []uint64{1000, 1350}}},
	})
	r := node.Read()
	if r.PowerWatts != 650 || r.SMClockMHz != 900 || !r.Throttled || len(r.GPUs) != 2 || r.GPUs[1].Index != 1 || r.GPUs[0].Reading.Throttled {
		t.Errorf("node reading %+v", r)
	}
	start, err1 := node.EnergyMillijoules()
	end, err2 := node.EnergyMillijoules()
	if err1 != nil || err2 != nil || start != 1100 || end != 1750 {
		t.Errorf("node energy %d -> %d mJ (%v, %v); want 1100 -> 1750, the sum of each GPU's counter", start, end, err1, err2)
	}
	for _, c := range []struct {
		name string
		gpu  GPU
		want string
	}{
		{"no meter", GPU{Index: 1, UUID: "GPU-b"}, "GPU 1 (GPU-b): no energy counter"},
		{"meter error", GPU{Index: 1, UUID: "GPU-b", Meter: &meter{err: errors.New("not supported")}}, "GPU 1 (GPU-b): not supported"},
		{"backwards", GPU{Index: 1, UUID: "GPU-b", Meter: &meter{mj: []uint64{500, 400}}}, "GPU 1 (GPU-b): energy counter went backwards (500 -> 400 mJ)"},
	} {
		n := NewNode([]GPU{{Index: 0, UUID: "GPU-a", Meter: &meter{mj: []uint64{1, 2}}}, c.gpu})
		_, err := n.EnergyMillijoules()
		if err == nil {
			_, err = n.EnergyMillijoules()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
}

func TestGPUReadings(t *testing.T) {
	a, b := h100(300, 1000, 0, false), h100(350, 900, 0, false)
	readings := []Reading{Combine(gpus(a, b)), Combine(gpus(b, a))}
	if got := GPUReadings(readings, 1); len(got) != 2 || got[0].PowerWatts != 350 || got[1].PowerWatts != 300 {
		t.Errorf("GPU 1's readings %+v", got)
	}
	if got := GPUReadings([]Reading{a}, 0); len(got) != 1 || got[0].PowerWatts != 300 {
		t.Errorf("one GPU's readings %+v", got)
	}
	if got := GPUReadings([]Reading{a}, 1); got != nil {
		t.Errorf("GPU 1 of a one-GPU reading: %+v", got)
	}
}

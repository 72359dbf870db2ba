package nvml

import (
	"strings"
	"testing"

	"stepbench/bench/telemetry"
)

// Two Monitors on go-nvml's mock read as one node: power and energy sum,
// the SM clock is the slower GPU's, and GPU 1's power cap alone marks the
// node's reading throttled; a GPU without the energy counter leaves the
// node without one, named.
func TestNodeOfTwoMonitors(t *testing.T) {
	gpu0 := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}, energyMJ: 5000}
	gpu1 := &scriptedGPU{smClocks: []uint32{1980, 1700}, reasons: []uint64{0, telemetry.ReasonSWPowerCap}, energyMJ: 7000}
	m0, m1 := openMock(t, gpu0), openMock(t, gpu1)
	node := telemetry.NewNode([]telemetry.GPU{{Index: 0, UUID: "GPU-0", Source: m0, Meter: m0}, {Index: 1, UUID: "GPU-1", Source: m1, Meter: m1}})
	first, second := node.Read(), node.Read()
	// The mock's power is 100 W + 1 W per read of its GPU.
	if first.PowerWatts != 101+101 || first.SMClockMHz != 1980 || first.Throttled {
		t.Errorf("first node reading %+v; want 202 W, 1980 MHz, not throttled", first)
	}
	if second.PowerWatts != 102+102 || second.SMClockMHz != 1700 || !second.Throttled || second.ClockEventReasons != telemetry.ReasonSWPowerCap {
		t.Errorf("second node reading %+v; want 204 W, 1700 MHz, throttled by GPU 1's power cap", second)
	}
	if g := second.GPUs; len(g) != 2 || g[0].Reading.Throttled || !g[1].Reading.Throttled || g[0].Reading.SMClockMHz != 1980 || g[1].UUID != "GPU-1" {
		t.Errorf("second reading's GPUs %+v", g)
	}
	if mj, err := node.EnergyMillijoules(); err != nil || mj != 12000 {
		t.Errorf("node energy %d mJ, %v; want 12000, the sum", mj, err)
	}
	gpu2 := &scriptedGPU{smClocks: []uint32{1980}, reasons: []uint64{0}, missing: map[string]bool{"nvmlDeviceGetTotalEnergyConsumption": true}}
	m2 := openMock(t, gpu2)
	node = telemetry.NewNode([]telemetry.GPU{{Index: 0, UUID: "GPU-0", Source: m0, Meter: m0}, {Index: 1, UUID: "GPU-2", Source: m2, Meter: m2}})
	if _, err := node.EnergyMillijoules(); err == nil || !strings.Contains(err.Error(), "GPU 1 (GPU-2): nvmlDeviceGetTotalEnergyConsumption: not available") {
		t.Errorf("a GPU without the energy counter: %v", err)
	}
	if r := node.Read(); r.HasEnergy || r.EnergyMillijoules != 0 || r.PowerWatts == 0 {
		t.Errorf("reading with a GPU lacking the counter: %+v; want power, no energy sum", r)
	}
}

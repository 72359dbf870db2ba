package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
	"stepbench/bench/telemetry/nvml"
)

// twoGPUEnv is a tensor-parallel node of two GPUs as openGroup describes it.
func twoGPUEnv() report.Environment {
	env := goldenH100
	env.TPSize, env.TPRanks, env.TPGPUUUIDs = 2, []int{0, 1}, []string{"GPU-0", "GPU-1"}
	return env
}

// Over several GPUs startTelemetry opens one Monitor per UUID (go-nvml's
// mock, the golden run's H100 at 650 W each) and reads them as one: a
// region's reading has both GPUs and their summed power, and the energy
// meter is their sum. A GPU that lacks the energy counter leaves the run
// without energy windows, said once; a GPU NVML cannot open leaves it
// without telemetry, naming that GPU.
func TestTelemetryOverSeveralGPUs(t *testing.T) {
	for _, c := range []struct {
		name                   string
		lacksEnergy, lacksOpen string // the UUID without the energy counter, or that NVML cannot open
		wantStderr             string
	}{
		{name: "both GPUs"},
		{name: "GPU 1 without the energy counter", lacksEnergy: "GPU-1",
			wantStderr: "stepbench: no energy windows: GPU 1 (GPU-1): nvmlDeviceGetTotalEnergyConsumption: not available on NVIDIA H100 80GB HBM3\n"},
		{name: "GPU 1 not found", lacksOpen: "GPU-1",
			wantStderr: "stepbench: no telemetry: GPU 1 (GPU-1): mock not found; the run goes on without it\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			device := benchtest.NewDevice(5)
			open := func(uuid string) (*nvml.Monitor, error) {
				if uuid == c.lacksOpen {
					return nil, errors.New("mock not found")
				}
				lib := goldenNVML(device).(*mock.Interface)
				if uuid == c.lacksEnergy {
					ext := &mock.ExtendedInterface{LookupSymbolFunc: func(symbol string) error {
						if symbol == "nvmlDeviceGetTotalEnergyConsumption" {
							return errors.New("undefined symbol")
						}
						return nil
					}}
					lib.ExtensionsFunc = func() gonvml.ExtendedInterface { return ext }
				}
				return nvml.New(lib, uuid)
			}
			env := twoGPUEnv()
			var opt bench.Options
			var stderr bytes.Buffer
			rt := startTelemetry(telemetryFlags{energyWindowSeconds: 1}, runDeps{openNVML: open, now: device.Clock, sampleEvery: -1}, &env, &opt, &stderr)
			if stderr.String() != c.wantStderr {
				t.Errorf("stderr %q, want %q", stderr.String(), c.wantStderr)
			}
			if c.lacksOpen != "" {
				if rt != nil || len(env.TelemetryNotes) != 1 || !strings.Contains(env.TelemetryNotes[0], "GPU 1 (GPU-1)") {
					t.Errorf("telemetry %v, notes %q; want none, one note naming GPU 1", rt, env.TelemetryNotes)
				}
				return
			}
			if (opt.EnergyMeter != nil) != (c.lacksEnergy == "") {
				t.Errorf("energy meter %v; want one only when both GPUs have the counter", opt.EnergyMeter)
			}
			shape := bench.Shape{Batch: 1, InputLen: 4, OutputLen: 2}
			opt.BeforeShape(shape)
			opt.BetweenRegions(bench.Sample{Phase: bench.PhasePrefill})
			r, ok := rt.Recorder().Region(shape, bench.PhasePrefill, 0, 0)
			if !ok || len(r.GPUs) != 2 || r.PowerWatts != 1300 || r.GPUs[1].UUID != "GPU-1" || r.GPUs[1].Reading.PowerWatts != 650 {
				t.Errorf("region reading %+v; want both GPUs, 1300 W in all", r)
			}
			rt.finish(&env, &stderr)
		})
	}
}

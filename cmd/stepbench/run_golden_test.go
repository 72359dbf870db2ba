package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"stepbench/bench/benchtest"
	"stepbench/bench/hostload"
	"stepbench/bench/report"
	"stepbench/bench/telemetry/nvml"
)

// The golden runs drive 'stepbench run' as runCmd wires it, with a virtual
// device for the engine (every time is a step of its clock), the clock for
// every timestamp, and go-nvml's mock for NVML: nothing in their outputs
// depends on the machine or the hour. Each writes the text summary, the
// native JSON, one_batch's JSONL and vLLM's JSON; -update rewrites them.

// goldenH100 is the machine of the telemetry run, as the CUDA backend
// would describe an H100 SXM.
var goldenH100 = report.Environment{Backend: "cuda", GPUName: "NVIDIA H100 80GB HBM3", GPUUUID: "GPU-60d1e000-0000-4000-8000-000000000001",
	ComputeCapability: "9.0", CUDAVersion: "12.4", NVRTCVersion: "12.4", CUBLASVersion: "12.4.5", SMCount: 132,
	MemoryBusWidthBits: 5120, MaxSMClockMHz: 1980, MemoryClockMHz: 2619, GPUMemoryBytes: 80 << 30}

// goldenNVML is an H100 on go-nvml's mock whose readings follow the device:
// the SM clock sags by 10 MHz per reading from 1980 MHz (down to 1400:
// throttled below 1485) and the energy counter grows at 700 W of virtual
// time.
func goldenNVML(device *benchtest.Device) gonvml.Interface {
	var mu sync.Mutex
	reads := 0
	dev := &mock.Device{
		GetNameFunc:                  func() (string, gonvml.Return) { return goldenH100.GPUName, gonvml.SUCCESS },
		GetUUIDFunc:                  func() (string, gonvml.Return) { return goldenH100.GPUUUID, gonvml.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, gonvml.Return) { return 9, 0, gonvml.SUCCESS },
		GetMemoryBusWidthFunc:        func() (uint32, gonvml.Return) { return 5120, gonvml.SUCCESS },
		GetEnforcedPowerLimitFunc:    func() (uint32, gonvml.Return) { return 700000, gonvml.SUCCESS },
		GetMaxClockInfoFunc: func(c gonvml.ClockType) (uint32, gonvml.Return) {
			return map[gonvml.ClockType]uint32{gonvml.CLOCK_SM: 1980}[c] + map[bool]uint32{true: 2619}[c == gonvml.CLOCK_MEM], gonvml.SUCCESS
		},
		GetClockInfoFunc: func(c gonvml.ClockType) (uint32, gonvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if c != gonvml.CLOCK_SM {
				return 2619, gonvml.SUCCESS
			}
			reads++
			return uint32(max(1400, 1990-10*reads)), gonvml.SUCCESS
		},
		GetFieldValuesFunc: func(values []gonvml.FieldValue) gonvml.Return {
			for i := range values {
				values[i].NvmlReturn, values[i].ValueType = uint32(gonvml.SUCCESS), uint32(gonvml.VALUE_TYPE_UNSIGNED_INT)
				v := uint32(61) // memory temperature, °C
				if values[i].FieldId == gonvml.FI_DEV_POWER_INSTANT {
					v = 650000 // mW
				}
				binary.LittleEndian.PutUint32(values[i].Value[:], v)
			}
			return gonvml.SUCCESS
		},
		GetTotalEnergyConsumptionFunc: func() (uint64, gonvml.Return) {
			return uint64(device.Now/time.Millisecond) * 700, gonvml.SUCCESS
		},
		GetTemperatureFunc:                  func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 55, gonvml.SUCCESS },
		GetCurrentClocksEventReasonsFunc:    func() (uint64, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetApplicationsClockFunc:            func(gonvml.ClockType) (uint32, gonvml.Return) { return 1755, gonvml.SUCCESS },
		GetDefaultApplicationsClockFunc:     func(gonvml.ClockType) (uint32, gonvml.Return) { return 1755, gonvml.SUCCESS },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, gonvml.Return) { return 0, gonvml.SUCCESS },
	}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	return &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { return gonvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "580.65.06", gonvml.SUCCESS },
		ExtensionsFunc:             func() gonvml.ExtendedInterface { return ext },
		ErrorStringFunc:            func(gonvml.Return) string { return "mock error" },
		DeviceGetHandleByUUIDFunc:  func(string) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
	}
}

// goldenRun is one run's outputs: stdout and the files its flags name.
type goldenRun struct {
	stdout               []byte
	native, jsonl, vllm1 []byte
}

// runGolden runs 'stepbench run args' on a virtual device in a fresh
// directory (so the paths in the outputs are the relative ones of args),
// on env, with NVML when withNVML.
func runGolden(t *testing.T, args []string, env report.Environment, withNVML bool) goldenRun {
	t.Helper()
	var out goldenRun
	t.Run("run", func(t *testing.T) {
		t.Chdir(t.TempDir())
		fs := newFlagSet("run", io.Discard)
		var f runFlags
		f.register(fs)
		if err := parseFlags(fs, args); err != nil {
			t.Fatal(err)
		}
		if err := f.check(fs); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.model.resolve()
		if err != nil {
			t.Fatal(err)
		}
		device := benchtest.NewDevice(5)
		// A prefill of 20 µs and decode steps of 2 µs: llama-tiny's floors are
		// of the order of a microsecond.
		d := runDeps{target: &benchtest.Arm{Name: "A", Device: device, Slowdown: 0.002}, env: env, now: device.Clock, hostLoad: noHostLoad,
			sampleEvery: -1, calibrations: t.TempDir(), toolVersion: "test",
			openNVML: func(string) (*nvml.Monitor, error) { return nil, nvml.ErrNoNVML }}
		if withNVML {
			d.openNVML = func(uuid string) (*nvml.Monitor, error) { return nvml.New(goldenNVML(device), uuid) }
		}
		var stdout, stderr bytes.Buffer
		if err := f.benchmark(fs, runSetup{device: env.Backend, loadFormat: "dummy", cfg: cfg}, d, &stdout, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		out.stdout = stdout.Bytes()
		read := func(name string) []byte {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
		out.native, out.jsonl, out.vllm1 = read("report.json"), read("r.jsonl"), read("v_batch1_input16_output4.json")
	})
	return out
}

var goldenArgs = []string{"--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "16", "--output-len", "4",
	"--num-iters", "6", "--result-filename", "r.jsonl", "--output-json", "v.json", "--json-out", "report.json"}

// TestRunGoldenWithTelemetry: the H100's device roof (its SM count and
// clocks, no calibration cached), NVML readings on every sample, energy
// windows and a throttle count; with -v, one_batch's lines of every
// iteration, byte for byte.
func TestRunGoldenWithTelemetry(t *testing.T) {
	out := runGolden(t, append(goldenArgs, "--energy-window-seconds", "0.05", "-v"), goldenH100, true)
	checkGoldenRun(t, "run_telemetry", out)
	for _, want := range []string{"device roof (132 SMs", "power_W", "throttled"} {
		if !strings.Contains(string(out.stdout), want) {
			t.Errorf("text summary lacks %q", want)
		}
	}
}

// TestRunGoldenWithoutTelemetry: the cpu backend (no NVML) under the
// datasheet roof of a preset asked for; quiet (no -v): no line per iteration.
func TestRunGoldenWithoutTelemetry(t *testing.T) {
	out := runGolden(t, append(goldenArgs, "--gpu", "h100-sxm"), report.Environment{Backend: "cpu"}, false)
	checkGoldenRun(t, "run_cpu", out)
	if !strings.Contains(string(out.stdout), "datasheet roof (H100 SXM5 80GB)") {
		t.Errorf("the text summary does not name the roof:\n%s", out.stdout)
	}
}

func checkGoldenRun(t *testing.T, name string, out goldenRun) {
	t.Helper()
	checkGolden(t, name+".txt", out.stdout)
	checkGolden(t, name+".report.json", out.native)
	checkGolden(t, name+".jsonl", out.jsonl)
	checkGolden(t, name+".vllm.json", out.vllm1)
}

// noHostLoad keeps the host's load out of golden reports: an unknown sample.
func noHostLoad() hostload.Sample { return hostload.Sample{} }

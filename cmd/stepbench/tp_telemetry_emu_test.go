package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tpTelemetryReport is what TestEmulatedTensorParallelTelemetry reads of
// the native report.
type tpTelemetryReport struct {
	Environment struct {
		TPGPUUUIDs []string `json:"tp_gpu_uuids"`
	} `json:"environment"`
	Shapes []struct {
		Samples []struct {
			Phase     string `json:"phase"`
			Telemetry *struct {
				PowerWattsSum float64 `json:"power_watts_sum"`
				PowerWatts    float64 `json:"power_watts"`
				SMClockMHzMin float64 `json:"sm_clock_mhz_min"`
				ThrottledAny  bool    `json:"throttled_any"`
				GPUs          []struct {
					Index      int     `json:"index"`
					UUID       string  `json:"uuid"`
					PowerWatts float64 `json:"power_watts"`
					SMClockMHz float64 `json:"sm_clock_mhz"`
					Throttled  bool    `json:"throttled"`
				} `json:"gpus"`
			} `json:"telemetry"`
		} `json:"samples"`
		ThrottledSamples    int     `json:"throttled_samples"`
		MedianPowerWattsSum float64 `json:"median_power_watts_sum"`
		MedianSMClockMHzMin float64 `json:"median_sm_clock_mhz_min"`
		GPUs                []struct {
			Index                  int     `json:"index"`
			DecodeMedianPowerWatts float64 `json:"decode_median_power_watts"`
			DecodeMinSMClockMHz    float64 `json:"decode_min_sm_clock_mhz"`
			ThrottledSamples       int     `json:"throttled_samples"`
		} `json:"gpus"`
		Energy *struct {
			Iteration *struct {
				AverageWatts float64 `json:"average_watts"`
			} `json:"iteration"`
		} `json:"energy"`
	} `json:"shapes"`
}

// TestEmulatedTensorParallelTelemetry runs --tp-size 2 in a child process
// with 2 emulated GPUs whose NVML says GPU 0: 300 W at 1000 MHz, GPU 1:
// 350 W at 900 MHz under a power cap (throttled). Every sample carries both
// GPUs' readings, the summed power, the slower clock and a throttled flag
// that GPU 1 alone sets; the energy windows sum both GPUs' counters.
func TestEmulatedTensorParallelTelemetry(t *testing.T) {
	onEmulator(t)
	if os.Getenv("STEPBENCH_TEST_TP_TELEMETRY") != "child" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatedTensorParallelTelemetry$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_TP_TELEMETRY=child", "STEPBENCH_EMU_DEVICES=2", "STEPBENCH_EMU_POWER_W=300,350",
			"STEPBENCH_EMU_CLOCK_EVENT_REASONS=0,0x4", "STEPBENCH_EMU_SM_CLOCK_MHZ=1000,900", "STEPBENCH_TEST_EMU_CACHE="+emuCacheHome)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child with 2 emulated GPUs: %v\n%s", err, out)
		}
		return
	}
	native := filepath.Join(t.TempDir(), "n.json")
	stdout, _ := mustRun(t, "run", "--device", "cuda", "--model", "llama-tiny", "--tp-size", "2", "--batch-size", "2",
		"--input-len", "8", "--output-len", "3", "--num-iters", "2", "--energy-window-seconds", "0.02", "--json-out", native)
	for _, want := range []string{"power_W_sum", "sm_MHz_min", "over this node's GPUs", "telemetry per GPU"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text output lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(native)
	if err != nil {
		t.Fatal(err)
	}
	var rep tpTelemetryReport
	if err := json.Unmarshal(data, &rep); err != nil || len(rep.Shapes) != 1 {
		t.Fatalf("native report: %v\n%s", err, data)
	}
	uuids := rep.Environment.TPGPUUUIDs
	if len(uuids) != 2 || uuids[0] == uuids[1] {
		t.Fatalf("tp_gpu_uuids %q; want two GPUs", uuids)
	}
	s := rep.Shapes[0]
	checkTPSampleTelemetry(t, &rep, uuids)
	if s.MedianPowerWattsSum != 650 || s.MedianSMClockMHzMin != 900 || s.ThrottledSamples != len(s.Samples) {
		t.Errorf("shape: median power sum %v W, min clock %v MHz, %d of %d throttled; want 650, 900, all",
			s.MedianPowerWattsSum, s.MedianSMClockMHzMin, s.ThrottledSamples, len(s.Samples))
	}
	if len(s.GPUs) != 2 || s.GPUs[0].DecodeMedianPowerWatts != 300 || s.GPUs[1].DecodeMedianPowerWatts != 350 ||
		s.GPUs[1].DecodeMinSMClockMHz != 900 || s.GPUs[0].ThrottledSamples != 0 || s.GPUs[1].ThrottledSamples != len(s.Samples) {
		t.Errorf("per-GPU summaries %+v", s.GPUs)
	}
	// The counters are read before the window's host clock starts and after
	// it stops, so the window's average is at least the summed power (a
	// millijoule of truncation aside), whatever the timing; one GPU's
	// counter alone could not reach it.
	if s.Energy == nil || s.Energy.Iteration == nil || s.Energy.Iteration.AverageWatts < 649 {
		t.Errorf("iteration energy window %+v; want an average of at least the 650 W the two GPUs draw", s.Energy)
	}
}

// checkTPSampleTelemetry checks every sample's telemetry against the two
// emulated GPUs' settings.
func checkTPSampleTelemetry(t *testing.T, rep *tpTelemetryReport, uuids []string) {
	t.Helper()
	for i, x := range rep.Shapes[0].Samples {
		tel := x.Telemetry
		if tel == nil || len(tel.GPUs) != 2 {
			t.Fatalf("sample %d: telemetry %+v; want both GPUs", i, tel)
		}
		if tel.PowerWattsSum != 650 || tel.PowerWatts != 0 || tel.SMClockMHzMin != 900 || !tel.ThrottledAny {
			t.Errorf("sample %d: power_watts_sum %v (power_watts %v), sm_clock_mhz_min %v, throttled_any %v; want 650 (none), 900, true",
				i, tel.PowerWattsSum, tel.PowerWatts, tel.SMClockMHzMin, tel.ThrottledAny)
		}
		g0, g1 := tel.GPUs[0], tel.GPUs[1]
		if g0.Index != 0 || g0.UUID != uuids[0] || g0.PowerWatts != 300 || g0.SMClockMHz != 1000 || g0.Throttled {
			t.Errorf("sample %d, GPU 0: %+v; want %s at 300 W, 1000 MHz, not throttled", i, g0, uuids[0])
		}
		if g1.Index != 1 || g1.UUID != uuids[1] || g1.PowerWatts != 350 || g1.SMClockMHz != 900 || !g1.Throttled {
			t.Errorf("sample %d, GPU 1: %+v; want %s at 350 W, 900 MHz, throttled", i, g1, uuids[1])
		}
	}
}

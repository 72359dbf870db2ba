package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/stats"
	"stepbench/bench/telemetry"
)

// GPUTelemetry is one GPU's own telemetry after a region of a run over
// several GPUs.
type GPUTelemetry struct {
	Index     int    // the GPU's CUDA ordinal on this node
	UUID      string // as nvidia-smi -L prints it
	Telemetry Telemetry
}

// telemetryFields is Telemetry without its methods: one GPU's JSON form.
type telemetryFields Telemetry

// combinedTelemetryJSON is a sample's telemetry over several GPUs in JSON,
// each combined figure named by how it combines (telemetry.Combine).
type combinedTelemetryJSON struct {
	PowerWattsSum               float64        `json:"power_watts_sum,omitempty"`
	SMClockMHzMin               float64        `json:"sm_clock_mhz_min,omitempty"`
	MemoryClockMHzMin           float64        `json:"memory_clock_mhz_min,omitempty"`
	TemperatureCMax             float64        `json:"temperature_c_max,omitempty"`
	ThrottleReasonsOr           uint64         `json:"throttle_reasons_or,omitempty"`
	PowerSource                 string         `json:"power_source,omitempty"`
	MemoryTemperatureCMax       float64        `json:"memory_temperature_c_max,omitempty"`
	ClockEventReasonNamesOr     []string       `json:"clock_event_reason_names_or,omitempty"`
	ThrottledAny                bool           `json:"throttled_any,omitempty"`
	EnergyCounterMillijoulesSum uint64         `json:"energy_counter_millijoules_sum,omitempty"`
	UnixNanos                   int64          `json:"unix_nanos,omitempty"`
	GPUs                        []GPUTelemetry `json:"gpus"`
}

// MarshalJSON writes one GPU's telemetry with its plain names, and that of
// several GPUs with the combined figures' names (power_watts_sum,
// sm_clock_mhz_min, temperature_c_max, throttle_reasons_or, throttled_any,
// ...) and each GPU's own under "gpus".
func (t Telemetry) MarshalJSON() ([]byte, error) {
	if len(t.GPUs) == 0 {
		return json.Marshal(telemetryFields(t))
	}
	return json.Marshal(combinedTelemetryJSON{PowerWattsSum: t.PowerWatts, SMClockMHzMin: t.SMClockMHz, MemoryClockMHzMin: t.MemoryClockMHz,
		TemperatureCMax: t.TemperatureC, ThrottleReasonsOr: t.ThrottleReasons, PowerSource: t.PowerSource,
		MemoryTemperatureCMax: t.MemoryTemperatureC, ClockEventReasonNamesOr: t.ClockEventReasonNames, ThrottledAny: t.Throttled,
		EnergyCounterMillijoulesSum: t.EnergyCounterMillijoules, UnixNanos: t.UnixNanos, GPUs: t.GPUs})
}

// UnmarshalJSON reads either form MarshalJSON writes.
func (t *Telemetry) UnmarshalJSON(data []byte) error {
	var c combinedTelemetryJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("sample telemetry: %w", err)
	}
	if len(c.GPUs) == 0 {
		var one telemetryFields
		if err := json.Unmarshal(data, &one); err != nil {
			return fmt.Errorf("sample telemetry: %w", err)
		}
		*t = Telemetry(one)
		return nil
	}
	*t = Telemetry{PowerWatts: c.PowerWattsSum, SMClockMHz: c.SMClockMHzMin, MemoryClockMHz: c.MemoryClockMHzMin,
		TemperatureC: c.TemperatureCMax, ThrottleReasons: c.ThrottleReasonsOr, PowerSource: c.PowerSource,
		MemoryTemperatureC: c.MemoryTemperatureCMax, ClockEventReasonNames: c.ClockEventReasonNamesOr, Throttled: c.ThrottledAny,
		EnergyCounterMillijoules: c.EnergyCounterMillijoulesSum, UnixNanos: c.UnixNanos, GPUs: c.GPUs}
	return nil
}

// gpuTelemetryJSON is one GPU's telemetry in JSON: index, UUID, then the
// one-GPU fields.
type gpuTelemetryJSON struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	telemetryFields
}

// MarshalJSON writes {"index", "uuid", the GPU's telemetry fields}.
func (g GPUTelemetry) MarshalJSON() ([]byte, error) {
	return json.Marshal(gpuTelemetryJSON{Index: g.Index, UUID: g.UUID, telemetryFields: telemetryFields(g.Telemetry)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *GPUTelemetry) UnmarshalJSON(data []byte) error {
	var j gpuTelemetryJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("GPU telemetry: %w", err)
	}
	*g = GPUTelemetry{Index: j.Index, UUID: j.UUID, Telemetry: Telemetry(j.telemetryFields)}
	return nil
}

// GPUSummary is one GPU's telemetry over a shape's samples in a run over
// several GPUs: the median of its power and the lowest SM clock it read
// after each phase's regions, and how many of its readings were throttled.
// Zero (left out) where the GPU gave no such value.
type GPUSummary struct {
	Index                   int     `json:"index"`
	UUID                    string  `json:"uuid,omitempty"`
	PrefillMedianPowerWatts float64 `json:"prefill_median_power_watts,omitempty"`
	DecodeMedianPowerWatts  float64 `json:"decode_median_power_watts,omitempty"`
	PrefillMinSMClockMHz    float64 `json:"prefill_min_sm_clock_mhz,omitempty"`
	DecodeMinSMClockMHz     float64 `json:"decode_min_sm_clock_mhz,omitempty"`
	ThrottledSamples        int     `json:"throttled_samples"`
}

// gpuPhaseValues gathers one GPU's readings of a shape, per phase.
type gpuPhaseValues struct {
	summary GPUSummary
	power   [2][]float64 // prefill, decode
	clocks  [2][]float64
}

// gpuSummaries summarises each GPU's readings of a shape's samples; nil
// when the readings are of one GPU.
func gpuSummaries(samples []SampleReport, readings []telemetry.Reading) []GPUSummary {
	var per []*gpuPhaseValues
	for i, r := range readings {
		phase := 0
		if samples[i].Phase == bench.PhaseDecode {
			phase = 1
		}
		for g, gr := range r.GPUs {
			for len(per) <= g {
				per = append(per, &gpuPhaseValues{})
			}
			v := per[g]
			v.summary.Index, v.summary.UUID = gr.Index, gr.UUID
			if gr.Reading.PowerSource != "" {
				v.power[phase] = append(v.power[phase], gr.Reading.PowerWatts)
			}
			if gr.Reading.SMClockMHz > 0 {
				v.clocks[phase] = append(v.clocks[phase], gr.Reading.SMClockMHz)
			}
			if gr.Reading.Throttled {
				v.summary.ThrottledSamples++
			}
		}
	}
	var out []GPUSummary
	for _, v := range per {
		s := v.summary
		s.PrefillMedianPowerWatts, s.DecodeMedianPowerWatts = medianOrZero(v.power[0]), medianOrZero(v.power[1])
		s.PrefillMinSMClockMHz, s.DecodeMinSMClockMHz = minOrZero(v.clocks[0]), minOrZero(v.clocks[1])
		out = append(out, s)
	}
	return out
}

func medianOrZero(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return stats.Median(xs)
}

func minOrZero(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return stats.Summarize(xs).Min
}

// HasGPUs reports whether any shape has per-GPU telemetry (a run over
// several GPUs).
func HasGPUs(shapes []ShapeReport) bool {
	for _, s := range shapes {
		if len(s.GPUs) > 0 {
			return true
		}
	}
	return false
}

// GPUTableTitle heads the per-GPU telemetry table of a run over several GPUs.
const GPUTableTitle = "telemetry per GPU (measured by NVML after each timed region: median power and lowest SM clock per phase, throttled readings)"

// WriteGPUTable writes, per shape and GPU of a run over several GPUs, the
// GPU's median power (W) and lowest SM clock (MHz) after the prefill and
// the decode regions, and its count of throttled readings: which GPU drew
// the power, and which one slowed the lockstep steps.
func WriteGPUTable(w io.Writer, shapes []ShapeReport) error {
	if _, err := fmt.Fprintln(w, GPUTableTitle); err != nil {
		return fmt.Errorf("write GPU table: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, []string{"batch", "input", "output", "gpu", "prefill_power_W", "decode_power_W",
		"prefill_sm_MHz_min", "decode_sm_MHz_min", "throttled"})
	for _, s := range shapes {
		for _, g := range s.GPUs {
			writeRow(tw, []string{strconv.Itoa(s.Batch), strconv.Itoa(s.InputLen), strconv.Itoa(s.OutputLen), strconv.Itoa(g.Index),
				optional(g.PrefillMedianPowerWatts, "%.0f", g.PrefillMedianPowerWatts > 0),
				optional(g.DecodeMedianPowerWatts, "%.0f", g.DecodeMedianPowerWatts > 0),
				optional(g.PrefillMinSMClockMHz, "%.0f", g.PrefillMinSMClockMHz > 0),
				optional(g.DecodeMinSMClockMHz, "%.0f", g.DecodeMinSMClockMHz > 0),
				strconv.Itoa(g.ThrottledSamples)})
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write GPU table: %w", err)
	}
	return nil
}

package bench

import (
	"encoding/json"
	"math"
	"slices"

	"stepbench/bench/stats"
)

// Metrics of a shape: one value per timed iteration each. Prefill is the
// iteration's prefill time; decode is the iteration's median decode step,
// so that decode steps at different KV lengths are never pooled as if they
// were exchangeable samples; every iteration covers the same positions, so
// these per-iteration values are.
const (
	MetricPrefillHost   = "prefill_host"
	MetricPrefillDevice = "prefill_device"
	MetricDecodeHost    = "decode_host"
	MetricDecodeDevice  = "decode_device"
)

// MetricSeries is one metric's per-iteration values (seconds).
type MetricSeries struct {
	Metric string
	Values []float64
}

// IterationSeries returns the shape's metrics in a fixed order, leaving
// out those nobody measured: decode without decode steps, device times of
// a backend without device timers (all zero).
func IterationSeries(iterations []IterationResult) []MetricSeries {
	series := []MetricSeries{{Metric: MetricPrefillHost}, {Metric: MetricPrefillDevice},
		{Metric: MetricDecodeHost}, {Metric: MetricDecodeDevice}}
	for _, it := range iterations {
		series[0].Values = append(series[0].Values, it.Prefill.HostSeconds)
		series[1].Values = append(series[1].Values, it.Prefill.DeviceSeconds)
		if len(it.Decode) == 0 {
			continue
		}
		host, device := make([]float64, len(it.Decode)), make([]float64, len(it.Decode))
		for i, d := range it.Decode {
			host[i], device[i] = d.HostSeconds, d.DeviceSeconds
		}
		series[2].Values = append(series[2].Values, stats.Median(host))
		series[3].Values = append(series[3].Values, stats.Median(device))
	}
	return slices.DeleteFunc(series, func(s MetricSeries) bool {
		return len(s.Values) == 0 || allZero(s.Values)
	})
}

func allZero(xs []float64) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// Noise is the achieved noise of each of a shape's medians (RelativeNoise
// of the per-iteration values; decode: of each iteration's median decode
// step). NaN marks a metric not measured, +Inf one with too few iterations
// for an interval; both are written to JSON as null.
type Noise struct {
	PrefillHost   float64 `json:"prefill_host"`
	PrefillDevice float64 `json:"prefill_device"`
	DecodeHost    float64 `json:"decode_host"`
	DecodeDevice  float64 `json:"decode_device"`
	TotalHost     float64 `json:"total_host"` // of the iteration totals
}

// ShapeNoise computes the noise of a shape's iterations.
func ShapeNoise(iterations []IterationResult) Noise {
	nan := math.NaN()
	n := Noise{PrefillHost: nan, PrefillDevice: nan, DecodeHost: nan, DecodeDevice: nan, TotalHost: nan}
	for _, s := range IterationSeries(iterations) {
		*n.field(s.Metric) = stats.RelativeNoise(s.Values)
	}
	if len(iterations) > 0 {
		totals := make([]float64, len(iterations))
		for i, it := range iterations {
			totals[i] = it.TotalHostSeconds
		}
		n.TotalHost = stats.RelativeNoise(totals)
	}
	return n
}

func (n *Noise) field(metric string) *float64 {
	switch metric {
	case MetricPrefillHost:
		return &n.PrefillHost
	case MetricPrefillDevice:
		return &n.PrefillDevice
	case MetricDecodeHost:
		return &n.DecodeHost
	}
	return &n.DecodeDevice
}

// maxNoise is the largest noise of the compared metrics (what the stopping
// rule holds to the target); +Inf when none is known.
func maxNoise(iterations []IterationResult) float64 {
	series := IterationSeries(iterations)
	if len(series) == 0 {
		return math.Inf(1)
	}
	worst := 0.0
	for _, s := range series {
		worst = math.Max(worst, stats.RelativeNoise(s.Values))
	}
	return worst
}

// MarshalJSON writes NaN and ±Inf (not measured; too few iterations) as null.
func (n Noise) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		PrefillHost   *float64 `json:"prefill_host"`
		PrefillDevice *float64 `json:"prefill_device"`
		DecodeHost    *float64 `json:"decode_host"`
		DecodeDevice  *float64 `json:"decode_device"`
		TotalHost     *float64 `json:"total_host"`
	}{stats.Finite(n.PrefillHost), stats.Finite(n.PrefillDevice), stats.Finite(n.DecodeHost), stats.Finite(n.DecodeDevice), stats.Finite(n.TotalHost)})
}

// UnmarshalJSON reads null as +Inf (unknown), the conservative reading.
func (n *Noise) UnmarshalJSON(data []byte) error {
	var m map[string]*float64
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	read := func(key string) float64 {
		if v := m[key]; v != nil {
			return *v
		}
		return math.Inf(1)
	}
	*n = Noise{PrefillHost: read("prefill_host"), PrefillDevice: read("prefill_device"),
		DecodeHost: read("decode_host"), DecodeDevice: read("decode_device"), TotalHost: read("total_host")}
	return nil
}

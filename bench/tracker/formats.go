package tracker

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"stepbench/bench/stats"
)

// Formats are the names --format takes for each writer.
var Formats = map[string]func(io.Writer, Run) error{
	"pytorch-benchmark":       WritePyTorchBenchmark,
	"github-action-benchmark": WriteGitHubActionBenchmark,
	"bencher":                 WriteBencher,
}

func writeJSON(w io.Writer, what string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// unitOf is the metric's unit in the PyTorch records: vLLM's latency is in
// seconds; the step metrics are in milliseconds, as stepbench prints them.
func unitOf(m Metric) (string, float64) {
	if m.Name == MetricIteration {
		return "s", 1
	}
	return "ms", 1e3
}

// pytorchRecord is one record of the PyTorch OSS benchmark database
// (its v3 table's benchmark, model, metric and runners tuples).
type pytorchRecord struct {
	Benchmark struct {
		Name      string         `json:"name"`
		Mode      string         `json:"mode"`
		DType     string         `json:"dtype"`
		ExtraInfo map[string]any `json:"extra_info"`
	} `json:"benchmark"`
	Model struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Backend string `json:"backend"`
	} `json:"model"`
	Metric struct {
		Name            string         `json:"name"`
		BenchmarkValues []float64      `json:"benchmark_values"`
		TargetValue     float64        `json:"target_value"`
		ExtraInfo       map[string]any `json:"extra_info"`
	} `json:"metric"`
	Runners []pytorchRunner `json:"runners"`
}

type pytorchRunner struct {
	Name            string            `json:"name"`
	Type            string            `json:"type"`
	CPUInfo         string            `json:"cpu_info"`
	CPUCount        int               `json:"cpu_count"`
	GPUInfo         string            `json:"gpu_info"`
	GPUCount        int               `json:"gpu_count"`
	AvailGPUMemInGB int               `json:"avail_gpu_mem_in_gb"`
	ExtraInfo       map[string]string `json:"extra_info"`
	AvailMemInGB    int               `json:"avail_mem_in_gb"`
	GPUMemInfo      string            `json:"gpu_mem_info"`
	MemInfo         string            `json:"mem_info"`
}

// WritePyTorchBenchmark writes the run as the records vLLM's benchmarks
// write for the PyTorch OSS benchmark database: one per shape and metric;
// metric.name is vLLM's "latency" for the iteration (seconds, as vLLM's
// bench latency) and prefill_latency_ms, decode_step_latency_ms for the
// steps; benchmark_values are the per-iteration values, the shape is in
// benchmark.extra_info.args as vLLM's argument names, and runners[0] and
// benchmark.extra_info.device say cuda, cpu or emulated.
func WritePyTorchBenchmark(w io.Writer, r Run) error {
	env, cfg := r.Report.Environment, r.Report.Config
	dtype := "bfloat16"
	if cfg.Model.Quantization != nil {
		dtype = "fp8"
	}
	tp := max(env.TPSize, 1)
	var records []pytorchRecord
	for _, m := range r.Metrics {
		var rec pytorchRecord
		rec.Benchmark.Name, rec.Benchmark.Mode, rec.Benchmark.DType = "stepbench", "inference", dtype
		rec.Benchmark.ExtraInfo = map[string]any{
			"device": r.Kind, "arch": env.ComputeCapability, "series": r.seriesName(m), "tool_version": r.Report.ToolVersion,
			"args": map[string]any{"model": r.Model, "batch_size": m.Shape.Batch, "input_len": m.Shape.InputLen,
				"output_len": m.Shape.OutputLen, "tensor_parallel_size": tp, "num_iters": len(m.Values)},
		}
		for k, v := range kvArgs(m.Shape, cfg.KV) {
			rec.Benchmark.ExtraInfo["args"].(map[string]any)[k] = v
		}
		if note := r.timesNote(); note != "" {
			rec.Benchmark.ExtraInfo["times"] = note
		}
		rec.Model.Name, rec.Model.Type, rec.Model.Backend = r.Model, "llama", "stepbench "+r.Kind
		unit, scale := unitOf(m)
		rec.Metric.Name = m.Name + "_latency_" + unit
		if m.Name == MetricIteration {
			rec.Metric.Name = "latency" // vLLM's bench latency: seconds per iteration
		}
		for _, v := range m.Values {
			rec.Metric.BenchmarkValues = append(rec.Metric.BenchmarkValues, scale*v)
		}
		s := stats.Summarize(m.Values)
		rec.Metric.ExtraInfo = map[string]any{"unit": unit, "time": m.Time, "median": scale * m.Median.MedianSeconds,
			"avg_latency": scale * s.Mean, "percentiles": map[string]float64{"10": scale * s.P10, "25": scale * s.P25,
				"50": scale * s.P50, "75": scale * s.P75, "90": scale * s.P90, "99": scale * s.P99}}
		if hasInterval(m) {
			rec.Metric.ExtraInfo["ci95_low"], rec.Metric.ExtraInfo["ci95_high"] = scale*m.Median.LowSeconds, scale*m.Median.HighSeconds
		}
		gpu := env.GPUName
		if r.Kind != "cuda" {
			gpu = r.Kind + " (" + orDash(env.Emulated) + ")"
		}
		// cpu_count and the memory fields: 0 and "" (not recorded in the report).
		rec.Runners = []pytorchRunner{{Name: r.Kind, Type: gpu, CPUInfo: env.Arch, GPUInfo: gpu,
			GPUCount: tp, AvailGPUMemInGB: int(env.GPUMemoryBytes >> 30), ExtraInfo: map[string]string{"hostname": env.Hostname}}}
		records = append(records, rec)
	}
	return writeJSON(w, "PyTorch benchmark records", records)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// gabResult is one entry of github-action-benchmark's custom input.
type gabResult struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	Range string  `json:"range,omitempty"`
	Extra string  `json:"extra,omitempty"`
}

// WriteGitHubActionBenchmark writes the run as github-action-benchmark's
// customSmallerIsBetter input: one entry per shape and metric, the median
// in ms, range the half-width of its 95% interval, extra the interval,
// the iterations and, off a GPU, that the times are a CPU's.
func WriteGitHubActionBenchmark(w io.Writer, r Run) error {
	var out []gabResult
	for _, m := range r.Metrics {
		e := gabResult{Name: r.seriesName(m), Unit: "ms", Value: 1e3 * m.Median.MedianSeconds}
		e.Extra = fmt.Sprintf("%d iterations; %s time", len(m.Values), m.Time)
		if m.Shape.Ragged() {
			e.Extra += "; " + m.Shape.String()
		}
		if hasInterval(m) {
			e.Range = "± " + strconv.FormatFloat(1e3*(m.Median.HighSeconds-m.Median.LowSeconds)/2, 'g', 4, 64)
			e.Extra += fmt.Sprintf("; median's 95%% CI [%.4g, %.4g] ms", 1e3*m.Median.LowSeconds, 1e3*m.Median.HighSeconds)
		}
		if note := r.timesNote(); note != "" {
			e.Extra += "; " + note
		}
		out = append(out, e)
	}
	return writeJSON(w, "github-action-benchmark results", out)
}

// bmfMetric is a Bencher Metric Format metric.
type bmfMetric struct {
	Value      float64  `json:"value"`
	LowerValue *float64 `json:"lower_value,omitempty"`
	UpperValue *float64 `json:"upper_value,omitempty"`
}

// WriteBencher writes the run as Bencher Metric Format: one benchmark per
// shape and metric, measure latency (Bencher's built-in, nanoseconds):
// the median with its 95% interval as lower_value and upper_value.
func WriteBencher(w io.Writer, r Run) error {
	out := map[string]map[string]bmfMetric{}
	for _, m := range r.Metrics {
		metric := bmfMetric{Value: 1e9 * m.Median.MedianSeconds}
		if hasInterval(m) {
			lo, hi := 1e9*m.Median.LowSeconds, 1e9*m.Median.HighSeconds
			metric.LowerValue, metric.UpperValue = &lo, &hi
		}
		out[r.seriesName(m)] = map[string]bmfMetric{"latency": metric}
	}
	return writeJSON(w, "Bencher Metric Format", out)
}

package tracker

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/perf/benchmath"

	"stepbench/bench"
	"stepbench/bench/compat"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// Metric is one measured quantity of one shape: one value per timed
// iteration (seconds), their median and its 95% interval.
type Metric struct {
	Shape bench.Shape
	// Name is the metric's: MetricPrefill, MetricDecodeStep or
	// MetricIteration.
	Name string
	// Time says which clock: "device" (events on the stream) or "host".
	Time   string
	Values []float64
	Median stats.MedianCI
}

// The metrics of a shape.
const (
	MetricPrefill    = "prefill"     // the prefill's device time
	MetricDecodeStep = "decode_step" // the iteration's median decode step, device time
	MetricIteration  = "iteration"   // prefill + every decode step, host time (vLLM's latency)
)

// Run is what every format needs of a run: its model, the device the times
// are of, and the metrics of its complete shapes.
type Run struct {
	Model string
	// Device is the series' device: the GPU's name, "cpu" or "emulated"
	// (compat.DeviceCPU, compat.DeviceEmulated).
	Device string
	// Kind is "cuda", "cpu" or "emulated": the runner's name.
	Kind    string
	Report  report.Report
	Metrics []Metric
}

// NewRun takes the metrics of every complete shape of r (a shape that
// stopped early is left out, as the one_batch and vLLM files leave it out).
func NewRun(r report.Report) (Run, error) {
	env := r.Environment
	run := Run{Model: r.Config.Model.Name, Report: r, Kind: "cuda", Device: env.GPUName}
	if d := compat.Device(env.Backend, env.Emulated); d != "" {
		run.Kind, run.Device = d, d
	}
	if run.Device == "" {
		run.Device = "gpu"
	}
	for _, s := range r.Shapes {
		if !s.Complete {
			continue
		}
		run.Metrics = append(run.Metrics, shapeMetrics(s)...)
	}
	if len(run.Metrics) == 0 {
		return run, fmt.Errorf("no complete shape to report")
	}
	return run, nil
}

func shapeMetrics(s report.ShapeReport) []Metric {
	series := bench.IterationSeries(s.IterationResults())
	find := func(name string) []float64 {
		i := slices.IndexFunc(series, func(m bench.MetricSeries) bool { return m.Metric == name })
		if i < 0 {
			return nil
		}
		return series[i].Values
	}
	var out []Metric
	add := func(name, clock string, values []float64) {
		if len(values) > 0 {
			thresholds := benchmath.DefaultThresholds
			sample := benchmath.NewSample(slices.Clone(values), &thresholds)
			out = append(out, Metric{Shape: s.Shape, Name: name, Time: clock, Values: values, Median: stats.NewMedianCI(sample, 0.95)})
		}
	}
	prefill, prefillClock := find(bench.MetricPrefillDevice), "device"
	if prefill == nil { // a backend without device timers
		prefill, prefillClock = find(bench.MetricPrefillHost), "host"
	}
	add(MetricPrefill, prefillClock, prefill)
	decode, decodeClock := find(bench.MetricDecodeDevice), "device"
	if decode == nil {
		decode, decodeClock = find(bench.MetricDecodeHost), "host"
	}
	add(MetricDecodeStep, decodeClock, decode)
	add(MetricIteration, "host", s.IterationTotalHostSeconds)
	return out
}

// seriesName names a metric's series: the tool, the model, the device, the
// shape and the metric, "/"-separated (no "/" inside a part). A ragged
// batch's shape part adds its KV tokens, its lengths (up to 8) and a
// synthetic fill, and a paged run's its page size and order, so that they
// never share a series with a uniform batch's or the contiguous layout's
// (b2_i1024_o16_kv2048_lens512,1536_paged16).
func (r Run) seriesName(m Metric) string {
	part := func(s string) string { return strings.NewReplacer("/", "_", " ", "_").Replace(s) }
	return strings.Join([]string{"stepbench", part(r.Model), part(r.Device),
		part(fmt.Sprintf("b%d_i%d_o%d", m.Shape.Batch, m.Shape.InputLen, m.Shape.OutputLen) + kvSuffix(m.Shape, r.Report.Config.KV)),
		m.Name + "_" + m.Time}, "/")
}

// kvSuffix is what a series name and a record add for a ragged batch or a
// paged layout ("" for a uniform batch on the contiguous layout, whose
// names stay as they were).
func kvSuffix(sh bench.Shape, kv *report.KVCache) string {
	var s string
	if sh.Ragged() {
		s += fmt.Sprintf("_kv%d", sh.KVTokens())
		if lens := sh.ContextLens(); sh.Lens != "" && len(lens) <= 8 {
			s += "_lens" + sh.Lens
		}
		if sh.KVFill == bench.KVFillSynthetic {
			s += "_synthetic"
		}
	}
	if kv != nil && kv.Layout == "paged" {
		s += fmt.Sprintf("_paged%d", kv.PageSize)
		if kv.PageOrder == "shuffled" {
			s += "_shuffled"
		}
	}
	return s
}

// kvArgs are the ragged batch's and the paged layout's vLLM-style
// arguments of a PyTorch record (none for a uniform batch on the
// contiguous layout): block_size (vLLM's --block-size), kv_layout,
// page_order, context_lens, kv_tokens, kv_fill.
func kvArgs(sh bench.Shape, kv *report.KVCache) map[string]any {
	args := map[string]any{}
	if sh.Ragged() {
		args["context_lens"], args["kv_tokens"] = sh.ContextLens(), sh.KVTokens()
		if sh.KVFill != "" {
			args["kv_fill"] = sh.KVFill
		}
	}
	if kv != nil && kv.Layout == "paged" {
		args["kv_layout"], args["block_size"], args["page_order"] = kv.Layout, kv.PageSize, kv.PageOrder
	}
	return args
}

// hasInterval says whether the median has its 95% interval (6 values or more).
func hasInterval(m Metric) bool {
	return !math.IsNaN(m.Median.LowSeconds) && !math.IsNaN(m.Median.HighSeconds)
}

// emulatedNote is what an emulated or cpu run's records say about their times.
func (r Run) timesNote() string {
	switch r.Kind {
	case compat.DeviceEmulated:
		return "the emulated CUDA device: CPU times, not a GPU's"
	case compat.DeviceCPU:
		return "the cpu backend: CPU times, not a GPU's"
	}
	return ""
}

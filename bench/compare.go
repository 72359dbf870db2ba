package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"

	"golang.org/x/perf/benchmath"
)

// Verdicts of a comparison row.
const (
	VerdictFaster = "FASTER"
	VerdictSlower = "SLOWER"
	VerdictSame   = "SAME"
)

// Metrics compared per shape: each phase's host (what one_batch reports)
// and device (event) time.
const (
	MetricPrefillHost   = "prefill_host"
	MetricPrefillDevice = "prefill_device"
	MetricDecodeHost    = "decode_host"
	MetricDecodeDevice  = "decode_device"
)

// CompareOptions tunes the verdict.
type CompareOptions struct {
	// Alpha is the Mann-Whitney U significance level (default 0.05).
	Alpha float64
	// Confidence of the median and ratio intervals (default 0.95).
	Confidence float64
	// BootstrapResamples for the ratio interval (default 2000).
	BootstrapResamples int
}

func (o CompareOptions) withDefaults() CompareOptions {
	if o.Alpha <= 0 || o.Alpha >= 1 {
		o.Alpha = 0.05
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = 0.95
	}
	if o.BootstrapResamples <= 0 {
		o.BootstrapResamples = 2000
	}
	return o
}

// MedianCI is a sample's median with its order-statistic confidence
// interval (benchmath's AssumeNothing summary), in seconds.
type MedianCI struct {
	N             int     `json:"n"`
	MedianSeconds float64 `json:"median_seconds"`
	LowSeconds    float64 `json:"ci_low_seconds"`
	HighSeconds   float64 `json:"ci_high_seconds"`
	Confidence    float64 `json:"confidence"` // the interval's actual level (>= the requested)
	// RelativeNoise is the run's own spread: the interquartile range over
	// 1.349 (a robust standard deviation) relative to the median.
	RelativeNoise float64 `json:"relative_noise"`
}

// CompareRow is one metric of one shape in both runs. Ratio is NEW/OLD of
// the medians: below 1 is faster. Its JSON form is MarshalJSON's.
type CompareRow struct {
	BatchSize int      `json:"batch_size"`
	InputLen  int      `json:"input_len"`
	OutputLen int      `json:"output_len"`
	Metric    string   `json:"metric"`
	Old       MedianCI `json:"old"`
	New       MedianCI `json:"new"`
	Ratio     float64  `json:"ratio"`
	RatioLow  float64  `json:"ratio_ci_low"` // bootstrap interval of the median ratio
	RatioHigh float64  `json:"ratio_ci_high"`
	PValue    float64  `json:"p_value"` // Mann-Whitney U (benchmath AssumeNothing)
	Verdict   string   `json:"verdict"`
	Notes     []string `json:"notes,omitempty"` // benchmath's warnings, e.g. too few samples
}

// CompareResult is the whole comparison of two reports.
type CompareResult struct {
	Alpha      float64      `json:"alpha"`
	Confidence float64      `json:"confidence"`
	Rows       []CompareRow `json:"rows"`
	// Warnings say why the two runs may not be comparable (different GPU,
	// driver, clocks, model or flags; shapes in only one run).
	Warnings []string `json:"warnings,omitempty"`
}

// Compare compares every shape present in both reports, metric by metric.
// A row is FASTER or SLOWER only when the difference is significant (p <
// Alpha), the ratio's interval excludes 1, and |ratio−1| exceeds both runs'
// own relative noise; otherwise SAME.
func Compare(oldReport, newReport Report, opt CompareOptions) CompareResult {
	opt = opt.withDefaults()
	res := CompareResult{Alpha: opt.Alpha, Confidence: opt.Confidence}
	res.Warnings = environmentWarnings(oldReport, newReport)
	type shapeKey struct{ batch, input, output int }
	key := func(s ShapeReport) shapeKey { return shapeKey{s.BatchSize, s.InputLen, s.OutputLen} }
	newShapes := map[shapeKey]ShapeReport{}
	for _, s := range newReport.Shapes {
		newShapes[key(s)] = s
	}
	matched := map[shapeKey]bool{}
	for _, o := range oldReport.Shapes {
		n, ok := newShapes[key(o)]
		if !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape batch_size=%d input_len=%d output_len=%d is only in OLD",
				o.BatchSize, o.InputLen, o.OutputLen))
			continue
		}
		matched[key(o)] = true
		res.Rows = append(res.Rows, compareShape(o, n, opt)...)
	}
	for _, n := range newReport.Shapes {
		if !matched[key(n)] {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape batch_size=%d input_len=%d output_len=%d is only in NEW",
				n.BatchSize, n.InputLen, n.OutputLen))
		}
	}
	return res
}

// CompareShapes compares two in-memory runs of the same environment (an
// interleaved A/B run): OLD is the baseline.
func CompareShapes(oldShapes, newShapes []ShapeResult, opt CompareOptions) CompareResult {
	toReport := func(shapes []ShapeResult) Report {
		r := Report{Schema: ReportSchema}
		for _, s := range shapes {
			r.Shapes = append(r.Shapes, NewShapeReport(s))
		}
		return r
	}
	return Compare(toReport(oldShapes), toReport(newShapes), opt)
}

// metricValues extracts one metric's samples (seconds) from a shape.
func metricValues(s ShapeReport, metric string) []float64 {
	var xs []float64
	for _, sample := range s.Samples {
		switch {
		case metric == MetricPrefillHost && sample.Phase == PhasePrefill:
			xs = append(xs, sample.HostSeconds)
		case metric == MetricPrefillDevice && sample.Phase == PhasePrefill:
			xs = append(xs, sample.DeviceSeconds)
		case metric == MetricDecodeHost && sample.Phase == PhaseDecode:
			xs = append(xs, sample.HostSeconds)
		case metric == MetricDecodeDevice && sample.Phase == PhaseDecode:
			xs = append(xs, sample.DeviceSeconds)
		}
	}
	return xs
}

func compareShape(o, n ShapeReport, opt CompareOptions) []CompareRow {
	var rows []CompareRow
	for _, metric := range []string{MetricPrefillHost, MetricPrefillDevice, MetricDecodeHost, MetricDecodeDevice} {
		oldValues, newValues := metricValues(o, metric), metricValues(n, metric)
		// A metric nobody measured (no decode steps; a backend without
		// device timers reporting zeros) has no row.
		if len(oldValues) == 0 || len(newValues) == 0 || allZero(oldValues) && allZero(newValues) {
			continue
		}
		row := CompareRow{BatchSize: o.BatchSize, InputLen: o.InputLen, OutputLen: o.OutputLen, Metric: metric}
		row.fill(oldValues, newValues, opt)
		rows = append(rows, row)
	}
	return rows
}

func allZero(xs []float64) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// fill computes the statistics and the verdict of a row.
func (r *CompareRow) fill(oldValues, newValues []float64, opt CompareOptions) {
	thresholds := benchmath.DefaultThresholds
	thresholds.CompareAlpha = opt.Alpha
	oldSample := benchmath.NewSample(oldValues, &thresholds)
	newSample := benchmath.NewSample(newValues, &thresholds)
	var notes []string
	r.Old, notes = medianCI(oldSample, opt.Confidence, "old", notes)
	r.New, notes = medianCI(newSample, opt.Confidence, "new", notes)
	cmp := benchmath.AssumeNothing.Compare(oldSample, newSample)
	for _, w := range cmp.Warnings {
		notes = append(notes, w.Error())
	}
	r.PValue = cmp.P
	r.Ratio = math.NaN()
	if r.Old.MedianSeconds > 0 {
		r.Ratio = r.New.MedianSeconds / r.Old.MedianSeconds
	}
	r.RatioLow, r.RatioHigh = bootstrapRatioInterval(oldSample.Values, newSample.Values, opt.Confidence, opt.BootstrapResamples)
	r.Notes = slices.Compact(notes)
	r.Verdict = VerdictSame
	noise := max(r.Old.RelativeNoise, r.New.RelativeNoise)
	significant := r.PValue < opt.Alpha && !math.IsNaN(r.Ratio)
	excludesOne := r.RatioLow > 1 || r.RatioHigh < 1
	if significant && excludesOne && math.Abs(r.Ratio-1) > noise {
		if r.Ratio < 1 {
			r.Verdict = VerdictFaster
		} else {
			r.Verdict = VerdictSlower
		}
	}
}

func medianCI(s *benchmath.Sample, confidence float64, label string, notes []string) (MedianCI, []string) {
	sum := benchmath.AssumeNothing.Summary(s, confidence)
	for _, w := range append(slices.Clone(s.Warnings), sum.Warnings...) {
		notes = append(notes, label+": "+w.Error())
	}
	m := MedianCI{N: len(s.Values), MedianSeconds: sum.Center, LowSeconds: sum.Lo, HighSeconds: sum.Hi,
		Confidence: sum.Confidence}
	if sum.Center > 0 {
		iqr := percentileSorted(s.Values, 75) - percentileSorted(s.Values, 25)
		m.RelativeNoise = iqr / 1.349 / sum.Center
	}
	return m, notes
}

// bootstrapRatioInterval is the percentile bootstrap interval of
// median(new)/median(old): each resample draws both samples with
// replacement. The generator is seeded by a constant so that a comparison
// is reproducible. Both inputs are sorted and non-empty.
func bootstrapRatioInterval(oldSorted, newSorted []float64, confidence float64, resamples int) (low, high float64) {
	if len(oldSorted) == 0 || len(newSorted) == 0 {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(0x636f6d70, 0x61726521)) // "compare!"
	oldBuf := make([]float64, len(oldSorted))
	newBuf := make([]float64, len(newSorted))
	ratios := make([]float64, 0, resamples)
	for i := 0; i < resamples; i++ {
		oldMedian := resampleMedian(rng, oldSorted, oldBuf)
		newMedian := resampleMedian(rng, newSorted, newBuf)
		if oldMedian > 0 {
			ratios = append(ratios, newMedian/oldMedian)
		}
	}
	if len(ratios) == 0 {
		return math.NaN(), math.NaN()
	}
	sort.Float64s(ratios)
	tail := 100 * (1 - confidence) / 2
	return percentileSorted(ratios, tail), percentileSorted(ratios, 100-tail)
}

func resampleMedian(rng *rand.Rand, xs, buf []float64) float64 {
	for i := range buf {
		buf[i] = xs[rng.IntN(len(xs))]
	}
	sort.Float64s(buf)
	return percentileSorted(buf, 50)
}

// environmentWarnings lists the differences that make two runs hard to
// compare: GPU, driver and library versions, clocks, model and flags.
func environmentWarnings(oldReport, newReport Report) []string {
	var warnings []string
	o, n := oldReport.Environment, newReport.Environment
	for _, field := range []struct {
		name     string
		old, new string
	}{
		{"backend", o.Backend, n.Backend},
		{"GPU", o.GPUName, n.GPUName},
		{"GPU UUID", o.GPUUUID, n.GPUUUID},
		{"driver", o.DriverVersion, n.DriverVersion},
		{"CUDA", o.CUDAVersion, n.CUDAVersion},
		{"NVRTC", o.NVRTCVersion, n.NVRTCVersion},
		{"cuBLAS", o.CUBLASVersion, n.CUBLASVersion},
		{"SM clock MHz", formatNumber(o.SMClockMHz), formatNumber(n.SMClockMHz)},
		{"max SM clock MHz", formatNumber(o.MaxSMClockMHz), formatNumber(n.MaxSMClockMHz)},
		{"memory clock MHz", formatNumber(o.MemoryClockMHz), formatNumber(n.MemoryClockMHz)},
		{"power limit W", formatNumber(o.PowerLimitWatts), formatNumber(n.PowerLimitWatts)},
	} {
		if field.old != field.new {
			warnings = append(warnings, fmt.Sprintf("%s differs: OLD %q, NEW %q", field.name, field.old, field.new))
		}
	}
	oc, nc := oldReport.Config, newReport.Config
	if !reflect.DeepEqual(oc.Model, nc.Model) {
		warnings = append(warnings, fmt.Sprintf("model differs: OLD %q, NEW %q (or their configurations)", oc.Model.Name, nc.Model.Name))
	}
	if oc.LoadFormat != nc.LoadFormat {
		warnings = append(warnings, fmt.Sprintf("load format differs: OLD %q, NEW %q", oc.LoadFormat, nc.LoadFormat))
	}
	if diff := flagDifferences(oc.Flags, nc.Flags); len(diff) > 0 {
		warnings = append(warnings, "flags differ: "+strings.Join(diff, ", "))
	}
	return warnings
}

// outputOnlyFlags name files or labels; they do not change what is measured.
var outputOnlyFlags = []string{"json-out", "result-filename", "output-json", "run-name", "format", "logits-out"}

func flagDifferences(oldFlags, newFlags map[string]string) []string {
	names := map[string]bool{}
	for k := range oldFlags {
		names[k] = true
	}
	for k := range newFlags {
		names[k] = true
	}
	var diff []string
	for name := range names {
		if slices.Contains(outputOnlyFlags, name) {
			continue
		}
		o, inOld := oldFlags[name]
		n, inNew := newFlags[name]
		if o != n || inOld != inNew {
			diff = append(diff, fmt.Sprintf("--%s OLD %q NEW %q", name, o, n))
		}
	}
	sort.Strings(diff)
	return diff
}

func formatNumber(x float64) string {
	if x == 0 {
		return ""
	}
	return fmt.Sprintf("%g", x)
}

// WriteCompareMarkdown writes the comparison as a Markdown table (times in
// ms), with the warnings first.
func WriteCompareMarkdown(w io.Writer, res CompareResult) error {
	var b strings.Builder
	for _, warning := range res.Warnings {
		fmt.Fprintf(&b, "> warning: %s\n", warning)
	}
	if len(res.Warnings) > 0 {
		b.WriteString("\n")
	}
	conf := 100 * res.Confidence
	fmt.Fprintf(&b, "| batch | input | output | metric | old median ms [%.0f%% CI] | new median ms [%.0f%% CI] | new/old [%.0f%% CI] | p | noise | verdict |\n",
		conf, conf, conf)
	b.WriteString("|---:|---:|---:|:---|---:|---:|---:|---:|---:|:---|\n")
	for _, r := range res.Rows {
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %s | %s | %s | %.3g | %.2f%% | %s |\n",
			r.BatchSize, r.InputLen, r.OutputLen, r.Metric,
			formatMedianMilliseconds(r.Old), formatMedianMilliseconds(r.New),
			fmt.Sprintf("%.4f [%.4f, %.4f]", r.Ratio, r.RatioLow, r.RatioHigh),
			r.PValue, 100*max(r.Old.RelativeNoise, r.New.RelativeNoise), r.Verdict)
	}
	var notes []string
	for _, r := range res.Rows {
		for _, note := range r.Notes {
			notes = append(notes, fmt.Sprintf("batch %d input %d output %d %s: %s", r.BatchSize, r.InputLen, r.OutputLen, r.Metric, note))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, note := range notes {
			fmt.Fprintf(&b, "- %s\n", note)
		}
	}
	fmt.Fprintf(&b, "\nverdict: %s or %s only when p < %g, the ratio's interval excludes 1 and |ratio-1| exceeds both runs' noise (robust relative spread); else %s.\n",
		VerdictFaster, VerdictSlower, res.Alpha, VerdictSame)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

func formatMedianMilliseconds(m MedianCI) string {
	return fmt.Sprintf("%.4f [%.4f, %.4f]", 1e3*m.MedianSeconds, 1e3*m.LowSeconds, 1e3*m.HighSeconds)
}

// WriteCompareCSV writes one CSV record per row (times in seconds); the
// warnings are not part of the CSV.
func WriteCompareCSV(w io.Writer, res CompareResult) error {
	cw := csv.NewWriter(w)
	header := []string{"batch_size", "input_len", "output_len", "metric",
		"old_n", "old_median_seconds", "old_ci_low_seconds", "old_ci_high_seconds", "old_relative_noise",
		"new_n", "new_median_seconds", "new_ci_low_seconds", "new_ci_high_seconds", "new_relative_noise",
		"ratio", "ratio_ci_low", "ratio_ci_high", "p_value", "verdict"}
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("write comparison csv: %w", err)
	}
	g := func(x float64) string { return fmt.Sprintf("%g", x) }
	for _, r := range res.Rows {
		record := []string{fmt.Sprint(r.BatchSize), fmt.Sprint(r.InputLen), fmt.Sprint(r.OutputLen), r.Metric,
			fmt.Sprint(r.Old.N), g(r.Old.MedianSeconds), g(r.Old.LowSeconds), g(r.Old.HighSeconds), g(r.Old.RelativeNoise),
			fmt.Sprint(r.New.N), g(r.New.MedianSeconds), g(r.New.LowSeconds), g(r.New.HighSeconds), g(r.New.RelativeNoise),
			g(r.Ratio), g(r.RatioLow), g(r.RatioHigh), g(r.PValue), r.Verdict}
		if err := cw.Write(record); err != nil {
			return fmt.Errorf("write comparison csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write comparison csv: %w", err)
	}
	return nil
}

// WriteCompareJSON writes the comparison as indented JSON; NaN and ±Inf
// (an interval with too few samples, a ratio over a zero median) are null.
func WriteCompareJSON(w io.Writer, res CompareResult) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode comparison: %w", err)
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

// finite is x, or nil for NaN and ±Inf, which encoding/json refuses.
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// MarshalJSON writes non-finite bounds as null.
func (m MedianCI) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		N             int      `json:"n"`
		MedianSeconds *float64 `json:"median_seconds"`
		LowSeconds    *float64 `json:"ci_low_seconds"`
		HighSeconds   *float64 `json:"ci_high_seconds"`
		Confidence    float64  `json:"confidence"`
		RelativeNoise *float64 `json:"relative_noise"`
	}{m.N, finite(m.MedianSeconds), finite(m.LowSeconds), finite(m.HighSeconds), m.Confidence, finite(m.RelativeNoise)})
}

// MarshalJSON writes a non-finite ratio or p-value as null.
func (r CompareRow) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		BatchSize int      `json:"batch_size"`
		InputLen  int      `json:"input_len"`
		OutputLen int      `json:"output_len"`
		Metric    string   `json:"metric"`
		Old       MedianCI `json:"old"`
		New       MedianCI `json:"new"`
		Ratio     *float64 `json:"ratio"`
		RatioLow  *float64 `json:"ratio_ci_low"`
		RatioHigh *float64 `json:"ratio_ci_high"`
		PValue    *float64 `json:"p_value"`
		Verdict   string   `json:"verdict"`
		Notes     []string `json:"notes,omitempty"`
	}{r.BatchSize, r.InputLen, r.OutputLen, r.Metric, r.Old, r.New,
		finite(r.Ratio), finite(r.RatioLow), finite(r.RatioHigh), finite(r.PValue), r.Verdict, r.Notes})
}

package compare

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"golang.org/x/perf/benchmath"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// Options tunes the verdict.
type Options struct {
	// Alpha is the Mann-Whitney U significance level (default 0.05).
	Alpha float64
	// Confidence of the median and ratio intervals (default 0.95).
	Confidence float64
	// Threshold (a fraction: 0.02 is 2%), when > 0, is the least change
	// FASTER or SLOWER may claim and the band of SAME (default ±1%). Between
	// separate runs (Reports) it is the run-to-run floor (RunToRunFloor)
	// unless ThresholdSet says the user gave one.
	Threshold    float64
	ThresholdSet bool
}

// Validate refuses options no verdict can be made with: alpha outside
// (0, 0.5], a confidence outside (0.5, 1), a threshold outside [0, 1),
// NaN anywhere. Zero alpha and confidence mean their defaults.
func (o Options) Validate() error {
	switch {
	case o.Alpha != 0 && !(o.Alpha > 0 && o.Alpha <= 0.5):
		return fmt.Errorf("alpha %g is not in (0, 0.5]", o.Alpha)
	case o.Confidence != 0 && !(o.Confidence > 0.5 && o.Confidence < 1):
		return fmt.Errorf("confidence %g is not in (0.5, 1)", o.Confidence)
	case !(o.Threshold >= 0 && o.Threshold < 1):
		return fmt.Errorf("threshold %g is not in [0, 1)", o.Threshold)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Alpha == 0 {
		o.Alpha = 0.05
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	return o
}

// Row is one metric of one shape in both runs. Ratio is NEW/OLD
// (below 1 is faster); see RatioEstimate. Its JSON form is MarshalJSON's.
type Row struct {
	bench.Shape
	Metric   string // bench.MetricPrefillHost, ...: one value per iteration
	Old, New stats.MedianCI
	// Ratio is the Hodges-Lehmann ratio: the median of new/old over all
	// pairs; [RatioLow, RatioHigh] its Moses interval at RatioConfidence.
	Ratio, RatioLow, RatioHigh, RatioConfidence float64
	PValue                                      float64 // Mann-Whitney U (benchmath AssumeNothing)
	Verdict                                     string
	// SamplesNeeded, for an INCONCLUSIVE row, estimates the iterations per
	// run a verdict would need (0: no estimate).
	SamplesNeeded int
	Notes         []string // why an interval or a verdict is missing
	// Threshold is the row's run-to-run floor or --threshold (0: the
	// Result's).
	Threshold float64
	// Load is what other processes' load alone could have slowed either
	// run of the shape by (loadBound: 1.5 is up to 2.5×); FASTER and
	// SLOWER must lie beyond it as well as the threshold.
	Load float64
	// HostBusy: other processes kept the host too busy for a verdict
	// within the load's reach (busyShare above QuietOtherCPU); the row's
	// notes say so and what to do instead.
	HostBusy bool
	// Op and OpShape name an op-level row (stepbench kernel: Shape is then
	// zero): the op and its shape, "batch=1/seq=1/pos=1024".
	Op, OpShape string
}

// Result is the whole comparison of two reports.
type Result struct {
	Alpha, Confidence, Threshold float64
	// Paired is true for an A/B run: the ratio is the median of the per
	// iteration pairs' ratios (see Paired), not of all pairs.
	Paired bool
	// Emulated is true when either run was made on the emulated device:
	// its times are the CPU's, not a GPU's.
	Emulated bool
	// Kernels is true for op-level rows (stepbench kernel reports or its
	// interleaved A/B): each value is one cold launch, not an iteration.
	Kernels bool
	// Header lines come before everything else: what was emulated or
	// unverified, the rule between separate runs, what ab checked.
	Header []string
	Rows   []Row
	// Unjudged are the metrics of shapes in both runs that cannot be
	// compared, each with the reason.
	Unjudged []Unjudged
	// Warnings say why the two runs may not be comparable (different GPU,
	// driver, clocks, model or flags; shapes in only one run).
	Warnings []string
}

// Unjudged is one metric of one shape that no verdict was given for.
type Unjudged struct {
	bench.Shape
	Metric string `json:"metric"`
	Reason string `json:"reason"`
}

// Regressions counts the SLOWER rows.
func (r Result) Regressions() int {
	n := 0
	for _, row := range r.Rows {
		if row.Verdict == stats.VerdictSlower {
			n++
		}
	}
	return n
}

// ErrNoCommonShape is Compare's error when no shape is in both runs.
var ErrNoCommonShape = errors.New("no shape is in both runs")

// ErrIncomparable is Reports' error for two reports no verdict can
// join: an emulated run against a GPU run, a shape listed twice, options
// out of range. The CLI takes it as bad input (exit 2).
var ErrIncomparable = errors.New("the reports cannot be compared")

// Reports compares every shape present in both reports, metric by metric,
// on per-iteration values (see the bench.Metric* constants): decode steps at
// different KV lengths are never pooled. stats.Decide is the verdict rule.
func Reports(oldReport, newReport report.Report, opt Options) (Result, error) {
	if err := opt.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrIncomparable, err)
	}
	opt = opt.withDefaults()
	if err := comparable(oldReport, newReport); err != nil {
		return Result{}, err
	}
	if len(oldReport.KernelResults) > 0 || len(newReport.KernelResults) > 0 {
		return kernelReports(oldReport, newReport, opt) // stepbench kernel's reports
	}
	floor, source := floorOf(oldReport.Environment, newReport.Environment, opt)
	opt.Threshold = floor
	res := Result{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: floor,
		Emulated: oldReport.Environment.Emulated != "" || newReport.Environment.Emulated != ""}
	if res.Emulated {
		res.Header = append(res.Header, report.EmulatedNote)
	}
	res.Header = append(res.Header, verificationHeader(oldReport, newReport)...)
	res.Header = append(res.Header, floorHeader(floor, source))
	res.Warnings = environmentWarnings(oldReport, newReport)
	newShapes := map[bench.Shape]report.ShapeReport{}
	for _, s := range newReport.Shapes {
		newShapes[s.Shape] = s
	}
	matched := map[bench.Shape]bool{}
	for _, o := range oldReport.Shapes {
		n, ok := newShapes[o.Shape]
		if !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape %s is only in OLD", o.Shape))
			continue
		}
		matched[o.Shape] = true
		res.Warnings = append(res.Warnings, incompleteWarnings(o, n)...)
		res.Warnings = append(res.Warnings, telemetryWarnings(o, n)...)
		rule, note, warning := loadRule(oldReport.Environment, newReport.Environment, o, n, opt)
		if warning != "" {
			res.Warnings = append(res.Warnings, warning)
		}
		rows, unjudged := compareShape(o, n, opt, rule, note)
		res.Rows, res.Unjudged = append(res.Rows, rows...), append(res.Unjudged, unjudged...)
	}
	for _, n := range newReport.Shapes {
		if !matched[n.Shape] {
			res.Warnings = append(res.Warnings, fmt.Sprintf("shape %s is only in NEW", n.Shape))
		}
	}
	if len(matched) == 0 {
		return res, fmt.Errorf("%w (OLD has %d shapes, NEW %d)", ErrNoCommonShape, len(oldReport.Shapes), len(newReport.Shapes))
	}
	return res, nil
}

func incompleteWarnings(o, n report.ShapeReport) []string {
	var w []string
	for _, s := range []struct {
		run   string
		shape report.ShapeReport
	}{{"OLD", o}, {"NEW", n}} {
		if !s.shape.Complete {
			w = append(w, fmt.Sprintf("shape %s stopped early in %s (%s): its finished iterations are compared",
				s.shape.Shape, s.run, orDash(s.shape.StopReason)))
		}
	}
	return w
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// compareShape gives a row to every metric both runs measured with usable
// times, and lists the others with the reason.
func compareShape(o, n report.ShapeReport, opt Options, rule stats.Rule, busyNote string) ([]Row, []Unjudged) {
	oldValues, newValues := metricValues(o), metricValues(n)
	var rows []Row
	var unjudged []Unjudged
	for _, metric := range expectedMetrics(o.Shape) {
		reason := unusable("OLD", oldValues[metric])
		if reason == "" {
			reason = unusable("NEW", newValues[metric])
		}
		if reason != "" {
			unjudged = append(unjudged, Unjudged{Shape: o.Shape, Metric: metric, Reason: reason})
			continue
		}
		row := Row{Shape: o.Shape, Metric: metric, Threshold: opt.Threshold, Load: rule.Load, HostBusy: rule.Busy}
		row.fill(oldValues[metric], newValues[metric], opt, rule)
		if rule.Busy && row.Verdict == stats.VerdictInconclusive {
			row.Notes = append(row.Notes, busyNote)
		}
		rows = append(rows, row)
	}
	return rows, unjudged
}

// expectedMetrics are the metrics every run of the shape measures: prefill,
// and decode when the shape has decode steps, host and device time.
func expectedMetrics(sh bench.Shape) []string {
	metrics := []string{bench.MetricPrefillHost, bench.MetricPrefillDevice}
	if sh.OutputLen > 1 {
		metrics = append(metrics, bench.MetricDecodeHost, bench.MetricDecodeDevice)
	}
	return metrics
}

// metricValues are a shape's per-iteration values by metric, all of them
// (IterationSeries would drop an all-zero series).
func metricValues(s report.ShapeReport) map[string][]float64 {
	return iterationValues(s.IterationResults())
}

// iterationValues are the per-iteration values of iterations by metric.
func iterationValues(iterations []bench.IterationResult) map[string][]float64 {
	out := map[string][]float64{}
	for _, it := range iterations {
		out[bench.MetricPrefillHost] = append(out[bench.MetricPrefillHost], it.Prefill.HostSeconds)
		out[bench.MetricPrefillDevice] = append(out[bench.MetricPrefillDevice], it.Prefill.DeviceSeconds)
		if len(it.Decode) == 0 {
			continue
		}
		host, device := make([]float64, len(it.Decode)), make([]float64, len(it.Decode))
		for i, d := range it.Decode {
			host[i], device[i] = d.HostSeconds, d.DeviceSeconds
		}
		out[bench.MetricDecodeHost] = append(out[bench.MetricDecodeHost], stats.Median(host))
		out[bench.MetricDecodeDevice] = append(out[bench.MetricDecodeDevice], stats.Median(device))
	}
	return out
}

// unusable says why a run's values cannot be compared, or "".
func unusable(run string, values []float64) string {
	if len(values) == 0 {
		return fmt.Sprintf("%s has no samples of it", run)
	}
	bad := 0
	for _, x := range values {
		if !(x > 0) || math.IsInf(x, 0) {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Sprintf("%s has %d of %d iterations with a time that is zero, negative or not finite", run, bad, len(values))
	}
	return ""
}

// rule is the verdict rule of opt alone: no load.
func (o Options) rule() stats.Rule { return stats.Rule{Alpha: o.Alpha, Threshold: o.Threshold} }

// fill computes the statistics and the verdict of a row under rule.
func (r *Row) fill(oldValues, newValues []float64, opt Options, rule stats.Rule) {
	thresholds := benchmath.DefaultThresholds
	thresholds.CompareAlpha = opt.Alpha
	oldSample := benchmath.NewSample(slices.Clone(oldValues), &thresholds)
	newSample := benchmath.NewSample(slices.Clone(newValues), &thresholds)
	r.Old, r.New = stats.NewMedianCI(oldSample, opt.Confidence), stats.NewMedianCI(newSample, opt.Confidence)
	cmp := benchmath.AssumeNothing.Compare(oldSample, newSample)
	r.PValue = cmp.P
	est := stats.HodgesLehmannRatio(oldValues, newValues, opt.Confidence)
	r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence = est.Ratio, est.Low, est.High, est.Confidence
	r.Verdict = stats.Decide(r.PValue, r.RatioLow, r.RatioHigh, rule)
	r.Notes = rowNotes(r, opt, cmp)
	if r.Verdict == stats.VerdictInconclusive {
		// Hodges-Lehmann: var ≈ π/3·σ²·(1/m + 1/n) for normal samples.
		n := min(r.Old.N, r.New.N)
		fallback := stats.Z95 * math.Sqrt(math.Pi/3*(r.Old.Spread*r.Old.Spread+r.New.Spread*r.New.Spread)/float64(max(n, 1)))
		r.SamplesNeeded = stats.SamplesNeeded(n, stats.MinRatioSamples(opt.Confidence), r.Ratio, r.RatioLow, r.RatioHigh, fallback, rule)
	}
}

// rowNotes say why a row lacks an interval or a verdict, in our words
// (benchmath's warnings say the same in its own).
func rowNotes(r *Row, opt Options, cmp benchmath.Comparison) []string {
	var notes []string
	conf := fmt.Sprintf("%g%%", 100*opt.Confidence)
	if math.IsNaN(r.Old.LowSeconds) || math.IsNaN(r.New.LowSeconds) {
		notes = append(notes, fmt.Sprintf("no %s interval of a median with fewer than %d iterations", conf, stats.MinMedianSamples(opt.Confidence)))
	}
	if math.IsNaN(r.Ratio) {
		notes = append(notes, "no ratio: a time is zero or negative")
	} else if math.IsNaN(r.RatioLow) {
		notes = append(notes, fmt.Sprintf("no %s interval of the ratio with fewer than %d iterations per run", conf, stats.MinRatioSamples(opt.Confidence)))
	}
	if len(cmp.Warnings) > 0 && cmp.P >= opt.Alpha {
		notes = append(notes, fmt.Sprintf("p cannot fall below %g with so few iterations", opt.Alpha))
	}
	return notes
}

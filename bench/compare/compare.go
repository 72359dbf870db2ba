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
	// FASTER or SLOWER may claim and the band of SAME (default ±1%).
	Threshold float64
}

func (o Options) withDefaults() Options {
	if o.Alpha <= 0 || o.Alpha >= 1 {
		o.Alpha = 0.05
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = 0.95
	}
	o.Threshold = math.Max(o.Threshold, 0)
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
}

// Result is the whole comparison of two reports.
type Result struct {
	Alpha, Confidence, Threshold float64
	// Paired is true for an A/B run: the ratio is the median of the per
	// iteration pairs' ratios (see Paired), not of all pairs.
	Paired bool
	Rows   []Row
	// Warnings say why the two runs may not be comparable (different GPU,
	// driver, clocks, model or flags; shapes in only one run).
	Warnings []string
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

// Reports compares every shape present in both reports, metric by metric,
// on per-iteration values (see the bench.Metric* constants): decode steps at
// different KV lengths are never pooled. stats.Decide is the verdict rule.
func Reports(oldReport, newReport report.Report, opt Options) (Result, error) {
	opt = opt.withDefaults()
	res := Result{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: opt.Threshold}
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
		res.Rows = append(res.Rows, compareShape(o, n, opt)...)
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

func compareShape(o, n report.ShapeReport, opt Options) []Row {
	oldSeries, newSeries := bench.IterationSeries(o.IterationResults()), bench.IterationSeries(n.IterationResults())
	var rows []Row
	for _, os := range oldSeries {
		i := slices.IndexFunc(newSeries, func(s bench.MetricSeries) bool { return s.Metric == os.Metric })
		if i < 0 {
			continue // measured in one run only (e.g. device timers in one)
		}
		row := Row{Shape: o.Shape, Metric: os.Metric}
		row.fill(os.Values, newSeries[i].Values, opt)
		rows = append(rows, row)
	}
	return rows
}

// fill computes the statistics and the verdict of a row.
func (r *Row) fill(oldValues, newValues []float64, opt Options) {
	thresholds := benchmath.DefaultThresholds
	thresholds.CompareAlpha = opt.Alpha
	oldSample := benchmath.NewSample(slices.Clone(oldValues), &thresholds)
	newSample := benchmath.NewSample(slices.Clone(newValues), &thresholds)
	r.Old, r.New = stats.NewMedianCI(oldSample, opt.Confidence), stats.NewMedianCI(newSample, opt.Confidence)
	cmp := benchmath.AssumeNothing.Compare(oldSample, newSample)
	r.PValue = cmp.P
	est := stats.HodgesLehmannRatio(oldValues, newValues, opt.Confidence)
	r.Ratio, r.RatioLow, r.RatioHigh, r.RatioConfidence = est.Ratio, est.Low, est.High, est.Confidence
	r.Verdict = stats.Decide(r.PValue, r.Ratio, r.RatioLow, r.RatioHigh, opt.Alpha, opt.Threshold)
	r.Notes = rowNotes(r, opt, cmp)
	if r.Verdict == stats.VerdictInconclusive {
		// Hodges-Lehmann: var ≈ π/3·σ²·(1/m + 1/n) for normal samples.
		n := min(r.Old.N, r.New.N)
		fallback := stats.Z95 * math.Sqrt(math.Pi/3*(r.Old.Spread*r.Old.Spread+r.New.Spread*r.New.Spread)/float64(max(n, 1)))
		r.SamplesNeeded = stats.SamplesNeeded(n, stats.MinRatioSamples(opt.Confidence), r.Ratio, r.RatioLow, r.RatioHigh, fallback, opt.Threshold)
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

package compare

import (
	"fmt"

	"stepbench/bench/kernelbench"
	"stepbench/bench/report"
)

// MetricKernelDevice is the metric of an op-level row: one cold launch's
// device time (stepbench kernel's samples).
const MetricKernelDevice = "kernel_device"

// kernelReports compares two stepbench kernel reports (kernel_results) op by
// op and shape by shape with Reports' method: each cold sample is one
// value, the Hodges-Lehmann ratio with its Moses interval, the Mann-Whitney
// p, and a verdict beyond the run-to-run floor of the two environments.
func kernelReports(oldReport, newReport report.Report, opt Options) (Result, error) {
	floor, source := floorOf(oldReport.Environment, newReport.Environment, opt)
	opt.Threshold = floor
	res := Result{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: floor, Kernels: true,
		Emulated: oldReport.Environment.Emulated != "" || newReport.Environment.Emulated != ""}
	if res.Emulated {
		res.Header = append(res.Header, report.EmulatedNote)
	}
	res.Header = append(res.Header, verificationHeader(oldReport, newReport)...)
	res.Header = append(res.Header, floorHeader(floor, source))
	res.Warnings = environmentWarnings(oldReport, newReport)
	type key struct{ op, shape string }
	newByKey := map[key]kernelbench.Result{}
	for _, k := range newReport.KernelResults {
		newByKey[key{k.Op, k.ShapeLabel}] = k
	}
	matched := map[key]bool{}
	for _, o := range oldReport.KernelResults {
		n, ok := newByKey[key{o.Op, o.ShapeLabel}]
		if !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("op %s at %s is only in OLD", o.Op, o.ShapeLabel))
			continue
		}
		matched[key{o.Op, o.ShapeLabel}] = true
		row := Row{Op: o.Op, OpShape: o.ShapeLabel, Metric: MetricKernelDevice, Threshold: opt.Threshold}
		if reason := unusable("OLD", o.DeviceSeconds) + unusable("NEW", n.DeviceSeconds); reason != "" {
			res.Unjudged = append(res.Unjudged, Unjudged{Metric: row.key() + " " + row.Metric, Reason: reason})
			continue
		}
		row.fill(o.DeviceSeconds, n.DeviceSeconds, opt, opt.rule())
		res.Rows = append(res.Rows, row)
	}
	for _, n := range newReport.KernelResults {
		if !matched[key{n.Op, n.ShapeLabel}] {
			res.Warnings = append(res.Warnings, fmt.Sprintf("op %s at %s is only in NEW", n.Op, n.ShapeLabel))
		}
	}
	if len(matched) == 0 {
		return res, fmt.Errorf("%w (OLD has %d op results, NEW %d)", ErrNoCommonShape, len(oldReport.KernelResults), len(newReport.KernelResults))
	}
	return res, nil
}

// KernelPaired compares an interleaved op-level A/B (kernelbench.
// MeasurePaired: the i-th samples of both arms are pair i) with Paired's
// method: the median of the pairs' ratios candidate/baseline with its
// order-statistic interval and the exact sign test.
func KernelPaired(baseline, candidate []kernelbench.Result, opt Options) (Result, error) {
	if err := opt.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrIncomparable, err)
	}
	opt = opt.withDefaults()
	res := Result{Alpha: opt.Alpha, Confidence: opt.Confidence, Threshold: opt.Threshold, Paired: true, Kernels: true}
	if len(baseline) != len(candidate) || len(baseline) == 0 {
		return res, fmt.Errorf("%w: %d baseline and %d candidate op results", ErrNoCommonShape, len(baseline), len(candidate))
	}
	for i, b := range baseline {
		a := candidate[i]
		row := Row{Op: b.Op, OpShape: b.ShapeLabel, Metric: MetricKernelDevice}
		if reason := unusable("B", b.DeviceSeconds) + unusable("A", a.DeviceSeconds); reason != "" || len(a.DeviceSeconds) != len(b.DeviceSeconds) {
			res.Unjudged = append(res.Unjudged, Unjudged{Metric: row.key() + " " + row.Metric, Reason: reason + " (or the arms' samples do not pair)"})
			continue
		}
		row.fillPaired(b.DeviceSeconds, a.DeviceSeconds, opt)
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// key names a row: its op and shape for an op-level row, else its shape.
func (r Row) key() string {
	if r.Op != "" {
		return r.Op + " " + r.OpShape
	}
	return r.Label()
}

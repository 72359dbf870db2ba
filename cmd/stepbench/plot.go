package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"stepbench/bench/plot"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
)

// plotCmd draws native reports (run --json-out) in one roofline and one
// sweep figure, each report's lines its own series: stepbench plot --out
// x.png bf16.json fp8.json puts a bf16 and an FP8 cache side by side.
func plotCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plot", stderr)
	var out, title string
	var labels []string
	fs.StringVar(&out, "out", "", "write the roofline to FILE (.svg or .png) and the sweep to FILE with .sweep before the extension, as run --plot does (required)")
	fs.StringSliceVar(&labels, "label", nil, "the legend's name of each report, in order, one per report (default: what tells the reports apart: cache dtype, weights, layout, kernels, model, GPU; else their file names)")
	fs.StringVar(&title, "title", "", "the figures' title (default: the models and the GPU)")
	paths, err := parsePositional(fs, args, -1, "REPORT.json [REPORT.json...]")
	if err != nil {
		return err
	}
	if out == "" {
		return usagef("--out: required (the figure's file, .svg or .png)")
	}
	if err := plot.CheckPath(out); err != nil {
		return usagef("--out: %v", err)
	}
	if len(labels) > 0 && len(labels) != len(paths) {
		return usagef("--label: %d given for %d reports (one per report, in order)", len(labels), len(paths))
	}
	reports := make([]report.Report, len(paths))
	for i, p := range paths {
		if reports[i], err = report.Read(p); err != nil {
			return err
		}
	}
	if len(labels) == 0 {
		labels = report.RunLabels(reports, paths)
		if len(reports) == 1 {
			labels = []string{""}
		}
	}
	runs := make([]plot.RunShapes, len(reports))
	for i, r := range reports {
		runs[i] = plot.RunShapes{Label: labels[i], Shapes: r.Shapes}
	}
	if title == "" {
		title = reportsTitle(reports)
	}
	roof := reports[0].Environment.Roof
	for i, r := range reports[1:] {
		if !sameRoof(roof, r.Environment.Roof) {
			fmt.Fprintf(stderr, "stepbench: warning: %s has another roof than %s; the roofline draws the first's\n", paths[i+1], paths[0])
		}
	}
	written, err := plot.Runs(out, roof, runs, title)
	for _, p := range written { // on stderr, as run --plot says it
		fmt.Fprintf(stderr, "stepbench: wrote %s\n", p)
	}
	return err
}

// reportsTitle names the reports' models and GPUs, and says when any ran
// on the emulated device.
func reportsTitle(reports []report.Report) string {
	var models, gpus []string
	emulated := false
	for _, r := range reports {
		if m := r.Config.Model.Name; !slices.Contains(models, m) {
			models = append(models, m)
		}
		g := orString(r.Environment.GPUName, r.Environment.Backend)
		if !slices.Contains(gpus, g) {
			gpus = append(gpus, g)
		}
		emulated = emulated || r.Environment.Emulated != ""
	}
	title := strings.Join(models, ", ") + " on " + strings.Join(gpus, ", ")
	if emulated {
		title += " (emulated: CPU times)"
	}
	return title
}

// sameRoof: both absent, or the same source and peaks.
func sameRoof(a, b *roofline.Roof) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.PeakFLOPsPerSec == b.PeakFLOPsPerSec && a.PeakBytesPerSec == b.PeakBytesPerSec
}

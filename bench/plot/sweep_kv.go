package plot

import (
	"fmt"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// kvSweepHeight is a ragged sweep's figure: two rows of panels.
const kvSweepHeight = 24 * vg.Centimeter

// writeKVSweepPlot draws a sweep of ragged batches against the tokens in
// their caches after each step (the sum of the lengths: what the step's
// attention reads; log-log), whatever their batch sizes: on top the median
// step time, measured (solid, filled markers, the 95% interval as a bar,
// each point labelled with its batch size where a label fits) and its floor
// (dashed, hollow); under it, when there are floors, the attainment, floor
// / median time. Prefill and decode side by side, one series (colour) per
// output length. Batch size is no axis here: a ragged batch's work is set
// by its lengths, and two batches of one size may differ tenfold.
func writeKVSweepPlot(path string, points []SweepPoint, title string) error {
	outputs := sweepKeys(points, func(p SweepPoint) int { return p.OutputLen })
	phases := []kvPhase{
		{"prefill", func(s SweepPoint) float64 { return s.PrefillSeconds }, func(s SweepPoint) float64 { return s.PrefillFloorSeconds },
			func(s SweepPoint) (float64, float64) { return s.PrefillLowSeconds, s.PrefillHighSeconds }, func(s SweepPoint) int { return s.PrefillKVTokens }},
		{"decode (median step)", func(s SweepPoint) float64 { return s.DecodeSeconds }, func(s SweepPoint) float64 { return s.DecodeFloorSeconds },
			func(s SweepPoint) (float64, float64) { return s.DecodeLowSeconds, s.DecodeHighSeconds }, func(s SweepPoint) int { return s.DecodeKVTokens }},
	}
	hasFloors := slices.ContainsFunc(points, func(s SweepPoint) bool { return s.PrefillFloorSeconds > 0 || s.DecodeFloorSeconds > 0 })
	var times, attains []*plot.Plot
	for _, ph := range phases {
		tp, drawn, err := kvTimePanel(ph, points, outputs)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		if !drawn && !(len(times) == 0 && ph.name == "prefill") {
			continue
		}
		times = append(times, tp)
		if hasFloors {
			ap, err := kvAttainPanel(ph, points, outputs)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			attains = append(attains, ap)
		}
	}
	legend := newLegend()
	addKVSweepLegend(&legend, outputs, hasFloors)
	if !hasFloors {
		return saveFigure(path, title, times, legend)
	}
	return saveGrid(path, title, [][]*plot.Plot{times, attains}, legend, kvSweepHeight)
}

// kvPhase is one column of the figure: how a point gives its measured
// median, floor, interval and KV tokens.
type kvPhase struct {
	name            string
	measured, floor func(SweepPoint) float64
	interval        func(SweepPoint) (low, high float64)
	kvTokens        func(SweepPoint) int
}

// kvSeries are one output length's points of a phase with a positive
// value and KV tokens, in KV order.
func kvSeries(points []SweepPoint, key seriesKey, ph kvPhase, value func(SweepPoint) float64) []SweepPoint {
	var out []SweepPoint
	for _, pt := range points {
		if key.holds(pt.Series, pt.OutputLen) && value(pt) > 0 && ph.kvTokens(pt) > 0 {
			out = append(out, pt)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return ph.kvTokens(out[i]) < ph.kvTokens(out[j]) })
	return out
}

// kvTimePanel draws a phase's step times and floors against KV tokens;
// drawn is false when it has no data.
func kvTimePanel(ph kvPhase, points []SweepPoint, outputs []seriesKey) (*plot.Plot, bool, error) {
	p := plot.New()
	p.Title.Text = ph.name
	p.X.Label.Text = "KV tokens after the step"
	p.Y.Label.Text = "step time (ms)"
	var xs, ys []float64
	var labels []pointLabel
	var lines []plotter.XYs
	for k, out := range outputs {
		c := seriesColors[k%len(seriesColors)]
		for _, isFloor := range []bool{false, true} {
			value := ph.measured
			if isFloor {
				value = ph.floor
			}
			series := kvSeries(points, out, ph, value)
			if len(series) == 0 {
				continue
			}
			xy := make(plotter.XYs, len(series))
			bars := errorPoints{XYs: xy, YErrors: make(plotter.YErrors, len(series))}
			for i, pt := range series {
				xy[i] = plotter.XY{X: float64(ph.kvTokens(pt)), Y: 1e3 * value(pt)}
				xs, ys = append(xs, xy[i].X), append(ys, xy[i].Y)
				if isFloor {
					continue
				}
				label := pointLabel{X: xy[i].X, Y: xy[i].Y, Text: fmt.Sprintf("b=%d", pt.Batch), Color: c, Priority: labelPriority(i, len(series))}
				if lo, hi := ph.interval(pt); lo > 0 && hi >= lo {
					bars.YErrors[i].Low, bars.YErrors[i].High = max(0, xy[i].Y-1e3*lo), max(0, 1e3*hi-xy[i].Y)
					ys = append(ys, 1e3*lo, 1e3*hi)
					label.Low, label.High = 1e3*lo, 1e3*hi
				}
				labels = append(labels, label)
			}
			line, scatter, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, false, err
			}
			styleSeries(line, scatter, c, isFloor)
			p.Add(line)
			if !isFloor {
				errBars, err := newErrorBars(bars, c)
				if err != nil {
					return nil, false, err
				}
				p.Add(errBars)
				lines = append(lines, xy)
			}
			p.Add(scatter)
		}
	}
	logAxis(&p.X, xs)
	logAxis(&p.Y, ys)
	pl := newPointLabels(labels, vg.Points(markerRadius))
	pl.lines = lines
	p.Add(plotter.NewGrid(), pl)
	return p, len(xs) > 0, nil
}

// kvAttainPanel draws a phase's attainment, floor / median time (%),
// against KV tokens.
func kvAttainPanel(ph kvPhase, points []SweepPoint, outputs []seriesKey) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = ph.name + ": attainment"
	p.X.Label.Text = "KV tokens after the step"
	p.Y.Label.Text = "floor / time (%)"
	var xs, ys []float64
	attain := func(s SweepPoint) float64 {
		if m := ph.measured(s); m > 0 && ph.floor(s) > 0 {
			return ph.floor(s) / m
		}
		return 0
	}
	for k, out := range outputs {
		series := kvSeries(points, out, ph, attain)
		if len(series) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(series))
		for i, pt := range series {
			xy[i] = plotter.XY{X: float64(ph.kvTokens(pt)), Y: 100 * attain(pt)}
			xs, ys = append(xs, xy[i].X), append(ys, xy[i].Y)
		}
		line, scatter, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		styleSeries(line, scatter, seriesColors[k%len(seriesColors)], false)
		p.Add(line, scatter)
	}
	logAxis(&p.X, xs)
	logAxis(&p.Y, ys)
	p.Add(plotter.NewGrid())
	return p, nil
}

func addKVSweepLegend(legend *plot.Legend, outputs []seriesKey, hasFloors bool) {
	for k, out := range outputs {
		line, scatter := sweepThumb(seriesColors[k%len(seriesColors)], false)
		legend.Add(out.name(fmt.Sprintf("output %d tokens", out.Len)), line, scatter)
	}
	line, scatter := sweepThumb(seriesColors[0], false)
	legend.Add("measured: median step time", line, scatter)
	legend.Add("    bar: its 95% interval")
	legend.Add("    label: batch size")
	if hasFloors {
		line, scatter = sweepThumb(seriesColors[0], true)
		legend.Add("floor: cost model at the roof", line, scatter)
		legend.Add("attainment: floor / time")
	}
	legend.Add("")
	legend.Add("x: the tokens in the caches")
	legend.Add("    after the step (the sum")
	legend.Add("    of the batch's lengths)")
	legend.Add("time: device events, else host")
}

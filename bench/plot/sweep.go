package plot

import (
	"fmt"
	"image/color"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// SweepPoint is one shape's median step latencies, their 95% intervals and
// floors.
type SweepPoint struct {
	Batch, InputLen int
	// Series names the run a point belongs to when one figure holds several
	// (stepbench plot: "bf16 cache", "fp8_e4m3 cache"); "" for a run's own.
	Series string
	// A ragged batch's sweep (Ragged: its sequences have their own
	// lengths) is drawn against the tokens in the caches after each step:
	// PrefillKVTokens and DecodeKVTokens (the decode point's), by output
	// length.
	OutputLen                               int
	Ragged                                  bool
	PrefillKVTokens, DecodeKVTokens         int
	PrefillSeconds, DecodeSeconds           float64 // medians; 0 when absent
	PrefillLowSeconds, PrefillHighSeconds   float64 // the prefill median's interval; 0 when none
	DecodeLowSeconds, DecodeHighSeconds     float64 // the decode median's
	PrefillFloorSeconds, DecodeFloorSeconds float64 // 0 when no roof
}

// WriteSweepPlot draws median step latency against batch size (log-log),
// prefill and decode in panels side by side, one series per input length
// (colour): measured as solid lines with filled markers and the 95%
// interval of each median as an error bar, the roofline floors as dashed
// lines with hollow markers. A sweep of ragged batches is drawn against
// their KV tokens instead, with the attainment under it
// (writeKVSweepPlot).
func WriteSweepPlot(path string, points []SweepPoint, title string) (err error) {
	defer recoverPlot(path, &err)
	if slices.ContainsFunc(points, func(p SweepPoint) bool { return p.Ragged }) {
		return writeKVSweepPlot(path, points, title)
	}
	points = slices.Clone(points)
	sort.SliceStable(points, func(i, j int) bool { return points[i].Batch < points[j].Batch })
	inputs := sweepKeys(points, func(p SweepPoint) int { return p.InputLen })
	legend := newLegend()
	var panels []*plot.Plot
	for _, phase := range []sweepPhase{
		{"prefill", func(s SweepPoint) float64 { return s.PrefillSeconds }, func(s SweepPoint) float64 { return s.PrefillFloorSeconds },
			func(s SweepPoint) (float64, float64) { return s.PrefillLowSeconds, s.PrefillHighSeconds }},
		{"decode (median step)", func(s SweepPoint) float64 { return s.DecodeSeconds }, func(s SweepPoint) float64 { return s.DecodeFloorSeconds },
			func(s SweepPoint) (float64, float64) { return s.DecodeLowSeconds, s.DecodeHighSeconds }},
	} {
		p, drawn, err := sweepPanel(phase, points, inputs)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		if drawn || (len(panels) == 0 && phase.name == "prefill") {
			panels = append(panels, p)
		}
	}
	if len(points) == 0 {
		title += " (no data)"
	}
	hasFloors := slices.ContainsFunc(points, func(s SweepPoint) bool { return s.PrefillFloorSeconds > 0 || s.DecodeFloorSeconds > 0 })
	addSweepLegend(&legend, inputs, hasFloors)
	return saveFigure(path, title, panels, legend)
}

// sweepPhase is one panel's phase: its name and how a point gives its
// measured median, floor and interval.
type sweepPhase struct {
	name            string
	measured, floor func(SweepPoint) float64
	interval        func(SweepPoint) (low, high float64)
}

// sweepPanel draws one phase; drawn is false when it has no data.
func sweepPanel(ph sweepPhase, points []SweepPoint, inputs []seriesKey) (*plot.Plot, bool, error) {
	p := plot.New()
	p.Title.Text = ph.name
	p.X.Label.Text = "batch size"
	p.Y.Label.Text = "step latency (ms)"
	var xs, ys, batches []float64
	drawn := false
	for k, in := range inputs {
		c := seriesColors[k%len(seriesColors)]
		for _, isFloor := range []bool{false, true} {
			value := ph.measured
			if isFloor {
				value = ph.floor
			}
			xy := sweepSeries(points, in, value)
			if len(xy) == 0 {
				continue
			}
			for _, v := range xy {
				xs, ys = append(xs, v.X), append(ys, v.Y)
				if !slices.Contains(batches, v.X) {
					batches = append(batches, v.X)
				}
			}
			line, scatter, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, false, err
			}
			styleSeries(line, scatter, c, isFloor)
			p.Add(line)
			if !isFloor {
				bars, lows, highs := sweepErrors(points, in, xy, ph)
				ys = append(append(ys, lows...), highs...)
				errBars, err := newErrorBars(bars, c)
				if err != nil {
					return nil, false, err
				}
				p.Add(errBars)
			}
			p.Add(scatter)
			drawn = true
		}
	}
	logAxis(&p.X, xs)
	p.X.Tick.Marker = valueTicks(batches)
	logAxis(&p.Y, ys)
	p.Add(plotter.NewGrid())
	return p, drawn, nil
}

// sweepErrors are the intervals of one input length's measured points xy
// (in ms), and their ends for the axis range.
func sweepErrors(points []SweepPoint, in seriesKey, xy plotter.XYs, ph sweepPhase) (errorPoints, []float64, []float64) {
	bars := errorPoints{XYs: xy, YErrors: make(plotter.YErrors, len(xy))}
	var lows, highs []float64
	for i, v := range xy {
		for _, pt := range points {
			if !in.holds(pt.Series, pt.InputLen) || float64(pt.Batch) != v.X || ph.measured(pt) <= 0 {
				continue
			}
			if lo, hi := ph.interval(pt); lo > 0 && hi >= lo {
				bars.YErrors[i].Low, bars.YErrors[i].High = max(0, v.Y-1e3*lo), max(0, 1e3*hi-v.Y)
				lows, highs = append(lows, 1e3*lo), append(highs, 1e3*hi)
			}
		}
	}
	return bars, lows, highs
}

// sweepSeries is one series' (batch, ms) points in batch order: a line
// never joins two input lengths or two runs.
func sweepSeries(points []SweepPoint, in seriesKey, value func(SweepPoint) float64) plotter.XYs {
	var xy plotter.XYs
	for _, pt := range points {
		if v := value(pt); in.holds(pt.Series, pt.InputLen) && v > 0 && pt.Batch > 0 {
			xy = append(xy, plotter.XY{X: float64(pt.Batch), Y: 1e3 * v})
		}
	}
	sort.SliceStable(xy, func(i, j int) bool { return xy[i].X < xy[j].X })
	return xy
}

// styleSeries: measured solid with filled markers; floor dashed, hollow.
func styleSeries(line *plotter.Line, scatter *plotter.Scatter, c color.Color, isFloor bool) {
	line.Color, scatter.Color, scatter.Radius = c, c, vg.Points(markerRadius)
	line.Width = vg.Points(1.5)
	scatter.Shape = draw.CircleGlyph{}
	if isFloor {
		line.Dashes, line.Width = dashed, vg.Points(1)
		scatter.Shape = draw.RingGlyph{}
	}
}

func addSweepLegend(legend *plot.Legend, inputs []seriesKey, hasFloors bool) {
	for k, in := range inputs {
		line, scatter := sweepThumb(seriesColors[k%len(seriesColors)], false)
		legend.Add(in.name(fmt.Sprintf("input %d tokens", in.Len)), line, scatter)
	}
	line, scatter := sweepThumb(color.Black, false)
	legend.Add("measured: median step time", line, scatter)
	legend.Add("    bar: its 95% interval")
	if hasFloors {
		line, scatter = sweepThumb(color.Black, true)
		legend.Add("floor: cost model at the roof", line, scatter)
	}
	legend.Add("")
	legend.Add("time: device events, else host")
}

func sweepThumb(c color.Color, isFloor bool) (*plotter.Line, *plotter.Scatter) {
	line, scatter, _ := plotter.NewLinePoints(plotter.XYs{{X: 1, Y: 1}})
	styleSeries(line, scatter, c, isFloor)
	return line, scatter
}

// seriesKey is one line of a sweep: a run (Series; "" in a run's own
// figure) and an input length (output length in a ragged sweep).
type seriesKey struct {
	Series string
	Len    int
}

func (k seriesKey) holds(series string, n int) bool { return k.Series == series && k.Len == n }

// name is the legend's text for the line: "fp8_e4m3 cache, input 1024
// tokens", or what alone when the figure holds one run.
func (k seriesKey) name(what string) string {
	if k.Series == "" {
		return what
	}
	return k.Series + ", " + what
}

// sweepKeys are the distinct (series, length) pairs of points in the
// order their runs first appear, each run's lengths ascending.
func sweepKeys(points []SweepPoint, length func(SweepPoint) int) []seriesKey {
	var runs []string
	for _, pt := range points {
		if !slices.Contains(runs, pt.Series) {
			runs = append(runs, pt.Series)
		}
	}
	var keys []seriesKey
	for _, run := range runs {
		var lens []int
		for _, pt := range points {
			if pt.Series == run && !slices.Contains(lens, length(pt)) {
				lens = append(lens, length(pt))
			}
		}
		slices.Sort(lens)
		for _, n := range lens {
			keys = append(keys, seriesKey{Series: run, Len: n})
		}
	}
	return keys
}

package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"stepbench/runner"
)

// Plot sizes: wide enough for labelled points.
const (
	plotWidth  = 22 * vg.Centimeter
	plotHeight = 15 * vg.Centimeter
)

var (
	prefillColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	decodeColor  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	roofColor    = color.RGBA{A: 0xff}
	ridgeColor   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// PlotPaths returns the roofline plot's path (path itself) and the sweep
// plot's (name.sweep.ext). The extension must be .svg or .png.
func PlotPaths(path string) (roofline, sweep string, err error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return "", "", fmt.Errorf("plot %q: the file name must end in .svg or .png", path)
	}
	return path, strings.TrimSuffix(path, filepath.Ext(path)) + ".sweep" + filepath.Ext(path), nil
}

// WriteRooflinePlot draws a log-log roofline: achieved FLOP/s against
// arithmetic intensity for every point (prefill and decode in their own
// colours, each labelled), with the roof's two ceilings and the ridge when
// roof is not nil. Without a roof the title says the points are the cost
// model's work over measured time only.
func WriteRooflinePlot(path string, roof *Roof, points []RooflinePoint, title string) (err error) {
	defer recoverPlot(path, &err)
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arithmetic intensity (FLOP/byte, cost model)"
	p.Y.Label.Text = "achieved FLOP/s (cost-model FLOPs / median device time)"
	logAxes(p, true, true)

	xs, ys := []float64{}, []float64{}
	for _, phase := range []string{PhasePrefill, PhaseDecode} {
		var xy plotter.XYs
		var labels []string
		for _, pt := range points {
			if pt.Phase != phase || !(pt.IntensityFLOPsPerByte > 0) || !(pt.AchievedFLOPsPerSec > 0) {
				continue
			}
			xy = append(xy, plotter.XY{X: pt.IntensityFLOPsPerByte, Y: pt.AchievedFLOPsPerSec})
			labels = append(labels, pt.Label)
			xs, ys = append(xs, pt.IntensityFLOPsPerByte), append(ys, pt.AchievedFLOPsPerSec)
		}
		if len(xy) == 0 {
			continue
		}
		if err := addLabelledScatter(p, phase, xy, labels, phaseColor(phase)); err != nil {
			return err
		}
	}
	if roof != nil && roof.PeakFLOPsPerSec > 0 && roof.PeakBytesPerSec > 0 {
		xs = append(xs, roof.RidgeFLOPsPerByte)
		ys = append(ys, roof.PeakFLOPsPerSec)
		xMin, xMax := spanOf(xs)
		xMin, xMax = math.Min(xMin/4, roof.RidgeFLOPsPerByte/16), math.Max(xMax*4, roof.RidgeFLOPsPerByte*16)
		memory, err := plotter.NewLine(plotter.XYs{{X: xMin, Y: xMin * roof.PeakBytesPerSec}, {X: roof.RidgeFLOPsPerByte, Y: roof.PeakFLOPsPerSec}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		compute, err := plotter.NewLine(plotter.XYs{{X: roof.RidgeFLOPsPerByte, Y: roof.PeakFLOPsPerSec}, {X: xMax, Y: roof.PeakFLOPsPerSec}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		memory.Color, compute.Color = roofColor, roofColor
		memory.Width, compute.Width = vg.Points(1.5), vg.Points(1.5)
		yMin, _ := spanOf(append(ys, xMin*roof.PeakBytesPerSec))
		ridge, err := plotter.NewLine(plotter.XYs{{X: roof.RidgeFLOPsPerByte, Y: yMin}, {X: roof.RidgeFLOPsPerByte, Y: roof.PeakFLOPsPerSec}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		ridge.Color, ridge.Dashes = ridgeColor, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(memory, compute, ridge)
		p.Legend.Add(fmt.Sprintf("memory roof %.2f TB/s", roof.PeakBytesPerSec/1e12), memory)
		p.Legend.Add(fmt.Sprintf("compute roof %.1f TFLOP/s", roof.PeakFLOPsPerSec/1e12), compute)
		p.Legend.Add(fmt.Sprintf("ridge %.0f FLOP/byte (%s)", roof.RidgeFLOPsPerByte, roof.Source), ridge)
		p.X.Min, p.X.Max = xMin, xMax
		_, yMax := spanOf(ys)
		p.Y.Min, p.Y.Max = yMin/2, yMax*2
	} else {
		p.Title.Text += " (no roof: cost-model points only)"
		setLogRange(&p.X, xs)
		setLogRange(&p.Y, ys)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// SweepPoint is one shape's median step latencies and floors.
type SweepPoint struct {
	Batch                                   int
	PrefillSeconds, DecodeSeconds           float64 // medians; 0 when absent
	PrefillFloorSeconds, DecodeFloorSeconds float64 // 0 when no roof
}

// WriteSweepPlot draws median step latency against batch size (log-log)
// for prefill and decode, each with its roofline floor as a dashed line.
func WriteSweepPlot(path string, points []SweepPoint, title string) (err error) {
	defer recoverPlot(path, &err)
	sort.Slice(points, func(i, j int) bool { return points[i].Batch < points[j].Batch })
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "batch size"
	p.Y.Label.Text = "step latency (ms, median)"
	logAxes(p, true, true)
	var xs, ys []float64
	series := []struct {
		name  string
		value func(SweepPoint) float64
		color color.Color
		floor bool
	}{
		{"prefill", func(s SweepPoint) float64 { return s.PrefillSeconds }, prefillColor, false},
		{"prefill floor", func(s SweepPoint) float64 { return s.PrefillFloorSeconds }, prefillColor, true},
		{"decode", func(s SweepPoint) float64 { return s.DecodeSeconds }, decodeColor, false},
		{"decode floor", func(s SweepPoint) float64 { return s.DecodeFloorSeconds }, decodeColor, true},
	}
	for _, s := range series {
		var xy plotter.XYs
		for _, pt := range points {
			if v := s.value(pt); v > 0 && pt.Batch > 0 {
				xy = append(xy, plotter.XY{X: float64(pt.Batch), Y: v * 1e3})
				xs, ys = append(xs, float64(pt.Batch)), append(ys, v*1e3)
			}
		}
		if len(xy) == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		line.Color, scatter.Color = s.color, s.color
		if s.floor {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			scatter.Shape = draw.PlusGlyph{}
		}
		p.Add(line, scatter)
		p.Legend.Add(s.name, line, scatter)
	}
	if len(xs) == 0 {
		p.Title.Text += " (no data)"
		xs, ys = []float64{1}, []float64{1}
	}
	setLogRange(&p.X, xs)
	setLogRange(&p.Y, ys)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func phaseColor(phase string) color.Color {
	if phase == PhasePrefill {
		return prefillColor
	}
	return decodeColor
}

func addLabelledScatter(p *plot.Plot, name string, xy plotter.XYs, labels []string, c color.Color) error {
	scatter, err := plotter.NewScatter(xy)
	if err != nil {
		return fmt.Errorf("plot %s points: %w", name, err)
	}
	scatter.Color = c
	scatter.Radius = vg.Points(3.5)
	scatter.Shape = draw.CircleGlyph{}
	text, err := plotter.NewLabels(plotter.XYLabels{XYs: xy, Labels: labels})
	if err != nil {
		return fmt.Errorf("plot %s labels: %w", name, err)
	}
	for i := range text.TextStyle {
		text.TextStyle[i].Color = c
		text.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(2)}
	}
	p.Add(scatter, text)
	p.Legend.Add(name, scatter)
	return nil
}

func logAxes(p *plot.Plot, x, y bool) {
	if x {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if y {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
}

// setLogRange pads a log axis around the positive values by a factor of 2
// each side, so that a single value still spans a valid range.
func setLogRange(a *plot.Axis, values []float64) {
	lo, hi := spanOf(values)
	if !(lo > 0) {
		lo, hi = 1, 10
	}
	a.Min, a.Max = lo/2, hi*2
}

// spanOf is the min and max of the positive values (0, 0 when none).
func spanOf(values []float64) (lo, hi float64) {
	for _, v := range values {
		if !(v > 0) || math.IsInf(v, 0) {
			continue
		}
		if lo == 0 || v < lo {
			lo = v
		}
		hi = math.Max(hi, v)
	}
	return lo, hi
}

// recoverPlot turns a panic inside gonum/plot (it panics on a log axis that
// sees a non-positive value) into an error: a plot never kills a run.
func recoverPlot(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("plot %s: %v", path, r)
	}
}

// PlotRun writes both plots of a run: the roofline (path) and the sweep
// (PlotPaths' sweep path), and returns the paths written. roof may be nil.
func PlotRun(path string, cfg runner.Config, roof *Roof, shapes []ShapeResult, title string) ([]string, error) {
	rooflinePath, sweepPath, err := PlotPaths(path)
	if err != nil {
		return nil, err
	}
	var points []RooflinePoint
	var sweep []SweepPoint
	for _, s := range shapes {
		ps, err := ShapeRooflinePoints(cfg, roof, s)
		if err != nil {
			return nil, err
		}
		points = append(points, ps...)
		sp := SweepPoint{Batch: s.Batch,
			PrefillSeconds: stepSeconds(s.Summary.PrefillDeviceSeconds, s.Summary.PrefillHostSeconds)}
		if s.OutputLen > 1 {
			sp.DecodeSeconds = stepSeconds(s.Summary.DecodeDeviceSeconds, s.Summary.DecodeHostSeconds)
		}
		if roof != nil {
			if sf, err := ComputeFloors(cfg, roof.Spec(), s.Batch, s.InputLen, s.OutputLen); err == nil {
				sp.PrefillFloorSeconds, sp.DecodeFloorSeconds = sf.PrefillFloor.Seconds, sf.MedianDecodeFloorSeconds()
			}
		}
		sweep = append(sweep, sp)
	}
	if err := WriteRooflinePlot(rooflinePath, roof, points, title+": roofline"); err != nil {
		return nil, err
	}
	if err := WriteSweepPlot(sweepPath, sweep, title+": step latency vs batch size"); err != nil {
		return []string{rooflinePath}, err
	}
	return []string{rooflinePath, sweepPath}, nil
}

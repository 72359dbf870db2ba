package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"stepbench/bench"
	"stepbench/bench/roofline"
)

// markerShapes tell input lengths apart on the roofline.
var markerShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}

const markerRadius = 3.5 // points

// WriteRooflinePlot draws a log-log roofline: achieved FLOP/s against
// arithmetic intensity, one series per phase (colour: prefill blue, decode
// red) and input length (marker shape), its points joined in batch order,
// each with the 95% interval of its median time as an error bar, and
// labelled with their batch size (and input length, when there are several)
// where a label fits; the memory roof (green) and the compute roof
// (purple) meet at the dashed ridge, all in the legend under the roof's
// name and source, which the title names too. Without a roof the title
// says the points are the cost model's work over measured time only.
func WriteRooflinePlot(path string, roof *roofline.Roof, points []Point, title string) (err error) {
	defer recoverPlot(path, &err)
	f, err := rooflineFigure(roof, points, title)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return saveFigure(path, f.title, []*plot.Plot{f.plot}, f.legend)
}

// figure is a roofline ready to draw: the panel, its legend, the title and
// the labels' plotter (which says, once drawn, where each label went).
type figure struct {
	plot   *plot.Plot
	legend plot.Legend
	title  string
	labels *pointLabels
}

func rooflineFigure(roof *roofline.Roof, points []Point, title string) (figure, error) {
	p := plot.New()
	// Short axis labels: a label longer than its axis makes gonum shrink
	// the data area; the legend says how the points are derived.
	p.X.Label.Text = "arithmetic intensity (FLOP/byte)"
	p.Y.Label.Text = "achieved FLOP/s"
	legend := newLegend()
	xs, ys, labels, lines, err := addRooflineSeries(p, &legend, points)
	if err != nil {
		return figure{}, err
	}
	var roofLines []plotter.XYs
	if roof != nil && roof.PeakFLOPsPerSec > 0 && roof.PeakBytesPerSec > 0 {
		xs, ys = append(xs, roof.RidgeFLOPsPerByte), append(ys, roof.PeakFLOPsPerSec)
		logAxis(&p.X, xs)
		logAxis(&p.Y, ys)
		if roofLines, err = addRoofs(p, &legend, roof); err != nil {
			return figure{}, err
		}
		title += roofTitle(roof)
	} else {
		title += " (no roof: cost-model points only)"
		logAxis(&p.X, xs)
		logAxis(&p.Y, ys)
	}
	pl := newPointLabels(labels, vg.Points(markerRadius))
	pl.lines, pl.roofs = lines, roofLines
	p.Add(plotter.NewGrid(), pl)
	legend.Add("")
	if len(inputLengths(points)) > 1 {
		legend.Add("labels: b=batch/input tokens")
	} else {
		legend.Add("labels: batch size")
	}
	legend.Add("    (where one fits)")
	legend.Add("bars: 95% interval of the median")
	legend.Add("x: cost-model FLOPs / bytes")
	legend.Add("y: cost-model FLOPs /")
	legend.Add("    median device time")
	return figure{plot: p, legend: legend, title: title, labels: pl}, nil
}

// addRooflineSeries adds one series per (phase, input length) and returns
// the data extents, the batch-size labels and the series' lines.
func addRooflineSeries(p *plot.Plot, legend *plot.Legend, points []Point) (xs, ys []float64, labels []pointLabel, lines []plotter.XYs, err error) {
	inputs := inputLengths(points)
	var keys []seriesKey
	for _, pt := range points {
		if k := (seriesKey{Series: pt.Series, Len: pt.seriesInput()}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortStableFunc(keys, func(a, b seriesKey) int { return a.Len - b.Len })
	for _, phase := range []string{bench.PhasePrefill, bench.PhaseDecode} {
		for k, key := range keys {
			in := key.Len
			var series []Point
			for _, pt := range points {
				if pt.Phase == phase && key.holds(pt.Series, pt.seriesInput()) && pt.IntensityFLOPsPerByte > 0 && pt.AchievedFLOPsPerSec > 0 {
					series = append(series, pt)
				}
			}
			if len(series) == 0 {
				continue
			}
			sort.Slice(series, func(i, j int) bool { return series[i].Batch < series[j].Batch })
			xy := make(plotter.XYs, len(series))
			bars := errorPoints{XYs: xy, YErrors: make(plotter.YErrors, len(series))}
			for i, pt := range series {
				xy[i] = plotter.XY{X: pt.IntensityFLOPsPerByte, Y: pt.AchievedFLOPsPerSec}
				label := pointLabel{X: xy[i].X, Y: xy[i].Y, Text: batchLabel(pt.Batch, in, len(inputs)),
					Color: phaseColor(phase), Priority: labelPriority(i, len(series))}
				if pt.LowSeconds > 0 && pt.HighSeconds >= pt.LowSeconds {
					// y = FLOPs / t: the slowest time in the interval is the lowest y.
					lo, hi := pt.AchievedFLOPsPerSec*pt.Seconds/pt.HighSeconds, pt.AchievedFLOPsPerSec*pt.Seconds/pt.LowSeconds
					bars.YErrors[i].Low, bars.YErrors[i].High = max(0, xy[i].Y-lo), max(0, hi-xy[i].Y)
					ys = append(ys, lo, hi)
					label.Low, label.High = lo, hi
				}
				xs, ys = append(xs, xy[i].X), append(ys, xy[i].Y)
				labels = append(labels, label)
			}
			lines = append(lines, xy)
			line, scatter, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			line.Color, line.Width = withAlpha(phaseColor(phase), 0x80), vg.Points(0.8)
			scatter.Color, scatter.Shape, scatter.Radius = phaseColor(phase), markerShapes[k%len(markerShapes)], vg.Points(markerRadius)
			errBars, err := newErrorBars(bars, phaseColor(phase))
			if err != nil {
				return nil, nil, nil, nil, err
			}
			p.Add(line, errBars, scatter)
			legend.Add(key.name(seriesName(phase, in, len(inputs))), line, scatter)
		}
	}
	return xs, ys, labels, lines, nil
}

// errorPoints are points with their y intervals (plotter.YErrorBars' input).
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// newErrorBars draws points' intervals in c, thin, with short caps.
func newErrorBars(points errorPoints, c color.Color) (*plotter.YErrorBars, error) {
	bars, err := plotter.NewYErrorBars(points)
	if err != nil {
		return nil, err
	}
	bars.LineStyle.Color, bars.LineStyle.Width, bars.CapWidth = c, vg.Points(0.9), vg.Points(5)
	return bars, nil
}

// batchLabel is a point's label: its batch size and, when the figure has
// several input lengths, its series' input length ("b=64/1k").
func batchLabel(batch, inputLen, inputs int) string {
	if inputs == 1 || inputLen == raggedSeries {
		return fmt.Sprintf("b=%d", batch)
	}
	return fmt.Sprintf("b=%d/%s", batch, tokens(inputLen))
}

// raggedSeries is the input length that stands for the ragged batches'
// series: they share one per phase (each has its own mean length).
const raggedSeries = -1

// tokens writes a token count short: 1k for 1024, 8k for 8192, 100 for 100.
func tokens(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprint(n)
}

// labelPriority puts a series' first and last points first.
func labelPriority(i, n int) int {
	if i == 0 || i == n-1 {
		return 0
	}
	return 1
}

func seriesName(phase string, inputLen, inputs int) string {
	if inputLen == raggedSeries {
		return phase + " (ragged batches)"
	}
	if inputs == 1 {
		return fmt.Sprintf("%s (input %d)", phase, inputLen)
	}
	return fmt.Sprintf("%s, input %d", phase, inputLen)
}

// addRoofs draws the memory roof up to the ridge, the compute roof from
// it, and the ridge, across the whole x axis, and returns their lines.
func addRoofs(p *plot.Plot, legend *plot.Legend, roof *roofline.Roof) ([]plotter.XYs, error) {
	ridge := roof.RidgeFLOPsPerByte
	xMin, xMax := math.Min(p.X.Min, ridge), math.Max(p.X.Max, ridge)
	lines := []plotter.XYs{{{X: xMin, Y: xMin * roof.PeakBytesPerSec}, {X: ridge, Y: roof.PeakFLOPsPerSec}},
		{{X: ridge, Y: roof.PeakFLOPsPerSec}, {X: xMax, Y: roof.PeakFLOPsPerSec}},
		{{X: ridge, Y: p.Y.Min}, {X: ridge, Y: roof.PeakFLOPsPerSec}}}
	memory, err := plotter.NewLine(lines[0])
	if err != nil {
		return nil, err
	}
	compute, err := plotter.NewLine(lines[1])
	if err != nil {
		return nil, err
	}
	memory.Color, compute.Color = memoryRoofColor, computeRoofColor
	memory.Width, compute.Width = vg.Points(2), vg.Points(2)
	ridgeLine, err := plotter.NewLine(lines[2])
	if err != nil {
		return nil, err
	}
	ridgeLine.Color, ridgeLine.Dashes = ridgeColor, dashed
	p.Add(memory, compute, ridgeLine)
	legend.Add("")
	legendText(legend, fmt.Sprintf("roof: %s (%s)", roof.Source, roof.Description), 29)
	legend.Add(fmt.Sprintf("memory roof %.2f TB/s", roof.PeakBytesPerSec/1e12), memory)
	legend.Add(fmt.Sprintf("compute roof %.1f TFLOP/s", roof.PeakFLOPsPerSec/1e12), compute)
	legend.Add(fmt.Sprintf("ridge %.0f FLOP/byte", ridge), ridgeLine)
	return lines, nil
}

func inputLengths(points []Point) []int {
	var inputs []int
	for _, pt := range points {
		if !slices.Contains(inputs, pt.seriesInput()) {
			inputs = append(inputs, pt.seriesInput())
		}
	}
	slices.Sort(inputs)
	return inputs
}

func phaseColor(phase string) color.Color {
	if phase == bench.PhasePrefill {
		return prefillColor
	}
	return decodeColor
}

func withAlpha(c color.Color, alpha uint8) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: alpha}
}

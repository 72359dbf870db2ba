package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"stepbench/bench"
	"stepbench/bench/report"
)

var (
	throttleColor   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff} // orange
	telemetryColor  = color.RGBA{R: 0x30, G: 0x30, B: 0x30, A: 0xff}
	shapeStartColor = color.RGBA{R: 0xb0, G: 0xb0, B: 0xb0, A: 0xff}
)

// maxShapesListed is how many shapes the timeline's legend names.
const maxShapesListed = 24

// timelinePanelHeight is each panel's share of the timeline's height.
const timelinePanelHeight = 6 * vg.Centimeter

// timelineReading is one NVML reading at a time since the run's start:
// the combined figures over the node's GPUs when it read several.
type timelineReading struct {
	seconds                          float64
	power, smClock, gpuTemp, memTemp float64
	throttled                        bool
}

// timeline is what WriteTimelinePlot draws, in seconds since the first
// timed region (or reading).
type timeline struct {
	prefill, decode plotter.XYs // (s, ms) of every timed region
	readings        []timelineReading
	shapeStarts     []float64
	shapeNames      []string
	severalGPUs     bool
}

// WriteTimelinePlot draws the run over wall time, one panel each, stacked
// on one time axis (seconds since the first timed region): every timed
// region's latency (ms, device time where the backend has it; prefill blue
// circles, decode red dots), then, when NVML was read, the power (W), the
// SM clock (MHz, throttled readings marked in orange) and the GPU and
// memory temperatures (°C) of every reading (those after each region and
// the background sampler's). A faint line marks where each shape starts.
// Over several GPUs the telemetry is the node's combined figures (power
// summed, the slowest clock, the hottest GPU), as the report's.
func WriteTimelinePlot(path string, shapes []report.ShapeReport, title string) (err error) {
	defer recoverPlot(path, &err)
	tl := newTimeline(shapes)
	legend := newLegend()
	rows := [][]*plot.Plot{{latencyPanel(tl, &legend)}}
	if len(tl.readings) == 0 {
		title += " (no telemetry: NVML reads GPUs only)"
	} else {
		panels, err := telemetryPanels(tl, &legend)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		for _, p := range panels {
			rows = append(rows, []*plot.Plot{p})
		}
	}
	begin, end := 0.0, 0.0
	for _, xy := range append(slices.Clone(tl.prefill), tl.decode...) {
		end = math.Max(end, xy.X)
	}
	for _, r := range tl.readings { // the sampler reads before the first region too
		begin, end = math.Min(begin, r.seconds), math.Max(end, r.seconds)
	}
	for i, row := range rows {
		p := row[0]
		p.X.Min, p.X.Max = begin, math.Max(end+0.02*(end-begin), 1e-3)
		p.X.Tick.Marker = linearTicks{}
		if i == len(rows)-1 {
			p.X.Label.Text = "wall time since the first timed region (s)"
		}
		addShapeStarts(p, tl.shapeStarts)
	}
	legend.Add("")
	legend.Add("grey line: a shape starts")
	for i, name := range tl.shapeNames {
		if i == maxShapesListed && len(tl.shapeNames) > maxShapesListed+1 {
			legend.Add(fmt.Sprintf("  and %d more shapes", len(tl.shapeNames)-i))
			break
		}
		legend.Add(fmt.Sprintf("  at %.3g s: %s", tl.shapeStarts[i], name))
	}
	height := timelinePanelHeight*vg.Length(len(rows)) + 2*vg.Centimeter
	return saveGrid(path, title, rows, legend, height)
}

// newTimeline gathers the regions and readings of every shape.
func newTimeline(shapes []report.ShapeReport) timeline {
	var tl timeline
	start := int64(math.MaxInt64)
	for _, s := range shapes {
		for _, sm := range s.Samples {
			if sm.StartUnixNanos > 0 {
				start = min(start, sm.StartUnixNanos)
			}
		}
	}
	since := func(ns int64) float64 { return float64(ns-start) / 1e9 }
	for _, s := range shapes {
		device := slices.ContainsFunc(s.Samples, func(sm report.SampleReport) bool { return sm.DeviceSeconds > 0 })
		first := true
		for _, sm := range s.Samples {
			if sm.StartUnixNanos == 0 {
				continue
			}
			if first {
				tl.shapeStarts = append(tl.shapeStarts, since(sm.StartUnixNanos))
				tl.shapeNames = append(tl.shapeNames, fmt.Sprintf("b=%d in=%d out=%d", s.Batch, s.InputLen, s.OutputLen))
				first = false
			}
			v := sm.HostSeconds
			if device {
				v = sm.DeviceSeconds
			}
			xy := plotter.XY{X: since(sm.StartUnixNanos), Y: 1e3 * v}
			if sm.Phase == bench.PhasePrefill {
				tl.prefill = append(tl.prefill, xy)
			} else {
				tl.decode = append(tl.decode, xy)
			}
			if t := sm.Telemetry; t != nil && t.UnixNanos > 0 {
				tl.readings = append(tl.readings, timelineReading{seconds: since(t.UnixNanos), power: t.PowerWatts, smClock: t.SMClockMHz,
					gpuTemp: t.TemperatureC, memTemp: t.MemoryTemperatureC, throttled: t.Throttled})
				tl.severalGPUs = tl.severalGPUs || len(t.GPUs) > 0
			}
		}
		for _, r := range s.TelemetryTimeline {
			tl.readings = append(tl.readings, timelineReading{seconds: since(r.UnixNanos), power: r.PowerWatts, smClock: r.SMClockMHz,
				gpuTemp: r.GPUTemperatureC, memTemp: r.MemoryTemperatureC, throttled: r.Throttled})
			tl.severalGPUs = tl.severalGPUs || len(r.GPUs) > 0
		}
	}
	slices.SortFunc(tl.readings, func(a, b timelineReading) int { return cmpFloat(a.seconds, b.seconds) })
	return tl
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// latencyPanel is every timed region's latency over time.
func latencyPanel(tl timeline, legend *plot.Legend) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "step latency (ms)"
	var ys []float64
	for _, series := range []struct {
		name  string
		xy    plotter.XYs
		color color.Color
		shape draw.GlyphDrawer
	}{{"prefill (a timed region each)", tl.prefill, prefillColor, draw.CircleGlyph{}},
		{"decode step (a timed region each)", tl.decode, decodeColor, draw.CrossGlyph{}}} {
		if len(series.xy) == 0 {
			continue
		}
		scatter, err := plotter.NewScatter(series.xy)
		if err != nil {
			continue
		}
		scatter.Color, scatter.Shape, scatter.Radius = series.color, series.shape, vg.Points(2.5)
		p.Add(scatter)
		legend.Add(series.name, scatter)
		for _, v := range series.xy {
			ys = append(ys, v.Y)
		}
	}
	logAxis(&p.Y, ys)
	p.Add(plotter.NewGrid())
	return p
}

// telemetryPanels are power, SM clock (with throttled readings) and
// temperature over time; a panel whose figure no reading has is left out.
func telemetryPanels(tl timeline, legend *plot.Legend) ([]*plot.Plot, error) {
	sum := ""
	if tl.severalGPUs {
		sum = ", sum of GPUs"
	}
	minimum, maximum := "", ""
	if tl.severalGPUs {
		minimum, maximum = ", slowest GPU", ", hottest GPU"
	}
	var panels []*plot.Plot
	for _, panel := range []struct {
		label   string
		figures []telemetryFigure
	}{
		{"power (W" + sum + ")", []telemetryFigure{{"power", func(r timelineReading) float64 { return r.power }, nil}}},
		{"SM clock (MHz" + minimum + ")", []telemetryFigure{{"SM clock", func(r timelineReading) float64 { return r.smClock }, nil}}},
		{"temperature (°C" + maximum + ")", []telemetryFigure{{"GPU temperature", func(r timelineReading) float64 { return r.gpuTemp }, nil},
			{"memory temperature", func(r timelineReading) float64 { return r.memTemp }, dashed}}},
	} {
		p, drawn, err := telemetryPanel(tl, panel.label, panel.figures, legend)
		if err != nil {
			return nil, err
		}
		if drawn {
			panels = append(panels, p)
		}
	}
	return panels, nil
}

// telemetryFigure is one line of a telemetry panel.
type telemetryFigure struct {
	name   string
	value  func(timelineReading) float64
	dashes []vg.Length
}

// telemetryPanel draws figures over time; drawn is false when no reading
// has any. The SM clock's panel marks throttled readings.
func telemetryPanel(tl timeline, label string, figures []telemetryFigure, legend *plot.Legend) (*plot.Plot, bool, error) {
	p := plot.New()
	p.Y.Label.Text = label
	drawn := false
	for _, f := range figures {
		var xy, throttled plotter.XYs
		for _, r := range tl.readings {
			if v := f.value(r); v > 0 {
				xy = append(xy, plotter.XY{X: r.seconds, Y: v})
				if r.throttled {
					throttled = append(throttled, plotter.XY{X: r.seconds, Y: v})
				}
			}
		}
		if len(xy) == 0 {
			continue
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return nil, false, err
		}
		line.Color, line.Width, line.Dashes = telemetryColor, vg.Points(1), f.dashes
		p.Add(line)
		if len(figures) > 1 {
			legend.Add(f.name, line)
		}
		if f.name == "SM clock" {
			if err := addThrottleMarks(p, legend, throttled); err != nil {
				return nil, false, err
			}
		}
		drawn = true
	}
	padLinear(&p.Y)
	p.Y.Tick.Marker = linearTicks{}
	p.Add(plotter.NewGrid())
	return p, drawn, nil
}

// addThrottleMarks marks the throttled readings (nvbench's rule) and names
// them in the legend, also when there are none.
func addThrottleMarks(p *plot.Plot, legend *plot.Legend, throttled plotter.XYs) error {
	if len(throttled) == 0 {
		legend.Add("no throttled reading")
		return nil
	}
	marks, err := plotter.NewScatter(throttled)
	if err != nil {
		return err
	}
	marks.Color, marks.Shape, marks.Radius = throttleColor, draw.CrossGlyph{}, vg.Points(4)
	p.Add(marks)
	legend.Add(fmt.Sprintf("throttled reading (%d)", len(throttled)), marks)
	return nil
}

// addShapeStarts draws a faint vertical line where each shape starts,
// across the panel's y range (the data's: Add keeps it).
func addShapeStarts(p *plot.Plot, starts []float64) {
	yMin, yMax := p.Y.Min, p.Y.Max
	for _, x := range starts {
		line, err := plotter.NewLine(plotter.XYs{{X: x, Y: yMin}, {X: x, Y: yMax}})
		if err != nil {
			continue
		}
		line.Color, line.Dashes, line.Width = shapeStartColor, dashed, vg.Points(0.8)
		p.Add(line)
	}
}

// padLinear widens a linear axis by 5% each way, so that no line runs
// along its edge, and around a constant figure (the emulated device's
// 100 W), which would otherwise have no span.
func padLinear(a *plot.Axis) {
	pad := 0.05 * (a.Max - a.Min)
	if pad <= 1e-9*math.Abs(a.Max) {
		pad = math.Max(1, 0.1*math.Abs(a.Max))
	}
	a.Min, a.Max = a.Min-pad, a.Max+pad
}

// linearTicks marks a linear axis at 1, 2 or 5 times a power of ten, four
// to ten of them, labelled as plainly as the values allow (40, 42.5, 45).
type linearTicks struct{}

func (linearTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((max-min)/4)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (max-min)/(m*step) <= 8 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 6, 64)})
	}
	return ticks
}

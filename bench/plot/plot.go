package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"golang.org/x/perf/benchmath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"

	"stepbench/bench/internal/files"
)

// Figure sizes: the panels fill the left, the legend has its own column on
// the right, so that nothing covers the data and no band stays empty.
const (
	figureWidth  = 26 * vg.Centimeter
	figureHeight = 15 * vg.Centimeter
	legendWidth  = 6.5 * vg.Centimeter
)

var (
	prefillColor     = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	decodeColor      = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
	memoryRoofColor  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff} // green
	computeRoofColor = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff} // purple
	ridgeColor       = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
	// seriesColors tell input lengths apart in the sweep (tab10).
	seriesColors = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	}
	dashed = []vg.Length{vg.Points(5), vg.Points(3)}
)

// Paths returns the roofline plot's path and the sweep plot's, from the
// --plot FILE: the roofline is FILE and the sweep FILE with .sweep before
// the extension; a FILE that already ends in .sweep.EXT names the sweep as
// written, and the roofline is FILE without the .sweep. The extension must
// be .svg or .png.
func Paths(path string) (roofline, sweep string, err error) {
	ext := filepath.Ext(path)
	if e := strings.ToLower(ext); e != ".svg" && e != ".png" {
		return "", "", fmt.Errorf("plot %q: the file name must end in .svg or .png", path)
	}
	base := strings.TrimSuffix(path, ext)
	if stem, ok := strings.CutSuffix(base, ".sweep"); ok && stem != "" && !strings.HasSuffix(stem, string(filepath.Separator)) {
		return stem + ext, path, nil
	}
	return path, base + ".sweep" + ext, nil
}

// CheckPath refuses a figure path that is not .svg or .png.
func CheckPath(path string) error {
	if e := strings.ToLower(filepath.Ext(path)); e != ".svg" && e != ".png" {
		return fmt.Errorf("plot %q: the file name must end in .svg or .png", path)
	}
	return nil
}

// newLegend is a legend for the figure's right-hand column.
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	l.ThumbnailWidth = vg.Points(24)
	l.Padding = vg.Points(3)
	return l
}

// saveFigure draws a title, the panels side by side (axes aligned) and
// the legend column, and writes the figure to path atomically (.svg or
// .png by the extension).
func saveFigure(path, title string, panels []*plot.Plot, legend plot.Legend) error {
	return saveGrid(path, title, [][]*plot.Plot{panels}, legend, figureHeight)
}

// saveGrid is saveFigure for rows of panels (axes aligned) in a figure of
// the given height.
func saveGrid(path, title string, rows [][]*plot.Plot, legend plot.Legend, height vg.Length) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	c, err := draw.NewFormattedCanvas(figureWidth, height, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	drawGrid(draw.New(c), title, rows, legend)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := files.WriteAtomic(path, buf.Bytes()); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// titleStyle is the figure title's.
var titleStyle = text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, vg.Points(13)), Handler: plot.DefaultTextHandler,
	XAlign: draw.XCenter, YAlign: draw.YTop}

// margin is the space kept free at every edge of a figure.
const margin = 4 // points

// drawGrid draws the title, the panels and the legend column on dc.
func drawGrid(dc draw.Canvas, title string, rows [][]*plot.Plot, legend plot.Legend) {
	width := dc.Max.X - dc.Min.X
	titleHeight := drawTitle(dc, title, width-legendWidth, width)
	body := draw.Crop(dc, vg.Points(margin), -legendWidth, vg.Points(margin), -titleHeight)
	tiles := draw.Tiles{Rows: len(rows), Cols: len(rows[0]), PadX: vg.Centimeter, PadY: vg.Points(12)}
	canvases := plot.Align(rows, tiles, body)
	for i, row := range rows {
		for j, p := range row {
			p.Draw(canvases[i][j])
		}
	}
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(8), 0, 0, -titleHeight))
}

// drawTitle draws the title at the top of dc, inside the canvas whatever
// its length: centred over the panels (bodyWidth from the left) when it
// fits there, else over the whole width, wrapped at spaces into as many
// lines as it needs. It returns the height it took.
func drawTitle(dc draw.Canvas, title string, bodyWidth, width vg.Length) vg.Length {
	lines := balancedLines(titleStyle, title, width-2*vg.Points(margin))
	y := dc.Max.Y - vg.Points(margin)
	lineHeight := titleStyle.Height("M")
	for _, line := range lines {
		center := bodyWidth / 2
		if w := titleStyle.Width(line); w/2 > center-vg.Points(margin) {
			center = width / 2
		}
		dc.FillText(titleStyle, vg.Point{X: dc.Min.X + center, Y: y}, line)
		y -= lineHeight
	}
	return vg.Length(len(lines))*lineHeight + vg.Points(10)
}

// balancedLines is wrapText's lines at the narrowest width that needs no
// more of them, so that a wrapped title has lines of about one length
// rather than a long one and a word.
func balancedLines(style text.Style, s string, width vg.Length) []string {
	lines := wrapText(style, s, width)
	lo, hi := width/vg.Length(len(lines)+1), width
	for range 20 {
		mid := (lo + hi) / 2
		if len(wrapText(style, s, mid)) > len(lines) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return wrapText(style, s, hi)
}

// wrapText breaks s at spaces into lines no wider than width in style (a
// word wider than width alone is cut at a rune that fits).
func wrapText(style text.Style, s string, width vg.Length) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		next := strings.TrimSpace(line + " " + word)
		if style.Width(next) <= width {
			line = next
			continue
		}
		if line != "" {
			lines = append(lines, line)
		}
		for style.Width(word) > width && len([]rune(word)) > 1 {
			r := []rune(word)
			cut := len(r) - 1
			for cut > 1 && style.Width(string(r[:cut])) > width {
				cut--
			}
			lines = append(lines, string(r[:cut]))
			word = string(r[cut:])
		}
		line = word
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// legendText adds text to the legend as lines of at most width runes.
func legendText(legend *plot.Legend, text string, width int) {
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > width {
			legend.Add(line)
			line = "    "
		}
		if strings.TrimSpace(line) != "" {
			line += " "
		}
		line += word
	}
	if strings.TrimSpace(line) != "" {
		legend.Add(line)
	}
}

// recoverPlot turns a panic inside gonum/plot (it panics on a log axis that
// sees a non-positive value) into an error: a plot never kills a run.
func recoverPlot(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("plot %s: %v", path, r)
	}
}

// Run writes both plots of a run from its shape reports, and returns the
// paths written: the roofline (Paths' roofline path) of their step points
// under roof (may be nil) and the sweep (Paths' sweep path) of the same
// points' times beside their floors, each median with its 95% interval as
// an error bar. It draws only what the reports hold.
func Run(path string, roof *roofline.Roof, shapes []report.ShapeReport, title string) ([]string, error) {
	return Runs(path, roof, []RunShapes{{Shapes: shapes}}, title)
}

// RunShapes are one run's shape reports under the name a figure of
// several runs gives them ("bf16 cache", "fp8_e4m3 cache"; "" alone).
type RunShapes struct {
	Label  string
	Shapes []report.ShapeReport
}

// Runs is Run for several runs in one pair of figures: each run's lines
// are its own series, named by its Label in the legends.
func Runs(path string, roof *roofline.Roof, runs []RunShapes, title string) ([]string, error) {
	rooflinePath, sweepPath, err := Paths(path)
	if err != nil {
		return nil, err
	}
	var points []Point
	var sweep []SweepPoint
	ragged := false
	for _, run := range runs {
		for _, s := range run.Shapes {
			sp, shapePoints := shapeSweepPoint(s, run.Label)
			ragged = ragged || sp.Ragged
			points = append(points, shapePoints...)
			sweep = append(sweep, sp)
		}
	}
	if err := WriteRooflinePlot(rooflinePath, roof, points, title+": roofline"); err != nil {
		return nil, err
	}
	sweepTitle := title + ": step latency against batch size"
	if ragged {
		sweepTitle = title + ": step time and attainment against KV tokens"
	}
	if err := WriteSweepPlot(sweepPath, sweep, sweepTitle+roofTitle(roof)); err != nil {
		return []string{rooflinePath}, err
	}
	return []string{rooflinePath, sweepPath}, nil
}

// shapeSweepPoint is a shape's sweep point and its roofline points (the
// whole step's: per-op points are left out), named series.
func shapeSweepPoint(s report.ShapeReport, series string) (SweepPoint, []Point) {
	sp := SweepPoint{Batch: s.Batch, InputLen: s.InputLen, OutputLen: s.OutputLen, Ragged: s.Lens != "", Series: series}
	var points []Point
	for _, p := range s.RooflinePoints {
		if p.Op != "" {
			continue
		}
		lo, hi := MedianInterval(s, p.Phase)
		points = append(points, Point{Point: p, LowSeconds: lo, HighSeconds: hi, Ragged: sp.Ragged, Series: series})
		switch p.Phase {
		case bench.PhasePrefill:
			sp.PrefillSeconds, sp.PrefillFloorSeconds = p.Seconds, p.FloorSeconds
			sp.PrefillLowSeconds, sp.PrefillHighSeconds = lo, hi
			sp.PrefillKVTokens = pointKVTokens(p)
		case bench.PhaseDecode:
			sp.DecodeSeconds, sp.DecodeFloorSeconds = p.Seconds, p.FloorSeconds
			sp.DecodeLowSeconds, sp.DecodeHighSeconds = lo, hi
			sp.DecodeKVTokens = pointKVTokens(p)
		}
	}
	return sp, points
}

// pointKVTokens is the tokens in a step's caches after it: a ragged
// batch's KVTokens, batch × input_len for a uniform prefill, batch ×
// (position + 1) for a uniform decode step.
func pointKVTokens(p roofline.Point) int {
	switch {
	case p.KVTokens > 0:
		return p.KVTokens
	case p.Phase == bench.PhasePrefill:
		return p.Batch * p.InputLen
	}
	return p.Batch * (p.Position + 1)
}

// Point is a roofline point with the 95% interval of its median time (0,
// 0 when there is none: fewer than 6 iterations). Ragged says it is a
// ragged batch's: the ragged batches share a series, whatever their mean
// input length.
type Point struct {
	roofline.Point
	LowSeconds, HighSeconds float64
	Ragged                  bool
	// Series is the run's name when a figure holds several (SweepPoint.Series).
	Series string
}

// seriesInput is the input length of the point's series (raggedSeries for
// a ragged batch).
func (p Point) seriesInput() int {
	if p.Ragged {
		return raggedSeries
	}
	return p.InputLen
}

// MedianInterval is the distribution-free 95% interval of a phase's median
// time over s's iterations (the prefill's, or each iteration's median
// decode step), device time where the backend has it, as the roofline
// points' times are; 0, 0 with fewer than 6 iterations.
func MedianInterval(s report.ShapeReport, phase string) (low, high float64) {
	device := false
	for _, sm := range s.Samples {
		device = device || sm.DeviceSeconds > 0
	}
	perIter := map[int][]float64{}
	var iters []int
	for _, sm := range s.Samples {
		if sm.Phase != phase {
			continue
		}
		v := sm.HostSeconds
		if device {
			v = sm.DeviceSeconds
		}
		if _, ok := perIter[sm.Iter]; !ok {
			iters = append(iters, sm.Iter)
		}
		perIter[sm.Iter] = append(perIter[sm.Iter], v)
	}
	values := make([]float64, 0, len(iters))
	for _, it := range iters {
		values = append(values, stats.Median(perIter[it]))
	}
	if len(values) == 0 {
		return 0, 0
	}
	ci := stats.NewMedianCI(benchmath.NewSample(values, &benchmath.DefaultThresholds), 0.95)
	if math.IsNaN(ci.LowSeconds) || math.IsNaN(ci.HighSeconds) {
		return 0, 0
	}
	return ci.LowSeconds, ci.HighSeconds
}

// roofTitle names the roof in a figure's title: " (datasheet roof: H100
// SXM5 80GB)", " (no roof)".
func roofTitle(roof *roofline.Roof) string {
	switch {
	case roof == nil:
		return " (no roof)"
	case roof.Source == roofline.SourceDatasheet:
		return fmt.Sprintf(" (%s roof: %s)", roof.Source, roof.Description)
	}
	return fmt.Sprintf(" (%s roof)", roof.Source)
}

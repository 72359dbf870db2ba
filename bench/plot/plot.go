package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/bench/roofline"

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

// Paths returns the roofline plot's path (path itself) and the sweep
// plot's (name.sweep.ext). The extension must be .svg or .png.
func Paths(path string) (roofline, sweep string, err error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return "", "", fmt.Errorf("plot %q: the file name must end in .svg or .png", path)
	}
	return path, strings.TrimSuffix(path, filepath.Ext(path)) + ".sweep" + filepath.Ext(path), nil
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
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	c, err := draw.NewFormattedCanvas(figureWidth, figureHeight, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	dc := draw.New(c)
	titleStyle := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, vg.Points(13)), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop}
	dc.FillText(titleStyle, vg.Point{X: (figureWidth - legendWidth) / 2, Y: figureHeight - vg.Points(4)}, title)
	titleHeight := titleStyle.Height(title) + vg.Points(10)
	body := draw.Crop(dc, vg.Points(4), -legendWidth, vg.Points(4), -titleHeight)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Centimeter}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, body)
	for j, p := range panels {
		p.Draw(canvases[0][j])
	}
	legend.Draw(draw.Crop(dc, figureWidth-legendWidth+vg.Points(8), 0, 0, -titleHeight))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := files.WriteAtomic(path, buf.Bytes()); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// recoverPlot turns a panic inside gonum/plot (it panics on a log axis that
// sees a non-positive value) into an error: a plot never kills a run.
func recoverPlot(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("plot %s: %v", path, r)
	}
}

// Run writes both plots of a run from its shape reports, and returns the
// paths written: the roofline (path) of their step points under roof (may
// be nil) and the sweep (Paths' sweep path) of the same points' times
// beside their floors. It draws only what the reports hold.
func Run(path string, roof *roofline.Roof, shapes []report.ShapeReport, title string) ([]string, error) {
	rooflinePath, sweepPath, err := Paths(path)
	if err != nil {
		return nil, err
	}
	var points []roofline.Point
	var sweep []SweepPoint
	for _, s := range shapes {
		sp := SweepPoint{Batch: s.Batch, InputLen: s.InputLen}
		for _, p := range s.RooflinePoints {
			if p.Op != "" {
				continue
			}
			points = append(points, p)
			switch p.Phase {
			case bench.PhasePrefill:
				sp.PrefillSeconds, sp.PrefillFloorSeconds = p.Seconds, p.FloorSeconds
			case bench.PhaseDecode:
				sp.DecodeSeconds, sp.DecodeFloorSeconds = p.Seconds, p.FloorSeconds
			}
		}
		sweep = append(sweep, sp)
	}
	if err := WriteRooflinePlot(rooflinePath, roof, points, title+": roofline"); err != nil {
		return nil, err
	}
	if err := WriteSweepPlot(sweepPath, sweep, title+": step latency against batch size"); err != nil {
		return []string{rooflinePath}, err
	}
	return []string{rooflinePath, sweepPath}, nil
}

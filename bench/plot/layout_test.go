package plot

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// noisyReports are llama-tiny on a loaded CPU under an H100's datasheet
// roof: batch 1, 2, 4 × input 16, 32, eight iterations each spread over
// ±60%, so that every point has a tall error bar and the labels crowd the
// bars (the figure of a cpu or emulated run).
func noisyReports(t *testing.T) ([]report.ShapeReport, roofline.Roof) {
	t.Helper()
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := h100.Roof()
	var shapes []bench.ShapeResult
	for _, b := range []int{1, 2, 4} {
		for _, in := range []int{16, 32} {
			var prefill []float64
			var decode [][]float64
			for i := range 8 {
				spread := 1 + 0.6*math.Sin(float64(3*i+b+in))
				prefill = append(prefill, 4e-3*float64(b*in)/16*spread)
				decode = append(decode, []float64{1e-3 * spread, 1.1e-3 / spread, 1e-3 * spread})
			}
			shapes = append(shapes, benchtest.ScriptedShape(b, in, 4, prefill, decode))
		}
	}
	return report.Builder{Model: cfg, Roof: &roof}.Shapes(shapes), roof
}

// svgText is a string a figure draws, unrotated, as its SVG holds it.
type svgText struct {
	text       string
	x, y, size float64 // the baseline's left end, y up, in points
}

var (
	svgSize    = regexp.MustCompile(`<svg width="([0-9.]+)pt" height="([0-9.]+)pt"`)
	svgTextRE  = regexp.MustCompile(`(?s)<text x="([-0-9.e]+)" y="([-0-9.e]+)" transform="scale\(1, -1\)"\s*style="[^"]*font-size:([0-9.]+)px[^"]*">([^<]*)</text>`)
	svgRotated = regexp.MustCompile(`(?s)<g transform="rotate\([^)]*\)">.*?</g>`)
	svgPath    = regexp.MustCompile(`<path d="M([-0-9.e]+),([-0-9.e]+)L([-0-9.e]+),([-0-9.e]+)" style="[^"]*stroke-width:([0-9.]+)"`)
)

// readSVG returns a figure's size, its unrotated texts and its vertical
// strokes of width 0.9 pt: the error bars (caps are horizontal).
func readSVG(t *testing.T, path string) (w, h float64, texts []svgText, bars [][3]float64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	m := svgSize.FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("%s: no size", path)
	}
	w, _ = strconv.ParseFloat(m[1], 64)
	h, _ = strconv.ParseFloat(m[2], 64)
	for _, m := range svgTextRE.FindAllStringSubmatch(svgRotated.ReplaceAllString(doc, ""), -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		size, _ := strconv.ParseFloat(m[3], 64)
		texts = append(texts, svgText{text: m[4], x: x, y: -y, size: size})
	}
	for _, m := range svgPath.FindAllStringSubmatch(doc, -1) {
		f := make([]float64, 5)
		for i := range f {
			f[i], _ = strconv.ParseFloat(m[i+1], 64)
		}
		if f[4] == 0.9 && f[0] == f[2] && f[1] != f[3] {
			bars = append(bars, [3]float64{f[0], math.Min(f[1], f[3]), math.Max(f[1], f[3])})
		}
	}
	return w, h, texts, bars
}

// box is a text's extent: its width and, about the baseline, the font's
// ascent and descent.
func (s svgText) box() vg.Rectangle {
	face := font.DefaultCache.Lookup(plot.DefaultFont, vg.Length(s.size))
	ext := face.Extents()
	return vg.Rectangle{Min: vg.Point{X: vg.Length(s.x), Y: vg.Length(s.y) - ext.Descent},
		Max: vg.Point{X: vg.Length(s.x) + face.Width(s.text), Y: vg.Length(s.y) + ext.Ascent}}
}

// longTitle is an emulated run's title with a device roof, the longest a
// run writes (it was clipped on the left: "n stepbench emulated GPU ...").
const longTitle = "llama-tiny on stepbench emulated GPU (cuda/emu, 132 SMs, 1000 MHz) (emulated: CPU times)"

// Every text of every figure lies inside the canvas, a long title wrapped
// rather than clipped; the roofline's batch labels overlap neither each
// other nor an error bar, dense or noisy, and most of them are drawn. The
// figures are written as SVG and read back: what a viewer shows.
func TestFigureTextInsideAndApart(t *testing.T) {
	noisy, roof := noisyReports(t)
	dense, _ := sweepReports(t)
	dir := t.TempDir()
	for name, shapes := range map[string][]report.ShapeReport{"noisy": noisy, "dense": dense} {
		written, err := Run(filepath.Join(dir, name+".svg"), &roof, shapes, longTitle)
		if err != nil {
			t.Fatal(err)
		}
		timeline := filepath.Join(dir, name+".timeline.svg")
		if err := WriteTimelinePlot(timeline, shapes, longTitle+": timeline"); err != nil {
			t.Fatal(err)
		}
		for _, path := range append(written, timeline) {
			w, h, texts, _ := readSVG(t, path)
			for _, s := range texts {
				if b := s.box(); b.Min.X < 0 || b.Min.Y < 0 || float64(b.Max.X) > w || float64(b.Max.Y) > h {
					t.Errorf("%s: %q at %v lies outside the %gx%g canvas", filepath.Base(path), s.text, b, w, h)
				}
			}
		}
		checkBatchLabels(t, name, written[0], 2*len(shapes))
	}
}

// checkBatchLabels wants the roofline's batch labels apart from each other
// and from every error bar, and at least half of the points labelled.
func checkBatchLabels(t *testing.T, name, path string, points int) {
	t.Helper()
	_, _, texts, bars := readSVG(t, path)
	var labels []vg.Rectangle
	for _, s := range texts {
		if s.size != 9 || !strings.HasPrefix(s.text, "b=") {
			continue
		}
		b := s.box()
		for _, other := range labels {
			if overlaps(b, other) {
				t.Errorf("%s: label %q at %v overlaps another at %v", name, s.text, b, other)
			}
		}
		for _, bar := range bars {
			if thin := (vg.Rectangle{Min: vg.Point{X: vg.Length(bar[0] - 0.45), Y: vg.Length(bar[1])},
				Max: vg.Point{X: vg.Length(bar[0] + 0.45), Y: vg.Length(bar[2])}}); overlaps(b, thin) {
				t.Errorf("%s: label %q at %v crosses the error bar at x=%.1f [%.1f, %.1f]", name, s.text, b, bar[0], bar[1], bar[2])
			}
		}
		labels = append(labels, b)
	}
	if len(bars) < points/2 || len(labels) < points/2 {
		t.Errorf("%s: %d error bars and %d labels of %d points", name, len(bars), len(labels), points)
	}
}

// With STEPBENCH_PLOT_DIR set, the long-title figures are also written
// there as PNGs, to look at.
func TestWriteLayoutFiguresToLookAt(t *testing.T) {
	out := os.Getenv("STEPBENCH_PLOT_DIR")
	if out == "" {
		t.Skip("STEPBENCH_PLOT_DIR names where to write the figures")
	}
	noisy, roof := noisyReports(t)
	dense, _ := sweepReports(t)
	for name, shapes := range map[string][]report.ShapeReport{"noisy": noisy, "dense": dense} {
		if _, err := Run(filepath.Join(out, name+"-long.png"), &roof, shapes, longTitle); err != nil {
			t.Fatal(err)
		}
		if err := WriteTimelinePlot(filepath.Join(out, name+"-long.timeline.png"), shapes, longTitle+": timeline"); err != nil {
			t.Fatal(err)
		}
	}
}

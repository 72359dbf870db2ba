package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"stepbench/bench"
	"stepbench/runner"

	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
)

// cpuRunShapes are a sweep as the CPU backend reports it: host times, no
// device times, two batch sizes.
func cpuRunShapes() []bench.ShapeResult {
	var shapes []bench.ShapeResult
	for _, b := range []int{1, 4} {
		prefill, decode := 0.02*float64(b), 0.004+0.001*float64(b)
		shapes = append(shapes, bench.ShapeResult{Shape: bench.Shape{Batch: b, InputLen: 16, OutputLen: 4}, Complete: true, Summary: bench.ShapeSummary{
			PrefillHostSeconds: stats.Summarize([]float64{prefill, prefill * 1.1}),
			DecodeHostSeconds:  stats.Summarize([]float64{decode, decode * 1.05, decode}),
			TotalHostSeconds:   stats.Summarize([]float64{prefill + 3*decode}),
		}})
	}
	return shapes
}

func TestPlotsFromACPURun(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := h100.Roof()
	for _, c := range []struct {
		name string
		roof *roofline.Roof
		ext  string
	}{{"svg with roof", &roof, ".svg"}, {"png with roof", &roof, ".png"}, {"svg without roof", nil, ".svg"}, {"png without roof", nil, ".png"}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sweep"+c.ext)
			written, err := Run(path, c.roof, report.Builder{Model: cfg, Roof: c.roof}.Shapes(cpuRunShapes()), "llama-tiny on cpu")
			if err != nil {
				t.Fatal(err)
			}
			if len(written) != 2 || written[1] != filepath.Join(filepath.Dir(path), "sweep.sweep"+c.ext) {
				t.Fatalf("written %v", written)
			}
			for _, p := range written {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if c.ext == ".svg" {
					checkSVG(t, data, p == written[0])
					roofs := bytes.Contains(data, []byte("memory roof")) && bytes.Contains(data, []byte("compute roof"))
					if p == written[0] && roofs != (c.roof != nil) {
						t.Errorf("%s: roofs in the legend %v, want %v", p, roofs, c.roof != nil)
					}
				} else if _, err := png.Decode(bytes.NewReader(data)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
		})
	}
	if _, err := Run(filepath.Join(t.TempDir(), "x.pdf"), nil, nil, "t"); err == nil {
		t.Error(".pdf accepted")
	}
	// No positive point at all must not panic on the log axes.
	if err := WriteSweepPlot(filepath.Join(t.TempDir(), "empty.svg"), nil, "empty"); err != nil {
		t.Errorf("empty sweep: %v", err)
	}
}

// checkSVG parses the whole document and wants an <svg> root with content.
func checkSVG(t *testing.T, data []byte, roofline bool) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	root, elements := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			elements++
		}
	}
	if root != "svg" || elements < 20 {
		t.Errorf("root %q with %d elements", root, elements)
	}
	if roofline && !bytes.Contains(data, []byte("b=4")) {
		t.Error("roofline plot lacks the batch label \"b=4\"")
	}
}

func TestDecadeTicks(t *testing.T) {
	tests := []struct {
		min, max float64
		want     []string
	}{
		{0.7, 2100, []string{"1", "10", "100", "1000"}},
		{3, 31, []string{"5", "10", "20"}},
		{1.9e12, 1.5e15, []string{"10T", "100T", "1P"}},
		{0.012, 0.05, []string{"0.02", "0.05"}},
	}
	for _, tc := range tests {
		var got []string
		for _, tick := range (decadeTicks{}).Ticks(tc.min, tc.max) {
			if tick.Label != "" {
				got = append(got, tick.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("[%g, %g]: labels %v, want %v", tc.min, tc.max, got, tc.want)
		}
	}
	// An axis whose padded span holds fewer than two labels is widened to decades.
	var a plot.Axis
	logAxis(&a, []float64{0.012, 0.013})
	if a.Min != 0.001 || a.Max != 0.1 {
		t.Errorf("narrow axis [%g, %g], want [0.001, 0.1]", a.Min, a.Max)
	}
}

// Labels never overlap each other or a marker, and stay inside the data
// area; those that cannot be placed are left out.
func TestPointLabelsDoNotOverlap(t *testing.T) {
	var labels []pointLabel
	for i := 0; i < 60; i++ {
		x := 1 + float64(i%12)*0.05 // a dense cluster
		labels = append(labels, pointLabel{X: x, Y: 1 + float64(i/12)*0.1, Text: "b=" + strings.Repeat("9", 1+i%3), Priority: i % 2})
	}
	p := plot.New()
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0.9, 1.7, 0.9, 1.5
	pl := newPointLabels(labels, vg.Points(markerRadius))
	rec := &recorder.Canvas{}
	c := draw.NewCanvas(rec, 10*vg.Centimeter, 6*vg.Centimeter)
	pl.Plot(c, p)
	var boxes []vg.Rectangle
	for _, a := range rec.Actions {
		fs, ok := a.(*recorder.FillString)
		if !ok {
			continue
		}
		w, h := pl.style.Width(fs.String), pl.style.Height(fs.String)
		box := vg.Rectangle{Min: fs.Point, Max: vg.Point{X: fs.Point.X + w, Y: fs.Point.Y + h}}
		if box.Min.X < c.Min.X || box.Max.X > c.Max.X || box.Min.Y < c.Min.Y || box.Max.Y > c.Max.Y {
			t.Errorf("label %q outside the data area: %v", fs.String, box)
		}
		for _, other := range boxes {
			if overlaps(box, other) {
				t.Fatalf("label %q at %v overlaps a label at %v", fs.String, box, other)
			}
		}
		boxes = append(boxes, box)
	}
	if len(boxes) == 0 || len(boxes) == len(labels) {
		t.Errorf("%d of %d labels placed: want some, not all, in so dense a cluster", len(boxes), len(labels))
	}
}

// The sweep draws one line per input length, in batch order.
func TestSweepSeriesPerInputLength(t *testing.T) {
	points := []SweepPoint{{Batch: 4, InputLen: 128, PrefillSeconds: 0.04}, {Batch: 1, InputLen: 1024, PrefillSeconds: 0.2},
		{Batch: 1, InputLen: 128, PrefillSeconds: 0.01}, {Batch: 4, InputLen: 1024, PrefillSeconds: 0.8}}
	prefill := func(s SweepPoint) float64 { return s.PrefillSeconds }
	got := sweepSeries(points, seriesKey{Len: 128}, prefill)
	if len(got) != 2 || got[0].X != 1 || got[0].Y != 10 || got[1].X != 4 || got[1].Y != 40 {
		t.Errorf("input 128 series %v", got)
	}
	path := filepath.Join(t.TempDir(), "s.svg")
	if err := WriteSweepPlot(path, points, "two inputs"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	for _, want := range []string{"input 128 tokens", "input 1024 tokens", "prefill"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("sweep SVG lacks %q", want)
		}
	}
}

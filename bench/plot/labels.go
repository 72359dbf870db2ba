package plot

import (
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// pointLabel is a text to put next to a data point.
type pointLabel struct {
	X, Y     float64
	Text     string
	Color    color.Color
	Priority int // lower is placed first (kept when space is short)
	// Low and High are the y extent of the point's error bar (0, 0: none).
	Low, High float64
}

// pointLabels is a plotter that puts each label next to its point where it
// overlaps no other label, no marker, no error bar and no edge: of the
// places around the point it takes the cheapest, a place one text height
// farther out costing 2, crossing a series' line 1 and a roof 3, and leaves
// the label out when none is free, so labels never collide (a series' first
// and last points go first).
type pointLabels struct {
	labels       []pointLabel
	markerRadius vg.Length
	capWidth     vg.Length     // error bars' caps: the bars' width
	lines        []plotter.XYs // the series' lines, in data coordinates: labels avoid them where they can
	roofs        []plotter.XYs // the roofs' lines: avoided harder
	style        text.Style
	placed       []placedLabel  // after Plot: where each placed label went
	obstacles    []vg.Rectangle // after Plot: the markers and error bars
}

// segment is a line segment on the canvas and what crossing it costs a label.
type segment struct {
	a, b vg.Point
	cost int
}

// placedLabel is a label as drawn: its text and box on the canvas.
type placedLabel struct {
	Text string
	Box  vg.Rectangle
}

func newPointLabels(labels []pointLabel, markerRadius vg.Length) *pointLabels {
	return &pointLabels{labels: labels, markerRadius: markerRadius, capWidth: vg.Points(5),
		style: text.Style{Font: font.From(plot.DefaultFont, vg.Points(9)), Handler: plot.DefaultTextHandler}}
}

// Plot implements plot.Plotter.
func (l *pointLabels) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	l.placed, l.obstacles = nil, nil
	r := l.markerRadius
	for _, p := range l.labels { // every marker and error bar is an obstacle
		x, y := trX(p.X), trY(p.Y)
		l.obstacles = append(l.obstacles, vg.Rectangle{Min: vg.Point{X: x - r, Y: y - r}, Max: vg.Point{X: x + r, Y: y + r}})
		if p.High > p.Low && p.Low > 0 {
			half := max(l.capWidth/2, vg.Points(1))
			l.obstacles = append(l.obstacles, vg.Rectangle{Min: vg.Point{X: x - half, Y: trY(p.Low)}, Max: vg.Point{X: x + half, Y: trY(p.High)}})
		}
	}
	var segments []segment
	for cost, lines := range map[int][]plotter.XYs{1: l.lines, 3: l.roofs} {
		for _, line := range lines {
			for i := 1; i < len(line); i++ {
				segments = append(segments, segment{vg.Point{X: trX(line[i-1].X), Y: trY(line[i-1].Y)}, vg.Point{X: trX(line[i].X), Y: trY(line[i].Y)}, cost})
			}
		}
	}
	taken := append([]vg.Rectangle(nil), l.obstacles...)
	order := make([]int, len(l.labels))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return l.labels[order[a]].Priority < l.labels[order[b]].Priority })
	for _, i := range order {
		p := l.labels[i]
		box, ok := l.place(c, trX(p.X), trY(p.Y), p.Text, taken, segments)
		if !ok {
			continue
		}
		taken = append(taken, box)
		l.placed = append(l.placed, placedLabel{Text: p.Text, Box: box})
		sty := l.style
		sty.Color = p.Color
		c.FillText(sty, box.Min, p.Text)
	}
}

// place returns the cheapest free box for text around (x, y): free of
// taken and inside the canvas (see pointLabels for the costs).
func (l *pointLabels) place(c draw.Canvas, x, y vg.Length, txt string, taken []vg.Rectangle, segments []segment) (vg.Rectangle, bool) {
	w, h := l.style.Width(txt), l.style.Height(txt)
	best, bestCost := vg.Rectangle{}, -1
	for ring, gap := range []vg.Length{l.markerRadius + vg.Points(2), l.markerRadius + vg.Points(2) + h} {
		for _, off := range []vg.Point{
			{X: gap, Y: -h / 2}, {X: -gap - w, Y: -h / 2}, {X: -w / 2, Y: gap}, {X: -w / 2, Y: -gap - h},
			{X: gap, Y: gap / 2}, {X: gap, Y: -gap/2 - h}, {X: -gap - w, Y: gap / 2}, {X: -gap - w, Y: -gap/2 - h},
		} {
			box := vg.Rectangle{Min: vg.Point{X: x + off.X, Y: y + off.Y}, Max: vg.Point{X: x + off.X + w, Y: y + off.Y + h}}
			if !inside(box, c.Rectangle) || overlapsAny(box, taken) {
				continue
			}
			cost := 2 * ring
			for _, s := range segments {
				if segmentCrosses(box, s.a, s.b) {
					cost += s.cost
				}
			}
			if bestCost < 0 || cost < bestCost {
				best, bestCost = box, cost
			}
		}
	}
	return best, bestCost >= 0
}

func inside(box, area vg.Rectangle) bool {
	return box.Min.X >= area.Min.X && box.Max.X <= area.Max.X && box.Min.Y >= area.Min.Y && box.Max.Y <= area.Max.Y
}

func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

func overlapsAny(box vg.Rectangle, others []vg.Rectangle) bool {
	for _, o := range others {
		if overlaps(box, o) {
			return true
		}
	}
	return false
}

// segmentCrosses says whether the segment a-b meets box (Liang-Barsky
// clipping: the part of the segment inside the box is not empty).
func segmentCrosses(box vg.Rectangle, a, b vg.Point) bool {
	t0, t1 := 0.0, 1.0
	dx, dy := float64(b.X-a.X), float64(b.Y-a.Y)
	for _, edge := range [4][2]float64{
		{-dx, float64(a.X - box.Min.X)}, {dx, float64(box.Max.X - a.X)},
		{-dy, float64(a.Y - box.Min.Y)}, {dy, float64(box.Max.Y - a.Y)},
	} {
		p, q := edge[0], edge[1]
		if p == 0 {
			if q < 0 {
				return false
			}
			continue
		}
		t := q / p
		if p < 0 {
			t0 = max(t0, t)
		} else {
			t1 = min(t1, t)
		}
		if t0 > t1 {
			return false
		}
	}
	return true
}

package plot

import (
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
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
}

// pointLabels is a plotter that puts each label next to its point where it
// overlaps no other label, no marker and no edge: it tries eight places
// around the point and leaves the label out when none is free, so labels
// never collide (a series' first and last points go first).
type pointLabels struct {
	labels       []pointLabel
	markerRadius vg.Length
	style        text.Style
}

func newPointLabels(labels []pointLabel, markerRadius vg.Length) *pointLabels {
	return &pointLabels{labels: labels, markerRadius: markerRadius,
		style: text.Style{Font: font.From(plot.DefaultFont, vg.Points(9)), Handler: plot.DefaultTextHandler}}
}

// Plot implements plot.Plotter.
func (l *pointLabels) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	r := l.markerRadius
	var taken []vg.Rectangle
	for _, p := range l.labels { // every marker is an obstacle
		x, y := trX(p.X), trY(p.Y)
		taken = append(taken, vg.Rectangle{Min: vg.Point{X: x - r, Y: y - r}, Max: vg.Point{X: x + r, Y: y + r}})
	}
	order := make([]int, len(l.labels))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return l.labels[order[a]].Priority < l.labels[order[b]].Priority })
	for _, i := range order {
		p := l.labels[i]
		box, ok := l.place(c, trX(p.X), trY(p.Y), p.Text, taken)
		if !ok {
			continue
		}
		taken = append(taken, box)
		sty := l.style
		sty.Color = p.Color
		c.FillText(sty, box.Min, p.Text)
	}
}

// place returns the first free box for text around (x, y).
func (l *pointLabels) place(c draw.Canvas, x, y vg.Length, txt string, taken []vg.Rectangle) (vg.Rectangle, bool) {
	w, h := l.style.Width(txt), l.style.Height(txt)
	gap := l.markerRadius + vg.Points(2)
	for _, off := range []vg.Point{
		{X: gap, Y: -h / 2}, {X: -gap - w, Y: -h / 2}, {X: -w / 2, Y: gap}, {X: -w / 2, Y: -gap - h},
		{X: gap, Y: gap / 2}, {X: gap, Y: -gap/2 - h}, {X: -gap - w, Y: gap / 2}, {X: -gap - w, Y: -gap/2 - h},
	} {
		box := vg.Rectangle{Min: vg.Point{X: x + off.X, Y: y + off.Y}, Max: vg.Point{X: x + off.X + w, Y: y + off.Y + h}}
		if box.Min.X < c.Min.X || box.Max.X > c.Max.X || box.Min.Y < c.Min.Y || box.Max.Y > c.Max.Y {
			continue
		}
		free := true
		for _, t := range taken {
			if overlaps(box, t) {
				free = false
				break
			}
		}
		if free {
			return box, true
		}
	}
	return vg.Rectangle{}, false
}

func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

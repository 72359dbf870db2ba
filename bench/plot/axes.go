package plot

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// decadeTicks marks a log axis at every power of ten, labelled, with
// unlabelled minor ticks at 2…9 times each; when the axis spans at most two
// decades, 2× and 5× are labelled too, so that no axis has a single label.
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) {
		return nil
	}
	labelMinor := math.Log10(max/min) <= 2
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		decade := math.Pow(10, e)
		for m := 1.0; m <= 9; m++ {
			v := m * decade
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			tick := plot.Tick{Value: v}
			if m == 1 || (labelMinor && (m == 2 || m == 5)) {
				tick.Label = tickLabel(v)
			}
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

// valueTicks labels exactly the given values (the batch sizes measured).
type valueTicks []float64

func (v valueTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for _, x := range v {
		if x >= min && x <= max {
			ticks = append(ticks, plot.Tick{Value: x, Label: tickLabel(x)})
		}
	}
	return ticks
}

// tickLabel prints 0.01 … 1000 as such and larger values with an SI
// prefix: 10k, 1M, 100T.
func tickLabel(v float64) string {
	if v < 1e4 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	for _, p := range []struct {
		scale  float64
		prefix string
	}{{1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.scale {
			return strconv.FormatFloat(v/p.scale, 'g', 4, 64) + p.prefix
		}
	}
	return fmt.Sprint(v)
}

// logAxis makes a a log axis over the positive values, padded by 1.5× each
// way, and widened to the enclosing powers of ten only when fewer than two
// of its ticks would carry a label, so that every axis reads at a glance
// without a band of empty decades.
func logAxis(a *plot.Axis, values []float64) {
	a.Scale, a.Tick.Marker = plot.LogScale{}, decadeTicks{}
	lo, hi := spanOf(values)
	if !(lo > 0) {
		lo, hi = 1, 10
	}
	lo, hi = lo/1.5, hi*1.5
	labelled := 0
	for _, t := range (decadeTicks{}).Ticks(lo, hi) {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 {
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	}
	a.Min, a.Max = lo, hi
}

// spanOf is the min and max of the positive finite values (0, 0 when none).
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

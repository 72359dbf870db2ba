package report

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/stats"
)

// RankTableTitle heads the per-rank table of a tensor-parallel run.
const RankTableTitle = "tensor-parallel ranks: median device ms per rank (measured; a step's device time, above, is its slowest rank's)"

// rankMedians are one shape's per-rank medians: the prefill's and the decode
// steps', each over the shape's samples; nil when the samples carry no
// per-rank times.
func rankMedians(s ShapeReport) (prefill, decode []float64) {
	var per [2][][]float64
	for _, x := range s.Samples {
		phase := 0
		if x.Phase == bench.PhaseDecode {
			phase = 1
		}
		for r, sec := range x.RankDeviceSeconds {
			for len(per[phase]) <= r {
				per[phase] = append(per[phase], nil)
			}
			per[phase][r] = append(per[phase][r], sec)
		}
	}
	med := func(xs [][]float64) []float64 {
		var out []float64
		for _, x := range xs {
			out = append(out, stats.Median(x))
		}
		return out
	}
	return med(per[0]), med(per[1])
}

// HasRanks reports whether any shape has per-rank device times.
func HasRanks(shapes []ShapeReport) bool {
	for _, s := range shapes {
		if p, d := rankMedians(s); len(p)+len(d) > 0 {
			return true
		}
	}
	return false
}

// WriteRankTable writes, per shape and rank, the rank's median prefill and
// decode-step device times (ms): how evenly the ranks share each step.
// ranks names the samples' ranks in order (nil: 0, 1, ...).
func WriteRankTable(w io.Writer, shapes []ShapeReport, ranks []int) error {
	if _, err := fmt.Fprintln(w, RankTableTitle); err != nil {
		return fmt.Errorf("write rank table: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, []string{"batch", "input", "output", "rank", "prefill_dev_ms", "decode_dev_ms"})
	for _, s := range shapes {
		prefill, decode := rankMedians(s)
		for r := 0; r < max(len(prefill), len(decode)); r++ {
			name := r
			if r < len(ranks) {
				name = ranks[r]
			}
			writeRow(tw, []string{strconv.Itoa(s.Batch), strconv.Itoa(s.InputLen), strconv.Itoa(s.OutputLen), strconv.Itoa(name),
				sigMilliseconds(at(prefill, r), r < len(prefill)), sigMilliseconds(at(decode, r), r < len(decode))})
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write rank table: %w", err)
	}
	return nil
}

func at(xs []float64, i int) float64 {
	if i < len(xs) {
		return xs[i]
	}
	return 0
}

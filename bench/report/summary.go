package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/stats"
)

// FloorFunc gives a shape's roofline floors: the least time its prefill and
// one decode step can take at the GPU's peak rates (seconds).
type FloorFunc func(batch, inputLen, outputLen int) (prefillFloorSeconds, decodeFloorSeconds float64)

// SummaryNoiseLegend explains the ± beside the summary table's medians.
const SummaryNoiseLegend = "±: achieved noise, the half-width of the 95% interval of the median over iterations relative to it " +
	"(decode: of each iteration's median step; overall: of the iteration totals); n/a: fewer than 6 iterations"

// WriteSummaryTable writes one aligned row per shape: the timed iterations
// and why they stopped, medians of host and device times in milliseconds
// each with its achieved noise (see SummaryNoiseLegend), the decode host
// p90, and the overall throughput (tokens/s, one_batch's formula over the
// median iteration total). With floors (may be nil) it adds each floor and
// the attainment floor/median device time, marked "derived" because it is a
// ratio of a model to a measurement, not a measurement. A missing value
// prints as "-".
func WriteSummaryTable(w io.Writer, shapes []bench.ShapeResult, floors FloorFunc) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"batch", "input", "output", "iters", "stop",
		"prefill_host_ms", "prefill_dev_ms", "decode_host_ms", "decode_dev_ms", "decode_host_p90_ms", "overall_tok/s"}
	if floors != nil {
		header = append(header,
			"prefill_floor_ms", "prefill_attain(derived)", "decode_floor_ms", "decode_attain(derived)")
	}
	writeRow(tw, header)
	for _, s := range shapes {
		sum := s.Summary
		hasDecode := sum.DecodeHostSeconds.N > 0
		row := []string{
			fmt.Sprint(s.Batch), fmt.Sprint(s.InputLen), fmt.Sprint(s.OutputLen),
			fmt.Sprint(len(s.Iterations)), orDash(s.StopReason),
			withNoise(milliseconds(sum.PrefillHostSeconds.Median, sum.PrefillHostSeconds.N > 0), s.Noise.PrefillHost),
			withNoise(milliseconds(sum.PrefillDeviceSeconds.Median, sum.PrefillDeviceSeconds.N > 0), s.Noise.PrefillDevice),
			withNoise(milliseconds(sum.DecodeHostSeconds.Median, hasDecode), s.Noise.DecodeHost),
			withNoise(milliseconds(sum.DecodeDeviceSeconds.Median, hasDecode), s.Noise.DecodeDevice),
			milliseconds(sum.DecodeHostSeconds.P90, hasDecode),
			withNoise(optional(bench.TokensPerSecond((s.InputLen+s.OutputLen)*s.Batch, sum.TotalHostSeconds.Median), "%.2f",
				sum.TotalHostSeconds.N > 0), s.Noise.TotalHost),
		}
		if floors != nil {
			prefillFloor, decodeFloor := floors(s.Batch, s.InputLen, s.OutputLen)
			row = append(row,
				milliseconds(prefillFloor, prefillFloor > 0),
				attainment(prefillFloor, sum.PrefillDeviceSeconds.Median),
				milliseconds(decodeFloor, decodeFloor > 0 && hasDecode),
				attainment(decodeFloor, sum.DecodeDeviceSeconds.Median),
			)
		}
		writeRow(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	if _, err := fmt.Fprintln(w, SummaryNoiseLegend); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	return nil
}

// withNoise puts a median's achieved noise beside it: "12.345±0.31%".
func withNoise(cell string, noise float64) string {
	switch {
	case cell == "-" || math.IsNaN(noise):
		return cell
	case math.IsInf(noise, 0):
		return cell + "±n/a"
	}
	return cell + stats.NoiseText(noise)
}

func writeRow(w io.Writer, cells []string) {
	// A trailing tab makes tabwriter right-align the last column too.
	fmt.Fprint(w, strings.Join(cells, "\t")+"\t\n")
}

func milliseconds(seconds float64, ok bool) string {
	return optional(seconds*1e3, "%.3f", ok)
}

// attainment is floor/measured as a percentage; "-" when either is missing.
func attainment(floorSeconds, measuredSeconds float64) string {
	return optional(100*floorSeconds/measuredSeconds, "%.1f%%", floorSeconds > 0 && measuredSeconds > 0)
}

func optional(v float64, format string, ok bool) string {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

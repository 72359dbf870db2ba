package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// FloorFunc gives a shape's roofline floors: the least time its prefill and
// one decode step can take at the GPU's peak rates (seconds).
type FloorFunc func(batch, inputLen, outputLen int) (prefillFloorSeconds, decodeFloorSeconds float64)

// WriteSummaryTable writes one aligned row per shape: medians of host and
// device times in milliseconds, the decode host p90, and the overall
// throughput (tokens/s, one_batch's formula over the median iteration
// total). With floors (may be nil) it adds each floor and the attainment
// floor/median device time, marked "derived" because it is a ratio of a model
// to a measurement, not a measurement. A missing value prints as "-".
func WriteSummaryTable(w io.Writer, shapes []ShapeResult, floors FloorFunc) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"batch", "input", "output",
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
			milliseconds(sum.PrefillHostSeconds.Median, sum.PrefillHostSeconds.N > 0),
			milliseconds(sum.PrefillDeviceSeconds.Median, sum.PrefillDeviceSeconds.N > 0),
			milliseconds(sum.DecodeHostSeconds.Median, hasDecode),
			milliseconds(sum.DecodeDeviceSeconds.Median, hasDecode),
			milliseconds(sum.DecodeHostSeconds.P90, hasDecode),
			optional(tokensPerSecond((s.InputLen+s.OutputLen)*s.Batch, sum.TotalHostSeconds.Median), "%.2f",
				sum.TotalHostSeconds.N > 0),
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
	return nil
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
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
)

// SummaryNoiseLegend explains the ± beside the summary table's medians.
const SummaryNoiseLegend = "±: achieved noise, the half-width of the 95% interval of the median over iterations relative to it " +
	"(decode: of each iteration's median step; overall: of the iteration totals); n/a: fewer than 6 iterations"

// EmulatedNote is printed with every output made on the emulated device.
const EmulatedNote = "note: the emulated CUDA device ran this (cuda/emu, STEPBENCH_CUDA_LIBS): its times and telemetry are the CPU's, not GPU times"

// WriteSummaryTable writes one aligned row per shape: the timed iterations
// and why they stopped, medians of host and device times in milliseconds
// each with its achieved noise (see SummaryNoiseLegend), the decode host
// p90, and the overall throughput (tokens/s, one_batch's formula over the
// median iteration total). Under a roof (may be nil) it adds each phase's
// floor and attainment from the shape's roofline points, the run's one
// attainment figure (floor / median device time of the prefill and of the
// median decode step), marked "derived": a ratio of a model to a
// measurement, not a measurement. A missing value prints as "-".
func WriteSummaryTable(w io.Writer, shapes []ShapeReport, roof *roofline.Roof) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"batch", "input", "output", "iters", "stop",
		"prefill_host_ms", "prefill_dev_ms", "decode_host_ms", "decode_dev_ms", "decode_host_p90_ms", "overall_tok/s"}
	if roof != nil {
		header = append(header,
			"prefill_floor_ms", "prefill_attain(derived)", "decode_floor_ms", "decode_attain(derived)")
	}
	writeRow(tw, header)
	for _, s := range shapes {
		row := summaryRow(s)
		if roof != nil {
			prefill, decode := stepPoint(s.RooflinePoints, bench.PhasePrefill), stepPoint(s.RooflinePoints, bench.PhaseDecode)
			row = append(row, milliseconds(prefill.FloorSeconds, prefill.FloorSeconds > 0), percent(prefill.AttainmentFraction),
				milliseconds(decode.FloorSeconds, decode.FloorSeconds > 0), percent(decode.AttainmentFraction))
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

// summaryRow is a shape's measured cells.
func summaryRow(s ShapeReport) []string {
	noise := bench.Noise{PrefillHost: math.NaN(), PrefillDevice: math.NaN(), DecodeHost: math.NaN(), DecodeDevice: math.NaN(), TotalHost: math.NaN()}
	if s.Noise != nil {
		noise = *s.Noise
	}
	hasDecode := s.DecodeHostSeconds.N > 0
	return []string{
		fmt.Sprint(s.Batch), fmt.Sprint(s.InputLen), fmt.Sprint(s.OutputLen),
		fmt.Sprint(s.Iterations), orDash(s.StopReason),
		withNoise(milliseconds(s.PrefillHostSeconds.Median, s.PrefillHostSeconds.N > 0), noise.PrefillHost),
		withNoise(milliseconds(s.PrefillDeviceSeconds.Median, s.PrefillDeviceSeconds.N > 0), noise.PrefillDevice),
		withNoise(milliseconds(s.DecodeHostSeconds.Median, hasDecode), noise.DecodeHost),
		withNoise(milliseconds(s.DecodeDeviceSeconds.Median, hasDecode), noise.DecodeDevice),
		milliseconds(s.DecodeHostSeconds.P90, hasDecode),
		withNoise(optional(bench.TokensPerSecond((s.InputLen+s.OutputLen)*s.Batch, s.TotalHostSeconds.Median), "%.2f",
			s.TotalHostSeconds.N > 0), noise.TotalHost),
	}
}

// stepPoint is the phase's whole-step point (no op), or a zero point.
func stepPoint(points []roofline.Point, phase string) roofline.Point {
	for _, p := range points {
		if p.Phase == phase && p.Op == "" {
			return p
		}
	}
	return roofline.Point{}
}

// percent prints a fraction as a percentage; "-" when it is not positive.
func percent(fraction float64) string { return optional(100*fraction, "%.1f%%", fraction > 0) }

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

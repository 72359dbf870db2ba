package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
)

// SummaryNoiseLegend explains the ± beside the summary table's medians.
const SummaryNoiseLegend = "±: achieved noise, the half-width of the 95% interval of the median over iterations relative to it " +
	"(decode: of each iteration's median step; overall: of the iteration totals); n/a: fewer than 6 iterations"

// SummaryLegend explains the columns of the (narrow) summary table.
const SummaryLegend = "ms: median device time of the prefill and of an iteration's median decode step; tok/s: one_batch's overall " +
	"throughput; ±: noise, the 95% interval's half-width relative to the median (n/a: under 6 iterations)"

// attainLegend adds the attainment columns to SummaryLegend.
const attainLegend = "; attain: floor / time (derived)"

// EmulatedNote is printed with every output made on the emulated device.
const EmulatedNote = "note: the emulated CUDA device ran this (cuda/emu, STEPBENCH_CUDA_LIBS): its times and telemetry are the CPU's, not GPU times"

// SummaryColumns is the width the summary table and its lines keep to.
const SummaryColumns = 120

// WriteSummaryTable writes the summary within SummaryColumns columns: one
// row per shape with its timed iterations and why they stopped, the median
// device time (ms) of the prefill and of the median decode step, each with
// its achieved noise, the overall throughput (tokens/s, one_batch's formula
// over the median iteration total) and, under a roof (may be nil), each
// phase's attainment (derived), then the legend. Figures keep four
// significant digits. WriteWideSummaryTable has every column.
func WriteSummaryTable(w io.Writer, shapes []ShapeReport, roof *roofline.Roof) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ragged := HasRagged(shapes)
	header := withKVTokens([]string{"batch", "input", "output", "iters", "stop", "prefill_ms", "decode_ms", "tok/s"}, ragged)
	if roof != nil {
		header = append(header, "prefill_attain", "decode_attain")
	}
	writeRow(tw, header)
	for _, s := range shapes {
		noise := shapeNoise(s)
		prefill, prefillNoise := s.PrefillDeviceSeconds, noise.PrefillDevice
		decode, decodeNoise := s.DecodeDeviceSeconds, noise.DecodeDevice
		if prefill.N == 0 || prefill.Median == 0 {
			prefill, prefillNoise, decode, decodeNoise = s.PrefillHostSeconds, noise.PrefillHost, s.DecodeHostSeconds, noise.DecodeHost
		}
		row := shapeCells(s, ragged, fmt.Sprint(s.Iterations), orDash(s.StopReason),
			withShortNoise(sigMilliseconds(prefill.Median, prefill.N > 0), prefillNoise),
			withShortNoise(sigMilliseconds(decode.Median, decode.N > 0), decodeNoise),
			withShortNoise(sigOptional(bench.TokensPerSecond(s.IterationTokens(), s.TotalHostSeconds.Median), s.TotalHostSeconds.N > 0),
				noise.TotalHost))
		if roof != nil {
			row = append(row, sigPercent(stepPoint(s.RooflinePoints, bench.PhasePrefill).AttainmentFraction),
				sigPercent(stepPoint(s.RooflinePoints, bench.PhaseDecode).AttainmentFraction))
		}
		writeRow(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	legend := SummaryLegend
	if roof != nil {
		legend += attainLegend
	}
	if ragged {
		legend += "; " + RaggedLegend
	}
	if _, err := fmt.Fprint(w, Wrap(legend+"; --wide: every column", SummaryColumns)+raggedNotes(shapes)); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	return nil
}

// WriteWideSummaryTable writes one aligned row per shape: the timed
// iterations and why they stopped, medians of host and device times in
// milliseconds each with its achieved noise (see SummaryNoiseLegend), the
// decode host p90, and the overall throughput (tokens/s, one_batch's
// formula over the median iteration total). Under a roof (may be nil) it
// adds each phase's floor and attainment from the shape's roofline points,
// the run's one attainment figure (floor / median device time of the
// prefill and of the median decode step), marked "derived": a ratio of a
// model to a measurement, not a measurement. A missing value prints as "-".
func WriteWideSummaryTable(w io.Writer, shapes []ShapeReport, roof *roofline.Roof) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ragged := HasRagged(shapes)
	header := withKVTokens([]string{"batch", "input", "output", "iters", "stop",
		"prefill_host_ms", "prefill_dev_ms", "decode_host_ms", "decode_dev_ms", "decode_host_p90_ms", "overall_tok/s"}, ragged)
	if roof != nil {
		header = append(header,
			"prefill_floor_ms", "prefill_attain(derived)", "decode_floor_ms", "decode_attain(derived)")
	}
	writeRow(tw, header)
	for _, s := range shapes {
		row := summaryRow(s, ragged)
		if roof != nil {
			prefill, decode := stepPoint(s.RooflinePoints, bench.PhasePrefill), stepPoint(s.RooflinePoints, bench.PhaseDecode)
			row = append(row, sigMilliseconds(prefill.FloorSeconds, prefill.FloorSeconds > 0), sigPercent(prefill.AttainmentFraction),
				sigMilliseconds(decode.FloorSeconds, decode.FloorSeconds > 0), sigPercent(decode.AttainmentFraction))
		}
		writeRow(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	legend := SummaryNoiseLegend
	if ragged {
		legend += "; " + RaggedLegend
	}
	if _, err := fmt.Fprint(w, legend+"\n"+raggedNotes(shapes)); err != nil {
		return fmt.Errorf("write summary table: %w", err)
	}
	return nil
}

// shapeNoise is the shape's noise, NaN (not measured) where it has none.
func shapeNoise(s ShapeReport) bench.Noise {
	if s.Noise != nil {
		return *s.Noise
	}
	return bench.Noise{PrefillHost: math.NaN(), PrefillDevice: math.NaN(), DecodeHost: math.NaN(), DecodeDevice: math.NaN(), TotalHost: math.NaN()}
}

// summaryRow is a shape's measured cells (the wide table; ragged: with
// the kv_tokens column).
func summaryRow(s ShapeReport, ragged bool) []string {
	noise := shapeNoise(s)
	hasDecode := s.DecodeHostSeconds.N > 0
	return shapeCells(s, ragged,
		fmt.Sprint(s.Iterations), orDash(s.StopReason),
		withNoise(sigMilliseconds(s.PrefillHostSeconds.Median, s.PrefillHostSeconds.N > 0), noise.PrefillHost),
		withNoise(sigMilliseconds(s.PrefillDeviceSeconds.Median, s.PrefillDeviceSeconds.N > 0), noise.PrefillDevice),
		withNoise(sigMilliseconds(s.DecodeHostSeconds.Median, hasDecode), noise.DecodeHost),
		withNoise(sigMilliseconds(s.DecodeDeviceSeconds.Median, hasDecode), noise.DecodeDevice),
		sigMilliseconds(s.DecodeHostSeconds.P90, hasDecode),
		withNoise(sigOptional(bench.TokensPerSecond(s.IterationTokens(), s.TotalHostSeconds.Median),
			s.TotalHostSeconds.N > 0), noise.TotalHost),
	)
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

// sigPercent prints a fraction as a percentage of three significant
// digits (40.1%, 4.93%, 0.00710%); "-" when it is not positive.
func sigPercent(fraction float64) string {
	if !(fraction > 0) || math.IsInf(fraction, 0) {
		return "-"
	}
	return Sig(100*fraction, 3) + "%"
}

// withShortNoise puts a median's achieved noise beside it with two
// significant digits: "12.35±0.31%", "0.5723±4.7%".
func withShortNoise(cell string, noise float64) string {
	switch {
	case cell == "-" || math.IsNaN(noise):
		return cell
	case math.IsInf(noise, 0):
		return cell + "±n/a"
	}
	return cell + "±" + Sig(100*noise, 2) + "%"
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

// sigMilliseconds prints seconds as milliseconds of four significant
// digits: 13.18, 0.5723, 0.002123; "-" when not ok.
func sigMilliseconds(seconds float64, ok bool) string { return sigOptional(seconds*1e3, ok) }

func sigOptional(v float64, ok bool) string {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return Sig(v, 4)
}

// Sig prints v with n significant digits in plain notation (no exponent;
// whole numbers of more digits keep them all): Sig(13.179, 4) is "13.18",
// Sig(0.0021234, 4) "0.002123", Sig(765140.2, 4) "765140".
func Sig(v float64, n int) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	// Rounding may carry into the next power of ten (9.9996 → 10.00).
	if r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64); r != 0 {
		exp = int(math.Floor(math.Log10(math.Abs(r))))
	}
	return strconv.FormatFloat(v, 'f', max(0, n-1-exp), 64)
}

// Bytes prints a size with its unit and three significant digits: 1.31 MB,
// 16.1 GB (decimal units, as every GB in stepbench's output).
func Bytes(n int64) string {
	v, unit := float64(n), "B"
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		if math.Abs(v) < 1000 {
			break
		}
		v, unit = v/1000, u
	}
	return Sig(v, 3) + " " + unit
}

// Wrap breaks text into lines of at most width columns at spaces, each
// ending in a newline.
func Wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case line+1+n > width:
			b.WriteString("\n")
			line = 0
		default:
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += n
	}
	b.WriteString("\n")
	return b.String()
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

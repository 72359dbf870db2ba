package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/roofline"
)

// WriteTelemetryTable writes one row per shape with its telemetry and
// roofline points: median power (W) and SM clock (MHz) after the kept
// regions, the count of throttled samples, energy per token (J) of the
// prefill, decode (derived) and whole-iteration windows, and each phase's
// attainment of the roof with the roof that binds. "-" marks a missing value.
// Over several GPUs the power is their sum (power_W_sum), the SM clock the
// slowest GPU's (sm_MHz_min), a throttled sample one where any GPU was.
func WriteTelemetryTable(w io.Writer, shapes []ShapeReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	powerHeader, clockHeader := "power_W", "sm_MHz"
	if HasGPUs(shapes) {
		powerHeader, clockHeader = "power_W_sum", "sm_MHz_min"
	}
	writeRow(tw, []string{"batch", "input", "output", powerHeader, clockHeader, "throttled",
		"prefill_J/tok", "decode_J/tok", "iter_J/tok", "prefill_roof", "decode_roof"})
	for _, s := range shapes {
		power, clock := s.MedianPowerWatts, s.MedianSMClockMHz
		if len(s.GPUs) > 0 {
			power, clock = s.MedianPowerWattsSum, s.MedianSMClockMHzMin
		}
		row := append(shapeCells(s, false), optional(power, "%.0f", power > 0), optional(clock, "%.0f", clock > 0), throttledCell(s))
		var prefill, decode, iteration *bench.EnergyWindow
		if s.Energy != nil {
			prefill, decode, iteration = s.Energy.Prefill, s.Energy.Decode, s.Energy.Iteration
		}
		row = append(row, joulesCell(prefill), joulesCell(decode), joulesCell(iteration),
			roofCell(s.RooflinePoints, bench.PhasePrefill), roofCell(s.RooflinePoints, bench.PhaseDecode))
		writeRow(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write telemetry table: %w", err)
	}
	return nil
}

func throttledCell(s ShapeReport) string {
	if s.DiscardedThrottledSamples > 0 {
		return fmt.Sprintf("%d(dropped)", s.ThrottledSamples)
	}
	return fmt.Sprint(s.ThrottledSamples)
}

func joulesCell(e *bench.EnergyWindow) string {
	if e == nil || e.Tokens == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", e.JoulesPerToken)
}

// roofCell is "attainment% bound" of the phase's step point, two
// significant digits (the summary table has three).
func roofCell(points []roofline.Point, phase string) string {
	for _, p := range points {
		if p.Phase == phase && p.Op == "" && p.Bound != "" {
			if p.AttainmentFraction < 1e-3 { // the emulated device's, say: the CPU under a GPU's roof
				return "<0.1% " + p.Bound
			}
			return Sig(100*p.AttainmentFraction, 2) + "% " + p.Bound
		}
	}
	return "-"
}

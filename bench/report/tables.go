package report

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"stepbench/bench/breakdown"
	"stepbench/bench/kernelbench"
	"stepbench/bench/roofline"
)

// WriteBreakdownTable writes one table per phase of sb: op, calls per step,
// launches per step (kernels and library calls; "-" where the backend does
// not count them), device µs per step, share of the step, GB/s and TFLOP/s
// of the cost model's minimal work, and roofline attainment (derived), then
// the time outside every op and the whole step.
func WriteBreakdownTable(w io.Writer, sb breakdown.Result, roof *roofline.Roof) error {
	for _, p := range []breakdown.Phase{sb.Prefill, sb.Decode} {
		if p.Steps == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s breakdown: %s (per step, mean of %d step(s); %s)\n",
			p.Phase, sb.Shape, p.Steps, attainmentUnder(roof))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		writeRow(tw, []string{"op", "calls", "launches", "device_us", "share", "GB/s", "TFLOP/s", "attain(derived)"})
		counted := p.LaunchesPerStep > 0
		for _, r := range p.Rows {
			writeRow(tw, []string{r.Op, fmt.Sprintf("%.0f", r.CallsPerStep), optional(r.LaunchesPerStep, "%.0f", counted),
				fmt.Sprintf("%.1f", 1e6*r.DeviceSecondsPerStep),
				fmt.Sprintf("%.1f%%", 100*r.ShareOfStep),
				optional(r.BytesPerSecond/1e9, "%.1f", r.BytesPerSecond > 0),
				optional(r.FLOPsPerSecond/1e12, "%.2f", r.FLOPsPerSecond > 0),
				optional(100*r.Attainment, "%.1f%%", r.Attainment > 0)})
		}
		writeRow(tw, []string{"(outside ops)", "-", "-", fmt.Sprintf("%.1f", 1e6*p.OutsideOpsSeconds),
			fmt.Sprintf("%.1f%%", 100*p.OutsideOpsShare), "-", "-", "-"})
		stepBytesPerSecond, stepFLOPsPerSecond := 0.0, 0.0
		if p.StepDeviceSeconds > 0 {
			stepBytesPerSecond, stepFLOPsPerSecond = p.StepBytes/p.StepDeviceSeconds, p.StepFLOPs/p.StepDeviceSeconds
		}
		writeRow(tw, []string{"step", "-", optional(p.LaunchesPerStep, "%.0f", counted), fmt.Sprintf("%.1f", 1e6*p.StepDeviceSeconds), "100.0%",
			optional(stepBytesPerSecond/1e9, "%.1f", stepBytesPerSecond > 0),
			optional(stepFLOPsPerSecond/1e12, "%.2f", stepFLOPsPerSecond > 0), "-"})
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write breakdown table: %w", err)
		}
	}
	return nil
}

// WriteKernelTable writes a line naming the roof, then one row per result:
// median and p10/p90 device µs, noise, samples, stop reason, GB/s and
// TFLOP/s at the median, and the attainment under roof (may be nil).
func WriteKernelTable(w io.Writer, results []kernelbench.Result, roof *roofline.Roof) error {
	if _, err := fmt.Fprintf(w, "kernel (cold, L2 flushed before every sample; %s)\n", attainmentUnder(roof)); err != nil {
		return fmt.Errorf("write kernel table: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, []string{"op", "shape", "median_us", "p10_us", "p90_us", "noise", "samples", "stop", "GB/s", "TFLOP/s", "attain(derived)"})
	for _, r := range results {
		m := r.Summary.Median
		attain := 0.0
		if roof != nil && m > 0 {
			attain = roof.Floor(r.FLOPs, r.Bytes).Seconds / m
		}
		writeRow(tw, []string{r.Op, r.ShapeLabel, fmt.Sprintf("%.2f", 1e6*m), fmt.Sprintf("%.2f", 1e6*r.Summary.P10),
			fmt.Sprintf("%.2f", 1e6*r.Summary.P90), optional(100*r.Noise, "%.2f%%", !math.IsInf(r.Noise, 0)),
			fmt.Sprint(r.Summary.N), r.StopReason,
			optional(r.Bytes/m/1e9, "%.1f", m > 0), optional(r.FLOPs/m/1e12, "%.3f", m > 0),
			optional(100*attain, "%.1f%%", attain > 0)})
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write kernel table: %w", err)
	}
	return nil
}

// attainmentUnder says which roof an attainment column is under.
func attainmentUnder(roof *roofline.Roof) string {
	if roof == nil {
		return RoofLine(nil)
	}
	return "attainment under the " + roof.Label()
}

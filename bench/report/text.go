package report

import (
	"errors"
	"fmt"
	"io"
)

// TextOptions choose what WriteRunText prints.
type TextOptions struct {
	Wide        bool // the wide summary (WriteWideSummaryTable) instead of the one within SummaryColumns
	SummaryOnly bool // the summary table alone (-q)
}

// WriteRunText writes what stepbench run prints after its sweep, all of it
// from the report r: a note when the emulated device ran it, the summary
// table under the run's roof (named), the rank table of a tensor-parallel
// run, and the telemetry and roofline table (left out, with a line saying
// so, when the run has neither telemetry nor a roof).
func WriteRunText(w io.Writer, r Report, o TextOptions) error {
	env := r.Environment
	var b errWriter
	b.printf(w, "\n")
	if env.Emulated != "" {
		b.printf(w, "%s", Wrap(EmulatedNote, SummaryColumns))
	}
	if r.Verified != nil && !*r.Verified {
		b.printf(w, "%s\n", UnverifiedNote)
	}
	if r.Verification != nil {
		for _, line := range r.Verification.SourceLines() {
			b.printf(w, "%s\n", line)
		}
	}
	if q := r.Config.Model.Quantization; q != nil {
		b.printf(w, "weights: %s\n", q)
	}
	if env.Roof != nil {
		b.printf(w, "%s", Wrap("summary (attainment derived by the cost model under the "+env.Roof.Label()+")", SummaryColumns))
	} else {
		b.printf(w, "%s", Wrap("summary ("+RoofLine(nil)+")", SummaryColumns))
	}
	if b.err != nil {
		return b.err
	}
	write := WriteSummaryTable
	if o.Wide {
		write = WriteWideSummaryTable
	}
	if err := write(w, r.Shapes, env.Roof); err != nil || o.SummaryOnly {
		return err
	}
	if HasRanks(r.Shapes) {
		b.printf(w, "\n")
		if err := errors.Join(b.err, WriteRankTable(w, r.Shapes, env.TPRanks)); err != nil {
			return err
		}
	}
	if env.Roof == nil && !hasTelemetry(r.Shapes) {
		b.printf(w, "\ntelemetry: none (NVML reads GPUs: the %s backend has no power, clocks or energy to report)\n", orDash(env.Backend))
		return b.err
	}
	b.printf(w, "\n%s", Wrap("telemetry and roofline ("+RoofLine(env.Roof)+
		"; J/token from NVML energy-counter deltas over windows run after each shape's timed iterations, decode's derived: "+
		"iteration minus prefill)", SummaryColumns))
	if !HasGPUs(r.Shapes) {
		return errors.Join(b.err, WriteTelemetryTable(w, r.Shapes))
	}
	b.printf(w, "%s", Wrap(GPUsNote, SummaryColumns))
	if err := errors.Join(b.err, WriteTelemetryTable(w, r.Shapes)); err != nil {
		return err
	}
	b.printf(w, "\n")
	return errors.Join(b.err, WriteGPUTable(w, r.Shapes))
}

// hasTelemetry says whether any shape has NVML readings or energy windows.
func hasTelemetry(shapes []ShapeReport) bool {
	for _, s := range shapes {
		if s.MedianPowerWatts > 0 || s.MedianSMClockMHz > 0 || s.MedianPowerWattsSum > 0 || s.Energy != nil || s.ThrottledSamples > 0 {
			return true
		}
	}
	return false
}

// GPUsNote says how the telemetry table combines the GPUs of a run over
// several.
const GPUsNote = "over this node's GPUs: power_W_sum is the sum of their power, sm_MHz_min the slowest GPU's SM clock, " +
	"throttled counts samples where any GPU was throttled, J/tok sums every GPU's energy"

// errWriter keeps the first write error of a sequence of prints.
type errWriter struct{ err error }

func (e *errWriter) printf(w io.Writer, format string, a ...any) {
	if e.err == nil {
		if _, err := fmt.Fprintf(w, format, a...); err != nil {
			e.err = fmt.Errorf("write run text: %w", err)
		}
	}
}

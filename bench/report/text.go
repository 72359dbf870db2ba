package report

import (
	"errors"
	"fmt"
	"io"
)

// WriteRunText writes what stepbench run prints after its sweep, all of it
// from the report r: a note when the emulated device ran it, the summary
// table under the run's roof (named), and the telemetry and roofline table.
func WriteRunText(w io.Writer, r Report) error {
	env := r.Environment
	var b errWriter
	b.printf(w, "\n")
	if env.Emulated != "" {
		b.printf(w, "%s\n", EmulatedNote)
	}
	if r.Verified != nil && !*r.Verified {
		b.printf(w, "%s\n", UnverifiedNote)
	}
	if r.Verification != nil {
		for _, line := range r.Verification.SourceLines() {
			b.printf(w, "%s\n", line)
		}
	}
	if env.Roof != nil {
		b.printf(w, "summary (floors and attainment derived by the cost model under the %s)\n", env.Roof.Label())
	} else {
		b.printf(w, "summary (%s)\n", RoofLine(nil))
	}
	if b.err != nil {
		return b.err
	}
	if err := WriteSummaryTable(w, r.Shapes, env.Roof); err != nil {
		return err
	}
	if HasRanks(r.Shapes) {
		b.printf(w, "\n")
		if err := errors.Join(b.err, WriteRankTable(w, r.Shapes, env.TPRanks)); err != nil {
			return err
		}
	}
	b.printf(w, "\ntelemetry and roofline (%s; J/token from NVML energy-counter deltas over windows run after each shape's timed iterations)\n",
		RoofLine(env.Roof))
	if !HasGPUs(r.Shapes) {
		return errors.Join(b.err, WriteTelemetryTable(w, r.Shapes))
	}
	b.printf(w, "%s\n", GPUsNote)
	if err := errors.Join(b.err, WriteTelemetryTable(w, r.Shapes)); err != nil {
		return err
	}
	b.printf(w, "\n")
	return errors.Join(b.err, WriteGPUTable(w, r.Shapes))
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

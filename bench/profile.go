package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Profiler is what the harness needs of a profiler: a capture window
// (cuProfilerStart/Stop, for nsys --capture-range=cudaProfilerApi and
// ncu --profile-from-start off) and named ranges (NVTX) around timed
// regions. Push and Pop must cost nothing when no profiler is attached.
type Profiler interface {
	Start() error
	Stop() error
	Push(name string)
	Pop()
}

// The phases a profile window can cover.
const (
	ProfilePrefill = "prefill"
	ProfileDecode  = "decode"
	ProfileBoth    = "both"
)

// ProfilePhases lists them, for flags.
var ProfilePhases = []string{ProfilePrefill, ProfileDecode, ProfileBoth}

// ProfileWindow says which timed regions a profiler captures. The window is
// opened once per shape, in the shape's first timed iteration (never in a
// warmup, nor in later iterations), before a region's first synchronisation
// and closed after a region's last one, so no timed region contains either
// call:
//
//   - prefill: the prefill alone;
//   - decode:  decode steps StartStep .. StartStep+Steps-1 (numbered from 0,
//     as one_batch's "Decode N" lines);
//   - both:    the prefill and decode steps 0 .. Steps-1 (one contiguous
//     window, so StartStep must be 0).
type ProfileWindow struct {
	Phase            string
	StartStep, Steps int
}

// Validate checks the window against every output length of the sweep:
// each shape must have the decode steps the window asks for.
func (w ProfileWindow) Validate(outputLens []int) error {
	if !slices.Contains(ProfilePhases, w.Phase) {
		return fmt.Errorf("profile phase %q is not prefill, decode or both", w.Phase)
	}
	if w.Phase == ProfilePrefill {
		if w.StartStep != 0 || w.Steps != 0 {
			return errors.New("a prefill profile window has no decode steps (start step and steps must be 0)")
		}
		return nil
	}
	if w.StartStep < 0 || w.Steps < 1 {
		return fmt.Errorf("profile window of %d decode steps from step %d: need at least one step from step 0 on", w.Steps, w.StartStep)
	}
	if w.Phase == ProfileBoth && w.StartStep != 0 {
		return fmt.Errorf("a profile window of both phases starts at the prefill, so its decode steps start at 0, not %d", w.StartStep)
	}
	last := math.MaxInt // where start + steps - 1 would overflow
	if w.Steps <= math.MaxInt-w.StartStep {
		last = w.StartStep + w.Steps - 1
	}
	for _, out := range outputLens {
		switch {
		case out < 2:
			return fmt.Errorf("profile window of decode steps, but output length %d has no decode step", out)
		case last > out-2:
			return fmt.Errorf("profile window ends at decode step %d, but output length %d has decode steps 0..%d only",
				last, out, out-2)
		}
	}
	return nil
}

// profileWindow tracks one iteration's window.
type profileWindow struct {
	p    Profiler
	w    ProfileWindow
	open bool
}

// windowFor is the window of the iteration key: only a shape's first timed
// iteration has one.
func (h *harness) windowFor(key PromptKey) *profileWindow {
	if h.opt.Profile == nil || h.opt.Profiler == nil || key.Warmup || key.Iter != 0 {
		return nil
	}
	return &profileWindow{p: h.opt.Profiler, w: *h.opt.Profile}
}

// beforeRegion opens the window when region (ProfilePrefill, or decode step
// `step`) is its first.
func (pw *profileWindow) beforeRegion(phase string, step int) error {
	if pw == nil || pw.open {
		return nil
	}
	first := (phase == PhasePrefill && pw.w.Phase != ProfileDecode) ||
		(phase == PhaseDecode && pw.w.Phase == ProfileDecode && step == pw.w.StartStep)
	if !first {
		return nil
	}
	if err := pw.p.Start(); err != nil {
		return fmt.Errorf("profiler start: %w", err)
	}
	pw.open = true
	return nil
}

// afterRegion closes the window after its last region.
func (pw *profileWindow) afterRegion(phase string, step int) error {
	if pw == nil || !pw.open {
		return nil
	}
	last := (phase == PhasePrefill && pw.w.Phase == ProfilePrefill) ||
		(phase == PhaseDecode && step == pw.w.StartStep+pw.w.Steps-1)
	if !last {
		return nil
	}
	return pw.close()
}

// close stops the profiler if the window is open (also when a region fails).
func (pw *profileWindow) close() error {
	if pw == nil || !pw.open {
		return nil
	}
	pw.open = false
	if err := pw.p.Stop(); err != nil {
		return fmt.Errorf("profiler stop: %w", err)
	}
	return nil
}

// Range names, stable so that a profiler's summaries group them: one range
// per timed region, around (not inside) its synchronisations and clocks.
func prefillRangeName(batch, inputLen int) string {
	return fmt.Sprintf("prefill b=%d s=%d", batch, inputLen)
}
func decodeRangeName(step int) string { return fmt.Sprintf("decode step %d", step) }

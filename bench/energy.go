package bench

import "fmt"

// EnergyMeter reads a cumulative energy counter in millijoules (NVML's
// nvmlDeviceGetTotalEnergyConsumption; bench/telemetry/nvml's Monitor is one).
type EnergyMeter interface {
	EnergyMillijoules() (uint64, error)
}

// DefaultEnergyWindowSeconds is the shortest energy window: NVML's counter
// updates in steps of tens of milliseconds, so a delta over a single step
// would be mostly quantisation.
const DefaultEnergyWindowSeconds = 1.0

// Energy methods, as they appear in reports.
const (
	EnergyMeasured = "energy_counter_delta"      // ΔE of a contiguous window
	EnergyDerived  = "derived_window_difference" // iteration window minus prefill energy per repetition
)

// EnergyWindow is the energy of one phase of a shape from NVML's energy
// counter over a window of at least the minimum length.
type EnergyWindow struct {
	Method         string  `json:"method"`      // EnergyMeasured or EnergyDerived
	Repetitions    int     `json:"repetitions"` // how many times the phase ran in the window
	WindowSeconds  float64 `json:"window_seconds"`
	Joules         float64 `json:"joules"`
	Tokens         int     `json:"tokens"`
	JoulesPerToken float64 `json:"joules_per_token"`
	AverageWatts   float64 `json:"average_watts,omitempty"` // Joules / WindowSeconds (measured windows only)
}

// ShapeEnergy is a shape's energy, measured after its timed iterations:
//   - Prefill: Begin + prefill repeated back to back; tokens = batch×input_len each;
//   - Iteration: whole iterations (Begin, prefill, output_len−1 decode steps)
//     back to back; tokens = batch×(input_len+output_len) each, one_batch's
//     "overall" count;
//   - Decode (derived): the iteration window's energy minus its repetitions ×
//     the prefill window's energy per repetition, per decoded token
//     (batch×(output_len−1) per iteration). Begin's host time is in both
//     windows and cancels.
type ShapeEnergy struct {
	Prefill   *EnergyWindow `json:"prefill,omitempty"`
	Iteration *EnergyWindow `json:"iteration,omitempty"`
	Decode    *EnergyWindow `json:"decode,omitempty"`
}

// measureEnergy runs the energy windows of one shape (untimed, no
// BetweenRegions calls): the GPU works back to back inside each window.
func (h *harness) measureEnergy(sh Shape) (*ShapeEnergy, error) {
	minSeconds := h.opt.EnergyWindowSeconds
	if minSeconds <= 0 {
		minSeconds = DefaultEnergyWindowSeconds
	}
	prefill, err := h.energyWindow(sh, minSeconds, sh.PromptTokens(), h.target.Prefill)
	if err != nil {
		return nil, fmt.Errorf("prefill energy window: %w", err)
	}
	e := &ShapeEnergy{Prefill: &prefill}
	iteration, err := h.energyWindow(sh, minSeconds, sh.IterationTokens(), func() error {
		if err := h.target.Prefill(); err != nil {
			return err
		}
		for step := 0; step < sh.OutputLen-1; step++ {
			if err := h.target.Decode(); err != nil {
				return fmt.Errorf("decode step %d: %w", step, err)
			}
		}
		return nil
	})
	if err != nil {
		return e, fmt.Errorf("iteration energy window: %w", err)
	}
	e.Iteration = &iteration
	if sh.OutputLen > 1 {
		d := DeriveDecodeEnergy(prefill, iteration, sh.Batch*(sh.OutputLen-1))
		e.Decode = &d
	}
	return e, nil
}

// DeriveDecodeEnergy is the decode share of an iteration window: its joules
// minus its repetitions × the prefill window's joules per repetition, over
// decodeTokensPerRep decoded tokens per repetition. Clamped at zero: noise
// can make the difference negative when prefill dominates.
func DeriveDecodeEnergy(prefill, iteration EnergyWindow, decodeTokensPerRep int) EnergyWindow {
	d := EnergyWindow{Method: EnergyDerived, Repetitions: iteration.Repetitions, WindowSeconds: iteration.WindowSeconds,
		Tokens: iteration.Repetitions * decodeTokensPerRep}
	if prefill.Repetitions > 0 {
		d.Joules = iteration.Joules - float64(iteration.Repetitions)*prefill.Joules/float64(prefill.Repetitions)
	}
	d.Joules = max(d.Joules, 0)
	if d.Tokens > 0 {
		d.JoulesPerToken = d.Joules / float64(d.Tokens)
	}
	return d
}

// NewEnergyWindow computes a measured window from two counter readings.
func NewEnergyWindow(startMillijoules, endMillijoules uint64, seconds float64, repetitions, tokensPerRep int) (EnergyWindow, error) {
	if endMillijoules < startMillijoules {
		return EnergyWindow{}, fmt.Errorf("energy counter went backwards (%d -> %d mJ): driver reloaded?",
			startMillijoules, endMillijoules)
	}
	w := EnergyWindow{Method: EnergyMeasured, Repetitions: repetitions, WindowSeconds: seconds,
		Joules: float64(endMillijoules-startMillijoules) / 1e3, Tokens: repetitions * tokensPerRep}
	if w.Tokens > 0 {
		w.JoulesPerToken = w.Joules / float64(w.Tokens)
	}
	if seconds > 0 {
		w.AverageWatts = w.Joules / seconds
	}
	return w, nil
}

// energyWindow repeats Begin + body until minSeconds have passed on the
// host clock, then synchronises and reads the counter again. Prompts come
// from their own streams (negative iterations), fresh per repetition.
func (h *harness) energyWindow(sh Shape, minSeconds float64, tokensPerRep int, body func() error) (EnergyWindow, error) {
	if err := h.target.Sync(); err != nil {
		return EnergyWindow{}, fmt.Errorf("sync: %w", err)
	}
	start, err := h.opt.EnergyMeter.EnergyMillijoules()
	if err != nil {
		return EnergyWindow{}, err
	}
	t0 := h.now()
	reps := 0
	for reps == 0 || h.now().Sub(t0).Seconds() < minSeconds {
		if err := h.ctx.Err(); err != nil {
			return EnergyWindow{}, fmt.Errorf("%w: %v", ErrInterrupted, err)
		}
		prompts, err := h.promptIDs(PromptKey{Shape: sh, Iter: -1 - reps, Warmup: true})
		if err != nil {
			return EnergyWindow{}, err
		}
		if err := begin(h.target, sh, prompts); err != nil {
			return EnergyWindow{}, fmt.Errorf("begin: %w", err)
		}
		rep := reps
		err = h.watchdog.guarded(func() string { return fmt.Sprintf("energy-window repetition %d of %s", rep+1, sh) }, func() error {
			if err := body(); err != nil {
				return err
			}
			// Keep the queue short so the host clock tracks the device.
			if err := h.target.Sync(); err != nil {
				return fmt.Errorf("sync: %w", err)
			}
			return nil
		})
		if err != nil {
			return EnergyWindow{}, err
		}
		reps++
	}
	seconds := h.now().Sub(t0).Seconds()
	end, err := h.opt.EnergyMeter.EnergyMillijoules()
	if err != nil {
		return EnergyWindow{}, err
	}
	return NewEnergyWindow(start, end, seconds, reps, tokensPerRep)
}

package bench

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStepTimeout is wrapped by the error of a region that did not finish
// within Options.StepTimeout.
var ErrStepTimeout = errors.New("step timeout")

// watchdog times each region (and each energy-window repetition) against
// Options.StepTimeout from a timer of its own: a kernel that never returns
// blocks the harness's goroutine in a synchronisation no one can cancel, so
// the timeout is reported from outside it, to Options.OnStepTimeout, which
// may end the process. Its lock is held from the decision to report until
// OnStepTimeout returns, so the harness cannot move on to writing results
// once the timeout has been decided (a process ending then loses nothing
// half written).
type watchdog struct {
	timeout time.Duration
	report  func(error)
	mu      sync.Mutex
	gen     uint64 // the armed region's number; a timer of an earlier one does nothing
	armed   bool
	fired   error
	timer   *time.Timer
}

func newWatchdog(timeout time.Duration, report func(error)) *watchdog {
	if timeout <= 0 {
		return nil
	}
	if report == nil {
		report = func(error) {}
	}
	return &watchdog{timeout: timeout, report: report}
}

// arm starts timing the region what describes (called only if it expires).
func (w *watchdog) arm(what func() string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.gen++
	gen := w.gen
	w.armed = true
	w.mu.Unlock()
	w.timer = time.AfterFunc(w.timeout, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.armed || w.gen != gen {
			return
		}
		w.fired = fmt.Errorf("%w: %s did not finish within %s (a kernel that never returns?)", ErrStepTimeout, what(), w.timeout)
		w.report(w.fired)
	})
}

// disarm ends the region; its error is the timeout's when the region
// finished after the watchdog reported it (a report that did not end the
// process).
func (w *watchdog) disarm() error {
	if w == nil {
		return nil
	}
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	err := w.fired
	w.fired = nil
	return err
}

// guarded runs f as one region of the watchdog.
func (w *watchdog) guarded(what func() string, f func() error) error {
	w.arm(what)
	err := f()
	if timeout := w.disarm(); timeout != nil {
		return errors.Join(timeout, err)
	}
	return err
}

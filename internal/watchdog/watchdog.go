// Package watchdog bounds calls that may block for as long as something
// outside the process takes: a device synchronisation behind a kernel that
// never returns, a compile, a library's call. A Dog is told when each such
// call starts and ends (Enter, Leave: a lock and a map write, nothing
// printed) and, from one goroutine of its own, calls its fire function once
// when a call has run longer than the timeout it entered with, naming it.
package watchdog

import (
	"fmt"
	"sync"
	"time"
)

// Dog watches calls; the zero Dog is not usable: Start makes one.
type Dog struct {
	fire func(what string, timeout time.Duration)
	now  func() time.Time

	mu     sync.Mutex
	next   int64
	active map[int64]call
	fired  bool
	stop   chan struct{}
}

type call struct {
	what     fmt.Stringer
	timeout  time.Duration
	deadline time.Time
}

// Start returns a Dog that looks at its calls every tick (a fraction of
// the shortest timeout: the fire comes at most a tick late), calls fire
// once for the first call found past its timeout, and stops at Stop.
func Start(tick time.Duration, fire func(what string, timeout time.Duration)) *Dog {
	d := &Dog{fire: fire, now: time.Now, active: map[int64]call{}, stop: make(chan struct{})}
	go d.watch(max(tick, time.Millisecond))
	return d
}

// Enter says a call that may block starts and may take timeout; what
// names it (formatted only when the Dog fires). Leave(token) says it
// ended.
func (d *Dog) Enter(what fmt.Stringer, timeout time.Duration) (token int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	d.active[d.next] = call{what, timeout, d.now().Add(timeout)}
	return d.next
}

// Leave ends the call Enter returned token for.
func (d *Dog) Leave(token int64) {
	d.mu.Lock()
	delete(d.active, token)
	d.mu.Unlock()
}

// Stop ends the watch; calls still active are no longer timed.
func (d *Dog) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.fired {
		d.fired = true
		close(d.stop)
	}
}

func (d *Dog) watch(every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		if what, timeout, late := d.overdue(); late {
			d.fire(what, timeout)
			return
		}
	}
}

// overdue is the call whose deadline passed first, when one has.
func (d *Dog) overdue() (string, time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fired {
		return "", 0, false
	}
	var first *call
	for _, c := range d.active {
		if first == nil || c.deadline.Before(first.deadline) {
			first = &c
		}
	}
	if first == nil || !d.now().After(first.deadline) {
		return "", 0, false
	}
	d.fired = true
	close(d.stop)
	return first.what.String(), first.timeout, true
}

// Text is a fixed name as a fmt.Stringer.
type Text string

func (t Text) String() string { return string(t) }

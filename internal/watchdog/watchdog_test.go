package watchdog

import (
	"testing"
	"time"
)

// newClocked is a Dog without its goroutine, on a clock the test moves.
func newClocked(clock *time.Time) *Dog {
	return &Dog{now: func() time.Time { return *clock }, active: map[int64]call{}, stop: make(chan struct{})}
}

// The longest call past the timeout is overdue, once; calls that ended,
// or are within the timeout, are not.
func TestOverdue(t *testing.T) {
	clock := time.Unix(1000, 0)
	d := newClocked(&clock)
	for range 20 {
		d.Leave(d.Enter(Text("a quick call"), time.Second))
	}
	d.Enter(Text("a compile"), time.Minute)
	d.Enter(Text("cuStreamSynchronize after spin"), time.Second)
	clock = clock.Add(500 * time.Millisecond)
	d.Enter(Text("a later call"), time.Second)
	if what, _, late := d.overdue(); late {
		t.Fatalf("overdue at 0.5 s: %q", what)
	}
	clock = clock.Add(600 * time.Millisecond)
	if what, timeout, late := d.overdue(); !late || what != "cuStreamSynchronize after spin" || timeout != time.Second {
		t.Errorf("at 1.1 s: %q after %s, %v; want the first call after 1s", what, timeout, late)
	}
	clock = clock.Add(time.Hour)
	if what, _, late := d.overdue(); late {
		t.Errorf("overdue twice: %q", what)
	}
	d.Stop() // after firing: no second close
}

// A Dog that is stopped never fires.
func TestStoppedDogNeverFires(t *testing.T) {
	clock := time.Unix(1000, 0)
	d := newClocked(&clock)
	d.Enter(Text("stopped before its time"), time.Millisecond)
	d.Stop()
	d.Stop()
	clock = clock.Add(time.Hour)
	if what, _, late := d.overdue(); late {
		t.Errorf("a stopped Dog is overdue: %q", what)
	}
}

// Start's goroutine fires for a call past the timeout, naming it.
func TestStartFires(t *testing.T) {
	fired := make(chan string, 1)
	d := Start(5*time.Millisecond, func(what string, timeout time.Duration) { fired <- what + " " + timeout.String() })
	defer d.Stop()
	d.Enter(Text("a library call that sleeps"), 20*time.Millisecond)
	select {
	case got := <-fired:
		if got != "a library call that sleeps 20ms" {
			t.Errorf("fired %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Dog never fired")
	}
}

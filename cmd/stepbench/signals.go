package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// interruption is a context cancelled by the first SIGINT or SIGTERM,
// which says at once that the run stops after the step that runs (a step
// stuck on the GPU may never end) and that a second one exits now. The
// second ends the process with exit code 130, through the guard, so that
// it never ends it inside a result write.
type interruption struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan os.Signal
	got    atomic.Value // os.Signal
	done   chan struct{}
}

// newInterruption is newGuardedInterruption saying so on the process's
// stderr, with no writes to guard.
func newInterruption() *interruption { return newGuardedInterruption(os.Stderr, &exitGuard{}) }

func newGuardedInterruption(stderr io.Writer, guard *exitGuard) *interruption {
	in := &interruption{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	signal.Notify(in.ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-in.ch:
			in.got.Store(sig)
			fmt.Fprintf(stderr, "stepbench: %v: stopping when the step that runs now ends (the finished shapes' results are written); "+
				"a second Ctrl-C exits at once\n", sig)
			in.cancel()
		case <-in.done:
			return
		}
		select {
		case sig := <-in.ch:
			guard.exit(exitInterrupted, func() {
				fmt.Fprintf(stderr, "stepbench: %v again: exiting now; the finished shapes' results are written\n", sig)
			})
		case <-in.done:
		}
	}()
	return in
}

// signal is the signal received, or nil.
func (in *interruption) signal() os.Signal {
	sig, _ := in.got.Load().(os.Signal)
	return sig
}

// stop releases the signals and the context.
func (in *interruption) stop() {
	signal.Stop(in.ch)
	close(in.done)
	in.cancel()
}

// exitGuard lets another goroutine end the process (a second Ctrl-C, a
// step that never returns) only between result writes: a record appended
// in part would be torn.
type exitGuard struct{ mu sync.Mutex }

// writing runs f, a result write, with no exit in between.
func (g *exitGuard) writing(f func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return f()
}

// exit runs last (a message) and ends the process with code once no
// write is running; it does not return.
func (g *exitGuard) exit(code int, last func()) {
	g.mu.Lock()
	last()
	os.Exit(code)
}

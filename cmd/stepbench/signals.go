package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// interruption is a context cancelled by the first SIGINT or SIGTERM. That
// first signal is then released: a second one has its default effect and
// ends the process at once.
type interruption struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan os.Signal
	got    atomic.Value // os.Signal
	done   chan struct{}
}

func newInterruption() *interruption {
	in := &interruption{ch: make(chan os.Signal, 1), done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	signal.Notify(in.ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-in.ch:
			in.got.Store(sig)
			signal.Stop(in.ch)
			in.cancel()
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

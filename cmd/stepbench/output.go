package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"stepbench/bench/progress"
)

// outputFlags choose how much a command prints: quiet by default (stdout
// the results, stderr one updating progress line on a terminal), detail
// with -v, the summary alone with -q.
type outputFlags struct {
	verbose, quiet, wide bool
}

func (o *outputFlags) register(fs *pflag.FlagSet) {
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "also print one_batch's lines for every iteration on stdout, byte for byte as bench_one_batch, "+
		"and every progress step on stderr")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print the summary table only (stderr: errors only)")
	fs.BoolVar(&o.wide, "wide", false, "the wide summary table: host and device times, decode p90, floors (the native JSON has every figure)")
}

func (o *outputFlags) check() error {
	if o.verbose && o.quiet {
		return usagef("-v and -q: choose one")
	}
	return nil
}

// progressOn is stderr for a command's notes and progress: a progress
// line (one updating status line when stderr is a terminal), or nothing
// with -q.
func (o *outputFlags) progressOn(stderr io.Writer) io.Writer {
	if o.quiet {
		return io.Discard
	}
	return newProgressLine(stderr, o.verbose)
}

// newProgressLine makes stderr a progress line, unless it is one already.
func newProgressLine(stderr io.Writer, verbose bool) io.Writer {
	if _, ok := stderr.(*progress.Line); ok || stderr == io.Discard {
		return stderr
	}
	f, _ := stderr.(*os.File)
	terminal, width := progress.Terminal(f)
	return progress.New(stderr, terminal, verbose, width)
}

// statusOf is what shows stderr's status: its progress line, or nothing.
func statusOf(stderr io.Writer) progress.Statuser {
	if l, ok := stderr.(*progress.Line); ok {
		return l
	}
	return progress.Discard
}

// loadProgress shows weight loading as stderr's status, every 10%.
func loadProgress(stderr io.Writer, format string) func(done, total int) {
	st, last := statusOf(stderr), -1
	return func(done, total int) {
		if pct := done * 10 / max(1, total); pct != last {
			last = pct
			st.Status(fmt.Sprintf("stepbench: loading %s weights %3d%% (%d/%d tensors)", format, pct*10, done, total))
		}
	}
}

package progress

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// On a terminal a status is rewritten in place and cleared before a kept
// line; elsewhere only kept lines are written, unless verbose.
func TestLine(t *testing.T) {
	show := func(l *Line) {
		l.Status("loading 1/3")
		l.Status("loading 2/3\nignored")
		fmt.Fprintln(l, "weights loaded")
		l.Status("iteration 1")
		l.Status("iteration 2 of a shape whose status is longer than the terminal")
		l.Clear()
		l.Clear()
	}
	for _, tc := range []struct {
		name              string
		terminal, verbose bool
		want              string
	}{
		{"pipe", false, false, "weights loaded\n"},
		{"verbose", false, true, "loading 1/3\nloading 2/3\nweights loaded\niteration 1\niteration 2 of a shape whose status is longer than the terminal\n"},
		{"terminal", true, false, "\rloading 1/3\x1b[K\rloading 2/3\x1b[K\r\x1b[Kweights loaded\n\riteration 1\x1b[K" +
			"\riteration 2 of a shape whose status is lon…\x1b[K\r\x1b[K"},
	} {
		var b strings.Builder
		show(New(&b, tc.terminal, tc.verbose, 44))
		if b.String() != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, b.String(), tc.want)
		}
	}
}

// A file is no terminal.
func TestTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, _ := Terminal(f); ok {
		t.Error("a file is a terminal")
	}
	if ok, _ := Terminal(nil); ok {
		t.Error("nil is a terminal")
	}
}

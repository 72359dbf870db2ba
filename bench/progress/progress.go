// Package progress is what a command shows on stderr while it works: lines
// worth keeping (a shape's result, a file written), and one status (the
// iteration, the tensor being loaded) that each update replaces. On a
// terminal the status is one line rewritten in place; elsewhere (a pipe, a
// file, CI) it is not shown at all, unless verbose, when every status is a
// line of its own. Nothing is written to stdout.
package progress

import (
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Line is a writer of kept lines that also shows a status.
type Line struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	verbose  bool
	width    int  // the terminal's columns
	shown    bool // a status is on the terminal's last line
}

// New is a Line on w: terminal says w is a terminal width columns wide (0:
// 100), verbose that every status is kept as a line.
func New(w io.Writer, terminal, verbose bool, width int) *Line {
	if width <= 0 {
		width = 100
	}
	return &Line{w: w, terminal: terminal, verbose: verbose, width: width}
}

// Write writes kept lines (a Line is an io.Writer for them), first clearing
// a status on the terminal.
func (l *Line) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.clear(); err != nil {
		return 0, err
	}
	return l.w.Write(p)
}

// Status replaces the status with msg (one line: what follows a newline is
// dropped, and on a terminal what does not fit its width).
func (l *Line) Status(msg string) {
	msg, _, _ = strings.Cut(msg, "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.verbose:
		_ = l.clear()
		io.WriteString(l.w, msg+"\n")
	case l.terminal:
		if utf8.RuneCountInString(msg) > l.width-1 {
			msg = string([]rune(msg)[:l.width-2]) + "…"
		}
		io.WriteString(l.w, "\r"+msg+"\x1b[K")
		l.shown = true
	}
}

// Clear removes the status from the terminal.
func (l *Line) Clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.clear()
}

func (l *Line) clear() error {
	if !l.shown {
		return nil
	}
	l.shown = false
	_, err := io.WriteString(l.w, "\r\x1b[K")
	return err
}

// Statuser is what shows a status: a *Line, or Discard.
type Statuser interface{ Status(msg string) }

// Discard shows nothing.
var Discard Statuser = discard{}

type discard struct{}

func (discard) Status(string) {}

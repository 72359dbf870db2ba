package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
)

func minutes(s float64) string {
	return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
}

func printText(w io.Writer, r *Run, n int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "the %d slowest tests of %d (seconds):\n", min(n, len(r.Tests)), len(r.Tests))
	for _, t := range r.Slowest(n) {
		fmt.Fprintf(tw, "%7.1f\t%s\t%s\n", t.Seconds, strings.TrimPrefix(t.Package, "stepbench/"), mark(t.Test, t.Status))
	}
	tw.Flush()
	fmt.Fprintln(w, "each package's wall time (seconds; go test runs several at once):")
	for _, p := range r.ByWall() {
		fmt.Fprintf(tw, "%7.1f\t%3d tests\t%s\n", p.Seconds, p.Tests, mark(p.Package, p.Status))
	}
	tw.Flush()
	fmt.Fprintf(w, "wall time, first event to last: %s\n", minutes(r.Wall))
}

func printMarkdown(w io.Writer, r *Run, n int) {
	fmt.Fprintln(w, "| test | package | s |")
	fmt.Fprintln(w, "|---|---|--:|")
	for _, t := range r.Slowest(n) {
		fmt.Fprintf(w, "| `%s` | %s | %.1f |\n", mark(t.Test, t.Status), strings.TrimPrefix(t.Package, "stepbench/"), t.Seconds)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| package | tests | s |")
	fmt.Fprintln(w, "|---|--:|--:|")
	for _, p := range r.ByWall() {
		fmt.Fprintf(w, "| %s | %d | %.1f |\n", mark(strings.TrimPrefix(p.Package, "stepbench/"), p.Status), p.Tests, p.Seconds)
	}
	fmt.Fprintf(w, "| wall time, first event to last | | %s |\n", minutes(r.Wall))
}

// mark names a failed or skipped test or package so.
func mark(name, status string) string {
	switch status {
	case "fail":
		return name + " (FAIL)"
	case "skip":
		return name + " (skip)"
	}
	return name
}

// wrap runs args (go test -json ...), saves its stream to save and prints
// what plain go test would; it returns the command's exit status.
func wrap(save string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "testtimes: -save needs a command after --")
		return 2
	}
	f, err := os.Create(save)
	if err != nil {
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	}
	saved := bufio.NewWriter(f)
	r := NewRun()
	readErr := r.Read(io.TeeReader(pipe, saved), stdout)
	err = cmd.Wait()
	if ferr := saved.Flush(); ferr != nil && readErr == nil {
		readErr = ferr
	}
	if readErr != nil {
		fmt.Fprintln(stderr, "testtimes:", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	case readErr != nil || r.Failed:
		return 1
	}
	return 0
}

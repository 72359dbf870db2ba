// Command testtimes reads the event streams of `go test -json` and prints
// the slowest tests and each package's wall time: where a test run's minutes
// go.
//
//	go run ./scripts/testtimes [-n 30] [-markdown] [-seeded docs/development.md] FILE...
//	go run ./scripts/testtimes -save FILE -- go test -json ./...
//
// With files it prints the tables of those streams (run one after another:
// the total is the sum of each file's first-to-last event). With a command
// after "--" it runs it, writes its stream to -save, and prints what plain
// `go test` would (each package's ok or FAIL line, the output of failed
// tests only, build errors), then exits with the command's status; print
// the tables afterwards from the saved file.
//
// -seeded checks the run against a list of seeded bugs (its section
// "## Seeded bugs", rows "| `NAME` | ... | `PACKAGE` `TestName` |"): each
// listed bug must be reported caught (internal/seeded) by its test, which
// passed, and each bug reported caught must be listed; else exit 1.
//
// A test's time is go test's elapsed time for it (a parallel test's from the
// moment it resumed); a package's is its test binary's elapsed time, which
// overlaps the other packages' under go test's -p. Top-level tests only: a
// subtest's time is inside its parent's.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	n := flag.Int("n", 30, "how many of the slowest tests to print")
	markdown := flag.Bool("markdown", false, "print Markdown tables (for docs/development.md)")
	save := flag.String("save", "", "with a command after --: the file its JSON stream is written to")
	seededList := flag.String("seeded", "", "a Markdown file whose section \"## Seeded bugs\" lists each seeded bug and its test: fail unless the run agrees")
	flag.Parse()
	if *save != "" {
		os.Exit(wrap(*save, flag.Args(), os.Stdout, os.Stderr))
	}
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: testtimes [-n 30] [-markdown] FILE... | testtimes -save FILE -- go test -json ...")
		os.Exit(2)
	}
	var runs []*Run
	for _, name := range flag.Args() {
		r, err := readFile(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	print := printText
	if *markdown {
		print = printMarkdown
	}
	all := Merge(runs)
	print(os.Stdout, all, *n)
	if *seededList != "" && !checkSeeded(os.Stdout, *seededList, all) {
		os.Exit(1)
	}
}

func readFile(name string) (*Run, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := NewRun()
	if err := r.Read(f, io.Discard); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

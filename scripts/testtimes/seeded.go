package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// seededMarker is what internal/seeded's Caught logs (a copy: this command
// reads streams, it imports nothing of the module).
const seededMarker = "seeded bug caught: "

// SeededRow is one row of docs/development.md's list of seeded bugs: the
// bug's name, as the test reports it caught, and the test that must.
type SeededRow struct {
	Name, Package, Test string
	Line                int
}

// seededRow reads "| `NAME` | ... | `PACKAGE` `TestName` |".
var seededRow = regexp.MustCompile("^\\| `([^`]+)` \\|.*\\| `([a-z0-9_/]+)` `(Test\\w+)` \\|$")

// ReadSeededList reads the rows of the section "## Seeded bugs" of a
// Markdown file.
func ReadSeededList(path string) ([]SeededRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []SeededRow
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Seeded bugs"
			continue
		}
		if !in {
			continue
		}
		if m := seededRow.FindStringSubmatch(line); m != nil {
			rows = append(rows, SeededRow{Name: m[1], Package: m[2], Test: m[3], Line: n})
		} else if strings.HasPrefix(line, "| `") {
			return nil, fmt.Errorf("%s:%d: a row of the seeded bugs not as \"| `NAME` | ... | `PACKAGE` `TestName` |\": %s", path, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no section \"## Seeded bugs\" with rows", path)
	}
	return rows, nil
}

// noteSeeded takes a test's output line: a seeded bug reported caught
// counts once its top-level test passes.
func (r *Run) noteSeeded(e Event) {
	i := strings.Index(e.Output, seededMarker)
	if i < 0 {
		return
	}
	key := e.Package + "\x00" + topLevel(e.Test)
	r.pending[key] = append(r.pending[key], strings.TrimSpace(e.Output[i+len(seededMarker):]))
}

// testDone records a top-level test's status and what it caught.
func (r *Run) testDone(e Event) {
	key := e.Package + "\x00" + e.Test
	r.status[key] = e.Action
	if e.Action == "pass" {
		for _, name := range r.pending[key] {
			r.caught[key+"\x00"+name] = true
		}
	}
	delete(r.pending, key)
}

func topLevel(test string) string {
	if i := strings.IndexByte(test, '/'); i >= 0 {
		return test[:i]
	}
	return test
}

// CheckSeeded says what in the run contradicts the list: a listed bug its
// test did not report caught (the test failed, was skipped, did not run,
// or passed without applying and catching it) and a bug reported caught
// that no row lists. Nothing: the list is the run's.
func CheckSeeded(rows []SeededRow, r *Run, list string) []string {
	var problems []string
	listed := map[string]bool{}
	for _, row := range rows {
		pkg := r.packageNamed(row.Package)
		key := pkg + "\x00" + row.Test
		listed[key+"\x00"+row.Name] = true
		if r.caught[key+"\x00"+row.Name] {
			continue
		}
		var why string
		switch st := r.status[key]; {
		case r.byPackage[pkg] == nil:
			why = "its package did not run"
		case st == "":
			why = "the test did not run (renamed? removed?)"
		case st == "fail":
			why = "the test failed"
		case st == "skip":
			why = "the test was skipped"
		default:
			why = "the test passed without reporting it caught (seeded.Caught): is the bug still applied and checked?"
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %q, %s %s: %s", list, row.Line, row.Name, row.Package, row.Test, why))
	}
	var extra []string
	for k := range r.caught {
		if !listed[k] {
			p := strings.SplitN(k, "\x00", 3)
			extra = append(extra, fmt.Sprintf("%s: %s %s reported %q caught: no row of its list names it", list, p[0], p[1], p[2]))
		}
	}
	sort.Strings(extra)
	return append(problems, extra...)
}

// packageNamed is the import path of the run's package whose path is
// name or ends in /name (the list names packages within the module).
func (r *Run) packageNamed(name string) string {
	for p := range r.byPackage {
		if p == name || strings.HasSuffix(p, "/"+name) {
			return p
		}
	}
	return "stepbench/" + name
}

// checkSeeded prints the check of the list against the run; false when
// something contradicts it.
func checkSeeded(w io.Writer, list string, r *Run) bool {
	rows, err := ReadSeededList(list)
	if err != nil {
		fmt.Fprintln(w, "testtimes:", err)
		return false
	}
	problems := CheckSeeded(rows, r, list)
	if len(problems) == 0 {
		fmt.Fprintf(w, "seeded bugs: each of the %d in %s reported caught by its test in this run\n", len(rows), list)
		return true
	}
	fmt.Fprintf(w, "seeded bugs: %d of %s's %d rows and reports disagree with this run:\n", len(problems), list, len(rows))
	for _, p := range problems {
		fmt.Fprintln(w, "  "+p)
	}
	return false
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent).
type Event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// TestTime is one finished top-level test.
type TestTime struct {
	Package, Test, Status string
	Seconds               float64
}

// PackageTime is one package's test binary.
type PackageTime struct {
	Package, Status string
	Seconds         float64
	Tests           int // top-level tests that finished
}

// Run is what one or more streams say.
type Run struct {
	Tests    []TestTime
	Packages []*PackageTime
	Wall     float64 // seconds in which some stream ran: from its first event to its last
	Failed   bool

	first, last time.Time
	spans       []span // each stream's first and last event
	byPackage   map[string]*PackageTime
	output      map[string][]string // a running test's lines, printed if it fails
	// seeded bugs (seeded.go): reported caught by a running test, caught
	// by a test that passed (package, test, bug), each top-level test's status
	pending map[string][]string
	caught  map[string]bool
	status  map[string]string
}

// NewRun is an empty run.
func NewRun() *Run {
	return &Run{byPackage: map[string]*PackageTime{}, output: map[string][]string{},
		pending: map[string][]string{}, caught: map[string]bool{}, status: map[string]string{}}
}

// Read takes the events of one stream. What plain `go test` would print
// goes to human: package results, failed tests' output, build errors, and
// any line that is not an event.
func (r *Run) Read(in io.Reader, human io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e Event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(human, "%s\n", line)
			continue
		}
		r.Add(e, human)
	}
	if r.first.IsZero() {
		return sc.Err()
	}
	r.spans = append(r.spans, span{r.first, r.last})
	r.Wall = wall(r.spans)
	r.first, r.last = time.Time{}, time.Time{}
	return sc.Err()
}

type span struct{ from, to time.Time }

// wall is how long some span lasted: streams run one after another add up,
// streams run side by side count once.
func wall(spans []span) float64 {
	sorted := append([]span(nil), spans...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].from.Before(sorted[j].from) })
	total, end := 0.0, time.Time{}
	for _, s := range sorted {
		if s.from.Before(end) {
			s.from = end
		}
		if s.to.After(s.from) {
			total += s.to.Sub(s.from).Seconds()
			end = s.to
		}
	}
	return total
}

// Add takes one event.
func (r *Run) Add(e Event, human io.Writer) {
	if !e.Time.IsZero() {
		if r.first.IsZero() || e.Time.Before(r.first) {
			r.first = e.Time
		}
		if e.Time.After(r.last) {
			r.last = e.Time
		}
	}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(human, e.Output)
	case e.Test == "" && e.Action == "output":
		if e.Output != "PASS\n" {
			fmt.Fprint(human, e.Output)
		}
	case e.Test == "":
		r.packageDone(e)
	case e.Action == "output":
		key := e.Package + "\x00" + e.Test
		r.output[key] = append(r.output[key], e.Output)
		r.noteSeeded(e)
	default:
		r.testEvent(e, human)
	}
}

func (r *Run) packageDone(e Event) {
	if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
		return
	}
	p := r.pkg(e.Package)
	p.Status, p.Seconds = e.Action, e.Elapsed
	if e.Action == "fail" {
		r.Failed = true
	}
}

func (r *Run) pkg(name string) *PackageTime {
	p := r.byPackage[name]
	if p == nil {
		p = &PackageTime{Package: name}
		r.byPackage[name] = p
		r.Packages = append(r.Packages, p)
	}
	return p
}

func (r *Run) testEvent(e Event, human io.Writer) {
	if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
		return
	}
	key := e.Package + "\x00" + e.Test
	if e.Action == "fail" {
		r.Failed = true
		for _, l := range r.output[key] {
			fmt.Fprint(human, l)
		}
	}
	delete(r.output, key)
	if strings.Contains(e.Test, "/") {
		return
	}
	r.testDone(e)
	r.Tests = append(r.Tests, TestTime{Package: e.Package, Test: e.Test, Status: e.Action, Seconds: e.Elapsed})
	r.pkg(e.Package).Tests++
}

// Merge is runs one after another.
func Merge(runs []*Run) *Run {
	out := NewRun()
	for _, r := range runs {
		out.Tests = append(out.Tests, r.Tests...)
		for _, p := range r.Packages {
			q := out.pkg(p.Package)
			q.Seconds += p.Seconds
			q.Tests += p.Tests
			if q.Status != "fail" {
				q.Status = p.Status
			}
		}
		out.spans = append(out.spans, r.spans...)
		for k, v := range r.caught {
			out.caught[k] = v
		}
		for k, v := range r.status {
			if out.status[k] != "pass" {
				out.status[k] = v
			}
		}
		out.Failed = out.Failed || r.Failed
	}
	out.Wall = wall(out.spans)
	return out
}

// Slowest is the n slowest tests, slowest first.
func (r *Run) Slowest(n int) []TestTime {
	tests := append([]TestTime(nil), r.Tests...)
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].Seconds > tests[j].Seconds })
	return tests[:min(n, len(tests))]
}

// ByWall is the packages that ran tests, slowest first.
func (r *Run) ByWall() []*PackageTime {
	var ps []*PackageTime
	for _, p := range r.Packages {
		if p.Tests > 0 || p.Status == "fail" {
			ps = append(ps, p)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Seconds > ps[j].Seconds })
	return ps
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const seededStream = `{"Time":"2026-01-01T10:00:00Z","Action":"run","Package":"stepbench/x/gpu","Test":"TestBugs"}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"stepbench/x/gpu","Test":"TestBugs/one","Output":"    emu_test.go:12: seeded bug caught: off by one\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"pass","Package":"stepbench/x/gpu","Test":"TestBugs/one","Elapsed":1}
{"Time":"2026-01-01T10:00:02Z","Action":"output","Package":"stepbench/x/gpu","Test":"TestBugs","Output":"    emu_test.go:12: seeded bug caught: a race\n"}
{"Time":"2026-01-01T10:00:02Z","Action":"pass","Package":"stepbench/x/gpu","Test":"TestBugs","Elapsed":2}
{"Time":"2026-01-01T10:00:02Z","Action":"output","Package":"stepbench/x/gpu","Test":"TestFails","Output":"    emu_test.go:40: seeded bug caught: a deadlock\n"}
{"Time":"2026-01-01T10:00:03Z","Action":"fail","Package":"stepbench/x/gpu","Test":"TestFails","Elapsed":1}
{"Time":"2026-01-01T10:00:03Z","Action":"pass","Package":"stepbench/x/gpu","Test":"TestQuiet","Elapsed":0}
{"Time":"2026-01-01T10:00:03Z","Action":"skip","Package":"stepbench/x/gpu","Test":"TestSkips","Elapsed":0}
{"Time":"2026-01-01T10:00:04Z","Action":"fail","Package":"stepbench/x/gpu","Elapsed":4}
`

func seededList(t *testing.T, rows ...string) string {
	t.Helper()
	text := "# Development\n\n## Seeded bugs\n\n| seeded bug | caught by | test |\n|---|---|---|\n" + strings.Join(rows, "\n") + "\n\n## Next\n\n| `x` | y | `x/gpu` `TestNotARow` |\n"
	path := filepath.Join(t.TempDir(), "development.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func seededRun(t *testing.T) *Run {
	t.Helper()
	r := NewRun()
	if err := r.Read(strings.NewReader(seededStream), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// A list the run agrees with passes: each bug reported caught by its test
// (a subtest's report counts for its top-level test), which passed.
func TestSeededListAgrees(t *testing.T) {
	list := seededList(t,
		"| `off by one` | the guard page | `x/gpu` `TestBugs` |",
		"| `a race` | a schedule | `x/gpu` `TestBugs` |")
	var out bytes.Buffer
	if !checkSeeded(&out, list, seededRun(t)) || !strings.Contains(out.String(), "each of the 2") {
		t.Errorf("a list the run agrees with: %s", out.String())
	}
}

// Each way a listed bug goes uncaught is named, and so is a bug caught
// that no row lists.
func TestSeededListDisagrees(t *testing.T) {
	list := seededList(t,
		"| `off by one` | the guard page | `x/gpu` `TestBugs` |",
		"| `a deadlock` | the scheduler | `x/gpu` `TestFails` |",
		"| `a torn file` | the reader | `x/gpu` `TestQuiet` |",
		"| `a FIFO` | the reader | `x/gpu` `TestSkips` |",
		"| `renamed` | the reader | `x/gpu` `TestGone` |",
		"| `elsewhere` | the reader | `x/cpu` `TestBugs` |")
	rows, err := ReadSeededList(list)
	if err != nil || len(rows) != 6 || rows[0].Line != 7 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	problems := CheckSeeded(rows, seededRun(t), "development.md")
	want := []string{
		`development.md:8: "a deadlock", x/gpu TestFails: the test failed`,
		`development.md:9: "a torn file", x/gpu TestQuiet: the test passed without reporting it caught`,
		`development.md:10: "a FIFO", x/gpu TestSkips: the test was skipped`,
		`development.md:11: "renamed", x/gpu TestGone: the test did not run`,
		`development.md:12: "elsewhere", x/cpu TestBugs: its package did not run`,
		`development.md: stepbench/x/gpu TestBugs reported "a race" caught: no row of its list names it`,
	}
	if len(problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d: %s\nwant it to start %s", i, problems[i], w)
		}
	}
}

// A row not in the list's form is an error, not a row left out.
func TestSeededListMalformedRow(t *testing.T) {
	list := seededList(t, "| `off by one` | the guard page | TestBugs |")
	if _, err := ReadSeededList(list); err == nil || !strings.Contains(err.Error(), ":7:") {
		t.Errorf("malformed row: %v", err)
	}
}

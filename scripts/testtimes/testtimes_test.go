package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const stream = `{"Time":"2026-01-01T10:00:00Z","Action":"start","Package":"stepbench/a"}
{"Time":"2026-01-01T10:00:00Z","Action":"run","Package":"stepbench/a","Test":"TestFast"}
{"Time":"2026-01-01T10:00:00Z","Action":"output","Package":"stepbench/a","Test":"TestFast","Output":"=== RUN   TestFast\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"pass","Package":"stepbench/a","Test":"TestFast","Elapsed":1}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"stepbench/a","Test":"TestSlow","Output":"--- FAIL: TestSlow/sub (3.00s)\n"}
{"Time":"2026-01-01T10:00:04Z","Action":"fail","Package":"stepbench/a","Test":"TestSlow/sub","Elapsed":3}
{"Time":"2026-01-01T10:00:04Z","Action":"output","Package":"stepbench/a","Test":"TestSlow","Output":"--- FAIL: TestSlow (3.00s)\n"}
{"Time":"2026-01-01T10:00:04Z","Action":"fail","Package":"stepbench/a","Test":"TestSlow","Elapsed":3}
{"Time":"2026-01-01T10:00:04Z","Action":"output","Package":"stepbench/a","Output":"PASS\n"}
{"Time":"2026-01-01T10:00:04Z","Action":"output","Package":"stepbench/a","Output":"FAIL\tstepbench/a\t4.0s\n"}
{"Time":"2026-01-01T10:00:04Z","Action":"fail","Package":"stepbench/a","Elapsed":4}
not an event
{"Time":"2026-01-01T10:00:05Z","Action":"skip","Package":"stepbench/b","Test":"TestSkipped","Elapsed":0.5}
{"Time":"2026-01-01T10:00:10Z","Action":"pass","Package":"stepbench/b","Elapsed":6}
`

func TestReadPrintsWhatGoTestWould(t *testing.T) {
	r := NewRun()
	var human bytes.Buffer
	if err := r.Read(strings.NewReader(stream), &human); err != nil {
		t.Fatal(err)
	}
	want := "--- FAIL: TestSlow/sub (3.00s)\n--- FAIL: TestSlow (3.00s)\nFAIL\tstepbench/a\t4.0s\nnot an event\n"
	if human.String() != want {
		t.Errorf("printed %q, want %q", human.String(), want)
	}
	if !r.Failed || r.Wall != 10 || len(r.Tests) != 3 {
		t.Errorf("failed %v, wall %v, %d tests; want true, 10, 3", r.Failed, r.Wall, len(r.Tests))
	}
	slow := r.Slowest(2)
	if len(slow) != 2 || slow[0].Test != "TestSlow" || slow[0].Status != "fail" || slow[1].Test != "TestFast" {
		t.Errorf("slowest %+v", slow)
	}
	ps := r.ByWall()
	if len(ps) != 2 || ps[0].Package != "stepbench/b" || ps[0].Seconds != 6 || ps[1].Tests != 2 || ps[1].Status != "fail" {
		t.Errorf("packages %+v %+v", ps[0], ps[1])
	}
}

func TestTablesOfTwoStreams(t *testing.T) {
	var runs []*Run
	for range 2 {
		r := NewRun()
		if err := r.Read(strings.NewReader(stream), &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	m := Merge(runs)
	if m.Wall != 10 || len(m.Tests) != 6 || m.ByWall()[0].Seconds != 12 {
		t.Errorf("merged: wall %v (two streams at the same time: 10), %d tests, %+v", m.Wall, len(m.Tests), m.ByWall()[0])
	}
	later := NewRun()
	if err := later.Read(strings.NewReader(strings.ReplaceAll(stream, "T10:", "T11:")), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if w := Merge([]*Run{runs[0], later}).Wall; w != 20 {
		t.Errorf("two streams an hour apart: wall %v, want 20", w)
	}
	var text, md bytes.Buffer
	printText(&text, m, 30)
	printMarkdown(&md, m, 30)
	for _, want := range []string{"the 6 slowest tests of 6", "TestSlow (FAIL)", "TestSkipped (skip)", "b\n", "0m10s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if !strings.Contains(md.String(), "| `TestSlow (FAIL)` | a | 3.0 |") || !strings.Contains(md.String(), "| b | 2 | 12.0 |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// The wrapper saves the stream and passes on the command's exit status.
func TestWrapSavesTheStream(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	if err := os.WriteFile(in, []byte(stream), 0o644); err != nil {
		t.Fatal(err)
	}
	save := filepath.Join(dir, "out.json")
	var stdout, stderr bytes.Buffer
	if code := wrap(save, []string{"sh", "-c", "cat " + in + "; exit 3"}, &stdout, &stderr); code != 3 {
		t.Errorf("exit %d, want 3 (stderr %q)", code, stderr.String())
	}
	if got, _ := os.ReadFile(save); string(got) != stream {
		t.Errorf("saved %q", got)
	}
	if !strings.Contains(stdout.String(), "FAIL\tstepbench/a") {
		t.Errorf("printed %q", stdout.String())
	}
	if code := wrap(save, []string{"sh", "-c", "cat " + in}, &stdout, &stderr); code != 1 {
		t.Errorf("a failed test under a command that exits 0: exit %d, want 1", code)
	}
}

package report

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/internal/files"
)

// beginCounter cancels a context at its n-th Begin: an interruption in
// the middle of a sweep, at a known point.
type beginCounter struct {
	benchtest.Arm
	begins, cancelAt int
	cancel           func()
}

func (b *beginCounter) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	if b.begins++; b.begins == b.cancelAt {
		b.cancel()
	}
	return b.Arm.Begin(batch, inputLen, outputLen, prompts)
}

// A SIGINT (here: the cancellation it causes) during the third of six
// shapes leaves two one_batch records, their vLLM files and a valid native
// report that also holds the third shape's finished iterations, marked.
func TestInterruptedRunKeepsFinishedShapes(t *testing.T) {
	dir := t.TempDir()
	device := benchtest.NewDevice(4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Per shape: 1 warmup + 3 timed Begins; Begin 12 is the third shape's third timed iteration.
	target := &beginCounter{Arm: benchtest.Arm{Name: "A", Device: device, Slowdown: 1}, cancelAt: 12, cancel: cancel}
	files := ResultFiles{
		OneBatchJSONL: OutputFile{Label: "--result-filename", Path: filepath.Join(dir, "r.jsonl")},
		VLLMJSON:      OutputFile{Label: "--output-json", Path: filepath.Join(dir, "v.json")},
		Native:        OutputFile{Label: "--json-out", Path: filepath.Join(dir, "n.json")},
		SeveralShapes: true, RunName: "t",
	}
	var vllmLines bytes.Buffer
	files.VLLMLines = &vllmLines
	w := NewResultWriter(files, Report{ToolVersion: "test"})
	opt := bench.Options{BatchSizes: []int{1, 2, 3}, InputLens: []int{8}, OutputLens: []int{2, 4}, NumIters: 3, WarmupIters: 1,
		Seed: 1, VocabSize: 50, Context: ctx, Now: device.Clock,
		AfterShape: func(s bench.ShapeResult) error { return w.AddShape(s, NewShapeReport(s)) }}
	shapes, err := bench.Run(target, opt)
	if !errors.Is(err, bench.ErrInterrupted) {
		t.Fatalf("error %v, want bench.ErrInterrupted", err)
	}
	if len(shapes) != 3 || !shapes[1].Complete || shapes[2].Complete || len(shapes[2].Iterations) != 2 {
		t.Fatalf("%d shapes; want 2 complete and the third with its 2 finished iterations", len(shapes))
	}
	data, err := os.ReadFile(files.OneBatchJSONL.Path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 2 {
		t.Errorf("%d JSONL records, want 2:\n%s", len(lines), data)
	}
	rep, err := Read(files.Native.Path)
	if err != nil {
		t.Fatalf("native report: %v", err)
	}
	if len(rep.Shapes) != 3 || rep.Shapes[2].Complete || rep.Shapes[2].StopReason != bench.StopInterrupted || rep.Shapes[2].Iterations != 2 {
		t.Errorf("native report: %d shapes, third %+v", len(rep.Shapes), rep.Shapes[2].StopReason)
	}
	for _, name := range []string{"v_batch1_input8_output2.json", "v_batch1_input8_output4.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("vLLM file of a finished shape: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "v_batch2_input8_output2.json")); err == nil {
		t.Error("a vLLM file for the interrupted shape")
	}
	if n := strings.Count(vllmLines.String(), "Avg latency: "); n != 2 {
		t.Errorf("%d vLLM summaries, want 2:\n%s", n, vllmLines.String())
	}
	if got := w.Written(); len(got) != 4 || w.Shapes() != 3 {
		t.Errorf("written %v, %d shapes", got, w.Shapes())
	}
}

func TestCheckOutputs(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "history.jsonl")
	if err := os.WriteFile(existing, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Links to files that do not exist yet: a dangling link, a chain of
	// two, and a linked directory (in a directory of their own).
	links := t.TempDir()
	newFile := filepath.Join(links, "new.json")
	for _, l := range []struct{ name, target string }{
		{"dangling.json", newFile}, {"chain.json", "dangling.json"}, {"linkdir", dir},
	} {
		if err := os.Symlink(l.target, filepath.Join(links, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name            string
		outputs, inputs []OutputFile
		want            string
	}{
		{"fine", []OutputFile{{Label: "--json-out", Path: filepath.Join(dir, "n.json")}, {Label: "--result-filename", Path: existing}}, nil, ""},
		{"a dangling link to the other", []OutputFile{{Label: "--json-out", Path: newFile}, {Label: "--result-filename", Path: filepath.Join(links, "dangling.json")}}, nil,
			"--json-out and --result-filename name the same file"},
		{"a chain of links to the other", []OutputFile{{Label: "--json-out", Path: filepath.Join(links, "chain.json")}, {Label: "--result-filename", Path: newFile}}, nil,
			"name the same file"},
		{"a new file through a linked directory", []OutputFile{{Label: "--json-out", Path: filepath.Join(dir, "r.json")}, {Label: "--result-filename", Path: filepath.Join(links, "linkdir", "r.json")}}, nil,
			"name the same file"},
		{"links to different new files", []OutputFile{{Label: "--json-out", Path: filepath.Join(links, "dangling.json")}, {Label: "--result-filename", Path: filepath.Join(links, "linkdir", "r.json")}}, nil, ""},
		{"same file twice", []OutputFile{{Label: "--result-filename", Path: existing}, {Label: "--json-out", Path: existing}}, nil,
			"--result-filename and --json-out name the same file"},
		{"same file, other spelling", []OutputFile{{Label: "--result-filename", Path: existing}, {Label: "--json-out", Path: dir + "/./history.jsonl"}}, nil,
			"name the same file"},
		{"output is an input", []OutputFile{{Label: "--logits-out", Path: existing}}, []OutputFile{{Label: "--prompt-ids", Path: existing}},
			"--logits-out and --prompt-ids name the same file"},
		{"missing directory", []OutputFile{{Label: "--json-out", Path: filepath.Join(dir, "nope", "n.json")}}, nil,
			"--json-out " + filepath.Join(dir, "nope", "n.json") + ": directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"a directory", []OutputFile{{Label: "--json-out", Path: dir}}, nil, "not a regular file"},
	}
	for _, tc := range tests {
		err := CheckOutputs(tc.outputs, tc.inputs)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), dir) > 2 {
			t.Errorf("%s: the path repeats: %v", tc.name, err)
		}
	}
	if data, _ := os.ReadFile(existing); string(data) != "{}\n" {
		t.Errorf("the check changed an existing file: %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the check left files: %v", entries)
	}
}

// A probe file left by a process killed inside CheckOutputs (between its
// create and its remove) is removed by the next check of the same file,
// not left beside the results for good.
func TestCheckOutputsRemovesAKilledRunsProbe(t *testing.T) {
	dir := t.TempDir()
	out := OutputFile{Label: "--json-out", Path: filepath.Join(dir, "n.json")}
	// What a kill between the probe's create and its remove leaves behind.
	if err := os.WriteFile(files.ProbePath(out.Path), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutputs([]OutputFile{out}, nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("files left beside the output after a check: %v", left)
	}
}

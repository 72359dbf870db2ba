package runner

import (
	"slices"
	"testing"
)

// rangeLog records pushes and pops as a profiler would see them.
type rangeLog struct {
	events []string
	depth  int
}

func (r *rangeLog) Push(name string) { r.events = append(r.events, name); r.depth++ }
func (r *rangeLog) Pop()             { r.events = append(r.events, "pop"); r.depth-- }

// Every op of a step gets one range, named as OnOp's label, closed before
// the next opens and all closed when the step is enqueued.
func TestEngineOpRanges(t *testing.T) {
	e := tinyEngine(t)
	var labels []string
	e.OnOp = func(op string) { labels = append(labels, op) }
	ranges := &rangeLog{}
	e.Ranges = ranges
	if err := e.Begin(2, 3, 2, []int32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := e.Prefill(); err != nil {
		t.Fatal(err)
	}
	if err := e.Decode(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range labels {
		want = append(want, l, "pop")
	}
	if !slices.Equal(ranges.events, want) || ranges.depth != 0 {
		t.Errorf("ranges %v (depth %d), want one per op %v", ranges.events, ranges.depth, want)
	}
	if !slices.Contains(labels, "qkv_proj") || !slices.Contains(labels, "argmax") {
		t.Errorf("labels %v lack the ops", labels)
	}
}

package report

import (
	"bytes"
	"strings"
	"testing"

	"stepbench/bench"
)

func TestRankTable(t *testing.T) {
	s := ShapeReport{Shape: bench.Shape{Batch: 2, InputLen: 16, OutputLen: 3}, Samples: []SampleReport{
		{Phase: bench.PhasePrefill, RankDeviceSeconds: []float64{0.010, 0.012}},
		{Phase: bench.PhaseDecode, Step: 0, RankDeviceSeconds: []float64{0.001, 0.004}},
		{Phase: bench.PhaseDecode, Step: 1, RankDeviceSeconds: []float64{0.003, 0.002}},
	}}
	if HasRanks([]ShapeReport{{}}) || !HasRanks([]ShapeReport{s}) {
		t.Fatal("HasRanks")
	}
	var b bytes.Buffer
	if err := WriteRankTable(&b, []ShapeReport{s}, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"batch", "input", "output", "rank", "prefill_dev_ms", "decode_dev_ms"},
		{"2", "16", "3", "2", "10.00", "2.000"}, // ranks 2 and 3: another node's
		{"2", "16", "3", "3", "12.00", "3.000"},
	}
	if len(lines) != 4 || lines[0] != RankTableTitle {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %v, want %v", i, got, w)
		}
	}
}

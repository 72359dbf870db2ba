package floors

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

func TestFloorsAndTables(t *testing.T) {
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	g, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tp     int
		outs   []int    // output lengths: the first token comes from prefill, output-1 decode steps follow
		rows   []string // step names in the table, in order, for the first shape
		commOK bool
	}{
		{"one GPU", 0, []int{3, 1}, []string{"prefill", "decode first", "decode last", "iteration"}, false},
		{"tp 2", 2, []int{2}, []string{"prefill", "decode first", "iteration"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shapes, err := Floors(cfg, g, tc.tp, []int{1, 4}, []int{1}, tc.outs)
			if err != nil {
				t.Fatal(err)
			}
			var want []bench.Shape
			for _, b := range []int{1, 4} {
				for _, o := range tc.outs {
					want = append(want, bench.Shape{Batch: b, InputLen: 1, OutputLen: o})
				}
			}
			if len(shapes) != len(want) {
				t.Fatalf("%d shapes, want %d", len(shapes), len(want))
			}
			for i, s := range shapes {
				if s.Shape != want[i] {
					t.Errorf("shape %d = %+v, want %+v (batch outermost)", i, s.Shape, want[i])
				}
			}
			if tc.tp == 0 { // the 8B decode floor the README and presets test pin
				if f := shapes[0].Floors.DecodeFloors[0]; math.Abs(f.Seconds-4.48e-3) > 0.01e-3 {
					t.Errorf("decode floor %.4f ms, want 4.48", f.Seconds*1e3)
				}
			}
			var out bytes.Buffer
			if err := WriteFloorsTable(&out, cfg, g, tc.tp, shapes); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if got := strings.Contains(text, "comm_ms") && strings.Contains(text, "collectives"); got != tc.commOK {
				t.Errorf("comm columns shown = %v, want %v:\n%s", got, tc.commOK, text)
			}
			last := -1
			for _, step := range tc.rows {
				i := strings.Index(text[last+1:], step)
				if i < 0 {
					t.Fatalf("row %q missing or out of order:\n%s", step, text)
				}
				last += 1 + i
			}
			out.Reset()
			if err := WriteOpFloorsTable(&out, g, shapes[0]); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "attention") {
				t.Errorf("op table names no attention op:\n%s", out.String())
			}
		})
	}
}

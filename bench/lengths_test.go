package bench

import (
	"slices"
	"strings"
	"testing"

	"stepbench/runner"
)

func TestParseLengthSpec(t *testing.T) {
	for _, tc := range []struct {
		in, canonical, err string
	}{
		{in: "128,4096,512", canonical: "128,4096,512"},
		{in: "7", canonical: "7"},
		{in: " 3, 4", canonical: "3,4"},
		{in: "uniform:200-8000", canonical: "uniform:200-8000"},
		{in: "uniform:5-5", canonical: "uniform:5-5"},
		{in: "normal:2048,512", canonical: "normal:2048,512"},
		{in: "normal:100.5,0", canonical: "normal:100.5,0"},
		{in: "", err: "want lengths"},
		{in: "1,0", err: "want lengths"},
		{in: "1,,2", err: "want lengths"},
		{in: "uniform:9-3", err: "uniform:LO-HI"},
		{in: "uniform:0-3", err: "uniform:LO-HI"},
		{in: "uniform:3", err: "uniform:LO-HI"},
		{in: "normal:0,5", err: "normal:MEAN,SD"},
		{in: "normal:5,-1", err: "normal:MEAN,SD"},
		{in: "normal:NaN,1", err: "normal:MEAN,SD"},
		{in: "normal:+Inf,1", err: "normal:MEAN,SD"},
		{in: "zipf:1", err: "unknown distribution"},
	} {
		l, err := ParseLengthSpec(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || l.String() != tc.canonical {
			t.Errorf("%q: %q, %v; want %q", tc.in, l.String(), err, tc.canonical)
		}
	}
}

func FuzzParseLengthSpec(f *testing.F) {
	for _, s := range []string{"128,4096,512", "uniform:1-9", "normal:50,10", "normal:1e300,1e300", ":", "uniform:-", "1,2,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLengthSpec(s)
		if err != nil {
			return
		}
		again, err := ParseLengthSpec(l.String())
		if err != nil || again.String() != l.String() {
			t.Fatalf("%q: canonical %q does not read back (%v)", s, l.String(), err)
		}
		lens, err := l.Lengths(3, 1, 1000)
		if l.List != nil && len(l.List) != 3 {
			return
		}
		if err != nil && !slices.ContainsFunc(l.List, func(n int) bool { return n > 1000 }) {
			t.Fatalf("%q: %v", s, err)
		}
		for _, n := range lens {
			if n < 1 || n > 1000 {
				t.Fatalf("%q: length %d outside [1, 1000]", s, n)
			}
		}
	})
}

func TestLengthsSeededAndClipped(t *testing.T) {
	u := LengthSpec{Dist: DistUniform, Lo: 200, Hi: 8000}
	a, _ := u.Lengths(32, 7, 100000)
	b, _ := u.Lengths(32, 7, 100000)
	c, _ := u.Lengths(32, 8, 100000)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatal("the lengths are not a function of (spec, batch, seed)")
	}
	for _, n := range a {
		if n < 200 || n > 8000 {
			t.Fatalf("uniform length %d outside [200, 8000]", n)
		}
	}
	clipped, _ := LengthSpec{Dist: DistNormal, Mean: 100, SD: 1000}.Lengths(64, 1, 150)
	if slices.Min(clipped) != 1 || slices.Max(clipped) != 150 {
		t.Fatalf("normal lengths not clipped to [1, 150]: min %d max %d", slices.Min(clipped), slices.Max(clipped))
	}
	if _, err := (LengthSpec{List: []int{5, 6}}).Lengths(3, 1, 100); err == nil {
		t.Error("a list of 2 for batch 3 passed")
	}
	if _, err := (LengthSpec{List: []int{5, 600}}).Lengths(2, 1, 100); err == nil {
		t.Error("a listed length past the longest passed")
	}
}

func TestRaggedShapes(t *testing.T) {
	opt := Options{BatchSizes: []int{3}, OutputLens: []int{4, 8}, ContextLens: LengthSpec{List: []int{5, 17, 33}}, MaxPositions: 64}
	shapes, err := opt.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	if len(shapes) != 2 || shapes[0].Lens != "5,17,33" || shapes[0].InputLen != 18 || !shapes[0].Ragged() {
		t.Fatalf("shapes %+v", shapes)
	}
	if got := shapes[0].Seqs(); !slices.Equal(got, []runner.SeqSpec{{Prompt: 5}, {Prompt: 17}, {Prompt: 33}}) {
		t.Errorf("seqs %v", got)
	}
	if shapes[0].KVTokens() != 55 || shapes[0].PromptTokens() != 55 {
		t.Errorf("kv tokens %d, prompt tokens %d; want 55, 55", shapes[0].KVTokens(), shapes[0].PromptTokens())
	}
	opt.KVFill = KVFillSynthetic
	shapes, _ = opt.Shapes()
	if got := shapes[0].Seqs(); !slices.Equal(got, []runner.SeqSpec{{Context: 4, Prompt: 1}, {Context: 16, Prompt: 1}, {Context: 32, Prompt: 1}}) {
		t.Errorf("synthetic seqs %v", got)
	}
	if shapes[0].PromptTokens() != 3 || shapes[0].String() != "batch_size=3 input_len=18 output_len=4 context_lens=5,17,33 kv_fill=synthetic" {
		t.Errorf("synthetic: %d prompt tokens, %q", shapes[0].PromptTokens(), shapes[0].String())
	}
	// Equal lengths are the uniform shape: the same key, prompts and outputs.
	opt = Options{BatchSizes: []int{2}, OutputLens: []int{4}, ContextLens: LengthSpec{List: []int{9, 9}}, MaxPositions: 64}
	shapes, _ = opt.Shapes()
	if shapes[0] != (Shape{Batch: 2, InputLen: 9, OutputLen: 4}) {
		t.Errorf("equal lengths: %+v, want the uniform shape", shapes[0])
	}
	long := RaggedShape([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, "")
	if got := long.Label(); got != "b10 i6 o2 lens 1,2,3,4,…,7,8,9,10 (55 tokens)" {
		t.Errorf("label %q", got)
	}
}

// A ragged shape's prompts: one row per sequence at its own length, the
// same for the same key, and none of a uniform shape's streams moved.
func TestRaggedPrompts(t *testing.T) {
	sh := RaggedShape([]int{3, 1, 6}, 4, "")
	ids, err := PromptIDs(1, 100, PromptKey{Shape: sh})
	if err != nil || len(ids) != 10 {
		t.Fatalf("%d ids, %v; want 10", len(ids), err)
	}
	text, _ := NewTextPrompts([][]int32{{1, 2, 3, 4}, {5, 6}}, 0)
	rows, err := text.PromptIDs(PromptKey{Shape: sh})
	if err != nil || !slices.Equal(rows, []int32{1, 2, 3, 5, 2, 3, 4, 1, 2, 3}) {
		t.Fatalf("text rows %v, %v", rows, err)
	}
	uniform := PromptKey{Shape: Shape{Batch: 2, InputLen: 3, OutputLen: 4}}
	if uniform.stream() == (PromptKey{Shape: Shape{Batch: 2, InputLen: 3, OutputLen: 4, KVFill: KVFillSynthetic}}).stream() {
		t.Error("a synthetic fill draws the uniform shape's prompts")
	}
}

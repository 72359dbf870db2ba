package bench

import (
	"fmt"
	"slices"
	"testing"
)

// Text prompts: each row one prompt, cut or repeated to the input length as
// SGLang's random dataset does; each pass through the file starts one token
// later; warmups read from the other end.
func TestTextPrompts(t *testing.T) {
	src, err := NewTextPrompts([][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sh := Shape{Batch: 2, InputLen: 4, OutputLen: 2}
	for _, c := range []struct {
		key  PromptKey
		want []int32
	}{
		{PromptKey{Shape: sh, Iter: 0}, []int32{1, 2, 3, 1, 4, 5, 6, 7}},
		{PromptKey{Shape: sh, Iter: 1}, []int32{2, 3, 1, 2, 5, 6, 7, 8}},
		{PromptKey{Shape: sh, Iter: 2}, []int32{3, 1, 2, 3, 6, 7, 8, 4}},
		{PromptKey{Shape: sh, Iter: 0, Warmup: true}, []int32{8, 4, 5, 6, 3, 1, 2, 3}},
	} {
		got, err := src.PromptIDs(c.key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.key, got, c.want)
		}
	}
	if src.Distinct() != 6 {
		t.Errorf("Distinct() = %d, want 2 prompts × 3 tokens", src.Distinct())
	}
	shifted, _ := NewTextPrompts([][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}}, 1)
	if got, _ := shifted.PromptIDs(PromptKey{Shape: Shape{Batch: 1, InputLen: 2, OutputLen: 1}}); !slices.Equal(got, []int32{4, 5}) {
		t.Errorf("seed 1: first row %v, want the second prompt", got)
	}
	if _, err := NewTextPrompts([][]int32{{1}, {}}, 0); err == nil {
		t.Error("an empty prompt accepted")
	}
}

// No two rows of a shape, timed or warmup, start alike while there are at
// most Distinct() of them: several prompts, many iterations.
func TestTextPromptsDistinctRows(t *testing.T) {
	var prompts [][]int32
	for p := 0; p < 7; p++ {
		var q []int32
		for k := 0; k < 5+p; k++ {
			q = append(q, int32(100*p+k))
		}
		prompts = append(prompts, q)
	}
	src, _ := NewTextPrompts(prompts, 42)
	sh := Shape{Batch: 5, InputLen: 16, OutputLen: 2}
	seen := map[string]string{}
	rows := 0
	for iter := 0; rows+2*sh.Batch <= src.Distinct(); iter++ {
		for _, warm := range []bool{false, true} {
			ids, err := src.PromptIDs(PromptKey{Shape: sh, Iter: iter, Warmup: warm})
			if err != nil {
				t.Fatal(err)
			}
			for r := 0; r < sh.Batch; r++ {
				row := fmt.Sprint(ids[r*sh.InputLen : (r+1)*sh.InputLen])
				where := fmt.Sprintf("iter %d row %d warmup %v", iter, r, warm)
				if prev, dup := seen[row]; dup {
					t.Fatalf("%s repeats %s: %s", where, prev, row)
				}
				seen[row] = where
			}
		}
		rows += 2 * sh.Batch
	}
}

// Run feeds every iteration, warmups included, the prompts of
// Options.Prompts.
func TestRunUsesPromptSource(t *testing.T) {
	src, err := NewTextPrompts([][]int32{{7, 8, 9}, {11, 12}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeTarget{}
	opt := testOptions()
	opt.Prompts = src
	if _, err := Run(fake, opt); err != nil {
		t.Fatal(err)
	}
	for i, p := range fake.prompts {
		for _, id := range p {
			if !slices.Contains([]int32{7, 8, 9, 11, 12}, id) {
				t.Fatalf("iteration %d got prompt %v, not from the text", i, p)
			}
		}
	}
	sh := Shape{Batch: 1, InputLen: 4, OutputLen: 3}
	want, _ := src.PromptIDs(PromptKey{Shape: sh, Iter: 0})
	if !slices.Equal(fake.prompts[1], want) { // after the shape's one warmup
		t.Errorf("first timed iteration: %v, want %v", fake.prompts[1], want)
	}
}

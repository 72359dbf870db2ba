package runner

import (
	"strings"
	"testing"
)

func TestParsePromptIDs(t *testing.T) {
	got, err := ParsePromptIDs(strings.NewReader("# comment\n1 2 3\n\n  4\t5  \n7\n"), "p.txt", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{{1, 2, 3}, {4, 5}, {7}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("prompt %d: %v, want %v", i, got[i], want[i])
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("prompt %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "no prompts"},
		{"1 x 3", "p.txt:1: token 2"},
		{"1 2\n3 10", "p.txt:2: token id 10 outside"},
		{"-1", "outside"},
		{"99999999999", "not an integer"},
	} {
		_, err := ParsePromptIDs(strings.NewReader(tc.in), "p.txt", 10)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParsePromptIDs(f *testing.F) {
	f.Add("1 2 3\n4 5\n")
	f.Add("# c\n\n0\n")
	f.Fuzz(func(t *testing.T, in string) {
		prompts, err := ParsePromptIDs(strings.NewReader(in), "fuzz", 100)
		if err != nil {
			return
		}
		for _, p := range prompts {
			if len(p) == 0 {
				t.Fatal("empty prompt accepted")
			}
			for _, id := range p {
				if id < 0 || id >= 100 {
					t.Fatalf("id %d outside the vocabulary accepted", id)
				}
			}
		}
	})
}

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

func TestParsePromptText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"The capital of France is\r\n\nHello world  \n", []string{"The capital of France is", "Hello world  "}},
		{"no newline at the end", []string{"no newline at the end"}},
		{"{\"prompt\": \"line one\\nline two\"}\n\n{\"prompt\": \"x\", \"id\": 3}\n", []string{"line one\nline two", "x"}},
		{"# a heading, not a comment\n{not json", []string{"# a heading, not a comment", "{not json"}},
	} {
		got, err := ParsePromptText(strings.NewReader(tc.in), "p.txt")
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "p.txt: no prompts"},
		{"\n\r\n", "no prompts"},
		{"{\"prompt\": \"a\"}\nplain text", "p.txt:2: not a JSON object"},
		{"{\"text\": \"a\"}", "p.txt:1: not a JSON object with a \"prompt\""},
	} {
		_, err := ParsePromptText(strings.NewReader(tc.in), "p.txt")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParsePromptText(f *testing.F) {
	f.Add("one\ntwo\r\n")
	f.Add("{\"prompt\": \"a\"}\n")
	f.Fuzz(func(t *testing.T, in string) {
		prompts, err := ParsePromptText(strings.NewReader(in), "fuzz")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
			return
		}
		for _, p := range prompts {
			if p == "" {
				t.Fatal("empty prompt accepted")
			}
		}
	})
}

package main

import (
	"slices"
	"strings"
	"testing"
)

func TestJoinListValues(t *testing.T) {
	fs := newFlagSet("t", nil)
	var f runFlags
	f.register(fs)
	tests := []struct{ in, want string }{
		{"--batch-size 1 2 4", "--batch-size=1,2,4"},
		{"--batch-size 1,2 4 --input-len 8", "--batch-size=1,2,4 --input-len=8"},
		{"--batch-size=1 2 --seed 3", "--batch-size=1,2 --seed 3"},
		{"--input-len -3", "--input-len=-3"},
		{"--batch-size 1 extra", "--batch-size=1 extra"},
		{"--batch-size", "--batch-size"},
		{"--seed 1 2", "--seed 1 2"},
		{"-- --batch-size 1 2", "-- --batch-size 1 2"},
	}
	for _, tc := range tests {
		if got := strings.Join(joinListValues(fs, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// joinListValues never loses or invents an argument's text: joined, the
// output holds the same non-flag words in order.
func FuzzJoinListValues(f *testing.F) {
	fs := newFlagSet("t", nil)
	var r runFlags
	r.register(fs)
	for _, seed := range []string{"--batch-size 1 2 4", "--input-len=3 4,5 x", "-- --output-len 1 2", "--batch-size"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		out := joinListValues(fs, args)
		words := func(xs []string) []string {
			var w []string
			for _, x := range xs {
				_, value, ok := strings.Cut(x, "=")
				if strings.HasPrefix(x, "--") && ok {
					x = value
				} else if strings.HasPrefix(x, "--") {
					continue
				}
				w = append(w, strings.FieldsFunc(x, func(r rune) bool { return r == ',' })...)
			}
			return w
		}
		if len(out) > len(args) || !slices.Equal(words(args), words(out)) {
			t.Fatalf("%q became %q", args, out)
		}
	})
}

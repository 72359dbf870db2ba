package testmatrix

import (
	"fmt"
	"testing"
)

var axes = []Axis{
	{"page_size", []string{"1", "16", "64"}},
	{"page_order", []string{"in-order", "shuffled"}},
	{"graphs", []string{"on", "off"}},
	{"tp", []string{"1", "2", "4"}},
	{"backend", []string{"cpu", "cuda"}},
}

func TestAllIsTheProduct(t *testing.T) {
	all := All(axes...)
	if len(all) != 3*2*2*3*2 {
		t.Fatalf("%d cases, want 72", len(all))
	}
	seen := map[string]bool{}
	for _, c := range all {
		seen[c.String(axes)] = true
	}
	if len(seen) != 72 {
		t.Errorf("%d distinct cases, want 72", len(seen))
	}
}

// Every pair of values of two axes is in some case of the subset, which is
// smaller than the product and the same on every call.
func TestPairwiseCoversEveryPair(t *testing.T) {
	cases := Pairwise(axes...)
	if len(cases) >= 72 || len(cases) < 9 {
		t.Errorf("%d cases: want fewer than the product's 72 and at least 3x3", len(cases))
	}
	for i := range axes {
		for j := i + 1; j < len(axes); j++ {
			for _, vi := range axes[i].Values {
				for _, vj := range axes[j].Values {
					found := false
					for _, c := range cases {
						found = found || c[axes[i].Name] == vi && c[axes[j].Name] == vj
					}
					if !found {
						t.Errorf("no case has %s=%s with %s=%s", axes[i].Name, vi, axes[j].Name, vj)
					}
				}
			}
		}
	}
	if fmt.Sprint(Pairwise(axes...)) != fmt.Sprint(cases) {
		t.Error("two calls chose different cases")
	}
	t.Logf("%d of 72 cases", len(cases))
}

func TestOneAxisIsEveryValue(t *testing.T) {
	if got := Pairwise(Axis{"tp", []string{"1", "2"}}); len(got) != 2 {
		t.Errorf("one axis: %v", got)
	}
}

func TestFullRunsEverything(t *testing.T) {
	t.Setenv(FullEnv, "1")
	if got := len(Cases(axes...)); got != 72 {
		t.Errorf("under %s=1: %d cases, want 72", FullEnv, got)
	}
	t.Setenv(FullEnv, "")
	if got := len(Cases(axes...)); got >= 72 {
		t.Errorf("without it: %d cases", got)
	}
}

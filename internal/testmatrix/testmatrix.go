// Package testmatrix picks the cases of a test's feature matrix (page sizes
// × page orders × graphs or eager × tensor-parallel sizes × backends, ...).
// make test runs a covering subset: every value of every axis at least once
// and every pair of values of two axes together at least once (pairwise
// coverage: a bug that needs two settings at once is met); make test-full
// (STEPBENCH_TEST_FULL=1) runs every combination.
//
// The subset is chosen greedily and deterministically: the same axes give
// the same cases on every run and machine, so a failure reproduces.
package testmatrix

import (
	"fmt"
	"os"
	"strings"
)

// FullEnv, set to 1, makes Cases return every combination (make test-full).
const FullEnv = "STEPBENCH_TEST_FULL"

// Axis is one dimension of a matrix: its name and its values.
type Axis struct {
	Name   string
	Values []string
}

// Case is one combination: a value per axis, by axis name.
type Case map[string]string

// String is the case as name=value pairs in the order of axes, for a
// subtest's name or a failure's message.
func (c Case) String(axes []Axis) string {
	parts := make([]string, 0, len(axes))
	for _, a := range axes {
		parts = append(parts, a.Name+"="+c[a.Name])
	}
	return strings.Join(parts, " ")
}

// Full reports whether every combination is asked for (make test-full).
func Full() bool { return os.Getenv(FullEnv) == "1" }

// Cases is every combination of axes under make test-full, else Pairwise.
func Cases(axes ...Axis) []Case {
	if Full() {
		return All(axes...)
	}
	return Pairwise(axes...)
}

// All is every combination of axes, the last axis varying fastest.
func All(axes ...Axis) []Case {
	out := []Case{{}}
	for _, a := range axes {
		var next []Case
		for _, c := range out {
			for _, v := range a.Values {
				n := Case{a.Name: v}
				for k, x := range c {
					n[k] = x
				}
				next = append(next, n)
			}
		}
		out = next
	}
	return out
}

// pair is two axes' values: axis i's value vi and axis j's vj (i < j), or
// with j = -1 axis i's value alone.
type pair struct{ i, vi, j, vj int }

// Pairwise is a subset of All holding every value of every axis and every
// pair of values of two axes at least once: repeatedly the combination
// that covers the most pairs not yet covered (the first such in All's
// order), until none is left.
func Pairwise(axes ...Axis) []Case {
	for _, a := range axes {
		if len(a.Values) == 0 {
			panic(fmt.Sprintf("testmatrix: axis %s has no values", a.Name))
		}
	}
	left := map[pair]bool{}
	for i := range axes {
		for vi := range axes[i].Values {
			left[pair{i, vi, -1, 0}] = true // the value alone
		}
		for j := i + 1; j < len(axes); j++ {
			for vi := range axes[i].Values {
				for vj := range axes[j].Values {
					left[pair{i, vi, j, vj}] = true
				}
			}
		}
	}
	all := indexes(axes)
	out := []Case{}
	for len(left) > 0 || len(out) == 0 {
		best, bestN := 0, -1
		for k, idx := range all {
			if n := covers(idx, left); n > bestN {
				best, bestN = k, n
			}
		}
		for i := range all[best] {
			delete(left, pair{i, all[best][i], -1, 0})
			for j := i + 1; j < len(all[best]); j++ {
				delete(left, pair{i, all[best][i], j, all[best][j]})
			}
		}
		c := Case{}
		for i, v := range all[best] {
			c[axes[i].Name] = axes[i].Values[v]
		}
		out = append(out, c)
	}
	return out
}

// indexes is All as value indexes.
func indexes(axes []Axis) [][]int {
	out := [][]int{{}}
	for _, a := range axes {
		var next [][]int
		for _, c := range out {
			for v := range a.Values {
				next = append(next, append(append([]int(nil), c...), v))
			}
		}
		out = next
	}
	return out
}

func covers(idx []int, left map[pair]bool) int {
	n := 0
	for i := range idx {
		if left[pair{i, idx[i], -1, 0}] {
			n++
		}
		for j := i + 1; j < len(idx); j++ {
			if left[pair{i, idx[i], j, idx[j]}] {
				n++
			}
		}
	}
	return n
}

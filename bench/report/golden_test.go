package report

import (
	"flag"
	"testing"

	"stepbench/bench/benchtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

// checkGolden compares got with testdata/golden/name (rewriting it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	benchtest.CheckGolden(t, name, got, *update)
}

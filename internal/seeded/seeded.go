// Package seeded is for tests that apply a seeded bug (a deliberate
// mistake in a kernel, an input, a run or the machine) and check that its
// detector catches it. Caught writes one line to the test's log, after that
// check: docs/development.md lists every seeded bug with the test that
// catches it, and at the end of make test scripts/testtimes -seeded reads
// the run's go test -json stream and fails unless each listed bug was
// reported caught by its test in that run, and each bug reported is listed.
package seeded

// Marker starts the line Caught logs.
const Marker = "seeded bug caught: "

// TB is what Caught needs of a *testing.T.
type TB interface {
	Helper()
	Logf(format string, args ...any)
}

// Caught records that the test applied the seeded bug name and its detector
// caught it. Call it only after the test has checked that.
func Caught(t TB, name string) {
	t.Helper()
	t.Logf("%s%s", Marker, name)
}

// CleanupT is what Expect needs of a *testing.T.
type CleanupT interface {
	TB
	Cleanup(func())
	Failed() bool
	Skipped() bool
}

// Expect records, when the test ends without failing or skipping, that it
// applied each seeded bug of names and caught it: for a test whose every
// check is about them (a hostile input refused, a fault survived). Call it
// in the test's own process, not in a child it re-executes.
func Expect(t CleanupT, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() || t.Skipped() {
			return
		}
		for _, name := range names {
			t.Logf("%s%s", Marker, name)
		}
	})
}

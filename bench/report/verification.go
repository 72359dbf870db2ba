package report

// Verification says whether the kernels a run timed were checked against
// their Go twins first (runner/gpu's VerifyRunShapes), so that a report
// never stands for a kernel nobody checked.
type Verification struct {
	// Status is one of the Verification* constants.
	Status string `json:"status"`
	// Kernels says what differed from the embedded defaults: a directory
	// and its changed files, kernel versions ("" for the defaults).
	Kernels string `json:"kernels,omitempty"`
	// Checks is the number of kernel checks that passed at the run's
	// shapes, WorstRelErr the largest relative error among them.
	Checks      int     `json:"checks,omitempty"`
	WorstRelErr float64 `json:"worst_rel_err,omitempty"`
}

// Verification statuses.
const (
	// VerificationEmbedded: the embedded kernels at their default versions,
	// which `make test` checks; nothing changed, nothing to check here.
	VerificationEmbedded = "embedded"
	// VerificationReference: the cpu backend, which runs the Go twins.
	VerificationReference = "reference"
	// VerificationPassed: the changed kernels passed their checks at the
	// run's shapes before anything was timed.
	VerificationPassed = "passed"
	// VerificationSkipped: --no-verify; the times may be of a wrong kernel.
	VerificationSkipped = "skipped"
)

// Verified is false only for a run whose changed kernels were not checked.
func (v Verification) Verified() bool { return v.Status != VerificationSkipped }

// UnverifiedNote is printed with every output of a run made with --no-verify.
const UnverifiedNote = "note: UNVERIFIED: --no-verify timed kernels that were not checked against their Go twins; these times may be of a wrong kernel"

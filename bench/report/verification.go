package report

import (
	"fmt"
	"strings"
)

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
	// Files are the --kernels-dir sources laid over the embedded ones, and
	// IncludeDirs the header directories NVRTC was given (--include, the
	// CUDA toolkit's).
	Files       []KernelFile `json:"kernel_files,omitempty"`
	IncludeDirs []string     `json:"include_dirs,omitempty"`
	// OpLibraries are the shared libraries that replaced ops (--op).
	OpLibraries []OpLibrary `json:"op_libraries,omitempty"`
}

// KernelFile is one source file of --kernels-dir that replaced the embedded
// file of its name.
type KernelFile struct {
	File    string `json:"file"`
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Changed bool   `json:"changed"` // false: an identical copy of the embedded file
}

// OpLibrary is one --op OP=PATH: the library that ran the op.
type OpLibrary struct {
	Op     string `json:"op"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// Name is the library's own description of itself (its op table's name).
	Name string `json:"name,omitempty"`
	ABI  string `json:"abi_version,omitempty"` // "1.0"
}

// SourceLines name every overridden file and op library with its sha256,
// one line each, for text headers.
func (v Verification) SourceLines() []string {
	var out []string
	for _, f := range v.Files {
		state := "changed"
		if !f.Changed {
			state = "identical to the embedded file"
		}
		out = append(out, fmt.Sprintf("kernel source %s from %s (sha256 %s, %s)", f.File, f.Path, f.SHA256, state))
	}
	if len(v.IncludeDirs) > 0 {
		out = append(out, "kernel include directories: "+strings.Join(v.IncludeDirs, ", "))
	}
	for _, l := range v.OpLibraries {
		out = append(out, fmt.Sprintf("op %s from %s (sha256 %s; %s, ABI %s)", l.Op, l.Path, l.SHA256, l.Name, l.ABI))
	}
	return out
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

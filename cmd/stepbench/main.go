// Command stepbench times the prefill and decode steps of Llama-family
// models through our own CUDA kernels (or the plain-Go reference on a CPU)
// and reports latency, roofline points and, on GPUs, power and clocks.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"

	"github.com/spf13/pflag"

	"stepbench/internal/input"
)

// A subcommand parses its own flags and runs.
type subcommand struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func subcommands() map[string]subcommand {
	return map[string]subcommand{
		"devices":   {"list the CUDA driver, every GPU and the NVRTC and cuBLAS found", devicesCmd},
		"verify":    {"check every CUDA kernel against its Go twin and llama-tiny end to end against the cpu backend", verifyCmd},
		"run":       {"time prefill and decode steps (one_batch style); --correctness-test checks greedy outputs", runCmd},
		"roofline":  {"print analytic per-step floors for a model on a GPU preset (no GPU needed)", rooflineCmd},
		"version":   {"print the version", versionCmd},
		"calibrate": {"measure a GPU's copy bandwidth and bf16 GEMM rate (roofline ceilings), cached per GPU UUID", calibrateCmd},
		"compare":   {"compare two native reports (--json-out): medians, intervals, ratio, p-value, FASTER/SLOWER/SAME/INCONCLUSIVE", compareCmd},
		"ab":        {"interleaved A/B of two kernel sets on the same weights, reported as a comparison (needs a GPU)", abCmd},
		"kernel":    {"time one op cold (L2 flushed) at the model's shapes, with adaptive stopping (needs a GPU)", kernelCmd},
		"build":     {"compile the kernels and print ptxas's report per entry point; --counters: the emulated device's access counters beside it", buildCmd},
		"plot":      {"draw native reports (--json-out) in one roofline and one sweep figure, each report its own series (bf16 and FP8 caches side by side)", plotCmd},
		"tokenize":  {"print the token ids of a text (--decode: the text of ids) with a model directory's tokenizer.json", tokenizeCmd},
	}
}

func main() {
	// Every CUDA call must come from one OS thread: the main goroutine keeps its thread.
	runtime.LockOSThread()
	os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1   // an error while running (also: compare found no shape in common)
	exitUsage       = 2   // a bad flag, argument or input file
	exitRegression  = 3   // compare/ab --fail-on-regression found a SLOWER row
	exitUnjudged    = 4   // compare/ab --fail-on-regression: no SLOWER row, but a row or metric without a verdict
	exitInterrupted = 130 // SIGINT/SIGTERM: what finished was written
)

// mainExit runs a subcommand and turns its error into one line and an exit
// code. Help goes to stdout; errors to stderr.
func mainExit(args []string, stdout, stderr io.Writer) int {
	cmds := subcommands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help":
		usage(stdout, cmds)
		return exitOK
	case "--version":
		return mainExit([]string{"version"}, stdout, stderr)
	case "help":
		if len(args) == 1 {
			usage(stdout, cmds)
			return exitOK
		}
		return mainExit([]string{args[1], "--help"}, stdout, stderr)
	}
	if args[0] == probeCommand { // an op library's probe (probe.go), not a command of users
		return probeMain(args[1:], stderr)
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stepbench: unknown command %q (run 'stepbench help')\n", args[0])
		return exitUsage
	}
	flagOut := stderr
	if wantsHelp(args[1:]) {
		flagOut = stdout // the command's --help text
	}
	err := runRecovered(cmd.run, args[1:], stdout, flagOut)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "stepbench %s: %v\n", args[0], err)
	return exitCode(err)
}

// exitCode is the README's exit code of a command's error: bad usage and
// bad input (input.IsBad: a malformed model file or report) 2, an
// exitError its own, anything else, a panic included, 1.
func exitCode(err error) int {
	var ue usageError
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), input.IsBad(err):
		return exitUsage
	}
	return exitFailure
}

// panicError is a panic of a command, a bug: exit 1 with its stack (Go's
// own exit code for a panic, 2, would read as bad usage).
type panicError struct {
	value any
	stack []byte
}

func (p panicError) Error() string {
	return fmt.Sprintf("internal error (a bug; please report it with this message): panic: %v\n%s", p.value, p.stack)
}

// runRecovered runs a command and turns its panic into a panicError.
func runRecovered(run func([]string, io.Writer, io.Writer) error, args []string, stdout, stderr io.Writer) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v, debug.Stack()}
		}
	}()
	return run(args, stdout, stderr)
}

// wantsHelp says whether the arguments ask for help (before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help":
			return true
		}
	}
	return false
}

func usage(w io.Writer, cmds map[string]subcommand) {
	fmt.Fprintln(w, "usage: stepbench COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\n'stepbench help COMMAND' or 'stepbench COMMAND --help' lists a command's flags; 'stepbench --version' the version.")
	fmt.Fprintln(w, "exit codes: 0 ok, 1 error, 2 bad usage, 3 a regression (--fail-on-regression), 130 interrupted.")
}

// usageError is a bad flag or argument: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitError carries an exit code other than 1 or 2 (3, 130).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// newFlagSet makes a flag set that reports errors instead of exiting and
// takes other tools' spellings (normalizeFlag).
func newFlagSet(name string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("stepbench "+name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.SetNormalizeFunc(normalizeFlag)
	return fs
}

// parseFlags parses args; a parse error is a usage error naming the flag
// (flagError), --help is pflag.ErrHelp.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	fs.Usage = func() { usageText(fs, fs.Output()) }
	// pflag prints its usage on every parse error; we want one line only.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(joinListValues(fs, rewriteShortAliases(fs, args)))
	fs.SetOutput(out)
	if errors.Is(err, pflag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

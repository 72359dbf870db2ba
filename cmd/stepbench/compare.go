package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench/compare"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// verdictFlags are compare's and ab's statistics and exit-code flags.
type verdictFlags struct {
	format           string
	alpha            float64
	thresholdPct     float64
	failOnRegression bool
}

func (v *verdictFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&v.format, "format", "markdown", "output: markdown, csv or json")
	fs.Float64Var(&v.alpha, "alpha", 0.05, "significance level of the Mann-Whitney U test (ab: the sign test); the intervals are at 1-alpha")
	fs.Float64Var(&v.thresholdPct, "threshold", 0, "least change in percent that FASTER/SLOWER may claim (the interval must lie beyond it), and the band of SAME (default ±1%)")
	fs.BoolVar(&v.failOnRegression, "fail-on-regression", false, "exit 3 when any metric of any shape is SLOWER")
}

func (v *verdictFlags) check() (func(io.Writer, compare.Result) error, error) {
	if v.alpha <= 0 || v.alpha >= 1 {
		return nil, usagef("--alpha: %g is not in (0, 1)", v.alpha)
	}
	if v.thresholdPct < 0 || v.thresholdPct >= 100 {
		return nil, usagef("--threshold: %g%% is not in [0, 100)", v.thresholdPct)
	}
	return compareWriter(v.format)
}

func (v *verdictFlags) options() compare.Options {
	return compare.Options{Alpha: v.alpha, Confidence: 1 - v.alpha, Threshold: v.thresholdPct / 100}
}

// outcome writes the comparison and turns a regression into exit code 3
// when --fail-on-regression asked for it.
func (v *verdictFlags) outcome(w io.Writer, writer func(io.Writer, compare.Result) error, res compare.Result) error {
	if err := writer(w, res); err != nil {
		return err
	}
	if n := res.Regressions(); n > 0 && v.failOnRegression {
		return exitError{exitRegression, fmt.Errorf("%d of %d rows are %s (--fail-on-regression)", n, len(res.Rows), stats.VerdictSlower)}
	}
	return nil
}

// compareCmd compares two native reports: stepbench compare OLD.json NEW.json.
// Exit codes: 0 no regression, 1 an error (no shape in common included),
// 2 bad usage, 3 a SLOWER row with --fail-on-regression.
func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	var v verdictFlags
	v.register(fs)
	positional, err := parsePositional(fs, args, 2, "OLD.json NEW.json")
	if err != nil {
		return err
	}
	writer, err := v.check()
	if err != nil {
		return err
	}
	oldReport, err := report.Read(positional[0])
	if err != nil {
		return err
	}
	newReport, err := report.Read(positional[1])
	if err != nil {
		return err
	}
	res, err := compare.Reports(oldReport, newReport, v.options())
	if err != nil {
		return err
	}
	return v.outcome(stdout, writer, res)
}

func compareWriter(format string) (func(io.Writer, compare.Result) error, error) {
	switch format {
	case "markdown", "md":
		return compare.WriteMarkdown, nil
	case "csv":
		return compare.WriteCSV, nil
	case "json":
		return compare.WriteJSON, nil
	}
	return nil, usagef("--format: %q is not markdown, csv or json", format)
}

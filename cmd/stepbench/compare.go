package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"stepbench/bench/compare"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// verdictFlags are compare's and ab's statistics and exit-code flags.
type verdictFlags struct {
	format           string
	alpha            float64
	confidence       float64
	thresholdPct     float64
	failOnRegression bool
	thresholdSet     bool
}

func (v *verdictFlags) register(fs *pflag.FlagSet, thresholdHelp string) {
	fs.StringVar(&v.format, "format", "markdown", "output: markdown, csv or json")
	fs.Float64Var(&v.alpha, "alpha", 0.05, "significance level of the Mann-Whitney U test (ab: the sign test), in (0, 0.5]")
	fs.Float64Var(&v.confidence, "confidence", 0, "confidence level of the medians' and the ratio's intervals, in (0.5, 1) (default 1 - alpha)")
	fs.Float64Var(&v.thresholdPct, "threshold", 0, thresholdHelp)
	fs.BoolVar(&v.failOnRegression, "fail-on-regression", false, "exit 3 when any metric of any shape is SLOWER; else 4 when any is INCONCLUSIVE or cannot be compared (no regression found, none ruled out)")
}

func (v *verdictFlags) check(fs *pflag.FlagSet) (func(io.Writer, compare.Result) error, error) {
	switch {
	case !(v.alpha > 0 && v.alpha <= 0.5):
		return nil, usagef("--alpha: %g is not in (0, 0.5]", v.alpha)
	case fs.Changed("confidence") && !(v.confidence > 0.5 && v.confidence < 1):
		return nil, usagef("--confidence: %g is not in (0.5, 1)", v.confidence)
	case !(v.thresholdPct >= 0 && v.thresholdPct < 100):
		return nil, usagef("--threshold: %g%% is not in [0, 100)", v.thresholdPct)
	}
	v.thresholdSet = fs.Changed("threshold")
	if !fs.Changed("confidence") {
		v.confidence = 1 - v.alpha
	}
	return compareWriter(v.format)
}

func (v *verdictFlags) options() compare.Options {
	return compare.Options{Alpha: v.alpha, Confidence: v.confidence, Threshold: v.thresholdPct / 100, ThresholdSet: v.thresholdSet}
}

// outcome writes the comparison; with --fail-on-regression a SLOWER row
// is exit 3, and otherwise a row without a verdict (INCONCLUSIVE) or a
// metric that could not be compared exit 4: a gate that cannot tell must
// not pass as one that found nothing.
func (v *verdictFlags) outcome(w io.Writer, writer func(io.Writer, compare.Result) error, res compare.Result) error {
	if err := writer(w, res); err != nil {
		return err
	}
	if !v.failOnRegression {
		return nil
	}
	slower := res.Regressions()
	if slower > 0 {
		return exitError{exitRegression, fmt.Errorf("%d of %d rows are %s (--fail-on-regression)", slower, len(res.Rows), stats.VerdictSlower)}
	}
	inconclusive, busy := 0, 0
	for _, r := range res.Rows {
		if r.Verdict == stats.VerdictInconclusive {
			inconclusive++
			if r.HostBusy {
				busy++
			}
		}
	}
	if inconclusive == 0 && len(res.Unjudged) == 0 {
		return nil
	}
	var why []string
	if inconclusive > 0 {
		what := fmt.Sprintf("%d of %d rows are %s", inconclusive, len(res.Rows), stats.VerdictInconclusive)
		if busy > 0 {
			what += fmt.Sprintf(" (%d on a busy host)", busy)
		}
		why = append(why, what)
	}
	if n := len(res.Unjudged); n > 0 {
		why = append(why, fmt.Sprintf("%d metric(s) could not be compared (listed above)", n))
	}
	return exitError{exitUnjudged, fmt.Errorf("no row is %s, but %s: no regression can be ruled out (--fail-on-regression, exit %d)",
		stats.VerdictSlower, strings.Join(why, " and "), exitUnjudged)}
}

// compareCmd compares two native reports: stepbench compare OLD.json NEW.json.
// Exit codes: 0 no regression, 1 an error (no shape in common included),
// 2 bad usage, 3 a SLOWER row with --fail-on-regression, 4 with it a row
// or metric without a verdict.
func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	var v verdictFlags
	v.register(fs, "the run-to-run floor in percent: a verdict needs the ratio's interval beyond 1±PCT% (default per backend: 3 on a GPU, 30 on the emulated device and the cpu backend), and the band of SAME; in [0, 100)")
	positional, err := parsePositional(fs, args, 2, "OLD.json NEW.json")
	if err != nil {
		return err
	}
	writer, err := v.check(fs)
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
	if errors.Is(err, compare.ErrIncomparable) {
		return usageError{err}
	}
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

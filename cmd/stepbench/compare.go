package main

import (
	"io"

	"stepbench/bench"
)

// compareCmd compares two native reports: stepbench compare OLD.json NEW.json.
func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	format := fs.String("format", "markdown", "output: markdown, csv or json")
	alpha := fs.Float64("alpha", 0.05, "significance level of the Mann-Whitney U test")
	positional, err := parsePositional(fs, args, 2, "OLD.json NEW.json")
	if err != nil {
		return err
	}
	if *alpha <= 0 || *alpha >= 1 {
		return usagef("--alpha: %g is not in (0, 1)", *alpha)
	}
	writer, err := compareWriter(*format)
	if err != nil {
		return err
	}
	oldReport, err := bench.ReadReport(positional[0])
	if err != nil {
		return err
	}
	newReport, err := bench.ReadReport(positional[1])
	if err != nil {
		return err
	}
	return writer(stdout, bench.Compare(oldReport, newReport, bench.CompareOptions{Alpha: *alpha}))
}

func compareWriter(format string) (func(io.Writer, bench.CompareResult) error, error) {
	switch format {
	case "markdown", "md":
		return bench.WriteCompareMarkdown, nil
	case "csv":
		return bench.WriteCompareCSV, nil
	case "json":
		return bench.WriteCompareJSON, nil
	}
	return nil, usagef("--format: %q is not markdown, csv or json", format)
}

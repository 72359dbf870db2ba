package compare

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"stepbench/bench/internal/files"
	"stepbench/bench/stats"
)

// Note is one distinct note and the rows it applies to.
type Note struct {
	Note string   `json:"note"`
	Rows []string `json:"rows"` // "b1 i64 o11 prefill_host"
}

// Notes returns every distinct row note once, in first-seen order.
func (r Result) Notes() []Note {
	var notes []Note
	index := map[string]int{}
	for _, row := range r.Rows {
		for _, note := range row.Notes {
			i, ok := index[note]
			if !ok {
				i = len(notes)
				index[note] = i
				notes = append(notes, Note{Note: note})
			}
			notes[i].Rows = append(notes[i].Rows, row.key()+" "+row.Metric)
		}
	}
	return notes
}

// WriteMarkdown writes the comparison as a Markdown table (times in
// ms), warnings first, then each note once and the method.
func WriteMarkdown(w io.Writer, res Result) error {
	var b strings.Builder
	for _, line := range res.Header {
		fmt.Fprintf(&b, "> %s\n", line)
	}
	if len(res.Header) > 0 {
		b.WriteString("\n")
	}
	for _, warning := range res.Warnings {
		fmt.Fprintf(&b, "> warning: %s\n", warning)
	}
	if len(res.Warnings) > 0 {
		b.WriteString("\n")
	}
	conf := fmt.Sprintf("%g%% CI", 100*res.Confidence)
	keys, align, iters := "batch | input | output", "---:|---:|---:", "iters"
	if res.Kernels {
		keys, align, iters = "op | shape", ":---|:---", "launches"
	}
	fmt.Fprintf(&b, "| %s | metric | %s old/new | old median ms [%s] | new median ms [%s] | noise old/new | new/old [%s] | p | verdict |\n",
		keys, iters, conf, conf, conf)
	b.WriteString("|" + align + "|:---|---:|---:|---:|---:|---:|---:|:---|\n")
	for _, r := range res.Rows {
		cells := fmt.Sprintf("%d | %d | %d", r.Batch, r.InputLen, r.OutputLen)
		if res.Kernels {
			cells = r.Op + " | " + r.OpShape
		}
		fmt.Fprintf(&b, "| %s | %s | %d/%d | %s | %s | %s / %s | %s | %s | %s |\n",
			cells, r.Metric, r.Old.N, r.New.N,
			medianText(r.Old), medianText(r.New), stats.NoiseText(r.Old.RelativeNoise), stats.NoiseText(r.New.RelativeNoise),
			ratioText(r), pText(r.PValue), verdictText(r, max(r.Threshold, res.Threshold), res.Alpha))
	}
	if len(res.Unjudged) > 0 {
		b.WriteString("\nnot compared (no verdict):\n")
		for _, u := range res.Unjudged {
			if res.Kernels {
				fmt.Fprintf(&b, "- %s: %s\n", u.Metric, u.Reason)
				continue
			}
			fmt.Fprintf(&b, "- %s %s: %s\n", u.Label(), u.Metric, u.Reason)
		}
	}
	if notes := res.Notes(); len(notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s (%s)\n", n.Note, rowsText(n.Rows, len(res.Rows)))
		}
	}
	b.WriteString("\n" + methodText(res) + "\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

// methodText states the method and the verdict rule in force.
func methodText(res Result) string {
	change := "the interval excludes 1"
	if res.Threshold > 0 && res.Paired {
		change = fmt.Sprintf("the interval lies beyond 1±%s", stats.PercentText(res.Threshold))
	}
	same := fmt.Sprintf("the interval lies within ±%s", stats.PercentText(stats.SameBand(res.Threshold)))
	estimate := fmt.Sprintf("new/old is the median of new/old over all pairs of iterations (Hodges-Lehmann) "+
		"with its distribution-free %g%% interval (Moses), p the Mann-Whitney U test (golang.org/x/perf/benchmath)", 100*res.Confidence)
	if res.Paired {
		pairs := "iterations are paired (A and B back to back on the same prompts, alternating which goes first)"
		if res.Kernels {
			pairs = "launches are paired"
		}
		estimate = fmt.Sprintf(pairs+"; "+
			"new/old is the median of the pairs' ratios A/B with its order-statistic %g%% interval (golang.org/x/perf/benchmath), "+
			"p the exact two-sided sign test of those ratios against 1", 100*res.Confidence)
	}
	if res.Threshold > 0 && !res.Paired {
		change = fmt.Sprintf("the interval lies beyond 1±%s (the run-to-run floor)", stats.PercentText(res.Threshold))
	}
	if slices.ContainsFunc(res.Rows, func(r Row) bool { return r.Load > 0 }) {
		change += "; where other processes loaded the host, also beyond what that load could explain " +
			"(the floor's bounds times or over 1/(1 − c), c the busier run's share of the host's CPU time)"
		same += fmt.Sprintf(" on a host others kept at most %s busy in both runs", stats.PercentText(QuietOtherCPU))
	}
	unit := "one value per iteration and metric (prefill: its time; decode: the iteration's median decode step, so KV lengths are never pooled)"
	if res.Kernels {
		unit = "one value per cold launch of the op at its shape (L2 flushed before each, device time between events; with A/B, the arms' launches back to back in pairs, alternating which goes first)"
	}
	return fmt.Sprintf("method: %s. %s, "+
		"noise the half-width of a median's interval over the median. %s or %s: p < %g and %s; %s: %s, significant or not; "+
		"else %s, with about the iterations per run a verdict would need (or why more would not help).",
		unit, estimate, stats.VerdictFaster, stats.VerdictSlower, res.Alpha, change, stats.VerdictSame, same, stats.VerdictInconclusive)
}

func rowsText(rows []string, total int) string {
	switch {
	case len(rows) == total && total > 1:
		return fmt.Sprintf("all %d rows", total)
	case len(rows) <= 4:
		return strings.Join(rows, "; ")
	}
	return fmt.Sprintf("%s and %d more rows", strings.Join(rows[:3], "; "), len(rows)-3)
}

func medianText(m stats.MedianCI) string {
	if math.IsNaN(m.LowSeconds) || math.IsNaN(m.HighSeconds) {
		return fmt.Sprintf("%.4f [n/a]", 1e3*m.MedianSeconds)
	}
	return fmt.Sprintf("%.4f [%.4f, %.4f]", 1e3*m.MedianSeconds, 1e3*m.LowSeconds, 1e3*m.HighSeconds)
}

func ratioText(r Row) string {
	switch {
	case math.IsNaN(r.Ratio):
		return "n/a"
	case math.IsNaN(r.RatioLow) || math.IsNaN(r.RatioHigh):
		return fmt.Sprintf("%.4f [n/a]", r.Ratio)
	}
	return fmt.Sprintf("%.4f [%.4f, %.4f]", r.Ratio, r.RatioLow, r.RatioHigh)
}

// pText prints a p-value with two significant digits, "<1e-6" below 1e-6.
func pText(p float64) string {
	if p < 1e-6 {
		return "<1e-6"
	}
	return fmt.Sprintf("%.2g", p)
}

// pRelation is "=0.012", or "<1e-6".
func pRelation(p float64) string {
	if text := pText(p); strings.HasPrefix(text, "<") {
		return text
	}
	return "=" + pText(p)
}

// verdictText is the row's verdict with what qualifies it: SAME with its
// band (and, when the difference is significant, that it is smaller than
// the band), INCONCLUSIVE with why (a busy host) or the iterations a
// verdict would need.
func verdictText(r Row, threshold, alpha float64) string {
	switch {
	case r.Verdict == stats.VerdictInconclusive && r.HostBusy:
		return r.Verdict + " (host busy)"
	case r.Verdict == stats.VerdictInconclusive && r.SamplesNeeded > 0:
		return fmt.Sprintf("%s (~%d iters/run)", r.Verdict, r.SamplesNeeded)
	case r.Verdict == stats.VerdictSame && stats.Significant(r.PValue, r.RatioLow, r.RatioHigh, alpha):
		return fmt.Sprintf("%s (within ±%s; significant, p%s)", r.Verdict, stats.PercentText(stats.SameBand(threshold)), pRelation(r.PValue))
	case r.Verdict == stats.VerdictSame:
		return fmt.Sprintf("%s (within ±%s)", r.Verdict, stats.PercentText(stats.SameBand(threshold)))
	}
	return r.Verdict
}

// WriteCSV writes one CSV record per row (times in seconds; an
// empty cell is a value that does not exist); the warnings and notes are
// not part of the CSV.
func WriteCSV(w io.Writer, res Result) error {
	cw := csv.NewWriter(w)
	header := []string{"batch_size", "input_len", "output_len", "metric",
		"old_n", "old_median_seconds", "old_ci_low_seconds", "old_ci_high_seconds", "old_relative_noise",
		"new_n", "new_median_seconds", "new_ci_low_seconds", "new_ci_high_seconds", "new_relative_noise",
		"ratio", "ratio_ci_low", "ratio_ci_high", "ratio_confidence", "p_value", "verdict", "samples_needed", "emulated", "load_bound", "host_busy"}
	if res.Kernels {
		header = append(header, "op", "op_shape")
	}
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("write comparison csv: %w", err)
	}
	g := func(x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return fmt.Sprintf("%g", x)
	}
	for _, r := range res.Rows {
		record := []string{fmt.Sprint(r.Batch), fmt.Sprint(r.InputLen), fmt.Sprint(r.OutputLen), r.Metric,
			fmt.Sprint(r.Old.N), g(r.Old.MedianSeconds), g(r.Old.LowSeconds), g(r.Old.HighSeconds), g(r.Old.RelativeNoise),
			fmt.Sprint(r.New.N), g(r.New.MedianSeconds), g(r.New.LowSeconds), g(r.New.HighSeconds), g(r.New.RelativeNoise),
			g(r.Ratio), g(r.RatioLow), g(r.RatioHigh), g(r.RatioConfidence), g(r.PValue), r.Verdict, fmt.Sprint(r.SamplesNeeded), fmt.Sprint(res.Emulated),
			g(r.Load), fmt.Sprint(r.HostBusy)}
		if res.Kernels {
			record = append(record, r.Op, r.OpShape)
		}
		if err := cw.Write(record); err != nil {
			return fmt.Errorf("write comparison csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write comparison csv: %w", err)
	}
	return nil
}

// WriteJSON writes the comparison as indented JSON; a value that
// does not exist (an interval with too few iterations) is null.
func WriteJSON(w io.Writer, res Result) error {
	doc := struct {
		Alpha      float64    `json:"alpha"`
		Confidence float64    `json:"confidence"`
		Threshold  float64    `json:"threshold"`
		Paired     bool       `json:"paired"`
		Emulated   bool       `json:"emulated"`
		Header     []string   `json:"header"`
		Rows       []Row      `json:"rows"`
		Unjudged   []Unjudged `json:"not_compared"`
		Warnings   []string   `json:"warnings"`
		Notes      []Note     `json:"notes"`
	}{res.Alpha, res.Confidence, res.Threshold, res.Paired, res.Emulated, res.Header, res.Rows, res.Unjudged, res.Warnings, res.Notes()}
	if doc.Rows == nil {
		doc.Rows = []Row{}
	}
	if doc.Unjudged == nil {
		doc.Unjudged = []Unjudged{}
	}
	if doc.Header == nil {
		doc.Header = []string{}
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode comparison: %w", err)
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

// WriteJSONFile writes WriteJSON's document to path, atomically: the file
// holds the whole comparison or is left as it was.
func WriteJSONFile(path string, res Result) error {
	var b strings.Builder
	if err := WriteJSON(&b, res); err != nil {
		return err
	}
	if err := files.WriteAtomic(path, []byte(b.String())); err != nil {
		return fmt.Errorf("write comparison %s: %w", path, err)
	}
	return nil
}

// MarshalJSON writes the row in snake_case, non-finite values as null.
func (r Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		BatchSize       int            `json:"batch_size"`
		InputLen        int            `json:"input_len"`
		OutputLen       int            `json:"output_len"`
		Metric          string         `json:"metric"`
		Old             stats.MedianCI `json:"old"`
		New             stats.MedianCI `json:"new"`
		Ratio           *float64       `json:"ratio"`
		RatioLow        *float64       `json:"ratio_ci_low"`
		RatioHigh       *float64       `json:"ratio_ci_high"`
		RatioConfidence *float64       `json:"ratio_confidence"`
		PValue          *float64       `json:"p_value"`
		Verdict         string         `json:"verdict"`
		SamplesNeeded   int            `json:"samples_needed,omitempty"`
		Notes           []string       `json:"notes,omitempty"`
		Threshold       float64        `json:"threshold,omitempty"`
		LoadBound       float64        `json:"load_bound,omitempty"`
		HostBusy        bool           `json:"host_busy,omitempty"`
		Op              string         `json:"op,omitempty"`
		OpShape         string         `json:"op_shape,omitempty"`
	}{r.Batch, r.InputLen, r.OutputLen, r.Metric, r.Old, r.New, stats.Finite(r.Ratio), stats.Finite(r.RatioLow),
		stats.Finite(r.RatioHigh), stats.Finite(nonZero(r.RatioConfidence)), stats.Finite(r.PValue), r.Verdict, r.SamplesNeeded, r.Notes,
		r.Threshold, r.Load, r.HostBusy, r.Op, r.OpShape})
}

// nonZero is x, or NaN for 0 (a confidence level of no interval).
func nonZero(x float64) float64 {
	if x == 0 {
		return math.NaN()
	}
	return x
}

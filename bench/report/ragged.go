package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"stepbench/bench"
)

// RaggedLegend explains what the summary tables show of ragged batches
// (and synthetic fills).
const RaggedLegend = "input ~N: a ragged batch's mean context length (its lengths below); kv_tokens: the tokens in the caches " +
	"after the prefill, the sum of the lengths; tok/s counts the prompt tokens the prefill ran (one per sequence over a " +
	"synthetic context) and those generated"

// HasRagged reports whether any shape is ragged or synthetically filled
// (bench.Shape.Ragged): the summary tables then have a kv_tokens column
// and list the lengths. A uniform run's tables are as they always were.
func HasRagged(shapes []ShapeReport) bool {
	return slices.ContainsFunc(shapes, func(s ShapeReport) bool { return s.Shape.Ragged() })
}

// withKVTokens puts kv_tokens after a header's first three columns (batch,
// input, output) when the table has ragged shapes.
func withKVTokens(header []string, ragged bool) []string {
	if !ragged {
		return header
	}
	return slices.Insert(header, 3, "kv_tokens")
}

// shapeCells are a row's batch, input and output cells (a ragged batch's
// input its mean, "~2048"), its kv_tokens when the table has ragged
// shapes, then rest.
func shapeCells(s ShapeReport, ragged bool, rest ...string) []string {
	input := fmt.Sprint(s.InputLen)
	if s.Lens != "" {
		input = "~" + input
	}
	cells := []string{fmt.Sprint(s.Batch), input, fmt.Sprint(s.OutputLen)}
	if ragged {
		cells = append(cells, fmt.Sprint(s.Shape.KVTokens()))
	}
	return append(cells, rest...)
}

// raggedNotes are the lines under a summary table that list each ragged
// shape's lengths compactly (CompactLens) and say which contexts were
// filled synthetically; "" when none is.
func raggedNotes(shapes []ShapeReport) string {
	var b strings.Builder
	for _, s := range shapes {
		if !s.Shape.Ragged() {
			continue
		}
		fmt.Fprintf(&b, "b%d o%d:", s.Batch, s.OutputLen)
		if s.Lens != "" {
			fmt.Fprintf(&b, " context lengths %s", CompactLens(s.ContextLens()))
		} else {
			fmt.Fprintf(&b, " every context %d tokens", s.InputLen)
		}
		if s.KVFill == bench.KVFillSynthetic {
			b.WriteString(", filled synthetically (the prefill runs each sequence's last token)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CompactLens names lengths in a line: all of them up to 8; more, the
// first and last four with their count, least and greatest ("200,4096,
// 512,7000,…,310,2048,999,5000 (32 sequences, 200..8000)").
func CompactLens(lens []int) string {
	join := func(xs []int) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = strconv.Itoa(x)
		}
		return strings.Join(parts, ",")
	}
	if len(lens) <= 8 {
		return join(lens)
	}
	return fmt.Sprintf("%s,…,%s (%d sequences, %d..%d)", join(lens[:4]), join(lens[len(lens)-4:]), len(lens), slices.Min(lens), slices.Max(lens))
}

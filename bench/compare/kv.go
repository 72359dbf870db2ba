package compare

import (
	"fmt"

	"stepbench/bench"
	"stepbench/bench/report"
)

// kvComparable refuses two reports whose KV caches differ in layout, page
// size or page order, or whose batches of one size and output length
// differ in their lengths or how their contexts were filled: a verdict
// would then time the workload, not the change. A report without
// kv_cache is the contiguous layout (reports made before layouts were
// recorded). Uniform batches of different input lengths are not refused:
// they are different shapes, as ever (each only in one run).
func kvComparable(oldReport, newReport report.Report) error {
	o, n := layoutOf(oldReport.Config.KV), layoutOf(newReport.Config.KV)
	switch {
	case o.Layout != n.Layout:
		return fmt.Errorf("%w: OLD's KV cache is %s and NEW's %s: a verdict would time the layout, not the change",
			ErrIncomparable, describeLayout(o), describeLayout(n))
	case o.PageSize != n.PageSize:
		return fmt.Errorf("%w: OLD's KV cache pages hold %d tokens and NEW's %d: a verdict would time the page size, not the change",
			ErrIncomparable, o.PageSize, n.PageSize)
	case o.PageOrder != n.PageOrder:
		return fmt.Errorf("%w: OLD's KV cache pages are %s and NEW's %s: a verdict would time the page order, not the change",
			ErrIncomparable, o.PageOrder, n.PageOrder)
	}
	for _, os := range oldReport.Shapes {
		for _, ns := range newReport.Shapes {
			if err := lengthsComparable(os.Shape, ns.Shape); err != nil {
				return err
			}
		}
	}
	return nil
}

// layoutOf is kv with its defaults: contiguous when absent, sequential
// pages; a contiguous layout has no page size or order.
func layoutOf(kv *report.KVCache) report.KVCache {
	if kv == nil || kv.Layout == "" || kv.Layout == "contiguous" {
		return report.KVCache{Layout: "contiguous"}
	}
	out := report.KVCache{Layout: kv.Layout, PageSize: kv.PageSize, PageOrder: kv.PageOrder}
	if out.PageOrder == "" {
		out.PageOrder = "sequential"
	}
	return out
}

// describeLayout names a layout: "contiguous", "paged (16-token pages, shuffled)".
func describeLayout(kv report.KVCache) string {
	if kv.Layout == "contiguous" {
		return kv.Layout
	}
	return fmt.Sprintf("%s (%d-token pages, %s)", kv.Layout, kv.PageSize, kv.PageOrder)
}

// lengthsComparable refuses two shapes of one batch size and output length
// that differ in their lengths (a ragged batch against another, or against
// a uniform one) or in their fill at the same input length.
func lengthsComparable(o, n bench.Shape) error {
	if o == n || o.Batch != n.Batch || o.OutputLen != n.OutputLen {
		return nil
	}
	where := fmt.Sprintf("batch_size=%d output_len=%d", o.Batch, o.OutputLen)
	if o.Lens != "" || n.Lens != "" {
		if o.Lens != n.Lens {
			return fmt.Errorf("%w: at %s OLD's context lengths are %s and NEW's %s: a verdict would time the lengths, not the change",
				ErrIncomparable, where, lensOf(o), lensOf(n))
		}
	}
	if o.InputLen == n.InputLen && o.KVFill != n.KVFill {
		return fmt.Errorf("%w: at %s input_len=%d OLD's contexts are filled by %s and NEW's by %s: a verdict would time the fill, not the change",
			ErrIncomparable, where, o.InputLen, fillOf(o), fillOf(n))
	}
	return nil
}

// lensOf names a shape's lengths in a refusal: its list (abbreviated past
// 8, report.CompactLens), or "uniform (input_len N)".
func lensOf(s bench.Shape) string {
	if s.Lens == "" {
		return fmt.Sprintf("uniform (input_len %d)", s.InputLen)
	}
	return report.CompactLens(s.ContextLens())
}

// fillOf names a shape's fill: "the prefill" or "a synthetic fill".
func fillOf(s bench.Shape) string {
	if s.KVFill == bench.KVFillSynthetic {
		return "a synthetic fill"
	}
	return "the prefill"
}

package compare

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/report"
)

// kvReport is syntheticReport's run with the layout kv (nil: none
// recorded) and its shape's lengths lens (nil: uniform, input_len 64) and
// fill.
func kvReport(seed uint64, kv *report.KVCache, lens []int, fill string) report.Report {
	r := syntheticReport(seed, 1, 0.005, 10)
	r.Config.KV = kv
	if lens != nil || fill != "" {
		if lens == nil {
			lens = []int{64}
		}
		sh := bench.RaggedShape(lens, r.Shapes[0].OutputLen, fill)
		r.Shapes[0].Shape = sh
	}
	return r
}

// Compare refuses, in one line, two reports whose KV caches differ in
// layout, page size or page order, or whose batches differ in their
// lengths or fill; a report without kv_cache is the contiguous layout.
// What agrees is compared as ever.
func TestCompareRefusesDifferentLayoutsAndLengths(t *testing.T) {
	contiguous := &report.KVCache{Layout: "contiguous", KVFill: "prefill"}
	paged16 := &report.KVCache{Layout: "paged", PageSize: 16, PageOrder: "sequential"}
	paged64 := &report.KVCache{Layout: "paged", PageSize: 64, PageOrder: "sequential"}
	shuffled := &report.KVCache{Layout: "paged", PageSize: 16, PageOrder: "shuffled"}
	for _, tc := range []struct {
		name     string
		old, new report.Report
		want     string // "" : compared
	}{
		{"no kv_cache against contiguous", kvReport(1, nil, nil, ""), kvReport(2, contiguous, nil, ""), ""},
		{"same paged layout and lengths", kvReport(1, paged16, []int{30, 90}, ""), kvReport(2, paged16, []int{30, 90}, ""), ""},
		{"contiguous against paged", kvReport(1, nil, nil, ""), kvReport(2, paged16, nil, ""),
			"OLD's KV cache is contiguous and NEW's paged (16-token pages, sequential): a verdict would time the layout"},
		{"page sizes", kvReport(1, paged64, nil, ""), kvReport(2, paged16, nil, ""), "OLD's KV cache pages hold 64 tokens and NEW's 16"},
		{"page orders", kvReport(1, paged16, nil, ""), kvReport(2, shuffled, nil, ""), "OLD's KV cache pages are sequential and NEW's shuffled"},
		{"lengths", kvReport(1, paged16, []int{30, 90}, ""), kvReport(2, paged16, []int{60, 60}, ""),
			"at batch_size=2 output_len=11 OLD's context lengths are 30,90 and NEW's uniform (input_len 60)"},
		{"ragged against ragged", kvReport(1, nil, []int{30, 90}, ""), kvReport(2, nil, []int{10, 110}, ""),
			"OLD's context lengths are 30,90 and NEW's 10,110"},
		{"fills", kvReport(1, nil, nil, ""), kvReport(2, nil, nil, bench.KVFillSynthetic),
			"at batch_size=1 output_len=11 input_len=64 OLD's contexts are filled by the prefill and NEW's by a synthetic fill"},
	} {
		_, err := Reports(tc.old, tc.new, noFloor)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want a comparison", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrIncomparable) || !strings.Contains(fmt.Sprint(err), tc.want) || strings.Contains(fmt.Sprint(err), "\n")):
			t.Errorf("%s: %v, want ErrIncomparable in one line saying %q", tc.name, err, tc.want)
		}
	}
}

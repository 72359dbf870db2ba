package gpu

import (
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/runner"
)

// A library's caps against the run's cache: the contiguous layout needs any
// page size; a paged run's page size (16 when not given) must be one the
// caps take; stepbench's cache is NHD and bf16. Each refusal says what to
// run instead.
func TestCapsLacks(t *testing.T) {
	any := cuda.OpCaps{Layouts: cuda.OpKVNHD, DTypes: cuda.OpKVBF16, PageSizeMultiple: 1}
	list := cuda.OpCaps{Layouts: cuda.OpKVNHD | cuda.OpKVHND, DTypes: cuda.OpKVBF16, PageSizes: []int{16, 32}, PageSizeMultiple: 1}
	mult := cuda.OpCaps{Layouts: cuda.OpKVNHD, DTypes: cuda.OpKVBF16, PageSizeMultiple: 16}
	hnd := cuda.OpCaps{Layouts: cuda.OpKVHND, DTypes: cuda.OpKVFP8E4M3 | 1<<7, PageSizeMultiple: 1}
	contiguous, paged := &runner.KVOptions{}, func(ps int) *runner.KVOptions { return &runner.KVOptions{Layout: runner.KVPaged, PageSize: ps} }
	for _, c := range []struct {
		caps cuda.OpCaps
		kv   *runner.KVOptions
		want string // "" takes it
	}{
		{any, contiguous, ""}, {any, paged(1), ""}, {any, paged(0), ""},
		{list, paged(0), ""}, {list, paged(32), ""},
		{list, paged(64), "pages of 64 tokens (it takes pages of 16, 32 tokens: run with --page-size 16)"},
		{list, contiguous, "the contiguous layout, whose page is a sequence's whole cache (it takes pages of 16, 32 tokens: run with --kv-layout paged --page-size 16)"},
		{mult, paged(48), ""},
		{mult, paged(8), "pages of 8 tokens (it takes pages of any multiple of 16 tokens: run with --page-size 16)"},
		{mult, contiguous, "the contiguous layout"},
		{hnd, paged(16), "stepbench's NHD cache layout (it declares HND); stepbench's bf16 cache (it declares fp8 e4m3, unknown bits 0x80)"},
		{list, nil, ""}, // no run's layout (verify): the layout and dtype only
		{hnd, nil, "stepbench's NHD cache layout"},
	} {
		got := strings.Join(capsLacks(c.caps, c.kv), "; ")
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("caps %+v on %v: lacks %q, want %q", c.caps, c.kv, got, c.want)
		}
	}
}

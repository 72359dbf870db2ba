package gpu

import (
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/kernels"
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
		got := strings.Join(capsLacks(c.caps, c.kv, cuda.OpABIVersion), "; ")
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("caps %+v on %v: lacks %q, want %q", c.caps, c.kv, got, c.want)
		}
	}
}

// An FP8 cache is taken by caps that declare its format, from a library
// built for ABI 2.1 (the first to pass the scales); refused otherwise in a
// line naming the dtype and what the library declares.
func TestCapsLacksFP8Cache(t *testing.T) {
	bf16 := cuda.OpCaps{Layouts: cuda.OpKVNHD, DTypes: cuda.OpKVBF16, PageSizeMultiple: 1}
	e4m3 := cuda.OpCaps{Layouts: cuda.OpKVNHD, DTypes: cuda.OpKVBF16 | cuda.OpKVFP8E4M3, PageSizeMultiple: 1}
	fp8 := func(d kernels.CacheDType) *runner.KVOptions {
		return &runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, DType: d}
	}
	abi20, abi21 := uint32(2<<16), uint32(2<<16|1)
	for _, c := range []struct {
		caps cuda.OpCaps
		kv   *runner.KVOptions
		abi  uint32
		want string
	}{
		{bf16, fp8(kernels.CacheE4M3), abi21, "an fp8_e4m3 KV cache (--kv-cache-dtype fp8_e4m3; it declares bf16 in caps.kv_dtypes)"},
		{e4m3, fp8(kernels.CacheE4M3), abi21, ""},
		{e4m3, fp8(kernels.CacheE5M2), abi21, "an fp8_e5m2 KV cache (--kv-cache-dtype fp8_e5m2; it declares bf16, fp8 e4m3 in caps.kv_dtypes)"},
		{e4m3, fp8(kernels.CacheE4M3), abi20, "an fp8_e4m3 KV cache's scales (it was built for op ABI 2.0; FP8 caches need 2.1)"},
		{e4m3, fp8(kernels.CacheBF16), abi20, ""},
	} {
		got := strings.Join(capsLacks(c.caps, c.kv, c.abi), "; ")
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("caps %+v on %v (ABI %s): lacks %q, want %q", c.caps, c.kv, cuda.FormatABI(c.abi), got, c.want)
		}
	}
}

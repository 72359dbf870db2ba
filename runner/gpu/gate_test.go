package gpu

import (
	"slices"
	"testing"

	"stepbench/kernels"
)

func TestChecksForSourcesAndOps(t *testing.T) {
	tests := []struct {
		files, ops []string
		want       []string
	}{
		{files: []string{"attention.cu"}, want: []string{"attention", "decode_graph"}},
		{files: []string{"norm.cu", "activation.cu"}, want: []string{"add_rmsnorm", "qk_norm", "silu_mul"}},
		{files: []string{"copy.cu"}, want: []string{"add_i32", "decode_graph", "embed", "gather_last", "kv_advance"}},
		{files: []string{"paged_attention.cu"}, want: []string{"attention", "decode_graph"}},
		{files: []string{"sample.cu", "tp.cu"}, want: []string{"argmax", "argmax_keys"}},
		{files: []string{"rope.cu"}, want: []string{"decode_graph", "rope_kv_write"}},
		{files: []string{"common.cu"}, want: VerifyKernelNames},
		{files: []string{"mine.cu"}, want: VerifyKernelNames},
		{ops: []string{kernels.OpAttnPrefill}, want: []string{"attention", "decode_graph"}},
		{ops: []string{kernels.OpArgmax}, want: []string{"argmax"}},
		{ops: []string{kernels.OpGemm}, want: []string{"gemm"}},
		{ops: []string{kernels.OpLaunch}, want: []string{"decode_graph"}},
	}
	for _, tc := range tests {
		got := ChecksForOps(tc.ops)
		if tc.files != nil {
			got = ChecksForSources(tc.files)
		}
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Errorf("files %v ops %v: checks %v, want %v", tc.files, tc.ops, got, want)
		}
	}
	// Every family of the registry is covered by a check verify knows.
	for _, f := range kernels.Families() {
		if !slices.Contains(VerifyKernelNames, checkForFamily(f.Name)) {
			t.Errorf("family %s maps to %q, not a verify check", f.Name, checkForFamily(f.Name))
		}
	}
}

func TestDecodePositions(t *testing.T) {
	for _, tc := range []struct {
		s    RunShape
		want []int
	}{
		{RunShape{Batch: 1, InputLen: 64, OutputLen: 16}, []int{64, 71, 78}},
		{RunShape{Batch: 1, InputLen: 8, OutputLen: 2}, []int{8}},
		{RunShape{Batch: 1, InputLen: 8, OutputLen: 3}, []int{8, 9}},
		{RunShape{Batch: 2, InputLen: 100, OutputLen: 1}, nil},
	} {
		if got := tc.s.decodePositions(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.s, got, tc.want)
		}
		for _, p := range tc.s.decodePositions() {
			if p+1 > tc.s.maxSeq() {
				t.Errorf("%+v: position %d outside the cache of %d", tc.s, p, tc.s.maxSeq())
			}
		}
	}
}

// A large prefill's reference rows stay within the budget and include
// each sequence's first and last rows and both sides of tile edges; a
// small one computes every row.
func TestSampleQueryTokens(t *testing.T) {
	small := kernels.AttnShape{Batch: 2, SeqLen: 64, Heads: 4, KVHeads: 2, HeadDim: 32, MaxSeq: 80}
	if got := sampleQueryTokens(small, gateAttentionFLOPs, 1); got != nil {
		t.Errorf("small prefill sampled %d rows, want all (nil)", len(got))
	}
	big := kernels.AttnShape{Batch: 4, SeqLen: 1024, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 1040}
	got := sampleQueryTokens(big, gateAttentionFLOPs, 1)
	if got == nil || attentionFLOPs(big, got) > gateAttentionFLOPs {
		t.Fatalf("big prefill: %d rows, %.3g FLOPs (budget %g)", len(got), attentionFLOPs(big, got), gateAttentionFLOPs)
	}
	for _, want := range []int{0, 1023, 1024, 2047, 63, 64, 3*1024 + 1023, 3*1024 + 64} {
		if !slices.Contains(got, want) {
			t.Errorf("big prefill: row %d not sampled", want)
		}
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Error("sampled rows not sorted and distinct")
	}
}

func TestParseOps(t *testing.T) {
	got, err := ParseOps([]string{"linear=a.so", "attn_decode=b.so"})
	if err != nil || len(got) != 2 || got["linear"] != "a.so" || got["attn_decode"] != "b.so" {
		t.Errorf("ParseOps = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"linear"}, {"linear="}, {"gemm=a.so"}, {"linear=a.so", "linear=b.so"}} {
		if _, err := ParseOps(bad); err == nil {
			t.Errorf("ParseOps(%q): no error", bad)
		}
	}
	if got := ChecksForOps([]string{OpLinear, kernels.OpAttnDecode}); !slices.Equal(got, []string{"attention", "decode_graph", "linear"}) {
		t.Errorf("ChecksForOps(linear, attn_decode) = %v", got)
	}
}

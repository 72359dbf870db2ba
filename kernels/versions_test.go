package kernels

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseSelection(t *testing.T) {
	tests := []struct {
		items   []string
		want    string
		wantErr string
	}{
		{nil, "newest", ""},
		{[]string{"attn_prefill=1"}, "attn_prefill=1", ""},
		{[]string{"argmax=2", "attn_decode=1", "argmax=2"}, "argmax=2 attn_decode=1", ""},
		{[]string{"attn_prefill"}, "", "want OP=VERSION"},
		{[]string{"silu_mul=1"}, "", "silu_mul has no versions"},
		{[]string{"attn_prefill=6"}, "", "attn_prefill has versions [1 2 3 4 5]"},
		{[]string{"attn_prefill=x"}, "", "attn_prefill has versions [1 2 3 4 5]"},
		{[]string{"attn_prefill=5", "attn_decode=7", "rope_kv_write=4"}, "attn_decode=7 attn_prefill=5 rope_kv_write=4", ""},
		{[]string{"attn_decode=7", "rope_kv_write=3"}, "", "attn_decode=7 reads and writes an FP8 KV cache, where rope_kv_write=3 cannot (it takes a bf16 cache; the FP8 cache's is 4)"},
		{[]string{"attn_prefill=4", "attn_decode=6", "rope_kv_write=3"}, "attn_decode=6 attn_prefill=4 rope_kv_write=3", ""},
		{[]string{"attn_decode=6", "rope_kv_write=2"}, "", "attn_decode=6 runs through the block table, where rope_kv_write=2 cannot (it takes the contiguous layout's uniform batches; the table's is 3)"},
		{[]string{"attn_prefill=3", "rope_kv_write=3"}, "", "rope_kv_write=3 runs through the block table, where attn_prefill=3 cannot"},
		{[]string{"argmax=1", "argmax=2"}, "", "argmax is already set to 1"},
		{[]string{"attn_decode=5", "rope_kv_write=2"}, "attn_decode=5 rope_kv_write=2", ""},
		{[]string{"rope_kv_write=1", "attn_decode=5"}, "", "attn_decode=5 fuses rope_kv_write version 2 into decode attention; it cannot run with rope_kv_write=1"},
		{[]string{"fast"}, "fast: launch=2 linear=4", ""},
		{[]string{"launch=1", "fast"}, "fast: launch=1 linear=4", ""},
		{[]string{"fast", "argmax=1"}, "fast: argmax=1 launch=2 linear=4", ""},
		{[]string{"fastest"}, "", "or fast (the best-estimated set"},
	}
	for _, tt := range tests {
		sel, err := ParseSelection(tt.items)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSelection(%q) error %v, want one containing %q", tt.items, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ParseSelection(%q): %v", tt.items, err)
		}
		if got := sel.String(); got != tt.want {
			t.Errorf("ParseSelection(%q) = %q, want %q", tt.items, got, tt.want)
		}
	}
}

func TestSelectionResolve(t *testing.T) {
	llama8B := ModelShape{Name: "llama-3-8b", Hidden: 4096, Inter: 14336, Vocab: 128256, Heads: 32, KVHeads: 8, HeadDim: 128}
	odd := ModelShape{Name: "odd", Hidden: 256, Inter: 172, Vocab: 1003, Heads: 4, KVHeads: 2, HeadDim: 32}
	wideGroups := ModelShape{Name: "mqa", Hidden: 4096, Inter: 11008, Vocab: 4096, Heads: 32, KVHeads: 1, HeadDim: 128}
	tests := []struct {
		name    string
		items   []string
		model   ModelShape
		want    string
		wantErr string
	}{
		{"newest at 8B", nil, llama8B, "argmax=2 attn_decode=4 attn_prefill=3 gemm=1 launch=1 linear=3 rope_kv_write=2", ""},
		{"linear v2 pinned at 8B", []string{"linear=2"}, llama8B, "argmax=2 attn_decode=4 attn_prefill=3 gemm=1 launch=1 linear=2 rope_kv_write=2", ""},
		{"pinned at 8B", []string{"attn_prefill=1", "argmax=1", "linear=1"}, llama8B, "argmax=1 attn_decode=4 attn_prefill=1 gemm=1 launch=1 linear=1 rope_kv_write=2", ""},
		{"odd widths fall back", nil, odd, "argmax=1 attn_decode=1 attn_prefill=1 gemm=1 launch=1 linear=1 rope_kv_write=2", ""},
		{"32 heads per kv head", nil, wideGroups, "argmax=2 attn_decode=1 attn_prefill=3 gemm=1 launch=1 linear=3 rope_kv_write=2", ""},
		{"tensor cores refuse head_dim 32", []string{"attn_prefill=2"}, odd, "", "attn_prefill=2 cannot run head_dim 32"},
		{"prefill v3 refuses head_dim 32", []string{"attn_prefill=3"}, odd, "", "attn_prefill=3 cannot run head_dim 32 (version 3 takes [64 128])"},
		{"decode v2 refuses 32 heads per kv head", []string{"attn_decode=2"}, wideGroups, "", "32 query heads per kv head"},
		{"decode v3 refuses 32 heads per kv head", []string{"attn_decode=3"}, wideGroups, "", "32 query heads per kv head (version 3 takes up to 8)"},
		{"decode v4 refuses head_dim 32", []string{"attn_decode=4"}, odd, "", "attn_decode=4 cannot run head_dim 32 (version 4 takes [64 128])"},
		{"decode v5 only when chosen", []string{"attn_decode=5"}, llama8B, "argmax=2 attn_decode=5 attn_prefill=3 gemm=1 launch=1 linear=3 rope_kv_write=2", ""},
		{"decode v5 refuses head_dim 32", []string{"attn_decode=5"}, odd, "", "attn_decode=5 cannot run head_dim 32 (version 5 takes [64 128])"},
		{"decode v5 refuses 32 heads per kv head", []string{"attn_decode=5"}, wideGroups, "", "32 query heads per kv head (version 5 takes up to 8)"},
		{"argmax v2 refuses vocab 1003", []string{"argmax=2"}, odd, "", "vocab 1003"},
		{"linear v4 only when chosen", []string{"linear=4"}, llama8B, "argmax=2 attn_decode=4 attn_prefill=3 gemm=1 launch=1 linear=4 rope_kv_write=2", ""},
		{"gemm stays version 1 unless chosen", []string{"gemm=2"}, llama8B, "argmax=2 attn_decode=4 attn_prefill=3 gemm=2 launch=1 linear=3 rope_kv_write=2", ""},
		{"linear v2 refuses an intermediate size of 172", []string{"linear=2"}, odd, "", "linear=2 cannot run k = 172"},
		{"linear v3 refuses an intermediate size of 172", []string{"linear=3"}, odd, "", "linear=3 cannot run k = 172 (version 3 takes multiples of 8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := ParseSelection(tt.items)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sel.Resolve(tt.model)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.model.Name) {
					t.Fatalf("Resolve error %v, want one naming %s and containing %q", err, tt.model.Name, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Resolve = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// A tabled shape (the paged layout, a ragged batch) runs the block table's
// versions and refuses any other chosen one in one line naming the op, the
// version and why; the contiguous layout's uniform batches keep today's
// defaults and run a block-table version only when it is chosen (then every
// attention op and rope_kv_write resolve to theirs: the run goes through a
// table).
func TestTabledVersions(t *testing.T) {
	llama8B := ModelShape{Name: "llama-3-8b", Hidden: 4096, Inter: 14336, Vocab: 128256, Heads: 32, KVHeads: 8, HeadDim: 128}
	tiny := ModelShape{Name: "llama-tiny", Hidden: 256, Inter: 512, Vocab: 4096, Heads: 4, KVHeads: 2, HeadDim: 32}
	for _, tc := range []struct {
		items  []string
		model  ModelShape
		tabled bool
		want   string
	}{
		{nil, llama8B, true, "argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=1 linear=3 rope_kv_write=3"},
		{nil, tiny, true, "argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=1 linear=3 rope_kv_write=3"},
		{nil, tiny, false, "argmax=2 attn_decode=1 attn_prefill=1 gemm=1 launch=1 linear=3 rope_kv_write=2"},
		{[]string{"attn_decode=6"}, llama8B, false, "argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=1 linear=3 rope_kv_write=3"},
		{[]string{"rope_kv_write=3"}, tiny, false, "argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=1 linear=3 rope_kv_write=3"},
	} {
		sel, err := ParseSelection(tc.items)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := sel.ResolveLayout(tc.model, tc.tabled); err != nil || got != tc.want {
			t.Errorf("%v at %s, tabled %v: %q, %v; want %q", tc.items, tc.model.Name, tc.tabled, got, err, tc.want)
		}
		if sel.UsesKVTable() != (len(tc.items) > 0) {
			t.Errorf("%v: UsesKVTable = %v", tc.items, sel.UsesKVTable())
		}
	}
	paged := AttnShape{Batch: 2, SeqLen: 1, Heads: 32, KVHeads: 8, HeadDim: 128, PageSize: 16, NumPages: 4, MaxPages: 2, Paged: true}
	ragged := paged
	ragged.Paged, ragged.PageSize, ragged.NumPages, ragged.MaxPages = false, 64, 2, 1
	for _, tc := range []struct {
		sel  Selection
		a    AttnShape
		pick func(Selection, AttnShape) (int, error)
		want string
	}{
		{Selection{OpAttnDecode: 4}, paged, Selection.DecodeVersion, "attn_decode 4 takes the contiguous layout's uniform batches; the paged layout runs 6"},
		{Selection{OpAttnDecode: 5}, ragged, Selection.DecodeVersion, "attn_decode 5 takes the contiguous layout's uniform batches; a ragged batch runs 6"},
		{Selection{OpAttnPrefill: 3}, paged, Selection.PrefillVersion, "attn_prefill 3 takes the contiguous layout's uniform batches; the paged layout runs 4"},
		{Selection{OpRope: 2}, paged, Selection.RopeVersionAt, "rope_kv_write 2 takes the contiguous layout's uniform batches; the paged layout runs 3"},
	} {
		if _, err := tc.pick(tc.sel, tc.a); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.sel, err, tc.want)
		}
	}
	odd := paged
	odd.HeadDim = 80
	if _, err := (Selection{}).DecodeVersion(odd); err == nil || !strings.Contains(err.Error(), "attn_decode 6, the block table's, cannot run head_dim 80") {
		t.Errorf("head_dim 80 on the paged layout: %v", err)
	}
	if v, err := (Selection{}).DecodeVersion(AttnShape{Batch: 1, SeqLen: 1, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 64}); err != nil || v != 4 {
		t.Errorf("the contiguous layout's default decode: %d, %v; want 4", v, err)
	}
}

// --kernel values come from users: every input is either refused or gives
// versions that exist, and a selection's String parses back to it.
func FuzzParseSelection(f *testing.F) {
	for _, s := range []string{"attn_prefill=1", "attn_prefill=2,attn_decode=1", "argmax=2,argmax=1", "=", "rope_kv_write=02", "x=1,,", "attn_decode=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		sel, err := ParseSelection(strings.Split(value, ","))
		if err != nil {
			return
		}
		for op, v := range sel {
			if !slices.Contains(Versions(op), v) {
				t.Errorf("%q: %s=%d is not a version of %s (%v)", value, op, v, op, Versions(op))
			}
		}
		if len(sel) == 0 {
			return
		}
		back, err := ParseSelection(strings.Fields(sel.String()))
		if err != nil || !maps.Equal(back, sel) {
			t.Errorf("%q: String %q parses back as %v, %v", value, sel.String(), back, err)
		}
	})
}

// Version 1 runs no row on our kernels, version 2 1..16, version 3 1..32,
// each count on the entry point and grid that takes it.
func TestLinearGemvRows(t *testing.T) {
	tests := []struct {
		version, m     int
		uses           bool
		entry, silu    string
		blocks, sBlock int
		threads        int
	}{
		{1, 1, false, "", "", 0, 0, 0},
		{2, 0, false, "", "", 0, 0, 0},
		{2, 1, true, "gemv_t8", "gemv_silu_t8", 64, 64, 128},
		{2, 16, true, "gemv_t16", "gemv_silu_t16", 64, 64, 128},
		{2, 17, false, "", "", 0, 0, 0},
		{3, 8, true, "gemv_t8", "gemv_silu_t8", 64, 64, 128},
		{3, 9, true, "gemv_t16", "gemv_silu_t16", 64, 64, 128},
		{3, 17, true, "gemv_t32", "gemv_silu_t32", 32, 64, 256},
		{3, 32, true, "gemv_t32", "gemv_silu_t32", 32, 64, 256},
		{3, 33, false, "", "", 0, 0, 0},
	}
	const n = 1010 // 31.6 blocks of 32 columns, 63.1 of 16
	for _, tt := range tests {
		if got := LinearUsesGemv(tt.version, tt.m); got != tt.uses {
			t.Errorf("LinearUsesGemv(%d, %d) = %v, want %v", tt.version, tt.m, got, tt.uses)
		}
		if !tt.uses {
			continue
		}
		if got := GemvEntryPoint(tt.m, false); got != tt.entry {
			t.Errorf("GemvEntryPoint(%d) = %s, want %s", tt.m, got, tt.entry)
		}
		if got := GemvEntryPoint(tt.m, true); got != tt.silu {
			t.Errorf("GemvEntryPoint(%d, silu) = %s, want %s", tt.m, got, tt.silu)
		}
		if b, th := GemvGrid(tt.m, n, false); b != tt.blocks || th != tt.threads {
			t.Errorf("GemvGrid(%d, %d) = %d blocks of %d, want %d of %d", tt.m, n, b, th, tt.blocks, tt.threads)
		}
		if b, th := GemvGrid(tt.m, n, true); b != tt.sBlock || th != tt.threads {
			t.Errorf("GemvGrid(%d, %d, silu) = %d blocks of %d, want %d of %d", tt.m, n, b, th, tt.sBlock, tt.threads)
		}
	}
}

// TestFP8CacheVersions: an FP8 cache runs the FP8 versions unasked, paged
// or contiguous; a bf16-only version chosen on it, or an FP8 version on a
// bf16 cache, is refused naming the op, the version and the cache dtype;
// a bf16 cache never gets an FP8 version unasked.
func TestFP8CacheVersions(t *testing.T) {
	m := ModelShape{Name: "llama-3-8b", Heads: 32, KVHeads: 8, HeadDim: 128, Hidden: 4096, Inter: 14336, Vocab: 128256}
	for _, cache := range []CacheDType{CacheE4M3, CacheE5M2} {
		for _, tabled := range []bool{false, true} {
			got, err := Selection{}.ResolveKV(m, tabled, cache)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"attn_decode=7", "attn_prefill=5", "rope_kv_write=4"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s tabled=%v: %q lacks %s", cache, tabled, got, want)
				}
			}
		}
		for _, item := range []string{"attn_decode=6", "attn_decode=5", "attn_decode=4", "attn_prefill=4", "rope_kv_write=3", "rope_kv_write=2"} {
			sel, err := ParseSelection([]string{item})
			if err != nil {
				t.Fatal(err)
			}
			_, err = sel.ResolveKV(m, true, cache)
			if err == nil || !strings.Contains(err.Error(), item+" reads and writes a bf16 KV cache only; the kv cache dtype is "+cache.String()) {
				t.Errorf("%s on %s: error %v", item, cache, err)
			}
		}
	}
	for _, tabled := range []bool{false, true} {
		got, err := Selection{}.ResolveKV(m, tabled, CacheBF16)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, "attn_decode=7") || strings.Contains(got, "attn_prefill=5") || strings.Contains(got, "rope_kv_write=4") {
			t.Errorf("bf16 tabled=%v: %q", tabled, got)
		}
	}
	for _, item := range []string{"attn_decode=7", "attn_prefill=5", "rope_kv_write=4"} {
		sel, err := ParseSelection([]string{item})
		if err != nil {
			t.Fatal(err)
		}
		for _, tabled := range []bool{false, true} {
			_, err = sel.ResolveKV(m, tabled, CacheBF16)
			if err == nil || !strings.Contains(err.Error(), item+" takes an FP8 KV cache only") || !strings.Contains(err.Error(), "auto (bf16)") {
				t.Errorf("%s on bf16 tabled=%v: error %v", item, tabled, err)
			}
		}
	}
}

// TestFastSelectionSaysSo: a selection made with --kernel fast says so in
// the resolved versions every report records (kernel_versions), and runs
// the set's versions; the defaults do not change.
func TestFastSelectionSaysSo(t *testing.T) {
	llama8B := ModelShape{Name: "llama-3-8b", Hidden: 4096, Inter: 14336, Vocab: 128256, Heads: 32, KVHeads: 8, HeadDim: 128}
	sel, err := ParseSelection([]string{SetFast})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sel.ResolveLayout(llama8B, true)
	if want := "fast: argmax=2 attn_decode=6 attn_prefill=4 gemm=1 launch=2 linear=4 rope_kv_write=3"; err != nil || got != want {
		t.Errorf("--kernel fast resolves to %q, %v; want %q", got, err, want)
	}
	if !sel.Fast() || sel.UsesKVTable() || sel.UsesFP8Cache() {
		t.Errorf("--kernel fast: Fast %v, UsesKVTable %v, UsesFP8Cache %v", sel.Fast(), sel.UsesKVTable(), sel.UsesFP8Cache())
	}
	plain, err := Selection{}.ResolveLayout(llama8B, true)
	if err != nil || strings.Contains(plain, "fast") || !strings.Contains(plain, "launch=1 linear=3") {
		t.Errorf("the defaults resolve to %q, %v: they must not change", plain, err)
	}
}

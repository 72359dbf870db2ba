package gpu

import (
	"errors"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// TestWrappersRejectBadArguments needs no GPU: every check runs before a launch.
func TestWrappersRejectBadArguments(t *testing.T) {
	k := &Kernels{smCount: 132}
	var s *cuda.Stream
	const p = cuda.DevPtr(1 << 20) // a plausible, aligned device address
	good := kernels.AttnShape{Batch: 1, SeqLen: 1, StartPos: 3, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 8}
	with := func(change func(*kernels.AttnShape)) kernels.AttnShape {
		a := good
		change(&a)
		return a
	}
	fused := k.With(kernels.Selection{kernels.OpAttnDecode: 5})
	checkWrapperErrors(t, []wrapperCase{
		{"embed hidden not /8", "embed", "multiple of 8", func() error { return k.Embed(s, p, p, p, 4, 100) }},
		{"embed negative tokens", "embed", "tokens", func() error { return k.Embed(s, p, p, p, -1, 64) }},
		{"embed null table", "embed", "table is a null pointer", func() error { return k.Embed(s, p, 0, p, 4, 64) }},
		{"norm misaligned out", "add_rmsnorm", "not 16-byte aligned", func() error { return k.AddRMSNorm(s, p+2, p, 0, p, 1, 64, 1e-5) }},
		{"norm misaligned add", "add_rmsnorm", "add", func() error { return k.AddRMSNorm(s, p, p, p+8, p, 1, 64, 1e-5) }},
		{"norm zero hidden", "add_rmsnorm", "hidden", func() error { return k.AddRMSNorm(s, p, p, 0, p, 1, 0, 1e-5) }},
		{"norm negative eps", "add_rmsnorm", "eps", func() error { return k.AddRMSNorm(s, p, p, 0, p, 1, 64, -1) }},
		{"rope odd head dim", "rope_kv_write", "headDim", func() error {
			return k.RopeKVWrite(s, p, p, p, p, p, KVPtrs{Pos: p}, with(func(a *kernels.AttnShape) { a.HeadDim = 63 }))
		}},
		{"rope past maxSeq", "rope_kv_write", "maxSeq", func() error {
			return k.RopeKVWrite(s, p, p, p, p, p, KVPtrs{Pos: p}, with(func(a *kernels.AttnShape) { a.StartPos = 8 }))
		}},
		{"attention head dim 96", "attention", "headDim", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20, with(func(a *kernels.AttnShape) { a.HeadDim = 96 }))
		}},
		{"attention heads not multiple of kv", "attention", "multiple of kvHeads", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20, with(func(a *kernels.AttnShape) { a.Heads = 5 }))
		}},
		{"attention zero kv heads", "attention", "kvHeads", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20, with(func(a *kernels.AttnShape) { a.KVHeads = 0 }))
		}},
		{"attention small workspace", "attention", "workspace has 16 bytes", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, p, 16, good)
		}},
		{"attention misaligned q", "attention", "q = ", func() error {
			return k.Attention(s, p, p+2, p, p, KVPtrs{Pos: p}, p, 1<<20, good)
		}},
		{"rope null pos", "rope_kv_write", "pos is a null pointer", func() error {
			return k.RopeKVWrite(s, p, p, p, p, p, KVPtrs{Pos: 0}, good)
		}},
		{"attention misaligned pos", "attention", "pos = ", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p + 2}, p, 1<<20, good)
		}},
		{"rope_attention unfused version", "rope_attention", "attn_decode version 4", func() error {
			return k.RopeAttention(s, p, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20, good)
		}},
		{"rope_attention prefill", "rope_attention", "seqLen = 2, want 1", func() error {
			return fused.RopeAttention(s, p, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20, with(func(a *kernels.AttnShape) { a.SeqLen = 2 }))
		}},
		{"rope_attention misaligned qkv", "rope_attention", "qkv = ", func() error {
			return fused.RopeAttention(s, p, p+2, p, p, p, KVPtrs{Pos: p}, p, 1<<20, good)
		}},
		{"rope_attention small workspace", "rope_attention", "workspace has 16 bytes", func() error {
			return fused.RopeAttention(s, p, p, p, p, p, KVPtrs{Pos: p}, p, 16, good)
		}},
		{"add_i32 negative n", "add_i32", "n = -1", func() error { return k.AddI32(s, p, -1, 1) }},
		{"add_i32 null buf", "add_i32", "buf is a null pointer", func() error { return k.AddI32(s, 0, 1, 1) }},
		{"silu zero inter", "silu_mul", "inter", func() error { return k.SiluMul(s, p, p, 1, 0) }},
		{"gather zero seqLen", "gather_last", "seqLen", func() error { return k.GatherLast(s, p, p, 1, 0, 8) }},
		{"argmax misaligned out", "argmax", "out", func() error { return k.Argmax(s, p+2, p, p, 8, 1, 8) }},
		{"fill unknown kind", "fill_dummy", "kind", func() error { return k.FillDummy(s, p, 8, 8, 1, 0, 0, ref.DummyKind(7)) }},
		{"fill negative n", "fill_dummy", "n = -1", func() error { return k.FillDummy(s, p, -1, 1, 1, 0, 0, ref.DummyOnes) }},
	})
}

// The linear wrappers (versions 2 and 3 pinned, and the default) refuse bad
// shapes, pointers and a k or alignment the pinned version cannot take.
func TestLinearWrappersRejectBadArguments(t *testing.T) {
	k := &Kernels{smCount: 132}
	pinnedLinear := k.With(kernels.Selection{kernels.OpLinear: 2})
	pinnedLinear3 := k.With(kernels.Selection{kernels.OpLinear: 3})
	var s *cuda.Stream
	const p = cuda.DevPtr(1 << 20) // a plausible, aligned device address
	checkWrapperErrors(t, []wrapperCase{
		{"linear zero n", "linear", "n = 0", func() error { _, err := k.Linear(s, p, p, p, 1, 0, 64); return err }},
		{"linear null w", "linear", "w is a null pointer", func() error { _, err := k.Linear(s, p, p, 0, 1, 64, 64); return err }},
		{"linear v2 pinned, k not /8", "linear", "linear=2 cannot run k = 100", func() error {
			_, err := pinnedLinear.Linear(s, p, p, p, 1, 64, 100)
			return err
		}},
		{"linear v2 pinned, misaligned x", "linear", "needs 16-byte aligned x and w", func() error {
			_, err := pinnedLinear.Linear(s, p, p+2, p, 1, 64, 64)
			return err
		}},
		{"linear v3 pinned, k not /8", "linear", "linear=3 cannot run k = 100", func() error {
			_, err := pinnedLinear3.Linear(s, p, p, p, 32, 64, 100)
			return err
		}},
		{"linear v3 pinned, misaligned w at 32 rows", "linear", "linear=3 needs 16-byte aligned x and w (m=32 k=64)", func() error {
			_, err := pinnedLinear3.Linear(s, p, p, p+8, 32, 64, 64)
			return err
		}},
		{"linear_silu_mul v3 pinned, misaligned x at 17 rows", "linear_silu_mul", "linear=3 needs 16-byte aligned", func() error {
			_, err := pinnedLinear3.LinearSiluMul(s, p, p+2, p, 17, 64, 64)
			return err
		}},
		{"linear_silu_mul odd out", "linear_silu_mul", "out = ", func() error { _, err := k.LinearSiluMul(s, p+1, p, p, 1, 64, 64); return err }},
	})
}

// wrapperCase is a wrapper call that must fail: its error starts with op
// and mentions want.
type wrapperCase struct {
	name, op, want string
	call           func() error
}

func checkWrapperErrors(t *testing.T, tests []wrapperCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), tt.op+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to start with %q and mention %q", err, tt.op+": ", tt.want)
			}
		})
	}
}

// Empty work launches nothing (a nil stream would fail if it did).
func TestWrappersSkipEmptyWork(t *testing.T) {
	k := &Kernels{smCount: 132}
	var s *cuda.Stream
	const p = cuda.DevPtr(1 << 20)
	empty := kernels.AttnShape{Batch: 0, SeqLen: 1, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 8}
	for name, err := range map[string]error{
		"embed":     k.Embed(s, p, p, p, 0, 64),
		"norm":      k.AddRMSNorm(s, p, p, 0, p, 0, 64, 1e-5),
		"rope":      k.RopeKVWrite(s, p, p, p, p, p, KVPtrs{Pos: p}, empty),
		"attention": k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, 0, 0, empty),
		"add_i32":   k.AddI32(s, p, 0, 1),
		"silu":      k.SiluMul(s, p, p, 0, 64),
		"gather":    k.GatherLast(s, p, p, 0, 3, 64),
		"argmax":    k.Argmax(s, p, p, p, 0, 0, 64),
		"fill":      k.FillDummy(s, p, 0, 0, 1, 0, 0, ref.DummyUniform),
		"linear":    ranNothing(k.Linear(s, p, p, p, 0, 64, 64)),
		// Prefill's rows (more than 32; more than 16 under version 2), and
		// an unaligned x under the default choice, are cuBLAS's.
		"linear prefill":           ranNothing(k.Linear(s, p, p, p, 33, 64, 64)),
		"linear v2 17 rows":        ranNothing(k.With(kernels.Selection{kernels.OpLinear: 2}).Linear(s, p, p, p, 17, 64, 64)),
		"linear unaligned 32 rows": ranNothing(k.Linear(s, p, p+2, p, 32, 64, 64)),
		"linear unaligned":         ranNothing(k.Linear(s, p, p+2, p, 1, 64, 64)),
		"linear v1":                ranNothing(k.With(kernels.Selection{kernels.OpLinear: 1}).Linear(s, p, p, p, 1, 64, 64)),
	} {
		if err != nil {
			t.Errorf("%s with no work: %v", name, err)
		}
	}
}

// ranNothing is an error when a linear wrapper says it launched.
func ranNothing(ran bool, err error) error {
	if err == nil && ran {
		return errors.New("launched a kernel")
	}
	return err
}

// The block table's wrappers refuse a bad view, geometry or version before
// any launch (no GPU needed).
func TestTabledWrappersRejectBadArguments(t *testing.T) {
	k := &Kernels{smCount: 132}
	var s *cuda.Stream
	const p = cuda.DevPtr(1 << 20)
	kv := KVPtrs{BlockTable: p, SeqLens: p, QueryStart: p, Positions: p, SlotMapping: p}
	good := kernels.AttnShape{Batch: 2, SeqLen: 1, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 32, PageSize: 16, NumPages: 4, MaxPages: 2,
		Paged: true, QLens: []int{1, 1}, SeqLens: []int{5, 17}}
	with := func(change func(*kernels.AttnShape)) kernels.AttnShape {
		a := good
		change(&a)
		return a
	}
	old := k.With(kernels.Selection{kernels.OpAttnDecode: 4})
	checkWrapperErrors(t, []wrapperCase{
		{"tabled attention null table", "attention", "block table is a null pointer", func() error {
			bad := kv
			bad.BlockTable = 0
			return k.Attention(s, p, p, p, p, bad, p, 1<<20, good)
		}},
		{"tabled attention no pages", "attention", "maxPages = 0", func() error {
			return k.Attention(s, p, p, p, p, kv, p, 1<<20, with(func(a *kernels.AttnShape) { a.MaxPages = 0 }))
		}},
		{"tabled attention head dim 96", "attention", "headDim = 96", func() error {
			return k.Attention(s, p, p, p, p, kv, p, 1<<20, with(func(a *kernels.AttnShape) { a.HeadDim = 96 }))
		}},
		{"tabled decode small workspace", "attention", "workspace has 16 bytes", func() error {
			return k.Attention(s, p, p, p, p, kv, p, 16, good)
		}},
		{"tabled decode with version 4", "attention", "attn_decode 4 takes the contiguous layout's uniform batches; the paged layout runs 6", func() error {
			return old.Attention(s, p, p, p, p, kv, p, 1<<20, good)
		}},
		{"tabled rope misaligned slots", "rope_kv_write", "slot mapping = ", func() error {
			bad := kv
			bad.SlotMapping = p + 4
			return k.RopeKVWrite(s, p, p, p, p, p, bad, good)
		}},
		{"tabled rope head dim 40", "rope_kv_write", "multiple of 16", func() error {
			return k.RopeKVWrite(s, p, p, p, p, p, kv, with(func(a *kernels.AttnShape) { a.HeadDim = 40 }))
		}},
		{"contiguous rope with version 3", "rope_kv_write", "rope_kv_write 3 reads the block table", func() error {
			return k.With(kernels.Selection{kernels.OpRope: 3}).RopeKVWrite(s, p, p, p, p, p, KVPtrs{Pos: p},
				kernels.AttnShape{Batch: 1, SeqLen: 1, StartPos: 3, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 8})
		}},
		{"FP8 decode without a V scale", "attention", "v scale is a null pointer", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{BlockTable: p, SeqLens: p, QueryStart: p, Positions: p, SlotMapping: p, KScale: p}, p, 1<<20,
				with(func(a *kernels.AttnShape) { a.Cache = kernels.CacheE4M3 }))
		}},
		{"FP8 rope without a K scale", "rope_kv_write", "k scale is a null pointer", func() error {
			return k.RopeKVWrite(s, p, p, p, p, p, kv, with(func(a *kernels.AttnShape) { a.Cache = kernels.CacheE5M2 }))
		}},
		{"FP8 decode with version 6", "attention", "attn_decode=6 reads and writes a bf16 KV cache only; the kv cache dtype is fp8_e4m3, which attn_decode runs on version 7", func() error {
			fp8 := kv
			fp8.KScale, fp8.VScale = p, p
			return k.With(kernels.Selection{kernels.OpAttnDecode: 6}).Attention(s, p, p, p, p, fp8, p, 1<<20,
				with(func(a *kernels.AttnShape) { a.Cache = kernels.CacheE4M3 }))
		}},
		{"bf16 decode with version 7", "attention", "attn_decode=7 takes an FP8 KV cache only", func() error {
			return k.With(kernels.Selection{kernels.OpAttnDecode: 7}).Attention(s, p, p, p, p, kv, p, 1<<20, good)
		}},
		{"contiguous FP8 attention", "attention", "an FP8 KV cache (fp8_e4m3) runs through the block table only", func() error {
			return k.Attention(s, p, p, p, p, KVPtrs{Pos: p}, p, 1<<20,
				kernels.AttnShape{Batch: 1, SeqLen: 1, StartPos: 3, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 8, Cache: kernels.CacheE4M3})
		}},
		{"advance of a prefill's view", "advance_kv", "one per sequence", func() error {
			return k.AdvanceKV(s, kv, with(func(a *kernels.AttnShape) { a.QLens = []int{3, 1} }))
		}},
		{"ragged gather null starts", "gather_last", "query starts is a null pointer", func() error {
			return k.GatherLastRagged(s, p, p, 0, 2, 64, 9)
		}},
	})
}

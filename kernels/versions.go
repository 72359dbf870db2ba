package kernels

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The ops whose kernel has several versions. Earlier versions stay
// selectable (llm.c style) so that 'stepbench ab' can compare two versions
// in one process and a regression can be bisected to a kernel.
const (
	OpAttnPrefill = "attn_prefill"
	OpAttnDecode  = "attn_decode"
	OpRope        = "rope_kv_write"
	OpArgmax      = "argmax"
	OpLinear      = "linear"
	OpGemm        = "gemm"
	OpLaunch      = "launch"
)

// OpVersion describes one version of an op.
type OpVersion struct {
	Op      string
	Version int
	// About says what the version does and which shapes it takes.
	About string
}

// OpVersions lists every version of every op with versions, oldest first.
func OpVersions() []OpVersion {
	return []OpVersion{
		{OpAttnPrefill, 1, "FlashAttention-2 tiles on fp32 CUDA cores; head_dim 32, 64, 128"},
		{OpAttnPrefill, 2, "FlashAttention-2 on tensor cores (mma.sync bf16), cp.async double buffering; head_dim 64, 128"},
		{OpAttnPrefill, 3, "version 2 with 128 query rows per block of 8 warps, addresses computed once outside the key loop, P packed by cvt.rn.bf16x2: fewer instructions per tile, the same bits; head_dim 64, 128"},
		{OpAttnDecode, 1, "flash-decoding, one thread per key; head_dim 32, 64, 128"},
		{OpAttnDecode, 2, "flash-decoding with 16-byte coalesced K/V loads, all heads of a kv head in one pass; head_dim 64, 128, up to 8 query heads per kv head"},
		{OpAttnDecode, 3, "version 2 with the combine fused in (the last block of each kv head merges the splits): one launch instead of two; head_dim 64, 128, up to 8 query heads per kv head"},
		{OpAttnDecode, 4, "on tensor cores (mma.sync, the kv head's query heads as M), K straight into fragments, V through ldmatrix, the combine fused as in version 3; head_dim 64, 128, up to 8 query heads per kv head"},
		{OpAttnDecode, 5, "version 4 with rope_kv_write (version 2's rotation) fused into its prologue at decode steps: one launch fewer per layer, the same bits; only when chosen (the default stays 4); not with rope_kv_write=1; head_dim 64, 128, up to 8 query heads per kv head"},
		{OpRope, 1, "2-byte accesses; even head_dim <= 256"},
		{OpRope, 2, "16-byte accesses; head_dim a multiple of 16, <= 256"},
		{OpArgmax, 1, "one block per row"},
		{OpArgmax, 2, "rows split over blocks of 4096 logits, then merged; vocab a multiple of 8"},
		{OpLinear, 1, "cuBLAS (cublasGemmEx, bf16 in and out, fp32 compute)"},
		{OpGemm, 1, "the products linear does not run on its own kernel (every prefill GEMM) through cuBLAS's cublasGemmEx, the default algorithm; the default version"},
		{OpGemm, 2, "the same products through cuBLASLt: the heuristic's top candidates per shape timed once at first use, the fastest kept (checked against cublasGemmEx) and cached on disk beside the cubins"},
		{OpLinear, 2, "decode's 1..16 rows on our tensor-core skinny GEMM (16-byte weight streams), gate_up with SiLU·mul fused; more rows (prefill) run version 1; k a multiple of 8"},
		{OpLaunch, 1, "every kernel through cuLaunchKernel: each starts when the kernel before it on the stream has finished; the default version"},
		{OpLaunch, 2, "programmatic dependent launch (sm_90+): the kernels that wait in-kernel (SB_PDL_WAIT: all of ours; gemv.cu's after their first weight loads) through cuLaunchKernelEx with programmatic stream serialization, so each launches while its predecessor finishes; the rest, cuBLAS, op libraries and edited sources plain; refused below compute capability 9.0"},
		{OpLinear, 3, "version 2 for 1..16 rows, and 17..32 rows on blocks of 32 output columns (x re-read through L2 at most once per weight byte), gate_up with SiLU·mul fused at 1..32 rows; more rows (prefill) run version 1; k a multiple of 8"},
		{OpLinear, 4, "version 3, and at a decode step's 1..16 rows on one GPU the residual add fused into o_proj's and down_proj's epilogue and RMSNorm into the prologue of qkv_proj, gate_up_proj and lm_head: two launches fewer per layer; only when chosen (the default stays 3); k a multiple of 8"},
		{OpRope, 3, "version 2 with each token's position and cache slot read from device memory (positions, the slot mapping; a negative slot is padding, not written): the block table's, which the paged layout and ragged batches run; on the contiguous layout's uniform batches only when chosen; head_dim a multiple of 16, <= 256"},
		{OpAttnPrefill, 4, "varlen prefill over the paged KV cache: version 3's tensor-core tiles, each sequence's rows from query_start_loc and its keys through the block table (any page size), the causal mask bottom-right aligned (chunked prefill over a cached context); the block table's, which the paged layout and ragged batches run; on the contiguous layout's uniform batches only when chosen; head_dim 32, 64, 128"},
		{OpAttnDecode, 6, "version 4 over the paged KV cache with each sequence's length read on the device: every block sets the split from the step's total keys (a long sequence many chunks, a short one one, no block more than about total/(2 SMs)), the grid sized for any lengths, so a captured step replays as they grow; the block table's, which the paged layout and ragged batches run; on the contiguous layout's uniform batches only when chosen; head_dim 32, 64, 128, up to 8 query heads per kv head"},
		{OpRope, 4, "version 3 into an FP8 KV cache (--kv-cache-dtype fp8, fp8_e4m3, fp8_e5m2): K after its rotation and V rounded to bf16, divided by their KV head's scale and stored as E4M3 or E5M2 bytes (round to nearest even, saturating); what an FP8 cache runs, and only there; head_dim a multiple of 16, <= 256"},
		{OpAttnPrefill, 5, "version 4 over an FP8 KV cache: each tile's bytes staged by cp.async and widened to bf16 in shared memory before version 4's tensor-core loop, the K scale folded into the softmax scale, the V scale on the output (FlashInfer's way); what an FP8 cache runs, and only there; head_dim 32, 64, 128"},
		{OpAttnDecode, 7, "version 6 over an FP8 KV cache: half the bytes per key, 16-byte loads of FP8 bytes widened to bf16 in registers (K into the mma fragments, V into version 6's shared tile), the split, grid and fused combine of version 6, the K scale in the softmax scale, the V scale on the output; what an FP8 cache runs, and only there; head_dim 32, 64, 128, up to 8 query heads per kv head"},
	}
}

// The block table's versions: the only versions a tabled shape (the paged
// layout, or a ragged batch on the contiguous one: AttnShape.Tabled) runs,
// and the only ones that read a block table. On the contiguous layout's
// uniform batches they run only when chosen, and then through a table of
// one page per sequence that the engine builds (runner.KVTableUser).
const (
	PrefillTabledVersion = 4
	DecodeTabledVersion  = 6
	RopeTabledVersion    = 3
)

// The FP8 cache's versions: what a shape whose AttnShape.Cache is FP8 runs
// (always through the block table), and only such a shape.
const (
	PrefillFP8Version = 5
	DecodeFP8Version  = 7
	RopeFP8Version    = 4
)

// FP8Version is op's FP8-cache version, 0 for an op without one.
func FP8Version(op string) int {
	switch op {
	case OpAttnPrefill:
		return PrefillFP8Version
	case OpAttnDecode:
		return DecodeFP8Version
	case OpRope:
		return RopeFP8Version
	}
	return 0
}

// UsesFP8Cache reports whether the selection chooses an FP8-cache version
// of some op (which runs on an FP8 cache only).
func (s Selection) UsesFP8Cache() bool {
	for op, v := range s {
		if v != 0 && v == FP8Version(op) {
			return true
		}
	}
	return false
}

// TabledVersion is op's block-table version, 0 for an op without one.
func TabledVersion(op string) int {
	switch op {
	case OpAttnPrefill:
		return PrefillTabledVersion
	case OpAttnDecode:
		return DecodeTabledVersion
	case OpRope:
		return RopeTabledVersion
	}
	return 0
}

// UsesKVTable reports whether the selection chooses a block-table version
// of some op: a run on the contiguous layout then goes through a table of
// one page per sequence (the chosen kernel takes nothing else).
func (s Selection) UsesKVTable() bool {
	for op, v := range s {
		if v != 0 && (v == TabledVersion(op) || v == FP8Version(op)) {
			return true
		}
	}
	return false
}

// tabledWhat names what made a shape tabled, for refusals.
func tabledWhat(a AttnShape) string {
	if a.Paged {
		return "the paged layout"
	}
	return "a ragged batch"
}

// pickAt is pick for a shape that may be tabled: a tabled shape runs op's
// block-table version (a chosen other version is refused in one line
// naming why), a contiguous uniform one the chosen or newest version that
// supports it, the block-table version only when chosen.
func (s Selection) pickAt(op string, a AttnShape, supports func(version int) error) (int, error) {
	tv, fv := TabledVersion(op), FP8Version(op)
	if a.Cache.FP8() {
		// An FP8 cache runs op's FP8 version, whatever the layout.
		if v, ok := s[op]; ok && v != fv {
			return 0, fmt.Errorf("%s=%d reads and writes a bf16 KV cache only; the kv cache dtype is %s, which %s runs on version %d", op, v, a.Cache, op, fv)
		}
		if err := supports(fv); err != nil {
			return 0, fmt.Errorf("%s %d, the FP8 cache's, cannot run %v", op, fv, err)
		}
		return fv, nil
	}
	if v, ok := s[op]; ok && v == fv {
		return 0, fmt.Errorf("%s=%d takes an FP8 KV cache only (--kv-cache-dtype fp8, fp8_e4m3 or fp8_e5m2); the kv cache dtype is %s (bf16)", op, v, a.Cache)
	}
	if !a.Tabled() {
		_, chosen := s[op]
		return s.pick(op, func(v int) error {
			if v == fv {
				return fmt.Errorf("version %d reads an FP8 KV cache only", v)
			}
			if v == tv && !chosen {
				return fmt.Errorf("version %d (the block table's) runs only when chosen on the contiguous layout's uniform batches", v)
			}
			return supports(v)
		})
	}
	if v, ok := s[op]; ok && v != tv {
		return 0, fmt.Errorf("%s %d takes the contiguous layout's uniform batches; %s runs %d", op, v, tabledWhat(a), tv)
	}
	if err := supports(tv); err != nil {
		return 0, fmt.Errorf("%s %d, the block table's, cannot run %v", op, tv, err)
	}
	return tv, nil
}

// Versions are op's versions, oldest first (none for an op without versions).
func Versions(op string) []int {
	var out []int
	for _, v := range OpVersions() {
		if v.Op == op {
			out = append(out, v.Version)
		}
	}
	return out
}

// VersionedOps are the ops with versions, sorted.
func VersionedOps() []string {
	var out []string
	for _, v := range OpVersions() {
		if !slices.Contains(out, v.Op) {
			out = append(out, v.Op)
		}
	}
	sort.Strings(out)
	return out
}

// Selection is the kernel version the user chose per op; an op not in it
// runs its newest version where the shape allows, else the newest that does
// (gemm excepted: GemmVersion).
type Selection map[string]int

// ParseSelection reads "op=version" items (--kernel attn_prefill=1); an
// unknown op or version is an error naming the choices.
func ParseSelection(items []string) (Selection, error) {
	sel := Selection{}
	fast := false
	for _, item := range items {
		if item == SetFast {
			fast = true
			continue
		}
		op, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want OP=VERSION, e.g. attn_prefill=1 (ops: %s), or %s (the best-estimated set, FastSet)", item, strings.Join(VersionedOps(), ", "), SetFast)
		}
		versions := Versions(op)
		if len(versions) == 0 {
			return nil, fmt.Errorf("%q: %s has no versions to choose from (ops with versions: %s)", item, op, strings.Join(VersionedOps(), ", "))
		}
		n, err := strconv.Atoi(v)
		if err != nil || !slices.Contains(versions, n) {
			return nil, fmt.Errorf("%q: %s has versions %v", item, op, versions)
		}
		if old, dup := sel[op]; dup && old != n {
			return nil, fmt.Errorf("%q: %s is already set to %d", item, op, old)
		}
		sel[op] = n
	}
	if fast {
		sel.addFast()
	}
	if err := sel.checkRopeFusion(); err != nil {
		return nil, err
	}
	if err := sel.checkTableMix(); err != nil {
		return nil, err
	}
	return sel, nil
}

// Chosen reports the version the user chose for op, if any.
func (s Selection) Chosen(op string) (int, bool) {
	v, ok := s[op]
	return v, ok
}

// String lists the choices, "attn_prefill=1 argmax=2", or "newest" when
// none; a selection made with --kernel fast says so first ("fast: launch=2
// linear=4").
func (s Selection) String() string {
	if len(s) == 0 {
		return "newest"
	}
	var parts []string
	if s.Fast() {
		parts = append(parts, SetFast+":")
	}
	for _, op := range VersionedOps() {
		if v, ok := s[op]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", op, v))
		}
	}
	return strings.Join(parts, " ")
}

// PrefillVersion is the attn_prefill version to run for a: the chosen one
// (an error when it cannot take a), else the newest that can; a tabled
// shape runs version 4 (PrefillTabledVersion) only.
func (s Selection) PrefillVersion(a AttnShape) (int, error) {
	return s.pickAt(OpAttnPrefill, a, func(v int) error {
		dims := TensorCoreHeadDims
		if v == PrefillTabledVersion || v == PrefillFP8Version {
			dims = SupportedHeadDims
		}
		if v >= 2 && !slices.Contains(dims, a.HeadDim) {
			return fmt.Errorf("head_dim %d (version %d takes %v)", a.HeadDim, v, dims)
		}
		return nil
	})
}

// DecodeVersion is the attn_decode version to run for a (see PrefillVersion).
// Version 5 runs only when chosen (DecodeDefaultMax): the newest that takes
// a below it otherwise; a tabled shape runs version 6 (DecodeTabledVersion).
func (s Selection) DecodeVersion(a AttnShape) (int, error) {
	_, chosen := s[OpAttnDecode]
	return s.pickAt(OpAttnDecode, a, func(v int) error {
		if v > DecodeDefaultMax && v != DecodeTabledVersion && v != DecodeFP8Version && !chosen {
			return fmt.Errorf("version %d runs only when chosen", v)
		}
		if v >= 2 {
			dims := TensorCoreHeadDims
			if v == DecodeTabledVersion || v == DecodeFP8Version {
				dims = SupportedHeadDims
			}
			if !slices.Contains(dims, a.HeadDim) {
				return fmt.Errorf("head_dim %d (version %d takes %v)", a.HeadDim, v, dims)
			}
			if g := a.Heads / max(a.KVHeads, 1); g > Decode2Groups[len(Decode2Groups)-1] {
				return fmt.Errorf("%d query heads per kv head (version %d takes up to %d)", g, v, Decode2Groups[len(Decode2Groups)-1])
			}
		}
		return nil
	})
}

// DecodeDefaultMax is the newest attn_decode version a run gets unasked:
// version 5 (rope_kv_write fused in) is chosen with --kernel attn_decode=5
// until a GPU measures it against version 4 (the emulated device cannot).
const DecodeDefaultMax = 4

// DecodeFusesRope reports whether attn_decode version fuses rope_kv_write
// into decode attention (version 5).
func DecodeFusesRope(version int) bool { return version == 5 }

// checkRopeFusion refuses attn_decode=5 beside a chosen rope_kv_write other
// than 2: version 5's prologue is rope_kv_write version 2's rotation, so
// the other choice could not run at decode steps.
func (s Selection) checkRopeFusion() error {
	if r, ok := s[OpRope]; ok && r != 2 && DecodeFusesRope(s[OpAttnDecode]) {
		return fmt.Errorf("attn_decode=%d fuses rope_kv_write version 2 into decode attention; it cannot run with rope_kv_write=%d (choose rope_kv_write=2 or another attn_decode)", s[OpAttnDecode], r)
	}
	return nil
}

// checkTableMix refuses a block-table version chosen beside another op's
// version that cannot read the table: the chosen table version makes the
// run go through a table, where the other could not run.
func (s Selection) checkTableMix() error {
	kvOps := []string{OpAttnPrefill, OpAttnDecode, OpRope}
	for _, op := range kvOps {
		if v, ok := s[op]; !ok || v != FP8Version(op) {
			continue
		}
		for _, other := range kvOps {
			if w, ok := s[other]; ok && w != FP8Version(other) {
				return fmt.Errorf("%s=%d reads and writes an FP8 KV cache, where %s=%d cannot (it takes a bf16 cache; the FP8 cache's is %d)",
					op, s[op], other, w, FP8Version(other))
			}
		}
	}
	for _, op := range kvOps {
		if v, ok := s[op]; !ok || v != TabledVersion(op) {
			continue
		}
		for _, other := range kvOps {
			if w, ok := s[other]; ok && w != TabledVersion(other) {
				return fmt.Errorf("%s=%d runs through the block table, where %s=%d cannot (it takes the contiguous layout's uniform batches; the table's is %d)",
					op, s[op], other, w, TabledVersion(other))
			}
		}
	}
	return nil
}

// RopeVersion is the rope_kv_write version to run for headDim on the
// contiguous layout's uniform batches (RopeVersionAt).
func (s Selection) RopeVersion(headDim int) (int, error) {
	return s.RopeVersionAt(AttnShape{HeadDim: headDim})
}

// RopeVersionAt is the rope_kv_write version to run at a: version 3
// (RopeTabledVersion) for a tabled shape, else the chosen or newest other
// that takes its head_dim (3 only when chosen).
func (s Selection) RopeVersionAt(a AttnShape) (int, error) {
	return s.pickAt(OpRope, a, func(v int) error {
		if v >= 2 && (a.HeadDim%16 != 0 || a.HeadDim > RopeMaxHeadDim) {
			return fmt.Errorf("head_dim %d (version %d takes multiples of 16 up to %d)", a.HeadDim, v, RopeMaxHeadDim)
		}
		return nil
	})
}

// ArgmaxVersion is the argmax version to run for vocab.
func (s Selection) ArgmaxVersion(vocab int) (int, error) {
	return s.pick(OpArgmax, func(v int) error {
		if v == 2 && vocab%8 != 0 {
			return fmt.Errorf("vocab %d (version 2 takes multiples of 8)", vocab)
		}
		return nil
	})
}

// LinearVersion is the linear version to run for products over k (the
// inner dimension): versions 2 and 3 need k a multiple of 8. They name our
// kernels for the products of LinearGemvMaxRows rows or fewer
// (LinearUsesGemv); products of more rows (a prefill's) run cuBLAS under
// every version.
func (s Selection) LinearVersion(k int) (int, error) {
	_, chosen := s[OpLinear]
	return s.pick(OpLinear, func(v int) error {
		if v > LinearDefaultMax && !chosen {
			return fmt.Errorf("version %d runs only when chosen", v)
		}
		if v >= 2 && k%8 != 0 {
			return fmt.Errorf("k = %d (version %d takes multiples of 8)", k, v)
		}
		return nil
	})
}

// LinearGemvMaxRows is the most token rows linear version runs on our
// kernels (gemv.cu): none for version 1 (cuBLAS), GemvMaxRows for version
// 2, Gemv32MaxRows for version 3.
func LinearGemvMaxRows(version int) int {
	switch version {
	case 2:
		return GemvMaxRows
	case 3, 4:
		return Gemv32MaxRows
	}
	return 0
}

// LinearDefaultMax is the newest linear version a run gets unasked:
// version 4 (the residual add and RMSNorm fused into the projections) is
// chosen with --kernel linear=4 until a GPU measures it against version 3.
const LinearDefaultMax = 3

// LinearFusesNorm reports whether linear version fuses the residual add and
// RMSNorm into a decode step's projections of m rows (version 4, 1..16
// rows; gemv.cu's gemv_res_* and gemv_norm_*).
func LinearFusesNorm(version, m int) bool { return version == 4 && m >= 1 && m <= GemvMaxRows }

// LinearUsesGemv reports whether linear version runs a product of m rows on
// our kernels (gemv.cu) rather than on cuBLAS.
func LinearUsesGemv(version, m int) bool { return m >= 1 && m <= LinearGemvMaxRows(version) }

// GemmVersion is the gemm version to run: the chosen one, else version 1
// (cublasGemmEx). gemm is the one op whose default is not its newest
// version: version 2 (cuBLASLt tuned) is not shown faster on any GPU yet,
// and its first use of a shape times candidates, which a default run should
// not pay for unasked. Both versions take every shape.
func (s Selection) GemmVersion() int {
	if v, ok := s[OpGemm]; ok {
		return v
	}
	return 1
}

// LaunchVersion is the launch version to run: the chosen one, else version
// 1 (cuLaunchKernel). Like gemm's, launch's default is not its newest
// version: programmatic dependent launch (version 2) is not shown faster on
// any GPU yet, and it needs compute capability 9.0.
func (s Selection) LaunchVersion() int {
	if v, ok := s[OpLaunch]; ok {
		return v
	}
	return 1
}

// LaunchProgrammatic is the launch version that launches with programmatic
// stream serialization.
const LaunchProgrammatic = 2

// pick returns the chosen version of op if it supports the shape (else an
// error naming why), or the newest version that supports it.
func (s Selection) pick(op string, supports func(version int) error) (int, error) {
	if v, ok := s[op]; ok {
		if err := supports(v); err != nil {
			return 0, fmt.Errorf("%s=%d cannot run %v", op, v, err)
		}
		return v, nil
	}
	versions := Versions(op)
	for i := len(versions) - 1; i >= 0; i-- {
		if supports(versions[i]) == nil {
			return versions[i], nil
		}
	}
	return versions[0], nil
}

// Resolve is the version every op with versions runs at the shapes of m,
// "argmax=2 attn_decode=4 attn_prefill=3 gemm=1 launch=1 linear=3 rope_kv_write=2", or an error
// naming the first chosen version that cannot run them, on the contiguous
// layout's uniform batches (ResolveLayout).
func (s Selection) Resolve(m ModelShape) (string, error) { return s.ResolveLayout(m, false) }

// ResolveLayout is Resolve for a run on the layout: tabled, the paged
// layout or a ragged batch (or a selection that UsesKVTable), whose
// attention and rope_kv_write run their block-table versions.
func (s Selection) ResolveLayout(m ModelShape, tabled bool) (string, error) {
	return s.ResolveKV(m, tabled, CacheBF16)
}

// ResolveKV is ResolveLayout for a cache of the dtype: an FP8 cache runs
// through the block table, on the FP8 versions of attention and
// rope_kv_write (a chosen other version of them is refused).
func (s Selection) ResolveKV(m ModelShape, tabled bool, cache CacheDType) (string, error) {
	a := AttnShape{Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Cache: cache}
	if cache.FP8() {
		tabled = true
	}
	if tabled || s.UsesKVTable() {
		a.PageSize, a.Paged = 1, tabled
	}
	pickers := map[string]func() (int, error){
		OpArgmax:      func() (int, error) { return s.ArgmaxVersion(m.Vocab) },
		OpAttnDecode:  func() (int, error) { return s.DecodeVersion(a) },
		OpAttnPrefill: func() (int, error) { return s.PrefillVersion(a) },
		OpLinear: func() (int, error) {
			if v, err := s.LinearVersion(m.Hidden); err != nil || v == 1 {
				return v, err
			}
			return s.LinearVersion(m.Inter)
		},
		OpRope:   func() (int, error) { return s.RopeVersionAt(a) },
		OpGemm:   func() (int, error) { return s.GemmVersion(), nil },
		OpLaunch: func() (int, error) { return s.LaunchVersion(), nil },
	}
	var parts []string
	for _, op := range VersionedOps() {
		pick, ok := pickers[op]
		if !ok {
			return "", fmt.Errorf("op %s has versions but no rule for choosing one", op)
		}
		v, err := pick()
		if err != nil {
			return "", fmt.Errorf("%s: %w", m.Name, err)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", op, v))
	}
	if s.Fast() {
		return SetFast + ": " + strings.Join(parts, " "), nil
	}
	return strings.Join(parts, " "), nil
}

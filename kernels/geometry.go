package kernels

import (
	"fmt"
	"slices"
	"strings"
)

// AttnShape describes one attention call over the KV cache (runner.AttnShape
// is this type).
//
// The uniform case (QLens nil): every sequence holds StartPos cached tokens
// and brings SeqLen new ones: token (b, s) sits at position StartPos+s and
// row b*SeqLen+s of the activations. Prefill is StartPos 0, SeqLen the
// prompt length; a decode step is SeqLen 1.
//
// A ragged batch (QLens set): sequence b brings QLens[b] new tokens and
// holds SeqLens[b] in all after the step (its new token i at position
// SeqLens[b]−QLens[b]+i), its rows following the sequences before it;
// SeqLen is then the most new tokens of any sequence and StartPos unused.
// The lengths are the caller's view when it made the call, for launch
// shapes, costs and checks: the kernels read them from the device (a
// replayed decode step sees the current ones).
//
// The cache of one layer: contiguous (PageSize 0), [Batch][MaxSeq][KVHeads][HeadDim];
// paged (PageSize > 0), NumPages pages of [PageSize][KVHeads][HeadDim],
// each sequence's through a block table of MaxPages entries, MaxSeq =
// MaxPages·PageSize positions at most (ref.PagedKV). Paged says the pages
// are a pool shared by the batch; without it a page-size view is the
// contiguous cache as one page per sequence (PageSize = MaxSeq).
type AttnShape struct {
	Batch, SeqLen, StartPos int
	Heads, KVHeads, HeadDim int
	MaxSeq                  int
	QLens, SeqLens          []int
	PageSize, NumPages      int
	MaxPages                int
	Paged                   bool
	// Cache is the caches' element type: bf16 (the zero value) or FP8
	// bytes dequantized by per-layer K and V scales of KVHeads floats.
	Cache CacheDType
}

// CacheDType is the KV cache's element type.
type CacheDType uint8

// The KV cache's element types, as vLLM's --kv-cache-dtype names them.
const (
	CacheBF16 CacheDType = iota // "auto": the model's bf16
	CacheE4M3                   // "fp8_e4m3": x ≈ E4M3 byte · scale
	CacheE5M2                   // "fp8_e5m2": E5M2 bytes (scales of 1, as vLLM)
)

// String is the vLLM name of the type.
func (c CacheDType) String() string {
	switch c {
	case CacheBF16:
		return "auto"
	case CacheE4M3:
		return "fp8_e4m3"
	case CacheE5M2:
		return "fp8_e5m2"
	}
	return fmt.Sprintf("CacheDType(%d)", uint8(c))
}

// Bytes is one cached element's size.
func (c CacheDType) Bytes() int {
	if c == CacheBF16 {
		return 2
	}
	return 1
}

// FP8 reports whether the cache holds FP8 bytes.
func (c CacheDType) FP8() bool { return c != CacheBF16 }

// ParseCacheDType reads vLLM's --kv-cache-dtype names: auto (and bf16,
// bfloat16), fp8 (E4M3, as vLLM on CUDA), fp8_e4m3, fp8_e5m2.
func ParseCacheDType(name string) (CacheDType, error) {
	switch name {
	case "auto", "bf16", "bfloat16", "":
		return CacheBF16, nil
	case "fp8", "fp8_e4m3":
		return CacheE4M3, nil
	case "fp8_e5m2":
		return CacheE5M2, nil
	}
	return 0, fmt.Errorf("kv cache dtype %q: want auto, fp8, fp8_e4m3 or fp8_e5m2", name)
}

// Tokens is the number of activation rows: Batch*SeqLen, or the sum of
// QLens for a ragged batch.
func (s AttnShape) Tokens() int {
	if s.QLens == nil {
		return s.Batch * s.SeqLen
	}
	n := 0
	for _, q := range s.QLens {
		n += q
	}
	return n
}

// Same reports whether s and o are the same shape, lengths included.
func (s AttnShape) Same(o AttnShape) bool {
	type fixed struct {
		batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq, pageSize, numPages, maxPages int
		paged, ragged, lens                                                                    bool
		cache                                                                                  CacheDType
	}
	key := func(a AttnShape) fixed {
		return fixed{a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq, a.PageSize, a.NumPages,
			a.MaxPages, a.Paged, a.QLens != nil, a.SeqLens != nil, a.Cache}
	}
	return key(s) == key(o) && slices.Equal(s.QLens, o.QLens) && slices.Equal(s.SeqLens, o.SeqLens)
}

// Ragged reports whether the sequences' lengths are their own (QLens set).
func (s AttnShape) Ragged() bool { return s.QLens != nil }

// Tabled reports whether the call goes through a block table (PageSize >
// 0): the paged layout, or a ragged batch on the contiguous one.
func (s AttnShape) Tabled() bool { return s.PageSize > 0 }

// KVTokens is the tokens in the batch's caches after the step: the sum of
// SeqLens, or Batch·(StartPos+SeqLen).
func (s AttnShape) KVTokens() int {
	if s.SeqLens == nil {
		return s.Batch * (s.StartPos + s.SeqLen)
	}
	n := 0
	for _, l := range s.SeqLens {
		n += l
	}
	return n
}

// CacheSlots is how many token rows one layer's K (or V) cache holds:
// NumPages·PageSize for a table, Batch·MaxSeq otherwise.
func (s AttnShape) CacheSlots() int {
	if s.Tabled() {
		return s.NumPages * s.PageSize
	}
	return s.Batch * s.MaxSeq
}

// ModelShape is the widths of a model that the kernels see; runner/gpu's
// Verifier runs every kernel at them. Odd widths (not multiples of 8) take
// the scalar paths.
type ModelShape struct {
	Name                    string
	Hidden, Inter, Vocab    int
	Heads, KVHeads, HeadDim int
	RopeTheta               float64
	// QKNorm and QKVBias: the model runs qk_norm (Qwen3's q/k norm,
	// Qwen2's q/k/v bias), so verify checks it at its heads.
	QKNorm, QKVBias bool
}

// CeilDiv is ⌈a/b⌉ for positive b.
func CeilDiv(a, b int) int { return (a + b - 1) / b }

// DecodePlan splits the cache's MaxSeq positions into chunks so that
// batch*kvHeads*splits blocks fill a GPU of smCount SMs about
// DecodeBlocksPerSM times, with chunks of DecodeMinChunkKeys..DecodeMaxChunkKeys
// keys (a multiple of 32). The plan depends on MaxSeq, not StartPos: a
// decode step captured in a CUDA graph keeps its grid at every position, and
// the blocks of splits beyond the current keys exit at once (the combine
// skips them).
func DecodePlan(a AttnShape, smCount int) (chunkKeys, splits int) {
	keys := max(a.MaxSeq, 1)
	want := max(1, CeilDiv(DecodeBlocksPerSM*smCount, max(1, a.Batch*a.KVHeads)))
	chunkKeys = min(max(CeilDiv(CeilDiv(keys, want), 32)*32, DecodeMinChunkKeys), DecodeMaxChunkKeys)
	return chunkKeys, CeilDiv(keys, chunkKeys)
}

// AttentionWorkspaceBytes is the workspace decode attention needs for shape
// a on a GPU with smCount SMs: one float32 partial (HeadDim sums, a max and
// a sum) per batch, head and split, then version 3's block counters
// (DecodeCounterBytes); zero for prefill (SeqLen > 1). It
// depends on Batch, Heads, KVHeads, HeadDim and MaxSeq, never on StartPos.
// A tabled decode step's (attn_decode 6: Decode6WorkspaceBytes) depends on
// Batch, Heads, KVHeads and HeadDim only, never on the lengths.
func AttentionWorkspaceBytes(a AttnShape, smCount int) int {
	if a.SeqLen != 1 || a.Batch <= 0 || a.Heads <= 0 || a.HeadDim <= 0 {
		return 0
	}
	if a.Tabled() {
		return Decode6WorkspaceBytes(a, smCount)
	}
	_, splits := DecodePlan(a, smCount)
	return DecodePartialBytes(a, splits) + DecodeCounterBytes(a)
}

// Decode6Grid is attn_decode 6's launch for a decode step of a on a GPU of
// smCount SMs: target, the chunks per kv head the kernel splits the step's
// keys into (about DecodeBlocksPerSM blocks per SM in all), and items, the
// grid's x: the most (sequence, chunk) items any lengths give, target +
// Batch (the kernel's chunk is at least total keys / target, so sequence b
// takes fewer than len_b / chunk + 1 of them). Neither depends on the
// lengths: a captured decode step replays at every length.
func Decode6Grid(a AttnShape, smCount int) (target, items int) {
	target = max(1, CeilDiv(DecodeBlocksPerSM*smCount, max(1, a.KVHeads)))
	return target, target + a.Batch
}

// Decode6Chunk is the chunk attn_decode 6's blocks compute on the device
// from the sequences' lengths (its decode6_schedule): at least
// Decode6Warps·Decode6SubKeys keys, a multiple of it, and at least
// ⌈total/target⌉.
func Decode6Chunk(lens []int, target int) int {
	total := 0
	for _, l := range lens {
		total += l
	}
	quantum := Decode6Warps * Decode6SubKeys
	return max(quantum, CeilDiv(CeilDiv(total, max(target, 1)), quantum)*quantum)
}

// Decode6Items is how many (sequence, chunk) items attn_decode 6 makes of
// lens per kv head: Σ ⌈len_b / chunk⌉.
func Decode6Items(lens []int, target int) int {
	chunk, n := Decode6Chunk(lens, target), 0
	for _, l := range lens {
		n += CeilDiv(l, chunk)
	}
	return n
}

// Decode6WorkspaceBytes is attn_decode 6's workspace: a float32 partial
// (HeadDim sums, a max and a sum) per item of the grid and query head, then
// the block counters (DecodeCounterBytes), which must start at zero (each
// launch leaves them so).
func Decode6WorkspaceBytes(a AttnShape, smCount int) int {
	_, items := Decode6Grid(a, smCount)
	return items*a.Heads*(a.HeadDim+2)*4 + DecodeCounterBytes(a)
}

// Decode6SharedBytes mirrors attn_decode6's dynamic shared layout, version
// 4's: each warp's bf16 V sub-tile, then the merge's float32 sums, maxima
// and sums.
func Decode6SharedBytes(headDim, group int) int {
	return Decode6Warps*Decode6SubKeys*headDim*2 + (Decode6Warps*group*headDim+2*Decode6Warps*group)*4
}

// Prefill4SharedBytes mirrors attn_prefill4's dynamic shared layout: the
// bf16 q tile of Prefill4QueryTile rows and two k and two v tiles.
func Prefill4SharedBytes(headDim int) int {
	return (Prefill4QueryTile*headDim + 4*Prefill4KeyTile*headDim) * 2
}

// Prefill5SharedBytes mirrors attn_prefill5's: version 4's, then two K
// and two V tiles of FP8 bytes (the cp.async staging).
func Prefill5SharedBytes(headDim int) int {
	return Prefill4SharedBytes(headDim) + 4*Prefill4KeyTile*headDim
}

// PageShift is log2(pageSize) for a power of two, else −1: the paged
// kernels shift and mask by it, or divide.
func PageShift(pageSize int) int {
	if pageSize < 1 || pageSize&(pageSize-1) != 0 {
		return -1
	}
	shift := 0
	for 1<<shift < pageSize {
		shift++
	}
	return shift
}

// DecodePartialBytes is the float32 partials' part of the decode workspace:
// HeadDim sums, a max and a sum per batch, head and split.
func DecodePartialBytes(a AttnShape, splits int) int {
	return a.Batch * a.Heads * splits * (a.HeadDim + 2) * 4
}

// DecodeCounterBytes is the part after the partials that attn_decode
// version 3 counts its blocks in: one int per sequence and kv head, rounded
// up to 16 bytes. It must be zero before the first launch (the backend
// zeroes a workspace it allocates); each launch leaves it zero.
func DecodeCounterBytes(a AttnShape) int {
	return CeilDiv(a.Batch*a.KVHeads*4, 16) * 16
}

// DecodeSharedBytes mirrors attn_decode_split's dynamic shared layout: q
// [group][D], scores [group][chunk], (max, sum) [group] and a reduction
// pair per thread, all float32 (group = Heads/KVHeads).
func DecodeSharedBytes(a AttnShape, chunkKeys int) int {
	group := a.Heads / a.KVHeads
	return (group*a.HeadDim + group*chunkKeys + 2*group + 2*DecodeThreads) * 4
}

// PrefillSharedBytes mirrors attn_prefill's dynamic shared layout: q, k and
// v tiles with rows padded by one float, the score tile, and the running
// max, sum and rescale per query row, all float32.
func PrefillSharedBytes(headDim int) int {
	ld := headDim + 1
	return (PrefillQueryTile*ld + 2*PrefillKeyTile*ld + PrefillQueryTile*(PrefillKeyTile+1) + 3*PrefillQueryTile) * 4
}

// ThreadsFor is a block size for n work items: a multiple of 32 in
// [32, maxThreads].
func ThreadsFor(n, maxThreads int) int {
	return min(max(CeilDiv(n, 32)*32, 32), maxThreads)
}

// GridStrideBlocks caps a grid-stride kernel's grid at
// GridStrideBlocksPerSM blocks per SM.
func GridStrideBlocks(items, threads, smCount int) int {
	return max(1, min(CeilDiv(items, threads), smCount*GridStrideBlocksPerSM))
}

// Version 2 kernels' launch constants (attention.cu, sample.cu; a test reads
// them back from the sources).
const (
	// PrefillTCThreads, PrefillTCQueryTile and PrefillTCKeyTile are
	// attn_prefill_tc's block size and tiles (FA_THREADS, FA_BQ, FA_BK).
	PrefillTCThreads   = 128
	PrefillTCQueryTile = 64
	PrefillTCKeyTile   = 64
	// PrefillV3Threads, PrefillV3QueryTile and PrefillV3KeyTile are
	// attn_prefill3's (FA3_THREADS, FA3_BQ, FA3_BK).
	PrefillV3Threads   = 256
	PrefillV3QueryTile = 128
	PrefillV3KeyTile   = 64
	// Decode2Threads is attn_decode2's block size (DEC_THREADS).
	Decode2Threads = 128
	// Decode4Warps and Decode4SubKeys are attn_decode4's warps per block
	// and keys per warp sub-tile (DEC4_WARPS, DEC4_SUB).
	Decode4Warps   = 4
	Decode4SubKeys = 16
	// ArgmaxChunk is how many logits one argmax2_partial block reduces;
	// Argmax2Threads its block size.
	ArgmaxChunk    = 4096
	Argmax2Threads = 256
	// GemvThreads and GemvRows are linear version 2's block size and the
	// output columns (rows of w) one block owns (GEMV_THREADS, GEMV_ROWS in
	// gemv.cu); GemvMaxRows is the most token rows it takes (gemv_t16).
	GemvThreads = 128
	GemvRows    = 16
	GemvMaxRows = 16
	// GemvKChunk is the k elements a warp of linear versions 2-4 takes at a
	// time (GEMV_KCHUNK).
	GemvKChunk = 64
	// Gemv32Threads and Gemv32Cols are linear version 3's gemv_t32 block
	// size and the output columns one block owns (GEMV32_THREADS,
	// GEMV32_COLS; gemv_silu_t32's block owns GemvRows columns of each of
	// gate and up); Gemv32MaxRows is the most token rows it takes.
	Gemv32Threads = 256
	Gemv32Cols    = 32
	Gemv32MaxRows = 32
)

// Linear version 5's launch constants (fp8.cu's gemv_fp8_*; a test reads
// them back from the source).
const (
	// GemvFP8Threads and GemvFP8Rows are gemv_fp8's block size and the
	// output columns one block owns (G8_THREADS, G8_ROWS; gemv_fp8_silu's
	// block owns GemvFP8Rows of each of gate and up); GemvFP8MaxRows is
	// the most token rows it takes (G8_MAX_ROWS).
	GemvFP8Threads = 128
	GemvFP8Rows    = 16
	GemvFP8MaxRows = 32
)

// The activation modes of gemv_fp8's act argument (G8_ACT_* in fp8.cu;
// ref.FP8Act).
const (
	FP8ActBF16   = 0 // weight-only: x used in bf16
	FP8ActStatic = 1 // x quantized with the given scale
	FP8ActTensor = 2 // one dynamic scale over the m rows
	FP8ActToken  = 3 // one dynamic scale per row
)

// GemvFP8EntryPoint is linear version 5's entry point for m token rows:
// gemv_fp8_t8 up to 8, _t16 up to 16, _t32 up to GemvFP8MaxRows; silu
// names gate_up_proj's with silu_mul fused (gemv_fp8_silu_*).
func GemvFP8EntryPoint(m int, silu bool) string {
	tile := "t32"
	switch {
	case m <= 8:
		tile = "t8"
	case m <= 16:
		tile = "t16"
	}
	if silu {
		return "gemv_fp8_silu_" + tile
	}
	return "gemv_fp8_" + tile
}

// The block table's kernels' launch constants (paged_attention.cu,
// copy.cu; a test reads them back from the sources).
const (
	// Prefill4Threads, Prefill4QueryTile and Prefill4KeyTile are
	// attn_prefill4's block size and tiles (PF4_THREADS, PF4_BQ, PF4_BK).
	Prefill4Threads   = 256
	Prefill4QueryTile = 128
	Prefill4KeyTile   = 64
	// Decode6Warps and Decode6SubKeys are attn_decode6's warps per block
	// and keys per warp sub-tile (DEC6_WARPS, DEC6_SUB).
	Decode6Warps   = 4
	Decode6SubKeys = 16
	// KVAdvanceThreads is kv_advance's block size (one thread per sequence).
	KVAdvanceThreads = 128
)

// GemvEntryPoint is linear version 2's and 3's entry point for m token rows
// (gemv_t8 up to 8, gemv_t16 up to 16, gemv_t32 up to 32, version 3's
// own); silu names the gate_up kernel with SiLU·mul fused (gemv_silu_t8,
// gemv_silu_t16, gemv_silu_t32).
func GemvEntryPoint(m int, silu bool) string {
	name := "gemv_t32"
	switch {
	case m <= 8:
		name = "gemv_t8"
	case m <= GemvMaxRows:
		name = "gemv_t16"
	}
	if silu {
		return strings.Replace(name, "gemv_", "gemv_silu_", 1)
	}
	return name
}

// GemvResEntryPoint is linear version 4's o_proj/down_proj kernel for m
// token rows (the residual add in its epilogue): gemv_res_t8 up to 8 rows,
// gemv_res_t16 up to GemvMaxRows.
func GemvResEntryPoint(m int) string {
	if m <= 8 {
		return "gemv_res_t8"
	}
	return "gemv_res_t16"
}

// GemvNormEntryPoint is linear version 4's kernel with RMSNorm in its
// prologue for m token rows: gemv_norm_t8/_t16 (qkv_proj, lm_head), with
// silu gemv_silu_norm_t8/_t16 (gate_up_proj and SiLU·mul).
func GemvNormEntryPoint(m int, silu bool) string {
	name := "gemv_norm_t16"
	if m <= 8 {
		name = "gemv_norm_t8"
	}
	if silu {
		return strings.Replace(name, "gemv_", "gemv_silu_", 1)
	}
	return name
}

// NormParts is how many squared sums per token a linear version 4
// producer (gemv_res_*) writes over hidden columns, one per block of
// GemvRows columns, and its consumers (gemv_norm_*) read.
func NormParts(hidden int) int { return CeilDiv(hidden, GemvRows) }

// NormSharedBytes is the dynamic shared memory of a gemv_norm_* launch over
// an inner dimension k: the norm's k bf16 weights.
func NormSharedBytes(k int) int { return 2 * k }

// GemvGrid is the launch of GemvEntryPoint(m, silu) over n output columns
// (inter with silu): its blocks and threads per block. gemv_t32 blocks own
// Gemv32Cols columns; every other, gemv_silu_t32's included, GemvRows.
func GemvGrid(m, n int, silu bool) (blocks, threads int) {
	if m <= GemvMaxRows {
		return CeilDiv(n, GemvRows), GemvThreads
	}
	if silu {
		return CeilDiv(n, GemvRows), Gemv32Threads
	}
	return CeilDiv(n, Gemv32Cols), Gemv32Threads
}

// PrefillTCSharedBytes mirrors attn_prefill_tc's dynamic shared layout: the
// bf16 q tile and two k and two v tiles (double buffering).
func PrefillTCSharedBytes(headDim int) int {
	return (PrefillTCQueryTile*headDim + 4*PrefillTCKeyTile*headDim) * 2
}

// PrefillV3SharedBytes mirrors attn_prefill3's dynamic shared layout: the
// bf16 q tile of 128 rows and two k and two v tiles.
func PrefillV3SharedBytes(headDim int) int {
	return (PrefillV3QueryTile*headDim + 4*PrefillV3KeyTile*headDim) * 2
}

// Decode2Group is the smallest attn_decode2 group bound (Decode2Groups)
// that holds heads/kvHeads, or 0 when none does.
func Decode2Group(a AttnShape) int {
	g := a.Heads / max(a.KVHeads, 1)
	for _, bound := range Decode2Groups {
		if g <= bound {
			return bound
		}
	}
	return 0
}

// Decode2SharedBytes mirrors attn_decode2's merge buffers: per lane group
// (Decode2Threads/32 warps x 32/(D/8) groups) G partial outputs of D
// floats, a max and a sum.
func Decode2SharedBytes(headDim, group int) int {
	groups := (Decode2Threads / 32) * (32 / (headDim / 8))
	return (groups*group*headDim + 2*groups*group) * 4
}

// Decode4SharedBytes mirrors attn_decode4's dynamic shared layout: each
// warp's bf16 V sub-tile [Decode4SubKeys][D], then the merge's float32
// [warps][group][D] sums and [warps][group] maxima and sums.
func Decode4SharedBytes(headDim, group int) int {
	return Decode4Warps*Decode4SubKeys*headDim*2 + (Decode4Warps*group*headDim+2*Decode4Warps*group)*4
}

// ArgmaxWorkspaceBytes is what argmax version 2 needs for rows of vocab
// logits: one (value, index) pair of 8 bytes per row and chunk.
func ArgmaxWorkspaceBytes(rows, vocab int) int {
	return rows * CeilDiv(vocab, ArgmaxChunk) * 8
}

package kernels

// AttnShape describes one attention call over the KV cache (runner.AttnShape
// is this type). Every sequence holds StartPos cached tokens and brings
// SeqLen new ones: token (b, s) sits at position StartPos+s and row
// b*SeqLen+s of the activations. Prefill is StartPos 0, SeqLen the prompt
// length; a decode step is SeqLen 1. The cache of one layer is
// [Batch][MaxSeq][KVHeads][HeadDim].
type AttnShape struct {
	Batch, SeqLen, StartPos int
	Heads, KVHeads, HeadDim int
	MaxSeq                  int
}

// Tokens is the number of activation rows, Batch*SeqLen.
func (s AttnShape) Tokens() int { return s.Batch * s.SeqLen }

// ModelShape is the widths of a model that the kernels see; runner/gpu's
// Verifier runs every kernel at them. Odd widths (not multiples of 8) take
// the scalar paths.
type ModelShape struct {
	Name                    string
	Hidden, Inter, Vocab    int
	Heads, KVHeads, HeadDim int
	RopeTheta               float64
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

// AttentionWorkspaceBytes is the float32 workspace decode attention needs
// for shape a on a GPU with smCount SMs: one partial (HeadDim sums, a max
// and a sum) per batch, head and split; zero for prefill (SeqLen > 1). It
// depends on Batch, Heads, KVHeads, HeadDim and MaxSeq, never on StartPos.
func AttentionWorkspaceBytes(a AttnShape, smCount int) int {
	if a.SeqLen != 1 || a.Batch <= 0 || a.Heads <= 0 || a.HeadDim <= 0 {
		return 0
	}
	_, splits := DecodePlan(a, smCount)
	return a.Batch * a.Heads * splits * (a.HeadDim + 2) * 4
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

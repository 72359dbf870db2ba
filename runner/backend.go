package runner

import (
	"time"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// DType is the element type of a Buffer.
type DType int

const (
	BF16 DType = iota // raw bf16 bit patterns (uint16)
	F32
	I32
	F8E4M3 // raw FP8 E4M3 bytes (uint8): quantized weights and activations
	I64    // int64: the KV cache's slot mapping
)

func (d DType) String() string {
	switch d {
	case BF16:
		return "bf16"
	case F32:
		return "f32"
	case I32:
		return "i32"
	case F8E4M3:
		return "f8e4m3"
	case I64:
		return "i64"
	}
	return "unknown"
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case BF16:
		return 2
	case F8E4M3:
		return 1
	case I64:
		return 8
	}
	return 4
}

// Buffer is a backend's allocation: host memory for cpu, device memory for cuda.
// Its contents are reached only through the Backend that made it.
type Buffer interface {
	DType() DType
	Len() int // elements
}

// AttnShape describes one attention call over the KV cache: Batch
// sequences each holding StartPos cached tokens bring SeqLen new ones, the
// cache of one layer being [Batch][MaxSeq][KVHeads][HeadDim] (see
// kernels.AttnShape, which it is, so that backends pass it on unchanged).
type AttnShape = kernels.AttnShape

// Event marks a point in the backend's stream of work; two of them give the
// device time between them.
type Event interface {
	Record() error
}

// Backend runs the ops of the forward pass. Every op is enqueued in order on
// one stream; Sync waits for all of it. Semantics of each op are those of its
// twin in kernels/ref (same argument names and layouts).
type Backend interface {
	Name() string

	Alloc(dt DType, n int) (Buffer, error)
	Free(b Buffer) error
	UploadBF16(dst Buffer, offset int, src []uint16) error
	UploadF32(dst Buffer, src []float32) error
	UploadI32(dst Buffer, src []int32) error
	UploadI64(dst Buffer, src []int64) error
	DownloadBF16(src Buffer, dst []uint16) error
	DownloadI32(src Buffer, dst []int32) error
	// FillDummy writes elements [first, first+n) of the dummy tensor `name`
	// into dst[offset:offset+n] (see ref.FillDummy).
	FillDummy(dst Buffer, offset, n int, seed uint64, name string, first uint64, kind ref.DummyKind) error
	// FillDummyRows writes rows×cols elements of the dummy tensor `name`, row r
	// from element first + r*rowStride, into dst[offset:offset+rows*cols]
	// (see ref.FillDummyRows): a column block in one launch.
	FillDummyRows(dst Buffer, offset, rows, cols int, seed uint64, name string, first, rowStride uint64, kind ref.DummyKind) error

	Embed(out, table, ids Buffer, tokens, hidden int) error
	// AddRMSNorm: residual += add (when add is non-nil), then out = RMSNorm(residual)*weight.
	AddRMSNorm(out, residual, add, weight Buffer, rows, hidden int, eps float32) error
	// Linear: out[m,n] = x[m,k] · w[n,k]ᵀ.
	Linear(out, x, w Buffer, m, n, k int) error
	// RopeKVWrite and Attention read the positions from kv on the backend
	// (the start position kv.Pos of a uniform contiguous step; the block
	// table, lengths, positions and slots of a tabled one, s.Tabled())
	// rather than from s, so that a captured decode step replays correctly
	// at every position; s's positions and lengths are the caller's
	// expectation, used for launch shapes and checks.
	RopeKVWrite(q, kCache, vCache, qkv, invFreq Buffer, kv KVView, s AttnShape) error
	// QKNorm adds the q/k/v bias (when bias is non-nil) and RMS-normalises
	// each q and k head (with qNorm, kNorm [headDim] when non-nil) in place
	// on qkv [tokens, (heads+2*kvHeads)*headDim] (ref.QKNorm): Qwen2's
	// bias and Qwen3's q/k norm, before RopeKVWrite.
	QKNorm(qkv, bias, qNorm, kNorm Buffer, tokens, heads, kvHeads, headDim int, eps float32) error
	Attention(out, q, kCache, vCache Buffer, kv KVView, s AttnShape) error
	// AddI32 adds delta to every element of an I32 buffer (advances pos).
	AddI32(buf Buffer, delta int) error
	// AdvanceKV moves a tabled decode step's view one token on, on the
	// backend (ref.KVAdvance): positions, lengths and slots of every
	// sequence, and kv.Pos.
	AdvanceKV(kv KVView, s AttnShape) error
	// GatherLastRagged copies each sequence's last new row of a ragged
	// step (ref.GatherLastRagged), reading the rows from queryStart.
	GatherLastRagged(out, in, queryStart Buffer, batch, width int) error
	SiluMul(out, gateUp Buffer, rows, inter int) error
	GatherLast(out, in Buffer, batch, seqLen, width int) error
	Argmax(out, logits Buffer, rows, vocab int) error

	NewEvent() (Event, error)
	// Elapsed is the device time between two recorded events (both complete).
	Elapsed(start, end Event) (time.Duration, error)
	Sync() error
	Close() error
}

// AttentionReserver is implemented by backends whose attention needs a
// workspace sized by batch and maximum sequence length; the engine reserves
// it whenever it (re)allocates a run's buffers, outside any timed region.
type AttentionReserver interface {
	ReserveAttention(s AttnShape) error
}

// WeightPreparer is implemented by backends that prepare a weight matrix
// once it is loaded, for every Linear that will read it: the cpu backend
// widens it to float32 once instead of at every call. The engine calls it
// with every matrix Linear reads as w, after loading, before any step.
type WeightPreparer interface {
	PrepareWeights(matrices []Buffer) error
}

// GateUpFuser is implemented by backends that can run gate_up_proj and
// silu_mul as one op at some shapes (the cuda backend's linear version 2 or 3 at
// a decode step's rows): the engine then runs LinearSiluMul, labelled
// gate_up_proj, and no silu_mul.
type GateUpFuser interface {
	// FusesGateUp reports whether LinearSiluMul takes m rows, inter outputs
	// and an inner dimension of k.
	FusesGateUp(m, inter, k int) bool
	// LinearSiluMul: out[m, inter] = SiluMul(x[m, k] · w[2*inter, k]ᵀ), the
	// gate_up product rounded to bf16 before the SiLU (ref.GemvSiluMul).
	LinearSiluMul(out, x, w Buffer, m, inter, k int) error
}

// NormLinearFuser is implemented by backends that can fuse the residual
// stream's add and RMSNorm into the projections around them at some shapes
// (the cuda backend's linear version 4 at a decode step's rows): the
// projections that produce the residual (o_proj, down_proj) add into it in
// their epilogue and write squared sums of its column blocks (part); the
// ones that read it normalised (qkv_proj, gate_up_proj, lm_head) compute the
// norm from part in their prologue. The engine then runs no add_rmsnorm but
// layer 0's input_norm (its residual is the embedding).
type NormLinearFuser interface {
	// FusesNormLinear reports whether the ops below take m rows of a
	// residual stream hidden wide, with o_proj's inner dimension attnWidth
	// and down_proj's inter.
	FusesNormLinear(m, hidden, attnWidth, inter int) bool
	// NormParts is how many float32 part holds for m rows hidden wide.
	NormParts(m, hidden int) int
	// LinearResidual: residual[m, n] += bf16(x[m, k] · w[n, k]ᵀ) and part
	// (ref.GemvResidual).
	LinearResidual(residual, part, x, w Buffer, m, n, k int) error
	// NormLinear: out[m, n] = RMSNorm(residual[m, k])·normW · w[n, k]ᵀ, the
	// norm from part (ref.NormGemv).
	NormLinear(out, residual, part, normW, w Buffer, m, n, k int, eps float32) error
	// NormLinearSiluMul: out[m, inter] = SiluMul of NormLinear with the
	// fused [2*inter, k] gate_up matrix (ref.NormGemvSiluMul).
	NormLinearSiluMul(out, residual, part, normW, w Buffer, m, inter, k int, eps float32) error
}

// RopeAttentionFuser is implemented by backends that can run rope_kv_write
// and decode attention as one op at some shapes (the cuda backend's
// attn_decode version 5): the engine then runs RopeAttention, labelled
// attention, and no rope_kv_write.
type RopeAttentionFuser interface {
	// FusesRopeAttention reports whether RopeAttention takes s (a decode step).
	FusesRopeAttention(s AttnShape) bool
	// RopeAttention is RopeKVWrite of the qkv rows (k and v of the new
	// token into the caches) and Attention of the rotated q into out
	// [tokens, heads*headDim]; the rotated q is written nowhere else.
	RopeAttention(out, qkv, kCache, vCache, invFreq Buffer, kv KVView, s AttnShape) error
}

// BufferNamer is implemented by backends that can label a buffer for their
// own diagnostics: the emulated CUDA device names it in fault messages.
type BufferNamer interface {
	NameBuffer(b Buffer, name string)
}

// nameBuffer labels b when be can.
func nameBuffer(be Backend, b Buffer, name string) {
	if n, ok := be.(BufferNamer); ok && b != nil {
		n.NameBuffer(b, name)
	}
}

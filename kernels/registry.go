package kernels

import "fmt"

// Family is one kernel of the sources: an extern "C" entry point, or one
// per head dimension for kernels templated on it (attn_prefill_d128).
type Family struct {
	// Name is the entry point, or its stem for a kernel built per head
	// dimension (EntryPoint appends _dD).
	Name string
	// Source is the .cu file defining it. Its twin lives in kernels/ref
	// under the same base name (attention.cu ↔ ref/attention.go).
	Source string
	// Twin is the kernels/ref function the kernel must match (what
	// runner/gpu's Verifier compares it with).
	Twin string
	// HeadDims, when set, are the head dimensions it is built for, one
	// entry point each.
	HeadDims []int
	// Groups, when set, are the bounds on query heads per kv head it is
	// built for, one entry point per head dimension and bound
	// (attn_decode2_d128_g4).
	Groups []int
	// Op and Version place the kernel among the versions of an op that a
	// user selects (--kernel attn_prefill=1); "" and 0 for kernels with
	// one version.
	Op      string
	Version int
	// PDL says its entry points call SB_PDL_WAIT() before touching what an
	// earlier kernel may have written (common.cu), so that --kernel launch=2
	// may launch them with programmatic stream serialization. Only the
	// embedded source's kernels qualify (PDLEntryPoints).
	PDL bool
}

// SupportedHeadDims are the head dimensions the attention kernels are built
// for (DEFINE_DECODE and DEFINE_PREFILL in attention.cu).
var SupportedHeadDims = []int{32, 64, 128}

// TensorCoreHeadDims are the head dimensions of the version-2 attention
// kernels (DEFINE_PREFILL_TC and DEFINE_DECODE2 in attention.cu).
var TensorCoreHeadDims = []int{64, 128}

// Decode2Groups are the bounds on query heads per kv head attn_decode2 is
// built for (DEFINE_DECODE2's second argument).
var Decode2Groups = []int{1, 2, 4, 8}

// Families lists every kernel of the sources, in source order. It is a
// function, not a variable, so that no caller can change the registry.
func Families() []Family {
	return []Family{
		{Name: "silu_mul", Source: "activation.cu", Twin: "SiluMul", PDL: true},
		{Name: "attn_decode_split", Source: "attention.cu", Twin: "Attention", HeadDims: SupportedHeadDims, Op: OpAttnDecode, Version: 1, PDL: true},
		{Name: "attn_decode_combine", Source: "attention.cu", Twin: "Attention", PDL: true},
		{Name: "attn_prefill", Source: "attention.cu", Twin: "Attention", HeadDims: SupportedHeadDims, Op: OpAttnPrefill, Version: 1, PDL: true},
		{Name: "attn_prefill_tc", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Op: OpAttnPrefill, Version: 2, PDL: true},
		{Name: "attn_prefill3", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Op: OpAttnPrefill, Version: 3, PDL: true},
		{Name: "attn_decode2", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 2, PDL: true},
		{Name: "attn_decode3", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 3, PDL: true},
		{Name: "attn_decode4", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 4, PDL: true},
		{Name: "attn_decode5", Source: "attention.cu", Twin: "Attention", HeadDims: TensorCoreHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 5, PDL: true},
		{Name: "embed", Source: "copy.cu", Twin: "Embed", PDL: true},
		{Name: "gather_last", Source: "copy.cu", Twin: "GatherLast", PDL: true},
		{Name: "add_i32", Source: "copy.cu", Twin: "AddI32", PDL: true},
		{Name: "gather_last_ragged", Source: "copy.cu", Twin: "GatherLastRagged", PDL: true},
		{Name: "kv_advance", Source: "copy.cu", Twin: "KVAdvance", PDL: true},
		{Name: "fill_dummy", Source: "dummy.cu", Twin: "FillDummyRows", PDL: true},
		{Name: "fp8_absmax_partial", Source: "fp8.cu", Twin: "AbsMaxBF16", PDL: true},
		{Name: "fp8_quant_tensor", Source: "fp8.cu", Twin: "QuantizeFP8", PDL: true},
		{Name: "fp8_quant_token", Source: "fp8.cu", Twin: "QuantizeFP8Token", PDL: true},
		{Name: "fp8_scale_out", Source: "fp8.cu", Twin: "ScaleFP8Out", PDL: true},
		{Name: "gemv_fp8_t8", Source: "fp8.cu", Twin: "GemvFP8", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_fp8_t16", Source: "fp8.cu", Twin: "GemvFP8", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_fp8_t32", Source: "fp8.cu", Twin: "GemvFP8", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_fp8_silu_t8", Source: "fp8.cu", Twin: "GemvFP8SiluMul", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_fp8_silu_t16", Source: "fp8.cu", Twin: "GemvFP8SiluMul", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_fp8_silu_t32", Source: "fp8.cu", Twin: "GemvFP8SiluMul", Op: OpLinear, Version: 5, PDL: true},
		{Name: "gemv_t8", Source: "gemv.cu", Twin: "Gemv", Op: OpLinear, Version: 2, PDL: true},
		{Name: "gemv_t16", Source: "gemv.cu", Twin: "Gemv", Op: OpLinear, Version: 2, PDL: true},
		{Name: "gemv_silu_t8", Source: "gemv.cu", Twin: "GemvSiluMul", Op: OpLinear, Version: 2, PDL: true},
		{Name: "gemv_silu_t16", Source: "gemv.cu", Twin: "GemvSiluMul", Op: OpLinear, Version: 2, PDL: true},
		{Name: "gemv_t32", Source: "gemv.cu", Twin: "Gemv", Op: OpLinear, Version: 3, PDL: true},
		{Name: "gemv_silu_t32", Source: "gemv.cu", Twin: "GemvSiluMul", Op: OpLinear, Version: 3, PDL: true},
		{Name: "gemv_res_t8", Source: "gemv.cu", Twin: "GemvResidual", Op: OpLinear, Version: 4, PDL: true},
		{Name: "gemv_res_t16", Source: "gemv.cu", Twin: "GemvResidual", Op: OpLinear, Version: 4, PDL: true},
		{Name: "gemv_norm_t8", Source: "gemv.cu", Twin: "NormGemv", Op: OpLinear, Version: 4, PDL: true},
		{Name: "gemv_norm_t16", Source: "gemv.cu", Twin: "NormGemv", Op: OpLinear, Version: 4, PDL: true},
		{Name: "gemv_silu_norm_t8", Source: "gemv.cu", Twin: "NormGemvSiluMul", Op: OpLinear, Version: 4, PDL: true},
		{Name: "gemv_silu_norm_t16", Source: "gemv.cu", Twin: "NormGemvSiluMul", Op: OpLinear, Version: 4, PDL: true},
		{Name: "moe_topk", Source: "moe.cu", Twin: "RouterTopK"},
		{Name: "moe_align", Source: "moe.cu", Twin: "MoEAlign"},
		{Name: "moe_gate_up", Source: "moe.cu", Twin: "FusedMoE"},
		{Name: "moe_down", Source: "moe.cu", Twin: "FusedMoE"},
		{Name: "moe_sum", Source: "moe.cu", Twin: "FusedMoE"},
		{Name: "add_rmsnorm", Source: "norm.cu", Twin: "AddRMSNorm", PDL: true},
		{Name: "qk_norm", Source: "norm.cu", Twin: "QKNorm", PDL: true},
		{Name: "attn_prefill4", Source: "paged_attention.cu", Twin: "AttentionPaged", HeadDims: SupportedHeadDims, Op: OpAttnPrefill, Version: 4, PDL: true},
		{Name: "attn_decode6", Source: "paged_attention.cu", Twin: "AttentionPaged", HeadDims: SupportedHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 6, PDL: true},
		{Name: "attn_prefill5", Source: "paged_attention.cu", Twin: "AttentionPagedFP8", HeadDims: SupportedHeadDims, Op: OpAttnPrefill, Version: 5, PDL: true},
		{Name: "attn_decode7", Source: "paged_attention.cu", Twin: "AttentionPagedFP8", HeadDims: SupportedHeadDims, Groups: Decode2Groups, Op: OpAttnDecode, Version: 7, PDL: true},
		{Name: "rope_kv_write", Source: "rope.cu", Twin: "RopeKVWrite", Op: OpRope, Version: 1, PDL: true},
		{Name: "rope_kv_write2", Source: "rope.cu", Twin: "RopeKVWrite", Op: OpRope, Version: 2, PDL: true},
		{Name: "rope_kv_write3", Source: "rope.cu", Twin: "RopeKVWritePaged", Op: OpRope, Version: 3, PDL: true},
		{Name: "rope_kv_write4", Source: "rope.cu", Twin: "RopeKVWritePagedFP8", Op: OpRope, Version: 4, PDL: true},
		{Name: "argmax", Source: "sample.cu", Twin: "Argmax", Op: OpArgmax, Version: 1, PDL: true},
		{Name: "argmax2_partial", Source: "sample.cu", Twin: "Argmax", Op: OpArgmax, Version: 2, PDL: true},
		{Name: "argmax2_final", Source: "sample.cu", Twin: "Argmax", Op: OpArgmax, Version: 2, PDL: true},
		{Name: "argmax_keys", Source: "tp.cu", Twin: "ArgmaxKeys", PDL: true},
		{Name: "key_index", Source: "tp.cu", Twin: "KeyIndex", PDL: true},
	}
}

// EntryPoints are the family's extern "C" names.
func (f Family) EntryPoints() []string {
	if len(f.HeadDims) == 0 {
		return []string{f.Name}
	}
	var names []string
	for _, d := range f.HeadDims {
		if len(f.Groups) == 0 {
			names = append(names, EntryPoint(f.Name, d))
			continue
		}
		for _, g := range f.Groups {
			names = append(names, GroupEntryPoint(f.Name, d, g))
		}
	}
	return names
}

// GroupEntryPoint is the entry point of family name built for headDim and
// a bound g on query heads per kv head (attn_decode2, 128, 4 → attn_decode2_d128_g4).
func GroupEntryPoint(name string, headDim, g int) string {
	return fmt.Sprintf("%s_d%d_g%d", name, headDim, g)
}

// EntryPoint is the entry point of family name built for headDim
// (attn_prefill, 128 → attn_prefill_d128).
func EntryPoint(name string, headDim int) string { return fmt.Sprintf("%s_d%d", name, headDim) }

// EntryPointSources maps every entry point to its source file.
func EntryPointSources() map[string]string {
	out := map[string]string{}
	for _, f := range Families() {
		for _, e := range f.EntryPoints() {
			out[e] = f.Source
		}
	}
	return out
}

// Launch constants the Go launch code and the sources share; a test reads
// each one back from the .cu text.
const (
	// DecodeThreads is attn_decode_split's block size (its __launch_bounds__).
	DecodeThreads = 128
	// PrefillThreads, PrefillQueryTile and PrefillKeyTile are attn_prefill's
	// block size and tile (PF_THREADS, PF_BQ and PF_BK in attention.cu).
	PrefillThreads   = 256
	PrefillQueryTile = 64
	PrefillKeyTile   = 32
	// RopeMaxHeadDim is the largest head dimension rope_kv_write's cos/sin
	// tables hold (cos_s[RopeMaxHeadDim/2]).
	RopeMaxHeadDim = 256
	// QKNormWarps is qk_norm's warps per block (QK_NORM_WARPS), one
	// (token, head) each.
	QKNormWarps = 4
	// RopeThreads is rope_kv_write's block size.
	RopeThreads = 128
	// MaxReduceThreads is the largest block the block reductions serve:
	// one scratch float per warp, 32 of them (block_sum, argmax).
	MaxReduceThreads = 1024
	// ArgmaxThreads is argmax's block size.
	ArgmaxThreads = 512
	// GridStrideThreads is the block size of the grid-stride kernels
	// (silu_mul, fill_dummy, add_i32 at most).
	GridStrideThreads = 256
	// FP8Threads is the block size of every fp8.cu kernel (FP8_THREADS),
	// FP8Partials the most blocks fp8_absmax_partial runs (FP8_PARTIALS):
	// fp8_quant_tensor's blocks each reduce that many partial maxima.
	FP8Threads  = 256
	FP8Partials = 1024
	// MoE version 1 (moe.cu): moe_topk and the GEMV kernels run
	// MoEThreads per block (a warp per token, MoERowsPerBlock outputs per
	// GEMV block); moe_align one block of MoEAlignThreads for at most
	// MoEAlignMaxExperts experts; moe_topk takes at most MoEMaxExperts.
	MoEThreads         = 128
	MoERowsPerBlock    = 8
	MoEMaxExperts      = 256
	MoEAlignThreads    = 256
	MoEAlignMaxExperts = 1024
)

// Launch choices made on the Go side only.
const (
	// DefaultSharedLimitBytes is the shared memory a block may use without
	// opting in (cuFuncSetAttribute).
	DefaultSharedLimitBytes = 48 * 1024
	// Decode attention splits the cache into chunks of
	// DecodeMinChunkKeys..DecodeMaxChunkKeys keys (a multiple of 32) so that
	// the blocks fill the GPU about DecodeBlocksPerSM times.
	DecodeMinChunkKeys = 64
	DecodeMaxChunkKeys = 256
	DecodeBlocksPerSM  = 2
	// MaxGridYZ is CUDA's limit on a grid's y and z extents.
	MaxGridYZ = 65535
	// GridStrideBlocksPerSM caps a grid-stride kernel's grid at this many
	// blocks per SM.
	GridStrideBlocksPerSM = 32
)

// PDLEntryPoints are the entry points --kernel launch=2 launches with
// programmatic stream serialization: those of the families that opt in
// (Family.PDL) whose source, and common.cu (which defines SB_PDL_WAIT), are
// the embedded files in srcs (Sources). A user's edited source (a
// --kernels-dir file that differs) is launched plain: nothing says it waits.
func PDLEntryPoints(srcs map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, f := range Families() {
		if !f.PDL || !isEmbedded(srcs, f.Source) || !isEmbedded(srcs, CommonSource) {
			continue
		}
		for _, e := range f.EntryPoints() {
			out[e] = true
		}
	}
	return out
}

// isEmbedded reports whether srcs holds the embedded text of file name.
func isEmbedded(srcs map[string]string, name string) bool {
	text, err := embeddedSources.ReadFile(name)
	return err == nil && srcs[name] == string(text)
}

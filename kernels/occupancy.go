package kernels

import (
	"fmt"
	"strings"
)

// Launch is how the launch code (runner/gpu) starts an entry point: its
// block size and dynamic shared memory. Where they depend on the shape,
// Note names the shape they are given for.
type Launch struct {
	Threads       int
	DynamicShared int
	Note          string
}

// EntryPointLaunch is the launch of a registered entry point (false for an
// entry point the registry does not know: a user's own kernel).
func EntryPointLaunch(entry string) (Launch, bool) {
	var d, g int
	switch {
	case scan(entry, "attn_decode_split_d%d", &d):
		return Launch{DecodeThreads, DecodeSharedBytes(AttnShape{Heads: 8, KVHeads: 1, HeadDim: d}, DecodeMaxChunkKeys), "8 query heads per kv head, 256-key chunks (the most)"}, true
	case scan(entry, "attn_prefill_tc_d%d", &d):
		return Launch{PrefillTCThreads, PrefillTCSharedBytes(d), ""}, true
	case scan(entry, "attn_prefill_d%d", &d):
		return Launch{PrefillThreads, PrefillSharedBytes(d), ""}, true
	case scan(entry, "attn_decode2_d%d_g%d", &d, &g), scan(entry, "attn_decode3_d%d_g%d", &d, &g):
		return Launch{Decode2Threads, Decode2SharedBytes(d, g), ""}, true
	case scan(entry, "attn_decode4_d%d_g%d", &d, &g), scan(entry, "attn_decode5_d%d_g%d", &d, &g):
		return Launch{Decode4Warps * 32, Decode4SharedBytes(d, g), ""}, true
	case scan(entry, "attn_prefill3_d%d", &d):
		return Launch{PrefillV3Threads, PrefillV3SharedBytes(d), ""}, true
	case scan(entry, "attn_prefill4_d%d", &d):
		return Launch{Prefill4Threads, Prefill4SharedBytes(d), ""}, true
	case scan(entry, "attn_prefill5_d%d", &d):
		return Launch{Prefill4Threads, Prefill5SharedBytes(d), ""}, true
	case scan(entry, "attn_decode6_d%d_g%d", &d, &g), scan(entry, "attn_decode7_d%d_g%d", &d, &g):
		return Launch{Decode6Warps * 32, Decode6SharedBytes(d, g), ""}, true
	}
	fixed := map[string]Launch{
		"attn_decode_combine": {128, 0, "head_dim 128"},
		"embed":               {ThreadsFor(4096/8, 256), 0, "hidden 4096"},
		"add_rmsnorm":         {ThreadsFor(4096/8, MaxReduceThreads), 0, "hidden 4096"},
		"qk_norm":             {QKNormWarps * 32, 0, ""},
		"silu_mul":            {GridStrideThreads, 0, ""},
		"moe_topk":            {MoEThreads, 0, "a warp per token"},
		"moe_align":           {MoEAlignThreads, 0, "one block"},
		"moe_gate_up":         {MoEThreads, 0, ""},
		"moe_down":            {MoEThreads, 0, ""},
		"moe_sum":             {GridStrideThreads, 0, ""},
		"fill_dummy":          {GridStrideThreads, 0, ""},
		"add_i32":             {GridStrideThreads, 0, "n >= 256"},
		"gather_last":         {256, 0, ""},
		"gather_last_ragged":  {256, 0, ""},
		"kv_advance":          {KVAdvanceThreads, 0, "batch >= 128"},
		"rope_kv_write3":      {RopeThreads, 0, ""},
		"rope_kv_write4":      {RopeThreads, 0, ""},
		"rope_kv_write":       {RopeThreads, 0, ""},
		"rope_kv_write2":      {RopeThreads, 0, ""},
		"argmax":              {ArgmaxThreads, 0, ""},
		"argmax2_partial":     {Argmax2Threads, 0, ""},
		"argmax2_final":       {32, 0, ""},
		"argmax_keys":         {ArgmaxThreads, 0, ""},
		"key_index":           {128, 0, ""},
		"gemv_t8":             {GemvThreads, 0, ""},
		"gemv_t16":            {GemvThreads, 0, ""},
		"gemv_silu_t8":        {GemvThreads, 0, ""},
		"gemv_silu_t16":       {GemvThreads, 0, ""},
		"gemv_t32":            {Gemv32Threads, 0, ""},
		"gemv_silu_t32":       {Gemv32Threads, 0, ""},
		"gemv_fp8_t8":         {GemvFP8Threads, 0, ""},
		"gemv_fp8_t16":        {GemvFP8Threads, 0, ""},
		"gemv_fp8_t32":        {GemvFP8Threads, 0, ""},
		"gemv_fp8_silu_t8":    {GemvFP8Threads, 0, ""},
		"gemv_fp8_silu_t16":   {GemvFP8Threads, 0, ""},
		"gemv_fp8_silu_t32":   {GemvFP8Threads, 0, ""},
		"gemv_res_t8":         {GemvThreads, 0, ""},
		"gemv_res_t16":        {GemvThreads, 0, ""},
		"gemv_norm_t8":        {GemvThreads, NormSharedBytes(4096), "hidden 4096"},
		"gemv_norm_t16":       {GemvThreads, NormSharedBytes(4096), "hidden 4096"},
		"gemv_silu_norm_t8":   {GemvThreads, NormSharedBytes(4096), "hidden 4096"},
		"gemv_silu_norm_t16":  {GemvThreads, NormSharedBytes(4096), "hidden 4096"},
		"fp8_absmax_partial":  {FP8Threads, 0, "tensors of 256 values or more"},
		"fp8_quant_tensor":    {FP8Threads, 0, "tensors of 256 values or more"},
		"fp8_quant_token":     {FP8Threads, 0, "rows of 2048 values or more"},
		"fp8_scale_out":       {FP8Threads, 0, "products of 256 values or more"},
	}
	l, ok := fixed[entry]
	return l, ok
}

// scan reports whether entry is exactly format with its numbers filled.
func scan(entry, format string, dst ...any) bool {
	n, err := fmt.Sscanf(entry, format, dst...)
	if err != nil || n != len(dst) {
		return false
	}
	vals := make([]any, len(dst))
	for i, p := range dst {
		vals[i] = *(p.(*int))
	}
	return fmt.Sprintf(format, vals...) == entry
}

// ArchLimits are one architecture's per-SM resources (CUDA C Programming
// Guide, "Technical Specifications per Compute Capability").
type ArchLimits struct {
	MaxThreads, MaxWarps, MaxBlocks int
	Registers                       int // 32-bit registers per SM
	RegisterGranularity             int // per warp, registers are allocated in units of this
	SharedBytes                     int // shared memory per SM available to blocks
	ReservedSharedPerBlock          int // the system's share of each block
}

// LimitsOf is arch's limits (80 for sm_80), false for one not tabulated.
func LimitsOf(arch int) (ArchLimits, bool) {
	l := map[int]ArchLimits{
		80:  {2048, 64, 32, 65536, 256, 164 * 1024, 1024},
		86:  {1536, 48, 16, 65536, 256, 100 * 1024, 1024},
		87:  {2048, 64, 32, 65536, 256, 164 * 1024, 1024},
		89:  {1536, 48, 24, 65536, 256, 100 * 1024, 1024},
		90:  {2048, 64, 32, 65536, 256, 228 * 1024, 1024},
		100: {2048, 64, 32, 65536, 256, 228 * 1024, 1024},
		120: {1536, 48, 32, 65536, 256, 100 * 1024, 1024},
	}[arch]
	return l, l.MaxThreads > 0
}

// Occupancy is how many blocks of a kernel one SM holds at once, and what
// limits it.
type Occupancy struct {
	BlocksPerSM int
	// Percent is the resident warps over the SM's maximum.
	Percent   float64
	LimitedBy string // "blocks", "warps", "registers", "shared memory" (several: joined by "+")
}

// OccupancyOf is the blocks per SM of a kernel of threads threads using
// registers registers per thread (0: unknown, no limit) and shared bytes
// (static + dynamic) per block on an SM with limits l: the least of
//
//	l.MaxBlocks,
//	floor(l.MaxWarps / warps), warps = ceil(threads / 32),
//	floor(floor(l.Registers / ceil(registers·32 / granularity)·granularity) / warps),
//	floor(l.SharedBytes / (shared + l.ReservedSharedPerBlock)),
//
// and Percent = blocks · warps / l.MaxWarps (the CUDA occupancy calculator's
// rule, without its per-architecture register-file rounding of whole blocks).
func OccupancyOf(l ArchLimits, threads, registers, shared int) Occupancy {
	warps := CeilDiv(max(threads, 1), 32)
	limits := []struct {
		name   string
		blocks int
	}{{"blocks", l.MaxBlocks}, {"warps", l.MaxWarps / warps}}
	if registers > 0 {
		perWarp := CeilDiv(registers*32, l.RegisterGranularity) * l.RegisterGranularity
		limits = append(limits, struct {
			name   string
			blocks int
		}{"registers", l.Registers / perWarp / warps})
	}
	limits = append(limits, struct {
		name   string
		blocks int
	}{"shared memory", l.SharedBytes / (shared + l.ReservedSharedPerBlock)})
	best := limits[0].blocks
	for _, x := range limits[1:] {
		best = min(best, x.blocks)
	}
	var by []string
	for _, x := range limits {
		if x.blocks == best {
			by = append(by, x.name)
		}
	}
	return Occupancy{BlocksPerSM: best, Percent: 100 * float64(best*warps) / float64(l.MaxWarps), LimitedBy: strings.Join(by, "+")}
}

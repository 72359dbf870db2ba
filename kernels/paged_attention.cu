// paged_attention.cu — causal GQA attention of a ragged batch over a paged
// KV cache (its twin: kernels/ref/paged_attention.go, AttentionPaged).
//
// The cache of one layer is two tensors of pages, K and V, each
// [numPages][pageSize][kvHeads][D] bf16 (vLLM's FlashAttention backend,
// NHD); slot = page * pageSize + offset numbers their token rows. Sequence
// b's positions 0, 1, ... live in the pages table[b * maxPages + 0], [.. 1],
// ...: position j at slot table[b * maxPages + j / pageSize] * pageSize +
// j % pageSize. seqLens[b] is the sequence's length after this step's write;
// queryStart[b] .. queryStart[b+1]-1 are its new tokens' rows of q and out.
// New token i of a sequence with qLen new tokens sits at position
// seqLen - qLen + i and sees keys 0..that position (bottom-right causal), so
// prefill, chunked prefill over a cached context and decode are one
// semantics. The contiguous layout is PageSize = MaxSeq, one page per
// sequence (table[b] = b). Every length, table entry and start is read from
// device memory: a captured decode step replays with them updated on the
// device (kv_advance), and no launch holds a length of the step.
//
// Page sizes are any integer >= 1: a power of two is a shift and a mask
// (pageShift >= 0), any other a division. Entries of the table past a
// sequence's pages are never read (verify poisons them with page ids
// outside the pool, so a kernel that reads one faults).
//
// Versions (kernels.OpVersions): attn_prefill 4 (attn_prefill4_dD) and
// attn_decode 6 (attn_decode6_dD_gG), D 32, 64, 128, G >= heads/kvHeads in
// 1, 2, 4, 8. A run on the paged layout, or with a ragged batch on the
// contiguous one, runs them (the block table's kernels); on the contiguous
// layout's uniform batches they run when chosen (--kernel attn_prefill=4,
// attn_decode=6), through a one-page-per-sequence table the engine builds.
// The arithmetic is attn_prefill 3's and attn_decode 4's: scores on tensor
// cores (mma.sync m16n8k16 bf16, fp32 accumulation), P rounded to bf16
// before P·V (within the bf16 bound of the twin, which keeps P in fp32).
//
// D 32 rows hold 4 16-byte chunks: their swizzle is chunk ^ ((row >> 1) & 3)
// (8 consecutive rows of 64 bytes then fall in 8 distinct 16-byte bank
// groups), D >= 64 keeps attention.cu's chunk ^ (row & 7). Every offset
// trick below holds for both (pa_z is the row's XOR term).
//
// The kernel bodies are __noinline__ device templates called from extern "C"
// entry points, as in attention.cu (NVRTC 11.8 cannot name template
// kernels, and crashes inlining them for sm_90 with -lineinfo).
//
// Napkin math at Llama-3-8B (32 heads, 8 kv heads, D 128), per layer;
// peaks H100 SXM 3.35 TB/s, H200 4.8 TB/s, 989 TFLOP/s bf16 dense (the cost
// model's): a key costs 2 x 8 x 128 x 2 B = 4 KB of K and V and 4 x 32 x
// 128 = 16.4 kFLOP per query row.
//  - decode, batch 32, 1k keys each (32k keys): 134 MB of K/V, 0.5 GFLOP:
//    floor 40 us (H100) / 28 us (H200) per layer, 1.28 / 0.89 ms per step.
//    The block table adds 4 B per 16 keys and kv head read (pages of 16:
//    64 KB per layer, 0.05%, from L2), seq_lens 128 B per warp (L2).
//  - decode, batch 32, lengths spread over 200..8000 (the issue's step,
//    about 131k keys): 537 MB, floor 160 / 112 us per layer, 5.1 / 3.6 ms
//    per step; attn_decode 6's chunk is then about 4k keys (131k / 33
//    chunks per kv head on 132 SMs): the 8000-token sequences take 2
//    blocks, the 200-token ones 1, no block more than 4,032 keys (2 MB of
//    one kv head's K and V, 1/33 of its keys), about 48 items per kv head:
//    384 blocks over the 264 slots of 2 per SM.
//  - prefill, 4 prompts of 1k tokens: 4 x 8.6 GFLOP = 34 GFLOP, floor 35
//    us per layer at the tensor-core peak; the table's reads are 8 entries
//    per warp and 64-key tile (256 B per tile against 32 KB of K/V).

// ---- shared helpers ----

// Dynamic shared memory, 16-byte aligned: cp.async and ldmatrix move
// 16-byte rows.
extern __shared__ __align__(16) float dyn_smem[];

// pa_z is the XOR term of row's swizzle in a tile of D/8 chunks per row.
template <int D>
__device__ __forceinline__ int pa_z(int row) {
    return D >= 64 ? (row & 7) : ((row >> 1) & 3);
}

// pa_chunk is the swizzled 16-byte chunk index of (row, chunk).
template <int D>
__device__ __forceinline__ int pa_chunk(int row, int chunk) {
    return row * (D / 8) + (chunk ^ pa_z<D>(row));
}

// pa_slot is the cache slot of position j of the sequence whose block
// table row is tab (a 64-bit value: a poisoned page id times the page size
// must not wrap into the pool).
__device__ __forceinline__ long long pa_slot(const int* __restrict__ tab, int j, int pageSize, int pageShift) {
    if (pageShift >= 0) {
        return ((long long)__ldg(tab + (j >> pageShift)) << pageShift) + (j & (pageSize - 1));
    }
    const int page = j / pageSize;
    return (long long)__ldg(tab + page) * pageSize + (j - page * pageSize);
}

// pa_cp_async16 starts the 16-byte copy of src to shared memory at dst
// (whose shared-window address is dst_addr) when full, else fills dst with
// zeros (cp.async's src-size 0: src is not read, but must be an address of
// the allocation): one instruction either way, no branch around a copy.
__device__ __forceinline__ void pa_cp_async16(void* dst, unsigned dst_addr, const void* src, bool full) {
#ifdef __SBEMU__
    (void)dst_addr;
    if (full) {
        cp_async16(dst, src);
    } else {
        *(u32x4*)dst = u32x4{0, 0, 0, 0};
    }
#else
    (void)dst;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_addr), "l"(src), "r"(full ? 16 : 0));
#endif
}

// pa_ldsm_x4 / pa_ldsm_x4_trans: ldmatrix from a tile at a byte offset (the
// tile's shared-window address computed once by the caller).
__device__ __forceinline__ void pa_ldsm_x4(unsigned r[4], const unsigned short* tile, unsigned tile_addr,
                                           unsigned off) {
#ifdef __SBEMU__
    (void)tile_addr;
    ldmatrix_x4(r, (const char*)tile + off);
#else
    (void)tile;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tile_addr + off));
#endif
}

__device__ __forceinline__ void pa_ldsm_x4_trans(unsigned r[4], const unsigned short* tile, unsigned tile_addr,
                                                 unsigned off) {
#ifdef __SBEMU__
    (void)tile_addr;
    ldmatrix_x4_trans(r, (const char*)tile + off);
#else
    (void)tile;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tile_addr + off));
#endif
}

// ---- attn_prefill 4: varlen prefill over the pages ----
//
// attn_prefill 3 (attention.cu) with the sequence's rows and keys found
// through query_start_loc, seq_lens and the block table. Block (query tile,
// head, sequence), 8 warps, 128 query rows of one head of one sequence (16
// per warp); the grid's x is sized from the step's most new tokens (prefill
// is never captured) and a sequence's tiles past its own rows exit at once;
// its heaviest (last) tile is launched first. 64-key K/V tiles stream
// through shared memory by cp.async, double-buffered: a thread copies
// chunk column ch of rows row0 + i * (256 / (D/8)) of each tile, whose
// slots are computed one tile ahead of the copy (pf4_rows: 8 lanes of a
// warp load the table entries of the warp's 8 rows of a tile, and every
// thread takes its own rows' by __shfl_sync): the table loads of tile t+2
// are issued while tile t is used, so their latency never sits between a
// tile's barrier and its copy. Keys past the tile's last live key are
// zero-filled by cp.async's src-size 0 (never read: no slot of them is
// formed from the table).
//
// Evidence without a GPU: ptxas (NVRTC 11.8) attn_prefill4_d128 195
// registers on sm_90 and sm_80 (version 3: 174 / 178; one 256-thread block
// per SM either way: 96 KB of shared memory), _d64 126 / 128, _d32 118; 0
// spills. SASS (sm_90, d128): the key loop per warp and 64-key tile is 971
// static instructions (version 3: 945), 128 HMMA, 72 LDSM, 8 LDGSTS, 3 LDG
// (the table, a lane in 4 of a warp), about 30 of the division for a page
// size that is not a power of two: on pages of 16 the issued count is
// version 3's. ESTIMATE: the prefill runs at version 3's rate (issue 19's
// 350-500 TFLOP/s at 1 x 8192 on an H100/H200) on any layout; a ragged
// batch's tiles past a sequence's rows exit at once (grid x sized by the
// longest prompt: at most one wave of empty blocks of the short ones).

#define PF4_BQ 128
#define PF4_BK 64
#define PF4_THREADS 256

// pf4_plan is one thread's share of copying a 64-row tile (attention.cu's
// fa3_plan): chunks in column ch of rows row0 + i * ROWS_PER_STEP, whose
// swizzle term is row0's.
template <int D>
struct pf4_plan {
    static constexpr int CPT = PF4_BK * (D / 8) / PF4_THREADS;  // chunks per thread
    static constexpr int ROWS_PER_STEP = PF4_THREADS / (D / 8);
    int row0;
    unsigned smem_off;  // bytes, chunk 0's
    int col;            // elements within a cache row: the kv head's column of chunk ch
};

template <int D>
__device__ __forceinline__ pf4_plan<D> pf4_make_plan(int kvh) {
    pf4_plan<D> p;
    const int ch = threadIdx.x % (D / 8);
    p.row0 = threadIdx.x / (D / 8);
    p.smem_off = (unsigned)(p.row0 * (D / 8) + (ch ^ pa_z<D>(p.row0))) * 16;
    p.col = kvh * D + ch * 8;
    return p;
}

// pf4_rows computes the element offsets in a cache of the plan's rows of
// the tile at key k0 (slot * kvHeads * D + the chunk's column; K's and V's
// alike); rows at or past keys get the column alone (never copied). A
// warp's threads copy 8 distinct rows of a tile (32 / (D/8) per step, CPT
// steps): lane l < 8 computes one row's slot, one table load, and every
// thread takes its rows' by __shfl_sync.
template <int D>
__device__ __forceinline__ void pf4_rows(long long at[pf4_plan<D>::CPT], const pf4_plan<D>& p,
                                         const int* __restrict__ tab, int k0, int keys, long long pos_stride,
                                         int pageSize, int pageShift) {
    constexpr int LPR = D / 8, RPW = 32 / LPR;  // lanes per row, a warp's rows per step
    static_assert(RPW * pf4_plan<D>::CPT == 8, "a warp copies 8 rows of a tile");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = k0 + warp * RPW + lane % RPW + (lane / RPW) * pf4_plan<D>::ROWS_PER_STEP;
    const long long mine = lane < 8 && j < keys ? pa_slot(tab, j, pageSize, pageShift) * pos_stride : 0;
#pragma unroll
    for (int i = 0; i < pf4_plan<D>::CPT; i++) at[i] = __shfl_sync(0xffffffffu, mine, i * RPW + lane / LPR) + p.col;
}

// pf4_load_tile starts one tile's copy: the plan's rows below valid from
// their offsets, the rest zero-filled.
template <int D>
__device__ __forceinline__ void pf4_load_tile(unsigned short* dst, unsigned dst_addr,
                                              const unsigned short* __restrict__ cache, const pf4_plan<D>& p,
                                              const long long at[pf4_plan<D>::CPT], int valid) {
    constexpr int STEP_BYTES = pf4_plan<D>::ROWS_PER_STEP * D * 2;
    char* d = (char*)dst + p.smem_off;
    const unsigned a = dst_addr + p.smem_off;
#pragma unroll
    for (int i = 0; i < pf4_plan<D>::CPT; i++) {
        const bool full = p.row0 + i * pf4_plan<D>::ROWS_PER_STEP < valid;
        pa_cp_async16(d + i * STEP_BYTES, a + i * STEP_BYTES, cache + at[i], full);
    }
}

// pf4_tile adds one 64-key tile to a warp's 16 rows: attention.cu's
// fa3_tile (S = Q·Kᵀ, the causal mask on the diagonal, the online softmax,
// O += P·V), op for op.
template <int D>
__device__ __forceinline__ void pf4_tile(float o[D / 8][4], float& m0, float& m1, float& l0, float& l1,
                                         const unsigned qa[D / 16][4], const unsigned short* kt, unsigned kt_addr,
                                         const unsigned short* vt, unsigned vt_addr, unsigned k_base,
                                         unsigned v_base, int k0, int qpos0, int qpos1, int t, float scale_log2) {
    float s[PF4_BK / 8][4];
#pragma unroll
    for (int j = 0; j < PF4_BK / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const unsigned off = k_base ^ (32u * kk);
#pragma unroll
        for (int j = 0; j < PF4_BK / 8; j += 2) {
            unsigned kb[4];
            pa_ldsm_x4(kb, kt, kt_addr, off + 16u * j * D);
            mma_m16n8k16_bf16(s[j], qa[kk], kb, s[j]);
            mma_m16n8k16_bf16(s[j + 1], qa[kk], kb + 2, s[j + 1]);
        }
    }
    if (k0 + PF4_BK - 1 <= qpos0) {
#pragma unroll
        for (int j = 0; j < PF4_BK / 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) s[j][i] *= scale_log2;
        }
    } else {
#pragma unroll
        for (int j = 0; j < PF4_BK / 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = k0 + j * 8 + 2 * t + (i & 1);
                const int qpos = i < 2 ? qpos0 : qpos1;
                s[j][i] = key <= qpos ? s[j][i] * scale_log2 : neg_inf_f32();
            }
        }
    }
    float mx0 = neg_inf_f32(), mx1 = neg_inf_f32();
#pragma unroll
    for (int j = 0; j < PF4_BK / 8; j++) {
        mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    unsigned pa[PF4_BK / 16][4];
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < PF4_BK / 16; kk++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int j = 2 * kk + half;
            const unsigned p0 = pack_bf16x2_rn(exp2f(s[j][0] - mn0), exp2f(s[j][1] - mn0));
            const unsigned p1 = pack_bf16x2_rn(exp2f(s[j][2] - mn1), exp2f(s[j][3] - mn1));
            pa[kk][2 * half] = p0;
            pa[kk][2 * half + 1] = p1;
            sum0 += __uint_as_float(p0 << 16) + __uint_as_float(p0 & 0xffff0000u);
            sum1 += __uint_as_float(p1 << 16) + __uint_as_float(p1 & 0xffff0000u);
        }
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
    if (__any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= alpha0;
            o[i][1] *= alpha0;
            o[i][2] *= alpha1;
            o[i][3] *= alpha1;
        }
    }
#pragma unroll
    for (int nb = 0; nb < D / 8; nb += 2) {
        const unsigned off = v_base ^ (16u * nb);
#pragma unroll
        for (int kk = 0; kk < PF4_BK / 16; kk++) {
            unsigned vb[4];
            pa_ldsm_x4_trans(vb, vt, vt_addr, off + 32u * kk * D);
            mma_m16n8k16_bf16(o[nb], pa[kk], vb, o[nb]);
            mma_m16n8k16_bf16(o[nb + 1], pa[kk], vb + 2, o[nb + 1]);
        }
    }
}

// pf4_load_q starts the copy of the tile's query rows (rows past rows_here
// zero) into qs.
template <int D>
__device__ __forceinline__ void pf4_load_q(unsigned short* qs, const unsigned short* __restrict__ qsrc,
                                           long long q_stride, int rows_here) {
    for (int c = threadIdx.x; c < PF4_BQ * (D / 8); c += PF4_THREADS) {
        const int row = c / (D / 8), ch = c - row * (D / 8);
        u32x4* d = (u32x4*)qs + pa_chunk<D>(row, ch);
        if (row < rows_here) {
            cp_async16(d, qsrc + row * q_stride + ch * 8);
        } else {
            *d = u32x4{0, 0, 0, 0};
        }
    }
}

// pf4_store writes a warp's two rows per thread, normalised, as bf16 pairs
// (an FP8 cache's: times the V scale).
template <int D, int FMT = KV_BF16>
__device__ __forceinline__ void pf4_store(unsigned short* __restrict__ out_rows, long long q_stride, int r0,
                                          int rows_here, const float o[D / 8][4], float l0, float l1, int t,
                                          float vscale = 1.0f) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = FMT == KV_BF16 ? 1.0f / l0 : vscale / l0, inv1 = FMT == KV_BF16 ? 1.0f / l1 : vscale / l1;
    const int r1 = r0 + 8;
    if (r0 < rows_here) {
        unsigned* dst = (unsigned*)(out_rows + r0 * q_stride);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][0] * inv0, o[nb][1] * inv0);
    }
    if (r1 < rows_here) {
        unsigned* dst = (unsigned*)(out_rows + r1 * q_stride);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][2] * inv1, o[nb][3] * inv1);
    }
}

// pf5_*: attn_prefill 5's copy of an FP8 tile (64 rows of D bytes, 16-byte
// chunks c = tid + 256 i: row c / (D/16), chunk c % (D/16)) into a byte
// staging tile by cp.async, and its widening into version 4's bf16 tile
// (the same thread: no barrier between) before the tile's barrier.
template <int D>
struct pf5_plan {
    static constexpr int CH = PF4_BK * (D / 16);                         // chunks per tile
    static constexpr int CPT = (CH + PF4_THREADS - 1) / PF4_THREADS;  // per thread (a thread may have none)
};

// pf5_rows is pf4_rows for the FP8 plan: each chunk's byte offset in a
// cache (its row's slot times the row's bytes, plus the kv head's column
// and the chunk's), the table read by the thread itself.
template <int D>
__device__ __forceinline__ void pf5_rows(long long at[pf5_plan<D>::CPT], const int* __restrict__ tab, int kvh, int k0,
                                         int keys, long long pos_stride, int pageSize, int pageShift) {
#pragma unroll
    for (int i = 0; i < pf5_plan<D>::CPT; i++) {
        const int c = threadIdx.x + PF4_THREADS * i, row = c / (D / 16), f = c % (D / 16);
        const int j = k0 + row;
        at[i] = (c < pf5_plan<D>::CH && j < keys ? pa_slot(tab, j, pageSize, pageShift) * pos_stride : 0) +
                kvh * D + 16 * f;
    }
}

template <int D>
__device__ __forceinline__ void pf5_load_tile(unsigned char* stage, unsigned stage_addr,
                                              const unsigned char* __restrict__ cache,
                                              const long long at[pf5_plan<D>::CPT], int valid) {
#pragma unroll
    for (int i = 0; i < pf5_plan<D>::CPT; i++) {
        const int c = threadIdx.x + PF4_THREADS * i;
        if (c < pf5_plan<D>::CH) {
            const int row = c / (D / 16);
            pa_cp_async16(stage + 16 * c, stage_addr + 16u * c, cache + at[i], row < valid);
        }
    }
}

template <int D, int FMT>
__device__ __forceinline__ void pf5_widen(unsigned short* tile, const unsigned char* stage) {
#pragma unroll
    for (int i = 0; i < pf5_plan<D>::CPT; i++) {
        const int c = threadIdx.x + PF4_THREADS * i, row = c / (D / 16), f = c % (D / 16);
        if (c < pf5_plan<D>::CH) {
            const u32x4 x = ((const u32x4*)stage)[c];
            u32x4 a, b;
            kv_fp8x4_to_bf16<FMT>(x.x, a.x, a.y);
            kv_fp8x4_to_bf16<FMT>(x.y, a.z, a.w);
            kv_fp8x4_to_bf16<FMT>(x.z, b.x, b.y);
            kv_fp8x4_to_bf16<FMT>(x.w, b.z, b.w);
            ((u32x4*)tile)[pa_chunk<D>(row, 2 * f)] = a;
            ((u32x4*)tile)[pa_chunk<D>(row, 2 * f + 1)] = b;
        }
    }
}

template <int D, int FMT>
__device__ __noinline__ void attn_prefill4(unsigned short* __restrict__ out, const unsigned short* __restrict__ q,
                                           const void* __restrict__ kCache_, const void* __restrict__ vCache_,
                                           const int* __restrict__ table, const int* __restrict__ seqLens,
                                           const int* __restrict__ queryStart, int heads, int kvHeads,
                                           int pageSize, int pageShift, int maxPages,
                                           const float* __restrict__ kScale, const float* __restrict__ vScale) {
    unsigned short* qs = (unsigned short*)dyn_smem;  // [PF4_BQ][D]
    unsigned short* ks = qs + PF4_BQ * D;            // [2][PF4_BK][D]
    unsigned short* vs = ks + 2 * PF4_BK * D;        // [2][PF4_BK][D]
    constexpr int TILE = PF4_BK * D;                 // elements of one K or V tile
    constexpr int CPT = FMT == KV_BF16 ? pf4_plan<D>::CPT : pf5_plan<D>::CPT;
    // An FP8 cache's byte tiles (attn_prefill 5): [2][PF4_BK][D] each, after vs.
    unsigned char* k8 = (unsigned char*)(vs + 2 * PF4_BK * D);
    unsigned char* v8 = k8 + 2 * TILE;
    const unsigned short* kCache = (const unsigned short*)kCache_;
    const unsigned short* vCache = (const unsigned short*)vCache_;
    const unsigned char* kCache8 = (const unsigned char*)kCache_;
    const unsigned char* vCache8 = (const unsigned char*)vCache_;

    const int h = blockIdx.y, b = blockIdx.z;
    const int row_start = queryStart[b];
    const int q_len = queryStart[b + 1] - row_start;
    const int seq_len = min(seqLens[b], maxPages * pageSize);
    const int qtiles = (q_len + PF4_BQ - 1) / PF4_BQ;
    if ((int)blockIdx.x >= qtiles) return;             // uniform: this sequence has fewer tiles
    const int q0 = (qtiles - 1 - (int)blockIdx.x) * PF4_BQ;  // heavy (late) tiles first
    const int ctx = seq_len - q_len;                   // the tokens cached before this step's
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, r8 = lane & 7;
    const int kvh = h / (heads / kvHeads);
    const int rows_here = min(PF4_BQ, q_len - q0);
    const int keys_here = min(ctx + q0 + rows_here, seq_len);
    const int ntiles = (keys_here + PF4_BK - 1) / PF4_BK;
    const long long pos_stride = (long long)kvHeads * D;
    const long long q_stride = (long long)heads * D;
    const int* tab = table + (long long)b * maxPages;
    // An FP8 cache's K scale folds into the softmax scale, its V scale
    // multiplies the output (ref.AttentionPagedFP8).
    const float scale_log2 =
        FMT == KV_BF16 ? 1.4426950408889634f / sqrtf((float)D) : 1.4426950408889634f / sqrtf((float)D) * kScale[kvh];
    const pf4_plan<D> plan = pf4_make_plan<D>(kvh);

    // Q tile, then K/V tile 0: one group. at holds the plan's rows'
    // offsets in the next tile to copy.
    pf4_load_q<D>(qs, q + ((long long)row_start + q0) * q_stride + (long long)h * D, q_stride, rows_here);
    long long at[CPT];
    const unsigned ks_addr = smem_addr(ks), vs_addr = smem_addr(vs);
    const unsigned k8_addr = smem_addr(k8), v8_addr = smem_addr(v8);
    if constexpr (FMT == KV_BF16) {
        pf4_rows<D>(at, plan, tab, 0, keys_here, pos_stride, pageSize, pageShift);
        pf4_load_tile<D>(ks, ks_addr, kCache, plan, at, min(PF4_BK, keys_here));
        pf4_load_tile<D>(vs, vs_addr, vCache, plan, at, min(PF4_BK, keys_here));
        cp_async_commit();
        pf4_rows<D>(at, plan, tab, PF4_BK, keys_here, pos_stride, pageSize, pageShift);
    } else {
        pf5_rows<D>(at, tab, kvh, 0, keys_here, pos_stride, pageSize, pageShift);
        pf5_load_tile<D>(k8, k8_addr, kCache8, at, min(PF4_BK, keys_here));
        pf5_load_tile<D>(v8, v8_addr, vCache8, at, min(PF4_BK, keys_here));
        cp_async_commit();
        pf5_rows<D>(at, tab, kvh, PF4_BK, keys_here, pos_stride, pageSize, pageShift);
    }

    // This thread's two rows; rows past q_len act as the last real row so
    // that none is ever fully masked.
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    const int qpos0 = ctx + q0 + min(r0, rows_here - 1);
    const int qpos1 = ctx + q0 + min(r1, rows_here - 1);
    const int warp_last = ctx + q0 + min(warp * 16 + 15, rows_here - 1);
    const int z = pa_z<D>(r8);
    const unsigned k_base = (unsigned)((8 * (lane >> 4) + r8) * D * 2) + 16u * (unsigned)(((lane >> 3) & 1) ^ z);
    const unsigned v_base = (unsigned)((8 * ((lane >> 3) & 1) + r8) * D * 2) + 16u * (unsigned)((lane >> 4) ^ z);

    unsigned qa[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = neg_inf_f32(), m1 = neg_inf_f32(), l0 = 0.0f, l1 = 0.0f;

    for (int tile = 0; tile < ntiles; tile++) {
        const int k0 = tile * PF4_BK;
        if (tile + 1 < ntiles) {
            const int nb = (tile + 1) & 1;
            const int valid = min(PF4_BK, keys_here - (k0 + PF4_BK));
            if constexpr (FMT == KV_BF16) {
                pf4_load_tile<D>(ks + nb * TILE, ks_addr + nb * TILE * 2, kCache, plan, at, valid);
                pf4_load_tile<D>(vs + nb * TILE, vs_addr + nb * TILE * 2, vCache, plan, at, valid);
                cp_async_commit();
                pf4_rows<D>(at, plan, tab, k0 + 2 * PF4_BK, keys_here, pos_stride, pageSize, pageShift);
            } else {
                pf5_load_tile<D>(k8 + nb * TILE, k8_addr + nb * TILE, kCache8, at, valid);
                pf5_load_tile<D>(v8 + nb * TILE, v8_addr + nb * TILE, vCache8, at, valid);
                cp_async_commit();
                pf5_rows<D>(at, tab, kvh, k0 + 2 * PF4_BK, keys_here, pos_stride, pageSize, pageShift);
            }
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        if constexpr (FMT != KV_BF16) {
            // This thread's chunks of tile `tile` have landed: widen them
            // into the bf16 tiles (last read at tile - 2, before the barrier
            // that ended tile - 1).
            pf5_widen<D, FMT>(ks + (tile & 1) * TILE, k8 + (tile & 1) * TILE);
            pf5_widen<D, FMT>(vs + (tile & 1) * TILE, v8 + (tile & 1) * TILE);
        }
        __syncthreads();  // tile `tile` has landed (and been widened) for every thread
        if (tile == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                ldmatrix_x4(qa[kk], qs + pa_chunk<D>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)) * 8);
            }
        }
        const unsigned short* kt = ks + (tile & 1) * TILE;
        const unsigned short* vt = vs + (tile & 1) * TILE;
        const unsigned kt_addr = ks_addr + (tile & 1) * TILE * 2, vt_addr = vs_addr + (tile & 1) * TILE * 2;
        if (k0 <= warp_last) {  // else every key of the tile is past this warp's rows
            pf4_tile<D>(o, m0, m1, l0, l1, qa, kt, kt_addr, vt, vt_addr, k_base, v_base, k0, qpos0, qpos1, t,
                        scale_log2);
        }
        __syncthreads();  // every warp is done with tile `tile`: the next prefetch may refill it
        smem_retire(kt, TILE * 2);
        smem_retire(vt, TILE * 2);
        if constexpr (FMT != KV_BF16) {
            smem_retire(k8 + (tile & 1) * TILE, TILE);
            smem_retire(v8 + (tile & 1) * TILE, TILE);
        }
    }
    pf4_store<D, FMT>(out + ((long long)row_start + q0) * q_stride + (long long)h * D, q_stride, r0, rows_here, o,
                      l0, l1, t, FMT == KV_BF16 ? 1.0f : vScale[kvh]);
}

#define DEFINE_PREFILL4(D)                                                                                      \
    extern "C" __global__ void __launch_bounds__(PF4_THREADS) attn_prefill4_d##D(                               \
        unsigned short* out, const unsigned short* q, const unsigned short* kCache, const unsigned short* vCache, \
        const int* table, const int* seqLens, const int* queryStart, int heads, int kvHeads, int pageSize,      \
        int pageShift, int maxPages) {                                                                          \
        SB_PDL_WAIT();                                                                                          \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                             \
        attn_prefill4<D, KV_BF16>(out, q, kCache, vCache, table, seqLens, queryStart, heads, kvHeads, pageSize, \
                                  pageShift, maxPages, nullptr, nullptr);                                       \
    }
DEFINE_PREFILL4(32)
DEFINE_PREFILL4(64)
DEFINE_PREFILL4(128)

// ---- attn_prefill 5: attn_prefill 4 over an FP8 cache ----
//
// attn_prefill 4's code (templated on the cache's format) with each 64-key
// tile's K and V bytes copied by cp.async into byte staging tiles
// (double-buffered as version 4's tiles: [2][64][D] bytes each, 32 KB more
// shared memory at D 128: 128 KB, one block per SM as version 4), each
// thread widening the chunks it copied (kv_fp8x4_to_bf16, exact) into
// version 4's bf16 tiles after its cp.async wait and before the tile's
// barrier: no barrier added, the tensor-core loop unchanged. The K scale
// folds into the softmax scale, the V scale multiplies the output.
//
// Napkin math (ESTIMATE): compute-bound as version 4 (a 1k-token prompt
// at Llama-3-8B: 8.6 GFLOP per layer and sequence against 8 MB of K/V in
// FP8); the widening adds per tile and thread 2 x 2 x (4 x 8 + 2 STS.128)
// = 136 instructions to version 4's ~970 per warp and tile (8 warps:
// about 14% more issue on the non-tensor pipes, beside 128 HMMA per warp
// and tile; ESTIMATE 5-10% slower than version 4 at the same keys, on a
// GPU to be measured). The table is read per chunk by the thread that
// copies it (pf5_rows): one L1-resident load per 16-byte chunk, a tile
// ahead of its copy. ptxas (NVRTC 11.8): attn_prefill5_d128 201 registers
// on sm_90 and sm_80 (version 4: 195), _d64 128, _d32 120; 0 spills; one
// 256-thread block per SM at d128 (registers and 128 KB of shared memory).
#define DEFINE_PREFILL5(D)                                                                                      \
    extern "C" __global__ void __launch_bounds__(PF4_THREADS) attn_prefill5_d##D(                               \
        unsigned short* out, const unsigned short* q, const unsigned char* kCache, const unsigned char* vCache,   \
        const int* table, const int* seqLens, const int* queryStart, int heads, int kvHeads, int pageSize,      \
        int pageShift, int maxPages, const float* kScale, const float* vScale, int e5m2) {                      \
        SB_PDL_WAIT();                                                                                          \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                             \
        if (e5m2) {                                                                                             \
            attn_prefill4<D, KV_E5M2>(out, q, kCache, vCache, table, seqLens, queryStart, heads, kvHeads,       \
                                      pageSize, pageShift, maxPages, kScale, vScale);                           \
        } else {                                                                                                \
            attn_prefill4<D, KV_E4M3>(out, q, kCache, vCache, table, seqLens, queryStart, heads, kvHeads,       \
                                      pageSize, pageShift, maxPages, kScale, vScale);                           \
        }                                                                                                       \
    }
DEFINE_PREFILL5(32)
DEFINE_PREFILL5(64)
DEFINE_PREFILL5(128)

// ---- attn_decode 6: paged flash-decoding, the split set on the device ----
//
// attn_decode 4's tensor-core flash-decoding (the kv head's query heads as
// the rows of mma.m16n8k16, K straight from global memory into fragments,
// V through a warp-private shared tile and ldmatrix.trans, the combine
// fused into the last block of each (sequence, kv head)) over the pages,
// with the work split by the lengths on the device.
//
// The split: every block reads seq_lens (batch ints, from L2), sums them
// into the step's total keys and sets one chunk for the launch,
//   chunk = max(64, 64 * ceil(ceil(total / target) / 64)),
// target = ceil(2 * SMs / kvHeads) chunks per kv head (host-side, from the
// GPU and the model only). Sequence b takes splits_b = ceil(len_b / chunk)
// chunks, one block each: a long sequence many, a short one one, and no
// block more than chunk keys, about total / target. The (sequence, split)
// items of the batch are numbered in sequence order; block x of kv head y
// takes item x, blocks past the last item exit. Since chunk >= total /
// target, the items number fewer than target + batch whatever the lengths:
// the grid (target + batch, kvHeads) holds every step of a run, a captured
// step replays at any lengths up to the table's capacity with no value of
// the step in its launch, and at most batch + target blocks per kv head
// exit without work. (attn_decode 4's grid is sized by the cache's length
// and its chunk by the batch's maximum: a batch of one 8k sequence and 31
// of 200 tokens gets 2 blocks of 4k keys for the long one; here 19 of 432.)
//
// The keys: warp w takes the 16-key sub-tiles w, w + 4, ... of its block's
// chunk (a multiple of 64: every sub-tile starts at a multiple of 16). Its
// lanes hold the slot of one key each: for a page size that is a multiple
// of 16 a sub-tile lies in one page (slot of key kb0 + r = slot(kb0) + r:
// every lane computes slot(kb0), one broadcast table load); for any other
// (1, or one that does not divide 16) lane r < 16 computes key kb0 + r's
// and the K rows and V rows take theirs by __shfl_sync. The next
// sub-tile's table load is issued before this one's K loads, so it never
// stands between the K loads and their address. Keys past the chunk are
// clamped (K, masked to -inf) or zero-filled (V): no slot past a
// sequence's length is ever formed from the table.
//
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas (NVRTC 11.8, -Xptxas -v): attn_decode6_d128_gG 180 registers on
//    sm_90, 192-194 on sm_80 (178 / 192 since the FP8 cache's templating,
//    whose bf16 instance it is; version 4: 176 / 184; 2 blocks of 4 warps per
//    SM either way), _d64 126 / 128, _d32 88; 0 spills, no stack; static
//    shared 80-2128 B (q of the kv head's group) beside version 4's dynamic
//    layout. __launch_bounds__(128, 1): without the 1, ptxas capped the d64
//    kernels at 96 registers on sm_80 and spilled 4 bytes.
//  - SASS (cuobjdump -sass, scripts/sass-mix), d128_g4 on sm_90: the
//    16-key sub-tile loop on pages of a multiple of 16 is 361 static
//    instructions (32 HMMA, 8 LDG.E.128 of K, 8 LDGSTS of V, 8 LDSM.T, 72
//    fp32, 6 MUFU, 3 LDG of the table and the lengths, 145 integer, 2
//    SHFL), about 30 of them the division of a page size that is not a
//    power of two, never issued on pages of 16: about 330 issued against
//    version 4's 362. The other loop (page size 1 or 24: a slot per lane)
//    is 419, 22 of them SHFL. The schedule (seq_lens summed and scanned by
//    each warp: 2 reads per 32 sequences, warp shuffles, no barrier) and
//    the q copy (one barrier) run once per block.
//  - Access counters (EMULATED, every request's sectors, no cache;
//    TestEmulatorPagedDecodeReadsNoMoreSectors), Llama-3-8B heads, 4
//    sequences of 1000 tokens: attn_decode 4 on the contiguous layout reads
//    569,408 sectors (18.2 MB; 1.110 sector bytes per byte the step needs:
//    K, V, q), attn_decode 6 on shuffled pages of 16 548,128 (17.5 MB;
//    1.068 per byte needed, the table's and lengths' counted as needed),
//    on pages of 1 550,112, on the contiguous layout's one-page table
//    547,136: V's cp.async 16 sectors per request, every byte used, K's
//    16-sector requests as version 4's; q read once per block instead of
//    once per warp saves 24.6k sectors, the table and each warp's reads of
//    seq_lens cost about 3.5k.
//  - ESTIMATE (not measured) of pages of 16 shuffled against the
//    contiguous layout, bandwidth-bound (batch 32, 1k keys, 40 / 28 us):
//    the same bytes and sectors per byte (above), the same instructions
//    per 16 keys (about 330 against 362: the issue rate, 1 of 4 per clock
//    at 4.8 TB/s, is not the bound); the extra latencies per block are
//    the schedule's read of seq_lens and the block's copy of q before the
//    first key (two L2 round trips and a barrier, about 0.4 us) and each
//    warp's first table load ahead of its first K load (0.2 us; the next
//    sub-tile's is issued a sub-tile ahead and hidden), once per block,
//    whose 16 sub-tiles per warp (one 1k sequence, one block: chunk 1,024)
//    take the whole 40 / 28 us wave: 1.5-2%; and
//    scattered 32 KB pages instead of one stripe: each page's K and V rows
//    are 256 B at a 2 KB stride as in the contiguous layout, so DRAM sees
//    the same bursts, and a page per 16 keys may miss the SM's L1 TLB where
//    a stripe misses it once per 1024 keys: an L2 TLB hit, about 0.1-0.2 us
//    of added latency on a sub-tile, hidden while the SM keeps 2 blocks x 4
//    warps x 8 KB in flight against the ~18 KB (H100) to 26 KB (H200) that
//    Little's law asks at ~1 us (0-3%). Total: 2-5% slower than attn_decode
//    4 contiguous at batch 32 (the issue's bound: 10%). At batch 1 (1k keys:
//    a latency-bound ~4 us launch) the schedule's 0.4 us is up to 10%.
//
// Workspace: item x's partial of query head h at ((x * heads + h) * D) floats,
// (max, sum) pairs after the gridDim.x * heads * D sums, then one counter
// per (sequence, kv head) (kernels.Decode6WorkspaceBytes). A sequence of one
// split writes its output directly (the combine of one partial is the
// identity: exp(0) = 1, the same bits).

#define DEC6_WARPS 4
#define DEC6_SUB 16
#define DEC6_QUANTUM (DEC6_WARPS * DEC6_SUB)

// dec6_item is a block's work: keys [j0, j1) of sequence b, split `split`
// of `splits`; b < 0 when the block has none.
struct dec6_item {
    int b, split, splits, j0, j1;
};

// decode6_schedule computes the launch's chunk from seq_lens and block
// blockIdx.x's item. Every warp computes it alone (the same chunk and
// numbering in every warp and block, warp-uniform values, no barrier):
// lane l sums and numbers the splits of sequences [l * per, (l + 1) * per)
// by a warp scan, the lane whose range holds item blockIdx.x finds its
// sequence and split, and a shuffle hands them to the warp.
__device__ __forceinline__ dec6_item decode6_schedule(const int* __restrict__ seqLens, int batch, int cap,
                                                      int target) {
    const int lane = threadIdx.x & 31;
    const int per = (batch + 31) / 32;
    const int lo = min(lane * per, batch), hi = min(lo + per, batch);
    long long total = 0;
    for (int i = lo; i < hi; i++) total += min(seqLens[i], cap);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    const long long per_chunk = (total + target - 1) / target;
    const int chunk = (int)max((long long)DEC6_QUANTUM, (per_chunk + DEC6_QUANTUM - 1) / DEC6_QUANTUM * DEC6_QUANTUM);
    int count = 0;
    for (int i = lo; i < hi; i++) count += (min(seqLens[i], cap) + chunk - 1) / chunk;
    int incl = count;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += up;
    }
    const int x = blockIdx.x;
    int first = incl - count, b = -1, split = 0;
    if (x >= first && x < first + count) {
        for (int i = lo; i < hi && b < 0; i++) {
            const int splits = (min(seqLens[i], cap) + chunk - 1) / chunk;
            if (x < first + splits) {
                b = i, split = x - first;
            }
            first += splits;
        }
    }
    const unsigned found = __ballot_sync(0xffffffffu, b >= 0);
    if (found == 0) return dec6_item{-1, 0, 0, 0, 0};  // warp-uniform
    const int src = __ffs(found) - 1;
    b = __shfl_sync(0xffffffffu, b, src);
    split = __shfl_sync(0xffffffffu, split, src);
    const int len = min(seqLens[b], cap), splits = (len + chunk - 1) / chunk;
    return dec6_item{b, split, splits, split * chunk, min(split * chunk + chunk, len)};
}

// decode6_lane_slot is the slot this lane holds for the sub-tile at kb0:
// IN_PAGE (a page size that is a multiple of 16: the sub-tile lies in one
// page, every row follows its first key) key kb0's, else key kb0 +
// (lane & 15)'s, clamped into the chunk.
template <bool IN_PAGE>
__device__ __forceinline__ long long decode6_lane_slot(const int* __restrict__ tab, int kb0, int j1, int pageSize,
                                                       int pageShift) {
    const int key = IN_PAGE ? kb0 : min(kb0 + (int)(threadIdx.x & 15), j1 - 1);
    return pa_slot(tab, key, pageSize, pageShift);
}

// decode6_row_slot is the slot of row r (< 16) of the sub-tile, from the
// lanes' slots (every lane of the warp calls it: a shuffle when the rows
// are not in one page).
template <bool IN_PAGE>
__device__ __forceinline__ long long decode6_row_slot(long long lane_slot, int r) {
    return IN_PAGE ? lane_slot + r : __shfl_sync(0xffffffffu, lane_slot, r);
}

// kv_elem is a cache element's storage: bf16 bits or an FP8 byte.
template <int FMT>
struct kv_elem {
    typedef unsigned char type;
};
template <>
struct kv_elem<KV_BF16> {
    typedef unsigned short type;
};

// attn_decode 7's K layout in the fragments: a K row of D bytes is read
// 16 bytes per lane per load (8 for D 32: DEC7_LB), lane t of a quad
// taking bytes [(4c + t) LB, (4c + t + 1) LB) of load c; the 4 bytes at
// 4w of them are the B fragment of mma (c LB/4 + w) (rows 2t, 2t+1, 2t+8,
// 2t+9 of its k), and q's A fragments hold the same d's.
#define DEC7_LB(D) ((D) / 4 < 16 ? (D) / 4 : 16)

// decode7_q builds q's A fragments of an FP8 cache's head from a row of D
// bf16 in shared memory (qa[m / 2][m % 2] is mma m's; rows g + 8 zero; a
// lane past the group's heads zero).
template <int D>
__device__ __forceinline__ void decode7_q(unsigned qa[D / 32][2][4], const unsigned short* qr, bool live) {
    constexpr int LB = DEC7_LB(D);
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int mi = 0; mi < D / 16; mi++) {
        const int c = mi / (LB / 4), w = mi % (LB / 4);
        const unsigned* src = (const unsigned*)(qr + (4 * c + t) * LB + 4 * w);
        const unsigned x0 = live ? src[0] : 0u, x1 = live ? src[1] : 0u;
        qa[mi / 2][mi % 2][0] = x0, qa[mi / 2][mi % 2][1] = 0u, qa[mi / 2][mi % 2][2] = x1, qa[mi / 2][mi % 2][3] = 0u;
    }
}

// decode7_qk is attn_decode 7's half of a sub-tile before the softmax:
// the V rows' bytes loaded (16 per lane per load, D/32 loads) and widened
// into the warp's bf16 V tile (the layout version 6's cp.async writes, so
// the P·V loop is version 6's), and S of keys kb0 + 8nb + g from the K
// bytes (DEC7_LB per load) widened in registers: 2 prmt, 4 logic ops and 2
// HFMA2.BF16 per 4 bytes (kv_fp8x4_to_bf16), exact.
template <int D, bool IN_PAGE, int FMT>
__device__ __forceinline__ void decode7_qk(float s[2][4], const unsigned qa[D / 32][2][4],
                                           const unsigned char* __restrict__ kcol,
                                           const unsigned char* __restrict__ vcol, long long pos_stride,
                                           unsigned short* vt, int kb0, int j1, long long lane_slot) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int VCH = D / 16;             // 16-byte chunks of a V row
    constexpr int VPL = DEC6_SUB * VCH / 32;  // V chunks per lane
    constexpr int LB = DEC7_LB(D), NL = D / 4 / LB;
    u32x4 vr[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int c = lane + 32 * i, row = c / VCH, f = c % VCH;
        const long long slot = decode6_row_slot<IN_PAGE>(lane_slot, row);
        if (kb0 + row < j1) {
            vr[i] = *(const u32x4*)(vcol + slot * pos_stride + 16 * f);
        } else {
            vr[i] = u32x4{0, 0, 0, 0};  // past the chunk: zeros (P is 0 there)
        }
    }
    unsigned kw[2][D / 16];
#pragma unroll
    for (int nb = 0; nb < 2; nb++) {
        const long long slot = decode6_row_slot<IN_PAGE>(lane_slot, min(8 * nb + g, j1 - 1 - kb0));
        const unsigned char* kr = kcol + slot * pos_stride + t * LB;
#pragma unroll
        for (int c = 0; c < NL; c++) {
            if constexpr (LB == 16) {
                const u32x4 v = *(const u32x4*)(kr + 4 * LB * c);
                kw[nb][4 * c] = v.x, kw[nb][4 * c + 1] = v.y, kw[nb][4 * c + 2] = v.z, kw[nb][4 * c + 3] = v.w;
            } else {
                const uint2 v = *(const uint2*)(kr + 4 * LB * c);
                kw[nb][2 * c] = v.x, kw[nb][2 * c + 1] = v.y;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int c = lane + 32 * i, row = c / VCH, f = c % VCH;
        u32x4 a, b;
        kv_fp8x4_to_bf16<FMT>(vr[i].x, a.x, a.y);
        kv_fp8x4_to_bf16<FMT>(vr[i].y, a.z, a.w);
        kv_fp8x4_to_bf16<FMT>(vr[i].z, b.x, b.y);
        kv_fp8x4_to_bf16<FMT>(vr[i].w, b.z, b.w);
        ((u32x4*)vt)[pa_chunk<D>(row, 2 * f)] = a;
        ((u32x4*)vt)[pa_chunk<D>(row, 2 * f + 1)] = b;
    }
#pragma unroll
    for (int nb = 0; nb < 2; nb++) {
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int mi = 0; mi < D / 16; mi++) {
            unsigned b[2];
            kv_fp8x4_to_bf16<FMT>(kw[nb][mi], b[0], b[1]);
            mma_m16n8k16_bf16(s[nb], qa[mi / 2][mi % 2], b, s[nb]);
        }
    }
}

// decode6_sub adds one 16-key sub-tile (keys kb0..kb0+15 of [.., j1)) to a
// warp's state: attention.cu's decode4_sub with each row's slot.
template <int D, bool IN_PAGE, int FMT>
__device__ __forceinline__ void decode6_sub(float o[D / 8][4], float& m, float& l, const unsigned qa[D / 32][2][4],
                                            const void* __restrict__ kcol_, const void* __restrict__ vcol_,
                                            long long pos_stride, unsigned short* vt, int kb0, int j1,
                                            long long lane_slot, float scale_log2) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float s[2][4];
    if constexpr (FMT != KV_BF16) {
        decode7_qk<D, IN_PAGE, FMT>(s, qa, (const unsigned char*)kcol_, (const unsigned char*)vcol_, pos_stride,
                                    vt, kb0, j1, lane_slot);
    } else {
    const unsigned short* __restrict__ kcol = (const unsigned short*)kcol_;
    const unsigned short* __restrict__ vcol = (const unsigned short*)vcol_;
    // V sub-tile copy: chunk c = lane + 32i of 16 rows x D/8 chunks, i.e.
    // column ch = lane % (D/8) of rows r0 + RS*i. In one page the rows'
    // sources are a base and a fixed stride apart; across pages each row's
    // slot comes from its lane.
    constexpr int RS = 32 / (D / 8);
    const int r0 = lane / (D / 8), ch = lane % (D / 8);
    const unsigned short* vsrc = vcol + (IN_PAGE ? (lane_slot + r0) * pos_stride : 0) + ch * 8;
    const unsigned vt_addr = smem_addr(vt);
#pragma unroll
    for (int i = 0; i < DEC6_SUB / RS; i++) {
        const int row = r0 + RS * i;
        const long long slot = decode6_row_slot<IN_PAGE>(lane_slot, row);
        const bool full = kb0 + row < j1;
        // A row past the chunk copies nothing: its source is row r0's.
        const unsigned short* src = IN_PAGE ? vsrc + (full ? (long long)(RS * i) * pos_stride : 0)
                                            : vcol + (full ? slot : lane_slot) * pos_stride + ch * 8;
        const int chunk = pa_chunk<D>(row, ch);
        pa_cp_async16((u32x4*)vt + chunk, vt_addr + 16u * chunk, src, full);
    }
    cp_async_commit();
    // S for keys kb0 + 8nb + g (clamped into the chunk: masked below).
#pragma unroll
    for (int nb = 0; nb < 2; nb++) {
        const long long slot = decode6_row_slot<IN_PAGE>(lane_slot, min(8 * nb + g, j1 - 1 - kb0));
        const unsigned short* kr = kcol + slot * pos_stride + 8 * t;
        u32x4 kv[D / 32];
#pragma unroll
        for (int c = 0; c < D / 32; c++) kv[c] = *(const u32x4*)(kr + 32 * c);
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 32; c++) {
            const unsigned b_lo[2] = {kv[c].x, kv[c].y};
            const unsigned b_hi[2] = {kv[c].z, kv[c].w};
            mma_m16n8k16_bf16(s[nb], qa[c][0], b_lo, s[nb]);
            mma_m16n8k16_bf16(s[nb], qa[c][1], b_hi, s[nb]);
        }
    }
    }
    float mx = neg_inf_f32();
#pragma unroll
    for (int nb = 0; nb < 2; nb++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            s[nb][i] = kb0 + 8 * nb + 2 * t + i < j1 ? s[nb][i] * scale_log2 : neg_inf_f32();
            mx = fmaxf(mx, s[nb][i]);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);  // the sub-tile's first key lies in the chunk: finite
    const float alpha = exp2f(m - mn);
    m = mn;
    unsigned pa[4];
    pa[0] = pack_bf16x2_rn(exp2f(s[0][0] - mn), exp2f(s[0][1] - mn));
    pa[2] = pack_bf16x2_rn(exp2f(s[1][0] - mn), exp2f(s[1][1] - mn));
    pa[1] = pa[3] = 0u;  // rows g+8: no heads
    l = l * alpha + (__uint_as_float(pa[0] << 16) + __uint_as_float(pa[0] & 0xffff0000u)) +
        (__uint_as_float(pa[2] << 16) + __uint_as_float(pa[2] & 0xffff0000u));
    if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= alpha;
            o[i][1] *= alpha;
        }
    }
    if constexpr (FMT == KV_BF16) cp_async_wait<0>();
    __syncwarp();  // every lane's V rows have landed
#pragma unroll
    for (int nb = 0; nb < D / 8; nb += 2) {
        unsigned vb[4];
        ldmatrix_x4_trans(vb, vt + pa_chunk<D>(((lane >> 3) & 1) * 8 + (lane & 7), nb + (lane >> 4)) * 8);
        mma_m16n8k16_bf16(o[nb], pa, vb, o[nb]);
        mma_m16n8k16_bf16(o[nb + 1], pa, vb + 2, o[nb + 1]);
    }
    __syncwarp();  // the V tile is read: the next sub-tile may refill it
    smem_retire(vt, DEC6_SUB * D * 2);
}

// decode6_loop runs a warp's sub-tiles of the block's item (w, w + 4, ...
// of 16 keys), the next sub-tile's table load issued before this one's K
// loads.
template <int D, bool IN_PAGE, int FMT>
__device__ __forceinline__ void decode6_loop(float o[D / 8][4], float& m, float& l, const unsigned qa[D / 32][2][4],
                                             const dec6_item& it, const void* __restrict__ kcol,
                                             const void* __restrict__ vcol, long long pos_stride,
                                             const int* __restrict__ tab, int pageSize, int pageShift,
                                             float scale_log2) {
    const int warp = threadIdx.x >> 5;
    unsigned short* vt = (unsigned short*)dyn_smem + warp * DEC6_SUB * D;
    int kb0 = it.j0 + warp * DEC6_SUB;
    long long slot = kb0 < it.j1 ? decode6_lane_slot<IN_PAGE>(tab, kb0, it.j1, pageSize, pageShift) : 0;
    for (; kb0 < it.j1; kb0 += DEC6_QUANTUM) {
        const int next = kb0 + DEC6_QUANTUM;
        const long long next_slot = next < it.j1 ? decode6_lane_slot<IN_PAGE>(tab, next, it.j1, pageSize, pageShift) : 0;
        decode6_sub<D, IN_PAGE, FMT>(o, m, l, qa, kcol, vcol, pos_stride, vt, kb0, it.j1, slot, scale_log2);
        slot = next_slot;
    }
}

// decode6_keys runs a warp's sub-tiles of the block's item and leaves the
// warp's state (o, m and l summed over the row's lanes) in shared memory.
// q_s is the kv head's group of query heads (group x D bf16).
template <int D, int G, int FMT>
__device__ __forceinline__ void decode6_keys(const dec6_item& it, const unsigned short* q_s,
                                             const void* __restrict__ kCache_, const void* __restrict__ vCache_,
                                             const int* __restrict__ tab, int heads, int kvHeads, int pageSize,
                                             int pageShift, float* sacc, float* sm, float* sl, float kscale) {
    const int kvh = blockIdx.y, group = heads / kvHeads;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // The softmax scale; an FP8 cache's K scale folds into it (FlashInfer's
    // way: the dot products are of the bytes' values).
    const float scale_log2 = FMT == KV_BF16 ? 1.4426950408889634f / sqrtf((float)D)
                                            : 1.4426950408889634f / sqrtf((float)D) * kscale;
    // Q's A fragments, rows g (heads; g >= group zero), d permuted as K's.
    unsigned qa[D / 32][2][4];
    if constexpr (FMT != KV_BF16) {
        decode7_q<D>(qa, q_s + min(g, group - 1) * D, g < group);
    } else {
        const u32x4 zero = {0, 0, 0, 0};
        const unsigned short* qr = q_s + min(g, group - 1) * D + 8 * t;
#pragma unroll
        for (int c = 0; c < D / 32; c++) {
            const u32x4 v = g < group ? *(const u32x4*)(qr + 32 * c) : zero;
            qa[c][0][0] = v.x, qa[c][0][1] = 0u, qa[c][0][2] = v.y, qa[c][0][3] = 0u;
            qa[c][1][0] = v.z, qa[c][1][1] = 0u, qa[c][1][2] = v.w, qa[c][1][3] = 0u;
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m = neg_inf_f32(), l = 0.0f;
    // The kv head's columns: D elements of 2 bytes (bf16) or 1 (FP8).
    typedef typename kv_elem<FMT>::type E;
    const E* kCache = (const E*)kCache_;
    const E* vCache = (const E*)vCache_;
    if ((pageSize & (DEC6_SUB - 1)) == 0) {  // uniform: one loop or the other, no branch inside
        decode6_loop<D, true, FMT>(o, m, l, qa, it, kCache + kvh * D, vCache + kvh * D, (long long)kvHeads * D,
                                   tab, pageSize, pageShift, scale_log2);
    } else {
        decode6_loop<D, false, FMT>(o, m, l, qa, it, kCache + kvh * D, vCache + kvh * D, (long long)kvHeads * D,
                                    tab, pageSize, pageShift, scale_log2);
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < G) {
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) {
            sacc[(warp * G + g) * D + 8 * nb + 2 * t] = o[nb][0];
            sacc[(warp * G + g) * D + 8 * nb + 2 * t + 1] = o[nb][1];
        }
        if (t == 0) {
            sm[warp * G + g] = m;
            sl[warp * G + g] = l;
        }
    }
}

// decode6_combine is the tail of a sequence of several splits, after each
// block wrote its partial: the block that counts last in its (sequence, kv
// head) counter merges the splits' partials of the kv head's query heads
// in split order (attention.cu's decode_combine_last, its sums in its
// order) and resets the counter.
template <int D, int G, int FMT>
__device__ __forceinline__ void decode6_combine(unsigned short* __restrict__ out, float* __restrict__ ws,
                                                const dec6_item& it, int heads, int kvHeads, float vscale) {
    __shared__ int is_last;
    __shared__ float norm_s[G][2];
    const int kvh = blockIdx.y, tid = threadIdx.x, group = heads / kvHeads;
    const long long parts = (long long)gridDim.x * heads;
    int* counter = (int*)(ws + parts * (D + 2)) + (long long)it.b * kvHeads + kvh;
    __threadfence();  // this thread's partial writes, before the ticket
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(counter, 1) == it.splits - 1;
    __syncthreads();
    if (!is_last) return;  // uniform across the block
    __threadfence();       // the other blocks' partials, after their tickets
    const float* ml = ws + parts * D;
    const long long x0 = (long long)blockIdx.x - it.split;  // the sequence's first item
    for (int hg = tid; hg < group; hg += blockDim.x) {
        const long long p0 = x0 * heads + (long long)kvh * group + hg;
        float mx = neg_inf_f32();
        for (int i = 0; i < it.splits; i++) mx = fmaxf(mx, __ldcg(ml + (p0 + (long long)i * heads) * 2));
        float sum = 0.0f;
        for (int i = 0; i < it.splits; i++) {
            const long long p = p0 + (long long)i * heads;
            sum += expf(__ldcg(ml + p * 2) - mx) * __ldcg(ml + p * 2 + 1);
        }
        norm_s[hg][0] = mx;
        norm_s[hg][1] = sum;
    }
    __syncthreads();
    for (int idx = tid; idx < group * D; idx += blockDim.x) {
        const int hg = idx / D, d = idx - hg * D;
        const long long p0 = x0 * heads + (long long)kvh * group + hg;
        float acc = 0.0f;
        for (int i = 0; i < it.splits; i++) {
            const long long p = p0 + (long long)i * heads;
            acc += expf(__ldcg(ml + p * 2) - norm_s[hg][0]) * __ldcg(ws + p * D + d);
        }
        const float r = acc / norm_s[hg][1];
        out[((long long)it.b * heads + (long long)kvh * group + hg) * D + d] =
            f32_to_bf16_rne(FMT == KV_BF16 ? r : r * vscale);
    }
    if (tid == 0) *counter = 0;  // every split has counted: none reads it again this launch
}

template <int D, int G, int FMT>
__device__ __noinline__ void attn_decode6(unsigned short* __restrict__ out, float* __restrict__ ws,
                                          const unsigned short* __restrict__ q, const void* __restrict__ kCache,
                                          const void* __restrict__ vCache, const int* __restrict__ table,
                                          const int* __restrict__ seqLens, int batch, int heads, int kvHeads,
                                          int pageSize, int pageShift, int maxPages, int target,
                                          const float* __restrict__ kScale, const float* __restrict__ vScale) {
    __shared__ __align__(16) unsigned short q_s[G * D];
    const dec6_item it = decode6_schedule(seqLens, batch, maxPages * pageSize, target);
    if (it.b < 0) return;  // uniform: no item for this block at these lengths
    const int kvh = blockIdx.y, group = heads / kvHeads, tid = threadIdx.x;
    // The kv head's query heads, read once per block (version 4 reads them
    // once per warp): group x D contiguous bf16 of row b.
    const u32x4* qsrc = (const u32x4*)(q + ((long long)it.b * heads + (long long)kvh * group) * D);
    for (int c = tid; c < group * D / 8; c += DEC6_WARPS * 32) ((u32x4*)q_s)[c] = qsrc[c];
    __syncthreads();
    // Shared: each warp's V tile [16][D] bf16, then the merge's [warps][G][D]
    // sums and [warps][G] maxima and sums (floats).
    float* sacc = (float*)((unsigned short*)dyn_smem + DEC6_WARPS * DEC6_SUB * D);
    float* sm = sacc + DEC6_WARPS * G * D;
    float* sl = sm + DEC6_WARPS * G;
    const float kscale = FMT == KV_BF16 ? 1.0f : kScale[kvh], vscale = FMT == KV_BF16 ? 1.0f : vScale[kvh];
    decode6_keys<D, G, FMT>(it, q_s, kCache, vCache, table + (long long)it.b * maxPages, heads, kvHeads, pageSize,
                            pageShift, sacc, sm, sl, kscale);
    __syncthreads();
    const long long parts = (long long)gridDim.x * heads;
    const long long p0 = (long long)blockIdx.x * heads + (long long)kvh * group;
    for (int idx = tid; idx < group * D; idx += DEC6_WARPS * 32) {
        const int hg = idx / D, d = idx - hg * D;
        float mx = neg_inf_f32();
        for (int w = 0; w < DEC6_WARPS; w++) mx = fmaxf(mx, sm[w * G + hg]);
        float a = 0.0f, sum = 0.0f;
        for (int w = 0; w < DEC6_WARPS; w++) {
            const float wt = exp2f(sm[w * G + hg] - mx);  // a warp with no keys: exp2(-inf) = 0
            a += wt * sacc[(w * G + hg) * D + d];
            sum += wt * sl[w * G + hg];
        }
        if (it.splits == 1) {  // the whole sequence: its output (the combine of one partial, bit for bit)
            const float r = a / sum;
            out[((long long)it.b * heads + (long long)kvh * group + hg) * D + d] =
                f32_to_bf16_rne(FMT == KV_BF16 ? r : r * vscale);
            continue;
        }
        ws[(p0 + hg) * D + d] = a;
        if (d == 0) {
            ws[parts * D + (p0 + hg) * 2] = mx * 0.6931471805599453f;  // the combine works in e's domain
            ws[parts * D + (p0 + hg) * 2 + 1] = sum;
        }
    }
    if (it.splits > 1) decode6_combine<D, G, FMT>(out, ws, it, heads, kvHeads, vscale);
}

#define DEFINE_DECODE6(D, G)                                                                                    \
    extern "C" __global__ void __launch_bounds__(DEC6_WARPS * 32, 1) attn_decode6_d##D##_g##G(                     \
        unsigned short* out, float* ws, const unsigned short* q, const unsigned short* kCache,                  \
        const unsigned short* vCache, const int* table, const int* seqLens, int batch, int heads, int kvHeads,  \
        int pageSize, int pageShift, int maxPages, int target) {                                                \
        SB_PDL_WAIT();                                                                                          \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                             \
        attn_decode6<D, G, KV_BF16>(out, ws, q, kCache, vCache, table, seqLens, batch, heads, kvHeads, pageSize, \
                                    pageShift, maxPages, target, nullptr, nullptr);                             \
    }
DEFINE_DECODE6(32, 1)
DEFINE_DECODE6(32, 2)
DEFINE_DECODE6(32, 4)
DEFINE_DECODE6(32, 8)
DEFINE_DECODE6(64, 1)
DEFINE_DECODE6(64, 2)
DEFINE_DECODE6(64, 4)
DEFINE_DECODE6(64, 8)
DEFINE_DECODE6(128, 1)
DEFINE_DECODE6(128, 2)
DEFINE_DECODE6(128, 4)
DEFINE_DECODE6(128, 8)

// ---- attn_decode 7: attn_decode 6 over an FP8 cache ----
//
// attn_decode 6 (the split on the device, the grid, the workspace, the
// fused combine: the same code, templated on the cache's format) with K
// and V read as FP8 bytes: half the bytes of version 6 per key. Per
// 16-key sub-tile a lane loads its V rows' bytes (16 bytes per load,
// D/32 loads) and its two K rows' (16 bytes per load, D/64 loads; 8 for D
// 32), widens them exactly to bf16 in registers (kv_fp8x4_to_bf16), stores
// V into the warp's bf16 tile (version 6's layout: its ldmatrix.trans and
// P·V loop unchanged) and runs the Q·K mma on the widened K; q's fragments
// hold the d's in the bytes' order. FlashInfer's scales: the kv head's K
// scale folds into the softmax scale, its V scale multiplies the output
// (ref.AttentionPagedFP8). kScale and vScale are F32[kvHeads]; e5m2 picks
// the format (uniform).
//
// Napkin math at Llama-3-8B (ESTIMATE): a key costs 2 x 8 x 128 x 1 B = 2
// KB of K and V (version 6: 4 KB) and the same 16.4 kFLOP per query row.
//  - decode, batch 32, 1k keys each (32k keys): 67 MB of K/V per layer,
//    0.5 GFLOP: floor 20 us (H100, 3.35 TB/s) / 14 us (H200, 4.8 TB/s)
//    per layer, 0.64 / 0.45 ms per step (version 6: 40 / 28 us, 1.28 / 0.89
//    ms).
//  - decode, batch 32 x 8k keys (262k keys): 537 MB per layer, floor 160 /
//    112 us per layer, 5.1 / 3.6 ms per step (version 6: 1.07 GB, 10.3 /
//    7.2 ms).
//  - issue rate (counted by hand from this source: no cuobjdump here): per
//    16-key sub-tile and warp about 650 instructions against version 6's
//    ~330 (SASS): ~10 per 4 bytes widened (2 prmt, 6 logic, 2 HFMA2.BF16)
//    over 64 K and 64 V bytes per lane, 8 STS.128 of V, less version 6's
//    8 LDGSTS; for 4 KB of K/V (version 6: 8 KB). At 4.8 TB/s: 1.17 G
//    sub-tiles/s x 650 = 0.76 T warp instructions/s of the H200's ~1.05 T
//    (132 SMs x 4 schedulers x 1.98 GHz): 73% (H100 at 3.35 TB/s: 50%;
//    version 6: 18% / 13%). Not the bound, but less slack to hide
//    latency: ESTIMATE 80-90% of the byte roof (about 0.5-0.56 ms per step
//    at batch 32 x 1k on an H200, version 6 ~0.95 ms).
//  - Access counters (EMULATED: every request's sectors, no cache;
//    TestEmulatorFP8DecodeReadsHalf), Llama-3-8B heads, 4 sequences of
//    1000 tokens on shuffled pages of 16: attn_decode 6 reads 548,128
//    sectors (17.5 MB), attn_decode 7 294,048 (9.4 MB): 0.537 of version
//    6's. K and V halve exactly (256,000 sectors against 512,000: every
//    16-byte load's sectors used); q, the table and the lengths (~37k
//    sectors) do not.
//  - ptxas (NVRTC 11.8, -Xptxas -v; stepbench build --arch 90 / 80):
//    attn_decode7_d128_gG 184 registers on sm_90, 195 on sm_80 (version 6
//    as templated here: 178 / 192), _d64 118, _d32 98; 0 spills, no stack;
//    2 blocks of 4 warps per SM at d128 as version 6 (registers). Static
//    shared memory doubles (544-4256 B: each format's instantiation has its
//    own q copy), far below the register limit's occupancy.
#define DEFINE_DECODE7(D, G)                                                                                    \
    extern "C" __global__ void __launch_bounds__(DEC6_WARPS * 32, 1) attn_decode7_d##D##_g##G(                     \
        unsigned short* out, float* ws, const unsigned short* q, const unsigned char* kCache,                   \
        const unsigned char* vCache, const int* table, const int* seqLens, int batch, int heads, int kvHeads,   \
        int pageSize, int pageShift, int maxPages, int target, const float* kScale, const float* vScale,        \
        int e5m2) {                                                                                             \
        SB_PDL_WAIT();                                                                                          \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                             \
        if (e5m2) {                                                                                             \
            attn_decode6<D, G, KV_E5M2>(out, ws, q, kCache, vCache, table, seqLens, batch, heads, kvHeads,      \
                                        pageSize, pageShift, maxPages, target, kScale, vScale);                 \
        } else {                                                                                                \
            attn_decode6<D, G, KV_E4M3>(out, ws, q, kCache, vCache, table, seqLens, batch, heads, kvHeads,      \
                                        pageSize, pageShift, maxPages, target, kScale, vScale);                 \
        }                                                                                                       \
    }
DEFINE_DECODE7(32, 1)
DEFINE_DECODE7(32, 2)
DEFINE_DECODE7(32, 4)
DEFINE_DECODE7(32, 8)
DEFINE_DECODE7(64, 1)
DEFINE_DECODE7(64, 2)
DEFINE_DECODE7(64, 4)
DEFINE_DECODE7(64, 8)
DEFINE_DECODE7(128, 1)
DEFINE_DECODE7(128, 2)
DEFINE_DECODE7(128, 4)
DEFINE_DECODE7(128, 8)

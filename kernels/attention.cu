// attention.cu — causal GQA attention over the KV cache [batch][maxSeq][kvHeads][D].
//
// startPos is read from device memory (one int), so that a decode step
// captured in a CUDA graph replays correctly at every position.
// Query (b, s) sits at position startPos+s and sees cache positions
// 0..startPos+s of sequence b; query head h reads kv head h / (heads/kvHeads).
// score = fp32 dot(q, k) * (1/sqrtf(D)); softmax in fp32; out = bf16(sum p*v / sum p).
//
// Versions (kernels.Ops; --kernel attn_prefill=N / attn_decode=N; the newest
// that supports the shape by default):
//  - attn_decode 1, attn_decode_split_dD: flash-decoding, one thread per key
//    for the scores, 4-byte V loads. (split, kv head, sequence) blocks write
//    unnormalised partials (max, sum, acc) that attn_decode_combine merges.
//  - attn_decode 2, attn_decode2_dD_gG (D 64, 128; G >= heads/kvHeads, 1..8):
//    bandwidth-bound flash-decoding, 16-byte coalesced K and V loads, every
//    query head of the kv head in one pass, DEC_UNROLL keys in flight per
//    lane group; the same partials and combine.
//  - attn_decode 3, attn_decode3_dD_gG: version 2 with the combine fused in:
//    the block of each kv head that finishes last merges the splits (one
//    launch per layer instead of two; output bit-identical to version 2).
//  - attn_decode 4, attn_decode4_dD_gG: flash-decoding on tensor cores
//    (the kv head's query heads as M), combine fused as in version 3.
//  - attn_decode 5, attn_decode5_dD_gG: version 4 with rope_kv_write
//    (version 2's rotation) fused into its prologue at decode steps: it
//    reads the qkv rows; caches and output bit-identical to rope_kv_write 2
//    + attn_decode 4. Only when chosen (kernels.DecodeDefaultMax).
//  - attn_prefill 1, attn_prefill_dD: FlashAttention-2 style tiles of 64
//    queries x 32 keys on fp32 CUDA cores.
//  - attn_prefill 2, attn_prefill_tc_dD (D 64, 128): FlashAttention-2 on
//    tensor cores (mma.sync m16n8k16 bf16), cp.async double-buffered tiles.
//  - attn_prefill 3, attn_prefill3_dD (D 64, 128): version 2 with 128-row
//    blocks of 8 warps sharing each K/V tile, addresses computed once
//    outside the key loop, P packed by cvt.rn.bf16x2; bit-identical output.
//
// Napkin math at Llama-3-8B (32 heads, 8 kv heads, D 128), per launch (one
// layer); peaks: H100 SXM 989 TFLOP/s bf16 dense, 3.35 TB/s; H200 989 TFLOP/s,
// 4.8 TB/s (the cost model's and bench/roofline's figures):
//  - decode, batch 1, 1k keys: K and V read once: 1024 x 8 x 128 x 2 B x 2 =
//    4.19 MB (+ 0.27 MB of partials written and read, q and out 16 KB);
//    16.8 MFLOP. Floor 1.25 us (H100) / 0.87 us (H200); 40 / 28 us per step
//    of 32 layers. Batch 32: 32x the bytes, 40 / 28 us per layer.
//  - prefill, 1 x 1024 tokens: 4 x 32 x 128 x 1024·1025/2 = 8.60 GFLOP;
//    q, k, v and out once: 21.0 MB. Compute-bound: 8.7 us per layer at peak,
//    0.28 ms per prefill of 32 layers (about 0.7 ms at the ~40% of peak
//    FA2-class mma.sync kernels reach). 1 x 8192: 550 GFLOP per layer,
//    0.56 ms at peak, 17.8 ms per prefill.
//
// Workspace layout (decode), with P = batch*heads*splits partials:
//   acc[P][D] floats, then ml[P][2] floats (max in e's domain, sum); partial
//   index (b*heads + h)*splits + split.

// 16-byte aligned: cp.async and ldmatrix move 16-byte rows (NVRTC aligns
// dynamic shared memory so anyway; this says the kernels need it).
extern __shared__ __align__(16) float dyn_smem[];

// The kernel bodies below are __noinline__ device templates called from
// extern "C" entry points (NVRTC 11.8 cannot name template kernels without
// name expressions). Inlining them makes NVRTC 11.8 crash (SIGSEGV) for
// sm_90 when -lineinfo is given; one call per block costs nothing.

struct alignas(8) f32x2 {
    float x, y;
};

template <int D>
__device__ __noinline__ void attn_decode_split(float* __restrict__ ws,
                                                  const unsigned short* __restrict__ q,
                                                  const unsigned short* __restrict__ kCache,
                                                  const unsigned short* __restrict__ vCache,
                                                  const int* __restrict__ startPos,
                                                  int batch, int heads, int kvHeads, int maxSeq,
                                                  int chunk, int splits) {
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    // The split plan is fixed for maxSeq (so a captured graph replays at any
    // position); splits past the keys written so far have nothing to do.
    const int keys = min(*startPos + 1, maxSeq);
    if (split * chunk >= keys) return;  // uniform across the block
    const int tid = threadIdx.x, nthreads = blockDim.x;
    const int group = heads / kvHeads;
    // Shared layout: q [group][D], scores [group][chunk], (max,sum) [group], reduction.
    float* qs = dyn_smem;
    float* sc = qs + group * D;
    float* ml = sc + group * chunk;
    f32x2* red = (f32x2*)(ml + 2 * group);

    const float scale = 1.0f / sqrtf((float)D);
    const unsigned short* qb = q + ((long long)b * heads + (long long)kvh * group) * D;
    for (int i = tid; i < group * D; i += nthreads) qs[i] = bf16_to_f32(qb[i]);

    const int j0 = split * chunk;
    const int n = min(chunk, keys - j0);
    const long long pos_stride = (long long)kvHeads * D;
    const long long kv_base = (long long)b * maxSeq * pos_stride + (long long)kvh * D;
    __syncthreads();

    // Scores: one thread per key; its K row stays in registers for all heads of the group.
    for (int jj = tid; jj < n; jj += nthreads) {
        const u32x4* krow = (const u32x4*)(kCache + kv_base + (long long)(j0 + jj) * pos_stride);
        u32x4 k[D / 8];
#pragma unroll
        for (int c = 0; c < D / 8; c++) k[c] = krow[c];
        for (int g = 0; g < group; g++) {
            const float* qg = qs + g * D;
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < D / 8; c++) {
                float kf[8];
                unpack8(k[c], kf);
#pragma unroll
                for (int e = 0; e < 8; e++) dot += qg[c * 8 + e] * kf[e];
            }
            sc[g * chunk + jj] = dot * scale;
        }
    }
    __syncthreads();

    // Softmax of the chunk, one warp per head: scores become exp(s - max).
    const int warp = tid >> 5, lane = tid & 31, warps = nthreads >> 5;
    for (int g = warp; g < group; g += warps) {
        float* s = sc + g * chunk;
        float m = neg_inf_f32();
        for (int jj = lane; jj < n; jj += 32) m = fmaxf(m, s[jj]);
        m = warp_max(m);
        float l = 0.0f;
        for (int jj = lane; jj < n; jj += 32) {
            const float p = expf(s[jj] - m);
            s[jj] = p;
            l += p;
        }
        l = warp_sum(l);
        if (lane == 0) {
            ml[2 * g] = m;
            ml[2 * g + 1] = l;
        }
    }
    __syncthreads();

    // P·V: a thread owns one (head, pair of dims); when there are fewer pairs
    // than threads, `subs` threads share a pair, each taking every subs-th key.
    const int half = D / 2;
    const int pairs = group * half;
    const int subs = pairs >= nthreads ? 1 : nthreads / pairs;
    const long long part0 = ((long long)b * heads + (long long)kvh * group) * splits + split;
    float* ws_acc = ws;
    float* ws_ml = ws + (long long)batch * heads * splits * D;
    for (int item = tid; item < pairs * subs; item += nthreads) {
        const int pair = item % pairs, sub = item / pairs;
        const int g = pair / half, d2 = pair - g * half;
        const float* p = sc + g * chunk;
        float a0 = 0.0f, a1 = 0.0f;
        for (int jj = sub; jj < n; jj += subs) {
            const unsigned int v =
                ((const unsigned int*)(vCache + kv_base + (long long)(j0 + jj) * pos_stride))[d2];
            a0 += p[jj] * __uint_as_float(v << 16);
            a1 += p[jj] * __uint_as_float(v & 0xffff0000u);
        }
        if (subs == 1) {
            float* dst = ws_acc + (part0 + (long long)g * splits) * D + 2 * d2;
            dst[0] = a0;
            dst[1] = a1;
        } else {
            red[item].x = a0;
            red[item].y = a1;
        }
    }
    if (subs > 1) {  // uniform across the block
        __syncthreads();
        for (int pair = tid; pair < pairs; pair += nthreads) {
            float a0 = 0.0f, a1 = 0.0f;
            for (int sub = 0; sub < subs; sub++) {
                a0 += red[sub * pairs + pair].x;
                a1 += red[sub * pairs + pair].y;
            }
            const int g = pair / half, d2 = pair - g * half;
            float* dst = ws_acc + (part0 + (long long)g * splits) * D + 2 * d2;
            dst[0] = a0;
            dst[1] = a1;
        }
    }
    for (int g = tid; g < group; g += nthreads) {
        float* dst = ws_ml + (part0 + (long long)g * splits) * 2;
        dst[0] = ml[2 * g];
        dst[1] = ml[2 * g + 1];
    }
}

#define DEFINE_DECODE(D)                                                                      \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_split_d##D(                 \
        float* ws, const unsigned short* q, const unsigned short* kCache,                     \
        const unsigned short* vCache, const int* startPos, int batch, int heads, int kvHeads, \
        int maxSeq, int chunk, int splits) {                                                  \
        SB_PDL_WAIT();                                                                        \
        SB_PDL_LAUNCH_DEPENDENTS();                                                           \
        attn_decode_split<D>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq,  \
                             chunk, splits);                                                  \
    }
DEFINE_DECODE(32)
DEFINE_DECODE(64)
DEFINE_DECODE(128)

// decode_live_splits is how many splits of chunk keys hold keys at this
// step (the others wrote nothing).
__device__ __forceinline__ int decode_live_splits(const int* startPos, int maxSeq, int chunk, int splits) {
    const int keys = min(*startPos + 1, maxSeq);
    return min(splits, (keys + chunk - 1) / chunk);
}

// decode_head_norm is the merge's max and sum over the live splits of one
// (sequence, head) bh: M = max_i m_i, L = sum_i exp(m_i - M) l_i, in split
// order (__ldcg: another block of the same launch may have written them).
__device__ __forceinline__ void decode_head_norm(const float* __restrict__ ws, long long bh, int live, int batch,
                                                 int heads, int headDim, int splits, float* m_all, float* l_all) {
    const float* ml = ws + (long long)batch * heads * splits * headDim + bh * splits * 2;
    float m = neg_inf_f32();
    for (int i = 0; i < live; i++) m = fmaxf(m, __ldcg(ml + 2 * i));
    float l = 0.0f;
    for (int i = 0; i < live; i++) l += expf(__ldcg(ml + 2 * i) - m) * __ldcg(ml + 2 * i + 1);
    *m_all = m;
    *l_all = l;
}

// decode_head_dim merges dimension d of bh's partials: out = sum_i
// exp(m_i - M) acc_i[d] / L, rounded to bf16.
__device__ __forceinline__ void decode_head_dim(unsigned short* __restrict__ out, const float* __restrict__ ws,
                                                long long bh, int live, int batch, int heads, int headDim,
                                                int splits, float m_all, float l_all, int d) {
    const float* ml = ws + (long long)batch * heads * splits * headDim + bh * splits * 2;
    const float* acc = ws + bh * splits * headDim;
    float o = 0.0f;
    for (int i = 0; i < live; i++) o += expf(__ldcg(ml + 2 * i) - m_all) * __ldcg(acc + i * headDim + d);
    out[bh * headDim + d] = f32_to_bf16_rne(o / l_all);
}

// attn_decode_combine: grid (heads, batch). Merges the partials of the
// splits that held keys (the others wrote nothing this step):
// out = sum_i exp(m_i - M) acc_i / sum_i exp(m_i - M) l_i, M = max_i m_i.
extern "C" __global__ void attn_decode_combine(unsigned short* __restrict__ out,
                                               const float* __restrict__ ws,
                                               const int* __restrict__ startPos, int maxSeq,
                                               int batch, int heads, int headDim, int chunk,
                                               int splits) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int h = blockIdx.x, b = blockIdx.y;
    const int live = decode_live_splits(startPos, maxSeq, chunk, splits);
    const long long bh = (long long)b * heads + h;
    float m_all, l_all;
    decode_head_norm(ws, bh, live, batch, heads, headDim, splits, &m_all, &l_all);
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        decode_head_dim(out, ws, bh, live, batch, heads, headDim, splits, m_all, l_all, d);
    }
}

// Prefill tiles: 64 queries x 32 keys, 256 threads. Thread (ty, tx) =
// (tid/8, tid%8) owns query rows ty and ty+32; for scores, keys tx+8j; for
// the output, dims tx+8i. Shared rows are padded by one float against bank
// conflicts.
#define PF_BQ 64
#define PF_BK 32
#define PF_THREADS 256

template <int D>
__device__ __noinline__ void attn_prefill(unsigned short* __restrict__ out,
                                             const unsigned short* __restrict__ q,
                                             const unsigned short* __restrict__ kCache,
                                             const unsigned short* __restrict__ vCache,
                                             const int* __restrict__ startPosPtr, int seqLen,
                                             int heads, int kvHeads, int maxSeq) {
    constexpr int LD = D + 1;
    constexpr int SLD = PF_BK + 1;
    float* qs = dyn_smem;            // [BQ][LD]
    float* ks = qs + PF_BQ * LD;     // [BK][LD]
    float* vs = ks + PF_BK * LD;     // [BK][LD]
    float* ss = vs + PF_BK * LD;     // [BQ][SLD] scores, then probabilities
    float* m_s = ss + PF_BQ * SLD;   // [BQ] running max
    float* l_s = m_s + PF_BQ;        // [BQ] running sum
    float* alpha_s = l_s + PF_BQ;    // [BQ] rescale of this tile

    const int q0 = blockIdx.x * PF_BQ, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const int kvh = h / (heads / kvHeads);
    const float scale = 1.0f / sqrtf((float)D);
    const int startPos = *startPosPtr;
    const int rows_here = min(PF_BQ, seqLen - q0);
    // Max position seen + 1; never past the cache, whatever the position says.
    const int keys_here = min(startPos + q0 + rows_here, maxSeq);
    const long long pos_stride = (long long)kvHeads * D;
    const long long kv_base = (long long)b * maxSeq * pos_stride + (long long)kvh * D;

    // Query tile (rows past seqLen are zeros and never written out).
    for (int i = tid; i < PF_BQ * (D / 8); i += PF_THREADS) {
        const int r = i / (D / 8), c = i - r * (D / 8);
        float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (r < rows_here) {
            const long long t = (long long)b * seqLen + q0 + r;
            unpack8(((const u32x4*)(q + (t * heads + h) * D))[c], f);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) qs[r * LD + c * 8 + e] = f[e];
    }
    for (int r = tid; r < PF_BQ; r += PF_THREADS) {
        m_s[r] = neg_inf_f32();
        l_s[r] = 0.0f;
    }
    // Rows past seqLen behave like the last real row so that they never see
    // an all-masked tile (key 0 is visible to every row: no -inf - -inf).
    const int qpos0 = startPos + q0 + min(ty, rows_here - 1);
    const int qpos1 = startPos + q0 + min(ty + 32, rows_here - 1);

    float o0[D / 8], o1[D / 8];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o0[i] = o1[i] = 0.0f;

    for (int k0 = 0; k0 < keys_here; k0 += PF_BK) {
        __syncthreads();  // previous tile fully consumed (and q tile ready)
        for (int i = tid; i < PF_BK * (D / 8); i += PF_THREADS) {
            const int j = i / (D / 8), c = i - j * (D / 8);
            float kf[8] = {0, 0, 0, 0, 0, 0, 0, 0}, vf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (k0 + j < keys_here) {
                const long long at = kv_base + (long long)(k0 + j) * pos_stride;
                unpack8(((const u32x4*)(kCache + at))[c], kf);
                unpack8(((const u32x4*)(vCache + at))[c], vf);
            }
#pragma unroll
            for (int e = 0; e < 8; e++) {
                ks[j * LD + c * 8 + e] = kf[e];
                vs[j * LD + c * 8 + e] = vf[e];
            }
        }
        __syncthreads();

        float s0[4] = {0, 0, 0, 0}, s1[4] = {0, 0, 0, 0};
        for (int d = 0; d < D; d++) {
            const float qa = qs[ty * LD + d], qb = qs[(ty + 32) * LD + d];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float kv = ks[(tx + 8 * j) * LD + d];
                s0[j] += qa * kv;
                s1[j] += qb * kv;
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int kk = tx + 8 * j, kpos = k0 + kk;
            ss[ty * SLD + kk] = kpos <= qpos0 ? s0[j] * scale : neg_inf_f32();
            ss[(ty + 32) * SLD + kk] = kpos <= qpos1 ? s1[j] * scale : neg_inf_f32();
        }
        __syncthreads();

        // Online softmax: warp w owns rows 8w..8w+7, lane = key of the tile.
        {
            const int warp = tid >> 5, lane = tid & 31;
            for (int rr = 0; rr < PF_BQ / (PF_THREADS / 32); rr++) {
                const int r = warp * (PF_BQ / (PF_THREADS / 32)) + rr;
                const float v = ss[r * SLD + lane];
                const float m_old = m_s[r];
                const float m_new = fmaxf(m_old, warp_max(v));
                const float p = expf(v - m_new);
                ss[r * SLD + lane] = p;
                const float sum = warp_sum(p);
                if (lane == 0) {
                    const float alpha = expf(m_old - m_new);
                    l_s[r] = l_s[r] * alpha + sum;
                    m_s[r] = m_new;
                    alpha_s[r] = alpha;
                }
            }
        }
        __syncthreads();

        const float a0 = alpha_s[ty], a1 = alpha_s[ty + 32];
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o0[i] *= a0;
            o1[i] *= a1;
        }
        for (int j = 0; j < PF_BK; j++) {
            const float p0 = ss[ty * SLD + j], p1 = ss[(ty + 32) * SLD + j];
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                const float v = vs[j * LD + tx + 8 * i];
                o0[i] += p0 * v;
                o1[i] += p1 * v;
            }
        }
    }

    const float inv0 = 1.0f / l_s[ty], inv1 = 1.0f / l_s[ty + 32];
    if (ty < rows_here) {
        unsigned short* dst = out + (((long long)b * seqLen + q0 + ty) * heads + h) * D;
#pragma unroll
        for (int i = 0; i < D / 8; i++) dst[tx + 8 * i] = f32_to_bf16_rne(o0[i] * inv0);
    }
    if (ty + 32 < rows_here) {
        unsigned short* dst = out + (((long long)b * seqLen + q0 + ty + 32) * heads + h) * D;
#pragma unroll
        for (int i = 0; i < D / 8; i++) dst[tx + 8 * i] = f32_to_bf16_rne(o1[i] * inv1);
    }
}

#define DEFINE_PREFILL(D)                                                                   \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) attn_prefill_d##D(             \
        unsigned short* out, const unsigned short* q, const unsigned short* kCache,         \
        const unsigned short* vCache, const int* startPos, int seqLen, int heads,           \
        int kvHeads, int maxSeq) {                                                          \
        SB_PDL_WAIT();                                                                      \
        SB_PDL_LAUNCH_DEPENDENTS();                                                         \
        attn_prefill<D>(out, q, kCache, vCache, startPos, seqLen, heads, kvHeads, maxSeq); \
    }
DEFINE_PREFILL(32)
DEFINE_PREFILL(64)
DEFINE_PREFILL(128)

// Prefill attention v2: FlashAttention-2 on tensor cores (mma.sync m16n8k16
// bf16, fp32 accumulation), head_dim 64 and 128, sm_80 and later.
//
// Block: 4 warps (128 threads) own 64 query rows of one (head, sequence),
// 16 rows per warp. Key/value tiles of 64 keys stream through shared memory
// with cp.async, double-buffered (the next tile loads while this one is
// used). Shared rows are swizzled (16-byte chunk c of row r sits at chunk
// c ^ (r & 7)) so that ldmatrix's eight row reads hit eight bank groups.
// S = Q·Kᵀ stays in registers; its C fragments are reused as the A
// fragments of P·V (P rounded to bf16); the row max and sum of the online
// softmax are reduced across the 4 lanes that hold a row. Tiles past the
// query tile's last position are never loaded (causal); the heaviest query
// tiles (the last) are launched first.
//
// Double buffering's protocol, which the emulated device's warp-serial
// schedules check: the end-of-tile barrier comes before the next prefetch
// refills the buffer; smem_retire then marks the consumed tile dead (NaN on
// the emulated device), so a row the refill skips (a missing zero-fill) shows.
//
// Access counters (EMULATED, stepbench verify --counters at d128, b=1 s=128,
// pos 0 and 200): K/V tiles arrive as cp.async of 16 sectors per warp request
// (every byte used); ldmatrix reads of the swizzled tiles 0.015-0.05 bank
// conflicts per request (from the tile edges); the output store is 8 sectors
// per request with 50% of each used: a quad of lanes writes 16 bytes of a
// row (4-byte stores of two bf16), 8 rows per request. Staging the output
// tile through shared memory for 16-byte row stores would use every byte.

#define FA_BQ 64
#define FA_BK 64
#define FA_THREADS 128

// fa_chunk is the swizzled 16-byte chunk index of (row, chunk) in a tile
// whose rows hold D/8 chunks.
template <int D>
__device__ __forceinline__ int fa_chunk(int row, int chunk) {
    return row * (D / 8) + (chunk ^ (row & 7));
}

// fa_load_tile starts the copy of rows [0, rows) of a tile (row r from
// src + r*stride elements) into dst; rows past valid are zero-filled
// (masked keys must contribute 0, not whatever the memory holds).
template <int D>
__device__ __forceinline__ void fa_load_tile(unsigned short* dst, const unsigned short* src, long long stride,
                                             int valid) {
    for (int c = threadIdx.x; c < FA_BK * (D / 8); c += FA_THREADS) {
        const int row = c / (D / 8), ch = c - row * (D / 8);
        u32x4* d = (u32x4*)dst + fa_chunk<D>(row, ch);
        if (row < valid) {
            cp_async16(d, src + row * stride + ch * 8);
        } else {
            *d = u32x4{0, 0, 0, 0};
        }
    }
}

template <int D>
__device__ __noinline__ void attn_prefill_tc(unsigned short* __restrict__ out,
                                             const unsigned short* __restrict__ q,
                                             const unsigned short* __restrict__ kCache,
                                             const unsigned short* __restrict__ vCache,
                                             const int* __restrict__ startPosPtr, int seqLen, int heads,
                                             int kvHeads, int maxSeq) {
    unsigned short* qs = (unsigned short*)dyn_smem;      // [FA_BQ][D]
    unsigned short* ks = qs + FA_BQ * D;                 // [2][FA_BK][D]
    unsigned short* vs = ks + 2 * FA_BK * D;             // [2][FA_BK][D]

    const int qtile = gridDim.x - 1 - blockIdx.x;  // heavy (late) tiles first
    const int q0 = qtile * FA_BQ, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int kvh = h / (heads / kvHeads);
    const int startPos = *startPosPtr;
    const int rows_here = min(FA_BQ, seqLen - q0);
    const int keys_here = min(startPos + q0 + rows_here, maxSeq);
    const int ntiles = (keys_here + FA_BK - 1) / FA_BK;
    const long long pos_stride = (long long)kvHeads * D;
    const long long kv_base = (long long)b * maxSeq * pos_stride + (long long)kvh * D;
    // log2(e)/sqrt(D): scores go straight to exp2's domain.
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);

    // Q tile (rows past seqLen zero), then K/V tile 0: one group.
    {
        const long long q_stride = (long long)heads * D;
        const unsigned short* qsrc = q + ((long long)b * seqLen + q0) * q_stride + (long long)h * D;
        for (int c = tid; c < FA_BQ * (D / 8); c += FA_THREADS) {
            const int row = c / (D / 8), ch = c - row * (D / 8);
            u32x4* d = (u32x4*)qs + fa_chunk<D>(row, ch);
            if (row < rows_here) {
                cp_async16(d, qsrc + row * q_stride + ch * 8);
            } else {
                *d = u32x4{0, 0, 0, 0};
            }
        }
    }
    fa_load_tile<D>(ks, kCache + kv_base, pos_stride, min(FA_BK, keys_here));
    fa_load_tile<D>(vs, vCache + kv_base, pos_stride, min(FA_BK, keys_here));
    cp_async_commit();

    // This thread's two rows (g and g+8 of its warp's 16); rows past seqLen
    // act as the last real row so that none is ever fully masked.
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    const int qpos0 = startPos + q0 + min(r0, rows_here - 1);
    const int qpos1 = startPos + q0 + min(r1, rows_here - 1);

    unsigned qa[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = neg_inf_f32(), m1 = neg_inf_f32(), l0 = 0.0f, l1 = 0.0f;

    for (int tile = 0; tile < ntiles; tile++) {
        const int k0 = tile * FA_BK;
        if (tile + 1 < ntiles) {
            const int nb = (tile + 1) & 1;
            const long long at = kv_base + (long long)(k0 + FA_BK) * pos_stride;
            const int valid = min(FA_BK, keys_here - (k0 + FA_BK));
            fa_load_tile<D>(ks + nb * FA_BK * D, kCache + at, pos_stride, valid);
            fa_load_tile<D>(vs + nb * FA_BK * D, vCache + at, pos_stride, valid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (tile == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                ldmatrix_x4(qa[kk], qs + fa_chunk<D>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)) * 8);
            }
        }
        const unsigned short* kt = ks + (tile & 1) * FA_BK * D;
        const unsigned short* vt = vs + (tile & 1) * FA_BK * D;

        // S = Q·Kᵀ for this warp's 16 rows and the tile's 64 keys.
        float s[FA_BK / 8][4];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j += 2) {
                unsigned kb[4];
                const int key = j * 8 + (lane >> 4) * 8 + (lane & 7);
                ldmatrix_x4(kb, kt + fa_chunk<D>(key, 2 * kk + ((lane >> 3) & 1)) * 8);
                mma_m16n8k16_bf16(s[j], qa[kk], kb, s[j]);
                mma_m16n8k16_bf16(s[j + 1], qa[kk], kb + 2, s[j + 1]);
            }
        }

        // Scale, and the causal mask where the tile reaches past a row's
        // position (qpos0 <= qpos1: only tiles on the diagonal); row maxima
        // over the 4 lanes of each row.
        if (k0 + FA_BK - 1 <= qpos0) {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) s[j][i] *= scale_log2;
            }
        } else {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j++) {
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
        for (int j = 0; j < FA_BK / 8; j++) {
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // Key 0 is visible to every row, so after tile 0 each max is finite.
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) {
            // Rounded to bf16 here, so the sum divides exactly what P·V multiplies.
            s[j][0] = round_bf16(exp2f(s[j][0] - mn0));
            s[j][1] = round_bf16(exp2f(s[j][1] - mn0));
            s[j][2] = round_bf16(exp2f(s[j][2] - mn1));
            s[j][3] = round_bf16(exp2f(s[j][3] - mn1));
            sum0 += s[j][0] + s[j][1];
            sum1 += s[j][2] + s[j][3];
        }
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= alpha0;
            o[i][1] *= alpha0;
            o[i][2] *= alpha1;
            o[i][3] *= alpha1;
        }

        // O += P·V: P's C fragments, as bf16, are the A fragments (already
        // rounded and never NaN: taking the high halves is exact).
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) {
            unsigned pa[4];
            pa[0] = pack2_bf16_exact(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack2_bf16_exact(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack2_bf16_exact(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack2_bf16_exact(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int nb = 0; nb < D / 8; nb += 2) {
                unsigned vb[4];
                const int key = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                ldmatrix_x4_trans(vb, vt + fa_chunk<D>(key, nb + (lane >> 4)) * 8);
                mma_m16n8k16_bf16(o[nb], pa, vb, o[nb]);
                mma_m16n8k16_bf16(o[nb + 1], pa, vb + 2, o[nb + 1]);
            }
        }
        __syncthreads();  // the buffer is refilled by the next iteration's prefetch
        smem_retire(kt, FA_BK * D * 2);
        smem_retire(vt, FA_BK * D * 2);
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    const long long q_stride = (long long)heads * D;
    if (r0 < rows_here) {
        unsigned* dst = (unsigned*)(out + ((long long)b * seqLen + q0 + r0) * q_stride + (long long)h * D);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][0] * inv0, o[nb][1] * inv0);
    }
    if (r1 < rows_here) {
        unsigned* dst = (unsigned*)(out + ((long long)b * seqLen + q0 + r1) * q_stride + (long long)h * D);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][2] * inv1, o[nb][3] * inv1);
    }
}

#define DEFINE_PREFILL_TC(D)                                                                        \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) attn_prefill_tc_d##D(                  \
        unsigned short* out, const unsigned short* q, const unsigned short* kCache,                 \
        const unsigned short* vCache, const int* startPos, int seqLen, int heads, int kvHeads,      \
        int maxSeq) {                                                                               \
        SB_PDL_WAIT();                                                                              \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                 \
        attn_prefill_tc<D>(out, q, kCache, vCache, startPos, seqLen, heads, kvHeads, maxSeq);      \
    }
DEFINE_PREFILL_TC(64)
DEFINE_PREFILL_TC(128)

// Prefill attention v3: version 2's FlashAttention-2 on tensor cores with
// the issue count per tile brought down (issue 19), head_dim 64 and 128.
//
// What changed against version 2 (attn_prefill_tc), and why:
//  - Blocks of 8 warps (256 threads) own 128 query rows (16 per warp, as
//    before): each 64-key K/V tile that lands in shared memory feeds twice
//    the rows, so a thread issues half the cp.async per tile (4 for D = 128).
//    Warps whose 16 rows lie wholly before a tile skip its arithmetic (they
//    still copy and wait at its barriers), so no warp computes more tiles
//    than version 2 would.
//  - Every address is computed once, before the key loop: a thread copies
//    chunks tid, tid + 256, ... of a tile, which share the 16-byte column and
//    the swizzle (row & 7 is the same for all of them), so its cp.async
//    destinations and sources are a base plus a fixed stride; and each
//    lane's ldmatrix rows are one shared-window offset whose swizzled chunk
//    for k-step kk is that offset XOR 32*kk (K) or XOR 16*nb (V), the rest an
//    immediate. Version 2 recomputed both, with divisions, per tile.
//  - P is rounded and packed by cvt.rn.bf16x2.f32 (one instruction per
//    pair, round to nearest even as f32_to_bf16_rne for every non-NaN value;
//    P is never NaN), which gives the A fragments directly and, widened
//    back, the values the row sums add.
//  - The output is rescaled only when a row maximum moved in this tile
//    (a warp vote): multiplying by exactly 1 changes nothing.
// The sums are version 2's, in the same order (a tile that masks a row
// whole adds exact zeros): the output is bit-identical to version 2's,
// which verify checks.
//
// Double buffering's protocol is version 2's, checked by the warp-serial
// schedules: the end-of-tile barrier comes before the next prefetch
// refills the buffer, then smem_retire marks the consumed tile dead.
//
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas (NVRTC 11.8): attn_prefill3_d128 174 registers on sm_90 (178 on
//    sm_80), _d64 119 (126); 0 spills; 96 KB (D 128) / 48 KB (D 64) of
//    dynamic shared memory: one 256-thread block per SM at D 128 (version 2:
//    two of 128 threads at 173 registers and 80 KB), the same 8 warps.
//  - SASS (cuobjdump -sass, scripts/sass-mix), the key loop per warp and
//    64-key tile at D 128: 945 static instructions (24 of them never-taken
//    @!PT LDS that ptxas pads cp.async with), 128 HMMA, 72 LDSM (32 K + 32 V
//    + 8 of Q, issued once), 8 LDGSTS (4 K + 4 V chunks per thread), 16
//    F2FP.BF16.PACK_AB, 34 MUFU.EX2, 261 integer (version 2: 1732 static
//    with 978 integer, plus two cp.async loops of about 121 per 4 chunks run
//    twice each per tile: about 1,900 a tile; issue 19 counted 1,710); off
//    the diagonal the mask's 33 ISETP and 32 FSEL are skipped: about 840.
//    HMMA are 15% of the issued instructions instead of 6.5%.
//  - Predicted (not measured): version 2 issue-bound at about 1,900
//    instructions per 128 HMMA, version 3 near the mma.sync rate (about 0.6
//    HMMA m16n8k16 per SM clock on Hopper, 62% of the wgmma peak in
//    published microbenchmarks): from issue 19's estimate of 200-225
//    TFLOP/s for version 2 to about 400 (350-500) at 1 x 8192, i.e. the 17.6
//    TFLOP of a Llama-3-8B 8k prefill's attention from about 83 ms to about
//    44 ms on an H100/H200 (the same tensor-core rate), and 1.3 to 0.7 ms at
//    1 x 1024.

#define FA3_BQ 128
#define FA3_BK 64
#define FA3_THREADS 256

// ldsm_x4 / ldsm_x4_trans: ldmatrix from a tile at a byte offset (the
// shared-window address of the tile computed by the caller once).
__device__ __forceinline__ void ldsm_x4(unsigned r[4], const unsigned short* tile, unsigned tile_addr, unsigned off) {
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

__device__ __forceinline__ void ldsm_x4_trans(unsigned r[4], const unsigned short* tile, unsigned tile_addr,
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

// fa3_plan is one thread's share of copying a 64-row tile: chunks tid,
// tid + FA3_THREADS, ... of its BK x D/8 16-byte chunks all sit in column
// ch = tid % (D/8) of rows row0 + i * (FA3_THREADS / (D/8)), whose swizzle
// (row & 7) is row0's: a shared byte offset and a global element offset
// that advance by fixed strides.
template <int D>
struct fa3_plan {
    static constexpr int CPT = FA3_BK * (D / 8) / FA3_THREADS;  // chunks per thread
    static constexpr int ROWS_PER_STEP = FA3_THREADS / (D / 8);
    int row0;
    unsigned smem_off;  // bytes, chunk 0's
    long long src_off;  // elements, chunk 0's (row0's row, column ch)
};

template <int D>
__device__ __forceinline__ fa3_plan<D> fa3_make_plan(long long stride) {
    fa3_plan<D> p;
    const int ch = threadIdx.x % (D / 8);
    p.row0 = threadIdx.x / (D / 8);
    p.smem_off = (unsigned)(p.row0 * (D / 8) + (ch ^ (p.row0 & 7))) * 16;
    p.src_off = p.row0 * stride + ch * 8;
    return p;
}

// fa3_load_tile starts one tile's copy per the plan: rows [0, valid) from
// src (row r at src + r*stride), the rest zero-filled. full: every row valid.
template <int D>
__device__ __forceinline__ void fa3_load_tile(unsigned short* dst, const unsigned short* src, long long stride,
                                              const fa3_plan<D>& p, int valid, bool full) {
    constexpr int STEP_BYTES = fa3_plan<D>::ROWS_PER_STEP * D * 2;
    const long long step_src = fa3_plan<D>::ROWS_PER_STEP * stride;
    char* d = (char*)dst + p.smem_off;
    const unsigned short* s = src + p.src_off;
#pragma unroll
    for (int i = 0; i < fa3_plan<D>::CPT; i++) {
        if (full || p.row0 + i * fa3_plan<D>::ROWS_PER_STEP < valid) {
            cp_async16(d + i * STEP_BYTES, s + i * step_src);
        } else {
            *(u32x4*)(d + i * STEP_BYTES) = u32x4{0, 0, 0, 0};
        }
    }
}

// fa3_tile adds one 64-key tile to a warp's 16 rows: S = Q·Kᵀ, the causal
// mask on the diagonal, the online softmax and O += P·V, in version 2's
// order. kt/vt (and their shared-window addresses) are the tile's K and V,
// k_base/v_base the lane's ldmatrix offsets before the per-step XOR.
template <int D>
__device__ __forceinline__ void fa3_tile(float o[D / 8][4], float& m0, float& m1, float& l0, float& l1,
                                         const unsigned qa[D / 16][4], const unsigned short* kt, unsigned kt_addr,
                                         const unsigned short* vt, unsigned vt_addr, unsigned k_base,
                                         unsigned v_base, int k0, int qpos0, int qpos1, int t, float scale_log2) {
    float s[FA3_BK / 8][4];
#pragma unroll
    for (int j = 0; j < FA3_BK / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const unsigned off = k_base ^ (32u * kk);
#pragma unroll
        for (int j = 0; j < FA3_BK / 8; j += 2) {
            unsigned kb[4];
            ldsm_x4(kb, kt, kt_addr, off + 16u * j * D);
            mma_m16n8k16_bf16(s[j], qa[kk], kb, s[j]);
            mma_m16n8k16_bf16(s[j + 1], qa[kk], kb + 2, s[j + 1]);
        }
    }
    if (k0 + FA3_BK - 1 <= qpos0) {
#pragma unroll
        for (int j = 0; j < FA3_BK / 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) s[j][i] *= scale_log2;
        }
    } else {
#pragma unroll
        for (int j = 0; j < FA3_BK / 8; j++) {
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
    for (int j = 0; j < FA3_BK / 8; j++) {
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
    // P as bf16 pairs: the A fragments of P·V, and (widened back) the terms
    // of the row sums, added in version 2's order (key blocks j ascending).
    unsigned pa[FA3_BK / 16][4];
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA3_BK / 16; kk++) {
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
    // Rescale only when a maximum of the warp's rows moved (alpha != 1).
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
        for (int kk = 0; kk < FA3_BK / 16; kk++) {
            unsigned vb[4];
            ldsm_x4_trans(vb, vt, vt_addr, off + 32u * kk * D);
            mma_m16n8k16_bf16(o[nb], pa[kk], vb, o[nb]);
            mma_m16n8k16_bf16(o[nb + 1], pa[kk], vb + 2, o[nb + 1]);
        }
    }
}

template <int D>
__device__ __noinline__ void attn_prefill3(unsigned short* __restrict__ out, const unsigned short* __restrict__ q,
                                           const unsigned short* __restrict__ kCache,
                                           const unsigned short* __restrict__ vCache,
                                           const int* __restrict__ startPosPtr, int seqLen, int heads, int kvHeads,
                                           int maxSeq) {
    unsigned short* qs = (unsigned short*)dyn_smem;  // [FA3_BQ][D]
    unsigned short* ks = qs + FA3_BQ * D;            // [2][FA3_BK][D]
    unsigned short* vs = ks + 2 * FA3_BK * D;        // [2][FA3_BK][D]
    constexpr int TILE = FA3_BK * D;                 // elements of one K or V tile

    const int qtile = gridDim.x - 1 - blockIdx.x;  // heavy (late) tiles first
    const int q0 = qtile * FA3_BQ, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, r8 = lane & 7;
    const int kvh = h / (heads / kvHeads);
    const int startPos = *startPosPtr;
    const int rows_here = min(FA3_BQ, seqLen - q0);
    const int keys_here = min(startPos + q0 + rows_here, maxSeq);
    const int ntiles = (keys_here + FA3_BK - 1) / FA3_BK;
    const long long pos_stride = (long long)kvHeads * D;
    const long long kv_base = (long long)b * maxSeq * pos_stride + (long long)kvh * D;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
    const fa3_plan<D> plan = fa3_make_plan<D>(pos_stride);

    // Q tile (rows past seqLen zero), then K/V tile 0: one group.
    {
        const long long q_stride = (long long)heads * D;
        const unsigned short* qsrc = q + ((long long)b * seqLen + q0) * q_stride + (long long)h * D;
        for (int c = tid; c < FA3_BQ * (D / 8); c += FA3_THREADS) {
            const int row = c / (D / 8), ch = c - row * (D / 8);
            u32x4* d = (u32x4*)qs + fa_chunk<D>(row, ch);
            if (row < rows_here) {
                cp_async16(d, qsrc + row * q_stride + ch * 8);
            } else {
                *d = u32x4{0, 0, 0, 0};
            }
        }
    }
    fa3_load_tile<D>(ks, kCache + kv_base, pos_stride, plan, min(FA3_BK, keys_here), keys_here >= FA3_BK);
    fa3_load_tile<D>(vs, vCache + kv_base, pos_stride, plan, min(FA3_BK, keys_here), keys_here >= FA3_BK);
    cp_async_commit();

    // This thread's two rows; rows past seqLen act as the last real row so
    // that none is ever fully masked. The warp's rows end at its first row's
    // position + 15 (or the last real row).
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    const int qpos0 = startPos + q0 + min(r0, rows_here - 1);
    const int qpos1 = startPos + q0 + min(r1, rows_here - 1);
    const int warp_last = startPos + q0 + min(warp * 16 + 15, rows_here - 1);

    // ldmatrix offsets within a tile (bytes), before the per-step XOR: K's
    // rows are keys 8*(lane>>4) + r8 (+ 8j: an immediate) at chunk
    // 2kk + ((lane>>3)&1); V's keys 8*((lane>>3)&1) + r8 (+ 16kk) at chunk
    // nb + (lane>>4). With r8 = key & 7, chunk ^ r8 = step ^ z, z the lane's
    // constant: offset(step) = base ^ (16 * step), base < a row's bytes.
    const unsigned k_base = (unsigned)((8 * (lane >> 4) + r8) * D * 2) +
                            16u * (unsigned)((r8 & 6) | ((((lane >> 3) & 1) ^ r8) & 1));
    const unsigned v_base = (unsigned)((8 * ((lane >> 3) & 1) + r8) * D * 2) +
                            16u * (unsigned)((r8 & 6) | (((lane >> 4) ^ r8) & 1));
    const unsigned ks_addr = smem_addr(ks), vs_addr = smem_addr(vs);

    unsigned qa[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = neg_inf_f32(), m1 = neg_inf_f32(), l0 = 0.0f, l1 = 0.0f;

    for (int tile = 0; tile < ntiles; tile++) {
        const int k0 = tile * FA3_BK;
        if (tile + 1 < ntiles) {
            const int nb = (tile + 1) & 1;
            const long long at = kv_base + (long long)(k0 + FA3_BK) * pos_stride;
            const int valid = min(FA3_BK, keys_here - (k0 + FA3_BK));
            fa3_load_tile<D>(ks + nb * TILE, kCache + at, pos_stride, plan, valid, valid == FA3_BK);
            fa3_load_tile<D>(vs + nb * TILE, vCache + at, pos_stride, plan, valid, valid == FA3_BK);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // tile `tile` has landed for every thread
        if (tile == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                ldmatrix_x4(qa[kk], qs + fa_chunk<D>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)) * 8);
            }
        }
        const unsigned short* kt = ks + (tile & 1) * TILE;
        const unsigned short* vt = vs + (tile & 1) * TILE;
        const unsigned kt_addr = ks_addr + (tile & 1) * TILE * 2, vt_addr = vs_addr + (tile & 1) * TILE * 2;
        if (k0 <= warp_last) {  // else every key of the tile is past this warp's rows: nothing to add
            fa3_tile<D>(o, m0, m1, l0, l1, qa, kt, kt_addr, vt, vt_addr, k_base, v_base, k0, qpos0, qpos1, t,
                        scale_log2);
        }
        __syncthreads();  // every warp is done with tile `tile`: the next prefetch may refill it
        smem_retire(kt, TILE * 2);
        smem_retire(vt, TILE * 2);
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    const long long q_stride = (long long)heads * D;
    if (r0 < rows_here) {
        unsigned* dst = (unsigned*)(out + ((long long)b * seqLen + q0 + r0) * q_stride + (long long)h * D);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][0] * inv0, o[nb][1] * inv0);
    }
    if (r1 < rows_here) {
        unsigned* dst = (unsigned*)(out + ((long long)b * seqLen + q0 + r1) * q_stride + (long long)h * D);
#pragma unroll
        for (int nb = 0; nb < D / 8; nb++) dst[nb * 4 + t] = pack2(o[nb][2] * inv1, o[nb][3] * inv1);
    }
}

#define DEFINE_PREFILL3(D)                                                                                   \
    extern "C" __global__ void __launch_bounds__(FA3_THREADS) attn_prefill3_d##D(                            \
        unsigned short* out, const unsigned short* q, const unsigned short* kCache,                          \
        const unsigned short* vCache, const int* startPos, int seqLen, int heads, int kvHeads, int maxSeq) { \
        SB_PDL_WAIT();                                                                                       \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                          \
        attn_prefill3<D>(out, q, kCache, vCache, startPos, seqLen, heads, kvHeads, maxSeq);                  \
    }
DEFINE_PREFILL3(64)
DEFINE_PREFILL3(128)

// Decode attention v2: flash-decoding bound by memory bandwidth.
//
// Block (split, kv head, sequence), 128 threads. A key row of D bf16 is
// D/8 16-byte chunks: D/8 lanes (LPK) read one row, each its own chunk, so a
// warp reads 32/LPK rows per load with every access 16 bytes and coalesced.
// Every query head of the kv head (G of them, a template bound >= the real
// group) is scored against the same K chunk and accumulates the same V
// chunk: K and V are read once per split. DEC_UNROLL keys per lane group are
// loaded before any is used, so each thread has 2*DEC_UNROLL*16 bytes in
// flight. Each lane group keeps an online softmax (running max, sum, and
// its 8 dims of the output per head); the groups of the block are merged
// through shared memory and written as one partial per head to the same
// workspace layout as v1, which attn_decode_combine merges across splits.
//
// Access counters (EMULATED, stepbench verify --counters, d128 g4, pos 1000
// and 4095): K and V loads 14.7-15.1 sectors per warp request with every
// byte used (the coalesced 16-byte design); the merge's shared-memory stores
// 3.2 bank conflicts per request (lane groups write their per-head partials
// at a stride that maps several lanes to one bank), a small share of the
// kernel's traffic next to the K/V stream.

#define DEC_THREADS 128
#define DEC_UNROLL 4

// decode2_partial is version 2's work of one block: it writes the block's
// partial of every query head of its kv head, or returns false at once when
// its split holds no keys at this step (uniform across the block).
template <int D, int G>
__device__ __forceinline__ bool decode2_partial(float* __restrict__ ws, const unsigned short* __restrict__ q,
                                                const unsigned short* __restrict__ kCache,
                                                const unsigned short* __restrict__ vCache,
                                                const int* __restrict__ startPos, int batch, int heads,
                                                int kvHeads, int maxSeq, int chunk, int splits) {
    constexpr int LPK = D / 8;           // lanes per key row
    constexpr int KPW = 32 / LPK;        // key rows per warp per load
    constexpr int GROUPS = (DEC_THREADS / 32) * KPW;
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int keys = min(*startPos + 1, maxSeq);
    const int j0 = split * chunk;
    if (j0 >= keys) return false;  // uniform across the block
    const int j1 = min(j0 + chunk, keys);
    const int group = heads / kvHeads;  // <= G, the wrapper guarantees it
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int c = lane % LPK, sub = lane / LPK, grp = warp * KPW + sub;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);

    float qf[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g < group) {
            const u32x4 v = ((const u32x4*)(q + ((long long)b * heads + (long long)kvh * group + g) * D))[c];
            unpack8(v, qf[g]);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) qf[g][e] = 0.0f;
        }
    }
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = neg_inf_f32();
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    }
    const long long pos_stride = (long long)kvHeads * D;
    const unsigned short* kbase = kCache + (long long)b * maxSeq * pos_stride + (long long)kvh * D + c * 8;
    const unsigned short* vbase = vCache + (long long)b * maxSeq * pos_stride + (long long)kvh * D + c * 8;

    // The loop bound is the warp's first key, so every lane of a warp runs the
    // same iterations (the shuffles below need all 32); lanes past the end
    // load nothing and score -inf.
    for (int jw = j0 + warp * KPW; jw < j1; jw += GROUPS * DEC_UNROLL) {
        const int j = jw + sub;
        u32x4 kv[DEC_UNROLL], vv[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int jj = j + u * GROUPS;
            if (jj < j1) {
                kv[u] = *(const u32x4*)(kbase + jj * pos_stride);
                vv[u] = *(const u32x4*)(vbase + jj * pos_stride);
            } else {
                kv[u] = vv[u] = u32x4{0, 0, 0, 0};
            }
        }
        float s[DEC_UNROLL][G];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            float kf[8];
            unpack8(kv[u], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) dot += qf[g][e] * kf[e];
#pragma unroll
                for (int off = LPK / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
                s[u][g] = j + u * GROUPS < j1 ? dot * scale_log2 : neg_inf_f32();
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) mx = fmaxf(mx, s[u][g]);
            // A lane group whose keys all lie past the end keeps m = -inf: no update.
            if (mx == neg_inf_f32()) continue;
            const float alpha = exp2f(m[g] - mx);
            m[g] = mx;
            l[g] *= alpha;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] *= alpha;
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                const float p = exp2f(s[u][g] - mx);
                float vf[8];
                unpack8(vv[u], vf);
                l[g] += p;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] += p * vf[e];
            }
        }
    }

    // Merge the block's lane groups: [GROUPS][G][D] sums, [GROUPS][G] maxima and sums.
    float* sacc = dyn_smem;
    float* sm = sacc + GROUPS * G * D;
    float* sl = sm + GROUPS * G;
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int e = 0; e < 8; e++) sacc[(grp * G + g) * D + c * 8 + e] = acc[g][e];
        if (c == 0) {
            sm[grp * G + g] = m[g];
            sl[grp * G + g] = l[g];
        }
    }
    __syncthreads();
    const long long part0 = ((long long)b * heads + (long long)kvh * group) * splits + split;
    float* ws_acc = ws;
    float* ws_ml = ws + (long long)batch * heads * splits * D;
    for (int idx = tid; idx < group * D; idx += DEC_THREADS) {
        const int g = idx / D, d = idx - g * D;
        float mx = neg_inf_f32();
        for (int r = 0; r < GROUPS; r++) mx = fmaxf(mx, sm[r * G + g]);
        float a = 0.0f, sum = 0.0f;
        for (int r = 0; r < GROUPS; r++) {
            const float w = exp2f(sm[r * G + g] - mx);  // empty groups: exp2(-inf) = 0
            a += w * sacc[(r * G + g) * D + d];
            sum += w * sl[r * G + g];
        }
        ws_acc[(part0 + (long long)g * splits) * D + d] = a;
        if (d == 0) {
            // attn_decode_combine works in e's domain: log2 maxima times ln 2.
            ws_ml[(part0 + (long long)g * splits) * 2] = mx * 0.6931471805599453f;
            ws_ml[(part0 + (long long)g * splits) * 2 + 1] = sum;
        }
    }
    return true;
}

template <int D, int G>
__device__ __noinline__ void attn_decode2(float* __restrict__ ws, const unsigned short* __restrict__ q,
                                          const unsigned short* __restrict__ kCache,
                                          const unsigned short* __restrict__ vCache,
                                          const int* __restrict__ startPos, int batch, int heads,
                                          int kvHeads, int maxSeq, int chunk, int splits) {
    decode2_partial<D, G>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits);
}

#define DEFINE_DECODE2(D, G)                                                                            \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) attn_decode2_d##D##_g##G(                 \
        float* ws, const unsigned short* q, const unsigned short* kCache, const unsigned short* vCache, \
        const int* startPos, int batch, int heads, int kvHeads, int maxSeq, int chunk, int splits) {     \
        SB_PDL_WAIT();                                                                                   \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                      \
        attn_decode2<D, G>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits); \
    }
DEFINE_DECODE2(64, 1)
DEFINE_DECODE2(64, 2)
DEFINE_DECODE2(64, 4)
DEFINE_DECODE2(64, 8)
DEFINE_DECODE2(128, 1)
DEFINE_DECODE2(128, 2)
DEFINE_DECODE2(128, 4)
DEFINE_DECODE2(128, 8)

// Decode attention v3: version 2 with the combine fused in, one launch per
// layer instead of two. Each block writes its partial as v2 does, then
// counts itself in (b, kv head)'s counter (an int after the partials,
// zero between launches: AttentionWorkspaceBytes includes the counters, the
// backend zeroes a workspace once when it allocates it, and the block that
// combines puts its counter back to 0). The block that counts last (of the
// splits that hold keys) merges the partials of its kv head's query heads
// exactly as attn_decode_combine does, in the same order: the output is
// bit-identical to version 2's. Ordering: every thread fences its partial
// writes (__threadfence) before the barrier after which one thread takes
// the ticket; the last block fences again before reading the others'
// partials through L2 (__ldcg).
//
// What it saves, per decode step of Llama-3-8B: 32 launches (and 32 graph
// nodes), about 2-3 us each of launch latency and 1.5 us of inter-node gap
// on an H100/H200 class GPU (the issue's estimate: 32 x ~3.5 us = 0.11 ms
// per step at batch 1, predicted, not measured), for one block per kv head
// reading live x group x (D + 2) x 4 bytes of partials from L2 (17 x 4 x
// 130 x 4 = 35 KB at batch 1 and 1k keys) at the end of the launch.
//
// Evidence without a GPU: ptxas (NVRTC 11.8, sm_90) attn_decode3_d128_g1/
// g2/g4/g8 71/95/128/245 registers (version 2: 69/96/157/241), 0 spills,
// 16-80 B static shared (the ticket and the heads' max and sum). SASS
// (cuobjdump, scripts/sass-mix): the key loop is version 2's (d128_g4: 891
// instructions per trip of 4 keys per lane group, 8 LDG.E.128 = 4 KB of K/V
// per warp, against 883); the function grows from 1942 to 2783 static
// instructions, the combine's loops, run by one block per kv head. Emulated:
// verify's decode v3 check also demands version 2's bits at every decode
// shape; a counter left unreset (a seeded bug) fails the replayed graph.
// decode_combine_last is version 3's tail, after a block wrote its
// partial: it counts the block in its kv head's counter and, in the block
// that counts last, merges the live splits of the kv head's query heads
// into out (attn_decode_combine's sums, in its order) and resets the counter.
template <int D, int G>
__device__ __forceinline__ void decode_combine_last(unsigned short* __restrict__ out, float* __restrict__ ws,
                                                    const int* __restrict__ startPos, int batch, int heads,
                                                    int kvHeads, int maxSeq, int chunk, int splits) {
    __shared__ int is_last;
    __shared__ float norm_s[G][2];
    const int kvh = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int group = heads / kvHeads;
    const int live = decode_live_splits(startPos, maxSeq, chunk, splits);
    int* counters = (int*)(ws + (long long)batch * heads * splits * (D + 2));
    int* counter = counters + (long long)b * kvHeads + kvh;
    __threadfence();  // this thread's partial writes, before the ticket
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(counter, 1) == live - 1;
    __syncthreads();
    if (!is_last) return;  // uniform across the block
    __threadfence();  // the other blocks' partials, after their tickets
    const long long bh0 = (long long)b * heads + (long long)kvh * group;
    for (int g = tid; g < group; g += blockDim.x) {
        decode_head_norm(ws, bh0 + g, live, batch, heads, D, splits, &norm_s[g][0], &norm_s[g][1]);
    }
    __syncthreads();
    for (int idx = tid; idx < group * D; idx += blockDim.x) {
        const int g = idx / D;
        decode_head_dim(out, ws, bh0 + g, live, batch, heads, D, splits, norm_s[g][0], norm_s[g][1], idx - g * D);
    }
    if (tid == 0) *counter = 0;  // every live block has counted: none reads it again this launch
}

template <int D, int G>
__device__ __noinline__ void attn_decode3(unsigned short* __restrict__ out, float* __restrict__ ws,
                                          const unsigned short* __restrict__ q,
                                          const unsigned short* __restrict__ kCache,
                                          const unsigned short* __restrict__ vCache,
                                          const int* __restrict__ startPos, int batch, int heads,
                                          int kvHeads, int maxSeq, int chunk, int splits) {
    if (!decode2_partial<D, G>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits)) {
        return;
    }
    decode_combine_last<D, G>(out, ws, startPos, batch, heads, kvHeads, maxSeq, chunk, splits);
}

#define DEFINE_DECODE3(D, G)                                                                                 \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) attn_decode3_d##D##_g##G(                      \
        unsigned short* out, float* ws, const unsigned short* q, const unsigned short* kCache,               \
        const unsigned short* vCache, const int* startPos, int batch, int heads, int kvHeads, int maxSeq,    \
        int chunk, int splits) {                                                                             \
        SB_PDL_WAIT();                                                                                       \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                          \
        attn_decode3<D, G>(out, ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits); \
    }
DEFINE_DECODE3(64, 1)
DEFINE_DECODE3(64, 2)
DEFINE_DECODE3(64, 4)
DEFINE_DECODE3(64, 8)
DEFINE_DECODE3(128, 1)
DEFINE_DECODE3(128, 2)
DEFINE_DECODE3(128, 4)
DEFINE_DECODE3(128, 8)

// Decode attention v4: flash-decoding on tensor cores, the combine fused
// as in version 3 (issue 19: decode attention for batches of 8 and more,
// where version 2's 890 instructions per 4 KB of K/V bound it, with the
// kv head's query heads as the M dimension of mma.m16n8k16).
//
// Block (split, kv head, sequence), 4 warps; the split's keys go to the
// warps in sub-tiles of 16 (warp w takes sub-tiles w, w+4, ...), each warp
// an online softmax of its own, merged through shared memory at the end
// into version 2's partial (so version 3's last-block combine finishes it).
// Per sub-tile and warp:
//  - S = Q·Kᵀ: Q (the G <= 8 heads as rows g of the A tile, rows g+8 zero)
//    and K go straight from global memory into fragments: lane (g, t) loads
//    16 bytes of key row g at d = 32c + 8t, the k-slots {2t, 2t+1, 2t+8,
//    2t+9} of two mma (as gemv.cu; the same permutation of d in Q and K):
//    16 sectors per request, every byte used, no shared memory.
//  - V goes through a warp-private shared tile (cp.async, swizzled as the
//    prefill's), read by ldmatrix.trans as B fragments; keys past the split
//    are zero-filled (P is 0 there, and 0·NaN of a stale row would not be).
//  - P is rounded by cvt.rn.bf16x2.f32 into the A fragments of P·V;
//    the output is rescaled only when the maximum moved.
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas (NVRTC 11.8): attn_decode4_d128_gG 176 registers on sm_90 (184
//    on sm_80), _d64 106; 0 spills; dynamic shared 16 KB of V tiles + the
//    merge's 4 x G x D floats (33 KB at D 128, G 8).
//  - SASS (cuobjdump, scripts/sass-mix), d128_g4: the sub-tile loop issues
//    362 instructions per warp and 16 keys (8 KB of K and V): 32 HMMA, 8
//    LDG.E.128 (K), 8 LDGSTS (V), 8 LDSM.T, 72 fp32, 5 MUFU, 122 integer;
//    version 2's key loop 883 per 4 KB, i.e. 4.9x the instructions per byte.
//    Streaming 8 KB per SM at 4.8 TB/s takes 445 clocks (18.4 B/clock/SM):
//    0.8 instructions per clock of the 4 an SM issues, so the kernel is
//    predicted bandwidth-bound where version 2 was issue-bound (issue 19:
//    +0.77 ms per step at batch 32).
//  - Predicted (not measured), Llama-3-8B batch 32 over 1k keys: K and V
//    134 MB per layer at 85% of 4.8 TB/s: 33 us per layer, 1.05 ms per
//    step, against issue 19's 1.66 ms for version 2 (its 0.89 ms floor +
//    0.77); at batch 1 (4.2 MB per layer, latency-bound) about version 3's.
//  - Access counters (EMULATED, verify --counters, b=1 pos=300 d128 g4): V's
//    cp.async 15.9 sectors per request, every byte used; K's loads are 16
//    sectors per request by construction (8 rows x 64 bytes), averaged in
//    the kernel's global loads (7.9) with the fused combine's 1-sector
//    broadcast reads of the partials.
//  - Numerics: P is rounded to bf16 before P·V (as in the prefill kernels),
//    so version 4 is within 2.3e-3 of the twin where versions 2 and 3 keep
//    P in fp32 (within 2e-4): the bf16 tolerance either way.
//
// Only the warp's own lanes touch its V tile: __syncwarp after the
// cp.async wait (every lane's copies visible to the others) and after the
// ldmatrix (before the next sub-tile's copies refill it) is the protocol.

#define DEC4_SUB 16
#define DEC4_WARPS 4

// decode4_load_k loads 16 bytes of a key row: a plain load in version 4;
// in version 5 (FRESH), whose block may have written the row in this
// launch, ld.global.cg, which is coherent with that write after the
// block's barrier (a plain load of a const __restrict__ row may become the
// non-coherent ld.global.nc).
template <bool FRESH>
__device__ __forceinline__ u32x4 decode4_load_k(const unsigned short* p) {
    if (FRESH) {
        const uint4 v = __ldcg((const uint4*)p);
        return u32x4{v.x, v.y, v.z, v.w};
    }
    return *(const u32x4*)p;
}

// decode4_sub adds one 16-key sub-tile (keys kb0..kb0+15 of [.., j1)) to a
// warp's state: o (O's D fragments, rows g), m and l (row g's).
template <int D, bool FRESH>
__device__ __forceinline__ void decode4_sub(float o[D / 8][4], float& m, float& l, const unsigned qa[D / 32][2][4],
                                            const unsigned short* __restrict__ krow0, const unsigned short* __restrict__ vrow0,
                                            long long pos_stride, unsigned short* vt, int kb0, int j1,
                                            float scale_log2) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // V sub-tile copy: chunk c = lane + 32i of 16 rows x D/8 chunks.
#pragma unroll
    for (int i = 0; i < DEC4_SUB * (D / 8) / 32; i++) {
        const int c = lane + 32 * i, row = c / (D / 8), ch = c % (D / 8);
        u32x4* d = (u32x4*)vt + fa_chunk<D>(row, ch);
        if (kb0 + row < j1) {
            cp_async16(d, vrow0 + (long long)(kb0 + row) * pos_stride + ch * 8);
        } else {
            *d = u32x4{0, 0, 0, 0};
        }
    }
    cp_async_commit();
    // S for keys kb0 + 8nb + g (clamped into the split: masked below).
    float s[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; nb++) {
        const int key = min(kb0 + 8 * nb + g, j1 - 1);
        const unsigned short* kr = krow0 + (long long)key * pos_stride + 8 * t;
        u32x4 kv[D / 32];
#pragma unroll
        for (int c = 0; c < D / 32; c++) kv[c] = decode4_load_k<FRESH>(kr + 32 * c);
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 32; c++) {
            const unsigned b_lo[2] = {kv[c].x, kv[c].y};
            const unsigned b_hi[2] = {kv[c].z, kv[c].w};
            mma_m16n8k16_bf16(s[nb], qa[c][0], b_lo, s[nb]);
            mma_m16n8k16_bf16(s[nb], qa[c][1], b_hi, s[nb]);
        }
    }
    // Row g's scores: keys kb0 + 8nb + 2t + i (i = 0, 1); rows g+8 are padding.
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
    const float mn = fmaxf(m, mx);  // the sub-tile's first key lies in the split: finite
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
    cp_async_wait<0>();
    __syncwarp();  // every lane's V rows have landed
#pragma unroll
    for (int nb = 0; nb < D / 8; nb += 2) {
        unsigned vb[4];
        ldmatrix_x4_trans(vb, vt + fa_chunk<D>(((lane >> 3) & 1) * 8 + (lane & 7), nb + (lane >> 4)) * 8);
        mma_m16n8k16_bf16(o[nb], pa, vb, o[nb]);
        mma_m16n8k16_bf16(o[nb + 1], pa, vb + 2, o[nb + 1]);
    }
    __syncwarp();  // the V tile is read: the next sub-tile may refill it
    smem_retire(vt, DEC4_SUB * D * 2);
}

// decode4_partial is version 4's work of one block before the combine: the
// warps' sub-tiles, then their merge into version 2's partial of each query
// head; false when the split holds no keys (uniform across the block).
// FRESH (version 5): q is the kv head's rotated query heads in shared
// memory (group x D), and the block may have written a key row itself.
template <int D, int G, bool FRESH>
__device__ __forceinline__ bool decode4_partial(float* __restrict__ ws, const unsigned short* __restrict__ q,
                                                const unsigned short* __restrict__ kCache,
                                                const unsigned short* __restrict__ vCache,
                                                const int* __restrict__ startPos, int batch, int heads,
                                                int kvHeads, int maxSeq, int chunk, int splits) {
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int keys = min(*startPos + 1, maxSeq);
    const int j0 = split * chunk;
    if (j0 >= keys) return false;
    const int j1 = min(j0 + chunk, keys);
    const int group = heads / kvHeads;  // <= G <= 8, the wrapper guarantees it
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
    // Shared: each warp's V tile [16][D] bf16, then the merge's [warps][G][D]
    // sums and [warps][G] maxima and sums (floats).
    unsigned short* vt = (unsigned short*)dyn_smem + warp * DEC4_SUB * D;
    float* sacc = (float*)((unsigned short*)dyn_smem + DEC4_WARPS * DEC4_SUB * D);
    float* sm = sacc + DEC4_WARPS * G * D;
    float* sl = sm + DEC4_WARPS * G;

    // Q's A fragments, rows g (heads; g >= group zero), d permuted as K's.
    unsigned qa[D / 32][2][4];
    {
        const u32x4 zero = {0, 0, 0, 0};
        const long long q_head = FRESH ? 0 : (long long)b * heads + (long long)kvh * group;
        const unsigned short* qr = q + (q_head + min(g, group - 1)) * D + 8 * t;
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
    const long long pos_stride = (long long)kvHeads * D;
    const long long base = (long long)b * maxSeq * pos_stride + (long long)kvh * D;
    for (int kb0 = j0 + warp * DEC4_SUB; kb0 < j1; kb0 += DEC4_WARPS * DEC4_SUB) {
        decode4_sub<D, FRESH>(o, m, l, qa, kCache + base, vCache + base, pos_stride, vt, kb0, j1, scale_log2);
    }
    // Row sums over the 4 lanes of a row; the warp's state to shared memory.
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
    __syncthreads();
    const long long part0 = ((long long)b * heads + (long long)kvh * group) * splits + split;
    float* ws_acc = ws;
    float* ws_ml = ws + (long long)batch * heads * splits * D;
    for (int idx = tid; idx < group * D; idx += DEC4_WARPS * 32) {
        const int hg = idx / D, d = idx - hg * D;
        float mx = neg_inf_f32();
        for (int w = 0; w < DEC4_WARPS; w++) mx = fmaxf(mx, sm[w * G + hg]);
        float a = 0.0f, sum = 0.0f;
        for (int w = 0; w < DEC4_WARPS; w++) {
            const float wt = exp2f(sm[w * G + hg] - mx);  // a warp with no keys: exp2(-inf) = 0
            a += wt * sacc[(w * G + hg) * D + d];
            sum += wt * sl[w * G + hg];
        }
        ws_acc[(part0 + (long long)hg * splits) * D + d] = a;
        if (d == 0) {
            ws_ml[(part0 + (long long)hg * splits) * 2] = mx * 0.6931471805599453f;
            ws_ml[(part0 + (long long)hg * splits) * 2 + 1] = sum;
        }
    }
    return true;
}

template <int D, int G>
__device__ __noinline__ void attn_decode4(unsigned short* __restrict__ out, float* __restrict__ ws,
                                          const unsigned short* __restrict__ q,
                                          const unsigned short* __restrict__ kCache,
                                          const unsigned short* __restrict__ vCache,
                                          const int* __restrict__ startPos, int batch, int heads,
                                          int kvHeads, int maxSeq, int chunk, int splits) {
    if (!decode4_partial<D, G, false>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits)) {
        return;
    }
    decode_combine_last<D, G>(out, ws, startPos, batch, heads, kvHeads, maxSeq, chunk, splits);
}

#define DEFINE_DECODE4(D, G)                                                                                 \
    extern "C" __global__ void __launch_bounds__(DEC4_WARPS * 32) attn_decode4_d##D##_g##G(                  \
        unsigned short* out, float* ws, const unsigned short* q, const unsigned short* kCache,               \
        const unsigned short* vCache, const int* startPos, int batch, int heads, int kvHeads, int maxSeq,    \
        int chunk, int splits) {                                                                             \
        SB_PDL_WAIT();                                                                                       \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                          \
        attn_decode4<D, G>(out, ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits); \
    }
DEFINE_DECODE4(64, 1)
DEFINE_DECODE4(64, 2)
DEFINE_DECODE4(64, 4)
DEFINE_DECODE4(64, 8)
DEFINE_DECODE4(128, 1)
DEFINE_DECODE4(128, 2)
DEFINE_DECODE4(128, 4)
DEFINE_DECODE4(128, 8)

// Decode attention v5: version 4 with rope_kv_write fused into its
// prologue (issue 19 item 2: one launch fewer per layer and decode step).
// It reads the step's fused qkv rows [batch][(heads + 2 kvHeads) D] (the
// rows rope_kv_write reads) instead of rotated q:
//  - every live block (split, kv head, sequence) rotates the q heads of its
//    kv head into shared memory (group x D bf16; redundant across splits,
//    G x D x 2 B of qkv per block, from L2 after the first);
//  - the one block of each (kv head, sequence) whose split holds the new
//    position p = *startPos (split p / chunk: the only split whose keys
//    [j0, min(j0 + chunk, p + 1)) include p) rotates k and writes k and v
//    of the new token into the caches, then __syncthreads, then the block
//    reads its keys (version 4's sub-tiles, K loaded by ld.global.cg). No
//    other block of the launch reads row p of that kv head, so there is no
//    cross-block race; startPos is read from device memory by every block,
//    so a replayed graph picks the writer anew at each position.
// The rotation is rope_kv_write2's, op for op (bf16 cos and sin of the
// same sincosf, each product rounded, the sum rounded): the caches and the
// output are bit-identical to rope_kv_write version 2 + attn_decode
// version 4, which verify demands.
//
// Napkin math (PREDICTED, not measured), Llama-3-8B decode, per layer: the
// rotated q's round trip through global memory goes (8 KB written by
// rope_kv_write and read back by attention per token); each block reads its
// group's q (4 heads x 256 B) and the block of p also 4 KB of k and v. At
// batch 1 the step is launch-bound: 32 launches and graph nodes fewer per
// step (262 -> 230), at about 2-6 us of a small kernel's latency plus about
// 1.5 us of graph-node gap each, 0.1-0.24 ms per step. The prologue adds a
// sincosf per pair (D/2 per block) and a barrier before the key loop.
//
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas (NVRTC 11.8, stepbench build --arch 80,90): attn_decode5_d128_gG
//    168 registers on sm_90 (version 4: 176; 3 blocks of 4 warps per SM by
//    registers instead of 2), 182 on sm_80 (184), _d64 106 (104); 0 spills;
//    a 32-byte stack frame (version 4: none): sincosf's slow-path argument
//    reduction for large angles keeps its words in local memory (with
//    sincosf replaced the frame is 0 B); static shared 784-2640 B (q_s G x D
//    bf16, cos and sin D/2 floats each, version 4's ticket and heads'
//    norms) beside version 4's dynamic shared memory.
//  - Access counters (EMULATED, verify --counters, L1 sectors of global
//    requests, not DRAM bytes): b=1 pos=4095 h32 kv8 d128, rope_kv_write2
//    + attn_decode4 19.20 MB against attn_decode5's 18.50 MB (each warp's q
//    fragment loads from global become one qkv read per block and shared
//    reads); b=2 pos=0: 230 KB against 154 KB; b=8 pos=1000: 36.06 against
//    35.06 MB.
//  - Emulated: verify's "attention decode v5" demands the output's and both
//    caches' bits of rope_kv_write 2 + attn_decode 4 at every decode shape
//    (Llama-3-8B's heads at batch 4 pos 1030, positions 0 and 1000 at batch
//    1 and 3, one-split and ragged-tail shapes), under the forward order and
//    TestEmulatorSchedules' reverse, random and warp-serial orders; the
//    replayed decode graph crosses a chunk boundary (the writer moves to the
//    next split). Seeded bugs: without the prologue's last barrier every
//    d128 shape fails under warp-serial and warp-serial-reverse; the first
//    split writing the new key instead of the split holding it fails under
//    the reverse order (blocks run last-first: the reader finds the row
//    poisoned), and hides in launch order.

// decode5_rope_prologue rotates the kv head's group of q heads into q_s
// and, in the block whose split holds position pos, writes rotated k and
// raw v of the new token to the caches (rope_kv_write2's numerics).
template <int D>
__device__ __forceinline__ void decode5_rope_prologue(unsigned short* __restrict__ q_s, unsigned short* kCache,
                                                      unsigned short* vCache, const unsigned short* __restrict__ qkv,
                                                      const float* __restrict__ invFreq, float* cos_s, float* sin_s,
                                                      int pos, bool writes, int heads, int kvHeads, int maxSeq) {
    constexpr int half = D / 2, vecs = half / 8;
    const int kvh = blockIdx.y, b = blockIdx.z, tid = threadIdx.x, group = heads / kvHeads;
    for (int i = tid; i < half; i += blockDim.x) {
        float s, c;
        sincosf((float)pos * invFreq[i], &s, &c);
        cos_s[i] = round_bf16(c);
        sin_s[i] = round_bf16(s);
    }
    __syncthreads();
    const int q_width = heads * D, kv_width = kvHeads * D;
    const unsigned short* row = qkv + (long long)b * (q_width + 2 * kv_width);
    const long long cache_at = ((long long)b * maxSeq + pos) * kv_width + (long long)kvh * D;
    // Items: the group's q heads, then (the writer) k of this kv head, then its v.
    const int rot = (group + (writes ? 1 : 0)) * vecs;
    const int items = rot + (writes ? D / 8 : 0);
    for (int idx = tid; idx < items; idx += blockDim.x) {
        if (idx >= rot) {
            const int i = (idx - rot) * 8;
            *(u32x4*)(vCache + cache_at + i) = *(const u32x4*)(row + q_width + kv_width + kvh * D + i);
            continue;
        }
        const int h = idx / vecs, i = (idx - h * vecs) * 8;
        const unsigned short* x = h < group ? row + (kvh * group + h) * D : row + q_width + kvh * D;
        unsigned short* dst = h < group ? q_s + h * D : kCache + cache_at;
        float lo[8], hi[8], out_lo[8], out_hi[8];
        unpack8(*(const u32x4*)(x + i), lo);
        unpack8(*(const u32x4*)(x + i + half), hi);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float c = cos_s[i + e], s = sin_s[i + e];
            out_lo[e] = round_bf16(lo[e] * c) + round_bf16(-hi[e] * s);
            out_hi[e] = round_bf16(hi[e] * c) + round_bf16(lo[e] * s);
        }
        *(u32x4*)(dst + i) = pack8(out_lo);
        *(u32x4*)(dst + i + half) = pack8(out_hi);
    }
    __syncthreads();  // q_s, and the new key's row, before any warp reads them
}

template <int D, int G>
__device__ __noinline__ void attn_decode5(unsigned short* __restrict__ out, float* __restrict__ ws,
                                          const unsigned short* __restrict__ qkv, unsigned short* kCache,
                                          unsigned short* vCache, const float* __restrict__ invFreq,
                                          const int* __restrict__ startPos, int batch, int heads, int kvHeads,
                                          int maxSeq, int chunk, int splits) {
    __shared__ __align__(16) unsigned short q_s[G * D];
    __shared__ float cos_s[D / 2];
    __shared__ float sin_s[D / 2];
    const int pos = *startPos;
    const int keys = min(pos + 1, maxSeq), j0 = blockIdx.x * chunk;
    if (j0 >= keys) return;  // uniform: the split holds no keys (version 4 returns here too)
    const bool writes = pos < maxSeq && pos < j0 + chunk;  // this split holds the new key
    decode5_rope_prologue<D>(q_s, kCache, vCache, qkv, invFreq, cos_s, sin_s, pos, writes, heads, kvHeads, maxSeq);
    if (!decode4_partial<D, G, true>(ws, q_s, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq, chunk, splits)) {
        return;
    }
    decode_combine_last<D, G>(out, ws, startPos, batch, heads, kvHeads, maxSeq, chunk, splits);
}

#define DEFINE_DECODE5(D, G)                                                                                  \
    extern "C" __global__ void __launch_bounds__(DEC4_WARPS * 32) attn_decode5_d##D##_g##G(                   \
        unsigned short* out, float* ws, const unsigned short* qkv, unsigned short* kCache,                    \
        unsigned short* vCache, const float* invFreq, const int* startPos, int batch, int heads, int kvHeads, \
        int maxSeq, int chunk, int splits) {                                                                  \
        SB_PDL_WAIT();                                                                                        \
        SB_PDL_LAUNCH_DEPENDENTS();                                                                           \
        attn_decode5<D, G>(out, ws, qkv, kCache, vCache, invFreq, startPos, batch, heads, kvHeads, maxSeq,    \
                           chunk, splits);                                                                    \
    }
DEFINE_DECODE5(64, 1)
DEFINE_DECODE5(64, 2)
DEFINE_DECODE5(64, 4)
DEFINE_DECODE5(64, 8)
DEFINE_DECODE5(128, 1)
DEFINE_DECODE5(128, 2)
DEFINE_DECODE5(128, 4)
DEFINE_DECODE5(128, 8)

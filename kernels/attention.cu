// attention.cu — causal GQA attention over the KV cache [batch][maxSeq][kvHeads][D].
//
// startPos is read from device memory (one int), so that a decode step
// captured in a CUDA graph replays correctly at every position.
// Query (b, s) sits at position startPos+s and sees cache positions
// 0..startPos+s of sequence b; query head h reads kv head h / (heads/kvHeads).
// score = fp32 dot(q, k) * (1/sqrtf(D)); softmax in fp32; out = bf16(sum p*v / sum p).
//
// Two paths, chosen by the Go wrapper:
//  - decode (seqLen == 1): flash-decoding. attn_decode_split_dD handles one
//    (split, kv head, batch): all query heads of the kv group, so each K/V row
//    is read from memory once per group, and keys [split*chunk, ...) of the
//    cache. It writes unnormalised partials (max, sum, acc) to a float32
//    workspace; attn_decode_combine merges the splits.
//  - prefill (seqLen > 1): attn_prefill_dD, FlashAttention-2 style tiles of
//    64 queries x 32 keys through shared memory with an online softmax, fp32
//    CUDA cores (no tensor cores yet).
//
// Workspace layout (decode), with P = batch*heads*splits partials:
//   acc[P][D] floats, then ml[P][2] floats (max, sum); partial index
//   (b*heads + h)*splits + split.

extern __shared__ float dyn_smem[];

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
        attn_decode_split<D>(ws, q, kCache, vCache, startPos, batch, heads, kvHeads, maxSeq,  \
                             chunk, splits);                                                  \
    }
DEFINE_DECODE(32)
DEFINE_DECODE(64)
DEFINE_DECODE(128)

// attn_decode_combine: grid (heads, batch). Merges the partials of the
// splits that held keys (the others wrote nothing this step):
// out = sum_i exp(m_i - M) acc_i / sum_i exp(m_i - M) l_i, M = max_i m_i.
extern "C" __global__ void attn_decode_combine(unsigned short* __restrict__ out,
                                               const float* __restrict__ ws,
                                               const int* __restrict__ startPos, int maxSeq,
                                               int batch, int heads, int headDim, int chunk,
                                               int splits) {
    const int h = blockIdx.x, b = blockIdx.y;
    const int keys = min(*startPos + 1, maxSeq);
    const int live = min(splits, (keys + chunk - 1) / chunk);
    const long long bh = (long long)b * heads + h;
    const float* ml = ws + (long long)batch * heads * splits * headDim + bh * splits * 2;
    const float* acc = ws + bh * splits * headDim;
    float m_all = neg_inf_f32();
    for (int i = 0; i < live; i++) m_all = fmaxf(m_all, ml[2 * i]);
    float l_all = 0.0f;
    for (int i = 0; i < live; i++) l_all += expf(ml[2 * i] - m_all) * ml[2 * i + 1];
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        float o = 0.0f;
        for (int i = 0; i < live; i++) o += expf(ml[2 * i] - m_all) * acc[i * headDim + d];
        out[bh * headDim + d] = f32_to_bf16_rne(o / l_all);
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
        attn_prefill<D>(out, q, kCache, vCache, startPos, seqLen, heads, kvHeads, maxSeq); \
    }
DEFINE_PREFILL(32)
DEFINE_PREFILL(64)
DEFINE_PREFILL(128)

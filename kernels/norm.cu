// norm.cu — fused residual add + RMSNorm.

// add_rmsnorm, one block per row (blockDim a multiple of 32):
//   residual = bf16(residual + add)  (when add != NULL; written back)
//   ms       = mean(residual^2)      (fp32 block reduction)
//   out      = bf16(weight * bf16(residual * rsqrt(ms + eps)))
// The wrapper guarantees hidden % 8 == 0 and 16-byte aligned pointers.
extern "C" __global__ void add_rmsnorm(u32x4* __restrict__ out, u32x4* __restrict__ residual,
                                       const u32x4* __restrict__ add,
                                       const u32x4* __restrict__ weight, int rows, int hidden,
                                       float eps) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const int vecs = hidden / 8;
    const long long base = (long long)row * vecs;
    u32x4* res = residual + base;

    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
        float x[8];
        unpack8(res[i], x);
        if (add != 0) {
            float a[8];
            unpack8(add[base + i], a);
            for (int j = 0; j < 8; j++) x[j] = round_bf16(x[j] + a[j]);
            res[i] = pack8(x);  // exact: x already holds bf16 values
        }
        for (int j = 0; j < 8; j++) sum_sq += x[j] * x[j];
    }
    const float ms = block_sum(sum_sq, scratch) / (float)hidden;
    const float inv_rms = rsqrtf(ms + eps);

    // Each thread re-reads only the vectors it wrote itself above.
    for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
        float x[8], w[8];
        unpack8(res[i], x);
        unpack8(weight[i], w);
        for (int j = 0; j < 8; j++) x[j] = w[j] * round_bf16(x[j] * inv_rms);
        out[base + i] = pack8(x);
    }
}

// qk_norm — Qwen2's q/k/v bias and Qwen3's per-head RMSNorm of q and k, in
// place on the fused q/k/v projection's rows, before rope_kv_write (twin:
// ref.QKNorm). One warp per (token, head) of the row's heads + 2*kv_heads
// heads (QK_NORM_WARPS warps a block); lane l holds the head's 16-byte
// vectors l, l+32, ...:
//   x = bf16(x + bias)                       (bias != NULL; every head, v included)
//   q, k heads (q_norm / k_norm != NULL):
//   x = bf16(w * bf16(x * rsqrt(mean(x^2) + eps)))   (warp_sum of fp32 squares)
// A v head without a bias has nothing to do: its warp returns at once.
// The wrapper guarantees head_dim % 8 == 0 and 16-byte aligned pointers.
//
// Napkin math (ESTIMATE, datasheet peaks), Qwen3-8B (32 q + 8 k heads of
// 128, no bias): per token 40 heads × 128 × 2 B read and written = 20 KB
// (+ 512 B of weights once) and 4 FLOPs per element = 20 KFLOP. Decode at
// batch 1: 20 KB is 6 ns at the H100's 3.35 TB/s (4 ns at the H200's
// 4.8 TB/s): the launch (about 2-4 µs, less from a CUDA graph) is the
// cost, 36 per step, which is what fusing it into rope_kv_write would save
// (the cost model's floor of qk_norm's decode bytes is 0.2 µs a step: derived).
// Prefill of 1024 tokens, 36 layers: 755 MB, 225 µs at 3.35 TB/s, against
// the step's compute floor of 14.7 ms: 1.5% (`roofline --model qwen3-8b
// --ops`, derived). Qwen2.5-7B's bias (28 + 2×4 heads of 128): 9 KB read
// and written per token and layer, the same story.
// ptxas (compiler, NVRTC 11.8, `stepbench build`): sm_80 and sm_90 31 registers,
// no spills, no shared memory; 128 threads, 16 blocks/SM, 100% occupancy.
#define QK_NORM_WARPS 4
extern "C" __global__ void __launch_bounds__(QK_NORM_WARPS * 32)
qk_norm(u32x4* __restrict__ qkv, const u32x4* __restrict__ bias, const u32x4* __restrict__ q_norm,
        const u32x4* __restrict__ k_norm, int tokens, int heads, int kv_heads, int head_dim, float eps) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int lane = threadIdx.x & 31;
    const int row_heads = heads + 2 * kv_heads;
    const long long pair = (long long)blockIdx.x * QK_NORM_WARPS + (threadIdx.x >> 5);
    if (pair >= (long long)tokens * row_heads) return;  // a whole warp: no barrier below
    const int head = (int)(pair % row_heads);
    const u32x4* w = head < heads ? q_norm : (head < heads + kv_heads ? k_norm : 0);
    if (w == 0 && bias == 0) return;
    const int vecs = head_dim / 8;
    u32x4* x = qkv + pair * vecs;
    const u32x4* b = bias == 0 ? 0 : bias + (long long)head * vecs;

    float sum_sq = 0.0f;
    for (int i = lane; i < vecs; i += 32) {
        float v[8];
        unpack8(x[i], v);
        if (b != 0) {
            float a[8];
            unpack8(b[i], a);
            for (int j = 0; j < 8; j++) v[j] = round_bf16(v[j] + a[j]);
            x[i] = pack8(v);  // exact: v holds bf16 values
        }
        for (int j = 0; j < 8; j++) sum_sq += v[j] * v[j];
    }
    if (w == 0) return;  // the warp agrees: w depends on the head alone
    const float inv_rms = rsqrtf(warp_sum(sum_sq) / (float)head_dim + eps);
    // Each lane re-reads only the vectors it wrote itself above.
    for (int i = lane; i < vecs; i += 32) {
        float v[8], g[8];
        unpack8(x[i], v);
        unpack8(w[i], g);
        for (int j = 0; j < 8; j++) v[j] = g[j] * round_bf16(v[j] * inv_rms);
        x[i] = pack8(v);
    }
}

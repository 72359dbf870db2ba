// moe.cu — the mixture-of-experts layer of Qwen3-MoE and Mixtral (issue 34),
// version 1: the router's top-k, the token-to-expert alignment of vLLM's
// moe_align_block_size, and the decode step's fused MoE as three memory-bound
// launches (gate_up with SiLU·mul in its epilogue, down with the routing
// weight in its epilogue, the sum over the top-k). Twins: ref.RouterTopK,
// ref.MoEAlign, ref.FusedMoE (kernels/ref/moe.go).
//
// Napkin math, decode, one layer (bytes from HBM; H100 SXM 3.35 TB/s, H200
// 4.8 TB/s datasheet; ESTIMATE, nothing measured on a GPU):
//   Qwen3-30B-A3B (H 2048, N 768, E 128, k 8), batch 1: 8 experts touched,
//     each w13 2·768·2048·2 = 6.29 MB and w2 3.15 MB: 75.5 MB per layer,
//     22.5 µs (H100) / 15.7 µs (H200) at the roof; 48 layers 1.08 / 0.75 ms.
//     At batch 32 E·(1-(1-k/E)^T) = 111.8 experts are expected touched
//     (ref.ExpectedExpertsTouched): 1.05 GB, 315 / 220 µs per layer.
//   Mixtral-8x7B (H 4096, N 14336, E 8, k 2), batch 1: 2 experts of
//     w13 235 MB + w2 117 MB: 704 MB, 210 / 147 µs per layer.
// FLOPs per token 2·k·3·H·N: Qwen3-30B-A3B 75.5 MFLOP, far below the
// ridge: every kernel here streams weights; the activations (x: H·2 bytes,
// act: k·N·2, y: k·H·2 per token) are L2-resident.
//
// Layout: w13 [E, 2N, H] (gate rows then up rows, vLLM's w13_weight), w2
// [E, H, N]; ids, weights [T, k] (int32, float32) from moe_topk; act [T·k, N]
// and y [T·k, H] bf16 scratch.
//
// ptxas (NVRTC 11.8, sm_90, stepbench build): see docs/moe.md's table; no
// kernel here spills.

#define MOE_MAX_EXPERTS 256
#define MOE_PER_LANE (MOE_MAX_EXPERTS / 32)
#define MOE_THREADS 128
#define MOE_ROWS_PER_WARP 2
#define MOE_ROWS_PER_BLOCK (MOE_ROWS_PER_WARP * (MOE_THREADS / 32))
#define MOE_ALIGN_THREADS 256
#define MOE_ALIGN_MAX_EXPERTS 1024

// moe_topk: one warp per token. The softmax over the experts in fp32 (the
// largest logit subtracted first), then k rounds of a warp argmax (the
// larger probability, on a tie the lower expert index), and with
// renormalize each chosen weight divided by the fp32 sum of the chosen.
// experts <= MOE_MAX_EXPERTS, 1 <= k <= experts (the launcher checks).
extern "C" __global__ void moe_topk(int* __restrict__ ids, float* __restrict__ weights,
                                    const unsigned short* __restrict__ logits, int tokens,
                                    int experts, int k, int renormalize) {
    const int lane = threadIdx.x & 31;
    const int token = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (token >= tokens) return;
    const unsigned short* row = logits + (long long)token * experts;
    float p[MOE_PER_LANE];
    float peak = neg_inf_f32();
    for (int i = 0; i < MOE_PER_LANE; i++) {
        const int e = lane + 32 * i;
        p[i] = e < experts ? bf16_to_f32(row[e]) : neg_inf_f32();
        peak = fmaxf(peak, p[i]);
    }
    peak = warp_max(peak);
    float sum = 0.0f;
    for (int i = 0; i < MOE_PER_LANE; i++) {
        const int e = lane + 32 * i;
        p[i] = e < experts ? expf(p[i] - peak) : 0.0f;
        sum += p[i];
    }
    sum = warp_sum(sum);
    for (int i = 0; i < MOE_PER_LANE; i++) p[i] = lane + 32 * i < experts ? p[i] / sum : -1.0f;
    float kept = 0.0f;
    for (int j = 0; j < k; j++) {
        float best = -1.0f;
        int best_e = 0x7fffffff;
        for (int i = 0; i < MOE_PER_LANE; i++) {
            const int e = lane + 32 * i;
            if (p[i] > best) best = p[i], best_e = e;  // i ascending: the lower index wins a tie
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, off);
            const int oe = __shfl_xor_sync(0xffffffffu, best_e, off);
            if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
        }
        if ((best_e & 31) == lane) p[best_e >> 5] = -1.0f;  // taken: never chosen again
        kept += best;
        if (lane == 0) ids[token * k + j] = best_e, weights[token * k + j] = best;
    }
    __syncwarp();
    if (renormalize && lane < k) weights[token * k + lane] /= kept;
}

// moe_align: one block. Counts each expert's slots (shared atomics), pads
// each count to a multiple of block_size in expert order (thread 0's serial
// prefix over at most MOE_ALIGN_MAX_EXPERTS experts), writes each padded
// block's expert, fills the pads with slots (the pad value: the count of
// slots), then scatters every slot to its expert's group through an atomic
// cursor: within a group the order is the atomics' (a check compares each
// block's slots as a set). sorted must hold slots + experts·(block_size-1).
extern "C" __global__ void moe_align(int* __restrict__ sorted, int* __restrict__ expert_of,
                                     int* __restrict__ num_padded, const int* __restrict__ ids,
                                     int slots, int experts, int block_size) {
    __shared__ int count[MOE_ALIGN_MAX_EXPERTS];
    __shared__ int start[MOE_ALIGN_MAX_EXPERTS + 1];
    for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < slots; i += blockDim.x) {
        const int e = ids[i];
        if (e >= 0 && e < experts) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int at = 0;
        for (int e = 0; e < experts; e++) {
            start[e] = at;
            at += (count[e] + block_size - 1) / block_size * block_size;
        }
        start[experts] = at;
        *num_padded = at;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        for (int b = start[e] / block_size; b < start[e + 1] / block_size; b++) expert_of[b] = e;
        for (int i = start[e] + count[e]; i < start[e + 1]; i++) sorted[i] = slots;
        count[e] = start[e];  // from here on: expert e's cursor
    }
    __syncthreads();
    for (int i = threadIdx.x; i < slots; i += blockDim.x) {
        const int e = ids[i];
        if (e >= 0 && e < experts) sorted[atomicAdd(&count[e], 1)] = i;
    }
}

// moe_dot8 is a warp's fp32 dot product of two bf16 vectors of n elements
// (n % 8 == 0, 16-byte aligned), lanes striding over 8-element pieces; the
// sum over lanes is the butterfly's, the same in every lane.
__device__ __forceinline__ float moe_dot8(const unsigned short* __restrict__ a,
                                          const unsigned short* __restrict__ b, int n, int lane) {
    float acc = 0.0f;
    for (int c = lane; c < n / 8; c += 32) {
        float fa[8], fb[8];
        unpack8(((const u32x4*)a)[c], fa);
        unpack8(((const u32x4*)b)[c], fb);
        for (int j = 0; j < 8; j++) acc += fa[j] * fb[j];
    }
    return warp_sum(acc);
}

// moe_gate_up: block (x, slot) computes MOE_ROWS_PER_BLOCK of the slot's
// inter activations: for row n, g = bf16(x · w13[e][n]) and u = bf16(x ·
// w13[e][N+n]), act = bf16(bf16(silu(g)) · u) (ref.SiluMul of the gate_up
// row). Each warp owns MOE_ROWS_PER_WARP rows; hidden % 8 == 0.
extern "C" __global__ void moe_gate_up(unsigned short* __restrict__ act,
                                       const unsigned short* __restrict__ x,
                                       const unsigned short* __restrict__ w13,
                                       const int* __restrict__ ids, int k, int hidden, int inter) {
    const int slot = blockIdx.y, lane = threadIdx.x & 31;
    const int e = ids[slot];
    const unsigned short* xr = x + (long long)(slot / k) * hidden;
    const unsigned short* w = w13 + (long long)e * 2 * inter * hidden;
    const int first = blockIdx.x * MOE_ROWS_PER_BLOCK + (threadIdx.x >> 5) * MOE_ROWS_PER_WARP;
    for (int r = 0; r < MOE_ROWS_PER_WARP; r++) {
        const int n = first + r;
        if (n >= inter) break;
        const float g = round_bf16(moe_dot8(xr, w + (long long)n * hidden, hidden, lane));
        const float u = round_bf16(moe_dot8(xr, w + (long long)(inter + n) * hidden, hidden, lane));
        if (lane == 0) act[(long long)slot * inter + n] = f32_to_bf16_rne(round_bf16(g / (1.0f + expf(-g))) * u);
    }
}

// moe_down: block (x, slot) computes MOE_ROWS_PER_BLOCK of the slot's hidden
// outputs y[h] = bf16(weight · (act · w2[e][h])), the routing weight applied
// to the fp32 dot product; inter % 8 == 0.
extern "C" __global__ void moe_down(unsigned short* __restrict__ y, const unsigned short* __restrict__ act,
                                    const unsigned short* __restrict__ w2, const int* __restrict__ ids,
                                    const float* __restrict__ weights, int hidden, int inter) {
    const int slot = blockIdx.y, lane = threadIdx.x & 31;
    const int e = ids[slot];
    const float weight = weights[slot];
    const unsigned short* a = act + (long long)slot * inter;
    const unsigned short* w = w2 + (long long)e * hidden * inter;
    const int first = blockIdx.x * MOE_ROWS_PER_BLOCK + (threadIdx.x >> 5) * MOE_ROWS_PER_WARP;
    for (int r = 0; r < MOE_ROWS_PER_WARP; r++) {
        const int h = first + r;
        if (h >= hidden) break;
        const float d = moe_dot8(a, w + (long long)h * inter, inter, lane);
        if (lane == 0) y[(long long)slot * hidden + h] = f32_to_bf16_rne(weight * d);
    }
}

// moe_sum: out[t, h] = bf16(Σ_j f32(y[t·k + j, h])), j in order; grid-stride.
extern "C" __global__ void moe_sum(unsigned short* __restrict__ out, const unsigned short* __restrict__ y,
                                   int tokens, int k, int hidden) {
    const long long total = (long long)tokens * hidden;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long t = i / hidden, h = i - t * hidden;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc += bf16_to_f32(y[(t * k + j) * hidden + h]);
        out[i] = f32_to_bf16_rne(acc);
    }
}

// attn_decode_kernel.cuh — the device code of the nvcc recipe: decode
// attention on __nv_bfloat16 (cuda_bf16.h) over the paged KV cache of op
// ABI 2, one block of 128 threads per (sequence, query head), keys read
// through the block table (any page size; K and V by their strides) in
// chunks of 256 with an online softmax, the number of keys read from
// seq_lens on the device (a captured step replays right). head_dim up to
// 128, any GQA group. Kept apart from the host code
// so that a real NVRTC with the CUDA headers can compile it in the tests
// (runner/gpu/headers_test.go) where no nvcc is installed.
#pragma once
#include <cuda_bf16.h>

#define NVCC_EX_THREADS 128
#define NVCC_EX_CHUNK 256
#define NVCC_EX_NEG_INF __int_as_float(0xff800000) // -inf without math.h (NVRTC has none)

__device__ inline float nvcc_ex_block_reduce(float x, float *scratch, bool take_max) {
    scratch[threadIdx.x] = x;
    __syncthreads();
    for (int s = NVCC_EX_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]) : scratch[threadIdx.x] + scratch[threadIdx.x + s];
        __syncthreads();
    }
    const float r = scratch[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void __launch_bounds__(NVCC_EX_THREADS)
nvcc_attn_decode(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, const int *block_table,
                 const int *seq_lens, const int *query_start, int H, int K, int D, int PS, int MP, long long ks0, long long ks1,
                 long long ks2, long long vs0, long long vs1, long long vs2) {
    __shared__ float qs[128];
    __shared__ float scores[NVCC_EX_CHUNK];
    __shared__ float scratch[NVCC_EX_THREADS];
    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x, kvh = h / (H / K);
    if (query_start[b + 1] - query_start[b] != 1) return; // decode: one new token a sequence
    const long long row = query_start[b];
    const int keys = seq_lens[b];
    const int *pages = block_table + (long long)b * MP;
    const __nv_bfloat16 *kbase = kc + kvh * ks2, *vbase = vc + kvh * vs2 + t;
    const float scale = rsqrtf((float)D);
    if (t < D) qs[t] = __bfloat162float(q[(row * H + h) * D + t]);
    __syncthreads();
    float m = NVCC_EX_NEG_INF, l = 0.0f, acc = 0.0f;
    for (int c0 = 0; c0 < keys; c0 += NVCC_EX_CHUNK) {
        const int n = min(NVCC_EX_CHUNK, keys - c0);
        float cmax = NVCC_EX_NEG_INF;
        for (int j = t; j < n; j += NVCC_EX_THREADS) {
            const int key = c0 + j;
            const __nv_bfloat16 *krow = kbase + pages[key / PS] * ks0 + (key % PS) * ks1;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += qs[d] * __bfloat162float(krow[d]);
            scores[j] = s * scale;
            cmax = fmaxf(cmax, s * scale);
        }
        const float mnew = fmaxf(m, nvcc_ex_block_reduce(cmax, scratch, true));
        const float rescale = __expf(m - mnew);
        float psum = 0.0f;
        for (int j = t; j < n; j += NVCC_EX_THREADS) {
            const float p = __expf(scores[j] - mnew);
            scores[j] = p;
            psum += p;
        }
        l = l * rescale + nvcc_ex_block_reduce(psum, scratch, false);
        acc *= rescale;
        if (t < D)
            for (int j = 0; j < n; j++) {
                const int key = c0 + j;
                acc += scores[j] * __bfloat162float(vbase[pages[key / PS] * vs0 + (key % PS) * vs1]);
            }
        m = mnew;
        __syncthreads();
    }
    if (t < D) out[(row * H + h) * D + t] = __float2bfloat16(keys > 0 ? acc / l : 0.0f);
}

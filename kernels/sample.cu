// sample.cu — greedy sampling.
//
// Versions (--kernel argmax=N): 1, argmax: one block of 512 threads per row;
// 2, argmax2_partial + argmax2_final: the row split in chunks of
// ARGMAX_CHUNK logits over as many blocks, then one warp per row merges
// them (vocab % 8 == 0; a float workspace of rows x chunks pairs).
// Napkin math at Llama-3-8B (vocab 128256): 256.5 KB of logits per row,
// 77 ns at 3.35 TB/s (H100), 53 ns at 4.8 TB/s (H200); version 1 reads a
// row with one SM (about 5-10 us at one SM's share of the bandwidth),
// version 2 with 32 blocks.

// better reports whether (v, i) beats (best, best_i): larger value, or the same
// value at a smaller index (first index of the max). NaN never wins because
// every comparison with NaN is false, and best starts at -inf with index
// INT_MAX so any non-NaN value beats "nothing found".
__device__ __forceinline__ bool better(float v, int i, float best, int best_i) {
    return v > best || (v == best && i < best_i);
}

// argmax: out[r] = first index of the max of logits[r, :]; 0 when the row
// holds only NaN (as kernels/ref.Argmax). One block per row, blockDim a
// multiple of 32 and at most 1024. vec8 when vocab % 8 == 0 and aligned.
extern "C" __global__ void argmax(int* __restrict__ out, const unsigned short* __restrict__ logits,
                                  int rows, int vocab, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ float best_vals[32];
    __shared__ int best_idxs[32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const unsigned short* x = logits + (long long)row * vocab;

    float best = neg_inf_f32();
    int best_i = 0x7fffffff;
    if (vec8) {
        const u32x4* xv = (const u32x4*)x;
        for (int v = threadIdx.x; v < vocab / 8; v += blockDim.x) {
            float f[8];
            unpack8(xv[v], f);
            for (int j = 0; j < 8; j++) {
                if (better(f[j], v * 8 + j, best, best_i)) { best = f[j]; best_i = v * 8 + j; }
            }
        }
    } else {
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float f = bf16_to_f32(x[i]);
            if (better(f, i, best, best_i)) { best = f; best_i = i; }
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, off);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
        if (better(ov, oi, best, best_i)) { best = ov; best_i = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { best_vals[warp] = best; best_idxs[warp] = best_i; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        best = lane < warps ? best_vals[lane] : neg_inf_f32();
        best_i = lane < warps ? best_idxs[lane] : 0x7fffffff;
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, off);
            const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
            if (better(ov, oi, best, best_i)) { best = ov; best_i = oi; }
        }
        if (lane == 0) out[row] = best_i == 0x7fffffff ? 0 : best_i;
    }
}

// argmax2, pass 1: grid (chunks, rows); block c of row r finds the first
// index of the max in logits[r, c*ARGMAX_CHUNK ...) with 16-byte loads and
// writes (value, index) to partials[r][c]. Pass 2, argmax2_final: one warp
// per row merges the chunks in order. NaN never wins; a row of NaN gives 0.
#define ARGMAX_CHUNK 4096
#define ARGMAX_THREADS 256

struct alignas(8) argmax_pair {
    float value;
    int index;
};

// warp_argmax: every lane of a full warp ends with the warp's best
// (value, index) under better.
__device__ __forceinline__ void warp_argmax(float& best, int& best_i) {
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, off);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
        if (better(ov, oi, best, best_i)) {
            best = ov;
            best_i = oi;
        }
    }
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax2_partial(argmax_pair* __restrict__ partials,
                                                                              const unsigned short* __restrict__ logits,
                                                                              int rows, int vocab, int chunks) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ float best_vals[ARGMAX_THREADS / 32];
    __shared__ int best_idxs[ARGMAX_THREADS / 32];
    const int c = blockIdx.x, row = blockIdx.y;
    const unsigned short* x = logits + (long long)row * vocab;
    const int begin = c * ARGMAX_CHUNK, end = min(vocab, begin + ARGMAX_CHUNK);
    float best = neg_inf_f32();
    int best_i = 0x7fffffff;
    // vocab % 8 == 0 and a 16-byte aligned row: the wrapper guarantees it.
    for (int v = begin / 8 + threadIdx.x; v < end / 8; v += ARGMAX_THREADS) {
        float f[8];
        unpack8(((const u32x4*)x)[v], f);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (better(f[j], v * 8 + j, best, best_i)) {
                best = f[j];
                best_i = v * 8 + j;
            }
        }
    }
    warp_argmax(best, best_i);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        best_vals[warp] = best;
        best_idxs[warp] = best_i;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < ARGMAX_THREADS / 32 ? best_vals[lane] : neg_inf_f32();
        best_i = lane < ARGMAX_THREADS / 32 ? best_idxs[lane] : 0x7fffffff;
        warp_argmax(best, best_i);
        if (lane == 0) partials[(long long)row * chunks + c] = argmax_pair{best, best_i};
    }
}

extern "C" __global__ void argmax2_final(int* __restrict__ out, const argmax_pair* __restrict__ partials, int rows,
                                         int chunks) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int row = blockIdx.x, lane = threadIdx.x;
    float best = neg_inf_f32();
    int best_i = 0x7fffffff;
    for (int c = lane; c < chunks; c += 32) {
        const argmax_pair p = partials[(long long)row * chunks + c];
        if (better(p.value, p.index, best, best_i)) {
            best = p.value;
            best_i = p.index;
        }
    }
    warp_argmax(best, best_i);
    if (lane == 0) out[row] = best_i == 0x7fffffff ? 0 : best_i;
}

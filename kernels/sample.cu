// sample.cu — greedy sampling.

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

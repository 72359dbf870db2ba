// tp.cu — tensor parallelism: the vocabulary-parallel argmax.
//
// Each rank holds a slice of lm_head's rows. argmax_keys reduces its slice
// of each logits row to one 64-bit key (kernels/ref.ArgmaxKey) that orders
// candidates as argmax does: the value's bits made to order as unsigned
// integers above the complement of the global index, so a larger value wins
// and, among equal values, the lower index. An all-reduce with max over the
// ranks leaves the global argmax's key on every rank; key_index turns it
// back into the token index. Key 0 stands for a row without a non-NaN value.

__device__ __forceinline__ unsigned long long argmax_key(float v, int index) {
    unsigned int u = v == 0.0f ? 0u : __float_as_uint(v);  // -0 is +0
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(0xFFFFFFFFu - (unsigned int)index);
}

__device__ __forceinline__ unsigned long long key_max(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}

// argmax_keys: keys[r] = the largest argmax_key of the non-NaN values of
// logits[r, :] (column j is the vocabulary's index vocab_start + j), or 0.
// One block per row, blockDim a multiple of 32 and at most 1024. vec8 when
// vocab % 8 == 0 and logits is 16-byte aligned.
extern "C" __global__ void argmax_keys(unsigned long long* __restrict__ keys, const unsigned short* __restrict__ logits,
                                       int rows, int vocab, int vocab_start, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ unsigned long long warp_best[32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const unsigned short* x = logits + (long long)row * vocab;
    unsigned long long best = 0;
    if (vec8) {
        const u32x4* xv = (const u32x4*)x;
        for (int v = threadIdx.x; v < vocab / 8; v += blockDim.x) {
            float f[8];
            unpack8(xv[v], f);
            for (int j = 0; j < 8; j++) {
                if (f[j] == f[j]) best = key_max(best, argmax_key(f[j], vocab_start + v * 8 + j));
            }
        }
    } else {
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float f = bf16_to_f32(x[i]);
            if (f == f) best = key_max(best, argmax_key(f, vocab_start + i));
        }
    }
    for (int off = 16; off > 0; off >>= 1) best = key_max(best, __shfl_xor_sync(0xffffffffu, best, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
        best = lane < (int)(blockDim.x >> 5) ? warp_best[lane] : 0ull;
        for (int off = 16; off > 0; off >>= 1) best = key_max(best, __shfl_xor_sync(0xffffffffu, best, off));
        if (lane == 0) keys[row] = best;
    }
}

// key_index: out[r] = the index keys[r] holds; 0 for key 0 (as argmax gives
// for a row of NaN).
extern "C" __global__ void key_index(int* __restrict__ out, const unsigned long long* __restrict__ keys, int rows) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const unsigned long long k = keys[r];
    out[r] = k == 0ull ? 0 : (int)(0xFFFFFFFFu - (unsigned int)(k & 0xFFFFFFFFull));
}

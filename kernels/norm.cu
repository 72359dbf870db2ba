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

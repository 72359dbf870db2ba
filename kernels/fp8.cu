// fp8.cu — FP8 (E4M3) activation quantization and the dequantization
// epilogue around cuBLASLt's FP8 GEMM (twin: kernels/ref/fp8.go).
//
// A quantized linear layer runs: quantize x (bf16 -> e4m3 with a scale),
// cublasLtMatmul (e4m3 x e4m3, fp32 accumulation), and, only where a scale
// is a vector cuBLASLt's scalar scale pointers cannot apply (per-token x,
// per-channel w), fp8_scale_out over the fp32 product. Scales follow vLLM:
// s = max(absmax / 448, 1/(448·512)), q = e4m3(x · (1/s)), saturating.
//
// Napkin math at Llama-3-8B shapes (hidden 4096, intermediate 14336), bytes
// each kernel must move, at 3.35 TB/s (H100 SXM) and 4.8 TB/s (H200); none
// does more than ~3 FLOPs per byte, so all are bound by memory (or, at
// decode, by their few-µs launch):
//   decode, batch 1, x [1, 4096]: 8 KB read + 4 KB written: 4 ns / 2.5 ns;
//     the launch (~2-3 µs) is the cost: an FP8 step adds 2-4 launches per
//     projection, which is why FP8 can lose to bf16 at batch 1 (sglang #7352)
//     although it halves the weight bytes (14.5 GB -> 7.5 GB per step).
//   prefill, 8 × 1024 tokens, x [8192, 4096] (qkv_proj's input):
//     static or per-token: 64 MiB read + 32 MiB written = 100 MB: 30 µs / 21 µs;
//     dynamic per-tensor reads x twice (absmax, then quantize): 168 MB, 50 / 35 µs.
//   fp8_scale_out of gate_up [8192, 28672]: 940 MB fp32 read + 470 MB bf16
//     written: 420 µs / 294 µs, against the GEMM's 1.93e12 FLOPs at 1979
//     TFLOP/s (FP8 dense): 0.98 ms: per-channel or per-token scales cost
//     ~40% on top of a prefill GEMM, none of it at decode's small m.

// FP8_MAX is E4M3's largest finite value; FP8_MIN_SCALE vLLM's least scale.
#define FP8_MAX 448.0f
#define FP8_MIN_SCALE (1.0f / (448.0f * 512.0f))
// FP8_PARTIALS bounds fp8_absmax_partial's grid (and fp8_quant_tensor's
// reduction of its partial maxima); FP8_THREADS is every kernel's largest
// block (small tensors take fewer threads, whole warps).
#define FP8_PARTIALS 1024
#define FP8_THREADS 256

// f32_to_e4m3 rounds to nearest even, saturating to ±448, NaN to 0x7f
// (ref.F32ToE4M3). sm_89 and later convert in hardware; the software path
// (older targets, the emulated device) computes the same bits: every step
// scales by a power of two, exactly.
__device__ __forceinline__ unsigned char f32_to_e4m3(float f) {
#if !defined(__SBEMU__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
    return (unsigned char)(r & 0xffu);
#else
    const unsigned int bits = __float_as_uint(f);
    const unsigned char sign = (unsigned char)((bits >> 24) & 0x80u);
    const float a = __uint_as_float(bits & 0x7fffffffu);
    if (a != a) return 0x7f;
    if (a >= FP8_MAX) return sign | 0x7e;
    if (a < 0.015625f) return sign | (unsigned char)rintf(a * 512.0f);  // subnormal steps of 2^-9
    int e = (int)((bits >> 23) & 0xffu) - 127;
    int m = (int)rintf((__uint_as_float((bits & 0x007fffffu) | 0x3f800000u) - 1.0f) * 8.0f);
    if (m == 8) {
        m = 0;
        e++;
    }
    if (e + 7 > 15 || (e + 7 == 15 && m == 7)) return sign | 0x7e;
    return sign | (unsigned char)(((e + 7) << 3) | m);
#endif
}

// fp8_scale is ref.FP8Scale: a comparison, not fmaxf, so that NaN stays NaN.
__device__ __forceinline__ float fp8_scale(float absmax) {
    float s = absmax / FP8_MAX;
    if (s < FP8_MIN_SCALE) s = FP8_MIN_SCALE;
    return s;
}

// block_max_bits is the maximum of v over the block (blockDim.x a
// multiple of 32, at most FP8_THREADS), to every thread; v are magnitudes'
// bit patterns, so unsigned order is float order with NaN above all.
__device__ __forceinline__ unsigned int block_max_bits(unsigned int v, unsigned int* scratch) {
    for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? scratch[lane] : 0u;
    for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// quant8 quantizes 8 bf16 (one u32x4) with inv into 8 bytes.
__device__ __forceinline__ uint2 quant8(u32x4 v, float inv) {
    float f[8];
    unpack8(v, f);
    unsigned int lo = 0, hi = 0;
    for (int j = 0; j < 4; j++) lo |= (unsigned int)f32_to_e4m3(f[j] * inv) << (8 * j);
    for (int j = 0; j < 4; j++) hi |= (unsigned int)f32_to_e4m3(f[4 + j] * inv) << (8 * j);
    uint2 r;
    r.x = lo;
    r.y = hi;
    return r;
}

// fp8_absmax_partial: partials[blockIdx.x] = max |x| over the elements the
// block visits (grid-stride over n bf16, 8 at a time when vec8: n % 8 == 0
// and x 16-byte aligned; gridDim.x <= FP8_PARTIALS).
extern "C" __global__ void __launch_bounds__(FP8_THREADS)
    fp8_absmax_partial(float* __restrict__ partials, const unsigned short* __restrict__ x, long long n, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ unsigned int scratch[32];
    unsigned int m = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec8) {
        const u32x4* xv = (const u32x4*)x;
        for (long long v = first; v < n / 8; v += stride) {
            const u32x4 w = xv[v];
            const unsigned int words[4] = {w.x, w.y, w.z, w.w};
            for (int j = 0; j < 4; j++) {
                m = max(m, words[j] & 0x7fffu);
                m = max(m, (words[j] >> 16) & 0x7fffu);
            }
        }
    } else {
        for (long long i = first; i < n; i += stride) m = max(m, (unsigned int)(x[i] & 0x7fffu));
    }
    m = block_max_bits(m, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = bf16_to_f32((unsigned short)m);
}

// fp8_quant_tensor: out = e4m3(x · (1/s)) over n elements, grid-stride.
// With nparts > 0 the scale is dynamic, s = fp8_scale(max of partials[0..nparts)),
// and block 0 writes it to scale; with nparts == 0 it is static, s = scale[0].
// vec8: n % 8 == 0, x 16-byte and out 8-byte aligned.
extern "C" __global__ void __launch_bounds__(FP8_THREADS)
    fp8_quant_tensor(unsigned char* __restrict__ out, float* __restrict__ scale,
                     const float* __restrict__ partials, int nparts,
                     const unsigned short* __restrict__ x, long long n, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ unsigned int scratch[32];
    float s;
    if (nparts > 0) {
        unsigned int m = 0;
        for (int i = threadIdx.x; i < nparts; i += blockDim.x) m = max(m, __float_as_uint(partials[i]));
        s = fp8_scale(__uint_as_float(block_max_bits(m, scratch)));
        if (blockIdx.x == 0 && threadIdx.x == 0) scale[0] = s;
    } else {
        s = scale[0];
    }
    const float inv = 1.0f / s;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec8) {
        const u32x4* xv = (const u32x4*)x;
        uint2* ov = (uint2*)out;
        for (long long v = first; v < n / 8; v += stride) ov[v] = quant8(xv[v], inv);
    } else {
        for (long long i = first; i < n; i += stride) out[i] = f32_to_e4m3(bf16_to_f32(x[i]) * inv);
    }
}

// fp8_quant_token: one block per row of x [rows, cols]: scales[row] =
// fp8_scale(the row's max |x|), then the row quantized with it. vec8:
// cols % 8 == 0, x 16-byte and out 8-byte aligned.
extern "C" __global__ void __launch_bounds__(FP8_THREADS)
    fp8_quant_token(unsigned char* __restrict__ out, float* __restrict__ scales,
                    const unsigned short* __restrict__ x, int rows, int cols, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ unsigned int scratch[32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const unsigned short* xr = x + (long long)row * cols;
    unsigned char* orow = out + (long long)row * cols;
    unsigned int m = 0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) m = max(m, (unsigned int)(xr[i] & 0x7fffu));
    const float s = fp8_scale(bf16_to_f32((unsigned short)block_max_bits(m, scratch)));
    if (threadIdx.x == 0) scales[row] = s;
    const float inv = 1.0f / s;
    if (vec8) {
        const u32x4* xv = (const u32x4*)xr;
        uint2* ov = (uint2*)orow;
        for (int v = threadIdx.x; v < cols / 8; v += blockDim.x) ov[v] = quant8(xv[v], inv);
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) orow[i] = f32_to_e4m3(bf16_to_f32(xr[i]) * inv);
    }
}

// fp8_scale_out: out[i, j] = bf16(acc[i, j] · xs[i·xstride] · ws[j·wstride])
// over acc [m, n] fp32 (cuBLASLt's product with no scale applied), strides
// 0 (one scale) or 1 (per row / per column); grid-stride.
extern "C" __global__ void __launch_bounds__(FP8_THREADS)
    fp8_scale_out(unsigned short* __restrict__ out, const float* __restrict__ acc,
                  const float* __restrict__ xs, int xstride, const float* __restrict__ ws, int wstride,
                  int m, int n) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const long long total = (long long)m * n;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const long long i = e / n;
        const int j = (int)(e - i * n);
        out[e] = f32_to_bf16_rne(acc[e] * xs[i * xstride] * ws[(long long)j * wstride]);
    }
}

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

// ---------------------------------------------------------------------------
// Linear version 5: gemv_fp8_t8/_t16/_t32 and gemv_fp8_silu_t8/_t16/_t32 —
// a decode step's FP8 projection in ONE launch (twin: ref.GemvFP8,
// ref.GemvFP8SiluMul). out[m, n] (bf16) = x[m, k] · w[n, k]ᵀ for 1..32
// token rows, w E4M3 with one scale (ws[0]) or one per output channel
// (ws[j]), x bf16 and, by act (kernels.FP8Act*):
//   0 (bf16, weight-only "W8A16"): x used as it is;
//   1 (static): x quantized with xs[0] (a checkpoint's input_scale);
//   2 (dynamic per tensor): s = fp8_scale(max |x| over all m rows);
//   3 (dynamic per token): s_i = fp8_scale(max |x| of row i).
// Modes 1-3 are vLLM's W8A8 (Fp8LinearMethod, compressed-tensors): the
// same bytes as fp8_quant_tensor / fp8_quant_token followed by the FP8 GEMM,
// q = e4m3(f32(x) · (1/s)), out = bf16(acc · s_x · s_w) with acc the fp32
// sum of exact E4M3 products: only the order of the sum differs from
// cuBLASLt's. Mode 0 is NOT vLLM's FP8 path (Marlin's weight-only FP8 on
// GPUs without FP8 tensor cores is the nearest): acc sums bf16(x) · e4m3(w).
// What it replaces at m <= 32 rows: fp8_absmax_partial + fp8_quant_tensor
// (or fp8_quant_token) + cublasLtMatmul (+ fp8_scale_out where a scale is a
// vector): 2-4 launches per projection, 1 here; with silu, gate_up_proj's
// and silu_mul's 3-5 launches, 1 here.
//
// How. linear version 2's tensor-core skinny GEMM (gemv.cu) with FP8
// weights: a block (G8_THREADS = 128, 4 warps) owns G8_ROWS = 16 output
// columns (with silu: 16 gate and the 16 matching up columns, warps 0-1 the
// gate rows, 2-3 the up rows); its warps take interleaved chunks of
// G8_KCHUNK = 64 k elements. Lane (g, t) loads 16 bytes (16 E4M3, k offsets
// 16t..16t+15 of the chunk) of weight rows g and g+8: one load instruction
// is 8 rows x 64 contiguous bytes, every byte used, and widens them to 16
// bf16 in registers (exact: every E4M3 value is a bf16 value; e4m3_to_f32's
// integer shift and one multiply by 2^120, no table); x's 16 bf16 at the
// same k offsets are quantized to E4M3 with the token's scale and widened
// back (the values the FP8 GEMM multiplies, exactly), then 4
// mma.m16n8k16.bf16 per chunk and token tile: the product of two E4M3 (or
// bf16 × E4M3) values is exact in fp32, so bf16 tensor cores compute the
// same products as FP8 ones, and run on sm_80 and the emulated device. Why
// not mma.sync's e4m3 shape (m16n8k32): at 1..32 rows the matrix unit is
// not what binds (below), and the bf16 shape is the one the emulated
// device checks. The first G8_UNROLL chunks' weights are loaded before
// SB_PDL_WAIT (under --kernel launch=2 they stream while the predecessor
// finishes). The prologue (after the wait) finds the scales: with a dynamic
// mode each warp reduces the absmax of rows warp, warp+4, ... over k
// (bf16 bit patterns, unsigned max: NaN wins as in fp8_absmax_partial),
// one barrier, then 1/s per row in shared memory: no second launch, no
// grid-wide pass (every block recomputes the same scale from the same x: m
// x k x 2 bytes from L2 per block). The 4 warps' partial sums are added in
// shared memory in warp order, then scaled: bf16((acc · s_x) · s_w).
//
// Napkin math (ESTIMATE; datasheet peaks, no GPU measured): a projection
// at m = 1 moves n·k bytes of weights + 4 or 4n bytes of scales + m·k·2
// of x from DRAM. Llama-3-8B (per layer: qkv 6144x4096 = 25.2 MB, o
// 4096x4096 = 16.8 MB, gate_up 28672x4096 = 117.4 MB, down 4096x14336 =
// 58.7 MB; 218 MB a layer, 6.98 GB for 32 layers) at 3.35 / 4.8 TB/s: qkv
// 7.5 / 5.2 us, o 5.0 / 3.5, gate_up 35.0 / 24.5, down 17.5 / 12.2 us; the
// step's projections 2.08 / 1.45 ms at the peak, 2.31 / 1.62 ms at 90% of
// it plus ~1 us of fill and drain per launch (128 launches: +0.13 ms) ->
// 2.44 (H100) / 1.75 (H200) ms. Llama-3.2-1B (hidden 2048, inter 8192, 16
// layers; qkv 3072x2048 6.3 MB, o 4.2, gate_up 33.6, down 16.8 MB): 0.97
// GB, 0.29 / 0.20 ms at the peaks. Against cuBLASLt's path the saving is
// the launches: 2 (static/per-tensor: quant + GEMM) to 4 (dynamic per
// tensor, per channel: absmax, quant, GEMM, fp8_scale_out) per projection,
// ~2-3 us each at batch 1, 0.26-0.7 ms a step. Issue: per 1 KB of weights
// (one chunk of 16 rows) a warp runs 4 HMMA per token tile, ~64
// instructions widening the 32 weight bytes of its lanes' 2 rows to bf16,
// ~24 per token tile quantizing and widening x (the x conversion is shared
// by the 16 rows); an SM must take 1 KB per ~62 clocks at 4.3 TB/s
// (16.5 B/clock/SM at 1.98 GHz), ~250 warp-instructions of issue: m = 1
// uses ~40%, m = 32 (4 token tiles) ~75% (ESTIMATE): still bound by the
// weight stream, not by issue or the tensor cores (32 rows x 2 FLOP per
// weight byte = 275 TFLOP/s of bf16 mma at 4.3 TB/s, 28% of 989). The
// prologue's absmax re-reads m·k·2 bytes of x per block from L2 (and the
// main loop reads x again, as gemv.cu's kernels do): a block's weights are
// 16·k bytes, so x's L2 traffic is m/8 of the weight stream (12% at m = 1,
// 4x at m = 32); above ~8 rows the dynamic modes pay more L2 traffic than
// the weights' DRAM stream (ESTIMATE; static scales pay half of it).
//
// ptxas (compiler: stepbench build --nvrtc .../libnvrtc.so.11.2, NVRTC
// 11.8, sm_90): gemv_fp8_t8 72 registers, _t16 92, _t32 121;
// gemv_fp8_silu_t8 72, _t16 94, _t32 120; 0 spill bytes, 0 stack; static
// shared 2496 / 4608 / 8832 B (the warps' partials and the scales); 7 / 5
// / 4 blocks of 4 warps per SM (limited by registers). sm_80 the same
// within 2 registers. (--arch 89 does not build with NVRTC 11.8: its ptxas
// wants sm_90 for cvt's .e4m3x2, which f32_to_e4m3 uses from 8.9 on —
// fp8.cu's quantizers as much as these kernels.)
// Emulated checks: verify --check linear_fp8 --kernel linear=5 at
// llama-3-8b and llama-3.2-1b under the forward, reverse, warp-serial and
// random schedules (32 checks each, worst relative error 3.3e-5).

#define G8_THREADS 128
#define G8_ROWS 16
#define G8_KCHUNK 64
#define G8_UNROLL 4
#define G8_WARPS (G8_THREADS / 32)
#define G8_MAX_ROWS 32
#define G8_ACT_BF16 0
#define G8_ACT_STATIC 1
#define G8_ACT_TENSOR 2
#define G8_ACT_TOKEN 3

// g8_ld_w16 loads 16 weight bytes, streamed (no L1 allocation; gemv.cu's
// ld_weights16).
__device__ __forceinline__ u32x4 g8_ld_w16(const unsigned char* p) {
#ifdef __SBEMU__
    return *(const u32x4*)p;
#else
    u32x4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
#endif
}

// g8_ld_x16 loads 16 bytes of x coherently (gemv.cu's ld_x16: x may be
// written by the kernel before under --kernel launch=2).
__device__ __forceinline__ u32x4 g8_ld_x16(const unsigned short* p) {
#ifdef __SBEMU__
    return *(const u32x4*)p;
#else
    u32x4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#endif
}

// e4m3_to_f32 widens one E4M3 byte (the low 8 bits of b) exactly
// (ref.E4M3ToF32): the 7 magnitude bits shifted under float32's exponent
// and mantissa are the value times 2^-120 (a float32 subnormal for E4M3's
// subnormals), one multiply by 2^120 rescales it (no flush: NVRTC's default
// -ftz=false); 0x7f/0xff are NaN.
__device__ __forceinline__ float e4m3_to_f32(unsigned b) {
    const unsigned mag = b & 0x7fu;
    float f = __uint_as_float(mag << 20) * __uint_as_float(0x7b800000u);  // 2^120
    if (mag == 0x7fu) f = __uint_as_float(0x7fc00000u);
    return __uint_as_float(__float_as_uint(f) | ((b & 0x80u) << 24));
}

// e4m3x4_to_bf16x4 widens the 4 E4M3 bytes of v (byte 0 first) to 4 bf16
// packed in two words (element 0 in the low half of the first).
__device__ __forceinline__ void e4m3x4_to_bf16x4(unsigned v, unsigned& lo, unsigned& hi) {
    lo = pack2_bf16_exact(e4m3_to_f32(v), e4m3_to_f32(v >> 8));
    hi = pack2_bf16_exact(e4m3_to_f32(v >> 16), e4m3_to_f32(v >> 24));
}

// g8_widen widens 16 E4M3 bytes into two 8-bf16 pieces (elements 0..7, 8..15).
__device__ __forceinline__ void g8_widen(u32x4 q, u32x4 out[2]) {
    e4m3x4_to_bf16x4(q.x, out[0].x, out[0].y);
    e4m3x4_to_bf16x4(q.y, out[0].z, out[0].w);
    e4m3x4_to_bf16x4(q.z, out[1].x, out[1].y);
    e4m3x4_to_bf16x4(q.w, out[1].z, out[1].w);
}

// g8_quant2 quantizes the two bf16 of word v with inv and returns them
// widened back to bf16 (the E4M3 values the FP8 GEMM multiplies).
__device__ __forceinline__ unsigned g8_quant2(unsigned v, float inv) {
    const float lo = e4m3_to_f32(f32_to_e4m3(__uint_as_float(v << 16) * inv));
    const float hi = e4m3_to_f32(f32_to_e4m3(__uint_as_float(v & 0xffff0000u) * inv));
    if (lo != lo || hi != hi) return pack2(lo, hi);  // NaN: pack2 keeps it a NaN
    return pack2_bf16_exact(lo, hi);
}

// g8_quant8 is g8_quant2 over a piece of 8.
__device__ __forceinline__ u32x4 g8_quant8(u32x4 v, float inv) {
    u32x4 o;
    o.x = g8_quant2(v.x, inv);
    o.y = g8_quant2(v.y, inv);
    o.z = g8_quant2(v.z, inv);
    o.w = g8_quant2(v.w, inv);
    return o;
}

// g8_mma4 adds one chunk (the lane's 16 k offsets as two pieces) to acc:
// gemv.cu's gemv_mma4 (slots {2t,2t+1 | 2t+8,2t+9} of two mma per piece).
template <int MT>
__device__ __forceinline__ void g8_mma4(float acc[MT][4], const u32x4 wa[2], const u32x4 wb[2], const u32x4 xv[MT][2]) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const unsigned a_lo[4] = {wa[p].x, wb[p].x, wa[p].y, wb[p].y};
        const unsigned a_hi[4] = {wa[p].z, wb[p].z, wa[p].w, wb[p].w};
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const unsigned b_lo[2] = {xv[mt][p].x, xv[mt][p].y};
            const unsigned b_hi[2] = {xv[mt][p].z, xv[mt][p].w};
            mma_m16n8k16_bf16(acc[mt], a_lo, b_lo, acc[mt]);
            mma_m16n8k16_bf16(acc[mt], a_hi, b_hi, acc[mt]);
        }
    }
}

// G8Scales is the block's shared view of the activation scales: s[i] and
// 1/s[i] per token row (all equal per tensor; 1 and 1 for bf16 x).
struct G8Scales {
    float s[G8_MAX_ROWS];
    float inv[G8_MAX_ROWS];
    unsigned amax[G8_MAX_ROWS];
};

// g8_scales is the prologue: the activation scale of each of the m rows
// (act: G8_ACT_*), into sc. Every thread calls it (one or two barriers).
__device__ __forceinline__ void g8_scales(G8Scales& sc, const unsigned short* __restrict__ x, const float* __restrict__ xs,
                                          int act, int m, int k) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (act == G8_ACT_TENSOR || act == G8_ACT_TOKEN) {
        for (int r = warp; r < m; r += G8_WARPS) {
            const unsigned short* xr = x + (long long)r * k;
            unsigned a = 0;
            for (int v = lane; v < k / 8; v += 32) {
                const u32x4 q = g8_ld_x16(xr + 8 * v);
                const unsigned words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int j = 0; j < 4; j++) a = max(a, max(words[j] & 0x7fffu, (words[j] >> 16) & 0x7fffu));
            }
            for (int off = 16; off > 0; off >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, off));
            if (lane == 0) sc.amax[r] = a;
        }
        __syncthreads();
    }
    if (threadIdx.x < m) {
        float s = 1.0f;
        if (act == G8_ACT_STATIC) {
            s = xs[0];
        } else if (act == G8_ACT_TOKEN) {
            s = fp8_scale(bf16_to_f32((unsigned short)sc.amax[threadIdx.x]));
        } else if (act == G8_ACT_TENSOR) {
            unsigned a = 0;
            for (int r = 0; r < m; r++) a = max(a, sc.amax[r]);
            s = fp8_scale(bf16_to_f32((unsigned short)a));
        }
        sc.s[threadIdx.x] = s;
        sc.inv[threadIdx.x] = 1.0f / s;
    }
    __syncthreads();
}

// g8_partial is one warp's share of a 16-row tile: weight rows row0..
// row0+15 (rows at or past rowEnd read row0, never stored) times token
// rows 0..8*MT-1 (past m: token 0, never stored) over the chunks first,
// first+STEP, ...; k % 16 == 0, so a lane's 16-element piece of the last
// chunk is wholly inside k or wholly past it (zeros). The scales are found
// (g8_scales) after the ring's first weight loads and SB_PDL_WAIT.
template <int MT, int STEP>
__device__ __forceinline__ void g8_partial(float acc[MT][4], G8Scales& sc, const unsigned short* __restrict__ x,
                                           const float* __restrict__ xs, int act, const unsigned char* __restrict__ w,
                                           int m, int rowEnd, int k, int row0, int first) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ra = row0 + g < rowEnd ? row0 + g : row0;
    const int rb = row0 + g + 8 < rowEnd ? row0 + g + 8 : row0;
    const unsigned char* pa = w + (long long)ra * k + 16 * t;
    const unsigned char* pb = w + (long long)rb * k + 16 * t;
    const int chunks = (k + G8_KCHUNK - 1) / G8_KCHUNK;
    const u32x4 zero4 = {0u, 0u, 0u, 0u};
    u32x4 qa[G8_UNROLL], qb[G8_UNROLL];
#pragma unroll
    for (int u = 0; u < G8_UNROLL; u++) {
        const int c = first + u * STEP;
        const bool in = c < chunks && c * G8_KCHUNK + 16 * t < k;
        qa[u] = in ? g8_ld_w16(pa + (long long)c * G8_KCHUNK) : zero4;
        qb[u] = in ? g8_ld_w16(pb + (long long)c * G8_KCHUNK) : zero4;
    }
    if (k > 0) {  // a branch, so that ptxas keeps the wait below the loads (gemv.cu's gemv_inputs_ready)
        SB_PDL_WAIT();
        SB_PDL_LAUNCH_DEPENDENTS();
    }
    g8_scales(sc, x, xs, act, m, k);
    const unsigned short* px[MT];
    float inv[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int tok = g + 8 * mt < m ? g + 8 * mt : 0;
        px[mt] = x + (long long)tok * k + 16 * t;
        inv[mt] = sc.inv[tok];
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
    }
    const u32x4 zero = {0u, 0u, 0u, 0u};
    for (int c0 = first; c0 < chunks; c0 += G8_UNROLL * STEP) {
#pragma unroll
        for (int u = 0; u < G8_UNROLL; u++) {
            const int c = c0 + u * STEP;
            if (c < chunks) {
                const bool in = c * G8_KCHUNK + 16 * t < k;
                u32x4 wa[2], wb[2], xv[MT][2];
                g8_widen(qa[u], wa);
                g8_widen(qb[u], wb);
                const int next = c + G8_UNROLL * STEP;
                const bool nin = next < chunks && next * G8_KCHUNK + 16 * t < k;
                qa[u] = nin ? g8_ld_w16(pa + (long long)next * G8_KCHUNK) : zero4;
                qb[u] = nin ? g8_ld_w16(pb + (long long)next * G8_KCHUNK) : zero4;
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                    for (int p = 0; p < 2; p++) {
                        xv[mt][p] = in ? g8_ld_x16(px[mt] + c * G8_KCHUNK + 8 * p) : zero;
                        if (act != G8_ACT_BF16) xv[mt][p] = g8_quant8(xv[mt][p], inv[mt]);
                    }
                }
                g8_mma4<MT>(acc, wa, wb, xv);
            }
        }
    }
}

// g8_stash and g8_sum: gemv.cu's gemv_stash and gemv_fragment_sum (the
// warps' D fragments through shared memory, summed in warp order).
template <int MT>
__device__ __forceinline__ void g8_stash(float* red, const float acc[MT][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) red[(warp * MT * 4 + mt * 4 + e) * 33 + lane] = acc[mt][e];
    }
}
template <int MT>
__device__ __forceinline__ float g8_sum(const float* red, int w0, int w1, int r, int tk) {
    const int mt = tk >> 3, tc = tk & 7;
    const int e = (r >> 3) * 2 + (tc & 1), lane = (r & 7) * 4 + (tc >> 1);
    float s = 0.0f;
    for (int wp = w0; wp < w1; wp++) s += red[(wp * MT * 4 + mt * 4 + e) * 33 + lane];
    return s;
}

// gemv_fp8: block b owns columns 16b..16b+15; out = bf16((acc · s_x) · s_w)
// (ref.ScaleFP8Out's order). ws has one scale (wstride 0) or n (1).
template <int MT>
__device__ __noinline__ void gemv_fp8(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                      const float* __restrict__ xs, int act, const unsigned char* __restrict__ w,
                                      const float* __restrict__ ws, int wstride, int m, int n, int k) {
    __shared__ float red[G8_WARPS * MT * 4 * 33];
    __shared__ G8Scales sc;
    const int warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * G8_ROWS;
    float acc[MT][4];
    g8_partial<MT, G8_WARPS>(acc, sc, x, xs, act, w, m, n, k, row0, warp);
    g8_stash<MT>(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < G8_ROWS * 8 * MT; o += G8_THREADS) {
        const int r = o % G8_ROWS, tk = o / G8_ROWS;
        const int col = row0 + r;
        if (tk < m && col < n) {
            out[(long long)tk * n + col] = f32_to_bf16_rne(g8_sum<MT>(red, 0, G8_WARPS, r, tk) * sc.s[tk] * ws[(long long)col * wstride]);
        }
    }
}

// gemv_fp8_silu: gate_up_proj and silu_mul in one launch: w the fused
// [2*inter, k] E4M3 matrix (ws: one scale, or 2*inter), block b owns
// columns j = 16b..16b+15 of both halves (warps 0-1 the gate rows j, 2-3
// the up rows inter+j); gate and up are rounded to bf16 as the GEMM writes
// them, then activation.cu's silu_mul: out = bf16(bf16(g/(1+e^-g)) · u).
template <int MT>
__device__ __noinline__ void gemv_fp8_silu(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                           const float* __restrict__ xs, int act, const unsigned char* __restrict__ w,
                                           const float* __restrict__ ws, int wstride, int m, int inter, int k) {
    __shared__ float red[G8_WARPS * MT * 4 * 33];
    __shared__ G8Scales sc;
    const int warp = threadIdx.x >> 5;
    const int j0 = blockIdx.x * G8_ROWS;
    const int half = warp >> 1;
    float acc[MT][4];
    g8_partial<MT, 2>(acc, sc, x, xs, act, w, m, inter + half * inter, k, j0 + half * inter, warp & 1);
    g8_stash<MT>(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < G8_ROWS * 8 * MT; o += G8_THREADS) {
        const int r = o % G8_ROWS, tk = o / G8_ROWS;
        const int j = j0 + r;
        if (tk < m && j < inter) {
            const float sx = sc.s[tk];
            const float gt = round_bf16(g8_sum<MT>(red, 0, 2, r, tk) * sx * ws[(long long)j * wstride]);
            const float up = round_bf16(g8_sum<MT>(red, 2, 4, r, tk) * sx * ws[(long long)(inter + j) * wstride]);
            out[(long long)tk * inter + j] = f32_to_bf16_rne(round_bf16(gt / (1.0f + expf(-gt))) * up);
        }
    }
}

// Entry points: _t8 takes m <= 8, _t16 m <= 16, _t32 m <= 32 (G8_MAX_ROWS).
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_t8(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int n, int k) {
    gemv_fp8<1>(out, x, xs, act, w, ws, wstride, m, n, k);
}
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_t16(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int n, int k) {
    gemv_fp8<2>(out, x, xs, act, w, ws, wstride, m, n, k);
}
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_t32(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int n, int k) {
    gemv_fp8<4>(out, x, xs, act, w, ws, wstride, m, n, k);
}
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_silu_t8(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int inter, int k) {
    gemv_fp8_silu<1>(out, x, xs, act, w, ws, wstride, m, inter, k);
}
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_silu_t16(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int inter, int k) {
    gemv_fp8_silu<2>(out, x, xs, act, w, ws, wstride, m, inter, k);
}
extern "C" __global__ void __launch_bounds__(G8_THREADS) gemv_fp8_silu_t32(unsigned short* out, const unsigned short* x,
    const float* xs, int act, const unsigned char* w, const float* ws, int wstride, int m, int inter, int k) {
    gemv_fp8_silu<4>(out, x, xs, act, w, ws, wstride, m, inter, k);
}

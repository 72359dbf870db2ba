// common.cu — helpers shared by every kernel source. The Go compile step
// prepends this text to each other .cu file (NVRTC 11.8 ships no CUDA headers
// we could include, so nothing here includes anything either).
//
// bf16 values are raw 16-bit patterns (unsigned short); arithmetic is fp32.

typedef unsigned short bf16_bits;

// bf16_to_f32 widens a bf16 bit pattern to float (exact).
__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// f32_to_bf16_rne rounds to nearest even, exactly like kernels/ref.F32ToBF16:
// a NaN stays a (quiet) NaN, everything else is integer rounding of the bits.
__device__ __forceinline__ unsigned short f32_to_bf16_rne(float f) {
    unsigned int bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((bits >> 16) | 0x0040u);
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (unsigned short)(bits >> 16);
}

// round_bf16 rounds through bf16 and widens back.
__device__ __forceinline__ float round_bf16(float f) {
    return bf16_to_f32(f32_to_bf16_rne(f));
}

__device__ __forceinline__ float neg_inf_f32() { return __uint_as_float(0xff800000u); }

// u32x4 is 16 bytes = 8 bf16: the unit of every vectorised load and store.
struct alignas(16) u32x4 {
    unsigned int x, y, z, w;
};

// unpack8 widens the 8 bf16 held in v to floats (element 0 is the low half of x).
__device__ __forceinline__ void unpack8(u32x4 v, float f[8]) {
    f[0] = __uint_as_float(v.x << 16); f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16); f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16); f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16); f[7] = __uint_as_float(v.w & 0xffff0000u);
}

__device__ __forceinline__ unsigned int pack2(float lo, float hi) {
    return (unsigned int)f32_to_bf16_rne(lo) | ((unsigned int)f32_to_bf16_rne(hi) << 16);
}

// pack8 rounds 8 floats to bf16 and packs them in element order.
__device__ __forceinline__ u32x4 pack8(const float f[8]) {
    u32x4 v;
    v.x = pack2(f[0], f[1]); v.y = pack2(f[2], f[3]);
    v.z = pack2(f[4], f[5]); v.w = pack2(f[6], f[7]);
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// block_sum returns the sum of v over the whole block to every thread.
// scratch must hold 32 floats; blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

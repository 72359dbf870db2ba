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

// pack2_bf16_exact packs two floats that are already bf16 values (low
// 16 bits zero, not NaN): no rounding to do, only the high halves to take.
__device__ __forceinline__ unsigned int pack2_bf16_exact(float lo, float hi) {
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

// pack8 rounds 8 floats to bf16 and packs them in element order.
__device__ __forceinline__ u32x4 pack8(const float f[8]) {
    u32x4 v;
    v.x = pack2(f[0], f[1]); v.y = pack2(f[2], f[3]);
    v.z = pack2(f[4], f[5]); v.w = pack2(f[6], f[7]);
    return v;
}

// pack_bf16x2_rn rounds lo and hi to bf16 (nearest even) and packs them, lo
// in the low half: cvt.rn.bf16x2.f32 on a GPU, pack2 on the emulated device
// (the same bits for every non-NaN input). attention.cu packs P with it,
// gemv.cu the normalised x of linear version 4.
__device__ __forceinline__ unsigned pack_bf16x2_rn(float lo, float hi) {
#ifdef __SBEMU__
    return pack2(lo, hi);
#else
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#endif
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

// ---- tensor cores and async copies (sm_80 and later) ----
// Under the emulated device (__SBEMU__) each helper is a warp collective of
// cuda/emu/device.h that follows the PTX ISA's fragment layouts; on a GPU it
// is the PTX instruction. Fragments of mma.m16n8k16 (groupID g = lane >> 2,
// t = lane & 3; in each 32-bit register the lower-indexed element is the low
// half): A 16x16 row-major: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1],
// a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]; B 16x8: b0 = B[2t..2t+1][g],
// b1 = B[2t+8..2t+9][g]; C, D 16x8 fp32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1].

// smem_addr is the shared-window address PTX's shared-memory operands take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
#ifdef __SBEMU__
    return (unsigned)__cvta_generic_to_shared(p);
#else
    unsigned long long s;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(p));
    return (unsigned)s;
#endif
}

// mma_m16n8k16_bf16: d = a·b + c over one warp, bf16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                  const float c[4]) {
#ifdef __SBEMU__
    sbemu_mma_m16n8k16_bf16(d, a, b, c, __FILE__, __LINE__);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
#endif
}

// ldmatrix_x4: four 8x8 b16 matrices from shared memory; lanes 8j..8j+7 give
// the addresses of matrix j's rows (16-byte aligned). Lane l receives, for
// matrix j in r[j], row l/4 elements 2(l%4) and 2(l%4)+1.
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* row) {
#ifdef __SBEMU__
    sbemu_ldmatrix(r, 4, false, row, __FILE__, __LINE__);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
#endif
}

// ldmatrix_x4_trans: as ldmatrix_x4, each matrix transposed: lane l receives
// column l/4, rows 2(l%4) and 2(l%4)+1 (a B fragment from a row-major [k][n] tile).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* row) {
#ifdef __SBEMU__
    sbemu_ldmatrix(r, 4, true, row, __FILE__, __LINE__);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
#endif
}

// ldmatrix_x2_trans: two transposed matrices; lanes 0..15 give the row addresses.
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned r[2], const void* row) {
#ifdef __SBEMU__
    sbemu_ldmatrix(r, 2, true, row, __FILE__, __LINE__);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(row)));
#endif
}

// cp_async16 starts a 16-byte global-to-shared copy (both 16-byte aligned)
// that completes only at a later cp_async_wait: read the destination after it.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
#ifdef __SBEMU__
    sbemu_cp_async(smem_dst, gmem_src, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src));
#endif
}

// cp_async_commit closes the group of copies started since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef __SBEMU__
    sbemu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// smem_retire says bytes of shared memory at p are dead until rewritten (a
// consumed tile of a double buffer, after the barrier that ends its use):
// nothing on a GPU; on the emulated device the block's first call of a
// barrier phase fills them with NaN, so that a row the next refill skips
// (a missing zero-fill) or a read of the old tile shows in the output.
__device__ __forceinline__ void smem_retire(const void* p, unsigned bytes) {
#ifdef __SBEMU__
    sbemu_smem_retire((void*)p, bytes);
#else
    (void)p;
    (void)bytes;
#endif
}

// cp_async_wait waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef __SBEMU__
    sbemu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---- programmatic dependent launch (sm_90: griddepcontrol) ----
// With --kernel launch=2 the runner launches the kernels that opt in
// (kernels.Family.PDL) through cuLaunchKernelEx with programmatic stream
// serialization: a kernel may start while the previous kernel on the
// stream is still finishing, so its launch latency and prologue hide behind
// that kernel's tail. SB_PDL_WAIT() blocks the calling thread until every
// grid the launch depends on has completed and its memory is visible: it
// must come before the kernel's first global read of anything a
// predecessor may write, and before its first global write of anything a
// predecessor may read or write (work that depends on neither, such as
// address arithmetic or loading weights, may go before it).
// SB_PDL_LAUNCH_DEPENDENTS() lets the next programmatic launch begin (by
// default a grid triggers when its blocks exit). Our kernels call it right
// after the wait: the dependent grid launches only once every block of this
// grid has triggered, i.e. is resident, so its blocks take only SM slots
// this grid has left free (they sit in their own wait there) and cannot
// delay this grid; and triggering after the wait, never before, keeps the
// dependent from overlapping this grid's predecessor too.
// Both are no-ops below sm_90 and in a plain launch (the wait returns at
// once); the emulated device (__SBEMU__) records them, and with
// STEPBENCH_EMU_CHECK_PDL=1 faults an access made before the wait that
// meets the previous grid's data.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef __SBEMU__
#define SB_PDL_WAIT() sbemu_griddepcontrol_wait()
#define SB_PDL_LAUNCH_DEPENDENTS() sbemu_griddepcontrol_launch_dependents()
#else
#define SB_PDL_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define SB_PDL_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#endif
#else
#define SB_PDL_WAIT() ((void)0)
#define SB_PDL_LAUNCH_DEPENDENTS() ((void)0)
#endif

// ---- FP8 KV cache bytes (rope.cu's rope_kv_write 4, paged_attention.cu's
// attn_prefill 5 and attn_decode 7; twins: kernels/ref/paged_fp8.go) ----
// KV_BF16 is the bf16 cache, KV_E4M3 and KV_E5M2 the FP8 caches' formats
// (kernels.CacheDType's order).
#define KV_BF16 0
#define KV_E4M3 1
#define KV_E5M2 2

// kv_f32_to_fp8 rounds f to the format to nearest even, saturating to its
// largest finite value (448, 57344), NaN to 0x7f: ref.F32ToE4M3 and
// ref.F32ToE5M2, PTX's cvt.rn.satfinite.{e4m3,e5m2}x2.f32 on sm_89 and
// later; the software path (sm_80, the emulated device) computes the same
// bits, every step a scaling by a power of two.
template <int FMT>
__device__ __forceinline__ unsigned char kv_f32_to_fp8(float f) {
#if !defined(__SBEMU__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short r;
    if (FMT == KV_E4M3) {
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
    } else {
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
    }
    return (unsigned char)(r & 0xffu);
#else
    const unsigned int bits = __float_as_uint(f);
    const unsigned char sign = (unsigned char)((bits >> 24) & 0x80u);
    const float a = __uint_as_float(bits & 0x7fffffffu);
    if (a != a) return 0x7f;
    // the largest finite value and its code, the smallest normal, the
    // subnormal step's inverse, mantissa steps per binade, the bias
    const float fmax = FMT == KV_E4M3 ? 448.0f : 57344.0f;
    const unsigned char cmax = FMT == KV_E4M3 ? 0x7e : 0x7b;
    const float min_normal = FMT == KV_E4M3 ? 0.015625f : 6.103515625e-05f;
    const float sub_inv = FMT == KV_E4M3 ? 512.0f : 65536.0f;
    const float steps = FMT == KV_E4M3 ? 8.0f : 4.0f;
    const int bias = FMT == KV_E4M3 ? 7 : 15, mbits = FMT == KV_E4M3 ? 3 : 2;
    if (a >= fmax) return sign | cmax;
    if (a < min_normal) return sign | (unsigned char)rintf(a * sub_inv);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    int m = (int)rintf((__uint_as_float((bits & 0x007fffffu) | 0x3f800000u) - 1.0f) * steps);
    if (m == (int)steps) {
        m = 0;
        e++;
    }
    const int code = ((e + bias) << mbits) | m;
    if (code > cmax) return sign | cmax;
    return sign | (unsigned char)code;
#endif
}

// kv_rebias multiplies both bf16 halves of v by 2^120 (E4M3) or 2^112
// (E5M2), exactly (fma.rn.bf16x2 with -0: subnormal inputs are kept).
template <int FMT>
__device__ __forceinline__ unsigned kv_rebias(unsigned v) {
#ifdef __SBEMU__
    const float p = __uint_as_float(FMT == KV_E4M3 ? 0x7b800000u : 0x77800000u);
    return (unsigned)f32_to_bf16_rne(__uint_as_float(v << 16) * p) |
           ((unsigned)f32_to_bf16_rne(__uint_as_float(v & 0xffff0000u) * p) << 16);
#else
    unsigned r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(FMT == KV_E4M3 ? 0x7b807b80u : 0x77807780u),
        "r"(0x80008000u));
    return r;
#endif
}

// kv_fp8x4_to_bf16 widens the four FP8 bytes of x (byte 0 the lowest) to
// bf16, exactly (every E4M3 and E5M2 value is a bf16 value): lo holds bytes
// 0 and 1, hi bytes 2 and 3, the lower byte in the low half. Each byte is
// moved to the top of its half (prmt), its exponent and mantissa shifted
// into bf16's fields (a bf16 of the value times 2^-120, resp. 2^-112,
// subnormals included), and kv_rebias restores the power of two: 2 prmt,
// 4 logic ops and 2 HFMA2.BF16 per 4 bytes. The NaN codes (E4M3 0x7f, E5M2
// 0x7d..0x7f) and E5M2's infinity widen to finite values: the writer never
// stores them from finite input.
template <int FMT>
__device__ __forceinline__ void kv_fp8x4_to_bf16(unsigned x, unsigned& lo, unsigned& hi) {
    constexpr int SH = FMT == KV_E4M3 ? 4 : 3;
    const unsigned w0 = __byte_perm(x, 0u, 0x1404), w1 = __byte_perm(x, 0u, 0x3424);
    lo = kv_rebias<FMT>(((w0 & 0x7f007f00u) >> SH) | (w0 & 0x80008000u));
    hi = kv_rebias<FMT>(((w1 & 0x7f007f00u) >> SH) | (w1 & 0x80008000u));
}

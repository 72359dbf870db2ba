/* device.h — the CUDA device environment of the emulated GPU, force-included
 * (after abi.h) into every kernel translation unit that the emulated NVRTC
 * compiles with g++. It supplies what NVRTC supplies without headers:
 * qualifiers, threadIdx & co., barriers, warp shuffles and votes, atomics,
 * the fast-math intrinsics, vector types, printf and assert.
 *
 * Kernels see __SBEMU__ defined; inline PTX must be guarded by
 * #ifndef __SBEMU__ (with a C++ twin under #else). __CUDA_ARCH__ is the
 * target (900 for sm_90), as with NVRTC.
 *
 * __shared__ declarations are rewritten by the compile step into
 * SBEMU_SHARED(...) (per-block storage, poisoned for every block); an
 * extern __shared__ array becomes the block's dynamic shared memory. */
#ifndef SBEMU_DEVICE_H
#define SBEMU_DEVICE_H

#define __SBEMU__ 1
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1

#include <math.h>

extern "C" int printf(const char *, ...);

#ifndef SBEMU_SCAN
#define __global__ __attribute__((used))
#define __launch_bounds__(...)
#endif
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __constant__ static
/* Every __shared__ declaration is rewritten before compiling; one that was
 * not (the rewrite did not understand it) fails here with this name. */
#define __shared__ __sbemu_could_not_rewrite_this_shared_declaration__

static const sbemu_api *sbemu_api_ptr;

static inline __attribute__((always_inline)) sbemu_thread *sbemu_self(void) {
    unsigned long sp;
    __asm__("mov %%rsp, %0" : "=r"(sp));
    return (sbemu_thread *)((sp & ~(unsigned long)(SBEMU_STACK_BYTES - 1)) + SBEMU_STACK_BYTES -
                            sizeof(sbemu_thread));
}

#define threadIdx (sbemu_self()->thread_idx)
#define blockIdx (sbemu_self()->block_idx)
#define blockDim (sbemu_self()->block_dim)
#define gridDim (sbemu_self()->grid_dim)
#define warpSize 32

/* ---- barriers, traps ---- */
#define __syncthreads() sbemu_api_ptr->syncthreads(__FILE__, __LINE__)
#define __trap() sbemu_api_ptr->trap(719, __FILE__, __LINE__, "__trap()")
#define assert(e) ((e) ? (void)0 : sbemu_api_ptr->trap(710, __FILE__, __LINE__, "assert(" #e ") failed"))
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_system() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/* ---- static shared memory ---- */
template <typename T>
struct sbemu_shared_var {
    alignas(16) unsigned char storage[sizeof(T)];
    unsigned long long gen;
    T &get(const char *name, const char *file, int line) {
        sbemu_api_ptr->shared_acquire(storage, &gen, sizeof(T), name, file, line);
        return *reinterpret_cast<T *>(storage);
    }
};
#define SBEMU_SHARED(T, name, dims)                                 \
    static thread_local sbemu_shared_var<T dims> name##__sbemu_var; \
    T(&name) dims = name##__sbemu_var.get(#name, __FILE__, __LINE__)
#define SBEMU_DYNAMIC_SHARED(T) (reinterpret_cast<T *>(sbemu_self()->dyn_shared))

/* ---- warp collectives, built on the runtime's warp exchange ---- */
template <typename T>
static inline T sbemu_pick(const void *slots, unsigned src, unsigned mask, const char *kind, const char *file,
                           int line) {
    if (!((mask >> src) & 1u)) {
        sbemu_api_ptr->trap(719, file, line, kind);
    }
    T out;
    __builtin_memcpy(&out, (const unsigned char *)slots + src * sizeof(T), sizeof(T));
    return out;
}
template <typename T>
static inline T sbemu_shfl_idx(const char *file, int line, unsigned mask, T var, int src, int width = 32) {
    const void *s = sbemu_api_ptr->warp_exchange(mask, &var, sizeof(T), "__shfl_sync", file, line);
    const unsigned lane = sbemu_self()->lane, base = lane & ~(unsigned)(width - 1);
    return sbemu_pick<T>(s, base + ((unsigned)src & (unsigned)(width - 1)), mask, "__shfl_sync reads a lane outside its mask", file, line);
}
template <typename T>
static inline T sbemu_shfl_up(const char *file, int line, unsigned mask, T var, unsigned delta, int width = 32) {
    const void *s = sbemu_api_ptr->warp_exchange(mask, &var, sizeof(T), "__shfl_up_sync", file, line);
    const unsigned lane = sbemu_self()->lane, base = lane & ~(unsigned)(width - 1);
    const unsigned src = (lane - base) >= delta ? lane - delta : lane;
    return sbemu_pick<T>(s, src, mask, "__shfl_up_sync reads a lane outside its mask", file, line);
}
template <typename T>
static inline T sbemu_shfl_down(const char *file, int line, unsigned mask, T var, unsigned delta, int width = 32) {
    const void *s = sbemu_api_ptr->warp_exchange(mask, &var, sizeof(T), "__shfl_down_sync", file, line);
    const unsigned lane = sbemu_self()->lane, base = lane & ~(unsigned)(width - 1);
    const unsigned src = (lane - base) + delta < (unsigned)width ? lane + delta : lane;
    return sbemu_pick<T>(s, src, mask, "__shfl_down_sync reads a lane outside its mask", file, line);
}
template <typename T>
static inline T sbemu_shfl_xor(const char *file, int line, unsigned mask, T var, int lane_mask, int width = 32) {
    const void *s = sbemu_api_ptr->warp_exchange(mask, &var, sizeof(T), "__shfl_xor_sync", file, line);
    const unsigned lane = sbemu_self()->lane, base = lane & ~(unsigned)(width - 1);
    unsigned src = lane ^ (unsigned)lane_mask;
    if (src >= base + (unsigned)width || src > 31) src = lane; /* later groups: own value */
    return sbemu_pick<T>(s, src, mask, "__shfl_xor_sync reads a lane outside its mask", file, line);
}
static inline unsigned sbemu_vote(const char *kind, const char *file, int line, unsigned mask, int pred) {
    const int mine = pred != 0;
    const int *s = (const int *)sbemu_api_ptr->warp_exchange(mask, &mine, sizeof mine, kind, file, line);
    unsigned ballot = 0;
    for (unsigned i = 0; i < 32; i++) {
        if (((mask >> i) & 1u) && s[i]) ballot |= 1u << i;
    }
    return ballot;
}
#define __shfl_sync(...) sbemu_shfl_idx(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) sbemu_shfl_up(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) sbemu_shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) sbemu_shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) sbemu_vote("__ballot_sync", __FILE__, __LINE__, (mask), (pred))
#define __any_sync(mask, pred) (sbemu_vote("__any_sync", __FILE__, __LINE__, (mask), (pred)) != 0u)
#define __all_sync(mask, pred) \
    (sbemu_vote("__all_sync", __FILE__, __LINE__, (mask), (pred)) == (unsigned)(mask))
static inline void sbemu_syncwarp(const char *file, int line, unsigned mask = 0xffffffffu) {
    sbemu_api_ptr->warp_exchange(mask, 0, 0, "__syncwarp", file, line);
}
#define __syncwarp(...) sbemu_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
/* The lane's index in its warp, for helpers that emulate warp-wide PTX. */
#define sbemu_lane() (sbemu_self()->lane)

/* ---- tensor-core and async-copy instructions, as warp collectives ----
 * Fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
 * floating point type", "ldmatrix"): groupID = lane >> 2, tig = lane & 3;
 * A (16x16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
 * a3 = A[g+8][2t+8..]; B (16x8, col): b0 = B[2t..2t+1][g], b1 = B[2t+8..][g];
 * C/D (16x8): c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..]. In each 32-bit
 * register the lower-indexed element is the low half. */
static inline float sbemu_bf16_lo(unsigned v) { return __builtin_bit_cast(float, v << 16); }
static inline float sbemu_bf16_hi(unsigned v) { return __builtin_bit_cast(float, v & 0xffff0000u); }
struct sbemu_mma_frag {
    unsigned a[4], b[2];
};
static inline void sbemu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4],
                                           const char *file, int line) {
    sbemu_mma_frag mine;
    for (int i = 0; i < 4; i++) mine.a[i] = a[i];
    for (int i = 0; i < 2; i++) mine.b[i] = b[i];
    const sbemu_mma_frag *all = (const sbemu_mma_frag *)sbemu_api_ptr->warp_exchange(
        0xffffffffu, &mine, sizeof mine, "mma.sync.m16n8k16.bf16", file, line);
    const unsigned lane = sbemu_self()->lane, g = lane >> 2, t = lane & 3;
    // Only the two rows (g, g+8) and two columns (2t, 2t+1) this lane owns:
    // row r's k = 2t'+e sits in lane (r%8)*4+t' (a0 or a1, k+8 in a2 or a3),
    // column n's k = 2t'+e in lane n*4+t' (b0, k+8 in b1).
    float arow[2][16], bcol[2][16];
    for (int h = 0; h < 2; h++) {
        for (unsigned tt = 0; tt < 4; tt++) {
            const sbemu_mma_frag &fa = all[g * 4 + tt];
            const unsigned lo = h == 0 ? fa.a[0] : fa.a[1], hi = h == 0 ? fa.a[2] : fa.a[3];
            arow[h][2 * tt] = sbemu_bf16_lo(lo);
            arow[h][2 * tt + 1] = sbemu_bf16_hi(lo);
            arow[h][2 * tt + 8] = sbemu_bf16_lo(hi);
            arow[h][2 * tt + 9] = sbemu_bf16_hi(hi);
            const sbemu_mma_frag &fb = all[(2 * t + h) * 4 + tt];
            bcol[h][2 * tt] = sbemu_bf16_lo(fb.b[0]);
            bcol[h][2 * tt + 1] = sbemu_bf16_hi(fb.b[0]);
            bcol[h][2 * tt + 8] = sbemu_bf16_lo(fb.b[1]);
            bcol[h][2 * tt + 9] = sbemu_bf16_hi(fb.b[1]);
        }
    }
    for (int i = 0; i < 4; i++) {
        const float *ar = arow[i >> 1], *bc = bcol[i & 1];
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += ar[k] * bc[k];
        d[i] = acc;
    }
}
/* ldmatrix .m8n8 .b16: lanes 8j..8j+7 give the row addresses of matrix j;
 * lane l receives, per matrix, row l/4 elements 2(l%4) and 2(l%4)+1 (or,
 * transposed, column l/4 elements of rows 2(l%4) and 2(l%4)+1). */
/* The access counters see ldmatrix as the GPU does it, one 16-byte row per
 * giving lane (lanes 0..8*count-1), not the emulation's reads of the rows:
 * those are not instrumented. */
__attribute__((no_sanitize_thread)) static inline void sbemu_ldmatrix(unsigned *r, int count, bool trans,
                                                                      const void *row, const char *file, int line) {
    /* Each row is 16 bytes that a quad of lanes loads: the GPU wants it
     * naturally aligned and may fault otherwise; here it always faults. */
    if (sbemu_self()->lane < 8u * (unsigned)count && ((unsigned long)row & 15u) != 0)
        sbemu_api_ptr->trap(716, file, line, trans ? "ldmatrix.trans row address not 16-byte aligned" : "ldmatrix row address not 16-byte aligned");
#ifdef SBEMU_COUNTERS
    if (sbemu_self()->lane < 8u * (unsigned)count)
        sbemu_api_ptr->access(row, 16, 0, (const char *)file + 16 * (unsigned long)line);
#endif
    const void *mine = row;
    const void *const *rows = (const void *const *)sbemu_api_ptr->warp_exchange(
        0xffffffffu, &mine, sizeof mine, trans ? "ldmatrix.trans" : "ldmatrix", file, line);
    const unsigned lane = sbemu_self()->lane;
    for (int j = 0; j < count; j++) {
        const unsigned short *m[8];
        for (int q = 0; q < 8; q++) m[q] = (const unsigned short *)rows[8 * j + q];
        unsigned lo, hi;
        if (trans) {
            lo = m[2 * (lane & 3)][lane >> 2];
            hi = m[2 * (lane & 3) + 1][lane >> 2];
        } else {
            lo = m[lane >> 2][2 * (lane & 3)];
            hi = m[lane >> 2][2 * (lane & 3) + 1];
        }
        r[j] = lo | (hi << 16);
    }
}
static inline unsigned long __cvta_generic_to_shared(const void *p) { return (unsigned long)p; }
#define sbemu_cp_async(dst, src, bytes) sbemu_api_ptr->cp_async((dst), (src), (bytes))
#define sbemu_cp_async_commit() sbemu_api_ptr->cp_async_commit()
#define sbemu_cp_async_wait(n) sbemu_api_ptr->cp_async_wait(n)
#define sbemu_smem_retire(p, bytes) sbemu_api_ptr->smem_retire((p), (bytes))

/* ---- programmatic dependent launch: griddepcontrol.wait / .launch_dependents ----
 * The driver records that the thread waited (STEPBENCH_EMU_CHECK_PDL then
 * faults a programmatic launch's access to its predecessor's data made
 * before it); blocks of a grid run after the previous grid has finished,
 * so there is nothing to wait for. */
#define sbemu_griddepcontrol_wait() sbemu_api_ptr->pdl_wait()
#define sbemu_griddepcontrol_launch_dependents() sbemu_api_ptr->pdl_launch_dependents()

/* ---- atomics (other blocks run on other host threads) ---- */
template <typename T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
template <typename T> static inline T sbemu_atomic_update(T *p, T v, T (*op)(T, T)) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, op(old, v), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
static inline float atomicAdd(float *p, float v) {
    unsigned *u = (unsigned *)p;
    unsigned old = __atomic_load_n(u, __ATOMIC_SEQ_CST), want;
    do {
        float f;
        __builtin_memcpy(&f, &old, 4);
        f += v;
        __builtin_memcpy(&want, &f, 4);
    } while (!__atomic_compare_exchange_n(u, &old, want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    float r;
    __builtin_memcpy(&r, &old, 4);
    return r;
}
template <typename T> static inline T sbemu_max2(T a, T b) { return a < b ? b : a; }
template <typename T> static inline T sbemu_min2(T a, T b) { return b < a ? b : a; }
template <typename T> static inline T atomicMax(T *p, T v) { return sbemu_atomic_update<T>(p, v, sbemu_max2<T>); }
template <typename T> static inline T atomicMin(T *p, T v) { return sbemu_atomic_update<T>(p, v, sbemu_min2<T>); }

/* ---- min/max as CUDA overloads them ---- */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

/* ---- float intrinsics (glibc already declares some __names: use macros) ---- */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf((x), (y))
#define __sincosf(x, s, c) sincosf((x), (s), (c))
#define __fdividef(a, b) ((a) / (b))
#define __frcp_rn(x) (1.0f / (x))
#define __fsqrt_rn(x) sqrtf(x)
#define __fadd_rn(a, b) ((a) + (b))
#define __fsub_rn(a, b) ((a) - (b))
#define __fmul_rn(a, b) ((a) * (b))
#define __fdiv_rn(a, b) ((a) / (b))
#define __fmaf_rn(a, b, c) fmaf((a), (b), (c))
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline unsigned __float_as_uint(float f) { unsigned u; __builtin_memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; __builtin_memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; __builtin_memcpy(&d, &u, 8); return d; }
static inline int __float2int_rn(float x) { return (int)rintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)rintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }

/* ---- integer intrinsics ---- */
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int __mul24(int a, int b) {
    const int sa = (int)((unsigned)a << 8) >> 8, sb = (int)((unsigned)b << 8) >> 8;
    return (int)((long long)sa * sb);
}
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (sh & 31u)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (sh & 31u));
}

/* ---- loads with cache hints are plain loads here ---- */
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldca(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline T __ldlu(const T *p) { return *p; }
template <typename T> static inline T __ldcv(const T *p) { return *p; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }
template <typename T> static inline void __stwb(T *p, T v) { *p = v; }
template <typename T> static inline void __stwt(T *p, T v) { *p = v; }

static inline long long clock64(void) { return (long long)__builtin_ia32_rdtsc(); }
static inline int clock(void) { return (int)__builtin_ia32_rdtsc(); }
static inline void __nanosleep(unsigned) {}

/* ---- vector types ---- */
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }


/* ---- access counters (STEPBENCH_EMU_COUNTERS) ----
 * The module is compiled with g++ -fsanitize=thread and linked without its
 * runtime: every load and store calls one of these hooks, which pass the
 * address, size and code site (the hook's return address) to the driver.
 * The hooks themselves are not instrumented. */
#ifdef SBEMU_COUNTERS
#define SBEMU_HOOK extern "C" __attribute__((no_sanitize_thread, noinline, used, visibility("hidden")))
/* An access to the thread's own stack (local memory, which neither the
 * counters nor the PDL check look at) never leaves the module: the stack
 * pointer and the address share the SBEMU_STACK_BYTES-aligned stack. */
static inline __attribute__((always_inline)) int sbemu_own_stack(const void *addr) {
    unsigned long sp;
    __asm__("mov %%rsp, %0" : "=r"(sp));
    return (((unsigned long)addr) ^ sp) < SBEMU_STACK_BYTES;
}
#define SBEMU_ACCESS(addr, n, w)                                                                       \
    do {                                                                                               \
        if (sbemu_api_ptr && !sbemu_own_stack(addr))                                                   \
            sbemu_api_ptr->access((addr), (n), (w), __builtin_return_address(0));                      \
    } while (0)
#define SBEMU_SIZED_HOOKS(n)                                                          \
    SBEMU_HOOK void __tsan_read##n(void *p) { SBEMU_ACCESS(p, n, 0); }              \
    SBEMU_HOOK void __tsan_write##n(void *p) { SBEMU_ACCESS(p, n, 1); }             \
    SBEMU_HOOK void __tsan_unaligned_read##n(void *p) { SBEMU_ACCESS(p, n, 0); }    \
    SBEMU_HOOK void __tsan_unaligned_write##n(void *p) { SBEMU_ACCESS(p, n, 1); }
SBEMU_SIZED_HOOKS(1)
SBEMU_SIZED_HOOKS(2)
SBEMU_SIZED_HOOKS(4)
SBEMU_SIZED_HOOKS(8)
SBEMU_SIZED_HOOKS(16)
SBEMU_HOOK void __tsan_read_range(void *p, unsigned long n) { SBEMU_ACCESS(p, (unsigned)n, 0); }
SBEMU_HOOK void __tsan_write_range(void *p, unsigned long n) { SBEMU_ACCESS(p, (unsigned)n, 1); }
SBEMU_HOOK void __tsan_init(void) {}
SBEMU_HOOK void __tsan_func_entry(void *) {}
SBEMU_HOOK void __tsan_func_exit(void) {}
SBEMU_HOOK void __tsan_vptr_update(void **, void *) {}
SBEMU_HOOK void __tsan_vptr_read(void **) {}
SBEMU_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
SBEMU_HOOK void __tsan_atomic_signal_fence(int) {}
/* Atomics: done as the uninstrumented build does them, counted as a load
 * and a store. */
#define SBEMU_ATOMIC_RMW(bits, T, op, builtin)                                              \
    SBEMU_HOOK T __tsan_atomic##bits##_##op(volatile T *a, T v, int) {                      \
        SBEMU_ACCESS((void *)a, bits / 8, 0);                                               \
        SBEMU_ACCESS((void *)a, bits / 8, 1);                                               \
        return builtin((T *)a, v, __ATOMIC_SEQ_CST);                                        \
    }
#define SBEMU_ATOMICS(bits, T)                                                              \
    SBEMU_ATOMIC_RMW(bits, T, fetch_add, __atomic_fetch_add)                                                  \
    SBEMU_ATOMIC_RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                                  \
    SBEMU_ATOMIC_RMW(bits, T, fetch_and, __atomic_fetch_and)                                                  \
    SBEMU_ATOMIC_RMW(bits, T, fetch_or, __atomic_fetch_or)                                                   \
    SBEMU_ATOMIC_RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                                  \
    SBEMU_ATOMIC_RMW(bits, T, exchange, __atomic_exchange_n)                                                   \
    SBEMU_HOOK T __tsan_atomic##bits##_load(const volatile T *a, int) {                     \
        SBEMU_ACCESS((void *)a, bits / 8, 0);                                               \
        return __atomic_load_n((T *)a, __ATOMIC_SEQ_CST);                                   \
    }                                                                                       \
    SBEMU_HOOK void __tsan_atomic##bits##_store(volatile T *a, T v, int) {                  \
        SBEMU_ACCESS((void *)a, bits / 8, 1);                                               \
        __atomic_store_n((T *)a, v, __ATOMIC_SEQ_CST);                                      \
    }                                                                                       \
    SBEMU_HOOK int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) { \
        SBEMU_ACCESS((void *)a, bits / 8, 0);                                               \
        SBEMU_ACCESS((void *)a, bits / 8, 1);                                               \
        return __atomic_compare_exchange_n((T *)a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    }                                                                                       \
    SBEMU_HOOK int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) { \
        return __tsan_atomic##bits##_compare_exchange_strong(a, c, v, 0, 0);                \
    }                                                                                       \
    SBEMU_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) { \
        __tsan_atomic##bits##_compare_exchange_strong(a, &c, v, 0, 0);                      \
        return c;                                                                           \
    }
SBEMU_ATOMICS(8, unsigned char)
SBEMU_ATOMICS(16, unsigned short)
SBEMU_ATOMICS(32, unsigned int)
SBEMU_ATOMICS(64, unsigned long long)
#endif

/* ---- registration of the kernels (used by code the compile step appends) ---- */
namespace sbemu_detail {
template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> { typedef seq<I...> type; };
template <typename F> struct kernel_traits;
template <typename... A> struct kernel_traits<void (*)(A...)> {
    enum { n = sizeof...(A) };
    static const unsigned sizes[sizeof...(A) + 1];
    static const unsigned aligns[sizeof...(A) + 1];
    template <unsigned... I> static void call(void *fn, void *const *p, seq<I...>) {
        reinterpret_cast<void (*)(A...)>(fn)(*static_cast<A *>(p[I])...);
        (void)p;
    }
    static void invoke(void *fn, void *const *p) { call(fn, p, typename make_seq<sizeof...(A)>::type()); }
};
template <typename... A> const unsigned kernel_traits<void (*)(A...)>::sizes[] = {(unsigned)sizeof(A)..., 0u};
template <typename... A> const unsigned kernel_traits<void (*)(A...)>::aligns[] = {(unsigned)alignof(A)..., 0u};
}  // namespace sbemu_detail
#define SBEMU_KERNEL(name, bounds, params)                                                    \
    {#name, (void *)&name, &sbemu_detail::kernel_traits<decltype(&name)>::invoke,             \
     sbemu_detail::kernel_traits<decltype(&name)>::n,                                        \
     sbemu_detail::kernel_traits<decltype(&name)>::sizes,                                    \
     sbemu_detail::kernel_traits<decltype(&name)>::aligns, params, (int)(bounds)}

#endif

// gemv.cu — linear version 2: out[m, n] = x[m, k] · w[n, k]ᵀ for the few
// token rows of a decode step (m <= 16), bf16 in and out, fp32 accumulation
// on tensor cores; and the same product of the fused gate_up matrix with
// SiLU(gate)·up in its epilogue (gemv_silu_*: one launch for gate_up_proj
// and silu_mul).
//
// Why a kernel of ours: at m = 1..16 a projection is a stream of the weight
// matrix (n·k·2 bytes) with 2m FLOPs per weight pair, far below any matrix
// unit's rate; what matters is that every SM streams with enough bytes in
// flight and that nothing but the weights comes from DRAM.
//
// Work split. A block (GEMV_THREADS = 128: 4 warps) owns GEMV_ROWS = 16
// output columns (rows of w) for every token; its warps split k into
// interleaved chunks of GEMV_KCHUNK = 64 elements (warp w takes chunks w,
// w+4, ...), so the block's 4 warps read 4 adjacent 128-byte pieces of each
// of its 16 weight rows at a time. ceil(n/16) blocks: 256 (o_proj,
// down_proj), 384 (qkv), 1792 (gate_up), 8016 (lm_head) at Llama-3-8B, 2 to
// 61 per SM of an H100/H200 (132 SMs): at most 3% of the SMs' time lost to
// the last wave. The 4 partial sums are added in shared memory in warp
// order (deterministic) and the block writes its 16 columns for m rows.
//
// Inner step, per warp and chunk: lane (g, t) = (lane/4, lane%4) loads two
// 16-byte pieces (k offsets 8t and 32+8t of the chunk) of weight rows g and
// g+8: each load instruction is 8 rows x 64 contiguous bytes, 16 sectors,
// every byte used. Token row g (+8 per block of 8 tokens) is loaded the
// same way. The 8 bf16 of a lane's piece are the k-slots {2t, 2t+1, 2t+8,
// 2t+9} of two mma.m16n8k16 (A = the weight tile row-major, B = xᵀ
// "col"): a dot product is a sum over k in any order, so loading 16
// contiguous bytes per lane and permuting k identically in A and B gives the
// product with 16-byte loads and no shared memory or shuffles. 4 HMMA per
// chunk and token block; GEMV_UNROLL chunks are loaded before the first is
// used (GEMV_UNROLL x 64 bytes of weights in flight per thread).
//
// Weights are read with ld.global.nc.L1::no_allocate (streamed once; they
// must not evict x from L1), x with ld.global.nc (every block reads all of
// it: the 16 blocks an SM runs over time hit L1/L2).
//
// Napkin math at Llama-3-8B bf16, one decode step at batch 1 (every layer's
// qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336, and
// lm_head 128256x4096): 15.01 GB of weights (the cost model's), x and out
// under 0.1% of it; 2 FLOP per weight per token row. At the datasheet peaks
// the floor is 4.48 ms (H100 SXM, 3.35 TB/s) and 3.13 ms (H200, 4.8 TB/s);
// with m = 16 the FLOPs are 240 GFLOP = 0.24 ms at 989 TFLOP/s: still
// bandwidth-bound. Predicted (not measured: no GPU was lent): 90% of the
// HBM roof while a launch streams (the share well-fed streaming kernels
// reach on Hopper; 3.0 of 3.35 TB/s on an H100, 4.3 of 4.8 on an H200, as
// the copy this workplace measured on an H200) plus about 1 us of fill and
// drain per launch, i.e. 4.98 + 0.13 = 5.11 ms (H100) / 3.48 + 0.13 = 3.61
// ms (H200) for a step's 129 projections at batch 1..16; per launch at
// H200: qkv 12.6 us, o 8.8 us, gate_up 55.4 us, down 28.2 us, lm_head 244
// us (bytes / (0.9 x 4.8 TB/s) + 1 us); at H100: 17.7, 12.1, 78.9, 39.9,
// 350 us.
//
// Extra traffic this split pays: x is re-read by every block (from L1/L2,
// not DRAM): m/16 of the weight bytes (6% at m = 1, 100% at m = 16), which
// is why version 2 stops at 16 rows (at 32 it would be twice the weight
// stream through L2).
//
// Evidence without a GPU (how each figure was made; no figure here is a
// GPU measurement):
//  - ptxas, NVRTC 11.8 for sm_90 (stepbench build --nvrtc
//    /usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2 --arch 90): gemv_t8 122
//    registers, gemv_t16 162, gemv_silu_t8 124, gemv_silu_t16 164; 0 spill
//    bytes; static shared 2112 / 4224 B (the warps' partial sums). At 162
//    registers 3 blocks (12 warps) fit an SM.
//  - SASS (stepbench build --cubin-dir, cuobjdump -sass of Debian's
//    nvidia-cuda-toolkit 11.8, scripts/sass-mix), the whole-chunk loop per
//    64-element chunk of a warp, i.e. per 2 KB of weights: gemv_t8 36.1
//    instructions (4 HMMA, 4 LDG.E.NA.128 of weights + 2 LDG.E.128 of x,
//    16 MOV assembling A fragments, 5 integer, 5 branch; ptxas unrolls two
//    rings: 289 per trip of 8 chunks); gemv_t16 60 (8 HMMA, 4 + 4
//    LDG.128, 32.5 MOV, 6 integer, 5 branch; 240 per trip of 4). Streaming
//    at 4.8 TB/s an SM takes 18.4 B/clock (132 SMs at 1.98 GHz), 2 KB per
//    111 clocks: 0.33 (t8) and 0.54 (t16) instructions per clock of the 4 an
//    SM issues. No FFMA in the loop: the products are on tensor cores.
//  - Access counters (EMULATED, stepbench verify --check linear --counters,
//    llama-tiny and odd widths): global loads 16 sectors per request with
//    every byte used where the 8 token rows are distinct (m >= 8); at m = 1
//    11.3 (the weight requests 16, x's 2: the 8 lane groups read token 0's
//    64 bytes), every byte used; stores 1-2 sectors per request, 100% used
//    at full 16-column tiles; shared stores 0-0.125 bank conflicts per
//    request, loads 0. Sector bytes over the cost model's bytes: 1.06 at
//    m = 1, 1.9 at m = 16 (x re-read by every block, from L1/L2).

#define GEMV_THREADS 128
#define GEMV_ROWS 16
#define GEMV_KCHUNK 64
#define GEMV_UNROLL 4
#define GEMV_WARPS (GEMV_THREADS / 32)

// ld_weights16 loads 16 bytes of a weight row, bypassing L1 allocation.
__device__ __forceinline__ u32x4 ld_weights16(const unsigned short* p) {
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

// ld_x16 loads 16 bytes of an activation row through the read-only path.
__device__ __forceinline__ u32x4 ld_x16(const unsigned short* p) {
#ifdef __SBEMU__
    return *(const u32x4*)p;
#else
    u32x4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#endif
}

// gemv_mma4 adds one 64-element chunk's product to acc: wa/wb are the two
// pieces (k offsets 8t, 32+8t) of weight rows g and g+8, xv[mt] those of
// token row g+8mt. Two mma per piece: slots {2t,2t+1 | 2t+8,2t+9} take the
// piece's elements {0,1 | 2,3}, then {4,5 | 6,7}.
template <int MT>
__device__ __forceinline__ void gemv_mma4(float acc[MT][4], const u32x4 wa[2], const u32x4 wb[2],
                                          const u32x4 xv[MT][2]) {
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

// gemv_load loads one whole chunk (at element offset off from the lane's
// pointers) into a ring set.
template <int MT>
__device__ __forceinline__ void gemv_load(u32x4 wa[2], u32x4 wb[2], u32x4 xv[MT][2], const unsigned short* pa,
                                          const unsigned short* pb, const unsigned short* const px[MT], int off) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        wa[p] = ld_weights16(pa + off + 32 * p);
        wb[p] = ld_weights16(pb + off + 32 * p);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) xv[mt][p] = ld_x16(px[mt] + off + 32 * p);
    }
}

// gemv_partial is one warp's share of a 16-row tile's product: rows row0..
// row0+15 of w times token rows 0..8*MT-1 of x over the k chunks first,
// first+STEP, ...; acc[mt] is the mma D fragment of tokens 8mt..8mt+7.
// Rows at or past rowEnd and tokens at or past m read row0 and token 0
// instead (a valid row): their D rows and columns are never stored, so no
// load needs a predicate but those of the last, partial k chunk.
template <int MT, int STEP>
__device__ __forceinline__ void gemv_partial(float acc[MT][4], const unsigned short* __restrict__ x,
                                             const unsigned short* __restrict__ w, int m, int rowEnd,
                                             int k, int row0, int first) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ra = row0 + g < rowEnd ? row0 + g : row0;
    const int rb = row0 + g + 8 < rowEnd ? row0 + g + 8 : row0;
    const int first_off = first * GEMV_KCHUNK + 8 * t;
    const unsigned short* pa = w + (long long)ra * k + first_off;
    const unsigned short* pb = w + (long long)rb * k + first_off;
    const unsigned short* px[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) px[mt] = x + (long long)(g + 8 * mt < m ? g + 8 * mt : 0) * k + first_off;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;

    // Whole chunks through a ring of GEMV_UNROLL register sets: the loads
    // of chunk j+GEMV_UNROLL are issued as soon as chunk j's mma have read
    // its set, so GEMV_UNROLL-1..GEMV_UNROLL chunks are always in flight.
    // (Loads and mma are asm volatile: ptxas keeps this order instead of
    // sinking each load to its use.) j counts this warp's whole chunks, c =
    // first + j*STEP; the count is the same for the warp's 32 lanes.
    constexpr int STRIDE = STEP * GEMV_KCHUNK;  // elements between a warp's chunks
    const int full = k / GEMV_KCHUNK;
    const int mine = first < full ? (full - first + STEP - 1) / STEP : 0;
    u32x4 wa[GEMV_UNROLL][2], wb[GEMV_UNROLL][2], xv[GEMV_UNROLL][MT][2];
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        if (u < mine) gemv_load<MT>(wa[u], wb[u], xv[u], pa, pb, px, u * STRIDE);
    }
    {
        // Working pointers at chunk j0: the loads take immediate offsets.
        const unsigned short *qa = pa, *qb = pb, *qx[MT];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) qx[mt] = px[mt];
        for (int j0 = 0; j0 < mine; j0 += GEMV_UNROLL) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                if (j0 + u < mine) {
                    gemv_mma4<MT>(acc, wa[u], wb[u], xv[u]);
                    if (j0 + u + GEMV_UNROLL < mine) {
                        gemv_load<MT>(wa[u], wb[u], xv[u], qa, qb, qx, (u + GEMV_UNROLL) * STRIDE);
                    }
                }
            }
            qa += GEMV_UNROLL * STRIDE;
            qb += GEMV_UNROLL * STRIDE;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) qx[mt] += GEMV_UNROLL * STRIDE;
        }
    }
    const int c_rest = first + mine * STEP;
    pa += mine * STRIDE;
    pb += mine * STRIDE;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) px[mt] += mine * STRIDE;
    // The rest one chunk at a time; k % 8 == 0, so a lane's 8-element piece
    // of the last chunk is wholly inside k or wholly past it (zeros).
    const int chunks = (k + GEMV_KCHUNK - 1) / GEMV_KCHUNK;
    const u32x4 zero = {0, 0, 0, 0};
    for (int c = c_rest; c < chunks; c += STEP) {
        u32x4 wa[2], wb[2], xv[MT][2];
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const bool in = c * GEMV_KCHUNK + 32 * p + 8 * t < k;
            wa[p] = in ? ld_weights16(pa + 32 * p) : zero;
            wb[p] = in ? ld_weights16(pb + 32 * p) : zero;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) xv[mt][p] = in ? ld_x16(px[mt] + 32 * p) : zero;
        }
        gemv_mma4<MT>(acc, wa, wb, xv);
        pa += STRIDE;
        pb += STRIDE;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) px[mt] += STRIDE;
    }
}

// gemv_fragment_sum is the sum over warps [w0, w1) of the partials in red
// ([warp][MT*4][33] floats) of tile row r (0..15) and token tk: the D
// fragment element (c0..c3 = rows g, g, g+8, g+8; tokens 2t, 2t+1) lane
// g*4+t holds.
template <int MT>
__device__ __forceinline__ float gemv_fragment_sum(const float* red, int w0, int w1, int r, int tk) {
    const int mt = tk >> 3, tc = tk & 7;
    const int e = (r >> 3) * 2 + (tc & 1), lane = (r & 7) * 4 + (tc >> 1);
    float s = 0.0f;
    for (int wp = w0; wp < w1; wp++) s += red[(wp * MT * 4 + mt * 4 + e) * 33 + lane];
    return s;
}

// gemv_stash writes a warp's D fragments to red for gemv_fragment_sum.
template <int MT>
__device__ __forceinline__ void gemv_stash(float* red, const float acc[MT][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) red[(warp * MT * 4 + mt * 4 + e) * 33 + lane] = acc[mt][e];
    }
}

// gemv: out[i*n + j] = bf16(sum_k x[i*k + kk] * w[j*k + kk]) for i < m <= 8*MT.
// Block b owns columns 16b..16b+15. The wrapper guarantees k % 8 == 0,
// 16-byte aligned x and w.
template <int MT>
__device__ __noinline__ void gemv(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                  const unsigned short* __restrict__ w, int m, int n, int k) {
    __shared__ float red[GEMV_WARPS * MT * 4 * 33];
    const int warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * GEMV_ROWS;
    float acc[MT][4];
    gemv_partial<MT, GEMV_WARPS>(acc, x, w, m, n, k, row0, warp);
    gemv_stash<MT>(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < GEMV_ROWS * 8 * MT; o += GEMV_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        if (tk < m && row0 + r < n) {
            out[(long long)tk * n + row0 + r] = f32_to_bf16_rne(gemv_fragment_sum<MT>(red, 0, GEMV_WARPS, r, tk));
        }
    }
}

// gemv_silu: gateUp = x · wᵀ with w the fused [2*inter, k] gate_up matrix,
// then out[i*inter + j] = SiLU·mul of it (activation.cu's silu_mul, on the
// bf16-rounded products): block b owns columns j = 16b..16b+15 of both
// halves; warps 0-1 compute the gate rows j, warps 2-3 the up rows inter+j,
// each pair splitting k.
template <int MT>
__device__ __noinline__ void gemv_silu(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                       const unsigned short* __restrict__ w, int m, int inter, int k) {
    __shared__ float red[GEMV_WARPS * MT * 4 * 33];
    const int warp = threadIdx.x >> 5;
    const int j0 = blockIdx.x * GEMV_ROWS;
    const int half = warp >> 1;  // 0: gate rows, 1: up rows
    float acc[MT][4];
    gemv_partial<MT, 2>(acc, x, w, m, inter + half * inter, k, j0 + half * inter, warp & 1);
    gemv_stash<MT>(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < GEMV_ROWS * 8 * MT; o += GEMV_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        if (tk < m && j0 + r < inter) {
            const float g = round_bf16(gemv_fragment_sum<MT>(red, 0, 2, r, tk));
            const float u = round_bf16(gemv_fragment_sum<MT>(red, 2, 4, r, tk));
            out[(long long)tk * inter + j0 + r] = f32_to_bf16_rne(round_bf16(g / (1.0f + expf(-g))) * u);
        }
    }
}

// Entry points: _t8 takes m <= 8 (one mma token block), _t16 m <= 16.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_t8(unsigned short* out, const unsigned short* x,
                                                                   const unsigned short* w, int m, int n, int k) {
    gemv<1>(out, x, w, m, n, k);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_t16(unsigned short* out, const unsigned short* x,
                                                                    const unsigned short* w, int m, int n, int k) {
    gemv<2>(out, x, w, m, n, k);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_silu_t8(unsigned short* out, const unsigned short* x,
                                                                        const unsigned short* w, int m, int inter,
                                                                        int k) {
    gemv_silu<1>(out, x, w, m, inter, k);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_silu_t16(unsigned short* out, const unsigned short* x,
                                                                         const unsigned short* w, int m, int inter,
                                                                         int k) {
    gemv_silu<2>(out, x, w, m, inter, k);
}

// gemv.cu — linear versions 2 and 3: out[m, n] = x[m, k] · w[n, k]ᵀ for the
// few token rows of a decode step (version 2: m <= 16; version 3: the same
// kernels for m <= 16 and gemv_t32 for 17..32, described after version 2's
// code), bf16 in and out, fp32 accumulation on tensor cores; and the same
// product of the fused gate_up matrix with SiLU(gate)·up in its epilogue
// (gemv_silu_*: one launch for gate_up_proj and silu_mul).
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
// must not evict x from L1), x with coherent ld.global (every block reads
// all of it: the 16 blocks an SM runs over time hit L1/L2; not .nc, which
// a programmatic launch would make unsound: ld_x16).
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

// ld_x16 loads 16 bytes of an activation row, coherently (cached in L1
// and L2). Not ld.global.nc: under --kernel launch=2 the kernel before this
// one may still be writing x when this one starts, so x is not read-only
// for this kernel's lifetime, which .nc requires; and ptxas (NVRTC 11.8)
// does move .nc loads above griddepcontrol.wait (SASS: x's
// LDG.E.128.CONSTANT issued before ACQBULK), never coherent ones.
__device__ __forceinline__ u32x4 ld_x16(const unsigned short* p) {
#ifdef __SBEMU__
    return *(const u32x4*)p;
#else
    u32x4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#endif
}

// ld_f32 loads one float coherently (the producer's squared sums: written
// by the kernel before, so not through the read-only path; see ld_x16).
__device__ __forceinline__ float ld_f32(const float* p) {
#ifdef __SBEMU__
    return *p;
#else
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
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

// gemv_norm2 is RMSNorm of two bf16 of x (the low half first): bf16(w *
// bf16(x * r)), ref.AddRMSNorm's roundings. On a GPU: two FMUL, one
// cvt.rn.bf16x2.f32 and one fma.rn.bf16x2 with a -0 addend (the product of
// two bf16 is exact in fp32, so the fma rounds it once, as the reference).
__device__ __forceinline__ unsigned gemv_norm2(unsigned x, unsigned w, float r) {
    const unsigned xr = pack_bf16x2_rn(__uint_as_float(x << 16) * r, __uint_as_float(x & 0xffff0000u) * r);
#ifdef __SBEMU__
    return pack2(__uint_as_float(w << 16) * __uint_as_float(xr << 16),
                 __uint_as_float(w & 0xffff0000u) * __uint_as_float(xr & 0xffff0000u));
#else
    unsigned d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(xr), "r"(0x80008000u));
    return d;
#endif
}

// gemv_norm8 normalises the 8 bf16 of an x piece with the norm weights of
// the same k offsets (wv) and the token's 1/rms (r).
__device__ __forceinline__ u32x4 gemv_norm8(u32x4 xv, u32x4 wv, float r) {
    u32x4 o;
    o.x = gemv_norm2(xv.x, wv.x, r);
    o.y = gemv_norm2(xv.y, wv.y, r);
    o.z = gemv_norm2(xv.z, wv.z, r);
    o.w = gemv_norm2(xv.w, wv.w, r);
    return o;
}

// gemv_normalize normalises one chunk's x pieces of every token tile; nw
// points at the lane's first piece's norm weights in shared memory (the
// second is 32 elements on).
template <int MT>
__device__ __forceinline__ void gemv_normalize(u32x4 xv[MT][2], const unsigned short* nw, const float r[MT]) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const u32x4 wv = *(const u32x4*)(nw + 32 * p);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) xv[mt][p] = gemv_norm8(xv[mt][p], wv, r[mt]);
    }
}

// GemvNorm is what linear version 4's RMSNorm prologue reads and where it
// puts what the main loop needs (gemv_norm_prologue).
struct GemvNorm {
    const float* part;            // [m][parts] squared sums of the producer's blocks
    const unsigned short* weight; // the norm's weights, k of them
    unsigned short* nws;          // shared: the weights, k of them
    float* wsum;                  // shared: [GEMV_WARPS][8*MT] warp sums
    float* rs;                    // shared: [8*MT] each token's 1/rms
    int parts;
    float eps;
};

// gemv_norm_prologue computes each token's 1/rms = rsqrt(sum of the producer's partials / k + eps): a
// fixed order (thread t adds partials t, t+128, ...; a warp's 32 by xor
// shuffles; the 4 warps' in order), so the result is deterministic. Every
// thread of the block calls it (two barriers).
// gemv_stage_norm_weights copies the norm's k weights to shared memory
// (read by the main loop after gemv_norm_prologue's barriers).
__device__ __forceinline__ void gemv_stage_norm_weights(const GemvNorm& nrm, int k) {
    for (int i = threadIdx.x; i < k / 8; i += GEMV_THREADS) ((u32x4*)nrm.nws)[i] = ld_weights16(nrm.weight + 8 * i);
}

template <int MT>
__device__ __forceinline__ void gemv_norm_prologue(const GemvNorm& nrm, int m, int k) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s[8 * MT];
#pragma unroll
    for (int tk = 0; tk < 8 * MT; tk++) s[tk] = 0.0f;
    for (int b = threadIdx.x; b < nrm.parts; b += GEMV_THREADS) {
#pragma unroll
        for (int tk = 0; tk < 8 * MT; tk++) {
            if (tk < m) s[tk] += ld_f32(nrm.part + (long long)tk * nrm.parts + b);
        }
    }
#pragma unroll
    for (int tk = 0; tk < 8 * MT; tk++) {
        s[tk] = warp_sum(s[tk]);
        if (lane == 0) nrm.wsum[warp * 8 * MT + tk] = s[tk];
    }
    __syncthreads();
    if (threadIdx.x < m) {
        float t = 0.0f;
        for (int wp = 0; wp < GEMV_WARPS; wp++) t += nrm.wsum[wp * 8 * MT + threadIdx.x];
        nrm.rs[threadIdx.x] = rsqrtf(t / (float)k + nrm.eps);
    }
    __syncthreads();
}

// gemv_load_weights and gemv_load_x are gemv_load's two halves (the
// ring's first chunks: weights first).
__device__ __forceinline__ void gemv_load_weights(u32x4 wa[2], u32x4 wb[2], const unsigned short* pa,
                                                  const unsigned short* pb, int off) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        wa[p] = ld_weights16(pa + off + 32 * p);
        wb[p] = ld_weights16(pb + off + 32 * p);
    }
}
template <int MT>
__device__ __forceinline__ void gemv_load_x(u32x4 xv[MT][2], const unsigned short* const px[MT], int off) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) xv[mt][p] = ld_x16(px[mt] + off + 32 * p);
    }
}

// gemv_inputs_ready marks where a gemv kernel starts to read what the
// kernel before it in the stream wrote (x, the squared sums) or to write
// what that kernel may still read (out, the residual): everything before
// it reads only weights, so under --kernel launch=2 the ring's first
// weight loads (GEMV_UNROLL x 64 B per thread, 32 KB per block; linear 4's
// norm weights too) are in flight while the predecessor finishes, the one
// prologue of a GEMV worth hoisting: its DRAM latency. Every thread of the
// block calls it (gemv_partial, gemv32_partial); the trigger right after
// the wait is common.cu's rule (the dependent's blocks take only the slots
// this grid left free). Under a plain launch the wait returns at once.
// The branch on k (always taken: k >= 8) is there for ptxas: NVRTC 11.8's
// hoists an unconditional griddepcontrol.wait to the kernel's first
// instructions, above the weight loads (SASS: ACQBULK at the top of
// gemv_t8), and keeps one behind a branch after them (gemv_t8, _t16,
// gemv_res_*, gemv_norm_*; in gemv_silu_* and gemv_t32 it still issues the
// wait first: correct, only no overlap). x and the squared sums are loaded
// coherently (ld_x16, ld_f32), so no load of them moves above the wait.
__device__ __forceinline__ void gemv_inputs_ready(int k) {
    if (k > 0) {
        SB_PDL_WAIT();
        SB_PDL_LAUNCH_DEPENDENTS();
    }
}

// gemv_partial is one warp's share of a 16-row tile's product: rows row0..
// row0+15 of w times token rows 0..8*MT-1 of x over the k chunks first,
// first+STEP, ...; acc[mt] is the mma D fragment of tokens 8mt..8mt+7.
// Rows at or past rowEnd and tokens at or past m read row0 and token 0
// instead (a valid row): their D rows and columns are never stored, so no
// load needs a predicate but those of the last, partial k chunk. With NORM
// (linear version 4), x is the residual stream and each piece is RMS-
// normalised at its use; the prologue (gemv_norm_prologue: the norm
// weights into shared memory, each token's 1/rms) runs after the ring's
// first loads are issued, so its L2 round trips overlap their DRAM latency.
template <int MT, int STEP, bool NORM = false>
__device__ __forceinline__ void gemv_partial(float acc[MT][4], const unsigned short* __restrict__ x,
                                             const unsigned short* __restrict__ w, int m, int rowEnd,
                                             int k, int row0, int first, const GemvNorm* nrm = nullptr) {
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
    // The ring's first weights, then (with NORM) the norm weights into
    // shared memory: neither is anything a preceding kernel writes, so
    // they are issued before gemv_inputs_ready (the point past which x,
    // the producer's squared sums and out may be touched).
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        if (u < mine) gemv_load_weights(wa[u], wb[u], pa, pb, u * STRIDE);
    }
    if (NORM) gemv_stage_norm_weights(*nrm, k);
    gemv_inputs_ready(k);
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        if (u < mine) gemv_load_x<MT>(xv[u], px, u * STRIDE);
    }
    float r[MT];
    const unsigned short* nws = nullptr;
    if (NORM) {
        gemv_norm_prologue<MT>(*nrm, m, k);
        nws = nrm->nws;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) r[mt] = nrm->rs[g + 8 * mt < m ? g + 8 * mt : 0];
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
                    if (NORM) gemv_normalize<MT>(xv[u], nws + first_off + (j0 + u) * STRIDE, r);
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
            if (NORM && in) {
                const u32x4 wv = *(const u32x4*)(nws + c * GEMV_KCHUNK + 32 * p + 8 * t);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) xv[mt][p] = gemv_norm8(xv[mt][p], wv, r[mt]);
            }
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

// gemv_store is gemv's epilogue: the block's columns row0..row0+15 of the
// m token rows, each the warps' partials summed in warp order.
template <int MT>
__device__ __forceinline__ void gemv_store(unsigned short* __restrict__ out, const float* red, int m, int n,
                                           int row0) {
    for (int o = threadIdx.x; o < GEMV_ROWS * 8 * MT; o += GEMV_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        if (tk < m && row0 + r < n) {
            out[(long long)tk * n + row0 + r] = f32_to_bf16_rne(gemv_fragment_sum<MT>(red, 0, GEMV_WARPS, r, tk));
        }
    }
}

// gemv_silu_store is gemv_silu's epilogue: warps 0-1 hold the gate
// partials, 2-3 the up partials of columns j0..j0+15.
template <int MT>
__device__ __forceinline__ void gemv_silu_store(unsigned short* __restrict__ out, const float* red, int m,
                                                int inter, int j0) {
    for (int o = threadIdx.x; o < GEMV_ROWS * 8 * MT; o += GEMV_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        if (tk < m && j0 + r < inter) {
            const float g = round_bf16(gemv_fragment_sum<MT>(red, 0, 2, r, tk));
            const float u = round_bf16(gemv_fragment_sum<MT>(red, 2, 4, r, tk));
            out[(long long)tk * inter + j0 + r] = f32_to_bf16_rne(round_bf16(g / (1.0f + expf(-g))) * u);
        }
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
    gemv_store<MT>(out, red, m, n, row0);
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
    gemv_silu_store<MT>(out, red, m, inter, j0);
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

// ---------------------------------------------------------------------------
// Linear version 3's own kernels: 17..32 token rows (gemv_t32,
// gemv_silu_t32). Version 3 runs version 2's kernels above for 1..16 rows.
//
// Why a second split: version 2's block owns 16 output columns and reads
// all of x, so x crosses L2 n/16 times: m/16 of the weight bytes, twice the
// weight stream at m = 32. Here a block owns 32 columns (two m16 tiles,
// GEMV32_COLS) and its 8 warps (GEMV32_THREADS = 256) split k as version
// 2's do (warp w takes chunks w, w+8, ...): x crosses L2 n/32 times, m/32 of
// the weight bytes, at most equal to them. The gate_up kernel's block owns
// 16 columns of gate (tile 0) and the same 16 of up (tile 1): 32 weight
// rows per block as well, and each warp has both of a column's products.
//
// Inner step, per warp and 64-element chunk: version 2's fragments (lane
// (g, t) loads the pieces at k offsets 8t and 32+8t of weight rows g and
// g+8 of each tile, and of token rows g + 8mt), 8 LDG.128 of weights
// (4 KB per warp, 32 rows x 128 B, every byte used) and 8 of x for 2 row
// tiles x 4 token tiles x 4 = 32 HMMA. GEMV32_UNROLL = 2 chunks are loaded
// before the first is used: 2 x 128 B of weights in flight per thread, as
// version 2's 4 x 64 B (the ring of 2 sets x 64 registers is what fits
// under 255 with 32 accumulators). At 8 warps per SM (one block: see the
// ptxas figures) that is 64 KB of weights in flight per SM, against about
// 26 KB that Little's law asks at 4.8 TB/s / 132 SMs and ~0.7 us of DRAM
// latency.
//
// Blocks at Llama-3-8B: ceil(n/32) = 192 (qkv), 128 (o_proj, down_proj:
// 4 of 132 SMs idle, 3%), 4008 (lm_head), and ceil(inter/16) = 896 for
// gate_up with SiLU·mul.
//
// Napkin math at Llama-3-8B bf16, one decode step at batch 32 (PREDICTED,
// not measured: no GPU was lent). The weights are the same 15.01 GB as at
// batch 1; x and out (gate_up's out being SiLU·mul's inter columns) are
// 0.12 GB over the step's 129 projections (0.8%), and x's re-reads come
// from L2 (n/32 passes: 1 x the weight bytes at m = 32, where version 2's
// split would pass 2 x). Floor: 15.13 GB at 4.8 TB/s = 3.15 ms (H200), at
// 3.35 TB/s = 4.52 ms (H100). FLOPs: 2 x 32 x 7.5 G weights = 480 GFLOP,
// 0.49 ms at the 989 TFLOP/s dense bf16 peak (about 0.75 ms at the ~65% of
// it mma.sync reaches on Hopper): bandwidth-bound still, with the tensor
// cores busy a quarter of the time. Predicted as version 2: 90% of the HBM
// roof while a launch streams plus about 1 us of fill and drain per launch,
// 3.50 + 0.13 = 3.63 ms (H200) and 5.02 + 0.13 = 5.15 ms (H100) for the
// step's projections (at 80% of the roof: 4.07 / 5.77 ms), against issue
// 19's model of cuBLAS at batch 32 (61-82% of the bandwidth, about 4.65 ms
// at H200); per launch at H200: qkv 12.8 us, o 8.9, gate_up with SiLU·mul
// 55.6, down 28.5, lm_head 246 us (bytes / (0.9 x 4.8 TB/s) + 1 us); at
// H100: 17.9, 12.3, 79.3, 40.3, 352 us. The risk the model does not
// price: the 128-block launches (o_proj, down_proj, 6% of the bytes) leave
// 4 SMs idle and need the 64 KB in flight per SM to reach the roof.
//
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas, NVRTC 11.8 for sm_90 (stepbench build --nvrtc
//    /usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2 --arch 90): gemv_t32 and
//    gemv_silu_t32 194 registers, 0 spill bytes, 35,904 B static shared
//    (8 warps x 34 slots x 33 floats); 1 block (8 warps) per SM, limited by
//    registers. (A ring without predicates in its steady trips took 202
//    registers and 185 MOV per trip: ptxas shuffled the sets.)
//  - SASS (stepbench build --cubin-dir, cuobjdump -sass of Debian's
//    nvidia-cuda-toolkit 11.8, scripts/sass-mix), gemv_t32's whole-chunk
//    loop: 230 instructions per trip of 2 chunks (gemv_silu_t32 the same),
//    i.e. per 64-element chunk of a warp (4 KB of weights, 32 tokens):
//    115 = 32 HMMA, 8 LDG.E.NA.128 of weights + 8 LDG.E.128 of x, 36 MOV
//    (assembling A fragments), 12.5 integer, 5.5 branch and 13 NOP of
//    padding; version 2's gemv_t16 issues 60 per 2 KB, the same 29-30 per
//    KB of weights. Streaming at 4.8 TB/s an SM takes 18.4 B/clock, 4 KB per
//    222 clocks: 0.52 instructions per clock of the 4 an SM issues, and the
//    tensor pipe 32 of those clocks at its peak. No FFMA in the loop.
//  - Emulated (stepbench verify --check linear): within bf16 tolerance of
//    ref.Gemv / ref.GemvSiluMul at every Llama-3-8B projection (capped at
//    2^25 weights) at 17, 24 and 32 rows in forward order (worst 5.2e-5
//    relative), and at llama-tiny's, the odd widths' and the edges under
//    forward, reverse, random:5, warp-serial and warp-serial-reverse; the
//    barrier after gemv32_stash removed fails 32 checks in every one.
//  - Access counters (EMULATED, stepbench verify --check linear --kernel
//    linear=3 --counters, llama-tiny and odd widths): global loads 16
//    sectors per request at 32 rows (14-14.3 at 17 and 24, where the lane
//    groups past m read token 0's row), every byte used at whole tiles;
//    stores 2 sectors per request, 100% used at whole 32-column blocks;
//    shared loads 0 bank conflicts (the padding slot), stores 0.016 per
//    request.

#define GEMV32_THREADS 256
#define GEMV32_COLS 32
#define GEMV32_UNROLL 2
#define GEMV32_WARPS (GEMV32_THREADS / 32)
// A warp's partials in shared memory: per row tile 16 slots (4 token tiles
// x 4 fragment registers) plus one of padding, so that the two tiles' slots
// fall in different banks (the epilogue reads both in one request).
#define GEMV32_TILE_SLOTS 17
#define GEMV32_WARP_SLOTS (2 * GEMV32_TILE_SLOTS)

// gemv32_load loads one chunk (at element offset off from the lane's
// pointers): wv[rt][h][p] is piece p of tile rt's weight row g + 8h (pw[2rt
// + h]), xv[mt][p] piece p of token row g + 8mt.
__device__ __forceinline__ void gemv32_load(u32x4 wv[2][2][2], u32x4 xv[4][2], const unsigned short* const pw[4],
                                            const unsigned short* const px[4], int off) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
#pragma unroll
        for (int i = 0; i < 4; i++) wv[i >> 1][i & 1][p] = ld_weights16(pw[i] + off + 32 * p);
#pragma unroll
        for (int mt = 0; mt < 4; mt++) xv[mt][p] = ld_x16(px[mt] + off + 32 * p);
    }
}

// gemv32_mma adds one chunk's product to acc[rt][mt] (tile rt's D fragment
// of tokens 8mt..8mt+7), the slots as in gemv_mma4.
__device__ __forceinline__ void gemv32_mma(float acc[2][4][4], const u32x4 wv[2][2][2], const u32x4 xv[4][2]) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
#pragma unroll
        for (int rt = 0; rt < 2; rt++) {
            const unsigned a_lo[4] = {wv[rt][0][p].x, wv[rt][1][p].x, wv[rt][0][p].y, wv[rt][1][p].y};
            const unsigned a_hi[4] = {wv[rt][0][p].z, wv[rt][1][p].z, wv[rt][0][p].w, wv[rt][1][p].w};
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const unsigned b_lo[2] = {xv[mt][p].x, xv[mt][p].y};
                const unsigned b_hi[2] = {xv[mt][p].z, xv[mt][p].w};
                mma_m16n8k16_bf16(acc[rt][mt], a_lo, b_lo, acc[rt][mt]);
                mma_m16n8k16_bf16(acc[rt][mt], a_hi, b_hi, acc[rt][mt]);
            }
        }
    }
}

// gemv32_partial is one warp's share of a 32-row product: the lane's weight
// rows rows[2rt + h] (tile rt's row g + 8h, already clamped to a valid row
// by the caller) times token rows 0..31 of x over the k chunks warp,
// warp+GEMV32_WARPS, ...; tokens at or past m read token 0 (never stored).
// The ring and the partial last chunk as in gemv_partial, with one set of
// pointers (advanced in place, then stepped back to chunk `mine`).
__device__ __forceinline__ void gemv32_partial(float acc[2][4][4], const unsigned short* __restrict__ x,
                                               const unsigned short* __restrict__ w, int m, int k,
                                               const int rows[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, first = threadIdx.x >> 5;
    const int first_off = first * GEMV_KCHUNK + 8 * t;
    const unsigned short *pw[4], *px[4];
#pragma unroll
    for (int i = 0; i < 4; i++) pw[i] = w + (long long)rows[i] * k + first_off;
#pragma unroll
    for (int mt = 0; mt < 4; mt++) px[mt] = x + (long long)(g + 8 * mt < m ? g + 8 * mt : 0) * k + first_off;
#pragma unroll
    for (int rt = 0; rt < 2; rt++) {
#pragma unroll
        for (int mt = 0; mt < 4; mt++) acc[rt][mt][0] = acc[rt][mt][1] = acc[rt][mt][2] = acc[rt][mt][3] = 0.0f;
    }
    constexpr int STRIDE = GEMV32_WARPS * GEMV_KCHUNK;  // elements between a warp's chunks
    const int full = k / GEMV_KCHUNK;
    const int mine = first < full ? (full - first + GEMV32_WARPS - 1) / GEMV32_WARPS : 0;
    u32x4 wv[GEMV32_UNROLL][2][2][2], xv[GEMV32_UNROLL][4][2];
    // The ring's first weights before gemv_inputs_ready, then its x.
#pragma unroll
    for (int u = 0; u < GEMV32_UNROLL; u++) {
        if (u < mine) {
#pragma unroll
            for (int p = 0; p < 2; p++) {
#pragma unroll
                for (int i = 0; i < 4; i++) wv[u][i >> 1][i & 1][p] = ld_weights16(pw[i] + u * STRIDE + 32 * p);
            }
        }
    }
    gemv_inputs_ready(k);
#pragma unroll
    for (int u = 0; u < GEMV32_UNROLL; u++) {
        if (u < mine) {
#pragma unroll
            for (int p = 0; p < 2; p++) {
#pragma unroll
                for (int mt = 0; mt < 4; mt++) xv[u][mt][p] = ld_x16(px[mt] + u * STRIDE + 32 * p);
            }
        }
    }
    int j0 = 0;
    for (; j0 < mine; j0 += GEMV32_UNROLL) {
#pragma unroll
        for (int u = 0; u < GEMV32_UNROLL; u++) {
            if (j0 + u < mine) {
                gemv32_mma(acc, wv[u], xv[u]);
                if (j0 + u + GEMV32_UNROLL < mine) gemv32_load(wv[u], xv[u], pw, px, (u + GEMV32_UNROLL) * STRIDE);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            pw[i] += GEMV32_UNROLL * STRIDE;
            px[i] += GEMV32_UNROLL * STRIDE;
        }
    }
    // The pointers stand at chunk j0 >= mine: back to chunk mine.
    const int back = (j0 - mine) * STRIDE;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        pw[i] -= back;
        px[i] -= back;
    }
    const int chunks = (k + GEMV_KCHUNK - 1) / GEMV_KCHUNK;
    const u32x4 zero = {0, 0, 0, 0};
    for (int c = first + mine * GEMV32_WARPS; c < chunks; c += GEMV32_WARPS) {
        u32x4 wr[2][2][2], xr[4][2];
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const bool in = c * GEMV_KCHUNK + 32 * p + 8 * t < k;
#pragma unroll
            for (int i = 0; i < 4; i++) wr[i >> 1][i & 1][p] = in ? ld_weights16(pw[i] + 32 * p) : zero;
#pragma unroll
            for (int mt = 0; mt < 4; mt++) xr[mt][p] = in ? ld_x16(px[mt] + 32 * p) : zero;
        }
        gemv32_mma(acc, wr, xr);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            pw[i] += STRIDE;
            px[i] += STRIDE;
        }
    }
}

// gemv32_stash writes a warp's D fragments to red: slot (warp, rt, mt, e)
// at red[(warp*GEMV32_WARP_SLOTS + rt*GEMV32_TILE_SLOTS + mt*4 + e)*33 + lane].
__device__ __forceinline__ void gemv32_stash(float* red, const float acc[2][4][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int rt = 0; rt < 2; rt++) {
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                red[(warp * GEMV32_WARP_SLOTS + rt * GEMV32_TILE_SLOTS + mt * 4 + e) * 33 + lane] = acc[rt][mt][e];
            }
        }
    }
}

// gemv32_sum is the sum over the block's warps, in warp order, of tile rt's
// row r (0..15) and token tk (0..31): the D fragment element (c0..c3 = rows
// g, g, g+8, g+8; tokens 2t, 2t+1) lane g*4+t holds.
__device__ __forceinline__ float gemv32_sum(const float* red, int rt, int r, int tk) {
    const int mt = tk >> 3, tc = tk & 7;
    const int e = (r >> 3) * 2 + (tc & 1), lane = (r & 7) * 4 + (tc >> 1);
    float s = 0.0f;
    for (int wp = 0; wp < GEMV32_WARPS; wp++) {
        s += red[(wp * GEMV32_WARP_SLOTS + rt * GEMV32_TILE_SLOTS + mt * 4 + e) * 33 + lane];
    }
    return s;
}

// gemv32: out[i*n + j] = bf16(sum_k x[i*k + kk] * w[j*k + kk]) for i < m <=
// 32; block b owns columns 32b..32b+31 (tile rt: 32b+16rt..). Rows past n
// read the block's first row (valid; never stored). The wrapper guarantees
// k % 8 == 0, 16-byte aligned x and w.
__device__ __noinline__ void gemv32(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                    const unsigned short* __restrict__ w, int m, int n, int k) {
    __shared__ float red[GEMV32_WARPS * GEMV32_WARP_SLOTS * 33];
    const int g = (threadIdx.x & 31) >> 2;
    const int row0 = blockIdx.x * GEMV32_COLS;
    int rows[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = row0 + 16 * (i >> 1) + 8 * (i & 1) + g;
        rows[i] = r < n ? r : row0;
    }
    float acc[2][4][4];
    gemv32_partial(acc, x, w, m, k, rows);
    gemv32_stash(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < GEMV32_COLS * 32; o += GEMV32_THREADS) {
        const int c = o % GEMV32_COLS, tk = o / GEMV32_COLS;
        if (tk < m && row0 + c < n) {
            out[(long long)tk * n + row0 + c] = f32_to_bf16_rne(gemv32_sum(red, c >> 4, c & 15, tk));
        }
    }
}

// gemv32_silu: gemv_silu for 17..32 rows. Block b owns columns j = 16b..16b+15
// of both halves of the fused [2*inter, k] gate_up matrix: tile 0 the gate
// rows j, tile 1 the up rows inter+j, every warp both (k split over all 8).
__device__ __noinline__ void gemv32_silu(unsigned short* __restrict__ out, const unsigned short* __restrict__ x,
                                         const unsigned short* __restrict__ w, int m, int inter, int k) {
    __shared__ float red[GEMV32_WARPS * GEMV32_WARP_SLOTS * 33];
    const int g = (threadIdx.x & 31) >> 2;
    const int j0 = blockIdx.x * GEMV_ROWS;
    int rows[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int j = j0 + 8 * (i & 1) + g;
        rows[i] = (i >> 1) * inter + (j < inter ? j : j0);
    }
    float acc[2][4][4];
    gemv32_partial(acc, x, w, m, k, rows);
    gemv32_stash(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < GEMV_ROWS * 32; o += GEMV32_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        if (tk < m && j0 + r < inter) {
            const float gt = round_bf16(gemv32_sum(red, 0, r, tk));
            const float u = round_bf16(gemv32_sum(red, 1, r, tk));
            out[(long long)tk * inter + j0 + r] = f32_to_bf16_rne(round_bf16(gt / (1.0f + expf(-gt))) * u);
        }
    }
}

// Entry points of version 3's own rows: m <= 32 (the launcher sends 17..32).
extern "C" __global__ void __launch_bounds__(GEMV32_THREADS) gemv_t32(unsigned short* out, const unsigned short* x,
                                                                      const unsigned short* w, int m, int n, int k) {
    gemv32(out, x, w, m, n, k);
}
extern "C" __global__ void __launch_bounds__(GEMV32_THREADS) gemv_silu_t32(unsigned short* out,
                                                                           const unsigned short* x,
                                                                           const unsigned short* w, int m,
                                                                           int inter, int k) {
    gemv32_silu(out, x, w, m, inter, k);
}

// ---------------------------------------------------------------------------
// Linear version 4's own kernels: decode's 1..16 token rows on one GPU, the
// residual stream's add and RMSNorm fused into the projections around them
// (version 3's kernels run everything else: 17..32 rows, prefill, tensor
// parallel ranks, whose o_proj and down_proj are partial sums until the
// all-reduce).
//
//  - gemv_res_t8/_t16 (o_proj, down_proj): residual[i, j] = bf16(residual +
//    bf16(x · wᵀ)), in place (each element is read and written by the one
//    thread that owns its column: no other block touches it), and each
//    block's squared sum of its 16 new residual columns per token, part[i *
//    gridDim.x + block] (16 lanes by xor shuffles, a fixed order).
//  - gemv_norm_t8/_t16 (qkv_proj, lm_head) and gemv_silu_norm_t8/_t16
//    (gate_up_proj with SiLU·mul): x is the residual stream; the block sums
//    the producer's partials per token (deterministic: gemv_norm_prologue),
//    1/rms = rsqrt(sum / k + eps), and RMS-normalises every x piece at its
//    use, bf16(w * bf16(x * 1/rms)) as add_rmsnorm rounds (gemv_norm2).
//
// What it saves: the two add_rmsnorm launches of every layer and the final
// norm (input_norm of layers 1.., post_attention_norm, final_norm: 64 of a
// Llama-3-8B decode step's launches); layer 0's input_norm stays (its
// residual is the embedding, which no projection produced). What it costs:
// each consumer block reads the producer's partials (parts = hidden / 16 =
// 256 floats per token at Llama-3-8B: 1 KB) and the norm weights (8 KB)
// from L2, as x's re-reads already come; about 55 more instructions per
// chunk and token tile (gemv_norm2: 2 FMUL, 1 cvt.rn.bf16x2, 1
// fma.rn.bf16x2 and the unpacking per pair of x, plus 2 LDS.128 of
// weights; SASS below); the prologue's two barriers run after the ring's
// first loads are in flight.
//
// Napkin math at Llama-3-8B bf16, one decode step at batch 1 (PREDICTED,
// not measured: no GPU was lent). An add_rmsnorm launch moves 4 x 8 KB:
// latency-bound, about 2 us of kernel plus 1.5 us of graph-node gap (issue
// 19's 3.5 us per small launch): 64 x 3.5 = 0.22 ms per step. The consumers'
// extra L2 reads, 65 launches (qkv, gate_up per layer and lm_head): 9 KB x
// (384 + 1792) blocks per layer + 8016 x 9 KB for lm_head = 0.70 GB of L2
// traffic per step against 15 GB of weights from DRAM (L2 serves several
// times HBM's rate), and about 0.5 us per consumer launch of prologue left
// exposed past the ring's DRAM latency: +0.03 ms. Net: about -0.19 ms per
// step at batch 1..16 (4.12 -> 3.93 ms with attn_decode 4, 4.04 -> 3.85 ms
// with attn_decode 5, H200); launches per step 262 -> 198 (230 -> 166).
//
// Evidence without a GPU (no figure here is a GPU measurement):
//  - ptxas, NVRTC 11.8 for sm_90 (stepbench build --nvrtc
//    /usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2 --arch 90): gemv_norm_t8 and
//    gemv_silu_norm_t8 128 registers, _t16 168 (3 blocks of 4 warps per SM
//    still fit: 170 is the bound), gemv_res_t8 122 and _t16 162 (gemv_t8's
//    and _t16's); 0 spill bytes; static shared 2272 / 4544 B, plus the norm
//    weights' 2k B dynamic (8 KB at Llama-3-8B).
//  - SASS (cuobjdump -sass of Debian's nvidia-cuda-toolkit 11.8,
//    scripts/sass-mix), the whole-chunk loop: gemv_norm_t8 363 instructions
//    per trip of 4 chunks, i.e. 91 per 64-element chunk of a warp (2 KB of
//    weights; gemv_t8: 36): 4 HMMA, 6 LDG.128, 2 LDS.128 of norm weights, 16
//    FMUL, 8 F2FP (cvt.rn.bf16x2) + 8 HFMA2.BF16 (the "other" class), 22
//    integer (unpacking), 19 MOV; gemv_norm_t16 642 per 4 chunks, 160 per
//    chunk (gemv_t16: 60). Streaming 2 KB per 111 clocks per SM at 4.8
//    TB/s, that is 0.82 (t8) and 1.45 (t16) instructions per clock of the
//    4 an SM issues: the normalisation rides under the weight stream.
//  - Emulated (stepbench verify --check linear --kernel linear=4): the
//    chains o_proj -> gate_up_proj, down_proj -> qkv_proj and lm_head at
//    Llama-3-8B (k capped at 8192, lm_head's rows at 8192) at 1, 9 and 16
//    rows within bf16 tolerance (worst 4.9e-4), the squared sums within
//    1e-5; llama-tiny, odd widths and the edges under forward, reverse,
//    random:5, warp-serial and warp-serial-reverse; the prologue's second
//    barrier removed fails (NaN outputs) in every order, an 8-lane shuffle
//    tree fails the squared sums.

// gemv_res: residual += bf16(x · wᵀ) for m <= 8*MT rows and the block's
// squared sums into part. The epilogue's trip count is MT for every
// thread, so the shuffles are uniform; columns past n add 0.
template <int MT>
__device__ __noinline__ void gemv_res(unsigned short* __restrict__ residual, float* __restrict__ part,
                                      const unsigned short* __restrict__ x, const unsigned short* __restrict__ w,
                                      int m, int n, int k) {
    __shared__ float red[GEMV_WARPS * MT * 4 * 33];
    const int warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * GEMV_ROWS;
    float acc[MT][4];
    gemv_partial<MT, GEMV_WARPS>(acc, x, w, m, n, k, row0, warp);
    gemv_stash<MT>(red, acc);
    __syncthreads();
    for (int o = threadIdx.x; o < GEMV_ROWS * 8 * MT; o += GEMV_THREADS) {
        const int r = o % GEMV_ROWS, tk = o / GEMV_ROWS;
        float sq = 0.0f;
        if (tk < m && row0 + r < n) {
            const long long i = (long long)tk * n + row0 + r;
            const float y = round_bf16(gemv_fragment_sum<MT>(red, 0, GEMV_WARPS, r, tk));
            const float s = round_bf16(bf16_to_f32(residual[i]) + y);
            residual[i] = f32_to_bf16_rne(s);  // exact: s is a bf16 value
            sq = s * s;
        }
        // A token's 16 columns are 16 adjacent lanes (o = 16 tk + r).
        for (int off = GEMV_ROWS / 2; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
        if (r == 0 && tk < m) part[(long long)tk * gridDim.x + blockIdx.x] = sq;
    }
}

extern __shared__ __align__(16) unsigned short gemv_norm_weights[];

// gemv_norm: out = RMSNorm(residual) · wᵀ, the norm's weights in dynamic
// shared memory (k bf16).
template <int MT>
__device__ __noinline__ void gemv_norm(unsigned short* __restrict__ out, const unsigned short* __restrict__ residual,
                                       const float* __restrict__ part, const unsigned short* __restrict__ norm_w,
                                       const unsigned short* __restrict__ w, int m, int n, int k, int parts,
                                       float eps) {
    __shared__ float red[GEMV_WARPS * MT * 4 * 33];
    __shared__ float wsum[GEMV_WARPS * 8 * MT];
    __shared__ float rs[8 * MT];
    const GemvNorm nrm = {part, norm_w, gemv_norm_weights, wsum, rs, parts, eps};
    const int warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * GEMV_ROWS;
    float acc[MT][4];
    gemv_partial<MT, GEMV_WARPS, true>(acc, residual, w, m, n, k, row0, warp, &nrm);
    gemv_stash<MT>(red, acc);
    __syncthreads();
    gemv_store<MT>(out, red, m, n, row0);
}

// gemv_silu_norm: SiLU·mul of RMSNorm(residual) · wᵀ with w the fused
// [2*inter, k] gate_up matrix (gemv_silu's split).
template <int MT>
__device__ __noinline__ void gemv_silu_norm(unsigned short* __restrict__ out,
                                            const unsigned short* __restrict__ residual,
                                            const float* __restrict__ part,
                                            const unsigned short* __restrict__ norm_w,
                                            const unsigned short* __restrict__ w, int m, int inter, int k,
                                            int parts, float eps) {
    __shared__ float red[GEMV_WARPS * MT * 4 * 33];
    __shared__ float wsum[GEMV_WARPS * 8 * MT];
    __shared__ float rs[8 * MT];
    const GemvNorm nrm = {part, norm_w, gemv_norm_weights, wsum, rs, parts, eps};
    const int warp = threadIdx.x >> 5;
    const int j0 = blockIdx.x * GEMV_ROWS;
    const int half = warp >> 1;
    float acc[MT][4];
    gemv_partial<MT, 2, true>(acc, residual, w, m, inter + half * inter, k, j0 + half * inter, warp & 1, &nrm);
    gemv_stash<MT>(red, acc);
    __syncthreads();
    gemv_silu_store<MT>(out, red, m, inter, j0);
}

// Entry points of version 4: _t8 takes m <= 8, _t16 m <= 16 (n is inter for
// the gemv_silu_norm kernels).
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_res_t8(unsigned short* residual, float* part,
                                                                   const unsigned short* x, const unsigned short* w,
                                                                   int m, int n, int k) {
    gemv_res<1>(residual, part, x, w, m, n, k);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_res_t16(unsigned short* residual, float* part,
                                                                   const unsigned short* x, const unsigned short* w,
                                                                   int m, int n, int k) {
    gemv_res<2>(residual, part, x, w, m, n, k);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_norm_t8(unsigned short* out, const unsigned short* residual,
                                                                   const float* part, const unsigned short* norm_w,
                                                                   const unsigned short* w, int m, int n, int k,
                                                                   int parts, float eps) {
    gemv_norm<1>(out, residual, part, norm_w, w, m, n, k, parts, eps);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_norm_t16(unsigned short* out, const unsigned short* residual,
                                                                   const float* part, const unsigned short* norm_w,
                                                                   const unsigned short* w, int m, int n, int k,
                                                                   int parts, float eps) {
    gemv_norm<2>(out, residual, part, norm_w, w, m, n, k, parts, eps);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_silu_norm_t8(unsigned short* out, const unsigned short* residual,
                                                                   const float* part, const unsigned short* norm_w,
                                                                   const unsigned short* w, int m, int n, int k,
                                                                   int parts, float eps) {
    gemv_silu_norm<1>(out, residual, part, norm_w, w, m, n, k, parts, eps);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_silu_norm_t16(unsigned short* out, const unsigned short* residual,
                                                                   const float* part, const unsigned short* norm_w,
                                                                   const unsigned short* w, int m, int n, int k,
                                                                   int parts, float eps) {
    gemv_silu_norm<2>(out, residual, part, norm_w, w, m, n, k, parts, eps);
}

// rope.cu — rotary embedding (rotate-half layout) fused with the KV-cache write.
//
// Versions (--kernel rope_kv_write=N): 1, rope_kv_write: 2-byte accesses,
// one thread per rotation pair; 2, rope_kv_write2: 16-byte accesses, eight
// pairs per thread (D % 16 == 0); 3, rope_kv_write3: version 2 for the
// paged cache and ragged batches, each token's position and cache slot
// read from positions [T] and the slot mapping [T] (vLLM's rotary
// embedding and reshape_and_cache_flash in one launch); 4, rope_kv_write4:
// version 3 into an FP8 cache (E4M3 or E5M2 bytes, each KV head's scale).
// Same numerics (version 4: then quantized as ref.RopeKVWritePagedFP8).
// Napkin math at Llama-3-8B, per token: the qkv row read (48 heads x 128 x
// 2 B = 12.3 KB), q written (8.2 KB), k and v written to the cache (4.1 KB):
// 24.6 KB, 7 ns at 3.35 TB/s (H100) and 5 ns at 4.8 TB/s (H200); a decode
// step at batch 1 is bound by the launch (a few us), a 1k-token prefill
// moves 25 MB (7.5 / 5.2 us).

// rope_kv_write, one block per token row t = b*seqLen + s at position
// p = startPos + s. qkv row: [heads*D q | kvHeads*D k | kvHeads*D v].
//   c = bf16(cos(p*invFreq[i])), s = bf16(sin(p*invFreq[i])), i < D/2
//   out[i]       = bf16(bf16(x[i]*c)       + bf16(-x[i+D/2]*s))
//   out[i+D/2]   = bf16(bf16(x[i+D/2]*c)   + bf16(x[i]*s))
// Rotated q goes to q [T, heads*D]; rotated k and raw v go to the caches
// [batch][maxSeq][kvHeads][D] at (b, p). startPos is one int in device
// memory, so that a captured decode step replays at every position. The wrapper guarantees D even, D <= 256.
extern "C" __global__ void rope_kv_write(unsigned short* __restrict__ q,
                                         unsigned short* __restrict__ kCache,
                                         unsigned short* __restrict__ vCache,
                                         const unsigned short* __restrict__ qkv,
                                         const float* __restrict__ invFreq,
                                         const int* __restrict__ startPos, int batch,
                                         int seqLen, int heads, int kvHeads, int headDim,
                                         int maxSeq) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ float cos_s[128];
    __shared__ float sin_s[128];
    const int t = blockIdx.x;
    if (t >= batch * seqLen) return;
    const int b = t / seqLen;
    const int pos = *startPos + (t - b * seqLen);
    if (pos < 0 || pos >= maxSeq) return;  // uniform per block: never write outside the cache
    const int half = headDim / 2;

    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float angle = (float)pos * invFreq[i];
        float s, c;
        sincosf(angle, &s, &c);  // precise (no --use_fast_math): matches math.Sin/Cos after bf16
        cos_s[i] = round_bf16(c);
        sin_s[i] = round_bf16(s);
    }
    __syncthreads();

    const int q_width = heads * headDim, kv_width = kvHeads * headDim;
    const unsigned short* row = qkv + (long long)t * (q_width + 2 * kv_width);
    unsigned short* q_out = q + (long long)t * q_width;
    const long long cache_at = ((long long)b * maxSeq + pos) * kv_width;

    // Rotation pairs of all q heads, then all k heads.
    const int pairs = (heads + kvHeads) * half;
    for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        const unsigned short* x = row + h * headDim;  // k heads follow q heads in the row
        unsigned short* dst = h < heads ? q_out + h * headDim
                                        : kCache + cache_at + (h - heads) * headDim;
        const float lo = bf16_to_f32(x[i]), hi = bf16_to_f32(x[i + half]);
        const float c = cos_s[i], s = sin_s[i];
        dst[i] = f32_to_bf16_rne(round_bf16(lo * c) + round_bf16(-hi * s));
        dst[i + half] = f32_to_bf16_rne(round_bf16(hi * c) + round_bf16(lo * s));
    }
    const unsigned short* v = row + q_width + kv_width;
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) vCache[cache_at + i] = v[i];
}

// rope_kv_write2: rope_kv_write with 16-byte accesses. A thread rotates 8
// consecutive pairs (i..i+7, i+D/2..i+D/2+7) of one head: two 16-byte loads
// and two 16-byte stores; v is copied 16 bytes at a time. Same numerics as
// rope_kv_write (bf16 cos/sin, each product rounded). The wrapper
// guarantees D % 16 == 0 and 16-byte aligned rows.
extern "C" __global__ void rope_kv_write2(unsigned short* __restrict__ q, unsigned short* __restrict__ kCache,
                                          unsigned short* __restrict__ vCache,
                                          const unsigned short* __restrict__ qkv,
                                          const float* __restrict__ invFreq,
                                          const int* __restrict__ startPos, int batch, int seqLen, int heads,
                                          int kvHeads, int headDim, int maxSeq) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    __shared__ float cos_s[128];
    __shared__ float sin_s[128];
    const int t = blockIdx.x;
    if (t >= batch * seqLen) return;
    const int b = t / seqLen;
    const int pos = *startPos + (t - b * seqLen);
    if (pos < 0 || pos >= maxSeq) return;  // uniform per block
    const int half = headDim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf((float)pos * invFreq[i], &s, &c);
        cos_s[i] = round_bf16(c);
        sin_s[i] = round_bf16(s);
    }
    __syncthreads();
    const int q_width = heads * headDim, kv_width = kvHeads * headDim;
    const unsigned short* row = qkv + (long long)t * (q_width + 2 * kv_width);
    const long long cache_at = ((long long)b * maxSeq + pos) * kv_width;
    const int vecs_per_head = half / 8;
    const int items = (heads + kvHeads) * vecs_per_head;
    for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
        const int h = idx / vecs_per_head, i = (idx - h * vecs_per_head) * 8;
        const unsigned short* x = row + h * headDim;
        unsigned short* dst = h < heads ? q + (long long)t * q_width + h * headDim
                                        : kCache + cache_at + (h - heads) * headDim;
        float lo[8], hi[8], out_lo[8], out_hi[8];
        unpack8(*(const u32x4*)(x + i), lo);
        unpack8(*(const u32x4*)(x + i + half), hi);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float c = cos_s[i + e], s = sin_s[i + e];
            out_lo[e] = round_bf16(lo[e] * c) + round_bf16(-hi[e] * s);
            out_hi[e] = round_bf16(hi[e] * c) + round_bf16(lo[e] * s);
        }
        *(u32x4*)(dst + i) = pack8(out_lo);
        *(u32x4*)(dst + i + half) = pack8(out_hi);
    }
    const u32x4* v = (const u32x4*)(row + q_width + kv_width);
    u32x4* vdst = (u32x4*)(vCache + cache_at);
    for (int i = threadIdx.x; i < kv_width / 8; i += blockDim.x) vdst[i] = v[i];
}

// rope_kv_write3: rope_kv_write2 for a ragged batch over a paged cache
// (twin: ref.RopeKVWritePaged). One block per token row t of qkv [T][(heads
// + 2 kvHeads) D]: its position is positions[t] and its cache slot
// slots[t] (int64, slot = page * pageSize + offset of the caches
// [numSlots][kvHeads][D]); rotated q goes to row t of q [T][heads D],
// rotated k and raw v to the slot. A negative slot is padding (vLLM's
// slot_mapping -1): q is rotated, nothing is written to the caches; a slot
// at or past numSlots is not written either (the wrapper's bound: no write
// outside the caches). Every length of the step is on the device: a
// captured decode step replays with positions and slots moved on by
// kv_advance. The wrapper guarantees D % 16 == 0, D <= 256 and 16-byte
// aligned rows.
//
// Napkin math: version 2's (about 24.6 KB per Llama-3-8B token: q read and
// written, k and v written once), plus 12 bytes of position and slot; at
// a decode step of batch 32, 0.79 MB per layer: 0.24 us at 3.35 TB/s
// (H100), 0.16 us at 4.8 TB/s (H200), far below a launch's few us.
// rope_store_fp8 stores 8 floats, each rounded to bf16 and divided by
// scale, as 8 FP8 bytes at dst (8-byte aligned).
template <int FMT>
__device__ __forceinline__ void rope_store_fp8(unsigned char* dst, const float f[8], float scale) {
    unsigned lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        lo |= (unsigned)kv_f32_to_fp8<FMT>(round_bf16(f[j]) / scale) << (8 * j);
        hi |= (unsigned)kv_f32_to_fp8<FMT>(round_bf16(f[4 + j]) / scale) << (8 * j);
    }
    uint2 r;
    r.x = lo;
    r.y = hi;
    *(uint2*)dst = r;
}

// rope_paged is rope_kv_write3's body (FMT KV_BF16) and rope_kv_write4's
// (KV_E4M3, KV_E5M2: kCache and vCache hold bytes, each written element
// sat_rne(bf16 value / its KV head's scale), ref.RopeKVWritePagedFP8).
template <int FMT>
__device__ __forceinline__ void rope_paged(unsigned short* __restrict__ q, void* __restrict__ kCache,
                                           void* __restrict__ vCache, const unsigned short* __restrict__ qkv,
                                           const float* __restrict__ invFreq, const int* __restrict__ positions,
                                           const long long* __restrict__ slots, int tokens, int heads, int kvHeads,
                                           int headDim, long long numSlots, const float* __restrict__ kScale,
                                           const float* __restrict__ vScale) {
    __shared__ float cos_s[128];
    __shared__ float sin_s[128];
    const int t = blockIdx.x;
    if (t >= tokens) return;
    const int pos = positions[t];
    const long long slot = slots[t];
    const bool writes = slot >= 0 && slot < numSlots;  // uniform per block
    const int half = headDim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf((float)pos * invFreq[i], &s, &c);
        cos_s[i] = round_bf16(c);
        sin_s[i] = round_bf16(s);
    }
    __syncthreads();
    const int q_width = heads * headDim, kv_width = kvHeads * headDim;
    const unsigned short* row = qkv + (long long)t * (q_width + 2 * kv_width);
    const long long cache_at = writes ? slot * kv_width : 0;
    const int vecs_per_head = half / 8;
    const int items = (heads + (writes ? kvHeads : 0)) * vecs_per_head;
    for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
        const int h = idx / vecs_per_head, i = (idx - h * vecs_per_head) * 8;
        const unsigned short* x = row + h * headDim;
        float lo[8], hi[8], out_lo[8], out_hi[8];
        unpack8(*(const u32x4*)(x + i), lo);
        unpack8(*(const u32x4*)(x + i + half), hi);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float c = cos_s[i + e], s = sin_s[i + e];
            out_lo[e] = round_bf16(lo[e] * c) + round_bf16(-hi[e] * s);
            out_hi[e] = round_bf16(hi[e] * c) + round_bf16(lo[e] * s);
        }
        if (FMT == KV_BF16 || h < heads) {
            unsigned short* dst = h < heads ? q + (long long)t * q_width + h * headDim
                                            : (unsigned short*)kCache + cache_at + (h - heads) * headDim;
            *(u32x4*)(dst + i) = pack8(out_lo);
            *(u32x4*)(dst + i + half) = pack8(out_hi);
        } else {
            unsigned char* dst = (unsigned char*)kCache + cache_at + (h - heads) * headDim;
            rope_store_fp8<FMT>(dst + i, out_lo, kScale[h - heads]);
            rope_store_fp8<FMT>(dst + i + half, out_hi, kScale[h - heads]);
        }
    }
    if (!writes) return;
    const u32x4* v = (const u32x4*)(row + q_width + kv_width);
    if (FMT == KV_BF16) {
        u32x4* vdst = (u32x4*)((unsigned short*)vCache + cache_at);
        for (int i = threadIdx.x; i < kv_width / 8; i += blockDim.x) vdst[i] = v[i];
    } else {
        unsigned char* vdst = (unsigned char*)vCache + cache_at;
        for (int i = threadIdx.x; i < kv_width / 8; i += blockDim.x) {
            float f[8];
            unpack8(v[i], f);
            rope_store_fp8<FMT>(vdst + 8 * i, f, vScale[(8 * i) / headDim]);
        }
    }
}

extern "C" __global__ void rope_kv_write3(unsigned short* __restrict__ q, unsigned short* __restrict__ kCache,
                                          unsigned short* __restrict__ vCache,
                                          const unsigned short* __restrict__ qkv,
                                          const float* __restrict__ invFreq, const int* __restrict__ positions,
                                          const long long* __restrict__ slots, int tokens, int heads,
                                          int kvHeads, int headDim, long long numSlots) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    rope_paged<KV_BF16>(q, kCache, vCache, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim,
                        numSlots, nullptr, nullptr);
}

// rope_kv_write4: rope_kv_write3 into FP8 caches (twin:
// ref.RopeKVWritePagedFP8). q is rotated as version 3 rotates it (bf16);
// each new token's rotated K row and its V row are rounded to bf16 (the
// values a bf16 cache would hold), divided by their KV head's scale
// (kScale, vScale: F32[kvHeads], IEEE division) and stored as E4M3
// (e5m2 == 0) or E5M2 bytes, rounded to nearest even and saturated
// (kv_f32_to_fp8: cvt.rn.satfinite on sm_89+). Each thread stores 8 bytes
// per K or V item (the 16-byte bf16 load's 8 elements).
//
// Napkin math (ESTIMATE): version 3's q traffic (8 KB read and written per
// Llama-3-8B token) and qkv's 4 KB of K and V read, but 2 KB of K and V
// written instead of 4 KB, plus 64 B of scales (L2): about 22.6 KB per token
// against version 3's 24.6 KB; at a decode step of batch 32, 0.72 MB per
// layer: 0.22 us at 3.35 TB/s (H100), 0.15 us at 4.8 TB/s (H200), far
// below a launch's few us. The division (about 8 instructions each, 2048
// per token) is hidden under the same latency.
extern "C" __global__ void rope_kv_write4(unsigned short* __restrict__ q, unsigned char* __restrict__ kCache,
                                          unsigned char* __restrict__ vCache,
                                          const unsigned short* __restrict__ qkv,
                                          const float* __restrict__ invFreq, const int* __restrict__ positions,
                                          const long long* __restrict__ slots, int tokens, int heads,
                                          int kvHeads, int headDim, long long numSlots,
                                          const float* __restrict__ kScale, const float* __restrict__ vScale,
                                          int e5m2) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    if (e5m2) {
        rope_paged<KV_E5M2>(q, kCache, vCache, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim,
                            numSlots, kScale, vScale);
    } else {
        rope_paged<KV_E4M3>(q, kCache, vCache, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim,
                            numSlots, kScale, vScale);
    }
}

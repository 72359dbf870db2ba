// rope.cu — rotary embedding (rotate-half layout) fused with the KV-cache write.
//
// Versions (--kernel rope_kv_write=N): 1, rope_kv_write: 2-byte accesses,
// one thread per rotation pair; 2, rope_kv_write2: 16-byte accesses, eight
// pairs per thread (D % 16 == 0); 3, rope_kv_write3: version 2 for the
// paged cache and ragged batches, each token's position and cache slot
// read from positions [T] and the slot mapping [T] (vLLM's rotary
// embedding and reshape_and_cache_flash in one launch). Same numerics.
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
extern "C" __global__ void rope_kv_write3(unsigned short* __restrict__ q, unsigned short* __restrict__ kCache,
                                          unsigned short* __restrict__ vCache,
                                          const unsigned short* __restrict__ qkv,
                                          const float* __restrict__ invFreq, const int* __restrict__ positions,
                                          const long long* __restrict__ slots, int tokens, int heads,
                                          int kvHeads, int headDim, long long numSlots) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
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
    if (!writes) return;
    const u32x4* v = (const u32x4*)(row + q_width + kv_width);
    u32x4* vdst = (u32x4*)(vCache + cache_at);
    for (int i = threadIdx.x; i < kv_width / 8; i += blockDim.x) vdst[i] = v[i];
}

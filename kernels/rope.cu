// rope.cu — rotary embedding (rotate-half layout) fused with the KV-cache write.

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

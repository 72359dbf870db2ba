// copy.cu — pure data movement (embedding lookup, last-token gather) and the
// position counter.

// embed: out[t, :] = table[ids[t], :]. One block per token, 16-byte copies;
// the wrapper guarantees hidden % 8 == 0 and 16-byte aligned pointers.
extern "C" __global__ void embed(u32x4* __restrict__ out, const u32x4* __restrict__ table,
                                 const int* __restrict__ ids, int tokens, int hidden) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int t = blockIdx.x;
    if (t >= tokens) return;
    const int vecs = hidden / 8;
    const long long src = (long long)ids[t] * vecs;
    const long long dst = (long long)t * vecs;
    for (int i = threadIdx.x; i < vecs; i += blockDim.x) out[dst + i] = table[src + i];
}

// gather_last: out[b, :] = in[b*seqLen + seqLen-1, :]. One block per batch row.
// vec8 != 0 when width % 8 == 0 and both pointers are 16-byte aligned.
extern "C" __global__ void gather_last(unsigned short* __restrict__ out,
                                       const unsigned short* __restrict__ in, int batch,
                                       int seqLen, int width, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int b = blockIdx.x;
    if (b >= batch) return;
    const long long src = ((long long)b * seqLen + seqLen - 1) * width;
    const long long dst = (long long)b * width;
    if (vec8) {
        const u32x4* s = (const u32x4*)(in + src);
        u32x4* d = (u32x4*)(out + dst);
        for (int i = threadIdx.x; i < width / 8; i += blockDim.x) d[i] = s[i];
    } else {
        for (int i = threadIdx.x; i < width; i += blockDim.x) out[dst + i] = in[src + i];
    }
}

// add_i32: buf[i] += delta for i < n. Advances the device-side position at the
// end of each step (inside the captured decode graph).
extern "C" __global__ void add_i32(int* __restrict__ buf, int n, int delta) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        buf[i] += delta;
    }
}

// copy.cu — pure data movement (embedding lookup, last-token gather) and the
// position counter; for the paged cache and ragged batches, the ragged
// last-token gather and the decode step's view advance.

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

// gather_last_ragged: out[b, :] = in[queryStart[b+1] - 1, :], the last new
// row of each sequence of a ragged step (twin: ref.GatherLastRagged). One
// block per sequence; the rows come from device memory (query_start_loc).
// A row outside [0, inRows) is not copied (the wrapper's bound: no read
// outside in). vec8 as gather_last's.
extern "C" __global__ void gather_last_ragged(unsigned short* __restrict__ out,
                                              const unsigned short* __restrict__ in,
                                              const int* __restrict__ queryStart, int batch, int width,
                                              int inRows, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int b = blockIdx.x;
    if (b >= batch) return;
    const int row = queryStart[b + 1] - 1;
    if (row < 0 || row >= inRows) return;  // uniform per block
    const long long src = (long long)row * width;
    const long long dst = (long long)b * width;
    if (vec8) {
        const u32x4* s = (const u32x4*)(in + src);
        u32x4* d = (u32x4*)(out + dst);
        for (int i = threadIdx.x; i < width / 8; i += blockDim.x) d[i] = s[i];
    } else {
        for (int i = threadIdx.x; i < width; i += blockDim.x) out[dst + i] = in[src + i];
    }
}

// kv_advance moves a decode step's view of the paged cache one token on,
// at the end of every decode step, inside the captured graph (twin:
// ref.KVAdvance): one thread per sequence b (row b of the step) adds one
// to its position and its length and sets its slot to the new position's
// slot through the block table [batch][maxPages], or -1 past the table (a
// padding slot: nothing written). pos, when not null, is the contiguous
// kernels' start position: pos[0] += 1 (thread 0).
extern "C" __global__ void __launch_bounds__(128) kv_advance(int* __restrict__ positions, int* __restrict__ seqLens,
                                      long long* __restrict__ slots, const int* __restrict__ table,
                                      int* __restrict__ pos, int batch, int pageSize, int maxPages) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (pos != nullptr && b == 0) pos[0] += 1;
    if (b >= batch) return;
    const int p = positions[b] + 1;
    positions[b] = p;
    seqLens[b] += 1;
    const int page = p / pageSize;
    slots[b] = page >= maxPages ? -1LL
                                : (long long)table[(long long)b * maxPages + page] * pageSize + (p - page * pageSize);
}

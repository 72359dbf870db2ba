// dummy.cu — counter-based dummy weights, bit-identical to kernels/ref.DummyElem
// (see kernels/ref/dummy.go for the generator and why every step is exact).
//
// Napkin math, Llama-3-8B's 8.03e9 parameters: 16.1 GB written once, 3.3 ms
// at 4.8 TB/s (H200), 4.8 ms at 3.35 TB/s (H100); about 20 integer ops per
// element (two 64-bit multiplies and the mixing), 1.6e11 in all, a few ms
// at the ~30e12 32-bit integer ops/s of an H100: bound by bytes, either way
// far below the time to read real weights from disk.

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// fill_dummy: dst[i] = DummyElem(key, index(i), kind) for i in [0, n), where
// dst holds rows of row_len elements taken row_stride apart in the tensor:
// index(i) = first + (i / row_len) * row_stride + i % row_len (row_len = n:
// a contiguous range). One launch fills a column block of a matrix, as a
// tensor-parallel rank's row-parallel weights need.
// kind 0 = uniform in (-1/32, 1/32), kind 1 = ones.
extern "C" __global__ void fill_dummy(unsigned short* __restrict__ dst, long long n,
                                      unsigned long long key, unsigned long long first,
                                      int kind, long long row_len, unsigned long long row_stride) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (kind == 1) {
            dst[i] = 0x3f80;
            continue;
        }
        // (A 64-bit division costs tens of instructions: only blocks pay it.)
        const unsigned long long index = row_len >= n ? first + (unsigned long long)i
            : first + (unsigned long long)(i / row_len) * row_stride + (unsigned long long)(i % row_len);
        const unsigned long long h = mix64(key + index * 0x9E3779B97F4A7C15ull);
        const long long m = (long long)(h >> 41);
        const long long odd = 2 * m - ((1ll << 23) - 1);
        // |odd| < 2^23 so the conversion is exact, and so is the power-of-two scale.
        dst[i] = f32_to_bf16_rne((float)odd * (1.0f / 268435456.0f));
    }
}

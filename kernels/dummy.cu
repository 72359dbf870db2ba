// dummy.cu — counter-based dummy weights, bit-identical to kernels/ref.DummyElem
// (see kernels/ref/dummy.go for the generator and why every step is exact).

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// fill_dummy: dst[i] = DummyElem(key, first + i, kind) for i in [0, n).
// kind 0 = uniform in (-1/32, 1/32), kind 1 = ones.
extern "C" __global__ void fill_dummy(unsigned short* __restrict__ dst, long long n,
                                      unsigned long long key, unsigned long long first,
                                      int kind) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (kind == 1) {
            dst[i] = 0x3f80;
            continue;
        }
        const unsigned long long h = mix64(key + (first + (unsigned long long)i) * 0x9E3779B97F4A7C15ull);
        const long long m = (long long)(h >> 41);
        const long long odd = 2 * m - ((1ll << 23) - 1);
        // |odd| < 2^23 so the conversion is exact, and so is the power-of-two scale.
        dst[i] = f32_to_bf16_rne((float)odd * (1.0f / 268435456.0f));
    }
}

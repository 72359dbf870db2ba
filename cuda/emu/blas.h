// blas.h — what the emulated cuBLAS and cuBLASLt (cublas.cpp, cublaslt.cpp)
// share: the export macro, the emulated driver's services they call, and
// bf16's conversions (round to nearest even, NaN kept quiet), so that both
// libraries round a GEMM's output the same way.
#pragma once

#include <cstddef>
#include <cstring>

#define API extern "C" __attribute__((visibility("default")))

typedef unsigned long long CUdeviceptr;

// Services of the emulated driver (api.cpp).
extern "C" int sbemu_current_context(void);
extern "C" int sbemu_check_device_range(CUdeviceptr p, size_t bytes, char *why, size_t why_len);
extern "C" int sbemu_host_op(void *stream, const char *what, int (*fn)(void *, char *, size_t), void *arg,
                             void (*release)(void *), const char *lazy_key);
extern "C" void sbemu_parallel_for(size_t n, void (*fn)(void *, size_t), void *arg);

inline float Bf16ToF32(unsigned short b) {
    const unsigned u = (unsigned)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline unsigned short F32ToBf16(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

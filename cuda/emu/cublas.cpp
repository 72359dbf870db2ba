// cublas.cpp — the emulated cuBLAS (libcublas.so.13 of build/emu): handles,
// streams, a fixed workspace, and cublasGemmEx for bf16 inputs and output
// with fp32 accumulation (what stepbench uses), any transposes and leading
// dimensions. A GEMM is stream work of the emulated driver: it runs in order
// with the kernels, is recorded by a stream capture, and an operand outside
// its allocation is CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting kernel would be.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "blas.h"

namespace {

enum {
    kSuccess = 0,
    kNotInitialized = 1,
    kAllocFailed = 3,
    kInvalidValue = 7,
    kExecutionFailed = 13,
    kNotSupported = 15,
};
constexpr int kR16BF = 14;
constexpr int kR32F = 0;
constexpr int kCompute32F = 68;
constexpr int kCompute32FFast16BF = 75;
constexpr int kIllegalAddress = 700;  // CUDA_ERROR_ILLEGAL_ADDRESS

struct Handle {
    void *stream = nullptr;
    CUdeviceptr workspace = 0;
    size_t workspace_bytes = 0;
    int math_mode = 0;
};

struct Gemm {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    CUdeviceptr a, b, c;
    int lda, ldb, ldc;
    int ctype;  // kR16BF or kR32F for A, B and C alike
};

size_t Elem(const Gemm &g) { return g.ctype == kR16BF ? 2 : 4; }

float Load(const Gemm &g, CUdeviceptr base, size_t i) {
    if (g.ctype == kR16BF) return Bf16ToF32(reinterpret_cast<const unsigned short *>(base)[i]);
    return reinterpret_cast<const float *>(base)[i];
}

// Span is the bytes a column-major operand of rows x cols with leading
// dimension ld touches.
size_t Span(size_t rows, size_t cols, size_t ld, size_t elem) {
    if (rows == 0 || cols == 0) return 0;
    return ((cols - 1) * ld + rows) * elem;
}

bool CheckOperand(const char *name, CUdeviceptr p, size_t bytes, char *err, size_t len) {
    if (bytes == 0) return true;
    char why[768];
    if (sbemu_check_device_range(p, bytes, why, sizeof why)) return true;
    snprintf(err, len, "cublasGemmEx: operand %s (%zu bytes) is not inside one allocation: %s", name, bytes, why);
    return false;
}

constexpr int kRowBlock = 16;

struct RowTask {
    const Gemm *g;
};

void RowBlock(void *arg, size_t blk) {
    const Gemm &g = *static_cast<RowTask *>(arg)->g;
    const int i0 = (int)blk * kRowBlock, i1 = std::min(g.m, i0 + kRowBlock);
    const int rows = i1 - i0;
    std::vector<float> a((size_t)rows * g.k), bcol(g.k);
    for (int r = 0; r < rows; r++) {
        for (int p = 0; p < g.k; p++) {
            const size_t idx = g.ta ? (size_t)p + (size_t)(i0 + r) * g.lda : (size_t)(i0 + r) + (size_t)p * g.lda;
            a[(size_t)r * g.k + p] = Load(g, g.a, idx);
        }
    }
    for (int j = 0; j < g.n; j++) {
        for (int p = 0; p < g.k; p++) {
            const size_t idx = g.tb ? (size_t)j + (size_t)p * g.ldb : (size_t)p + (size_t)j * g.ldb;
            bcol[p] = Load(g, g.b, idx);
        }
        for (int r = 0; r < rows; r++) {
            const float *ar = &a[(size_t)r * g.k];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int p = 0;
            for (; p + 8 <= g.k; p += 8) {
                for (int q = 0; q < 8; q++) acc[q] += ar[p + q] * bcol[p + q];
            }
            for (; p < g.k; p++) acc[0] += ar[p] * bcol[p];
            const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            const size_t ci = (size_t)(i0 + r) + (size_t)j * g.ldc;
            float out = g.alpha * dot;
            if (g.beta != 0.0f) out += g.beta * Load(g, g.c, ci);
            if (g.ctype == kR16BF) {
                reinterpret_cast<unsigned short *>(g.c)[ci] = F32ToBf16(out);
            } else {
                reinterpret_cast<float *>(g.c)[ci] = out;
            }
        }
    }
}

int RunGemm(void *arg, char *err, size_t len) {
    const Gemm &g = *static_cast<Gemm *>(arg);
    const size_t e = Elem(g);
    const size_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const size_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    if (g.k > 0 && (!CheckOperand("A", g.a, Span(a_rows, a_cols, g.lda, e), err, len) ||
                    !CheckOperand("B", g.b, Span(b_rows, b_cols, g.ldb, e), err, len))) {
        return kIllegalAddress;
    }
    if (!CheckOperand("C", g.c, Span(g.m, g.n, g.ldc, e), err, len)) return kIllegalAddress;
    RowTask task{&g};
    sbemu_parallel_for((size_t)(g.m + kRowBlock - 1) / kRowBlock, RowBlock, &task);
    return 0;
}

void FreeGemm(void *arg) { delete static_cast<Gemm *>(arg); }

}  // namespace

API const char *sbemu_describe(void) {
    return "stepbench emulated cuBLAS 0.1 (cublasGemmEx bf16/fp32 on the CPU, in stream order)";
}

API int cublasGetProperty(int type, int *value) {
    if (value == nullptr) return kInvalidValue;
    switch (type) {
    case 0: *value = 0; return kSuccess;  // MAJOR_VERSION
    case 1: *value = 1; return kSuccess;  // MINOR_VERSION
    case 2: *value = 0; return kSuccess;  // PATCH_LEVEL
    }
    return kInvalidValue;
}

API int cublasCreate_v2(Handle **handle) {
    if (handle == nullptr) return kInvalidValue;
    if (sbemu_current_context() != 0) return kNotInitialized;
    *handle = new Handle;
    return kSuccess;
}

API int cublasDestroy_v2(Handle *h) {
    if (h == nullptr) return kNotInitialized;
    delete h;
    return kSuccess;
}

API int cublasGetVersion_v2(Handle *h, int *version) {
    if (h == nullptr) return kNotInitialized;
    if (version == nullptr) return kInvalidValue;
    *version = 100;
    return kSuccess;
}

API int cublasSetStream_v2(Handle *h, void *stream) {
    if (h == nullptr) return kNotInitialized;
    h->stream = stream;
    h->workspace = 0;  // as cuBLAS: a new stream resets the workspace to the default pool
    h->workspace_bytes = 0;
    return kSuccess;
}

API int cublasGetStream_v2(Handle *h, void **stream) {
    if (h == nullptr) return kNotInitialized;
    if (stream == nullptr) return kInvalidValue;
    *stream = h->stream;
    return kSuccess;
}

API int cublasSetWorkspace_v2(Handle *h, void *workspace, size_t bytes) {
    if (h == nullptr) return kNotInitialized;
    if (bytes > 0) {
        char why[512];
        if (workspace == nullptr || !sbemu_check_device_range((CUdeviceptr)workspace, bytes, why, sizeof why)) {
            return kInvalidValue;
        }
    }
    h->workspace = (CUdeviceptr)workspace;
    h->workspace_bytes = bytes;
    return kSuccess;
}

API int cublasSetMathMode(Handle *h, int mode) {
    if (h == nullptr) return kNotInitialized;
    h->math_mode = mode;
    return kSuccess;
}

API int cublasGetMathMode(Handle *h, int *mode) {
    if (h == nullptr) return kNotInitialized;
    if (mode == nullptr) return kInvalidValue;
    *mode = h->math_mode;
    return kSuccess;
}

API int cublasGemmEx(Handle *h, int transa, int transb, int m, int n, int k, const void *alpha, const void *a,
                     int atype, int lda, const void *b, int btype, int ldb, const void *beta, void *c, int ctype,
                     int ldc, int compute, int algo) {
    if (h == nullptr) return kNotInitialized;
    if (transa < 0 || transa > 2 || transb < 0 || transb > 2 || m < 0 || n < 0 || k < 0) return kInvalidValue;
    const bool ta = transa != 0, tb = transb != 0;
    if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) return kInvalidValue;
    if (alpha == nullptr || beta == nullptr) return kInvalidValue;
    const bool bf16 = atype == kR16BF && btype == kR16BF && ctype == kR16BF &&
                      (compute == kCompute32F || compute == kCompute32FFast16BF);
    const bool f32 = atype == kR32F && btype == kR32F && ctype == kR32F && compute == kCompute32F;
    if (!bf16 && !f32) return kNotSupported;
    if (!(algo == -1 || (algo >= 0 && algo <= 23) || (algo >= 99 && algo <= 115))) return kInvalidValue;
    if (m == 0 || n == 0) return kSuccess;
    auto *g = new Gemm{ta, tb, m, n, k, *static_cast<const float *>(alpha), *static_cast<const float *>(beta),
                       (CUdeviceptr)a, (CUdeviceptr)b, (CUdeviceptr)c, lda, ldb, ldc, ctype};
    char what[256];
    snprintf(what, sizeof what, "cublasGemmEx(%s, %c%c, m=%d n=%d k=%d)", bf16 ? "bf16" : "fp32", ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k);
    const int rc = sbemu_host_op(h->stream, what, RunGemm, g, FreeGemm, "cublasGemmEx");
    // A driver error here (capture refused, sticky error) is how cuBLAS fails too.
    return rc == 0 ? kSuccess : kExecutionFailed;
}

API const char *cublasGetStatusName(int status) {
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

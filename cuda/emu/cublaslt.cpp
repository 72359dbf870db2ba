// cublaslt.cpp — the emulated cuBLASLt (libcublasLt.so.13 of build/emu): the
// handle, matmul, matrix-layout and preference descriptors, the heuristic
// and cublasLtMatmul for what stepbench runs: bf16 A, B and D with any
// transposes (the prefill GEMMs of --kernel gemm=2; the heuristic offers
// kBF16Algos algorithms of different blocking, the same bits), and FP8 E4M3
// A and B, fp32 accumulation (CUBLAS_COMPUTE_32F, CUDA_R_32F scales), D bf16 or fp32,
// with cuBLASLt's FP8 rules enforced as the documentation states them (A
// transposed and B not, "TN"; 16-byte aligned pointers and leading
// dimensions; m and k multiples of 16) and its scaling,
//
//   D = scaleA · scaleB · alpha · op(A)·op(B) + beta · C,
//
// the scale factors read from device memory when the GEMM runs (in stream
// order: a scale a kernel wrote just before is the one used). The stand-in
// multiplies in this order, in float32: ((alpha·acc)·scaleB)·scaleA (+ beta·C),
// the order of kernels/ref.LinearFP8 (x's scale, then w's) for stepbench's
// use (A = weights, B = activations); cuBLASLt does not document its own.
// A matmul is stream work of the emulated driver, as the cuBLAS stand-in's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "blas.h"

namespace {

enum {
    kSuccess = 0,
    kNotInitialized = 1,
    kInvalidValue = 7,
    kExecutionFailed = 13,
    kNotSupported = 15,
};
constexpr int kR32F = 0, kR16BF = 14, kR8FE4M3 = 28, kR8FE5M2 = 29;
constexpr int kCompute32F = 68;
constexpr int kIllegalAddress = 700;
constexpr uint64_t kAlgoMagic = 0x5342454d554c5431ull;  // "SBEMULT1"

struct Handle {
    int unused = 0;
};

struct MatmulDesc {
    int compute, scale_type;
    int trans_a = 0, trans_b = 0;
    CUdeviceptr scale[4] = {0, 0, 0, 0};  // A, B, C, D
    CUdeviceptr amax_d = 0;
    int epilogue = 1;
    int pointer_mode = 0;
};

struct Layout {
    int type;
    uint64_t rows, cols;
    int64_t ld;
};

struct Preference {
    uint64_t max_workspace = 0;
    uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D bytes (cuBLASLt's default)
};

struct Algo {
    uint64_t data[8];
};

struct HeuristicResult {
    Algo algo;
    size_t workspace_size;
    int state;
    float waves_count;
    int reserved[4];
};

size_t TypeBytes(int t) {
    switch (t) {
    case kR32F: return 4;
    case kR16BF: return 2;
    case kR8FE4M3:
    case kR8FE5M2: return 1;
    }
    return 0;
}

// E4M3 decodes every byte (OCP E4M3: bias 7, no infinities, S.1111.111 NaN).
struct E4M3Table {
    float v[256];
    E4M3Table() {
        for (int b = 0; b < 256; b++) {
            const int e = (b >> 3) & 0xf, m = b & 7;
            float x;
            if (e == 0xf && m == 7) {
                x = NAN;
            } else if (e == 0) {
                x = (float)m / 512.0f;
            } else {
                x = ldexpf(1.0f + (float)m / 8.0f, e - 7);
            }
            v[b] = (b & 0x80) ? -x : x;
        }
    }
};
const E4M3Table kE4M3;

// Problem is what the FP8 rules and the GEMM need of the descriptors.
struct Problem {
    int m, n, k;
    int ta, tb;
    int64_t lda, ldb, ldc, ldd;
    int dtype, ctype, atype;
};

// Shape reads m, n, k and the leading dimensions from the layouts, with
// any transposes: op(A) is m x k, op(B) is k x n, C and D are m x n.
int Shape(const MatmulDesc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dl, Problem *p,
          char *why, size_t len) {
    p->ta = d->trans_a, p->tb = d->trans_b;
    p->m = (int)dl->rows, p->n = (int)dl->cols;
    p->k = (int)(p->ta ? a->rows : a->cols);
    const uint64_t am = p->ta ? a->cols : a->rows;
    const uint64_t bk = p->tb ? b->cols : b->rows, bn = p->tb ? b->rows : b->cols;
    if (am != dl->rows || bk != (uint64_t)p->k || bn != dl->cols || c->rows != dl->rows || c->cols != dl->cols) {
        snprintf(why, len, "the layouts' shapes disagree");
        return kInvalidValue;
    }
    p->lda = a->ld, p->ldb = b->ld, p->ldc = c->ld, p->ldd = dl->ld, p->dtype = dl->type, p->ctype = c->type;
    p->atype = a->type;
    return kSuccess;
}

// ValidateBF16 applies the rules of the bf16 matmuls the stand-in runs: bf16
// A, B, C and D, CUBLAS_COMPUTE_32F with CUDA_R_32F scales, any transposes,
// the default epilogue, no scale pointers (cuBLASLt takes them for FP8 only).
int ValidateBF16(const MatmulDesc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dl, Problem *p,
                 char *why, size_t len) {
    if (d->compute != kCompute32F || d->scale_type != kR32F) {
        snprintf(why, len, "bf16 needs CUBLAS_COMPUTE_32F and CUDA_R_32F scales here");
        return kNotSupported;
    }
    if (b->type != kR16BF || c->type != kR16BF || dl->type != kR16BF) {
        snprintf(why, len, "bf16 A needs bf16 B, C and D (B %d, C %d, D %d)", b->type, c->type, dl->type);
        return kNotSupported;
    }
    if (d->epilogue != 1 || d->scale[0] != 0 || d->scale[1] != 0) return kNotSupported;
    return Shape(d, a, b, c, dl, p, why, len);
}

// Validate applies cuBLASLt's rules for the matmuls the stand-in runs (FP8
// E4M3, or bf16: ValidateBF16); a combination outside them is
// CUBLAS_STATUS_NOT_SUPPORTED, as a real cuBLASLt without a kernel for it
// answers.
int Validate(const MatmulDesc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dl, Problem *p,
             char *why, size_t len) {
    if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr) return kInvalidValue;
    if (a->type == kR16BF) return ValidateBF16(d, a, b, c, dl, p, why, len);
    if (d->compute != kCompute32F || d->scale_type != kR32F) {
        snprintf(why, len, "FP8 needs CUBLAS_COMPUTE_32F and CUDA_R_32F scales");
        return kNotSupported;
    }
    if (a->type != kR8FE4M3 || b->type != kR8FE4M3) {
        snprintf(why, len, "the stand-in runs E4M3 or bf16 A and B only (A type %d, B type %d)", a->type, b->type);
        return kNotSupported;
    }
    if (!(dl->type == kR16BF || dl->type == kR32F) || c->type != dl->type) {
        snprintf(why, len, "D must be bf16 or fp32 and C of D's type (C %d, D %d)", c->type, dl->type);
        return kNotSupported;
    }
    if (!(d->trans_a == 1 && d->trans_b == 0)) {
        snprintf(why, len, "FP8 needs A transposed and B not (TN); got trans_a %d trans_b %d", d->trans_a, d->trans_b);
        return kNotSupported;
    }
    if (d->epilogue != 1) return kNotSupported;
    const int rc = Shape(d, a, b, c, dl, p, why, len);
    if (rc != kSuccess) return rc;
    const size_t db = TypeBytes(dl->type);
    if (p->m % 16 != 0 || p->k % 16 != 0 || p->lda % 16 != 0 || p->ldb % 16 != 0 || (p->ldd * db) % 16 != 0 ||
        (p->ldc * db) % 16 != 0) {
        snprintf(why, len, "FP8 needs m and k multiples of 16 and leading dimensions of 16-byte multiples (m %d k %d, lda %lld ldb %lld ldd %lld)",
                 p->m, p->k, (long long)p->lda, (long long)p->ldb, (long long)p->ldd);
        return kNotSupported;
    }
    return kSuccess;
}

// The bf16 algorithms the heuristic offers: each computes every output
// element in the same order (the same bits), over blocks of a different
// number of rows of op(A), so that their timings differ and a tuner has a
// real choice; the last one asks for workspace, so a preference below it
// leaves it out; the second needs 16-byte aligned operands (as real
// vectorized kernels do), so a preference of less alignment leaves it out
// and a call with a misaligned pointer is refused.
constexpr int kBF16Algos = 4;
constexpr int kBF16RowBlocks[kBF16Algos] = {16, 64, 4, 32};
constexpr size_t kBF16AlgoWorkspace[kBF16Algos] = {0, 0, 0, 1u << 20};
constexpr uint32_t kBF16AlgoAlignment[kBF16Algos] = {2, 16, 2, 2};

struct Gemm {
    Problem p;
    int row_block;  // rows of op(A) per task (the algorithm's blocking)
    float alpha, beta;
    CUdeviceptr a, b, c, d, scale_a, scale_b;
};

size_t Span(size_t rows, size_t cols, size_t ld, size_t elem) {
    if (rows == 0 || cols == 0) return 0;
    return ((cols - 1) * ld + rows) * elem;
}

bool CheckRange(const char *name, CUdeviceptr p, size_t bytes, char *err, size_t len) {
    if (bytes == 0) return true;
    char why[768];
    if (sbemu_check_device_range(p, bytes, why, sizeof why)) return true;
    snprintf(err, len, "cublasLtMatmul: %s (%zu bytes) is not inside one allocation: %s", name, bytes, why);
    return false;
}

constexpr int kRowBlock = 16;

struct Task {
    const Gemm *g;
    float scale_a, scale_b;
};

float LoadOut(int type, CUdeviceptr base, size_t i) {
    if (type == kR16BF) return Bf16ToF32(reinterpret_cast<const unsigned short *>(base)[i]);
    return reinterpret_cast<const float *>(base)[i];
}

void RowBlock(void *arg, size_t blk) {
    const Task &t = *static_cast<Task *>(arg);
    const Gemm &g = *t.g;
    const Problem &p = g.p;
    const int i0 = (int)blk * kRowBlock, i1 = std::min(p.m, i0 + kRowBlock);
    const auto *A = reinterpret_cast<const unsigned char *>(g.a);
    const auto *B = reinterpret_cast<const unsigned char *>(g.b);
    // The block's rows of op(A) decoded once, each column of B once per block.
    std::vector<float> arows((size_t)(i1 - i0) * p.k), bcol((size_t)p.k);
    for (int i = i0; i < i1; i++) {
        for (int q = 0; q < p.k; q++) arows[(size_t)(i - i0) * p.k + q] = kE4M3.v[A[(size_t)q + (size_t)i * p.lda]];
    }
    for (int j = 0; j < p.n; j++) {
        for (int q = 0; q < p.k; q++) bcol[q] = kE4M3.v[B[(size_t)q + (size_t)j * p.ldb]];
        for (int i = i0; i < i1; i++) {
            const float *arow = &arows[(size_t)(i - i0) * p.k];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int q = 0;
            for (; q + 8 <= p.k; q += 8) {
                for (int r = 0; r < 8; r++) acc[r] += arow[q + r] * bcol[q + r];
            }
            for (; q < p.k; q++) acc[0] += arow[q] * bcol[q];
            const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            float out = g.alpha * dot * t.scale_b * t.scale_a;
            if (g.beta != 0.0f) out += g.beta * LoadOut(p.ctype, g.c, (size_t)i + (size_t)j * p.ldc);
            const size_t di = (size_t)i + (size_t)j * p.ldd;
            if (p.dtype == kR16BF) {
                reinterpret_cast<unsigned short *>(g.d)[di] = F32ToBf16(out);
            } else {
                reinterpret_cast<float *>(g.d)[di] = out;
            }
        }
    }
}

// BF16RowBlock computes one block of g.row_block rows of a bf16 D: the
// block's rows of op(A) widened once, each column of op(B) once per block,
// each dot product in 8 lanes summed pairwise (the emulated cuBLAS's order).
void BF16RowBlock(void *arg, size_t blk) {
    const Gemm &g = *static_cast<Task *>(arg)->g;
    const Problem &p = g.p;
    const int i0 = (int)blk * g.row_block, i1 = std::min(p.m, i0 + g.row_block);
    const auto *A = reinterpret_cast<const unsigned short *>(g.a);
    const auto *B = reinterpret_cast<const unsigned short *>(g.b);
    std::vector<float> arows((size_t)(i1 - i0) * p.k), bcol((size_t)p.k);
    for (int i = i0; i < i1; i++) {
        for (int q = 0; q < p.k; q++) {
            const size_t idx = p.ta ? (size_t)q + (size_t)i * p.lda : (size_t)i + (size_t)q * p.lda;
            arows[(size_t)(i - i0) * p.k + q] = Bf16ToF32(A[idx]);
        }
    }
    for (int j = 0; j < p.n; j++) {
        for (int q = 0; q < p.k; q++) {
            bcol[q] = Bf16ToF32(B[p.tb ? (size_t)j + (size_t)q * p.ldb : (size_t)q + (size_t)j * p.ldb]);
        }
        for (int i = i0; i < i1; i++) {
            const float *arow = &arows[(size_t)(i - i0) * p.k];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int q = 0;
            for (; q + 8 <= p.k; q += 8) {
                for (int r = 0; r < 8; r++) acc[r] += arow[q + r] * bcol[q + r];
            }
            for (; q < p.k; q++) acc[0] += arow[q] * bcol[q];
            const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            float out = g.alpha * dot;
            if (g.beta != 0.0f) out += g.beta * LoadOut(p.ctype, g.c, (size_t)i + (size_t)j * p.ldc);
            reinterpret_cast<unsigned short *>(g.d)[(size_t)i + (size_t)j * p.ldd] = F32ToBf16(out);
        }
    }
}

int RunGemm(void *arg, char *err, size_t len) {
    const Gemm &g = *static_cast<Gemm *>(arg);
    const Problem &p = g.p;
    const size_t db = TypeBytes(p.dtype), ab = TypeBytes(p.atype);
    const size_t a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
    const size_t b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
    if (!CheckRange("A", g.a, Span(a_rows, a_cols, p.lda, ab), err, len) ||
        !CheckRange("B", g.b, Span(b_rows, b_cols, p.ldb, ab), err, len) ||
        !CheckRange("D", g.d, Span(p.m, p.n, p.ldd, db), err, len) ||
        (g.beta != 0.0f && !CheckRange("C", g.c, Span(p.m, p.n, p.ldc, db), err, len)) ||
        (g.scale_a != 0 && !CheckRange("the A scale", g.scale_a, 4, err, len)) ||
        (g.scale_b != 0 && !CheckRange("the B scale", g.scale_b, 4, err, len))) {
        return kIllegalAddress;
    }
    if (p.atype == kR16BF) {
        Task t{&g, 1.0f, 1.0f};
        sbemu_parallel_for((size_t)(p.m + g.row_block - 1) / g.row_block, BF16RowBlock, &t);
        return 0;
    }
    // The scales are read when the GEMM runs, as cuBLASLt's kernels do.
    Task t{&g, g.scale_a ? *reinterpret_cast<const float *>(g.scale_a) : 1.0f,
           g.scale_b ? *reinterpret_cast<const float *>(g.scale_b) : 1.0f};
    sbemu_parallel_for((size_t)(p.m + kRowBlock - 1) / kRowBlock, RowBlock, &t);
    return 0;
}

void FreeGemm(void *arg) { delete static_cast<Gemm *>(arg); }

}  // namespace

API const char *sbemu_describe(void) {
    return "stepbench emulated cuBLASLt 0.2 (FP8 E4M3 TN and bf16 matmuls, fp32 accumulation, on the CPU, in stream order)";
}

API size_t cublasLtGetVersion(void) { return 200; }

API int cublasLtCreate(Handle **h) {
    if (h == nullptr) return kInvalidValue;
    if (sbemu_current_context() != 0) return kNotInitialized;
    *h = new Handle;
    return kSuccess;
}

API int cublasLtDestroy(Handle *h) {
    if (h == nullptr) return kNotInitialized;
    delete h;
    return kSuccess;
}

API int cublasLtMatmulDescCreate(MatmulDesc **d, int compute, int scale_type) {
    if (d == nullptr) return kInvalidValue;
    *d = new MatmulDesc{compute, scale_type};
    return kSuccess;
}

API int cublasLtMatmulDescDestroy(MatmulDesc *d) {
    delete d;
    return kSuccess;
}

API int cublasLtMatmulDescSetAttribute(MatmulDesc *d, int attr, const void *buf, size_t size) {
    if (d == nullptr || buf == nullptr) return kInvalidValue;
    int32_t i32 = 0;
    if (size == 4) memcpy(&i32, buf, 4);
    switch (attr) {
    case 0: if (size != 4) return kInvalidValue; d->compute = i32; return kSuccess;      // COMPUTE_TYPE
    case 1: if (size != 4) return kInvalidValue; d->scale_type = i32; return kSuccess;   // SCALE_TYPE
    case 2: if (size != 4) return kInvalidValue; d->pointer_mode = i32; return kSuccess; // POINTER_MODE
    case 3: if (size != 4) return kInvalidValue; d->trans_a = i32; return kSuccess;      // TRANSA
    case 4: if (size != 4) return kInvalidValue; d->trans_b = i32; return kSuccess;      // TRANSB
    case 7: if (size != 4) return kInvalidValue; d->epilogue = i32; return kSuccess;     // EPILOGUE
    case 17: case 18: case 19: case 20:                                                  // A..D_SCALE_POINTER
        if (size != sizeof(CUdeviceptr)) return kInvalidValue;
        memcpy(&d->scale[attr - 17], buf, size);
        return kSuccess;
    case 21:                                                                             // AMAX_D_POINTER
        if (size != sizeof(CUdeviceptr)) return kInvalidValue;
        memcpy(&d->amax_d, buf, size);
        return kSuccess;
    }
    return kInvalidValue;
}

API int cublasLtMatrixLayoutCreate(Layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (l == nullptr || TypeBytes(type) == 0) return kInvalidValue;
    if (ld < (int64_t)std::max<uint64_t>(rows, 1)) return kInvalidValue;
    *l = new Layout{type, rows, cols, ld};
    return kSuccess;
}

API int cublasLtMatrixLayoutDestroy(Layout *l) {
    delete l;
    return kSuccess;
}

API int cublasLtMatmulPreferenceCreate(Preference **p) {
    if (p == nullptr) return kInvalidValue;
    *p = new Preference;
    return kSuccess;
}

API int cublasLtMatmulPreferenceDestroy(Preference *p) {
    delete p;
    return kSuccess;
}

API int cublasLtMatmulPreferenceSetAttribute(Preference *p, int attr, const void *buf, size_t size) {
    if (p == nullptr || buf == nullptr) return kInvalidValue;
    if (attr == 1) {  // MAX_WORKSPACE_BYTES
        if (size != 8) return kInvalidValue;
        memcpy(&p->max_workspace, buf, 8);
    }
    if (attr >= 5 && attr <= 8) {  // MIN_ALIGNMENT_A..D_BYTES
        if (size != 4) return kInvalidValue;
        memcpy(&p->min_alignment[attr - 5], buf, 4);
    }
    return kSuccess;
}

API int cublasLtMatmulAlgoGetHeuristic(Handle *h, MatmulDesc *d, Layout *a, Layout *b, Layout *c, Layout *dl,
                                       Preference *pref, int requested, HeuristicResult *results, int *returned) {
    if (h == nullptr) return kNotInitialized;
    if (pref == nullptr || results == nullptr || returned == nullptr || requested < 1) return kInvalidValue;
    Problem p;
    char why[256] = "";
    *returned = 0;
    const int rc = Validate(d, a, b, c, dl, &p, why, sizeof why);
    if (rc != kSuccess) return rc;
    if (p.atype != kR16BF) {
        memset(&results[0], 0, sizeof results[0]);
        results[0].algo.data[0] = kAlgoMagic;
        results[0].waves_count = 1.0f;
        *returned = 1;
        return kSuccess;
    }
    for (int id = 0; id < kBF16Algos && *returned < requested; id++) {
        if (kBF16AlgoWorkspace[id] > pref->max_workspace) continue;
        bool aligned = true;
        for (uint32_t a : pref->min_alignment) aligned = aligned && a >= kBF16AlgoAlignment[id];
        if (!aligned) continue;
        HeuristicResult &r = results[*returned];
        memset(&r, 0, sizeof r);
        r.algo.data[0] = kAlgoMagic;
        r.algo.data[1] = (uint64_t)id;
        r.workspace_size = kBF16AlgoWorkspace[id];
        r.waves_count = (float)((p.m + kBF16RowBlocks[id] - 1) / kBF16RowBlocks[id]) / 132.0f;
        (*returned)++;
    }
    return *returned > 0 ? kSuccess : kNotSupported;
}

API int cublasLtMatmul(Handle *h, MatmulDesc *d, const void *alpha, const void *a, Layout *adesc, const void *b,
                       Layout *bdesc, const void *beta, const void *c, Layout *cdesc, void *dptr, Layout *ddesc,
                       const Algo *algo, void *workspace, size_t workspace_bytes, void *stream) {
    if (h == nullptr) return kNotInitialized;
    if (alpha == nullptr || beta == nullptr || algo == nullptr || algo->data[0] != kAlgoMagic) return kInvalidValue;
    Problem p;
    char why[256] = "";
    const int rc = Validate(d, adesc, bdesc, cdesc, ddesc, &p, why, sizeof why);
    if (rc != kSuccess) return rc;
    int row_block = kRowBlock;
    if (p.atype == kR16BF) {
        const uint64_t id = algo->data[1];
        if (id >= (uint64_t)kBF16Algos || workspace_bytes < kBF16AlgoWorkspace[id]) return kInvalidValue;
        for (const void *ptr : {a, b, (const void *)dptr, c}) {
            if ((uintptr_t)ptr % kBF16AlgoAlignment[id] != 0) return kNotSupported;
        }
        row_block = kBF16RowBlocks[id];
    } else {
        if (algo->data[1] != 0) return kInvalidValue;
        for (const void *ptr : {a, b, (const void *)dptr, c}) {
            if ((uintptr_t)ptr % 16 != 0) return kNotSupported;  // FP8: 16-byte aligned operands
        }
    }
    if (workspace_bytes > 0) {
        char wwhy[512];
        if (workspace == nullptr || !sbemu_check_device_range((CUdeviceptr)workspace, workspace_bytes, wwhy, sizeof wwhy)) {
            return kInvalidValue;
        }
    }
    if (p.m == 0 || p.n == 0) return kSuccess;
    auto *g = new Gemm{p, row_block, *static_cast<const float *>(alpha), *static_cast<const float *>(beta), (CUdeviceptr)a,
                       (CUdeviceptr)b, (CUdeviceptr)c, (CUdeviceptr)dptr, d->scale[0], d->scale[1]};
    char what[256];
    if (p.atype == kR16BF) {
        snprintf(what, sizeof what, "cublasLtMatmul(bf16 %c%c, algo %d, m=%d n=%d k=%d)", p.ta ? 'T' : 'N', p.tb ? 'T' : 'N',
                 (int)algo->data[1], p.m, p.n, p.k);
    } else {
        snprintf(what, sizeof what, "cublasLtMatmul(e4m3 TN -> %s, m=%d n=%d k=%d)", p.dtype == kR16BF ? "bf16" : "fp32",
                 p.m, p.n, p.k);
    }
    const int run = sbemu_host_op(stream, what, RunGemm, g, FreeGemm, "cublasLtMatmul");
    return run == 0 ? kSuccess : kExecutionFailed;
}

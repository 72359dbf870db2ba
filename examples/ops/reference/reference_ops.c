/* reference_ops.c — an op library (include/stepbench_op.h, ABI 2.1) with a plain
 * kernel for every op stepbench lets a library replace: linear,
 * attn_prefill, attn_decode, rope_kv_write, add_rmsnorm, silu_mul and
 * argmax. Each is the simplest correct kernel (one thread per output of a
 * GEMM, one block per row or per query), written to the semantics of
 * kernels/ref: a template to start an op of your own from, and what the
 * tests run to check every op's dispatch, operands and graph capture end to
 * end. The KV ops take the paged cache as ABI 2 passes it (K and V by their
 * strides, the block table, the lengths, positions and slot mapping; any
 * page size) and attention is varlen: one kernel for prefill, chunked
 * prefill over a context, and decode. Compiled at run time by NVRTC
 * through the driver API (../common); gcc alone builds it (make examples).
 * Not fast.
 */
#include "../common/sbx_cuda.h" /* first: it defines _GNU_SOURCE */
#include "stepbench_op.h"

static const char kKernels[] = SBX_DEVICE_PRELUDE
    /* linear: out [M, N] = x [M, K] · w [N, K]ᵀ; grid (ceil(N/128), M), block 128. */
    "extern \"C\" __global__ void ref_linear(unsigned short *out, const unsigned short *x, const unsigned short *w, int M, int N, int K) {\n"
    "    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;\n"
    "    if (n >= N) return;\n"
    "    float acc = 0.0f;\n"
    "    for (int k = 0; k < K; k++) acc += bf16_f32(x[(long long)m * K + k]) * bf16_f32(w[(long long)n * K + k]);\n"
    "    out[(long long)m * N + n] = f32_bf16(acc);\n"
    "}\n"
    /* add_rmsnorm: grid R, block 256. */
    "extern \"C\" __global__ void ref_add_rmsnorm(unsigned short *out, unsigned short *res, const unsigned short *add,\n"
    "        const unsigned short *w, int W, float eps) {\n"
    "    __shared__ float scratch[256];\n"
    "    const long long row = (long long)blockIdx.x * W;\n"
    "    float ss = 0.0f;\n"
    "    for (int i = threadIdx.x; i < W; i += blockDim.x) {\n"
    "        float r = bf16_f32(res[row + i]);\n"
    "        if (add) { r = round_bf16(r + bf16_f32(add[row + i])); res[row + i] = f32_bf16(r); }\n"
    "        ss += r * r;\n"
    "    }\n"
    "    const float inv = rsqrtf(block_sum(ss, scratch) / W + eps);\n"
    "    for (int i = threadIdx.x; i < W; i += blockDim.x)\n"
    "        out[row + i] = f32_bf16(bf16_f32(w[i]) * round_bf16(bf16_f32(res[row + i]) * inv));\n"
    "}\n"
    /* silu_mul: out [R, I], gate_up [R, 2I]; grid (ceil(I/256), R), block 256. */
    "extern \"C\" __global__ void ref_silu_mul(unsigned short *out, const unsigned short *gu, int I) {\n"
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;\n"
    "    if (i >= I) return;\n"
    "    const float g = bf16_f32(gu[(long long)r * 2 * I + i]), u = bf16_f32(gu[(long long)r * 2 * I + I + i]);\n"
    "    out[(long long)r * I + i] = f32_bf16(round_bf16(g / (1.0f + expf(-g))) * u);\n"
    "}\n"
    /* argmax: out [R], logits [R, V]; grid R, block 256: first index of the max, NaN never wins. */
    "extern \"C\" __global__ void ref_argmax(int *out, const unsigned short *logits, int V) {\n"
    "    __shared__ float best[256];\n"
    "    __shared__ int at[256];\n"
    "    const unsigned short *row = logits + (long long)blockIdx.x * V;\n"
    "    float b = SBX_NEG_INF; int bi = -1;\n"
    "    for (int i = threadIdx.x; i < V; i += blockDim.x) {\n"
    "        const float x = bf16_f32(row[i]);\n"
    "        if (x == x && (bi < 0 || x > b)) { b = x; bi = i; }\n"
    "    }\n"
    "    best[threadIdx.x] = b; at[threadIdx.x] = bi; __syncthreads();\n"
    "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
    "        if ((int)threadIdx.x < s) {\n"
    "            const float ob = best[threadIdx.x + s]; const int oi = at[threadIdx.x + s];\n"
    "            if (oi >= 0 && (at[threadIdx.x] < 0 || ob > best[threadIdx.x] || (ob == best[threadIdx.x] && oi < at[threadIdx.x]))) {\n"
    "                best[threadIdx.x] = ob; at[threadIdx.x] = oi;\n"
    "            }\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = at[0] < 0 ? 0 : at[0];\n"
    "}\n"
    /* The KV caches' elements (ABI 2.1): fmt 0 bf16, 1 FP8 E4M3, 2 FP8 E5M2 bytes. kv_value widens a
     * byte by the format's definition; kv_quant is sat_rne(x / scale): the nearest of the format's
     * finite codes, a tie to the even code (brute force over the 127 magnitudes: a reference, not fast). */
    "__device__ float kv_value(unsigned char b, int fmt) {\n"
    "    const int mb = fmt == 1 ? 3 : 2, bias = fmt == 1 ? 7 : 15;\n"
    "    const int e = (b & 0x7f) >> mb, m = b & ((1 << mb) - 1);\n"
    "    const float v = e == 0 ? ldexpf((float)m, 1 - bias - mb) : ldexpf(1.0f + (float)m / (1 << mb), e - bias);\n"
    "    return (b & 0x80) ? -v : v;\n"
    "}\n"
    "__device__ unsigned char kv_quant(float x, float scale, int fmt) {\n"
    "    const float a = fabsf(x / scale);\n"
    "    const int top = fmt == 1 ? 0x7e : 0x7b;\n"
    "    int best = 0;\n"
    "    for (int c = 1; c <= top; c++) {\n"
    "        const float d = fabsf(kv_value((unsigned char)c, fmt) - a), db = fabsf(kv_value((unsigned char)best, fmt) - a);\n"
    "        if (d < db || (d == db && (c & 1) == 0)) best = c;\n"
    "    }\n"
    "    return (unsigned char)(best | (x < 0.0f ? 0x80 : 0));\n"
    "}\n"
    "__device__ float kv_load(const void *c, long long i, int fmt) {\n"
    "    return fmt == 0 ? bf16_f32(((const unsigned short *)c)[i]) : kv_value(((const unsigned char *)c)[i], fmt);\n"
    "}\n"
    /* x is a bf16 value: stored as is (bf16) or quantized by the KV head's scale (FP8). */
    "__device__ void kv_store(void *c, long long i, float x, int fmt, float scale) {\n"
    "    if (fmt == 0) ((unsigned short *)c)[i] = f32_bf16(x); else ((unsigned char *)c)[i] = kv_quant(x, scale, fmt);\n"
    "}\n"
    /* rope_kv_write: one block per token t, block 128: q rotated at positions[t]; k rotated and v written
     * at slot_mapping[t] (page·PS + offset: ks0/ks1 and vs0/vs1 strides of a page and a slot, ks2/vs2 of a
     * head), nothing written for a negative slot (padding); an FP8 cache's values quantized by the KV
     * head's scale (ksc, vsc: [K]). */
    "__device__ void rotate(void *o, const unsigned short *x, const float *f, int D, float p, int fmt, float scale) {\n"
    "    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {\n"
    "        const float a = p * f[i];\n"
    "        const float c = round_bf16(cosf(a)), s = round_bf16(sinf(a));\n"
    "        const float lo = bf16_f32(x[i]), hi = bf16_f32(x[i + D / 2]);\n"
    "        kv_store(o, i, round_bf16(round_bf16(lo * c) + round_bf16(-hi * s)), fmt, scale);\n"
    "        kv_store(o, i + D / 2, round_bf16(round_bf16(hi * c) + round_bf16(lo * s)), fmt, scale);\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void ref_rope(unsigned short *q, void *kc, void *vc, const unsigned short *qkv,\n"
    "        const float *f, const int *positions, const long long *slots, int H, int K, int D, int PS,\n"
    "        long long ks0, long long ks1, long long ks2, long long vs0, long long vs1, long long vs2,\n"
    "        int fmt, const float *ksc, const float *vsc, int nsc) {\n"
    "    const int t = blockIdx.x;\n"
    "    const float p = (float)positions[t];\n"
    "    const unsigned short *row = qkv + (long long)t * (H + 2 * K) * D;\n"
    "    for (int h = 0; h < H; h++) rotate(q + ((long long)t * H + h) * D, row + h * D, f, D, p, 0, 1.0f);\n"
    "    const long long slot = slots[t];\n"
    "    if (slot < 0) return;\n"
    "    const long long page = slot / PS, off = slot % PS;\n"
    "    const int es = fmt == 0 ? 2 : 1;\n"
    "    for (int h = 0; h < K; h++)\n"
    "        rotate((char *)kc + (page * ks0 + off * ks1 + h * ks2) * es, row + (H + h) * D, f, D, p, fmt, fmt ? ksc[nsc == 1 ? 0 : h] : 1.0f);\n"
    "    for (int i = threadIdx.x; i < K * D; i += blockDim.x)\n"
    "        kv_store(vc, page * vs0 + off * vs1 + (i / D) * vs2 + i % D, bf16_f32(row[(H + K) * D + i]), fmt, fmt ? vsc[nsc == 1 ? 0 : i / D] : 1.0f);\n"
    "}\n"
    /* attention: out, q [T, H, D]; grid (max_query_len, H, B), block 128: new token i of sequence b (row
     * query_start[b] + i) sits at position seq_lens[b] − q_len + i and attends to keys 0..that position,
     * read through the block table; chunks of 256 keys, online softmax. */
    "extern \"C\" __global__ void ref_attention(unsigned short *out, const unsigned short *q, const void *kc,\n"
    "        const void *vc, const int *block_table, const int *seq_lens, const int *query_start,\n"
    "        int H, int K, int D, int PS, int MP, long long ks0, long long ks1, long long ks2, long long vs0, long long vs1, long long vs2,\n"
    "        int fmt, const float *ksc, const float *vsc, int nsc) {\n"
    "    __shared__ float qs[128];\n"
    "    __shared__ float sc[256];\n"
    "    __shared__ float scratch[128];\n"
    "    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x, kvh = h / (H / K);\n"
    "    const int qlen = query_start[b + 1] - query_start[b];\n"
    "    if (i >= qlen) return;\n"
    "    const int keys = seq_lens[b] - qlen + i + 1;\n"
    "    const int *pages = block_table + (long long)b * MP;\n"
    "    const long long qo = ((long long)(query_start[b] + i) * H + h) * D;\n"
    "    if (t < D) qs[t] = bf16_f32(q[qo + t]);\n"
    "    __syncthreads();\n"
    /* An FP8 cache: the K scale in the softmax scale, the V scale on the output (FlashInfer's way). */
    "    const float scale = rsqrtf((float)D) * (fmt ? ksc[nsc == 1 ? 0 : kvh] : 1.0f);\n"
    "    const float vscale = fmt ? vsc[nsc == 1 ? 0 : kvh] : 1.0f;\n"
    "    float m = SBX_NEG_INF, l = 0.0f, acc = 0.0f;\n"
    "    for (int c0 = 0; c0 < keys; c0 += 256) {\n"
    "        const int n = min(256, keys - c0);\n"
    "        float cm = SBX_NEG_INF;\n"
    "        for (int j = t; j < n; j += blockDim.x) {\n"
    "            const int key = c0 + j;\n"
    "            const long long kr = pages[key / PS] * ks0 + (key % PS) * ks1 + kvh * ks2;\n"
    "            float x = 0.0f;\n"
    "            for (int d = 0; d < D; d++) x += qs[d] * kv_load(kc, kr + d, fmt);\n"
    "            sc[j] = x * scale; cm = fmaxf(cm, x * scale);\n"
    "        }\n"
    "        const float mn = fmaxf(m, block_max(cm, scratch)), r = __expf(m - mn);\n"
    "        float ps = 0.0f;\n"
    "        for (int j = t; j < n; j += blockDim.x) { sc[j] = __expf(sc[j] - mn); ps += sc[j]; }\n"
    "        l = l * r + block_sum(ps, scratch);\n"
    "        acc *= r;\n"
    "        if (t < D) for (int j = 0; j < n; j++) { const int key = c0 + j; acc += sc[j] * kv_load(vc, pages[key / PS] * vs0 + (key % PS) * vs1 + kvh * vs2 + t, fmt); }\n"
    "        m = mn;\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t < D) out[qo + t] = f32_bf16(keys > 0 ? acc / l * vscale : 0.0f);\n"
    "}\n";

enum { LINEAR, NORM, SILU, ARGMAX, ROPE, ATTENTION, KERNELS };
static CUfunction fns[KERNELS];

#define DIM(i, d) ((int)c->tensors[i].shape[d])

static int fail(const stepbench_op_call *c, const char *what) {
    snprintf(c->error, c->error_bytes, "reference ops: %s: unexpected operands (%s)", c->op, what);
    return 1;
}

static int run_linear(const stepbench_op_call *c) {
    if (c->num_tensors != 3 || c->tensors[0].ndim != 2) return fail(c, "want out [M, N], x [M, K], w [N, K]");
    void *o = c->tensors[0].data, *x = c->tensors[1].data, *w = c->tensors[2].data;
    int M = DIM(0, 0), N = DIM(0, 1), K = DIM(1, 1);
    void *args[] = {&o, &x, &w, &M, &N, &K};
    return sbx_launch(fns[LINEAR], (unsigned)(N + 127) / 128, (unsigned)M, 1, 128, c->stream, args, c->error, c->error_bytes);
}

static int run_norm(const stepbench_op_call *c) {
    if (c->num_tensors != 4 || c->tensors[0].ndim != 2) return fail(c, "want out, residual, add, weight");
    void *o = c->tensors[0].data, *r = c->tensors[1].data, *a = c->tensors[2].data, *w = c->tensors[3].data;
    int W = DIM(0, 1);
    float eps = c->eps;
    void *args[] = {&o, &r, &a, &w, &W, &eps};
    return sbx_launch(fns[NORM], (unsigned)DIM(0, 0), 1, 1, 256, c->stream, args, c->error, c->error_bytes);
}

static int run_silu(const stepbench_op_call *c) {
    if (c->num_tensors != 2 || c->tensors[0].ndim != 2) return fail(c, "want out [R, I], gate_up [R, 2I]");
    void *o = c->tensors[0].data, *g = c->tensors[1].data;
    int I = DIM(0, 1);
    void *args[] = {&o, &g, &I};
    return sbx_launch(fns[SILU], (unsigned)(I + 255) / 256, (unsigned)DIM(0, 0), 1, 256, c->stream, args, c->error, c->error_bytes);
}

static int run_argmax(const stepbench_op_call *c) {
    if (c->num_tensors != 2 || c->tensors[1].ndim != 2) return fail(c, "want out [R], logits [R, V]");
    void *o = c->tensors[0].data, *l = c->tensors[1].data;
    int V = DIM(1, 1);
    void *args[] = {&o, &l, &V};
    return sbx_launch(fns[ARGMAX], (unsigned)DIM(1, 0), 1, 1, 256, c->stream, args, c->error, c->error_bytes);
}

/* kv_args are a KV op's cache strides (a page, a slot, a kv head; elements), its page geometry, and an
 * FP8 cache's format (0: bf16, 1: E4M3, 2: E5M2) and scales (ABI 2.1: tensors 10 and 11, [1] or [K]). */
typedef struct { long long ks[3], vs[3]; int PS, MP, fmt, nsc; void *ksc, *vsc; } kv_args;

static int kv_view(const stepbench_op_call *c, kv_args *kv) {
    const stepbench_tensor *k = &c->tensors[STEPBENCH_KV_K_CACHE], *v = &c->tensors[STEPBENCH_KV_V_CACHE];
    kv->fmt = c->kv_dtype == STEPBENCH_KV_FP8_E4M3 ? 1 : c->kv_dtype == STEPBENCH_KV_FP8_E5M2 ? 2 : 0;
    const int want = kv->fmt ? STEPBENCH_KV_OP_TENSORS_FP8 : STEPBENCH_KV_OP_TENSORS;
    if (c->num_tensors != want || k->ndim != 4 || v->ndim != 4 || k->strides[3] != 1 || v->strides[3] != 1) return 1;
    for (int i = 0; i < 3; i++) kv->ks[i] = k->strides[i], kv->vs[i] = v->strides[i];
    kv->PS = c->page_size, kv->MP = c->max_pages;
    kv->ksc = kv->vsc = NULL, kv->nsc = 1;
    if (kv->fmt) {
        const stepbench_tensor *ks = &c->tensors[STEPBENCH_KV_K_SCALE], *vs = &c->tensors[STEPBENCH_KV_V_SCALE];
        if (ks->ndim != 1 || vs->ndim != 1 || ks->shape[0] != vs->shape[0] || (ks->shape[0] != 1 && ks->shape[0] != c->num_kv_heads)) return 1;
        kv->ksc = ks->data, kv->vsc = vs->data, kv->nsc = (int)ks->shape[0];
    }
    return 0;
}

static int run_rope(const stepbench_op_call *c) {
    kv_args kv;
    if (kv_view(c, &kv) != 0) return fail(c, "want op ABI 2's q, qkv, the KV view, inv_freq");
    const stepbench_tensor *t = c->tensors;
    void *q = t[STEPBENCH_ROPE_Q].data, *k = t[STEPBENCH_KV_K_CACHE].data, *v = t[STEPBENCH_KV_V_CACHE].data, *qkv = t[STEPBENCH_ROPE_QKV].data;
    void *f = t[STEPBENCH_ROPE_INV_FREQ].data, *pos = t[STEPBENCH_KV_POSITIONS].data, *slots = t[STEPBENCH_KV_SLOT_MAPPING].data;
    int H = c->num_heads, K = c->num_kv_heads, D = c->head_dim;
    void *args[] = {&q, &k, &v, &qkv, &f, &pos, &slots, &H, &K, &D, &kv.PS, &kv.ks[0], &kv.ks[1], &kv.ks[2], &kv.vs[0], &kv.vs[1], &kv.vs[2],
                    &kv.fmt, &kv.ksc, &kv.vsc, &kv.nsc};
    return sbx_launch(fns[ROPE], (unsigned)c->num_tokens, 1, 1, 128, c->stream, args, c->error, c->error_bytes);
}

static int run_attention(const stepbench_op_call *c) {
    kv_args kv;
    if (kv_view(c, &kv) != 0 || c->head_dim > 128) return fail(c, "want op ABI 2's out, q [T, H, D<=128], the KV view");
    const stepbench_tensor *t = c->tensors;
    void *o = t[STEPBENCH_ATTN_OUT].data, *q = t[STEPBENCH_ATTN_Q].data, *k = t[STEPBENCH_KV_K_CACHE].data, *v = t[STEPBENCH_KV_V_CACHE].data;
    void *table = t[STEPBENCH_KV_BLOCK_TABLE].data, *lens = t[STEPBENCH_KV_SEQ_LENS].data, *starts = t[STEPBENCH_KV_QUERY_START_LOC].data;
    int H = c->num_heads, K = c->num_kv_heads, D = c->head_dim;
    void *args[] = {&o, &q, &k, &v, &table, &lens, &starts, &H, &K, &D, &kv.PS, &kv.MP,
                    &kv.ks[0], &kv.ks[1], &kv.ks[2], &kv.vs[0], &kv.vs[1], &kv.vs[2], &kv.fmt, &kv.ksc, &kv.vsc, &kv.nsc};
    /* max_query_len bounds every sequence's new tokens and is the same in every replay of a captured step. */
    return sbx_launch(fns[ATTENTION], (unsigned)c->max_query_len, (unsigned)H, (unsigned)c->num_seqs, 128, c->stream, args, c->error, c->error_bytes);
}

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    static const struct { const char *op; int (*run)(const stepbench_op_call *); } ops[] = {
        {"linear", run_linear}, {"add_rmsnorm", run_norm}, {"silu_mul", run_silu}, {"argmax", run_argmax},
        {"rope_kv_write", run_rope}, {"attn_prefill", run_attention}, {"attn_decode", run_attention},
    };
    static const char *const names[KERNELS] = {"ref_linear", "ref_add_rmsnorm", "ref_silu_mul", "ref_argmax", "ref_rope", "ref_attention"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (strcmp(op, ops[i].op) != 0) continue;
        if (fns[0] == NULL && sbx_build(kKernels, "reference_ops.cu", names, KERNELS, fns, err, n) != 0) return 1;
        table->abi_version = STEPBENCH_OP_ABI_VERSION;
        table->name = "reference ops (C, NVRTC + driver API: plain kernels for every op)";
        table->run = ops[i].run;
        /* The KV ops read K and V by their strides: any page size (the zeroed default), NHD or HND;
         * bf16 caches and (ABI 2.1) FP8 ones with their scales. */
        table->caps.kv_layouts = STEPBENCH_KV_NHD | STEPBENCH_KV_HND;
        table->caps.kv_dtypes = STEPBENCH_KV_BF16 | STEPBENCH_KV_FP8_E4M3 | STEPBENCH_KV_FP8_E5M2;
        return 0;
    }
    snprintf(err, n, "reference ops: no op %s", op);
    return 1;
}

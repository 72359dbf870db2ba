/* attn_decode_paged.c — an op library (include/stepbench_op.h, ABI 2):
 * decode attention over the paged KV cache the way serving kernels split
 * it, with each piece of ABI 2 a library may use:
 *
 *  - caps: any page size (1 and 16 as well as a page that divides no
 *    length), K and V read by their strides (so NHD or HND), bf16, and the
 *    log-sum-exp (STEPBENCH_CAP_LSE), written when the call asks for it;
 *  - plan: on the host, outside captures and timed regions, it chooses how
 *    many splits the keys of a sequence are cut into (from the table's
 *    capacity, max_seq_len, and the GPU's multiprocessors: a value that
 *    stays right at every step of the run, since the lengths then grow on
 *    the device) and allocates the partial results' buffer, which it keeps
 *    (the library's memory, as FlashInfer's plan keeps its workspace);
 *  - run: a split kernel, grid (splits, H, B), each block one split of one
 *    sequence's keys for one query head, reading every key through the
 *    block table, stopping at seq_lens[b] read on the device; then a
 *    combine kernel, grid (H, B), that merges the splits (flash-decoding)
 *    into out and, when asked, lse = max + ln Σ.
 *
 * Compiled at run time by NVRTC and launched through the driver API, both
 * opened with dlopen (../common/sbx_cuda.h): gcc alone builds it (make
 * examples). head_dim up to 128, any GQA group. Not tuned: it shows the
 * ABI, not the floor.
 *
 * Built with -DSTEPBENCH_EXAMPLE_LAST_PAGE_OFF_BY_ONE it drops a
 * sequence's last key when the sequence ends exactly on a page boundary
 * (the last page's length taken as seq_len % page_size): a deliberately
 * wrong build that stepbench verify's page-boundary cases refuse.
 */
#include "../common/sbx_cuda.h" /* first: it defines _GNU_SOURCE */
#include "stepbench_op.h"

#ifdef STEPBENCH_EXAMPLE_LAST_PAGE_OFF_BY_ONE
#define LAST_PAGE_BUG "1"
#define LIBRARY_NAME "example paged attn_decode (C, split-KV over pages, plan + log-sum-exp), OFF BY ONE at a page boundary"
#else
#define LAST_PAGE_BUG "0"
#define LIBRARY_NAME "example paged attn_decode (C, split-KV over pages, plan + log-sum-exp)"
#endif

#define THREADS 128
#define MIN_CHUNK 64

static const char kKernels[] = SBX_DEVICE_PRELUDE
    "#define LAST_PAGE_BUG " LAST_PAGE_BUG "\n"
    "#define THREADS 128\n"
    "#define SUB 256\n"
    /* The keys of (sequence b, head h) in [split·chunk, min(keys, (split+1)·chunk)); partials
     * [B][H][splits][D + 2]: the unnormalised sum Σ p·v, then the split's max m and sum l. */
    "extern \"C\" __global__ void paged_decode_split(float *partials, const unsigned short *q, const unsigned short *kc,\n"
    "        const unsigned short *vc, const int *block_table, const int *seq_lens, const int *query_start,\n"
    "        int H, int K, int D, int PS, int MP, int chunk, int splits, float scale,\n"
    "        long long ks0, long long ks1, long long ks2, long long vs0, long long vs1, long long vs2) {\n"
    "    __shared__ float qs[128];\n"
    "    __shared__ float sc[SUB];\n"
    "    __shared__ float scratch[THREADS];\n"
    "    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x, kvh = h / (H / K);\n"
    "    float *part = partials + (((long long)b * H + h) * splits + split) * (D + 2);\n"
    "    int keys = seq_lens[b];\n"
    "    if (LAST_PAGE_BUG && keys % PS == 0) keys--; /* the bug: a full last page read as empty */\n"
    "    const int lo = split * chunk, hi = min(keys, lo + chunk);\n"
    "    if (query_start[b + 1] - query_start[b] != 1 || lo >= hi) { /* nothing here: an empty split */\n"
    "        if (t == 0) { part[D] = SBX_NEG_INF; part[D + 1] = 0.0f; }\n"
    "        return;\n"
    "    }\n"
    "    const int *pages = block_table + (long long)b * MP;\n"
    "    if (t < D) qs[t] = bf16_f32(q[((long long)query_start[b] * H + h) * D + t]);\n"
    "    __syncthreads();\n"
    "    float m = SBX_NEG_INF, l = 0.0f, acc = 0.0f;\n"
    "    for (int c0 = lo; c0 < hi; c0 += SUB) {\n"
    "        const int n = min(SUB, hi - c0);\n"
    "        float cm = SBX_NEG_INF;\n"
    "        for (int j = t; j < n; j += THREADS) {\n"
    "            const int key = c0 + j;\n"
    "            const unsigned short *kr = kc + pages[key / PS] * ks0 + (key % PS) * ks1 + kvh * ks2;\n"
    "            float x = 0.0f;\n"
    "            for (int d = 0; d < D; d++) x += qs[d] * bf16_f32(kr[d]);\n"
    "            sc[j] = x * scale; cm = fmaxf(cm, x * scale);\n"
    "        }\n"
    "        const float mn = fmaxf(m, block_max(cm, scratch)), r = __expf(m - mn);\n"
    "        float ps = 0.0f;\n"
    "        for (int j = t; j < n; j += THREADS) { sc[j] = __expf(sc[j] - mn); ps += sc[j]; }\n"
    "        l = l * r + block_sum(ps, scratch);\n"
    "        acc *= r;\n"
    "        if (t < D) for (int j = 0; j < n; j++) { const int key = c0 + j; acc += sc[j] * bf16_f32(vc[pages[key / PS] * vs0 + (key % PS) * vs1 + kvh * vs2 + t]); }\n"
    "        m = mn;\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t < D) part[t] = acc;\n"
    "    if (t == 0) { part[D] = m; part[D + 1] = l; }\n"
    "}\n"
    /* Merges the splits of (b, h): out = Σ e^(m_s−M)·acc_s / Σ e^(m_s−M)·l_s; lse = M + ln of the denominator. */
    "extern \"C\" __global__ void paged_decode_combine(unsigned short *out, float *lse, const float *partials,\n"
    "        const int *query_start, int H, int D, int splits) {\n"
    "    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;\n"
    "    if (query_start[b + 1] - query_start[b] != 1) return;\n"
    "    const long long row = query_start[b];\n"
    "    const float *part = partials + ((long long)b * H + h) * splits * (D + 2);\n"
    "    float M = SBX_NEG_INF;\n"
    "    for (int s = 0; s < splits; s++) if (part[s * (D + 2) + D + 1] > 0.0f) M = fmaxf(M, part[s * (D + 2) + D]);\n"
    "    float L = 0.0f, acc = 0.0f;\n"
    "    for (int s = 0; s < splits; s++) {\n"
    "        const float *p = part + s * (D + 2);\n"
    "        if (p[D + 1] <= 0.0f) continue;\n"
    "        const float w = __expf(p[D] - M);\n"
    "        L += w * p[D + 1];\n"
    "        if (t < D) acc += w * p[t];\n"
    "    }\n"
    "    if (t < D) out[(row * H + h) * D + t] = f32_bf16(L > 0.0f ? acc / L : 0.0f);\n"
    "    if (lse != 0 && t == 0) lse[row * H + h] = M + logf(L);\n"
    "}\n";

enum { SPLIT, COMBINE, KERNELS };
static CUfunction fns[KERNELS];
static int sm_count;

/* A plan: the geometry it is for, the split, and the partials' buffer (kept for ever: a captured
 * graph may launch with it at any later step). */
typedef struct {
    int num_seqs, num_heads, head_dim, max_seq_len;
    int chunk, splits;
    CUdeviceptr partials;
} plan_t;

#define MAX_PLANS 64
static plan_t plans[MAX_PLANS];
static int num_plans;

static plan_t *find_plan(const stepbench_op_call *c) {
    for (int i = 0; i < num_plans; i++) {
        const plan_t *p = &plans[i];
        if (p->num_seqs == c->num_seqs && p->num_heads == c->num_heads && p->head_dim == c->head_dim && p->max_seq_len == c->max_seq_len)
            return &plans[i];
    }
    return NULL;
}

static int plan(const stepbench_op_call *c) {
    if (find_plan(c) != NULL) return 0; /* planned before: the same split for the same geometry */
    if (num_plans == MAX_PLANS) {
        snprintf(c->error, c->error_bytes, "paged attn_decode example: more than %d geometries planned", MAX_PLANS);
        return 1;
    }
    plan_t p = {c->num_seqs, c->num_heads, c->head_dim, c->max_seq_len, 0, 0, 0};
    /* About two blocks per multiprocessor, chunks of at least MIN_CHUNK keys (a multiple of it). */
    const int want = (2 * sm_count + p.num_seqs * p.num_heads - 1) / (p.num_seqs * p.num_heads);
    p.chunk = (p.max_seq_len + want - 1) / want;
    p.chunk = (p.chunk + MIN_CHUNK - 1) / MIN_CHUNK * MIN_CHUNK;
    p.splits = (p.max_seq_len + p.chunk - 1) / p.chunk;
    const size_t bytes = (size_t)p.num_seqs * p.num_heads * p.splits * (p.head_dim + 2) * sizeof(float);
    const CUresult r = sbx.memAlloc(&p.partials, bytes);
    if (r != 0) {
        snprintf(c->error, c->error_bytes, "paged attn_decode example: cuMemAlloc of %zu bytes: %s", bytes, sbx_cu_name(r));
        return 1;
    }
    plans[num_plans++] = p;
    return 0;
}

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors, *kc = &t[STEPBENCH_KV_K_CACHE], *vc = &t[STEPBENCH_KV_V_CACHE];
    if (c->num_tensors != STEPBENCH_KV_OP_TENSORS || c->max_query_len != 1 || kc->ndim != 4 || vc->ndim != 4 || kc->strides[3] != 1 ||
        vc->strides[3] != 1 || c->head_dim > 128 || c->num_heads % c->num_kv_heads != 0) {
        snprintf(c->error, c->error_bytes, "paged attn_decode example: want op ABI 2's decode call, head_dim <= 128 contiguous");
        return 1;
    }
    const plan_t *p = find_plan(c);
    if (p == NULL) {
        snprintf(c->error, c->error_bytes, "paged attn_decode example: called for %d sequences of up to %d tokens, %d heads of %d, without a plan for them (stepbench plans first)",
                 c->num_seqs, c->max_seq_len, c->num_heads, c->head_dim);
        return 1;
    }
    CUdeviceptr parts = p->partials;
    void *out = t[STEPBENCH_ATTN_OUT].data, *q = t[STEPBENCH_ATTN_Q].data, *k = kc->data, *v = vc->data;
    void *table = t[STEPBENCH_KV_BLOCK_TABLE].data, *lens = t[STEPBENCH_KV_SEQ_LENS].data, *starts = t[STEPBENCH_KV_QUERY_START_LOC].data;
    void *lse = c->want_lse ? t[STEPBENCH_ATTN_LSE].data : NULL;
    int H = c->num_heads, K = c->num_kv_heads, D = c->head_dim, PS = c->page_size, MP = c->max_pages, chunk = p->chunk, splits = p->splits;
    float scale = c->softmax_scale;
    long long ks0 = kc->strides[0], ks1 = kc->strides[1], ks2 = kc->strides[2], vs0 = vc->strides[0], vs1 = vc->strides[1], vs2 = vc->strides[2];
    void *split_args[] = {&parts, &q, &k, &v, &table, &lens, &starts, &H, &K, &D, &PS, &MP, &chunk, &splits, &scale,
                          &ks0, &ks1, &ks2, &vs0, &vs1, &vs2};
    if (sbx_launch(fns[SPLIT], (unsigned)splits, (unsigned)H, (unsigned)c->num_seqs, THREADS, c->stream, split_args, c->error, c->error_bytes) != 0)
        return 1;
    void *combine_args[] = {&out, &lse, &parts, &starts, &H, &D, &splits};
    return sbx_launch(fns[COMBINE], (unsigned)H, (unsigned)c->num_seqs, 1, THREADS, c->stream, combine_args, c->error, c->error_bytes);
}

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) {
        snprintf(err, n, "paged attn_decode example: implements attn_decode only, not %s", op);
        return 1;
    }
    static const char *const names[KERNELS] = {"paged_decode_split", "paged_decode_combine"};
    if (fns[0] == NULL && sbx_build(kKernels, "attn_decode_paged.cu", names, KERNELS, fns, err, n) != 0) return 1;
    CUdevice dev;
    if (sbx.ctxGetDevice(&dev) != 0 || sbx.deviceGetAttribute(&sm_count, 16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */, dev) != 0 || sm_count < 1) {
        snprintf(err, n, "paged attn_decode example: the device's multiprocessor count");
        return 1;
    }
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = LIBRARY_NAME;
    table->run = run;
    table->plan = plan;
    table->caps.kv_layouts = STEPBENCH_KV_NHD | STEPBENCH_KV_HND; /* K and V by their strides */
    table->caps.kv_dtypes = STEPBENCH_KV_BF16;
    table->caps.num_page_sizes = 0; /* any page size */
    table->caps.flags = STEPBENCH_CAP_LSE;
    return 0;
}

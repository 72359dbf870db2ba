/* attn_decode.c — an op library (include/stepbench_op.h, ABI 2) that
 * replaces stepbench's decode attention with a kernel of its own, compiled
 * at run time by NVRTC and launched through the CUDA driver API, both
 * opened with dlopen (../common/sbx_cuda.h): gcc alone builds it (make
 * examples), no CUDA toolkit or header.
 *
 * The kernel: one block of 128 threads per (sequence, query head); the
 * sequence's keys, read through the block table page by page (any page
 * size; K and V each by their own strides, so NHD or HND), in chunks of
 * 256, scores in shared memory, an online softmax (running maximum and
 * sum), thread d accumulating output dim d. Any head_dim up to 128
 * (Llama-3-8B's 128, Llama-3.2-1B's 64), any number of query heads per kv
 * head (GQA groups of 4 and 8). The number of keys is read from seq_lens on
 * the device, so a captured decode step replays right. The simplest paged
 * decode there is; ../paged/attn_decode_paged.c splits the keys over
 * blocks, plans on the host and writes the log-sum-exp.
 *
 * Built with -DSTEPBENCH_EXAMPLE_OFF_BY_ONE it drops the newest key (the
 * token's own): a deliberately wrong build that stepbench verify refuses.
 */
#include "../common/sbx_cuda.h" /* first: it defines _GNU_SOURCE */
#include "stepbench_op.h"

#ifdef STEPBENCH_EXAMPLE_OFF_BY_ONE
#define NEWEST_KEY "0"
#define LIBRARY_NAME "example attn_decode (C, NVRTC + driver API), OFF BY ONE: drops the newest key"
#else
#define NEWEST_KEY "1"
#define LIBRARY_NAME "example attn_decode (C, NVRTC + driver API)"
#endif

static const char kKernel[] = SBX_DEVICE_PRELUDE
    "#define NEWEST_KEY " NEWEST_KEY "\n"
    "#define THREADS 128\n"
    "#define CHUNK 256\n"
    /* out, q [T, H, D]; caches [pages][page_size][K][D] at strides (ks, vs: page, slot, head); grid (H, B), block THREADS. */
    "extern \"C\" __global__ void example_attn_decode(unsigned short *out, const unsigned short *q,\n"
    "        const unsigned short *kc, const unsigned short *vc, const int *block_table, const int *seq_lens,\n"
    "        const int *query_start, int H, int K, int D, int PS, int MP,\n"
    "        long long ks0, long long ks1, long long ks2, long long vs0, long long vs1, long long vs2) {\n"
    "    __shared__ float qs[128];\n"
    "    __shared__ float scores[CHUNK];\n"
    "    __shared__ float scratch[THREADS];\n"
    "    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;\n"
    "    if (query_start[b + 1] - query_start[b] != 1) return; /* decode: one new token a sequence */\n"
    "    const long long row = query_start[b];\n"
    "    const int kvh = h / (H / K);\n"
    "    const int keys = seq_lens[b] - 1 + NEWEST_KEY;\n"
    "    const int *pages = block_table + (long long)b * MP;\n"
    "    const float scale = rsqrtf((float)D);\n"
    "    if (t < D) qs[t] = bf16_f32(q[(row * H + h) * D + t]);\n"
    "    __syncthreads();\n"
    "    float m = SBX_NEG_INF, l = 0.0f, acc = 0.0f;\n"
    "    for (int c0 = 0; c0 < keys; c0 += CHUNK) {\n"
    "        const int n = min(CHUNK, keys - c0);\n"
    "        float cmax = SBX_NEG_INF;\n"
    "        for (int j = t; j < n; j += THREADS) {\n"
    "            const int key = c0 + j;\n"
    "            const unsigned short *krow = kc + pages[key / PS] * ks0 + (key % PS) * ks1 + kvh * ks2;\n"
    "            float s = 0.0f;\n"
    "            for (int d = 0; d < D; d++) s += qs[d] * bf16_f32(krow[d]);\n"
    "            scores[j] = s * scale;\n"
    "            cmax = fmaxf(cmax, s * scale);\n"
    "        }\n"
    "        const float mnew = fmaxf(m, block_max(cmax, scratch));\n"
    "        const float rescale = __expf(m - mnew);\n"
    "        float psum = 0.0f;\n"
    "        for (int j = t; j < n; j += THREADS) { const float p = __expf(scores[j] - mnew); scores[j] = p; psum += p; }\n"
    "        l = l * rescale + block_sum(psum, scratch);\n"
    "        acc *= rescale;\n"
    "        if (t < D) {\n"
    "            for (int j = 0; j < n; j++) {\n"
    "                const int key = c0 + j;\n"
    "                acc += scores[j] * bf16_f32(vc[pages[key / PS] * vs0 + (key % PS) * vs1 + kvh * vs2 + t]);\n"
    "            }\n"
    "        }\n"
    "        m = mnew;\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t < D) out[(row * H + h) * D + t] = f32_bf16(keys > 0 ? acc / l : 0.0f);\n"
    "}\n";

static CUfunction kernel;

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors;
    const stepbench_tensor *kc = &t[STEPBENCH_KV_K_CACHE], *vc = &t[STEPBENCH_KV_V_CACHE];
    if (c->num_tensors != STEPBENCH_KV_OP_TENSORS || kc->ndim != 4 || vc->ndim != 4 || c->max_query_len != 1) {
        snprintf(c->error, c->error_bytes, "attn_decode example: want op ABI 2's decode call (one new token a sequence)");
        return 1;
    }
    int H = c->num_heads, K = c->num_kv_heads, D = c->head_dim, PS = c->page_size, MP = c->max_pages;
    if (D > 128 || K <= 0 || H % K != 0 || kc->strides[3] != 1 || vc->strides[3] != 1) {
        snprintf(c->error, c->error_bytes, "attn_decode example: head_dim %d (at most 128, contiguous), %d heads over %d kv heads", D, H, K);
        return 1;
    }
    void *out = t[STEPBENCH_ATTN_OUT].data, *q = t[STEPBENCH_ATTN_Q].data, *k = kc->data, *v = vc->data;
    void *table = t[STEPBENCH_KV_BLOCK_TABLE].data, *lens = t[STEPBENCH_KV_SEQ_LENS].data, *starts = t[STEPBENCH_KV_QUERY_START_LOC].data;
    long long ks0 = kc->strides[0], ks1 = kc->strides[1], ks2 = kc->strides[2], vs0 = vc->strides[0], vs1 = vc->strides[1], vs2 = vc->strides[2];
    void *args[] = {&out, &q, &k, &v, &table, &lens, &starts, &H, &K, &D, &PS, &MP, &ks0, &ks1, &ks2, &vs0, &vs1, &vs2};
    return sbx_launch(kernel, (unsigned)H, (unsigned)c->num_seqs, 1, 128, c->stream, args, c->error, c->error_bytes);
}

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) {
        snprintf(err, n, "attn_decode example: implements attn_decode only, not %s", op);
        return 1;
    }
    static const char *const names[] = {"example_attn_decode"};
    if (kernel == NULL && sbx_build(kKernel, "example_attn_decode.cu", names, 1, &kernel, err, n) != 0) return 1;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = LIBRARY_NAME;
    table->run = run;
    /* caps: left zeroed, the defaults: any page size, NHD, bf16, no log-sum-exp (it reads the strides, so HND
     * would do too: a library that can says so with table->caps.kv_layouts = STEPBENCH_KV_NHD | STEPBENCH_KV_HND). */
    return 0;
}

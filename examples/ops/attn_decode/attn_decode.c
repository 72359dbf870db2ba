/* attn_decode.c — an op library (include/stepbench_op.h) that replaces
 * stepbench's decode attention with a kernel of its own, compiled at run
 * time by NVRTC and launched through the CUDA driver API, both opened with
 * dlopen (../common/sbx_cuda.h): gcc alone builds it (make examples), no
 * CUDA toolkit or header.
 *
 * The kernel: one block of 128 threads per (sequence, query head); the keys
 * of the cache in chunks of 256, scores in shared memory, an online softmax
 * (running maximum and sum), thread d accumulating output dim d. Any
 * head_dim up to 128 (Llama-3-8B's 128, Llama-3.2-1B's 64), any number of
 * query heads per kv head (GQA groups of 4 and 8). The number of keys is
 * read from pos on the device, so a captured decode step replays right.
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
    /* out, q [B, H, D]; k, v [B, P, K, D]; grid (H, B), block THREADS. */
    "extern \"C\" __global__ void example_attn_decode(unsigned short *out, const unsigned short *q,\n"
    "        const unsigned short *kc, const unsigned short *vc, const int *pos, int H, int K, int D, int P) {\n"
    "    __shared__ float qs[128];\n"
    "    __shared__ float scores[CHUNK];\n"
    "    __shared__ float scratch[THREADS];\n"
    "    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;\n"
    "    const int kvh = h / (H / K);\n"
    "    const int keys = min(*pos + NEWEST_KEY, P);\n"
    "    const float scale = rsqrtf((float)D);\n"
    "    const unsigned short *qrow = q + ((long long)b * H + h) * D;\n"
    "    if (t < D) qs[t] = bf16_f32(qrow[t]);\n"
    "    __syncthreads();\n"
    "    float m = SBX_NEG_INF, l = 0.0f, acc = 0.0f;\n"
    "    for (int c0 = 0; c0 < keys; c0 += CHUNK) {\n"
    "        const int n = min(CHUNK, keys - c0);\n"
    "        float cmax = SBX_NEG_INF;\n"
    "        for (int j = t; j < n; j += THREADS) {\n"
    "            const unsigned short *krow = kc + (((long long)b * P + c0 + j) * K + kvh) * D;\n"
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
    "            for (int j = 0; j < n; j++) acc += scores[j] * bf16_f32(vc[(((long long)b * P + c0 + j) * K + kvh) * D + t]);\n"
    "        }\n"
    "        m = mnew;\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t < D) out[((long long)b * H + h) * D + t] = f32_bf16(keys > 0 ? acc / l : 0.0f);\n"
    "}\n";

static CUfunction kernel;

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors;
    if (c->num_tensors != 5 || t[0].ndim != 4 || t[2].ndim != 4 || t[0].shape[1] != 1) {
        snprintf(c->error, c->error_bytes, "attn_decode example: want out [B, 1, H, D], q, k_cache [B, P, K, D], v_cache, pos");
        return 1;
    }
    int H = (int)t[0].shape[2], D = (int)t[0].shape[3], P = (int)t[2].shape[1], K = (int)t[2].shape[2];
    if (D > 128 || K <= 0 || H % K != 0) {
        snprintf(c->error, c->error_bytes, "attn_decode example: head_dim %d (at most 128), %d heads over %d kv heads", D, H, K);
        return 1;
    }
    void *out = t[0].data, *q = t[1].data, *kc = t[2].data, *vc = t[3].data, *pos = t[4].data;
    void *args[] = {&out, &q, &kc, &vc, &pos, &H, &K, &D, &P};
    return sbx_launch(kernel, (unsigned)H, (unsigned)t[0].shape[0], 1, 128, c->stream, args, c->error, c->error_bytes);
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
    table->workspace_bytes = NULL;
    table->run = run;
    return 0;
}

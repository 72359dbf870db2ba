/* shim.c — makes the launchers python -m triton.tools.compile wrote for
 * attn_decode_triton.py (one per head_dim: build.sh names them with
 * -DTRITON_D64=... -DTRITON_D128=...) into a stepbench op library
 * (include/stepbench_op.h, ABI 2). The generated launcher's signature is
 *   CUresult NAME(CUstream stream, CUdeviceptr out, CUdeviceptr q, CUdeviceptr k_cache,
 *                 CUdeviceptr v_cache, CUdeviceptr block_table, CUdeviceptr seq_lens,
 *                 CUdeviceptr query_start, int32_t B, int32_t H, int32_t K, int32_t PS,
 *                 int32_t MP, int64_t ks0, int64_t ks1, int64_t ks2, int64_t vs0,
 *                 int64_t vs1, int64_t vs2, float scale);
 * with the grid (H, B, 1) built in (--grid H,B,1), and load_NAME/unload_NAME
 * load and unload its embedded cubin. The modules are loaded in
 * stepbench_op_get, on stepbench's thread with its context current, never
 * lazily inside a capture. */
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#include "stepbench_op.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define LAUNCHER_DECL(name)                                                                                            \
    CUresult name(CUstream stream, CUdeviceptr out, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr table,     \
                  CUdeviceptr seq_lens, CUdeviceptr query_start, int32_t B, int32_t H, int32_t K, int32_t PS, int32_t MP,  \
                  int64_t ks0, int64_t ks1, int64_t ks2, int64_t vs0, int64_t vs1, int64_t vs2, float scale);             \
    void CAT(load_, name)(void);

LAUNCHER_DECL(TRITON_D64)
LAUNCHER_DECL(TRITON_D128)

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors, *kc = &t[STEPBENCH_KV_K_CACHE], *vc = &t[STEPBENCH_KV_V_CACHE];
    if (c->num_tensors != STEPBENCH_KV_OP_TENSORS || c->max_query_len != 1 || kc->ndim != 4 || vc->ndim != 4 || kc->strides[3] != 1 ||
        vc->strides[3] != 1) {
        snprintf(c->error, c->error_bytes, "triton attn_decode: want op ABI 2's decode call, head_dim contiguous");
        return 1;
    }
    const int32_t B = c->num_seqs, H = c->num_heads, K = c->num_kv_heads, D = c->head_dim, PS = c->page_size, MP = c->max_pages;
    const int indices[] = {STEPBENCH_ATTN_OUT, STEPBENCH_ATTN_Q, STEPBENCH_KV_K_CACHE, STEPBENCH_KV_V_CACHE, STEPBENCH_KV_BLOCK_TABLE,
                           STEPBENCH_KV_SEQ_LENS, STEPBENCH_KV_QUERY_START_LOC};
    CUdeviceptr a[7];
    for (int i = 0; i < 7; i++) a[i] = (CUdeviceptr)(uintptr_t)t[indices[i]].data;
    const int64_t *ks = kc->strides, *vs = vc->strides;
    CUresult r;
    if (D == 64) {
        r = TRITON_D64((CUstream)c->stream, a[0], a[1], a[2], a[3], a[4], a[5], a[6], B, H, K, PS, MP, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                       c->softmax_scale);
    } else if (D == 128) {
        r = TRITON_D128((CUstream)c->stream, a[0], a[1], a[2], a[3], a[4], a[5], a[6], B, H, K, PS, MP, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                        c->softmax_scale);
    } else {
        snprintf(c->error, c->error_bytes, "triton attn_decode: built for head_dim 64 and 128, not %d", D);
        return 1;
    }
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        snprintf(c->error, c->error_bytes, "triton attn_decode: launch: %s", name);
        return 1;
    }
    return 0;
}

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) {
        snprintf(err, n, "triton attn_decode: implements attn_decode only, not %s", op);
        return 1;
    }
    CAT(load_, TRITON_D64)(); /* the generated loaders exit the process on a CUDA error */
    CAT(load_, TRITON_D128)();
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "example attn_decode (Triton, triton.tools.compile + a C shim)";
    table->run = run;
    table->caps.kv_layouts = STEPBENCH_KV_NHD | STEPBENCH_KV_HND; /* K and V by their strides; any page size */
    return 0;
}

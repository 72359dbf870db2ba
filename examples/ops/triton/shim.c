/* shim.c — makes the launchers python -m triton.tools.compile wrote for
 * attn_decode_triton.py (one per head_dim: build.sh names them with
 * -DTRITON_D64=... -DTRITON_D128=...) into a stepbench op library
 * (include/stepbench_op.h). The generated launcher's signature is
 *   CUresult NAME(CUstream stream, CUdeviceptr out, CUdeviceptr q, CUdeviceptr k_cache,
 *                 CUdeviceptr v_cache, CUdeviceptr pos, int32_t B, int32_t H, int32_t K,
 *                 int32_t P, float scale);
 * with the grid (H, B, 1) built in (--grid H,B,1), and load_NAME/unload_NAME
 * load and unload its embedded cubin. The modules are loaded in
 * stepbench_op_get, on stepbench's thread with its context current, never
 * lazily inside a capture. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#include "stepbench_op.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define LAUNCHER_DECL(name)                                                                                            \
    CUresult name(CUstream stream, CUdeviceptr out, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr pos, int32_t B, \
                  int32_t H, int32_t K, int32_t P, float scale);                                                       \
    void CAT(load_, name)(void);

LAUNCHER_DECL(TRITON_D64)
LAUNCHER_DECL(TRITON_D128)

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors;
    if (c->num_tensors != 5 || t[0].ndim != 4 || t[2].ndim != 4 || t[0].shape[1] != 1) {
        snprintf(c->error, c->error_bytes, "triton attn_decode: want out [B, 1, H, D], q, k_cache [B, P, K, D], v_cache, pos");
        return 1;
    }
    const int32_t B = (int32_t)t[0].shape[0], H = (int32_t)t[0].shape[2], D = (int32_t)t[0].shape[3];
    const int32_t P = (int32_t)t[2].shape[1], K = (int32_t)t[2].shape[2];
    const float scale = 1.0f / sqrtf((float)D);
    CUdeviceptr a[5];
    for (int i = 0; i < 5; i++) a[i] = (CUdeviceptr)(uintptr_t)t[i].data;
    CUresult r;
    if (D == 64) {
        r = TRITON_D64((CUstream)c->stream, a[0], a[1], a[2], a[3], a[4], B, H, K, P, scale);
    } else if (D == 128) {
        r = TRITON_D128((CUstream)c->stream, a[0], a[1], a[2], a[3], a[4], B, H, K, P, scale);
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
    table->workspace_bytes = NULL;
    table->run = run;
    return 0;
}

// attn_decode_bf16.cu — the nvcc recipe: an op library (include/
// stepbench_op.h) built with nvcc and the CUDA runtime, its kernel on
// cuda_bf16.h's __nv_bfloat16. On a GPU machine with the CUDA toolkit:
//
//   nvcc -O3 -arch=native -Xcompiler -fPIC -shared -Iinclude \
//        -o build/examples/libattn_decode_nvcc.so examples/ops/nvcc/attn_decode_bf16.cu
//   stepbench verify --op attn_decode=build/examples/libattn_decode_nvcc.so --check attention,decode_graph
//
// The runtime shares stepbench's context (the device's primary context),
// and its launches go on the stream stepbench gives, so stepbench's graph
// capture records them. The kernel's module is loaded in stepbench_op_get
// (cudaFuncGetAttributes), never lazily inside a capture.
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

#include "attn_decode_kernel.cuh"
#include "stepbench_op.h"

static int run(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors;
    if (c->num_tensors != 5 || t[0].ndim != 4 || t[2].ndim != 4 || t[0].shape[1] != 1 || t[0].shape[3] > 128) {
        snprintf(c->error, c->error_bytes, "nvcc attn_decode: want out [B, 1, H, D<=128], q, k_cache [B, P, K, D], v_cache, pos");
        return 1;
    }
    const int H = (int)t[0].shape[2], D = (int)t[0].shape[3], P = (int)t[2].shape[1], K = (int)t[2].shape[2];
    const dim3 grid((unsigned)H, (unsigned)t[0].shape[0]);
    nvcc_attn_decode<<<grid, NVCC_EX_THREADS, 0, (cudaStream_t)c->stream>>>(
        (__nv_bfloat16 *)t[0].data, (const __nv_bfloat16 *)t[1].data, (const __nv_bfloat16 *)t[2].data,
        (const __nv_bfloat16 *)t[3].data, (const int *)t[4].data, H, K, D, P);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(c->error, c->error_bytes, "nvcc attn_decode: launch: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

extern "C" uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

extern "C" int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) {
        snprintf(err, n, "nvcc attn_decode: implements attn_decode only, not %s", op);
        return 1;
    }
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, nvcc_attn_decode); // loads the module now, outside any capture
    if (e != cudaSuccess) {
        snprintf(err, n, "nvcc attn_decode: %s (built for another architecture? -arch=native on the GPU machine)", cudaGetErrorString(e));
        return 1;
    }
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "example attn_decode (nvcc, CUDA runtime, cuda_bf16.h)";
    table->workspace_bytes = nullptr;
    table->run = run;
    return 0;
}

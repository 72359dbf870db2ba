// attn_decode_bf16.cu — the nvcc recipe: an op library (include/
// stepbench_op.h, ABI 2: the paged KV cache) built with nvcc and the CUDA
// runtime, its kernel on cuda_bf16.h's __nv_bfloat16. On a GPU machine
// with the CUDA toolkit:
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
    const stepbench_tensor *t = c->tensors, *kc = &t[STEPBENCH_KV_K_CACHE], *vc = &t[STEPBENCH_KV_V_CACHE];
    if (c->num_tensors != STEPBENCH_KV_OP_TENSORS || c->max_query_len != 1 || kc->ndim != 4 || vc->ndim != 4 || c->head_dim > 128 ||
        kc->strides[3] != 1 || vc->strides[3] != 1) {
        snprintf(c->error, c->error_bytes, "nvcc attn_decode: want op ABI 2's decode call, head_dim <= 128 contiguous");
        return 1;
    }
    const dim3 grid((unsigned)c->num_heads, (unsigned)c->num_seqs);
    nvcc_attn_decode<<<grid, NVCC_EX_THREADS, 0, (cudaStream_t)c->stream>>>(
        (__nv_bfloat16 *)t[STEPBENCH_ATTN_OUT].data, (const __nv_bfloat16 *)t[STEPBENCH_ATTN_Q].data, (const __nv_bfloat16 *)kc->data,
        (const __nv_bfloat16 *)vc->data, (const int *)t[STEPBENCH_KV_BLOCK_TABLE].data, (const int *)t[STEPBENCH_KV_SEQ_LENS].data,
        (const int *)t[STEPBENCH_KV_QUERY_START_LOC].data, c->num_heads, c->num_kv_heads, c->head_dim, c->page_size, c->max_pages,
        kc->strides[0], kc->strides[1], kc->strides[2], vc->strides[0], vc->strides[1], vc->strides[2]);
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
    table->run = run;
    table->caps.kv_layouts = STEPBENCH_KV_NHD | STEPBENCH_KV_HND; // K and V by their strides; any page size
    return 0;
}

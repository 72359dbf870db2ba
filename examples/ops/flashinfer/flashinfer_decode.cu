// flashinfer_decode.cu — the FlashInfer recipe: attn_decode of op ABI 2
// (include/stepbench_op.h) run by FlashInfer's batch decode over the paged
// KV cache, a thin C++ shim over its header-only kernels.
//
// UNTESTED: no GPU and no FlashInfer in stepbench's tests. It follows
// FlashInfer 0.2's csrc/batch_decode.cu (BatchDecodeWithPagedKVCachePlan
// and ...Run), whose template names and arguments move between versions:
// hold it against that file of the version you build with. What stepbench
// tests of it: the CSR derivation (csr_from_table.cuh, run on the emulated
// device) and nothing else.
//
//   nvcc -O3 -std=c++17 -arch=native -Xcompiler -fPIC -shared -I$FLASHINFER/include -Iinclude \
//        -o build/examples/libattn_decode_flashinfer.so examples/ops/flashinfer/flashinfer_decode.cu
//   stepbench verify --op attn_decode=build/examples/libattn_decode_flashinfer.so --kv-layout paged ...
//
// The mapping: stepbench's block table and seq_lens become FlashInfer's CSR
// form on the device at every call (sb_csr_from_table into the workspace:
// the lengths move on between replays of a captured step); K and V are two
// tensors, NHD, their strides given to paged_kv_t; plan runs FlashInfer's
// DecodePlan on the host for the table's capacity (every sequence at
// max_pages pages), with enable_cuda_graph, so that its split stays right
// while the lengths grow on the device; its workspaces are the library's,
// allocated once in plan.
#include <cstdio>
#include <cstring>
#include <vector>

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "csr_from_table.cuh"
#include "stepbench_op.h"

using namespace flashinfer;
using DT = nv_bfloat16;
using Params = BatchDecodeParams<DT, DT, DT, int32_t>;
using Variant = DefaultAttention</*custom mask*/ false, /*sliding window*/ false, /*soft cap*/ false, /*alibi*/ false>;

constexpr size_t kFloatWorkspace = 128 << 20, kIntWorkspace = 8 << 20;
static void *float_ws, *int_ws, *int_ws_host;
static DecodePlanInfo plan_info;

#define FAIL(...) return (snprintf(c->error, c->error_bytes, "flashinfer attn_decode: " __VA_ARGS__), 1)

template <uint32_t D>
static int plan_d(const stepbench_op_call *c) {
    std::vector<int32_t> indptr(c->num_seqs + 1); // the capacity: max_pages pages a sequence
    for (int b = 0; b < c->num_seqs; b++) indptr[b + 1] = indptr[b] + c->max_pages;
    const uint32_t group = c->num_heads / c->num_kv_heads;
    cudaError_t e = cudaErrorInvalidValue;
    DISPATCH_GQA_GROUP_SIZE(group, GROUP_SIZE, {
        auto work = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, D, PosEncodingMode::kNone, Variant, Params>;
        e = DecodePlan<D, PosEncodingMode::kNone, Variant, Params>(float_ws, kFloatWorkspace, int_ws, int_ws_host, kIntWorkspace, plan_info,
                                                                   indptr.data(), c->num_seqs, c->num_heads, c->page_size,
                                                                   /*enable_cuda_graph=*/true, (cudaStream_t)c->stream, work);
    });
    if (e != cudaSuccess) FAIL("DecodePlan: %s", cudaGetErrorString(e));
    return 0;
}

static int plan(const stepbench_op_call *c) {
    if (float_ws == nullptr && (cudaMalloc(&float_ws, kFloatWorkspace) != cudaSuccess || cudaMalloc(&int_ws, kIntWorkspace) != cudaSuccess ||
                                cudaMallocHost(&int_ws_host, kIntWorkspace) != cudaSuccess))
        FAIL("its workspaces");
    switch (c->head_dim) {
    case 64: return plan_d<64>(c);
    case 128: return plan_d<128>(c);
    }
    FAIL("head_dim %d: built for 64 and 128", c->head_dim);
}

// workspace_bytes: the CSR form, B+1 + B·MP + B int32.
static int workspace_bytes(const stepbench_op_call *c, uint64_t *bytes) {
    *bytes = 4ull * (c->num_seqs + 1 + (uint64_t)c->num_seqs * c->max_pages + c->num_seqs);
    return 0;
}

template <uint32_t D>
static int run_d(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors, *k = &t[STEPBENCH_KV_K_CACHE], *v = &t[STEPBENCH_KV_V_CACHE];
    int32_t *indptr = (int32_t *)c->workspace, *indices = indptr + c->num_seqs + 1, *last = indices + c->num_seqs * c->max_pages;
    cudaStream_t s = (cudaStream_t)c->stream;
    sb_csr_from_table<<<1, 256, 0, s>>>((const int *)t[STEPBENCH_KV_BLOCK_TABLE].data, (const int *)t[STEPBENCH_KV_SEQ_LENS].data,
                                        c->num_seqs, c->max_pages, c->page_size, indptr, indices, last);
    const int64_t kv_strides[3] = {k->strides[0], k->strides[1], k->strides[2]}; // page, slot, head (NHD)
    paged_kv_t<DT, int32_t> paged_kv(c->num_kv_heads, c->page_size, D, c->num_seqs, QKVLayout::kNHD, (DT *)k->data, (DT *)v->data,
                                     kv_strides, indices, indptr, last);
    Params p((DT *)t[STEPBENCH_ATTN_Q].data, /*q_rope_offset=*/nullptr, paged_kv, (DT *)t[STEPBENCH_ATTN_OUT].data,
             /*lse=*/nullptr, /*alibi=*/nullptr, c->num_heads,
             /*q_stride_n=*/c->num_heads * D, /*q_stride_h=*/D, /*window_left=*/-1, /*soft_cap=*/0.f, c->softmax_scale,
             /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
    // The plan's indices into FlashInfer's int workspace, as csrc/batch_decode.cu's Run sets them.
    p.request_indices = GetPtrFromBaseOffset<int32_t>(int_ws, plan_info.request_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws, plan_info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_ws, plan_info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_ws, plan_info.kv_chunk_size_ptr_offset);
    p.block_valid_mask = plan_info.split_kv ? GetPtrFromBaseOffset<bool>(int_ws, plan_info.block_valid_mask_offset) : nullptr;
    p.padded_batch_size = plan_info.padded_batch_size;
    p.partition_kv = plan_info.split_kv;
    DT *tmp_v = plan_info.split_kv ? GetPtrFromBaseOffset<DT>(float_ws, plan_info.v_offset) : nullptr;
    float *tmp_s = plan_info.split_kv ? GetPtrFromBaseOffset<float>(float_ws, plan_info.s_offset) : nullptr;
    cudaError_t e = BatchDecodeWithPagedKVCacheDispatched<D, PosEncodingMode::kNone, Variant>(p, tmp_v, tmp_s, /*enable_pdl=*/false, s);
    if (e != cudaSuccess) FAIL("%s", cudaGetErrorString(e));
    return 0;
}

static int run(const stepbench_op_call *c) {
    if (c->max_query_len != 1 || c->kv_layout != STEPBENCH_KV_NHD) FAIL("want op ABI 2's decode call on NHD pages");
    switch (c->head_dim) {
    case 64: return run_d<64>(c);
    case 128: return run_d<128>(c);
    }
    FAIL("head_dim %d: built for 64 and 128", c->head_dim);
}

extern "C" uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

extern "C" int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) return snprintf(err, n, "flashinfer attn_decode: implements attn_decode only, not %s", op), 1;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "FlashInfer batch decode (paged, CSR derived on the device), via a C++ shim";
    table->run = run;
    table->plan = plan;
    table->workspace_bytes = workspace_bytes;
    table->caps.kv_layouts = STEPBENCH_KV_NHD; // FlashInfer takes HND too: the shim passes NHD only
    // No STEPBENCH_CAP_LSE: FlashInfer's kernels keep the log-sum-exp in base 2; a shim that declares it
    // converts (× ln 2) into the ABI's natural log.
    return 0;
}

// fa3_attention.cpp — the FA3 recipe: attn_prefill and attn_decode of op
// ABI 2 (include/stepbench_op.h) run by FlashAttention 3's
// flash_attn_with_kvcache (hopper/, sm_90), a thin C++ shim over its torch
// operator flash_attn_3::fwd.
//
// UNTESTED: no GPU, no torch and no FA3 in stepbench's tests. It calls the
// operator boxed, in the argument order of hopper/flash_attn_interface.py's
// _flash_attn_forward (FA3 as of 2025: q, k, v, k_new, ..., sm_margin); an
// FA3 of another order fails with the operator's schema error naming the
// argument, not silently. Build it where torch and FA3 (pip install
// flash-attn-3 or hopper/ built from source) are:
//
//   g++ -O2 -std=c++17 -fPIC -shared -Iinclude $(python3 -c 'import torch.utils.cpp_extension as c; print(" ".join("-I"+p for p in c.include_paths()))') \
//       -o build/examples/libattn_fa3.so examples/ops/fa3/fa3_attention.cpp \
//       -L$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda
//   FA3_LIB=$(python3 -c 'import flash_attn_3._C as m; print(m.__file__)') \
//     stepbench run --op attn_prefill=build/examples/libattn_fa3.so,attn_decode=build/examples/libattn_fa3.so --kv-layout paged ...
//
// The mapping (the header's): q [T, H, D] with cu_seqlens_q =
// query_start_loc and max_seqlen_q = max_query_len (varlen); k_cache,
// v_cache as they are ([num_pages, page_size, K, D], FA3's paged layout,
// any page size); page_table = block_table; seqused_k (cache_seqlens) =
// seq_lens; no k_new/v_new (rope_kv_write wrote them); causal (FA's mask is
// bottom-right aligned, stepbench's); softmax_scale; out = tensors[0]; num_splits
// 1 (no host value from the lengths); FA3's softmax_lse [H, T] (natural log)
// copied transposed into lse [T, H] when asked.
//
// CUDA graphs: mha_fwd allocates softmax_lse through torch's caching
// allocator on every call. Inside stepbench's capture that needs a graph
// memory pool: the shim opens one (beginAllocateToPool) while
// call->capturing, as torch.cuda.graph does; or run with --disable-cuda-graph.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "stepbench_op.h"

static at::Tensor view(const stepbench_tensor &t, at::ScalarType type) {
    return at::from_blob(t.data, at::IntArrayRef(t.shape, t.ndim), at::IntArrayRef(t.strides, t.ndim),
                         at::TensorOptions().dtype(type).device(at::kCUDA, t.device.device_id));
}

static int run(const stepbench_op_call *c) {
    try {
        const stepbench_tensor *t = c->tensors;
        const int dev = t[STEPBENCH_ATTN_Q].device.device_id;
        auto stream = c10::cuda::getStreamFromExternal((cudaStream_t)c->stream, dev);
        c10::cuda::CUDAStreamGuard guard(stream);
        const c10::cuda::MempoolId_t pool{0, 1}; // a private pool for the captured steps' allocations
        if (c->capturing)
            c10::cuda::CUDACachingAllocator::beginAllocateToPool(dev, pool, [stream](cudaStream_t s) { return s == stream.stream(); });
        at::Tensor q = view(t[STEPBENCH_ATTN_Q], at::kBFloat16), out = view(t[STEPBENCH_ATTN_OUT], at::kBFloat16);
        at::Tensor k = view(t[STEPBENCH_KV_K_CACHE], at::kBFloat16), v = view(t[STEPBENCH_KV_V_CACHE], at::kBFloat16);
        at::Tensor table = view(t[STEPBENCH_KV_BLOCK_TABLE], at::kInt), lens = view(t[STEPBENCH_KV_SEQ_LENS], at::kInt);
        at::Tensor starts = view(t[STEPBENCH_KV_QUERY_START_LOC], at::kInt);
        static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flash_attn_3::fwd", "");
        c10::IValue none;
        torch::jit::Stack stack{q, k, v, none, none, none, out, starts, none, none, none, lens,
                                (int64_t)c->max_query_len, (int64_t)c->max_seq_len, table, none, none, none, none, none,
                                none, none, none, (double)c->softmax_scale, true, (int64_t)-1, (int64_t)-1, (int64_t)0, 0.0,
                                true, none, (int64_t)1, none, (int64_t)0};
        op.callBoxed(&stack);
        if (c->want_lse) view(t[STEPBENCH_ATTN_LSE], at::kFloat).copy_(stack[1].toTensor().t()); // [H, T] -> [T, H]
        if (c->capturing) c10::cuda::CUDACachingAllocator::endAllocateToPool(dev, pool);
        return 0;
    } catch (const std::exception &e) {
        snprintf(c->error, c->error_bytes, "fa3: %s", e.what());
        return 1;
    }
}

extern "C" uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

extern "C" int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_prefill") != 0 && strcmp(op, "attn_decode") != 0)
        return snprintf(err, n, "fa3: implements attn_prefill and attn_decode, not %s", op), 1;
    // FA3's operators register themselves when its extension loads: $FA3_LIB is flash_attn_3/_C*.so.
    const char *lib = getenv("FA3_LIB");
    if (lib == nullptr || dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == nullptr)
        return snprintf(err, n, "fa3: set FA3_LIB to flash_attn_3's _C extension (%s)", lib ? dlerror() : "unset"), 1;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "FlashAttention 3 flash_attn_with_kvcache (paged, varlen), via a C++ shim over flash_attn_3::fwd";
    table->run = run;
    table->caps.kv_layouts = STEPBENCH_KV_NHD; // FA3's paged cache is [pages, page_size, K, D]; any page size
    table->caps.flags = STEPBENCH_CAP_LSE;
    return 0;
}

// csr_from_table.cuh — FlashInfer's paged form (CSR: kv_indptr,
// kv_indices, kv_last_page_len) derived on the device from op ABI 2's view
// (include/stepbench_op.h: block_table [B][MP], seq_lens [B], page size PS):
//   n_b = ceil(seq_lens[b] / PS)
//   kv_indptr[0] = 0, kv_indptr[b+1] = kv_indptr[b] + n_b
//   kv_indices[kv_indptr[b] + i] = block_table[b][i]   (i < n_b)
//   kv_last_page_len[b] = seq_lens[b] - (n_b - 1)·PS   (1..PS; 0 when n_b = 0)
// On the device, at the start of every call, because the lengths move on in
// device memory between replays of a captured decode step. One block (any
// size), launched as sb_csr_from_table<<<1, 256, 0, stream>>>; the outputs
// live in the call's workspace (B+1 + B·MP + B int32). Plain CUDA C++: no
// header needed, so stepbench's tests compile and run it on the emulated
// device against the formula above (cuda/flashinfer_csr_test.go).
#pragma once

extern "C" __global__ void sb_csr_from_table(const int *block_table, const int *seq_lens, int B, int MP, int PS,
                                             int *kv_indptr, int *kv_indices, int *kv_last_page_len) {
    if (threadIdx.x == 0) {
        int at = 0;
        kv_indptr[0] = 0;
        for (int b = 0; b < B; b++) {
            const int n = (seq_lens[b] + PS - 1) / PS;
            kv_last_page_len[b] = n > 0 ? seq_lens[b] - (n - 1) * PS : 0;
            at += n;
            kv_indptr[b + 1] = at;
        }
    }
    __syncthreads(); // kv_indptr, written by thread 0, is seen by the block's other threads
    for (int b = 0; b < B; b++) {
        const int start = kv_indptr[b], n = kv_indptr[b + 1] - start;
        for (int i = threadIdx.x; i < n; i += blockDim.x) kv_indices[start + i] = block_table[(long long)b * MP + i];
    }
}

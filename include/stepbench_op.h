/* stepbench_op.h — the C ABI of an op library: a shared object that replaces
 * one op of stepbench's forward pass (stepbench run/ab/verify/kernel
 * --op OP=PATH.so). Written for stepbench; plain C99, no CUDA header needed.
 * ABI 2: the KV ops (rope_kv_write, attn_prefill, attn_decode) take the
 * paged KV cache and a ragged batch as serving engines pass them. A library
 * built for ABI 1 is refused (docs/byok.md says what changed).
 *
 * Handshake. stepbench dlopens the library (RTLD_NOW | RTLD_LOCAL) and calls
 *   uint32_t stepbench_op_abi_version(void);
 * which returns the STEPBENCH_OP_ABI_VERSION the library was built with; a
 * different major version (the upper 16 bits) is refused in one line naming
 * the library, its sha256 and both versions (exit code 2). Then, on
 * stepbench's CUDA thread with its context current (the device's primary
 * context, shared by the CUDA runtime), once per op it replaces:
 *   int stepbench_op_get(const char *op, stepbench_op_table *table,
 *                        char *error, size_t error_bytes);
 * fills table for op ("attn_decode", ...) and returns 0, or returns non-zero
 * with a NUL-terminated message in error (an op it does not implement, a
 * device it cannot run on). stepbench zeroes the table and sets
 * table->struct_bytes first; a library writes no field past it. The library
 * may load its modules or compile its kernels here or at its first call
 * (never inside a capture, see below).
 *
 * Capabilities. A KV op's table declares in table->caps the page sizes, KV
 * layouts and KV dtypes the op takes (stepbench_op_caps). stepbench checks
 * them against the run's cache as soon as the library is loaded, before any
 * weight is loaded or anything is timed, and refuses a mismatch in one line
 * naming the library, its sha256, the op and what it lacks (exit code 2).
 * Zeroed caps mean: any page size, NHD, bf16, no log-sum-exp.
 *
 * Tensors. Every operand is a stepbench_tensor, laid out exactly as DLPack's
 * DLTensor (dlpack.h v1.x: data, device {device_type, device_id}, ndim,
 * dtype {code, bits, lanes}, shape, strides, byte_offset): a library that
 * includes dlpack.h may cast a (const stepbench_tensor *) to (const DLTensor
 * *). stepbench always fills strides (in elements; compact row-major except
 * where said), sets byte_offset to 0 and device to {STEPBENCH_DEVICE_CUDA
 * (kDLCUDA), ordinal}; a plan call's host tensors are {STEPBENCH_DEVICE_CPU
 * (kDLCPU), 0}. data is a CUdeviceptr (a cudaMalloc'd pointer is the same
 * thing) aligned to at least 256 bytes, except views into the KV cache and
 * scratch buffers, which are 16-byte aligned. Outputs are caller-allocated:
 * the library writes into them, never allocates them. An optional operand
 * that is absent has data == NULL and ndim == 0.
 *
 * The ops and their operands, in the order of stepbench_op_call.tensors
 * (bf16 is kDLBfloat 16 bits, the raw 16-bit pattern; B sequences, T new
 * tokens in all, H query heads, K kv heads, D head dim; NP pages of PS
 * tokens in the cache's pool, MP the block table's width):
 *   linear        out [M, N] bf16, x [M, Kd] bf16, w [N, Kd] bf16:  out = x · wᵀ
 *                 (fp32 accumulation; every GEMM of the model: qkv, o, gate_up,
 *                 down, lm_head)
 *   attn_prefill  0 out [T, H, D] bf16          the attention of each new token
 *   attn_decode   1 q [T, H, D] bf16            (attn_decode: every sequence
 *                 2..8 the KV view (below)       brings one token, T = B)
 *                 9 lse [T, H] f32, optional: written when call->want_lse
 *   rope_kv_write 0 q [T, H, D] bf16 (out)      rotate-half RoPE of q and k at
 *                 1 qkv [T, H+2K, D] bf16        positions[t]; rotated k and
 *                 2..8 the KV view (below)       raw v written to the caches
 *                 9 inv_freq [D/2] f32           at slot_mapping[t]
 *   add_rmsnorm   out [R, W], residual [R, W] (in and out), add [R, W]
 *                 (optional), weight [W] (bf16); eps: residual += add (rounded
 *                 to bf16), out = bf16(weight * bf16(residual * rsqrt(mean(
 *                 residual²) + eps)))
 *   silu_mul      out [R, I], gate_up [R, 2I] (gate columns first):
 *                 out = bf16(bf16(silu(gate)) * up)
 *   argmax        out [R] int32, logits [R, V] bf16: first index of the
 *                 maximum; NaN never wins; a row of NaN gives 0
 * kernels/ref (Go) is the exact definition of each (the KV ops:
 * ref.RopeKVWritePaged and ref.AttentionPaged, the log-sum-exp
 * ref.AttentionPagedLSE); stepbench checks a library against it before
 * anything is timed, at the run's shapes and at page sizes, orders and
 * ragged lengths of its own.
 *
 * The KV view (tensors 2..8 of the three KV ops, STEPBENCH_KV_*), vLLM's
 * FlashAttention backend's form:
 *   2 k_cache   [NP, PS, K, D] (call->kv_dtype)  one layer's K pages; the
 *   3 v_cache   [NP, PS, K, D]                    strides say the layout:
 *               NHD (compact) [PS·K·D, K·D, D, 1]; HND [K·PS·D, D, PS·D, 1]
 *               (call->kv_layout); K and V are separate tensors, so read
 *               their strides, never assume v = k + an offset
 *   4 block_table     [B, MP] int32  sequence b's cache position j lives at
 *                     slot block_table[b][j / PS]·PS + j % PS; entries past
 *                     a sequence's pages are never to be read (vLLM fills
 *                     them with 0; stepbench's checks fill them with page
 *                     ids past the pool, so a read past them faults)
 *   5 seq_lens        [B] int32  tokens in each sequence's cache after this
 *                     step's write (context + new tokens)
 *   6 query_start_loc [B+1] int32  sequence b's new tokens are rows
 *                     query_start_loc[b] .. query_start_loc[b+1]−1 of q,
 *                     qkv and out; query_start_loc[B] = T
 *   7 positions       [T] int32  each new token's position: row t of
 *                     sequence b is at seq_lens[b] − q_len_b + (t −
 *                     query_start_loc[b]) (vLLM's rotary takes positions)
 *   8 slot_mapping    [T] int64  each new token's cache slot; negative:
 *                     padding, not written (rope_kv_write still rotates q)
 * Attention is causal with the mask aligned bottom-right: new token i of a
 * sequence with q_len new tokens and seq_len in all sits at position
 * seq_len − q_len + i and attends to positions 0..seq_len − q_len + i of its
 * own cache, through the block table (so chunked prefill over a cached
 * context and decode are the same call), with scores scaled by
 * call->softmax_scale (1/√D). The K and V of the new tokens are already in
 * the cache: rope_kv_write ran first. The contiguous layout
 * (--kv-layout contiguous) is the same view with PS = the cache's positions
 * per sequence, NP = B and block_table[b][0] = b.
 *
 * FP8 caches (ABI 2.1). With --kv-cache-dtype fp8 (fp8_e4m3) or fp8_e5m2,
 * call->kv_dtype is STEPBENCH_KV_FP8_E4M3 or _E5M2, k_cache and v_cache are
 * tensors of that dtype (STEPBENCH_DTYPE_FLOAT8_*, 8 bits: one byte per
 * element, the strides as above), and two operands follow the ten:
 *   10 k_scale  [S] f32   the layer's dequantization multipliers of K and
 *   11 v_scale  [S] f32   V: x ≈ byte · scale; S is 1 (per tensor) or K
 *                         (per KV head: scale[kv_head]); read shape[0]
 * (num_tensors 12; device memory, the same buffer at every replay of a
 * captured step). rope_kv_write stores byte = sat_rne(x / scale) with x
 * the bf16 value the bf16 cache would hold (k after its rotation; IEEE
 * division; round to nearest even, saturating to 448 or 57344, as PTX's
 * cvt.rn.satfinite). Attention reads them as FlashInfer does: scores =
 * (q · k_bytes) · softmax_scale · k_scale[g], out = bf16((Σ p · v_bytes)
 * · v_scale[g]) (ref.RopeKVWritePagedFP8, ref.AttentionPagedFP8).
 * call->q_scale is for a library that computes Q·K in FP8. A library is
 * handed an FP8 cache only if its caps declare the dtype and it was built
 * for ABI 2.1 or later; else the run is refused before any weight is
 * loaded.
 *
 * The log-sum-exp. A library whose caps have STEPBENCH_CAP_LSE may be asked
 * for it: call->want_lse is 1 and tensor 9 is lse [T, H] f32, row t head h
 * = ln Σ_j exp(softmax_scale · q[t,h]·k_j) over the keys the token attends
 * to (natural log, token-major: FA3's varlen softmax_lse is [H, T], so a
 * strided copy; FlashInfer keeps base 2 in places: multiply by ln 2). Else
 * want_lse is 0 and tensor 9 absent. stepbench's forward pass does not use
 * it; verify asks for it from a library that declares it, and checks it.
 *
 * Lengths live on the device. The block table, seq_lens, query_start_loc,
 * positions and slot_mapping are read by the kernel, not the host: a
 * captured decode step is replayed at every step with the same launch
 * arguments while stepbench moves the view on in device memory, so a kernel
 * whose grid or arguments depend on the lengths gives wrong results from
 * the second replay on. Size grids for the call's bounds (num_seqs,
 * max_query_len, max_seq_len = MP·PS, which stay the same across replays)
 * and stop early on the device.
 *
 * Planning. table->plan (may be NULL) is a library's host-side planning,
 * FlashInfer's plan or FA3's scheduler metadata: stepbench calls it outside
 * any capture and outside every timed region, with the same call structure
 * and tensors as run, except that tensors 0..3 (and 9) have data == NULL
 * (shapes, strides and dtypes filled) and the view, tensors 4..8, is host
 * memory (kDLCPU) holding the values the step will find on the device when
 * it starts; call->phase says which step: STEPBENCH_PHASE_PREFILL (the
 * prefill: attn_prefill, or attn_decode when every prompt is one token, and
 * rope_kv_write) or STEPBENCH_PHASE_DECODE (the first decode step:
 * attn_decode and rope_kv_write). The engine plans at the start of every
 * run, both phases; verify before every case it checks. Later decode steps
 * move the view on the device (every sequence one token longer each step)
 * without another plan: a plan must stay valid for them, up to max_seq_len
 * tokens a sequence. plan may allocate device and host memory (keep it: it
 * is the library's, freed never or at exit), synchronize and copy to the
 * device; run may not allocate while capturing. Return 0, or non-zero with
 * a message in call->error.
 *
 * FlashInfer's paged form (CSR) from the view: for each sequence b,
 *   n_b = ⌈seq_lens[b] / PS⌉ (0 for an empty sequence)
 *   kv_indptr[0] = 0, kv_indptr[b+1] = kv_indptr[b] + n_b
 *   kv_indices[kv_indptr[b] + i] = block_table[b][i]      for i < n_b
 *   kv_last_page_len[b] = seq_lens[b] − (n_b − 1)·PS      (1..PS; 0 when n_b = 0)
 *   qo_indptr = query_start_loc
 * (int32 each; HND or NHD from the strides). The lengths change on the
 * device between replays, so derive them on the device, in a small kernel
 * at the start of run (writing into the workspace), or in plan for the
 * first step and again on the device after. FlashInfer's trtllm-gen decode
 * takes block_tables and seq_lens as they are.
 *
 * FA3's flash_attn_with_kvcache (hopper/flash_attn_interface.py; mha_fwd in
 * C++) maps onto attn_prefill and attn_decode as:
 *   q = tensors[1] [T, H, D] with cu_seqlens_q = query_start_loc and
 *   max_seqlen_q = max_query_len (varlen); k_cache, v_cache = tensors 2, 3
 *   ([num_pages, page_size, K, D], FA3's paged layout: NHD); page_table =
 *   block_table; cache_seqlens (seqused_k) = seq_lens; k = v = None (the new
 *   K and V are already written, so nothing is appended); causal = true (FA
 *   aligns its causal mask bottom-right since 2.1: stepbench's mask);
 *   softmax_scale = call->softmax_scale; out = tensors[0];
 *   return_softmax_lse when want_lse (FA3's [H, T] natural-log LSE,
 *   transposed into lse [T, H]); scheduler_metadata from
 *   get_scheduler_metadata in plan, or none. Any page size.
 *
 * Streams and CUDA graphs. Enqueue everything on call->stream (a CUstream,
 * the same as a cudaStream_t) and return without synchronizing. Decode steps
 * are captured into a CUDA graph (stream capture, thread-local mode) after one
 * eager step, and call->capturing says so. While capturing a library must
 * not: allocate or free device or host memory (cudaMalloc, cuMemAlloc,
 * cudaFree...), synchronize (cudaDeviceSynchronize, cudaStreamSynchronize,
 * cudaMemcpy without Async, cudaEventSynchronize), use the legacy default
 * stream or another stream not joined to the capture, query or read device
 * memory on the host, load a module or compile (NVRTC, cuModuleLoad, the
 * runtime's lazy loading of a kernel's first launch: launch every kernel
 * once eagerly first, which stepbench's eager step does) or change kernel
 * attributes. Launches, async copies and memsets on call->stream are fine.
 *
 * Workspace. workspace_bytes reports the scratch device memory a call needs
 * (0 for none); it may be called with data pointers NULL and must depend on
 * the shapes and the call's fields only. stepbench allocates it outside
 * captures and passes it as call->workspace (256-byte aligned, contents
 * undefined, not preserved between calls: what must persist belongs to the
 * library, allocated in plan or at its first call outside a capture).
 *
 * Errors. A function returns 0 on success, else non-zero with a message in
 * call->error (error_bytes including the NUL). stepbench names the library
 * and the op with it. A kernel fault surfaces at stepbench's next
 * synchronization and is reported as the sticky CUDA error it is.
 *
 * Threads: every call comes from one OS thread, the one stepbench_op_get was
 * called on. stepbench never unloads a library before the process ends.
 */
#ifndef STEPBENCH_OP_H
#define STEPBENCH_OP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Major version in the upper 16 bits: a change breaks the layout. Minor in
 * the lower: additions a library built for an older minor may ignore. */
#define STEPBENCH_OP_ABI_VERSION ((2u << 16) | 1u)
#define STEPBENCH_OP_ABI_MAJOR(v) ((v) >> 16)

/* DLPack's values (DLDeviceType, DLDataTypeCode). */
enum { STEPBENCH_DEVICE_CPU = 1, STEPBENCH_DEVICE_CUDA = 2 };
enum { STEPBENCH_DTYPE_INT = 0, STEPBENCH_DTYPE_UINT = 1, STEPBENCH_DTYPE_FLOAT = 2, STEPBENCH_DTYPE_BFLOAT = 4 };
/* ABI 2.1: an FP8 cache's tensors (DLPack 1.1's kDLFloat8_e4m3fn and
 * kDLFloat8_e5m2, 8 bits: OCP E4M3 with no infinity, largest 448, as
 * torch.float8_e4m3fn; E5M2, largest 57344, as torch.float8_e5m2). */
enum { STEPBENCH_DTYPE_FLOAT8_E4M3FN = 10, STEPBENCH_DTYPE_FLOAT8_E5M2 = 12 };

/* The tensors of the KV ops, by index (see above). */
enum {
    STEPBENCH_ATTN_OUT = 0,
    STEPBENCH_ATTN_Q = 1,
    STEPBENCH_ROPE_Q = 0,
    STEPBENCH_ROPE_QKV = 1,
    STEPBENCH_KV_K_CACHE = 2,
    STEPBENCH_KV_V_CACHE = 3,
    STEPBENCH_KV_BLOCK_TABLE = 4,
    STEPBENCH_KV_SEQ_LENS = 5,
    STEPBENCH_KV_QUERY_START_LOC = 6,
    STEPBENCH_KV_POSITIONS = 7,
    STEPBENCH_KV_SLOT_MAPPING = 8,
    STEPBENCH_ATTN_LSE = 9,
    STEPBENCH_ROPE_INV_FREQ = 9,
    STEPBENCH_KV_OP_TENSORS = 10,
    /* ABI 2.1, an FP8 cache's only (call->kv_dtype STEPBENCH_KV_FP8_*):
     * appended after the ten above, num_tensors 12 (see "FP8 caches"). */
    STEPBENCH_KV_K_SCALE = 10,
    STEPBENCH_KV_V_SCALE = 11,
    STEPBENCH_KV_OP_TENSORS_FP8 = 12
};

/* KV cache layouts: the value of call->kv_layout and the bits of
 * caps.kv_layouts. NHD pages are [page_size][kv_heads][head_dim] (vLLM's
 * FlashAttention backend, FA3); HND [kv_heads][page_size][head_dim]
 * (FlashInfer's default). The tensor's shape is NHD-ordered either way. */
#define STEPBENCH_KV_NHD (1u << 0)
#define STEPBENCH_KV_HND (1u << 1)

/* KV cache element types: the value of call->kv_dtype and the bits of
 * caps.kv_dtypes. stepbench's cache is bf16 (--kv-cache-dtype auto) or,
 * from ABI 2.1, FP8 bytes (fp8, fp8_e4m3: E4M3; fp8_e5m2: E5M2) with
 * per-layer K and V scales (see "FP8 caches" above); fp16 is reserved. */
#define STEPBENCH_KV_BF16 (1u << 0)
#define STEPBENCH_KV_FP16 (1u << 1)
#define STEPBENCH_KV_FP8_E4M3 (1u << 2)
#define STEPBENCH_KV_FP8_E5M2 (1u << 3)

/* caps.flags */
#define STEPBENCH_CAP_LSE (1u << 0) /* attention: writes lse when want_lse */

/* call->phase of a plan call (0 in run calls). */
enum { STEPBENCH_PHASE_NONE = 0, STEPBENCH_PHASE_PREFILL = 1, STEPBENCH_PHASE_DECODE = 2 };

typedef struct {
    int32_t device_type; /* STEPBENCH_DEVICE_CUDA, or _CPU (a plan call's view) */
    int32_t device_id;   /* CUDA ordinal; 0 on the host */
} stepbench_device;

typedef struct {
    uint8_t code;   /* STEPBENCH_DTYPE_* */
    uint8_t bits;   /* 16 for bf16, 32 for f32 and int32, 64 for int64 */
    uint16_t lanes; /* 1 */
} stepbench_dtype;

/* DLTensor's layout (see above). */
typedef struct {
    void *data;
    stepbench_device device;
    int32_t ndim;
    stepbench_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} stepbench_tensor;

#define STEPBENCH_OP_MAX_TENSORS 16
#define STEPBENCH_OP_MAX_PAGE_SIZES 16

/* What a KV op takes. Zero is the default of each field. */
typedef struct {
    /* STEPBENCH_KV_NHD | STEPBENCH_KV_HND; 0: NHD. */
    uint32_t kv_layouts;
    /* STEPBENCH_KV_BF16 | ...; 0: bf16. */
    uint32_t kv_dtypes;
    /* The page sizes it takes, page_sizes[0..num_page_sizes); 0 entries:
     * any page size, or with page_size_multiple > 1 any multiple of it
     * (vLLM's FlashAttention: 16). The contiguous layout's page is a
     * sequence's whole cache, whose size varies by run: a library with a
     * list is refused on it. */
    int32_t num_page_sizes;
    int32_t page_size_multiple;
    int32_t page_sizes[STEPBENCH_OP_MAX_PAGE_SIZES];
    uint32_t flags; /* STEPBENCH_CAP_* */
} stepbench_op_caps;

typedef struct {
    uint32_t abi_version;    /* STEPBENCH_OP_ABI_VERSION of stepbench */
    uint32_t struct_bytes;   /* sizeof(stepbench_op_call) of stepbench */
    const char *op;          /* "attn_decode", ... */
    int32_t num_tensors;
    const stepbench_tensor *tensors; /* in the op's order (see above) */
    void *stream;            /* CUstream / cudaStream_t to enqueue on */
    void *workspace;         /* CUdeviceptr of workspace_bytes, or NULL (and in plan calls) */
    uint64_t workspace_bytes;
    float eps;               /* add_rmsnorm */
    int32_t capturing;       /* 1 while stepbench captures a CUDA graph */
    /* The KV ops' fields (0 for the other ops). */
    int32_t phase;           /* plan calls: STEPBENCH_PHASE_*; run calls: 0 */
    int32_t num_seqs;        /* B */
    int32_t num_tokens;      /* T */
    int32_t num_heads;       /* H */
    int32_t num_kv_heads;    /* K */
    int32_t head_dim;        /* D */
    int32_t page_size;       /* PS */
    int32_t num_pages;       /* NP */
    int32_t max_pages;       /* MP, the block table's width */
    int32_t max_query_len;   /* the most new tokens of a sequence (1 for attn_decode); the same in every replay */
    int32_t max_seq_len;     /* MP·PS: a bound on seq_lens, not their current maximum */
    uint32_t kv_layout;      /* STEPBENCH_KV_NHD or _HND */
    uint32_t kv_dtype;       /* STEPBENCH_KV_BF16, ... */
    int32_t want_lse;        /* attention: 1 when tensor 9 (lse) is to be written */
    float softmax_scale;     /* attention: 1/√D */
    char *error;             /* on failure: a message, NUL-terminated */
    size_t error_bytes;
    /* ABI 2.1. attention on an FP8 cache: the query's scale for a library
     * that computes Q·K in FP8 (FA3's descale_q, vLLM's q_scale): q_fp8 =
     * sat_rne(q / q_scale), the scores then multiplied by q_scale ·
     * k_scale · softmax_scale. stepbench's q is bf16 and its checks hold
     * such a library to the bf16-query definition; it passes 1.0 (vLLM's
     * q_scale without a calibrated one). 0 on a bf16 cache and for the
     * other ops. */
    float q_scale;
} stepbench_op_call;

typedef struct {
    uint32_t struct_bytes; /* set by stepbench before stepbench_op_get: write nothing past it */
    uint32_t abi_version;  /* the library's STEPBENCH_OP_ABI_VERSION */
    const char *name;      /* describes the implementation, for reports */
    int (*workspace_bytes)(const stepbench_op_call *call, uint64_t *bytes); /* may be NULL: none */
    int (*run)(const stepbench_op_call *call);
    int (*plan)(const stepbench_op_call *call); /* may be NULL: no planning */
    stepbench_op_caps caps;                     /* the KV ops' (ignored for the others) */
} stepbench_op_table;

/* Exported by the library. */
uint32_t stepbench_op_abi_version(void);
int stepbench_op_get(const char *op, stepbench_op_table *table, char *error, size_t error_bytes);

#ifdef __cplusplus
}
#endif

#endif /* STEPBENCH_OP_H */

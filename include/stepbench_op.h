/* stepbench_op.h — the C ABI of an op library: a shared object that replaces
 * one op of stepbench's forward pass (stepbench run/ab/verify/kernel
 * --op OP=PATH.so). Written for stepbench; plain C99, no CUDA header needed.
 *
 * Handshake. stepbench dlopens the library (RTLD_NOW | RTLD_LOCAL) and calls
 *   uint32_t stepbench_op_abi_version(void);
 * which returns the STEPBENCH_OP_ABI_VERSION the library was built with; a
 * different major version (the upper 16 bits) is refused, naming the library.
 * Then, on stepbench's CUDA thread with its context current (the device's
 * primary context, shared by the CUDA runtime), once per op it replaces:
 *   int stepbench_op_get(const char *op, stepbench_op_table *table,
 *                        char *error, size_t error_bytes);
 * fills table for op ("attn_decode", ...) and returns 0, or returns non-zero
 * with a NUL-terminated message in error (an op it does not implement, a
 * device it cannot run on). The library may load its modules or compile its
 * kernels here or at its first call (never inside a capture, see below).
 *
 * Tensors. Every operand is a stepbench_tensor, laid out exactly as DLPack's
 * DLTensor (dlpack.h v1.x: data, device {device_type, device_id}, ndim,
 * dtype {code, bits, lanes}, shape, strides, byte_offset): a library that
 * includes dlpack.h may cast a (const stepbench_tensor *) to (const DLTensor
 * *). stepbench always fills strides (in elements, compact row-major), sets
 * byte_offset to 0 and device to {STEPBENCH_DEVICE_CUDA (kDLCUDA), ordinal}.
 * data is a CUdeviceptr (a cudaMalloc'd pointer is the same thing) aligned
 * to at least 256 bytes, except views into the KV cache and scratch buffers,
 * which are 16-byte aligned. Outputs are caller-allocated: the library
 * writes into them, never allocates them. An optional operand that is absent
 * has data == NULL and ndim == 0.
 *
 * The ops and their operands, in the order of stepbench_op_call.tensors
 * (bf16 is kDLBfloat 16 bits, the raw 16-bit pattern; B batch, S new tokens
 * per sequence, T = B*S, H query heads, K kv heads, D head dim, P the cache's
 * positions per sequence):
 *   linear        out [M, N] bf16, x [M, Kd] bf16, w [N, Kd] bf16:  out = x · wᵀ
 *                 (fp32 accumulation; every GEMM of the model: qkv, o, gate_up,
 *                 down, lm_head)
 *   attn_prefill  out [B, S, H, D], q [B, S, H, D], k_cache [B, P, K, D],
 *                 v_cache [B, P, K, D] (bf16), pos [1] int32: causal GQA
 *                 attention of each new token over cache positions
 *                 0..pos+s (k/v of the new tokens are already in the cache)
 *   attn_decode   the same with S = 1
 *   rope_kv_write q [T, H, D] (out), k_cache, v_cache [B, P, K, D] (written at
 *                 positions pos..pos+S-1), qkv [T, H+2K, D], inv_freq [D/2]
 *                 f32, pos [1] int32: rotate-half RoPE at position pos+s
 *   add_rmsnorm   out [R, W], residual [R, W] (in and out), add [R, W]
 *                 (optional), weight [W] (bf16); eps: residual += add (rounded
 *                 to bf16), out = bf16(weight * bf16(residual * rsqrt(mean(
 *                 residual²) + eps)))
 *   silu_mul      out [R, I], gate_up [R, 2I] (gate columns first):
 *                 out = bf16(bf16(silu(gate)) * up)
 *   argmax        out [R] int32, logits [R, V] bf16: first index of the
 *                 maximum; NaN never wins; a row of NaN gives 0
 * kernels/ref (Go) is the exact definition of each; stepbench checks a
 * library against it at the run's shapes before anything is timed.
 *
 * Positions live on the device. pos is read by the kernel, not the host: a
 * captured decode step is replayed at every position with the same launch
 * arguments, so a kernel whose grid or arguments depend on the position
 * gives wrong results from the second replay on. Size grids for P (the
 * cache's positions) and stop early on the device. start_pos is the value
 * pos held when stepbench made the call, for checks only: stale in a replay.
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
 * the shapes only. stepbench allocates it outside captures and passes it as
 * call->workspace (256-byte aligned, contents undefined, not preserved
 * between calls).
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
#define STEPBENCH_OP_ABI_VERSION ((1u << 16) | 0u)
#define STEPBENCH_OP_ABI_MAJOR(v) ((v) >> 16)

/* DLPack's values (DLDeviceType, DLDataTypeCode). */
enum { STEPBENCH_DEVICE_CUDA = 2 };
enum { STEPBENCH_DTYPE_INT = 0, STEPBENCH_DTYPE_UINT = 1, STEPBENCH_DTYPE_FLOAT = 2, STEPBENCH_DTYPE_BFLOAT = 4 };

typedef struct {
    int32_t device_type; /* STEPBENCH_DEVICE_CUDA */
    int32_t device_id;   /* CUDA ordinal */
} stepbench_device;

typedef struct {
    uint8_t code;   /* STEPBENCH_DTYPE_* */
    uint8_t bits;   /* 16 for bf16, 32 for f32 and int32 */
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

#define STEPBENCH_OP_MAX_TENSORS 8

typedef struct {
    uint32_t abi_version;    /* STEPBENCH_OP_ABI_VERSION of stepbench */
    uint32_t struct_bytes;   /* sizeof(stepbench_op_call) of stepbench */
    const char *op;          /* "attn_decode", ... */
    int32_t num_tensors;
    const stepbench_tensor *tensors; /* in the op's order (see above) */
    void *stream;            /* CUstream / cudaStream_t to enqueue on */
    void *workspace;         /* CUdeviceptr of workspace_bytes, or NULL */
    uint64_t workspace_bytes;
    int64_t start_pos;       /* pos when called (rope, attention); stale in a replay */
    float eps;               /* add_rmsnorm */
    int32_t capturing;       /* 1 while stepbench captures a CUDA graph */
    char *error;             /* on failure: a message, NUL-terminated */
    size_t error_bytes;
} stepbench_op_call;

typedef struct {
    uint32_t abi_version; /* the library's STEPBENCH_OP_ABI_VERSION */
    const char *name;     /* describes the implementation, for reports */
    int (*workspace_bytes)(const stepbench_op_call *call, uint64_t *bytes); /* may be NULL: none */
    int (*run)(const stepbench_op_call *call);
} stepbench_op_table;

/* Exported by the library. */
uint32_t stepbench_op_abi_version(void);
int stepbench_op_get(const char *op, stepbench_op_table *table, char *error, size_t error_bytes);

#ifdef __cplusplus
}
#endif

#endif /* STEPBENCH_OP_H */

/* abi.h — the contract between the emulated driver (libcuda.so.1 of this
 * directory) and the kernel modules its NVRTC stand-in builds with g++.
 *
 * A module is a shared object whose only entry point is sbemu_module_init.
 * The driver passes it the table of runtime services (barriers, warp
 * exchange, shared memory) and gets back the list of kernels, each with an
 * invoker that unpacks cuLaunchKernel's parameter array with the kernel's
 * real parameter types.
 *
 * Every emulated GPU thread runs on a fiber stack of SBEMU_STACK_BYTES,
 * aligned to that size; its sbemu_thread record sits at the top of the
 * stack, so a kernel finds "its" threadIdx by masking the stack pointer:
 * no thread-local storage, no call into the driver.
 *
 * Plain C so that both sides (C++ driver, C++ kernel modules) agree on it.
 * No NVIDIA code or header text is used here or anywhere in cuda/emu. */
#ifndef SBEMU_ABI_H
#define SBEMU_ABI_H

#include <stddef.h>

#define SBEMU_ABI_VERSION 4
#define SBEMU_STACK_BYTES ((size_t)256 * 1024)

typedef struct sbemu_dim3 {
    unsigned int x, y, z;
} sbemu_dim3;

/* One emulated thread. 16-byte multiple so the stack below stays aligned. */
typedef struct sbemu_thread {
    sbemu_dim3 thread_idx, block_idx, block_dim, grid_dim;
    unsigned int lane, warp, linear_tid, pad0;
    unsigned long long block_gen; /* changes with every block a fiber runs */
    unsigned char *dyn_shared;    /* extern __shared__ memory of the block */
    void *fiber;                  /* driver-private */
    void *pad1;
} sbemu_thread;

/* Runtime services a kernel module calls (through sbemu_api_ptr). */
typedef struct sbemu_api {
    int abi_version;
    /* __syncthreads(): every live thread of the block at the same call site. */
    void (*syncthreads)(const char *file, int line);
    /* Warp exchange: every lane of mask deposits bytes (<= 256) of data;
     * when all have arrived each gets a pointer to 32 slots of `bytes`
     * bytes (slot i = lane i's data), valid until its next exchange.
     * kind names the operation for diagnostics ("__shfl_xor_sync"). */
    const void *(*warp_exchange)(unsigned int mask, const void *data, unsigned int bytes,
                                 const char *kind, const char *file, int line);
    /* Static __shared__ variable: poisons storage when a new block first
     * reaches the declaration and counts its bytes against the block's limit. */
    void (*shared_acquire)(void *storage, unsigned long long *gen, size_t bytes,
                           const char *name, const char *file, int line);
    /* __trap(), a failed assert(): stops the launch with a message. */
    void (*trap)(int code, const char *file, int line, const char *what);
    /* cp.async: the copy is queued per thread and done only when a
     * cp.async.wait_group lets it complete, so reading the destination
     * before waiting reads what was there before (poison, or a stale tile). */
    void (*cp_async)(void *dst, const void *src, unsigned int bytes);
    void (*cp_async_commit)(void);
    void (*cp_async_wait)(int pending_groups_allowed);
    /* smem_retire(): the kernel says bytes of shared memory at p are dead
     * until rewritten (a consumed tile of a double buffer): the block's
     * first call per barrier phase fills them with a NaN pattern, so that a
     * read of the stale tile (a row not refilled, a refill not waited for)
     * shows in the output. */
    void (*smem_retire)(void *p, unsigned int bytes);
    /* access(): one load or store of a kernel built for the access counters
     * (STEPBENCH_EMU_COUNTERS): its address, size, direction and code site. */
    void (*access)(const void *addr, unsigned int bytes, int is_write, const void *site);
    /* griddepcontrol.wait and griddepcontrol.launch_dependents (programmatic
     * dependent launch): the calling thread has waited for the grids its
     * launch depends on / lets the next programmatic launch begin. */
    void (*pdl_wait)(void);
    void (*pdl_launch_dependents)(void);
} sbemu_api;

typedef void (*sbemu_invoker)(void *fn, void *const *params);

typedef struct sbemu_kernel_desc {
    const char *name;
    void *fn;
    sbemu_invoker invoke;
    int num_params;
    const unsigned int *param_sizes;   /* num_params entries */
    const unsigned int *param_aligns;  /* num_params entries */
    const char *param_names;           /* comma-separated, for diagnostics */
    int max_threads;                   /* __launch_bounds__, 0 when none */
} sbemu_kernel_desc;

typedef struct sbemu_module_desc {
    int abi_version;
    int arch; /* 80, 90: what the module was compiled for */
    int num_kernels;
    const sbemu_kernel_desc *kernels;
} sbemu_module_desc;

typedef const sbemu_module_desc *(*sbemu_module_init_fn)(const sbemu_api *api);

#endif

// The client side of NVTX (NVIDIA Tools Extension) v3, declared from the
// documented injection protocol: no NVIDIA header is included. A profiler
// (Nsight Systems, Nsight Compute, or the emulator's recorder) names its
// injection library in NVTX_INJECTION64_PATH; the client dlopens it, calls
// its InitializeInjectionNvtx2 with a function that hands out the client's
// export tables, and the tool writes its own functions into the client's
// per-module function tables. Until then (and without a tool) every slot is
// NULL and a range costs one pointer test.
#ifndef STEPBENCH_CUDA_NVTX_H
#define STEPBENCH_CUDA_NVTX_H

#include <stddef.h>

// sb_nvtx_inject loads the tool at path through the injection protocol.
// 1 when the tool initialised; else 0 with the reason in err. Once a tool
// is attached, later calls return 1 without loading anything.
int sb_nvtx_inject(const char *path, char *err, size_t err_len);

// sb_nvtx_use_library takes nvtxRangePushA, nvtxRangePop and nvtxMarkA from
// an NVTX v1/v2 library (libnvToolsExt.so.1, which loads tools itself).
// 1 when it has all three; else 0 with the reason in err.
int sb_nvtx_use_library(const char *soname, char *err, size_t err_len);

// sb_nvtx_attached is 1 when pushes reach a tool or library.
int sb_nvtx_attached(void);

// The three calls stepbench makes; each is a no-op when its slot is empty.
int sb_nvtx_push(const char *message);
int sb_nvtx_pop(void);
void sb_nvtx_mark(const char *message);

#endif

// Our own declarations of the few CUDA driver, NVRTC and cuBLAS types the
// package needs, and C trampolines that call a dlsym'd function pointer with
// its real signature. No NVIDIA header is included: every type below is
// declared from the documented ABI (handles are opaque pointers, enums are
// int, CUdeviceptr is 64-bit).
#ifndef STEPBENCH_CUDA_SHIM_H
#define STEPBENCH_CUDA_SHIM_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUgraph;
typedef void *CUgraphExec;

typedef int nvrtcResult;
typedef void *nvrtcProgram;

typedef int cublasStatus_t;
typedef void *cublasHandle_t;

// Dynamic loading. sb_dlopen copies dlerror's text into err on failure so
// that the message is read on the same OS thread that produced it.
void *sb_dlopen(const char *path, int global, char *err, size_t err_len);
void *sb_dlsym(void *handle, const char *name);
int sb_dlclose(void *handle);
// sb_dlpath is the file the loader actually opened for handle (glibc's
// link map name), or NULL; the string belongs to the loader.
const char *sb_dlpath(void *handle);

// sbemu_describe, exported only by stepbench's emulated CUDA libraries.
const char *sb_describe(void *fn);
// sbemu_error_detail(code): the emulated driver's message for the calling
// thread's last failure with that code ("" when it has none).
const char *sb_error_detail(void *fn, int code);
// sbemu_name_allocation(ptr, name): labels an allocation for the emulator's messages.
void sb_name_allocation(void *fn, CUdeviceptr ptr, const char *name);

// CUDA driver trampolines: fn is the dlsym'd symbol named in the comment.
CUresult sb_cuInit(void *fn, unsigned int flags);
CUresult sb_cuDriverGetVersion(void *fn, int *version);
CUresult sb_cuGetErrorName(void *fn, CUresult code, const char **name);
CUresult sb_cuDeviceGetCount(void *fn, int *count);
CUresult sb_cuDeviceGet(void *fn, CUdevice *dev, int ordinal);
CUresult sb_cuDeviceGetName(void *fn, char *name, int len, CUdevice dev);
CUresult sb_cuDeviceGetUuid(void *fn, unsigned char *uuid16, CUdevice dev);
CUresult sb_cuDeviceTotalMem(void *fn, size_t *bytes, CUdevice dev);
CUresult sb_cuDeviceGetAttribute(void *fn, int *value, int attrib, CUdevice dev);
CUresult sb_cuDevicePrimaryCtxRetain(void *fn, CUcontext *ctx, CUdevice dev);
CUresult sb_cuDevicePrimaryCtxRelease(void *fn, CUdevice dev);
CUresult sb_cuCtxSetCurrent(void *fn, CUcontext ctx);
CUresult sb_cuMemGetInfo(void *fn, size_t *free_bytes, size_t *total_bytes);
CUresult sb_cuMemAlloc(void *fn, CUdeviceptr *ptr, size_t bytes);
CUresult sb_cuMemFree(void *fn, CUdeviceptr ptr);
CUresult sb_cuMemAllocHost(void *fn, void **ptr, size_t bytes);
CUresult sb_cuMemFreeHost(void *fn, void *ptr);
CUresult sb_cuStreamCreate(void *fn, CUstream *stream, unsigned int flags);
CUresult sb_cuStreamSynchronize(void *fn, CUstream stream);
CUresult sb_cuStreamDestroy(void *fn, CUstream stream);
CUresult sb_cuMemcpyHtoDAsync(void *fn, CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
CUresult sb_cuMemcpyDtoHAsync(void *fn, void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult sb_cuMemcpyDtoDAsync(void *fn, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult sb_cuMemsetD8Async(void *fn, CUdeviceptr dst, unsigned char value, size_t count, CUstream stream);
CUresult sb_cuMemsetD16Async(void *fn, CUdeviceptr dst, unsigned short value, size_t count, CUstream stream);
CUresult sb_cuMemsetD32Async(void *fn, CUdeviceptr dst, unsigned int value, size_t count, CUstream stream);
CUresult sb_cuEventCreate(void *fn, CUevent *event, unsigned int flags);
CUresult sb_cuEventRecord(void *fn, CUevent event, CUstream stream);
CUresult sb_cuEventSynchronize(void *fn, CUevent event);
CUresult sb_cuEventDestroy(void *fn, CUevent event);
CUresult sb_cuEventElapsedTime(void *fn, float *ms, CUevent start, CUevent end);
CUresult sb_cuModuleLoadData(void *fn, CUmodule *module, const void *image);
CUresult sb_cuModuleGetFunction(void *fn, CUfunction *function, CUmodule module, const char *name);
CUresult sb_cuModuleUnload(void *fn, CUmodule module);
CUresult sb_cuFuncSetAttribute(void *fn, CUfunction function, int attrib, int value);
CUresult sb_cuFuncGetAttribute(void *fn, int *value, int attrib, CUfunction function);
CUresult sb_cuLaunchKernel(void *fn, CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                           CUstream stream, void **params);
// sb_cuLaunchKernelPDL calls cuLaunchKernelEx with one launch attribute,
// programmatic stream serialization (CUlaunchAttributeID 6) allowed: the
// kernel may begin before its predecessor on the stream has finished, and
// its griddepcontrol.wait waits for it.
CUresult sb_cuLaunchKernelPDL(void *fn, CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                              CUstream stream, void **params);
CUresult sb_cuStreamBeginCapture(void *fn, CUstream stream, int mode);
CUresult sb_cuStreamEndCapture(void *fn, CUstream stream, CUgraph *graph);
CUresult sb_cuGraphInstantiateWithFlags(void *fn, CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult sb_cuGraphDestroy(void *fn, CUgraph graph);
CUresult sb_cuGraphGetNodes(void *fn, CUgraph graph, size_t *count);
CUresult sb_cuGraphLaunch(void *fn, CUgraphExec exec, CUstream stream);
CUresult sb_cuGraphExecDestroy(void *fn, CUgraphExec exec);

// NVRTC trampolines.
const char *sb_nvrtcGetErrorString(void *fn, nvrtcResult code);
nvrtcResult sb_nvrtcVersion(void *fn, int *major, int *minor);
nvrtcResult sb_nvrtcGetNumSupportedArchs(void *fn, int *count);
nvrtcResult sb_nvrtcGetSupportedArchs(void *fn, int *archs);
nvrtcResult sb_nvrtcCreateProgram(void *fn, nvrtcProgram *prog, const char *src, const char *name);
nvrtcResult sb_nvrtcCompileProgram(void *fn, nvrtcProgram prog, int num_options, const char *const *options);
nvrtcResult sb_nvrtcGetSize(void *fn, nvrtcProgram prog, size_t *size);
nvrtcResult sb_nvrtcGetBytes(void *fn, nvrtcProgram prog, char *out);
nvrtcResult sb_nvrtcDestroyProgram(void *fn, nvrtcProgram *prog);

// cuBLAS trampolines.
cublasStatus_t sb_cublasGetProperty(void *fn, int property, int *value);
cublasStatus_t sb_cublasCreate(void *fn, cublasHandle_t *handle);
cublasStatus_t sb_cublasDestroy(void *fn, cublasHandle_t handle);
cublasStatus_t sb_cublasSetStream(void *fn, cublasHandle_t handle, CUstream stream);
cublasStatus_t sb_cublasSetWorkspace(void *fn, cublasHandle_t handle, CUdeviceptr workspace, size_t bytes);
cublasStatus_t sb_cublasGemmEx(void *fn, cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                               const float *alpha, CUdeviceptr a, int a_type, int lda, CUdeviceptr b,
                               int b_type, int ldb, const float *beta, CUdeviceptr c, int c_type, int ldc,
                               int compute_type, int algo);

// cuBLASLt trampolines (libcublasLt.so.*). Descriptors are opaque pointers;
// cublasLtMatmulHeuristicResult_t is declared from its documented fields:
// the algorithm (cublasLtMatmulAlgo_t, 8 uint64), the workspace it needs,
// its state and waves count, four reserved ints.
typedef void *cublasLtHandle_t;
typedef void *cublasLtMatmulDesc_t;
typedef void *cublasLtMatrixLayout_t;
typedef void *cublasLtMatmulPreference_t;
typedef struct {
	unsigned long long algo[8];
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} sb_lt_heuristic;
cublasStatus_t sb_cublasLtCreate(void *fn, cublasLtHandle_t *handle);
cublasStatus_t sb_cublasLtDestroy(void *fn, cublasLtHandle_t handle);
size_t sb_cublasLtGetVersion(void *fn);
cublasStatus_t sb_cublasLtMatmulDescCreate(void *fn, cublasLtMatmulDesc_t *desc, int compute_type, int scale_type);
cublasStatus_t sb_cublasLtMatmulDescDestroy(void *fn, cublasLtMatmulDesc_t desc);
cublasStatus_t sb_cublasLtMatmulDescSetAttribute(void *fn, cublasLtMatmulDesc_t desc, int attr, const void *buf,
                                                 size_t size);
cublasStatus_t sb_cublasLtMatrixLayoutCreate(void *fn, cublasLtMatrixLayout_t *layout, int type, unsigned long long rows,
                                             unsigned long long cols, long long ld);
cublasStatus_t sb_cublasLtMatrixLayoutDestroy(void *fn, cublasLtMatrixLayout_t layout);
cublasStatus_t sb_cublasLtMatmulPreferenceCreate(void *fn, cublasLtMatmulPreference_t *pref);
cublasStatus_t sb_cublasLtMatmulPreferenceDestroy(void *fn, cublasLtMatmulPreference_t pref);
cublasStatus_t sb_cublasLtMatmulPreferenceSetAttribute(void *fn, cublasLtMatmulPreference_t pref, int attr,
                                                       const void *buf, size_t size);
cublasStatus_t sb_cublasLtMatmulAlgoGetHeuristic(void *fn, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                 cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                 cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                 cublasLtMatmulPreference_t pref, int requested,
                                                 sb_lt_heuristic *results, int *returned);
cublasStatus_t sb_cublasLtMatmul(void *fn, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const float *alpha,
                                 CUdeviceptr a, cublasLtMatrixLayout_t a_desc, CUdeviceptr b,
                                 cublasLtMatrixLayout_t b_desc, const float *beta, CUdeviceptr c,
                                 cublasLtMatrixLayout_t c_desc, CUdeviceptr d, cublasLtMatrixLayout_t d_desc,
                                 const sb_lt_heuristic *algo, CUdeviceptr workspace, size_t workspace_bytes,
                                 CUstream stream);

// NCCL trampolines (libnccl.so.2). ncclUniqueId is a struct of 128 bytes
// passed by value: the trampoline takes a pointer to it.
typedef int ncclResult_t;
typedef void *ncclComm_t;
ncclResult_t sb_ncclGetVersion(void *fn, int *version);
const char *sb_ncclGetErrorString(void *fn, ncclResult_t result);
const char *sb_ncclGetLastError(void *fn, ncclComm_t comm);
ncclResult_t sb_ncclGetUniqueId(void *fn, void *id128);
ncclResult_t sb_ncclCommInitRank(void *fn, ncclComm_t *comm, int nranks, const void *id128, int rank);
ncclResult_t sb_ncclCommDestroy(void *fn, ncclComm_t comm);
ncclResult_t sb_ncclCommAbort(void *fn, ncclComm_t comm);
ncclResult_t sb_ncclCommGetAsyncError(void *fn, ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t sb_ncclGroup(void *fn);
ncclResult_t sb_ncclAllReduce(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype, int op,
                              ncclComm_t comm, CUstream stream);
ncclResult_t sb_ncclAllGather(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype,
                              ncclComm_t comm, CUstream stream);
ncclResult_t sb_ncclBroadcast(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype, int root,
                              ncclComm_t comm, CUstream stream);

#endif

// Trampolines: each casts a dlsym'd pointer to the function's real type and
// calls it. Kept in C because Go cannot call a C function pointer directly.
#define _GNU_SOURCE // dlinfo
#include "shim.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

void *sb_dlopen(const char *path, int global, char *err, size_t err_len) {
	void *handle = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
	if (handle == NULL && err_len > 0) {
		const char *msg = dlerror();
		if (msg == NULL) {
			msg = "unknown dlopen error";
		}
		strncpy(err, msg, err_len - 1);
		err[err_len - 1] = '\0';
	}
	return handle;
}

void *sb_dlsym(void *handle, const char *name) { return dlsym(handle, name); }

int sb_dlclose(void *handle) { return dlclose(handle); }

const char *sb_dlpath(void *handle) {
	struct link_map *map = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
		return NULL;
	}
	return map->l_name;
}

const char *sb_describe(void *fn) { return ((const char *(*)(void))fn)(); }
const char *sb_error_detail(void *fn, int code) { return ((const char *(*)(int))fn)(code); }
void sb_name_allocation(void *fn, CUdeviceptr ptr, const char *name) {
	((void (*)(CUdeviceptr, const char *))fn)(ptr, name);
}

// Driver API.
CUresult sb_cuInit(void *fn, unsigned int flags) { return ((CUresult(*)(unsigned int))fn)(flags); }
CUresult sb_cuDriverGetVersion(void *fn, int *version) { return ((CUresult(*)(int *))fn)(version); }
CUresult sb_cuGetErrorName(void *fn, CUresult code, const char **name) {
	return ((CUresult(*)(CUresult, const char **))fn)(code, name);
}
CUresult sb_cuDeviceGetCount(void *fn, int *count) { return ((CUresult(*)(int *))fn)(count); }
CUresult sb_cuDeviceGet(void *fn, CUdevice *dev, int ordinal) {
	return ((CUresult(*)(CUdevice *, int))fn)(dev, ordinal);
}
CUresult sb_cuDeviceGetName(void *fn, char *name, int len, CUdevice dev) {
	return ((CUresult(*)(char *, int, CUdevice))fn)(name, len, dev);
}
// CUuuid is a struct of 16 chars; a pointer to it is a pointer to 16 bytes.
CUresult sb_cuDeviceGetUuid(void *fn, unsigned char *uuid16, CUdevice dev) {
	return ((CUresult(*)(unsigned char *, CUdevice))fn)(uuid16, dev);
}
CUresult sb_cuDeviceTotalMem(void *fn, size_t *bytes, CUdevice dev) {
	return ((CUresult(*)(size_t *, CUdevice))fn)(bytes, dev);
}
CUresult sb_cuDeviceGetAttribute(void *fn, int *value, int attrib, CUdevice dev) {
	return ((CUresult(*)(int *, int, CUdevice))fn)(value, attrib, dev);
}
CUresult sb_cuDevicePrimaryCtxRetain(void *fn, CUcontext *ctx, CUdevice dev) {
	return ((CUresult(*)(CUcontext *, CUdevice))fn)(ctx, dev);
}
CUresult sb_cuDevicePrimaryCtxRelease(void *fn, CUdevice dev) { return ((CUresult(*)(CUdevice))fn)(dev); }
CUresult sb_cuCtxSetCurrent(void *fn, CUcontext ctx) { return ((CUresult(*)(CUcontext))fn)(ctx); }
CUresult sb_cuMemGetInfo(void *fn, size_t *free_bytes, size_t *total_bytes) {
	return ((CUresult(*)(size_t *, size_t *))fn)(free_bytes, total_bytes);
}
CUresult sb_cuMemAlloc(void *fn, CUdeviceptr *ptr, size_t bytes) {
	return ((CUresult(*)(CUdeviceptr *, size_t))fn)(ptr, bytes);
}
CUresult sb_cuMemFree(void *fn, CUdeviceptr ptr) { return ((CUresult(*)(CUdeviceptr))fn)(ptr); }
CUresult sb_cuMemAllocHost(void *fn, void **ptr, size_t bytes) {
	return ((CUresult(*)(void **, size_t))fn)(ptr, bytes);
}
CUresult sb_cuMemFreeHost(void *fn, void *ptr) { return ((CUresult(*)(void *))fn)(ptr); }
CUresult sb_cuStreamCreate(void *fn, CUstream *stream, unsigned int flags) {
	return ((CUresult(*)(CUstream *, unsigned int))fn)(stream, flags);
}
CUresult sb_cuStreamSynchronize(void *fn, CUstream stream) { return ((CUresult(*)(CUstream))fn)(stream); }
CUresult sb_cuStreamDestroy(void *fn, CUstream stream) { return ((CUresult(*)(CUstream))fn)(stream); }
CUresult sb_cuMemcpyHtoDAsync(void *fn, CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
	return ((CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))fn)(dst, src, bytes, stream);
}
CUresult sb_cuMemcpyDtoHAsync(void *fn, void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
	return ((CUresult(*)(void *, CUdeviceptr, size_t, CUstream))fn)(dst, src, bytes, stream);
}
CUresult sb_cuMemcpyDtoDAsync(void *fn, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
	return ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))fn)(dst, src, bytes, stream);
}
CUresult sb_cuMemsetD8Async(void *fn, CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
	return ((CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream))fn)(dst, value, count, stream);
}
CUresult sb_cuMemsetD16Async(void *fn, CUdeviceptr dst, unsigned short value, size_t count, CUstream stream) {
	return ((CUresult(*)(CUdeviceptr, unsigned short, size_t, CUstream))fn)(dst, value, count, stream);
}
CUresult sb_cuMemsetD32Async(void *fn, CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
	return ((CUresult(*)(CUdeviceptr, unsigned int, size_t, CUstream))fn)(dst, value, count, stream);
}
CUresult sb_cuEventCreate(void *fn, CUevent *event, unsigned int flags) {
	return ((CUresult(*)(CUevent *, unsigned int))fn)(event, flags);
}
CUresult sb_cuEventRecord(void *fn, CUevent event, CUstream stream) {
	return ((CUresult(*)(CUevent, CUstream))fn)(event, stream);
}
CUresult sb_cuEventSynchronize(void *fn, CUevent event) { return ((CUresult(*)(CUevent))fn)(event); }
CUresult sb_cuEventDestroy(void *fn, CUevent event) { return ((CUresult(*)(CUevent))fn)(event); }
CUresult sb_cuEventElapsedTime(void *fn, float *ms, CUevent start, CUevent end) {
	return ((CUresult(*)(float *, CUevent, CUevent))fn)(ms, start, end);
}
CUresult sb_cuModuleLoadData(void *fn, CUmodule *module, const void *image) {
	return ((CUresult(*)(CUmodule *, const void *))fn)(module, image);
}
CUresult sb_cuModuleGetFunction(void *fn, CUfunction *function, CUmodule module, const char *name) {
	return ((CUresult(*)(CUfunction *, CUmodule, const char *))fn)(function, module, name);
}
CUresult sb_cuModuleUnload(void *fn, CUmodule module) { return ((CUresult(*)(CUmodule))fn)(module); }
CUresult sb_cuFuncSetAttribute(void *fn, CUfunction function, int attrib, int value) {
	return ((CUresult(*)(CUfunction, int, int))fn)(function, attrib, value);
}
CUresult sb_cuFuncGetAttribute(void *fn, int *value, int attrib, CUfunction function) {
	return ((CUresult(*)(int *, int, CUfunction))fn)(value, attrib, function);
}
CUresult sb_cuLaunchKernel(void *fn, CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                           CUstream stream, void **params) {
	return ((CUresult(*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
	                     unsigned int, unsigned int, CUstream, void **, void **))fn)(
	    function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, NULL);
}
// cuLaunchKernelEx's arguments, declared from the driver API's documented
// layout: an attribute is its id (an int, padded to 8 bytes) and a 64-byte
// value union; the configuration is the grid and block dimensions, the
// dynamic shared bytes, the stream, then the attribute array and its length.
typedef struct {
	int id;
	char pad[4];
	unsigned long long value[8];
} sb_launch_attribute;
typedef struct {
	unsigned int grid[3], block[3], shared_bytes;
	CUstream stream;
	sb_launch_attribute *attrs;
	unsigned int num_attrs;
} sb_launch_config;
_Static_assert(sizeof(sb_launch_attribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(sb_launch_config, stream) == 32 && offsetof(sb_launch_config, attrs) == 40 &&
                   offsetof(sb_launch_config, num_attrs) == 48 && sizeof(sb_launch_config) == 56,
               "CUlaunchConfig's layout");
enum { sb_launch_attr_programmatic_stream_serialization = 6 };

CUresult sb_cuLaunchKernelPDL(void *fn, CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                              CUstream stream, void **params) {
	sb_launch_attribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = sb_launch_attr_programmatic_stream_serialization;
	const int allowed = 1;  // the value's first member is an int
	memcpy(attr.value, &allowed, sizeof allowed);
	sb_launch_config cfg = {{gx, gy, gz}, {bx, by, bz}, shared_bytes, stream, &attr, 1};
	return ((CUresult(*)(const sb_launch_config *, CUfunction, void **, void **))fn)(&cfg, function, params, NULL);
}
CUresult sb_cuStreamBeginCapture(void *fn, CUstream stream, int mode) {
	return ((CUresult(*)(CUstream, int))fn)(stream, mode);
}
CUresult sb_cuStreamEndCapture(void *fn, CUstream stream, CUgraph *graph) {
	return ((CUresult(*)(CUstream, CUgraph *))fn)(stream, graph);
}
CUresult sb_cuGraphInstantiateWithFlags(void *fn, CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
	return ((CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))fn)(exec, graph, flags);
}
CUresult sb_cuGraphDestroy(void *fn, CUgraph graph) { return ((CUresult(*)(CUgraph))fn)(graph); }
/* cuGraphGetNodes(graph, NULL, &count) only counts. */
CUresult sb_cuGraphGetNodes(void *fn, CUgraph graph, size_t *count) {
    return ((CUresult(*)(CUgraph, void *, size_t *))fn)(graph, NULL, count);
}
CUresult sb_cuGraphLaunch(void *fn, CUgraphExec exec, CUstream stream) {
	return ((CUresult(*)(CUgraphExec, CUstream))fn)(exec, stream);
}
CUresult sb_cuGraphExecDestroy(void *fn, CUgraphExec exec) { return ((CUresult(*)(CUgraphExec))fn)(exec); }

// NVRTC.
const char *sb_nvrtcGetErrorString(void *fn, nvrtcResult code) {
	return ((const char *(*)(nvrtcResult))fn)(code);
}
nvrtcResult sb_nvrtcVersion(void *fn, int *major, int *minor) {
	return ((nvrtcResult(*)(int *, int *))fn)(major, minor);
}
nvrtcResult sb_nvrtcGetNumSupportedArchs(void *fn, int *count) { return ((nvrtcResult(*)(int *))fn)(count); }
nvrtcResult sb_nvrtcGetSupportedArchs(void *fn, int *archs) { return ((nvrtcResult(*)(int *))fn)(archs); }
nvrtcResult sb_nvrtcCreateProgram(void *fn, nvrtcProgram *prog, const char *src, const char *name) {
	return ((nvrtcResult(*)(nvrtcProgram *, const char *, const char *, int, const char *const *,
	                        const char *const *))fn)(prog, src, name, 0, NULL, NULL);
}
nvrtcResult sb_nvrtcCompileProgram(void *fn, nvrtcProgram prog, int num_options, const char *const *options) {
	return ((nvrtcResult(*)(nvrtcProgram, int, const char *const *))fn)(prog, num_options, options);
}
// Used for nvrtcGetProgramLogSize and nvrtcGetCUBINSize (same signature).
nvrtcResult sb_nvrtcGetSize(void *fn, nvrtcProgram prog, size_t *size) {
	return ((nvrtcResult(*)(nvrtcProgram, size_t *))fn)(prog, size);
}
// Used for nvrtcGetProgramLog and nvrtcGetCUBIN (same signature).
nvrtcResult sb_nvrtcGetBytes(void *fn, nvrtcProgram prog, char *out) {
	return ((nvrtcResult(*)(nvrtcProgram, char *))fn)(prog, out);
}
nvrtcResult sb_nvrtcDestroyProgram(void *fn, nvrtcProgram *prog) { return ((nvrtcResult(*)(nvrtcProgram *))fn)(prog); }

// cuBLAS.
cublasStatus_t sb_cublasGetProperty(void *fn, int property, int *value) {
	return ((cublasStatus_t(*)(int, int *))fn)(property, value);
}
cublasStatus_t sb_cublasCreate(void *fn, cublasHandle_t *handle) {
	return ((cublasStatus_t(*)(cublasHandle_t *))fn)(handle);
}
cublasStatus_t sb_cublasDestroy(void *fn, cublasHandle_t handle) { return ((cublasStatus_t(*)(cublasHandle_t))fn)(handle); }
cublasStatus_t sb_cublasSetStream(void *fn, cublasHandle_t handle, CUstream stream) {
	return ((cublasStatus_t(*)(cublasHandle_t, CUstream))fn)(handle, stream);
}
cublasStatus_t sb_cublasSetWorkspace(void *fn, cublasHandle_t handle, CUdeviceptr workspace, size_t bytes) {
	return ((cublasStatus_t(*)(cublasHandle_t, void *, size_t))fn)(handle, (void *)workspace, bytes);
}
cublasStatus_t sb_cublasGemmEx(void *fn, cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                               const float *alpha, CUdeviceptr a, int a_type, int lda, CUdeviceptr b,
                               int b_type, int ldb, const float *beta, CUdeviceptr c, int c_type, int ldc,
                               int compute_type, int algo) {
	return ((cublasStatus_t(*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,
	                           const void *, int, int, const void *, void *, int, int, int, int))fn)(
	    handle, transa, transb, m, n, k, alpha, (const void *)a, a_type, lda, (const void *)b, b_type, ldb, beta,
	    (void *)c, c_type, ldc,
	    compute_type, algo);
}

// cuBLASLt.
cublasStatus_t sb_cublasLtCreate(void *fn, cublasLtHandle_t *handle) {
	return ((cublasStatus_t(*)(cublasLtHandle_t *))fn)(handle);
}
cublasStatus_t sb_cublasLtDestroy(void *fn, cublasLtHandle_t handle) {
	return ((cublasStatus_t(*)(cublasLtHandle_t))fn)(handle);
}
size_t sb_cublasLtGetVersion(void *fn) { return ((size_t(*)(void))fn)(); }
cublasStatus_t sb_cublasLtMatmulDescCreate(void *fn, cublasLtMatmulDesc_t *desc, int compute_type, int scale_type) {
	return ((cublasStatus_t(*)(cublasLtMatmulDesc_t *, int, int))fn)(desc, compute_type, scale_type);
}
cublasStatus_t sb_cublasLtMatmulDescDestroy(void *fn, cublasLtMatmulDesc_t desc) {
	return ((cublasStatus_t(*)(cublasLtMatmulDesc_t))fn)(desc);
}
cublasStatus_t sb_cublasLtMatmulDescSetAttribute(void *fn, cublasLtMatmulDesc_t desc, int attr, const void *buf,
                                                 size_t size) {
	return ((cublasStatus_t(*)(cublasLtMatmulDesc_t, int, const void *, size_t))fn)(desc, attr, buf, size);
}
cublasStatus_t sb_cublasLtMatrixLayoutCreate(void *fn, cublasLtMatrixLayout_t *layout, int type, unsigned long long rows,
                                             unsigned long long cols, long long ld) {
	return ((cublasStatus_t(*)(cublasLtMatrixLayout_t *, int, unsigned long long, unsigned long long, long long))fn)(
	    layout, type, rows, cols, ld);
}
cublasStatus_t sb_cublasLtMatrixLayoutDestroy(void *fn, cublasLtMatrixLayout_t layout) {
	return ((cublasStatus_t(*)(cublasLtMatrixLayout_t))fn)(layout);
}
cublasStatus_t sb_cublasLtMatmulPreferenceCreate(void *fn, cublasLtMatmulPreference_t *pref) {
	return ((cublasStatus_t(*)(cublasLtMatmulPreference_t *))fn)(pref);
}
cublasStatus_t sb_cublasLtMatmulPreferenceDestroy(void *fn, cublasLtMatmulPreference_t pref) {
	return ((cublasStatus_t(*)(cublasLtMatmulPreference_t))fn)(pref);
}
cublasStatus_t sb_cublasLtMatmulPreferenceSetAttribute(void *fn, cublasLtMatmulPreference_t pref, int attr,
                                                       const void *buf, size_t size) {
	return ((cublasStatus_t(*)(cublasLtMatmulPreference_t, int, const void *, size_t))fn)(pref, attr, buf, size);
}
cublasStatus_t sb_cublasLtMatmulAlgoGetHeuristic(void *fn, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                 cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                 cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                 cublasLtMatmulPreference_t pref, int requested,
                                                 sb_lt_heuristic *results, int *returned) {
	return ((cublasStatus_t(*)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
	                           cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
	                           sb_lt_heuristic *, int *))fn)(handle, desc, a, b, c, d, pref, requested, results,
	                                                         returned);
}
cublasStatus_t sb_cublasLtMatmul(void *fn, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const float *alpha,
                                 CUdeviceptr a, cublasLtMatrixLayout_t a_desc, CUdeviceptr b,
                                 cublasLtMatrixLayout_t b_desc, const float *beta, CUdeviceptr c,
                                 cublasLtMatrixLayout_t c_desc, CUdeviceptr d, cublasLtMatrixLayout_t d_desc,
                                 const sb_lt_heuristic *algo, CUdeviceptr workspace, size_t workspace_bytes,
                                 CUstream stream) {
	// algo points at the heuristic result's first member, the cublasLtMatmulAlgo_t.
	return ((cublasStatus_t(*)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
	                           cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *, const void *,
	                           cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const void *, void *, size_t,
	                           CUstream))fn)(handle, desc, alpha, (const void *)a, a_desc, (const void *)b, b_desc,
	                                         beta, (const void *)c, c_desc, (void *)d, d_desc, algo->algo,
	                                         (void *)workspace, workspace_bytes, stream);
}

// NCCL.
typedef struct {
	char internal[128];
} sb_ncclUniqueId;
ncclResult_t sb_ncclGetVersion(void *fn, int *version) { return ((ncclResult_t(*)(int *))fn)(version); }
const char *sb_ncclGetErrorString(void *fn, ncclResult_t result) {
	return ((const char *(*)(ncclResult_t))fn)(result);
}
const char *sb_ncclGetLastError(void *fn, ncclComm_t comm) { return ((const char *(*)(ncclComm_t))fn)(comm); }
ncclResult_t sb_ncclGetUniqueId(void *fn, void *id128) { return ((ncclResult_t(*)(sb_ncclUniqueId *))fn)(id128); }
ncclResult_t sb_ncclCommInitRank(void *fn, ncclComm_t *comm, int nranks, const void *id128, int rank) {
	sb_ncclUniqueId id;
	memcpy(&id, id128, sizeof id);
	return ((ncclResult_t(*)(ncclComm_t *, int, sb_ncclUniqueId, int))fn)(comm, nranks, id, rank);
}
ncclResult_t sb_ncclCommDestroy(void *fn, ncclComm_t comm) { return ((ncclResult_t(*)(ncclComm_t))fn)(comm); }
ncclResult_t sb_ncclCommAbort(void *fn, ncclComm_t comm) { return ((ncclResult_t(*)(ncclComm_t))fn)(comm); }
ncclResult_t sb_ncclCommGetAsyncError(void *fn, ncclComm_t comm, ncclResult_t *async_error) {
	return ((ncclResult_t(*)(ncclComm_t, ncclResult_t *))fn)(comm, async_error);
}
ncclResult_t sb_ncclGroup(void *fn) { return ((ncclResult_t(*)(void))fn)(); }
ncclResult_t sb_ncclAllReduce(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype, int op,
                              ncclComm_t comm, CUstream stream) {
	return ((ncclResult_t(*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))fn)(
	    (const void *)send, (void *)recv, count, datatype, op, comm, stream);
}
ncclResult_t sb_ncclAllGather(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype,
                              ncclComm_t comm, CUstream stream) {
	return ((ncclResult_t(*)(const void *, void *, size_t, int, ncclComm_t, CUstream))fn)(
	    (const void *)send, (void *)recv, count, datatype, comm, stream);
}
ncclResult_t sb_ncclBroadcast(void *fn, CUdeviceptr send, CUdeviceptr recv, size_t count, int datatype, int root,
                              ncclComm_t comm, CUstream stream) {
	return ((ncclResult_t(*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))fn)(
	    (const void *)send, (void *)recv, count, datatype, root, comm, stream);
}

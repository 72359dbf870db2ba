// A fake libcuda.so.1 for tests without a GPU: enough behaviour to check the
// Go side's symbol lookup, argument passing and error naming. Not NVIDIA code.
//
// Variants, chosen with -D when the test builds it:
//   FAKE_DRIVER_VERSION=N  what cuDriverGetVersion reports (default 12040)
//   FAKE_NO_V1             no cuDeviceGetUuid / cuEventElapsedTime (CUDA 13 may drop them)
//   FAKE_NO_V2             no cuDeviceGetUuid_v2 / cuEventElapsedTime_v2 (drivers before 11.4 / 12.8)
//   FAKE_MIG               the device is a MIG instance: the v1 UUID (the GPU's) differs from v2's
//   FAKE_EMU               exports sbemu_describe, as stepbench's emulated driver does
//   FAKE_LAUNCH_EX         exports cuLaunchKernelEx (CUDA 11.8+), checking its configuration's layout
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#ifndef FAKE_DRIVER_VERSION
#define FAKE_DRIVER_VERSION 12040
#endif

#define STUB(name) CUresult name(void) { return 0; }

static const char *names[] = {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY"};

CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }
CUresult cuDriverGetVersion(int *v) { *v = FAKE_DRIVER_VERSION; return 0; }
CUresult cuGetErrorName(CUresult code, const char **name) {
	if (code < 0 || code > 2) return 1;
	*name = names[code];
	return 0;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? 0 : 1; }
CUresult cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Fake GPU", len); return 0; }

// The instance's (or, without MIG, the GPU's) UUID: bytes 0x00, 0x11, ..., 0xff.
static void instance_uuid(unsigned char *uuid) {
	for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(i * 17);
}
#ifndef FAKE_NO_V2
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev) { instance_uuid(uuid); return 0; }
// Elapsed times differ by name so that the test sees which one was called.
CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) { *ms = 2.0f; return 0; }
#endif
#ifndef FAKE_NO_V1
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev) {
	instance_uuid(uuid);
#ifdef FAKE_MIG
	uuid[15] = 0x01; // the whole GPU's UUID, not the instance's
#endif
	return 0;
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) { *ms = 1.0f; return 0; }
#endif
#ifdef FAKE_EMU
const char *sbemu_describe(void) { return "fake emulated CUDA driver (test)"; }
#endif

CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { *bytes = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	switch (attr) {
	case 13: *v = 1980000; return 0;
	case 16: *v = 132; return 0;
	case 36: *v = 2619000; return 0;
	case 37: *v = 5120; return 0;
	case 38: *v = 50 << 20; return 0;
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
	case 97: *v = 227 << 10; return 0;
	}
	return 1;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
	if (bytes > ((size_t)80 << 30)) return 2;
	*p = 0x10000;
	return 0;
}
// Accepts exactly (DevPtr 0x1000, int32 -5, float32 1.5, uint64 1<<40) on a
// 2x1x1 grid of 128x1x1 blocks with 256 shared bytes.
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
	if (gx != 2 || gy != 1 || gz != 1 || bx != 128 || by != 1 || bz != 1 || shared != 256 || extra != 0) return 1;
	if (*(CUdeviceptr *)params[0] != 0x1000 || *(int *)params[1] != -5 || *(float *)params[2] != 1.5f ||
	    *(unsigned long long *)params[3] != (1ull << 40))
		return 1;
	return 0;
}

#ifdef FAKE_LAUNCH_EX
// Accepts what cuLaunchKernel accepts, given as a CUlaunchConfig (laid out
// here from the driver API's documentation: 7 unsigned ints, the stream at
// byte 32, the attribute array at 40, its length at 48) with exactly one
// attribute: programmatic stream serialization (id 6) allowed (value 1).
typedef struct {
	int id;
	char pad[4];
	union {
		char raw[64];
		int allowed;
	} value;
} fake_attr;
CUresult cuLaunchKernelEx(const unsigned char *cfg, void *f, void **params, void **extra) {
	unsigned dims[7];
	memcpy(dims, cfg, sizeof dims);
	const fake_attr *attrs;
	unsigned n;
	memcpy(&attrs, cfg + 40, sizeof attrs);
	memcpy(&n, cfg + 48, sizeof n);
	if (n != 1 || attrs[0].id != 6 || attrs[0].value.allowed != 1) return 1;
	return cuLaunchKernel(f, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], 0, params, extra);
}
#endif

STUB(cuDevicePrimaryCtxRetain) STUB(cuDevicePrimaryCtxRelease_v2) STUB(cuCtxSetCurrent)
STUB(cuMemGetInfo_v2) STUB(cuMemFree_v2) STUB(cuMemAllocHost_v2) STUB(cuMemFreeHost) STUB(cuStreamCreate)
STUB(cuStreamSynchronize) STUB(cuStreamDestroy_v2) STUB(cuMemcpyHtoDAsync_v2) STUB(cuMemcpyDtoHAsync_v2)
STUB(cuMemcpyDtoDAsync_v2) STUB(cuMemsetD8Async) STUB(cuMemsetD16Async) STUB(cuMemsetD32Async) STUB(cuEventCreate)
STUB(cuEventRecord) STUB(cuEventSynchronize) STUB(cuEventDestroy_v2) STUB(cuModuleLoadData)
STUB(cuModuleGetFunction) STUB(cuModuleUnload) STUB(cuFuncSetAttribute) STUB(cuFuncGetAttribute)
STUB(cuStreamBeginCapture_v2) STUB(cuStreamEndCapture) STUB(cuGraphInstantiateWithFlags) STUB(cuGraphDestroy)
STUB(cuGraphLaunch) STUB(cuGraphExecDestroy)

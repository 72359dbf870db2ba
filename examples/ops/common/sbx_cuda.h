/* sbx_cuda.h — what the example op libraries share: the CUDA driver and
 * NVRTC opened with dlopen (no CUDA header or toolkit needed), and a kernel
 * source compiled for the current device and loaded. Header-only: each
 * library includes it once. The libraries stepbench already loaded are used
 * when there (RTLD_NOLOAD by soname): on the emulated device, build/emu's. */
#ifndef SBX_CUDA_H
#define SBX_CUDA_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few driver and NVRTC declarations needed, from their documented ABI. */
typedef int CUresult;
typedef void *CUmodule, *CUfunction, *CUstream;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef int nvrtcResult;
typedef void *nvrtcProgram;

static struct {
    CUresult (*ctxGetDevice)(CUdevice *);
    CUresult (*deviceGetAttribute)(int *, int, CUdevice);
    CUresult (*moduleLoadData)(CUmodule *, const void *);
    CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
    CUresult (*getErrorName)(CUresult, const char **);
    CUresult (*memAlloc)(CUdeviceptr *, size_t);
    nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*getCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*destroyProgram)(nvrtcProgram *);
    int opened;
} sbx;

/* sbx_open_first dlopens the first of names already loaded, else the first that opens. */
static void *sbx_open_first(const char *const *names) {
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) return h;
    }
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    return NULL;
}

static int sbx_sym(void *lib, void *dst, const char *name, char *err, size_t n) {
    void *p = dlsym(lib, name);
    if (p == NULL) {
        snprintf(err, n, "%s not found (%s)", name, dlerror());
        return 1;
    }
    memcpy(dst, &p, sizeof p);
    return 0;
}

/* sbx_open opens the driver and NVRTC once. */
static int sbx_open(char *err, size_t n) {
    static const char *const cuda_names[] = {"libcuda.so.1", NULL};
    static const char *const nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", NULL};
    if (sbx.opened) return 0;
    void *cuda = sbx_open_first(cuda_names), *nvrtc = sbx_open_first(nvrtc_names);
    if (!cuda || !nvrtc) {
        snprintf(err, n, "cannot open %s", cuda ? "NVRTC (libnvrtc.so.13, .12, .11.2)" : "libcuda.so.1");
        return 1;
    }
    const struct { void *lib, *dst; const char *name; } syms[] = {
        {cuda, &sbx.ctxGetDevice, "cuCtxGetDevice"}, {cuda, &sbx.deviceGetAttribute, "cuDeviceGetAttribute"},
        {cuda, &sbx.moduleLoadData, "cuModuleLoadData"}, {cuda, &sbx.moduleGetFunction, "cuModuleGetFunction"},
        {cuda, &sbx.launchKernel, "cuLaunchKernel"}, {cuda, &sbx.getErrorName, "cuGetErrorName"},
        {cuda, &sbx.memAlloc, "cuMemAlloc_v2"},
        {nvrtc, &sbx.createProgram, "nvrtcCreateProgram"}, {nvrtc, &sbx.compileProgram, "nvrtcCompileProgram"},
        {nvrtc, &sbx.getProgramLogSize, "nvrtcGetProgramLogSize"}, {nvrtc, &sbx.getProgramLog, "nvrtcGetProgramLog"},
        {nvrtc, &sbx.getCUBINSize, "nvrtcGetCUBINSize"}, {nvrtc, &sbx.getCUBIN, "nvrtcGetCUBIN"},
        {nvrtc, &sbx.destroyProgram, "nvrtcDestroyProgram"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        if (sbx_sym(syms[i].lib, syms[i].dst, syms[i].name, err, n) != 0) return 1;
    }
    sbx.opened = 1;
    return 0;
}

static const char *sbx_cu_name(CUresult r) {
    const char *s = NULL;
    if (sbx.getErrorName == NULL || sbx.getErrorName(r, &s) != 0 || s == NULL) return "CUDA error";
    return s;
}

/* sbx_build compiles src for the current device with NVRTC, loads it and
 * looks up each of names into fns. Call it with the context current (in
 * stepbench_op_get), never inside a capture. */
static int sbx_build(const char *src, const char *file, const char *const *names, int count, CUfunction *fns, char *err, size_t n) {
    if (sbx_open(err, n) != 0) return 1;
    CUdevice dev;
    int major = 0, minor = 0;
    CUresult r = sbx.ctxGetDevice(&dev);
    if (r == 0) r = sbx.deviceGetAttribute(&major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    if (r == 0) r = sbx.deviceGetAttribute(&minor, 76, dev); /* ..._MINOR */
    if (r != 0) {
        snprintf(err, n, "the device's compute capability: %s (no current context?)", sbx_cu_name(r));
        return 1;
    }
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch, "-std=c++17", "-default-device"};
    nvrtcProgram prog;
    if (sbx.createProgram(&prog, src, file, 0, NULL, NULL) != 0) {
        snprintf(err, n, "nvrtcCreateProgram failed");
        return 1;
    }
    const nvrtcResult cr = sbx.compileProgram(prog, 3, opts);
    if (cr != 0) {
        size_t log_size = 0;
        sbx.getProgramLogSize(prog, &log_size);
        char *log = calloc(log_size + 1, 1);
        if (log) sbx.getProgramLog(prog, log);
        snprintf(err, n, "NVRTC error %d compiling %s for %s: %.800s", cr, file, arch, log ? log : "");
        free(log);
        sbx.destroyProgram(&prog);
        return 1;
    }
    size_t cubin_size = 0;
    sbx.getCUBINSize(prog, &cubin_size);
    char *cubin = malloc(cubin_size ? cubin_size : 1);
    if (!cubin) {
        sbx.destroyProgram(&prog);
        snprintf(err, n, "out of memory");
        return 1;
    }
    sbx.getCUBIN(prog, cubin);
    sbx.destroyProgram(&prog);
    CUmodule mod;
    r = sbx.moduleLoadData(&mod, cubin);
    free(cubin);
    for (int i = 0; r == 0 && i < count; i++) r = sbx.moduleGetFunction(&fns[i], mod, names[i]);
    if (r != 0) {
        snprintf(err, n, "load the module of %s: %s", file, sbx_cu_name(r));
        return 1;
    }
    return 0;
}

/* sbx_launch launches fn on the call's stream, the error in the call's buffer. */
static int sbx_launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned threads, void *stream, void **args,
                      char *err, size_t n) {
    const CUresult r = sbx.launchKernel(fn, gx, gy, gz, threads, 1, 1, 0, stream, args, NULL);
    if (r != 0) {
        snprintf(err, n, "cuLaunchKernel: %s", sbx_cu_name(r));
        return 1;
    }
    return 0;
}

/* The device-side bf16 helpers every example kernel source starts with. */
#define SBX_DEVICE_PRELUDE                                                                              \
    "#define SBX_NEG_INF __int_as_float(0xff800000) /* -inf: NVRTC has no math.h INFINITY */\n"          \
    "__device__ float bf16_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }\n"    \
    "__device__ unsigned short f32_bf16(float f) {\n"                                                   \
    "    unsigned u = __float_as_uint(f);\n"                                                            \
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;\n"                                         \
    "    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"                            \
    "}\n"                                                                                               \
    "__device__ float round_bf16(float f) { return bf16_f32(f32_bf16(f)); }\n"                          \
    /* Reductions over a block of a power-of-two size, scratch of blockDim.x floats. */                 \
    "__device__ float block_max(float x, float *scratch) {\n"                                            \
    "    scratch[threadIdx.x] = x; __syncthreads();\n"                                                  \
    "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"                                              \
    "        if ((int)threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);\n" \
    "        __syncthreads();\n"                                                                        \
    "    }\n"                                                                                           \
    "    float r = scratch[0]; __syncthreads(); return r;\n"                                            \
    "}\n"                                                                                               \
    "__device__ float block_sum(float x, float *scratch) {\n"                                            \
    "    scratch[threadIdx.x] = x; __syncthreads();\n"                                                  \
    "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"                                              \
    "        if ((int)threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];\n"              \
    "        __syncthreads();\n"                                                                        \
    "    }\n"                                                                                           \
    "    float r = scratch[0]; __syncthreads(); return r;\n"                                            \
    "}\n"

#endif

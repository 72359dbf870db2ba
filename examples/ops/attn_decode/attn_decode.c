/* attn_decode.c — an op library (include/stepbench_op.h) that replaces
 * stepbench's decode attention with a kernel of its own, compiled at run
 * time by NVRTC and launched through the CUDA driver API, both opened with
 * dlopen as stepbench opens them: gcc alone builds it (make examples), no
 * CUDA toolkit or header. The very libraries stepbench loaded are used when
 * they are already loaded (RTLD_NOLOAD by soname): on the emulated device,
 * build/emu's stand-ins.
 *
 * The kernel: one block of 128 threads per (sequence, query head); the
 * keys of the cache in chunks of 256, scores in shared memory, an online
 * softmax (running maximum and sum), thread d accumulating output dim d.
 * Any head_dim up to 128 (Llama-3-8B's 128, Llama-3.2-1B's 64), any number
 * of query heads per kv head (GQA: 8 in Llama-3.2-1B). The number of keys
 * is read from pos on the device, so a captured decode step replays right.
 *
 * Built with -DSTEPBENCH_EXAMPLE_OFF_BY_ONE it drops the newest key (the
 * token's own): a deliberately wrong build that stepbench verify must
 * refuse.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stepbench_op.h"

#ifdef STEPBENCH_EXAMPLE_OFF_BY_ONE
#define NEWEST_KEY "0"
#define LIBRARY_NAME "example attn_decode (C, NVRTC + driver API), OFF BY ONE: drops the newest key"
#else
#define NEWEST_KEY "1"
#define LIBRARY_NAME "example attn_decode (C, NVRTC + driver API)"
#endif

static const char kKernel[] =
    "#define NEWEST_KEY " NEWEST_KEY "\n"
    "#define THREADS 128\n"
    "#define CHUNK 256\n"
    "__device__ float bf16_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }\n"
    "__device__ unsigned short f32_bf16(float f) {\n"
    "    unsigned u = __float_as_uint(f);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;\n"
    "    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n"
    "__device__ float block_max(float x, float *scratch) {\n"
    "    scratch[threadIdx.x] = x; __syncthreads();\n"
    "    for (int s = THREADS / 2; s > 0; s >>= 1) {\n"
    "        if ((int)threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    float r = scratch[0]; __syncthreads(); return r;\n"
    "}\n"
    "__device__ float block_sum(float x, float *scratch) {\n"
    "    scratch[threadIdx.x] = x; __syncthreads();\n"
    "    for (int s = THREADS / 2; s > 0; s >>= 1) {\n"
    "        if ((int)threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];\n"
    "        __syncthreads();\n"
    "    }\n"
    "    float r = scratch[0]; __syncthreads(); return r;\n"
    "}\n"
    /* out, q [B, H, D]; k, v [B, P, K, D]; grid (H, B), block THREADS. */
    "extern \"C\" __global__ void example_attn_decode(unsigned short *out, const unsigned short *q,\n"
    "        const unsigned short *kc, const unsigned short *vc, const int *pos, int H, int K, int D, int P) {\n"
    "    __shared__ float qs[128];\n"
    "    __shared__ float scores[CHUNK];\n"
    "    __shared__ float scratch[THREADS];\n"
    "    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;\n"
    "    const int kvh = h / (H / K);\n"
    "    const int keys = min(*pos + NEWEST_KEY, P);\n"
    "    const float scale = rsqrtf((float)D);\n"
    "    const unsigned short *qrow = q + ((long long)b * H + h) * D;\n"
    "    if (t < D) qs[t] = bf16_f32(qrow[t]);\n"
    "    __syncthreads();\n"
    "    float m = -INFINITY, l = 0.0f, acc = 0.0f;\n"
    "    for (int c0 = 0; c0 < keys; c0 += CHUNK) {\n"
    "        const int n = min(CHUNK, keys - c0);\n"
    "        float cmax = -INFINITY;\n"
    "        for (int j = t; j < n; j += THREADS) {\n"
    "            const unsigned short *krow = kc + (((long long)b * P + c0 + j) * K + kvh) * D;\n"
    "            float s = 0.0f;\n"
    "            for (int d = 0; d < D; d++) s += qs[d] * bf16_f32(krow[d]);\n"
    "            scores[j] = s * scale;\n"
    "            cmax = fmaxf(cmax, s * scale);\n"
    "        }\n"
    "        const float mnew = fmaxf(m, block_max(cmax, scratch));\n"
    "        const float rescale = __expf(m - mnew);\n"
    "        float psum = 0.0f;\n"
    "        for (int j = t; j < n; j += THREADS) { const float p = __expf(scores[j] - mnew); scores[j] = p; psum += p; }\n"
    "        l = l * rescale + block_sum(psum, scratch);\n"
    "        acc *= rescale;\n"
    "        if (t < D) {\n"
    "            for (int j = 0; j < n; j++) acc += scores[j] * bf16_f32(vc[(((long long)b * P + c0 + j) * K + kvh) * D + t]);\n"
    "        }\n"
    "        m = mnew;\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t < D) out[((long long)b * H + h) * D + t] = f32_bf16(keys > 0 ? acc / l : 0.0f);\n"
    "}\n";

/* The few driver and NVRTC declarations needed, from their documented ABI. */
typedef int CUresult;
typedef void *CUmodule, *CUfunction, *CUstream;
typedef int CUdevice;
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
    nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*getCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*destroyProgram)(nvrtcProgram *);
    CUfunction fn;
} g;

/* open_first dlopens the first of names already loaded, else the first that opens. */
static void *open_first(const char *const *names) {
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

#define SYM(lib, dst, name)                                                                   \
    do {                                                                                      \
        *(void **)(&(dst)) = dlsym(lib, name);                                                \
        if (!(dst)) return snprintf(err, n, "attn_decode example: %s lacks %s", #lib, name), 1; \
    } while (0)

static int open_libraries(char *err, size_t n) {
    static const char *const cuda_names[] = {"libcuda.so.1", NULL};
    static const char *const nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", NULL};
    void *cuda = open_first(cuda_names), *nvrtc = open_first(nvrtc_names);
    if (!cuda || !nvrtc) return snprintf(err, n, "attn_decode example: cannot open %s", cuda ? "NVRTC" : "libcuda.so.1"), 1;
    SYM(cuda, g.ctxGetDevice, "cuCtxGetDevice");
    SYM(cuda, g.deviceGetAttribute, "cuDeviceGetAttribute");
    SYM(cuda, g.moduleLoadData, "cuModuleLoadData");
    SYM(cuda, g.moduleGetFunction, "cuModuleGetFunction");
    SYM(cuda, g.launchKernel, "cuLaunchKernel");
    SYM(cuda, g.getErrorName, "cuGetErrorName");
    SYM(nvrtc, g.createProgram, "nvrtcCreateProgram");
    SYM(nvrtc, g.compileProgram, "nvrtcCompileProgram");
    SYM(nvrtc, g.getProgramLogSize, "nvrtcGetProgramLogSize");
    SYM(nvrtc, g.getProgramLog, "nvrtcGetProgramLog");
    SYM(nvrtc, g.getCUBINSize, "nvrtcGetCUBINSize");
    SYM(nvrtc, g.getCUBIN, "nvrtcGetCUBIN");
    SYM(nvrtc, g.destroyProgram, "nvrtcDestroyProgram");
    return 0;
}

static const char *cu_name(CUresult r) {
    const char *s = NULL;
    if (g.getErrorName == NULL || g.getErrorName(r, &s) != 0 || s == NULL) return "CUDA error";
    return s;
}

/* build compiles the kernel for the current device and loads it. */
static int build(char *err, size_t n) {
    CUdevice dev;
    int major = 0, minor = 0;
    CUresult r = g.ctxGetDevice(&dev);
    if (r == 0) r = g.deviceGetAttribute(&major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    if (r == 0) r = g.deviceGetAttribute(&minor, 76, dev);
    if (r != 0) return snprintf(err, n, "attn_decode example: the device's compute capability: %s (no current context?)", cu_name(r)), 1;
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch, "-std=c++17", "-default-device"};
    nvrtcProgram prog;
    if (g.createProgram(&prog, kKernel, "example_attn_decode.cu", 0, NULL, NULL) != 0)
        return snprintf(err, n, "attn_decode example: nvrtcCreateProgram failed"), 1;
    const nvrtcResult cr = g.compileProgram(prog, 3, opts);
    size_t log_size = 0, cubin_size = 0;
    g.getProgramLogSize(prog, &log_size);
    if (cr != 0) {
        char *log = calloc(log_size + 1, 1);
        if (log) g.getProgramLog(prog, log);
        snprintf(err, n, "attn_decode example: NVRTC error %d compiling for %s: %.800s", cr, arch, log ? log : "");
        free(log);
        g.destroyProgram(&prog);
        return 1;
    }
    g.getCUBINSize(prog, &cubin_size);
    char *cubin = malloc(cubin_size ? cubin_size : 1);
    if (!cubin) return g.destroyProgram(&prog), snprintf(err, n, "attn_decode example: out of memory"), 1;
    g.getCUBIN(prog, cubin);
    g.destroyProgram(&prog);
    CUmodule mod;
    r = g.moduleLoadData(&mod, cubin);
    free(cubin);
    if (r == 0) r = g.moduleGetFunction(&g.fn, mod, "example_attn_decode");
    if (r != 0) return snprintf(err, n, "attn_decode example: load the module: %s", cu_name(r)), 1;
    return 0;
}

/* check_call refuses operands that are not attn_decode's. */
static int check_call(const stepbench_op_call *c) {
    const stepbench_tensor *t = c->tensors;
    if (c->num_tensors != 5 || t[0].ndim != 4 || t[2].ndim != 4 || t[0].shape[1] != 1 || t[0].dtype.code != STEPBENCH_DTYPE_BFLOAT) {
        snprintf(c->error, c->error_bytes, "attn_decode example: want out [B, 1, H, D], q, k_cache [B, P, K, D], v_cache, pos (bf16)");
        return 1;
    }
    const int64_t H = t[0].shape[2], D = t[0].shape[3], K = t[2].shape[2];
    if (D > 128 || K <= 0 || H % K != 0) {
        snprintf(c->error, c->error_bytes, "attn_decode example: head_dim %lld (at most 128), %lld heads over %lld kv heads",
                 (long long)D, (long long)H, (long long)K);
        return 1;
    }
    return 0;
}

static int run(const stepbench_op_call *c) {
    if (check_call(c) != 0) return 1;
    const stepbench_tensor *t = c->tensors;
    int H = (int)t[0].shape[2], D = (int)t[0].shape[3], P = (int)t[2].shape[1], K = (int)t[2].shape[2];
    void *out = t[0].data, *q = t[1].data, *kc = t[2].data, *vc = t[3].data, *pos = t[4].data;
    void *args[] = {&out, &q, &kc, &vc, &pos, &H, &K, &D, &P};
    const CUresult r = g.launchKernel(g.fn, (unsigned)H, (unsigned)t[0].shape[0], 1, 128, 1, 1, 0, c->stream, args, NULL);
    if (r != 0) {
        snprintf(c->error, c->error_bytes, "attn_decode example: cuLaunchKernel: %s", cu_name(r));
        return 1;
    }
    return 0;
}

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    if (strcmp(op, "attn_decode") != 0) return snprintf(err, n, "attn_decode example: implements attn_decode only, not %s", op), 1;
    if (g.fn == NULL && (open_libraries(err, n) != 0 || build(err, n) != 0)) return 1;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = LIBRARY_NAME;
    table->workspace_bytes = NULL;
    table->run = run;
    return 0;
}

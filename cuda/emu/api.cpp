// api.cpp — the exported CUDA driver API of the emulated device, under the
// versioned names the real libcuda.so.1 exports (cuMemAlloc_v2, ...). Every
// entry validates its handles and arguments as the real driver does and
// returns the same CUresult; sbemu_error_detail says more about the last
// failure of the calling thread.
#include <elf.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "emu.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

namespace emu {

Driver &D() {
    static Driver *d = new Driver;  // never destroyed: worker threads may outlive static destructors
    return *d;
}

namespace {

constexpr int kDriverVersion = 13000;
constexpr char kDeviceName[] = "stepbench emulated GPU";
constexpr int kMaxSharedOptin = 232448;
constexpr int kDefaultSharedLimit = 48 * 1024;

thread_local Context *tl_ctx = nullptr;
thread_local int tl_err_code = 0;
thread_local std::string tl_err_detail;

int Err(int code, const std::string &detail) {
    tl_err_code = code;
    tl_err_detail = detail;
    return code;
}

int Fail(const Result &r) { return r.code == kSuccess ? kSuccess : Err(r.code, r.detail); }

uint64_t HostMemTotal() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit) {
        if (key == "MemTotal:") return kb * 1024;
    }
    return 16ull << 30;
}

uint64_t HostMemAvailable() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    uint64_t kb = 0;
    while (in >> key >> kb >> unit) {
        if (key == "MemAvailable:") return kb * 1024;
    }
    return HostMemTotal();
}

int RequireInit() {
    if (!D().initialized) return Err(kNotInitialized, "cuInit(0) has not been called");
    return kSuccess;
}

int DeviceAt(CUdevice dev, Device **out) {
    if (int rc = RequireInit()) return rc;
    if (dev < 0 || dev >= (int)D().devices.size()) {
        return Err(kInvalidDevice, "device " + std::to_string(dev) + " does not exist (" +
                                       std::to_string(D().devices.size()) + " emulated; STEPBENCH_EMU_DEVICES)");
    }
    *out = D().devices[dev].get();
    return kSuccess;
}

// Cur is the calling thread's context, when calls may use it.
int Cur(Context **out) {
    if (int rc = RequireInit()) return rc;
    Context *c = tl_ctx;
    if (c == nullptr) return Err(kInvalidContext, "no current context on this thread (cuCtxSetCurrent)");
    if (c->retains == 0) return Err(kInvalidContext, "the current context is a released primary context");
    if (int st = c->sticky.load()) return Err(st, "sticky error of an earlier launch: " + StickyDetail(c));
    *out = c;
    return kSuccess;
}

template <typename T>
bool Live(T *p) {
    return p != nullptr && D().handles.count(static_cast<void *>(p)) > 0;
}

int GetStream(Context *c, void *h, Stream **out) {
    const uintptr_t v = reinterpret_cast<uintptr_t>(h);
    if (v == 0 || v == 1 || v == 2) {  // the legacy and per-thread default streams
        *out = c->null_stream;
        return kSuccess;
    }
    auto *s = static_cast<Stream *>(h);
    if (!Live(s)) return Err(kInvalidHandle, "not a live stream");
    if (s->ctx != c) return Err(kInvalidHandle, "the stream belongs to another context");
    *out = s;
    return kSuccess;
}

void Invalidate(Stream *s, const std::string &why) {
    if (!s->capture_invalid) {
        s->capture_invalid = true;
        s->capture_invalid_why = why;
    }
}

// UnsafeDuringCapture refuses calls that CUDA forbids while a stream of the
// context captures (in global mode, or thread-local mode from the capturing
// thread) and invalidates that capture, as CUDA does.
int UnsafeDuringCapture(Context *c, const char *call) {
    for (Stream *s : c->streams) {
        if (!s->capturing) continue;
        const bool affected = s->capture_mode == 0 ||
                              (s->capture_mode == 1 && s->capture_thread == std::this_thread::get_id());
        if (affected) {
            const std::string why = std::string(call) + " is not permitted while a stream is capturing";
            Invalidate(s, why);
            return Err(kCaptureUnsupported, why);
        }
    }
    return kSuccess;
}

int CheckDevRange(CUdeviceptr p, size_t bytes, const char *what) {
    std::string why;
    if (!D().memory.CheckRange(p, bytes, &why)) return Err(kInvalidValue, std::string(what) + ": " + why);
    return kSuccess;
}

std::string Dims(unsigned x, unsigned y, unsigned z) {
    return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z);
}

void DestroyContextResources(Context *c) {
    Driver &d = D();
    for (Stream *s : c->streams) {
        d.handles.erase(s);
        DestroyStream(s);
    }
    c->streams.clear();
    if (c->null_stream) DestroyStream(c->null_stream);
    c->null_stream = nullptr;
    for (Event *e : c->events) {
        d.handles.erase(e);
        delete e;
    }
    c->events.clear();
    for (Graph *g : c->graphs) {
        d.handles.erase(g);
        delete g;
    }
    c->graphs.clear();
    for (Module *m : c->modules) {
        d.handles.erase(m);
        for (auto &f : m->functions) d.handles.erase(f.get());
        dlclose(m->dl);
        close(m->memfd);
        delete m;
    }
    c->modules.clear();
    d.memory.FreeContext(c);
    ClearSticky(c);
}

size_t ElfSize(const void *image) {
    Elf64_Ehdr eh;
    memcpy(&eh, image, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return 0;
    return std::max<size_t>(eh.e_shoff + (size_t)eh.e_shnum * eh.e_shentsize, eh.e_ehsize);
}

}  // namespace
}  // namespace emu

using namespace emu;

namespace {
void ProfileLaunch(const std::string &what);  // profiler section below
}

API const char *sbemu_describe(void) {
    return "stepbench emulated CUDA device 1.0 (kernels run on the CPU as g++-compiled fibers; times are not GPU times)";
}

API const char *sbemu_error_detail(int code) {
    static thread_local std::string out;
    out.clear();
    if (code != 0 && code == tl_err_code) {
        out = tl_err_detail;
    } else if (tl_ctx != nullptr && code != 0 && tl_ctx->sticky.load() == code) {
        out = StickyDetail(tl_ctx);
    }
    return out.c_str();
}

API CUresult cuInit(unsigned int flags) {
    if (flags != 0) return Err(kInvalidValue, "cuInit flags must be 0");
    std::lock_guard<std::mutex> lock(D().mu);
    Driver &d = D();
    if (d.initialized) return kSuccess;
    Result r = LoadSettings(&d.settings);
    if (r.code != kSuccess) return Fail(r);
    d.total_bytes = d.settings.mem_bytes ? d.settings.mem_bytes : HostMemTotal();
    for (int i = 0; i < d.settings.devices; i++) {
        auto dev = std::make_unique<Device>();
        dev->ordinal = i;
        dev->primary.dev = dev.get();
        d.devices.push_back(std::move(dev));
    }
    StartPool(d.settings);
    d.initialized = true;
    return kSuccess;
}

API CUresult cuDriverGetVersion(int *version) {
    if (version == nullptr) return Err(kInvalidValue, "null version pointer");
    *version = kDriverVersion;
    return kSuccess;
}

API CUresult cuGetErrorName(CUresult code, const char **name) {
    const char *n = ErrorName(code);
    if (name == nullptr) return kInvalidValue;
    *name = n;
    return n ? kSuccess : kInvalidValue;
}

API CUresult cuGetErrorString(CUresult code, const char **str) {
    const char *s = ErrorString(code);
    if (str == nullptr) return kInvalidValue;
    *str = s;
    return s ? kSuccess : kInvalidValue;
}

API CUresult cuDeviceGetCount(int *count) {
    if (int rc = RequireInit()) return rc;
    if (count == nullptr) return Err(kInvalidValue, "null count pointer");
    *count = (int)D().devices.size();
    return kSuccess;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    Device *d = nullptr;
    if (dev == nullptr) return Err(kInvalidValue, "null device pointer");
    if (int rc = DeviceAt(ordinal, &d)) return rc;
    *dev = ordinal;
    return kSuccess;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    if (name == nullptr || len <= 0) return Err(kInvalidValue, "bad name buffer");
    snprintf(name, (size_t)len, "%s", kDeviceName);
    return kSuccess;
}

API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev) {
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    if (uuid == nullptr) return Err(kInvalidValue, "null uuid pointer");
    const unsigned char bytes[16] = {0x5b, 0xe0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, (unsigned char)dev};
    memcpy(uuid, bytes, 16);
    return kSuccess;
}

API CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    if (bytes == nullptr) return Err(kInvalidValue, "null bytes pointer");
    *bytes = D().total_bytes;
    return kSuccess;
}

API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    if (value == nullptr) return Err(kInvalidValue, "null value pointer");
    const Settings &s = D().settings;
    int v = 0;
    switch (attrib) {
    case 1: v = 1024; break;                          // MAX_THREADS_PER_BLOCK
    case 2: case 3: v = 1024; break;                  // MAX_BLOCK_DIM_X/Y
    case 4: v = 64; break;                            // MAX_BLOCK_DIM_Z
    case 5: v = 2147483647; break;                    // MAX_GRID_DIM_X
    case 6: case 7: v = 65535; break;                 // MAX_GRID_DIM_Y/Z
    case 8: v = kDefaultSharedLimit; break;           // MAX_SHARED_MEMORY_PER_BLOCK
    case 9: v = 65536; break;                         // TOTAL_CONSTANT_MEMORY
    case 10: v = 32; break;                           // WARP_SIZE
    case 12: v = 65536; break;                        // MAX_REGISTERS_PER_BLOCK
    case 13: v = 1000000; break;                      // CLOCK_RATE (kHz)
    case 16: v = s.sms; break;                        // MULTIPROCESSOR_COUNT
    case 20: v = 0; break;                            // COMPUTE_MODE default
    case 31: v = 1; break;                            // CONCURRENT_KERNELS
    case 33: case 50: v = 0; break;                   // PCI_BUS_ID, PCI_DOMAIN_ID
    case 34: v = dev; break;                          // PCI_DEVICE_ID
    case 36: v = 1000000; break;                      // MEMORY_CLOCK_RATE (kHz)
    case 37: v = 4096; break;                         // GLOBAL_MEMORY_BUS_WIDTH
    case 38: v = 50 << 20; break;                     // L2_CACHE_SIZE
    case 39: v = 2048; break;                         // MAX_THREADS_PER_MULTIPROCESSOR
    case 40: v = 2; break;                            // ASYNC_ENGINE_COUNT
    case 41: v = 1; break;                            // UNIFIED_ADDRESSING
    case 75: v = s.cc_major; break;                   // COMPUTE_CAPABILITY_MAJOR
    case 76: v = s.cc_minor; break;                   // COMPUTE_CAPABILITY_MINOR
    case 81: v = 233472; break;                       // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: v = 65536; break;                        // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 83: v = 0; break;                            // MANAGED_MEMORY: none here
    case 97: v = kMaxSharedOptin; break;              // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    case 106: v = 32; break;                          // MAX_BLOCKS_PER_MULTIPROCESSOR
    default:
        return Err(kInvalidValue, "device attribute " + std::to_string(attrib) + " is not emulated");
    }
    *value = v;
    return kSuccess;
}

API CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice dev) {
    std::lock_guard<std::mutex> lock(D().mu);
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    if (ctx == nullptr) return Err(kInvalidValue, "null context pointer");
    Context &c = d->primary;
    if (c.retains++ == 0) {
        c.incarnation++;
        ClearSticky(&c);
        c.null_stream = NewStream(&c, true);
    }
    *ctx = &c;
    return kSuccess;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    std::lock_guard<std::mutex> lock(D().mu);
    Device *d = nullptr;
    if (int rc = DeviceAt(dev, &d)) return rc;
    Context &c = d->primary;
    if (c.retains == 0) return Err(kInvalidContext, "the primary context of device " + std::to_string(dev) + " is not retained");
    if (--c.retains == 0) DestroyContextResources(&c);
    return kSuccess;
}

API CUresult cuCtxSetCurrent(void *ctx) {
    if (int rc = RequireInit()) return rc;
    if (ctx == nullptr) {
        tl_ctx = nullptr;
        return kSuccess;
    }
    std::lock_guard<std::mutex> lock(D().mu);
    for (auto &d : D().devices) {
        if (&d->primary == ctx) {
            tl_ctx = &d->primary;
            return kSuccess;
        }
    }
    return Err(kInvalidContext, "not a context of the emulated driver");
}

API CUresult cuCtxGetCurrent(void **ctx) {
    if (int rc = RequireInit()) return rc;
    if (ctx == nullptr) return Err(kInvalidValue, "null context pointer");
    *ctx = tl_ctx;
    return kSuccess;
}

API CUresult cuCtxGetDevice(CUdevice *dev) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    *dev = c->dev->ordinal;
    return kSuccess;
}

API CUresult cuCtxSynchronize(void) {
    std::vector<Stream *> streams;
    Context *c = nullptr;
    {
        std::lock_guard<std::mutex> lock(D().mu);
        if (int rc = Cur(&c)) return rc;
        if (int rc = UnsafeDuringCapture(c, "cuCtxSynchronize")) return rc;
        streams.assign(c->streams.begin(), c->streams.end());
        streams.push_back(c->null_stream);
    }
    for (Stream *s : streams) Drain(s);
    if (int st = c->sticky.load()) return Err(st, StickyDetail(c));
    return kSuccess;
}

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (free_bytes == nullptr || total_bytes == nullptr) return Err(kInvalidValue, "null pointer");
    const uint64_t total = D().total_bytes, used = D().memory.UsedBytes();
    uint64_t free = total > used ? total - used : 0;
    if (D().settings.mem_bytes == 0) free = std::min(free, HostMemAvailable());
    *free_bytes = free;
    *total_bytes = total;
    return kSuccess;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (ptr == nullptr) return Err(kInvalidValue, "null pointer");
    if (int rc = UnsafeDuringCapture(c, "cuMemAlloc_v2")) return rc;
    Alloc *a = nullptr;
    if (int rc = Fail(D().memory.Allocate(c, bytes, D().settings, &a))) return rc;
    *ptr = a->user;
    return kSuccess;
}

API CUresult cuMemFree_v2(CUdeviceptr ptr) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = UnsafeDuringCapture(c, "cuMemFree_v2")) return rc;
    // Freeing waits for the device, as cuMemFree does: work may still use it.
    std::vector<Stream *> streams(c->streams.begin(), c->streams.end());
    streams.push_back(c->null_stream);
    for (Stream *s : streams) Drain(s);
    return Fail(D().memory.Free(ptr));
}

API CUresult cuMemAllocHost_v2(void **ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (ptr == nullptr) return Err(kInvalidValue, "null pointer");
    if (int rc = UnsafeDuringCapture(c, "cuMemAllocHost_v2")) return rc;
    return Fail(D().memory.AllocHost(bytes, ptr));
}

API CUresult cuMemFreeHost(void *ptr) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = UnsafeDuringCapture(c, "cuMemFreeHost")) return rc;
    return Fail(D().memory.FreeHost(ptr));
}

API void sbemu_name_allocation(CUdeviceptr ptr, const char *name) {
    if (name != nullptr) D().memory.Name(ptr, name);
}

API CUresult cuStreamCreate(void **stream, unsigned int flags) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (stream == nullptr) return Err(kInvalidValue, "null stream pointer");
    if (flags > 1) return Err(kInvalidValue, "stream flags must be 0 or CU_STREAM_NON_BLOCKING");
    Stream *s = NewStream(c, false);
    c->streams.insert(s);
    D().handles.insert(s);
    *stream = s;
    return kSuccess;
}

API CUresult cuStreamSynchronize(void *h) {
    Stream *s = nullptr;
    Context *c = nullptr;
    {
        std::lock_guard<std::mutex> lock(D().mu);
        if (int rc = Cur(&c)) return rc;
        if (int rc = GetStream(c, h, &s)) return rc;
        if (s->capturing) {
            Invalidate(s, "cuStreamSynchronize on the capturing stream");
            return Err(kCaptureUnsupported, "cuStreamSynchronize on a capturing stream");
        }
    }
    Drain(s);
    if (int st = c->sticky.load()) return Err(st, StickyDetail(c));
    return kSuccess;
}

API CUresult cuStreamQuery(void *h) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    std::lock_guard<std::mutex> slock(s->mu);
    return s->queue.empty() && !s->busy ? kSuccess : kNotReady;
}

API CUresult cuStreamDestroy_v2(void *h) {
    std::lock_guard<std::mutex> lock(D().mu);
    if (int rc = RequireInit()) return rc;
    auto *s = static_cast<Stream *>(h);
    if (!Live(s)) return Err(kInvalidHandle, "not a live stream");
    if (s->capturing) return Err(kIllegalState, "the stream is capturing");
    s->ctx->streams.erase(s);
    D().handles.erase(s);
    DestroyStream(s);  // pending work completes first, as in CUDA
    return kSuccess;
}

API CUresult cuStreamIsCapturing(void *h, int *status) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    if (status == nullptr) return Err(kInvalidValue, "null status pointer");
    *status = !s->capturing ? 0 : (s->capture_invalid ? 2 : 1);
    return kSuccess;
}

namespace {

// Copy enqueues a copy; a pageable host source is staged at once (as CUDA
// does), which stream capture refuses.
CUresult Copy(const char *call, void *dst, const void *src, size_t bytes, void *h, bool dst_dev, bool src_dev) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    if (bytes == 0) return kSuccess;
    if (dst_dev) {
        if (int rc = CheckDevRange(reinterpret_cast<uintptr_t>(dst), bytes, call)) return rc;
    }
    if (src_dev) {
        if (int rc = CheckDevRange(reinterpret_cast<uintptr_t>(src), bytes, call)) return rc;
    }
    const void *host = dst_dev ? (src_dev ? nullptr : src) : dst;
    if (host != nullptr && !D().memory.IsPinned(host, bytes)) {
        if (s->capturing) {
            Invalidate(s, std::string(call) + " with pageable host memory");
            return Err(kCaptureUnsupported, std::string(call) + " with pageable host memory during stream capture");
        }
        if (!dst_dev) {
            // Device to pageable host: CUDA returns only when done.
            Op op{call, [dst, src, bytes] {
                      memcpy(dst, src, bytes);
                      return Result::Ok();
                  }};
            Submit(s, std::move(op));
            D().mu.unlock();
            Drain(s);
            D().mu.lock();
            if (int st = c->sticky.load()) return Err(st, StickyDetail(c));
            return kSuccess;
        }
        auto staged = std::make_shared<std::vector<unsigned char>>(
            static_cast<const unsigned char *>(src), static_cast<const unsigned char *>(src) + bytes);
        Submit(s, Op{call, [dst, staged] {
                         memcpy(dst, staged->data(), staged->size());
                         return Result::Ok();
                     }});
        return kSuccess;
    }
    Submit(s, Op{call, [dst, src, bytes] {
                     memmove(dst, src, bytes);
                     return Result::Ok();
                 }});
    return kSuccess;
}

CUresult Memset(const char *call, CUdeviceptr dst, unsigned value, int width, size_t count, void *h) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    if (count == 0) return kSuccess;
    if (dst % (uint64_t)width != 0) return Err(kInvalidValue, std::string(call) + ": destination not aligned");
    if (int rc = CheckDevRange(dst, count * width, call)) return rc;
    Submit(s, Op{call, [dst, value, width, count] {
                     if (width == 1) {
                         memset(reinterpret_cast<void *>(dst), (int)value, count);
                     } else if (width == 2) {
                         std::fill_n(reinterpret_cast<uint16_t *>(dst), count, (uint16_t)value);
                     } else {
                         std::fill_n(reinterpret_cast<uint32_t *>(dst), count, (uint32_t)value);
                     }
                     return Result::Ok();
                 }});
    return kSuccess;
}

}  // namespace

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *s) {
    return Copy("cuMemcpyHtoDAsync_v2", reinterpret_cast<void *>(dst), src, bytes, s, true, false);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *s) {
    return Copy("cuMemcpyDtoHAsync_v2", dst, reinterpret_cast<const void *>(src), bytes, s, false, true);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *s) {
    return Copy("cuMemcpyDtoDAsync_v2", reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes, s,
                true, true);
}
API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
    return Memset("cuMemsetD8Async", dst, v, 1, n, s);
}
API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, void *s) {
    return Memset("cuMemsetD16Async", dst, v, 2, n, s);
}
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, void *s) {
    return Memset("cuMemsetD32Async", dst, v, 4, n, s);
}

// ---- events ----

API CUresult cuEventCreate(void **event, unsigned int flags) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (event == nullptr) return Err(kInvalidValue, "null event pointer");
    if (flags & ~7u) return Err(kInvalidValue, "unknown event flags");
    auto *e = new Event;
    e->ctx = c;
    if (flags & 2) e->ns = ~0ull;  // CU_EVENT_DISABLE_TIMING, marked by an impossible time
    c->events.insert(e);
    D().handles.insert(e);
    *event = e;
    return kSuccess;
}

API CUresult cuEventRecord(void *event, void *h) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *e = static_cast<Event *>(event);
    if (!Live(e)) return Err(kInvalidHandle, "not a live event");
    if (int rc = GetStream(c, h, &s)) return rc;
    uint64_t gen;
    const bool timing = e->ns != ~0ull;
    {
        std::lock_guard<std::mutex> elock(e->mu);
        e->recorded = true;
        e->captured = s->capturing;
        gen = ++e->generation;
    }
    Op op{"cuEventRecord", [e, gen, timing] {
              std::lock_guard<std::mutex> elock(e->mu);
              if (gen >= e->completed_generation) {
                  e->completed_generation = gen;
                  if (timing) e->ns = NowNs();
              }
              e->cv.notify_all();
              return Result::Ok();
          }};
    op.always = true;
    Submit(s, std::move(op));
    return kSuccess;
}

API CUresult cuEventQuery(void *event) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *e = static_cast<Event *>(event);
    if (!Live(e)) return Err(kInvalidHandle, "not a live event");
    std::lock_guard<std::mutex> elock(e->mu);
    if (e->captured) return Err(kCapturedEvent, "the event was last recorded in a capturing stream");
    return e->completed_generation >= e->generation ? kSuccess : kNotReady;
}

API CUresult cuEventSynchronize(void *event) {
    Event *e = nullptr;
    Context *c = nullptr;
    {
        std::lock_guard<std::mutex> lock(D().mu);
        if (int rc = Cur(&c)) return rc;
        e = static_cast<Event *>(event);
        if (!Live(e)) return Err(kInvalidHandle, "not a live event");
        std::lock_guard<std::mutex> elock(e->mu);
        if (e->captured) return Err(kCapturedEvent, "the event was last recorded in a capturing stream");
    }
    {
        std::unique_lock<std::mutex> elock(e->mu);
        e->cv.wait(elock, [&] { return e->completed_generation >= e->generation; });
    }
    if (int st = c->sticky.load()) return Err(st, StickyDetail(c));
    return kSuccess;
}

API CUresult cuEventDestroy_v2(void *event) {
    std::lock_guard<std::mutex> lock(D().mu);
    if (int rc = RequireInit()) return rc;
    auto *e = static_cast<Event *>(event);
    if (!Live(e)) return Err(kInvalidHandle, "not a live event");
    {
        // A record still queued refers to the event: wait for it (CUDA
        // defers the destruction instead; the effect is the same).
        std::unique_lock<std::mutex> elock(e->mu);
        e->cv.wait(elock, [&] { return e->captured || e->completed_generation >= e->generation; });
    }
    e->ctx->events.erase(e);
    D().handles.erase(e);
    delete e;
    return kSuccess;
}

API CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *a = static_cast<Event *>(start);
    auto *b = static_cast<Event *>(end);
    if (!Live(a) || !Live(b)) return Err(kInvalidHandle, "not a live event");
    if (ms == nullptr) return Err(kInvalidValue, "null ms pointer");
    std::lock_guard<std::mutex> la(a->mu);
    std::unique_lock<std::mutex> lb(b->mu, std::defer_lock);
    if (a != b) lb.lock();
    if (a->ns == ~0ull || b->ns == ~0ull) return Err(kInvalidHandle, "an event was created with CU_EVENT_DISABLE_TIMING");
    if (!a->recorded || !b->recorded) return Err(kInvalidHandle, "an event was never recorded");
    if (a->captured || b->captured) return Err(kCapturedEvent, "an event was recorded in a capturing stream");
    if (a->completed_generation < a->generation || b->completed_generation < b->generation) {
        return Err(kNotReady, "an event has not completed");
    }
    *ms = (float)(((double)b->ns - (double)a->ns) / 1e6);
    return kSuccess;
}

API CUresult cuEventElapsedTime(float *ms, void *start, void *end) { return cuEventElapsedTime_v2(ms, start, end); }

// ---- modules and functions ----

API CUresult cuModuleLoadData(void **module, const void *image) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (module == nullptr || image == nullptr) return Err(kInvalidValue, "null pointer");
    if (int rc = UnsafeDuringCapture(c, "cuModuleLoadData")) return rc;
    const size_t size = ElfSize(image);
    if (size == 0) return Err(kInvalidImage, "not an ELF image");
    const int fd = memfd_create("sbemu-module", MFD_CLOEXEC);
    if (fd < 0) return Err(kInvalidImage, std::string("memfd_create: ") + strerror(errno));
    if (write(fd, image, size) != (ssize_t)size) {
        close(fd);
        return Err(kInvalidImage, "cannot write the module image");
    }
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    void *dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (dl == nullptr) {
        const char *why = dlerror();
        close(fd);
        return Err(kInvalidImage, std::string("not an image of the emulated device (a real cubin?): ") + (why ? why : ""));
    }
    auto init = reinterpret_cast<sbemu_module_init_fn>(dlsym(dl, "sbemu_module_init"));
    const sbemu_module_desc *desc = init ? init(KernelAPI()) : nullptr;
    if (desc == nullptr || desc->abi_version != SBEMU_ABI_VERSION) {
        dlclose(dl);
        close(fd);
        return Err(kInvalidImage, "not an image of this emulator version (compile it with the emulated NVRTC of the same build)");
    }
    // A cubin runs on its major architecture from its minor up, as on a GPU
    // (sm_80 on 8.0 and 8.9; sm_90 on 9.0 only).
    const Settings &st = D().settings;
    if (desc->arch / 10 != st.cc_major || desc->arch % 10 > st.cc_minor) {
        dlclose(dl);
        close(fd);
        return Err(kNoBinaryForGPU, "the image was compiled for sm_" + std::to_string(desc->arch) + "; the emulated GPU is sm_" +
                                        std::to_string(st.cc_major * 10 + st.cc_minor));
    }
    auto *m = new Module;
    m->ctx = c;
    m->dl = dl;
    m->memfd = fd;
    m->desc = desc;
    for (int i = 0; i < desc->num_kernels; i++) {
        auto f = std::make_unique<Function>();
        f->mod = m;
        f->k = &desc->kernels[i];
        D().handles.insert(f.get());
        m->functions.push_back(std::move(f));
    }
    c->modules.insert(m);
    D().handles.insert(m);
    *module = m;
    return kSuccess;
}

API CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int, void *, void **) {
    return cuModuleLoadData(module, image);
}

API CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *m = static_cast<Module *>(module);
    if (!Live(m)) return Err(kInvalidHandle, "not a live module");
    if (function == nullptr || name == nullptr) return Err(kInvalidValue, "null pointer");
    for (auto &f : m->functions) {
        if (strcmp(f->k->name, name) == 0) {
            *function = f.get();
            return kSuccess;
        }
    }
    return Err(kNotFound, std::string("no kernel named '") + name + "' in the module (is it extern \"C\" __global__?)");
}

API CUresult cuModuleUnload(void *module) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *m = static_cast<Module *>(module);
    if (!Live(m)) return Err(kInvalidHandle, "not a live module");
    if (int rc = UnsafeDuringCapture(c, "cuModuleUnload")) return rc;
    // Work on the streams may still run its kernels.
    std::vector<Stream *> streams(c->streams.begin(), c->streams.end());
    streams.push_back(c->null_stream);
    for (Stream *s : streams) Drain(s);
    for (auto &f : m->functions) D().handles.erase(f.get());
    m->ctx->modules.erase(m);
    D().handles.erase(m);
    dlclose(m->dl);
    close(m->memfd);
    delete m;
    return kSuccess;
}

API CUresult cuFuncSetAttribute(void *function, int attrib, int value) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *f = static_cast<Function *>(function);
    if (!Live(f)) return Err(kInvalidHandle, "not a live function");
    switch (attrib) {
    case 8:  // MAX_DYNAMIC_SHARED_SIZE_BYTES
        if (value < 0 || (size_t)value + f->static_shared.load() > (size_t)kMaxSharedOptin) {
            return Err(kInvalidValue, "MAX_DYNAMIC_SHARED_SIZE_BYTES " + std::to_string(value) + " exceeds " +
                                          std::to_string(kMaxSharedOptin) + " bytes less the static shared memory");
        }
        f->max_dynamic_shared = value;
        f->dynamic_shared_opted_in = value > kDefaultSharedLimit;
        return kSuccess;
    case 9:  // PREFERRED_SHARED_MEMORY_CARVEOUT
        if (value < -1 || value > 100) return Err(kInvalidValue, "carveout must be -1..100");
        f->carveout = value;
        return kSuccess;
    }
    return Err(kInvalidValue, "function attribute " + std::to_string(attrib) + " cannot be set on the emulated device");
}

API CUresult cuFuncGetAttribute(int *value, int attrib, void *function) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *f = static_cast<Function *>(function);
    if (!Live(f)) return Err(kInvalidHandle, "not a live function");
    if (value == nullptr) return Err(kInvalidValue, "null value pointer");
    switch (attrib) {
    case 0: *value = f->k->max_threads > 0 ? f->k->max_threads : 1024; return kSuccess;  // MAX_THREADS_PER_BLOCK
    case 1: *value = (int)f->static_shared.load(); return kSuccess;  // SHARED_SIZE_BYTES (as seen so far)
    case 2: *value = 0; return kSuccess;                             // CONST_SIZE_BYTES
    case 3: *value = 0; return kSuccess;                             // LOCAL_SIZE_BYTES
    case 4: *value = 0; return kSuccess;                             // NUM_REGS: not modelled
    case 5: case 6: *value = f->mod->desc->arch; return kSuccess;    // PTX_VERSION, BINARY_VERSION
    case 7: *value = 0; return kSuccess;                             // CACHE_MODE_CA
    case 8: *value = f->max_dynamic_shared; return kSuccess;
    case 9: *value = f->carveout; return kSuccess;
    }
    return Err(kInvalidValue, "function attribute " + std::to_string(attrib) + " is not emulated");
}

// LaunchKernel is cuLaunchKernel and cuLaunchKernelEx: programmatic says
// the launch allows programmatic stream serialization (its griddepcontrol.wait
// is what orders it after the stream's previous kernel; Execute checks
// that nothing before it touches that kernel's data). The flag travels
// with the launch into a capture and every replay.
static CUresult LaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, void *h, void **params, void **extra, bool programmatic) {
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *f = static_cast<Function *>(function);
    if (!Live(f)) return Err(kInvalidHandle, "not a live function");
    if (f->mod->ctx != c) return Err(kInvalidHandle, "the function belongs to another context");
    if (int rc = GetStream(c, h, &s)) return rc;
    const sbemu_kernel_desc *k = f->k;
    const std::string name = std::string("kernel ") + k->name + " (grid " + Dims(gx, gy, gz) + ", block " +
                             Dims(bx, by, bz) + ", " + std::to_string(shared) + " dynamic shared bytes)";
    const uint64_t threads = (uint64_t)bx * by * bz;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
        return Err(kInvalidValue, name + ": a zero grid or block dimension");
    }
    if (bx > 1024 || by > 1024 || bz > 64 || threads > 1024) {
        return Err(kInvalidValue, name + ": more than 1024 threads per block, or a block dimension above 1024x1024x64");
    }
    if (gx > 2147483647u || gy > 65535 || gz > 65535) return Err(kInvalidValue, name + ": grid above 2^31-1 x 65535 x 65535");
    if (k->max_threads > 0 && threads > (uint64_t)k->max_threads) {
        return Err(kLaunchOutOfResources, name + ": " + std::to_string(threads) + " threads exceed __launch_bounds__(" +
                                              std::to_string(k->max_threads) + ")");
    }
    if (shared > (unsigned)f->max_dynamic_shared) {
        return Err(kInvalidValue, name + ": " + std::to_string(shared) + " bytes of dynamic shared memory exceed the " +
                                      std::to_string(f->max_dynamic_shared) +
                                      " allowed (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES opts in to more than 48 KiB)");
    }
    if (extra != nullptr) return Err(kInvalidValue, name + ": the extra argument is not supported by the emulator");
    if (k->num_params > 0 && params == nullptr) return Err(kInvalidValue, name + ": kernelParams is null");
    if (s->capturing && !f->loaded.load() && D().settings.strict_lazy_loading) {
        const std::string why = name + " has never run outside a capture: with lazy module loading (the default since "
                                       "CUDA 12.2) drivers before 12.3 cannot load it inside a stream capture; run it "
                                       "once eagerly first (STEPBENCH_EMU_STRICT_LAZY_LOADING=0 turns this check off)";
        Invalidate(s, why);
        return Err(kCaptureUnsupported, why);
    }
    auto l = std::make_shared<Launch>();
    l->f = f;
    l->ctx = c;
    l->grid = {gx, gy, gz};
    l->block = {bx, by, bz};
    l->dynamic_shared = shared;
    l->programmatic = programmatic;
    std::vector<size_t> offsets;
    size_t off = 0;
    for (int i = 0; i < k->num_params; i++) {
        const size_t align = std::max(1u, k->param_aligns[i]);
        off = (off + align - 1) / align * align;
        offsets.push_back(off);
        off += k->param_sizes[i];
    }
    l->args.resize(std::max<size_t>(off, 1));
    for (int i = 0; i < k->num_params; i++) {
        if (params[i] == nullptr) return Err(kInvalidValue, name + ": kernelParams[" + std::to_string(i) + "] is null");
        memcpy(l->args.data() + offsets[i], params[i], k->param_sizes[i]);
    }
    for (int i = 0; i < k->num_params; i++) l->params.push_back(l->args.data() + offsets[i]);
    if (!s->capturing) f->loaded.store(true);
    D().launches++;
    if (!s->capturing) ProfileLaunch(std::string("kernel ") + k->name);
    Op op{name, [l] { return Execute(*l); }};
    op.kernel = true;
    Submit(s, std::move(op));
    return kSuccess;
}

API CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shared, void *h, void **params, void **extra) {
    std::lock_guard<std::mutex> lock(D().mu);
    return LaunchKernel(function, gx, gy, gz, bx, by, bz, shared, h, params, extra, false);
}

// CUlaunchConfig and CUlaunchAttribute as the driver API lays them out (see
// cuda/shim.c): an attribute is an int id padded to 8 bytes and a 64-byte
// value union; the configuration is 7 unsigned ints, the stream, the
// attribute array and its length.
struct LaunchAttribute {
    int id;
    char pad[4];
    union {
        char raw[64];
        int value;
    } v;
};
struct LaunchConfig {
    unsigned grid[3], block[3], shared;
    void *stream;
    const LaunchAttribute *attrs;
    unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "the driver API's launch configuration");

// cuLaunchKernelEx takes one attribute, programmatic stream serialization
// (id 6), and only on a device of compute capability 9.0 or newer (the
// emulated one is 9.0 unless STEPBENCH_EMU_CC says otherwise).
API CUresult cuLaunchKernelEx(const LaunchConfig *cfg, void *function, void **params, void **extra) {
    std::lock_guard<std::mutex> lock(D().mu);
    if (cfg == nullptr) return Err(kInvalidValue, "cuLaunchKernelEx: null configuration");
    if (cfg->num_attrs > 0 && cfg->attrs == nullptr) return Err(kInvalidValue, "cuLaunchKernelEx: null attribute array");
    bool programmatic = false;
    for (unsigned i = 0; i < cfg->num_attrs; i++) {
        const LaunchAttribute &a = cfg->attrs[i];
        if (a.id != 6) {
            return Err(kNotSupported, "cuLaunchKernelEx: launch attribute " + std::to_string(a.id) +
                                          " is not emulated (only 6, programmatic stream serialization)");
        }
        programmatic = a.v.value != 0;
    }
    if (programmatic && D().settings.cc_major < 9) {
        return Err(kNotSupported, "cuLaunchKernelEx: programmatic stream serialization needs compute capability 9.0; "
                                  "the emulated device is " + std::to_string(D().settings.cc_major) + "." +
                                      std::to_string(D().settings.cc_minor));
    }
    return LaunchKernel(function, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1],
                        cfg->block[2], cfg->shared, cfg->stream, params, extra, programmatic);
}

// ---- capture and graphs ----

API CUresult cuStreamBeginCapture_v2(void *h, int mode) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    if (mode < 0 || mode > 2) return Err(kInvalidValue, "unknown capture mode");
    if (s->is_null) return Err(kCaptureUnsupported, "the legacy default stream cannot be captured");
    if (s->capturing) return Err(kIllegalState, "the stream is already capturing");
    s->capturing = true;
    s->capture_invalid = false;
    s->capture_invalid_why.clear();
    s->capture_mode = mode;
    s->capture_thread = std::this_thread::get_id();
    s->captured.clear();
    return kSuccess;
}

API CUresult cuStreamEndCapture(void *h, void **graph) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = RequireInit()) return rc;
    c = tl_ctx;
    if (c == nullptr || c->retains == 0) return Err(kInvalidContext, "no current context");
    if (int rc = GetStream(c, h, &s)) return rc;
    if (graph == nullptr) return Err(kInvalidValue, "null graph pointer");
    if (!s->capturing) return Err(kIllegalState, "the stream is not capturing");
    if (s->capture_mode != 2 && s->capture_thread != std::this_thread::get_id()) {
        return Err(kCaptureWrongThread, "the capture was begun on another thread");
    }
    s->capturing = false;
    auto ops = std::make_shared<std::vector<Op>>(std::move(s->captured));
    s->captured.clear();
    if (s->capture_invalid) {
        *graph = nullptr;
        return Err(kCaptureInvalidated, "the capture was invalidated: " + s->capture_invalid_why);
    }
    auto *g = new Graph;
    g->ctx = c;
    g->ops = ops;
    c->graphs.insert(g);
    D().handles.insert(g);
    *graph = g;
    return kSuccess;
}

API CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *g = static_cast<Graph *>(graph);
    if (!Live(g) || g->executable) return Err(kInvalidHandle, "not a live graph");
    if (exec == nullptr) return Err(kInvalidValue, "null exec pointer");
    if (flags > 1) return Err(kInvalidValue, "graph instantiate flags other than AUTO_FREE_ON_LAUNCH are not emulated");
    auto *e = new Graph;
    e->ctx = g->ctx;
    e->executable = true;
    e->ops = g->ops;
    g->ctx->graphs.insert(e);
    D().handles.insert(e);
    *exec = e;
    return kSuccess;
}

API CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *numNodes) {
    std::lock_guard<std::mutex> lock(D().mu);
    if (int rc = RequireInit()) return rc;
    auto *g = static_cast<Graph *>(graph);
    if (!Live(g) || g->executable) return Err(kInvalidHandle, "not a live graph");
    if (numNodes == nullptr) return Err(kInvalidValue, "null numNodes pointer");
    if (nodes != nullptr) return Err(kInvalidValue, "cuGraphGetNodes with a node array is not emulated (count only)");
    *numNodes = g->ops->size();
    return kSuccess;
}

API CUresult cuGraphLaunch(void *exec, void *h) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    if (int rc = Cur(&c)) return rc;
    auto *e = static_cast<Graph *>(exec);
    if (!Live(e) || !e->executable) return Err(kInvalidHandle, "not a live executable graph");
    if (int rc = GetStream(c, h, &s)) return rc;
    std::shared_ptr<const std::vector<Op>> ops = e->ops;
    if (!s->capturing) ProfileLaunch("graph (" + std::to_string(ops->size()) + " nodes)");
    Submit(s, Op{"graph launch", [ops] {
                     ForgetPreviousGrid();  // a graph's first kernel has no programmatic edge into it
                     for (const Op &op : *ops) {
                         if (!op.kernel) ForgetPreviousGrid();
                         Result r = op.run();
                         if (r.code != kSuccess) {
                             r.detail = op.what + ": " + r.detail;
                             return r;
                         }
                     }
                     return Result::Ok();
                 }});
    return kSuccess;
}

static CUresult DestroyGraph(void *graph, bool executable) {
    std::lock_guard<std::mutex> lock(D().mu);
    if (int rc = RequireInit()) return rc;
    auto *g = static_cast<Graph *>(graph);
    if (!Live(g) || g->executable != executable) return Err(kInvalidHandle, "not a live graph");
    g->ctx->graphs.erase(g);
    D().handles.erase(g);
    delete g;  // queued launches hold their own reference to the work
    return kSuccess;
}

API CUresult cuGraphDestroy(void *graph) { return DestroyGraph(graph, false); }
API CUresult cuGraphExecDestroy(void *exec) { return DestroyGraph(exec, true); }

// ---- profiler (cuProfilerStart/Stop) ----
// With STEPBENCH_EMU_PROFILE_LOG=FILE set, the emulated driver appends to
// FILE one line per profiler start and stop, and one per kernel launch or
// graph launch made while the profiler runs: what a tool started with a
// cudaProfilerApi capture range would capture. The emulated NVTX recorder
// appends its ranges to the same file.

namespace {
std::mutex g_profile_mu;
bool g_profiling = false;

void ProfileLog(const std::string &line) {
    const char *path = getenv("STEPBENCH_EMU_PROFILE_LOG");
    if (path == nullptr || *path == '\0') return;
    FILE *f = fopen(path, "a");
    if (f == nullptr) return;
    fprintf(f, "%s\n", line.c_str());
    fclose(f);
}

void ProfileLaunch(const std::string &what) {
    std::lock_guard<std::mutex> lock(g_profile_mu);
    if (g_profiling) ProfileLog("launch " + what);
}
}  // namespace

API CUresult cuProfilerStart(void) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    std::lock_guard<std::mutex> plock(g_profile_mu);
    if (!g_profiling) ProfileLog("profiler start");
    g_profiling = true;
    return kSuccess;
}

API CUresult cuProfilerStop(void) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    if (int rc = Cur(&c)) return rc;
    std::lock_guard<std::mutex> plock(g_profile_mu);
    if (g_profiling) ProfileLog("profiler stop");
    g_profiling = false;
    return kSuccess;
}

// ---- services for the other stand-ins (cuBLAS, NCCL) ----

// sbemu_current_context returns 0 when the calling thread has a usable context.
API int sbemu_current_context(void) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    return Cur(&c);
}

// sbemu_check_device_range: 1 when [p, p+bytes) lies in one live allocation;
// otherwise 0 and why.
API int sbemu_check_device_range(CUdeviceptr p, size_t bytes, char *why, size_t why_len) {
    std::string w;
    if (D().memory.CheckRange(p, bytes, &w)) return 1;
    if (why != nullptr && why_len > 0) snprintf(why, why_len, "%s", w.c_str());
    return 0;
}

// sbemu_host_op enqueues fn(arg) on a stream of the current context (or
// records it during a capture). fn returns a CUresult and fills err on
// failure. release(arg) runs when no stream work or graph refers to arg.
// lazy_key names the work for the lazy-loading check, like a kernel.
API CUresult sbemu_host_op(void *h, const char *what, int (*fn)(void *, char *, size_t), void *arg,
                           void (*release)(void *), const char *lazy_key) {
    std::lock_guard<std::mutex> lock(D().mu);
    Context *c = nullptr;
    Stream *s = nullptr;
    std::shared_ptr<void> owned(arg, [release](void *p) {
        if (release) release(p);
    });
    if (int rc = Cur(&c)) return rc;
    if (int rc = GetStream(c, h, &s)) return rc;
    static std::set<std::pair<Context *, std::string>> loaded;  // guarded by D().mu
    if (lazy_key != nullptr) {
        const auto key = std::make_pair(c, std::string(lazy_key));
        if (s->capturing && !loaded.count(key) && D().settings.strict_lazy_loading) {
            const std::string why = std::string(what) + " has never run outside a capture (lazy loading; see "
                                                        "STEPBENCH_EMU_STRICT_LAZY_LOADING)";
            Invalidate(s, why);
            return Err(kCaptureUnsupported, why);
        }
        if (!s->capturing) loaded.insert(key);
    }
    const std::string name = what;
    Op op{what, [fn, owned, name] {
              char err[1024] = {0};
              const int rc = fn(owned.get(), err, sizeof err);
              OpaquePreviousGrid(name);
              return rc == 0 ? Result::Ok() : Result::Fail(rc, err);
          }};
    op.kernel = true;  // a library's kernel on a GPU: a programmatic launch after it may overlap it
    Submit(s, std::move(op));
    return kSuccess;
}


API void sbemu_parallel_for(size_t n, void (*fn)(void *, size_t), void *arg) {
    ParallelFor(n, [fn, arg](size_t i) { fn(arg, i); });
}

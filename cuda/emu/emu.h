// emu.h — internals of the emulated CUDA driver (libcuda.so.1 of this
// directory). The driver keeps real CUDA's object model (devices, primary
// contexts, streams, events, modules, functions, graphs) and its rules
// (ordering, sticky errors, what stream capture refuses), but device memory
// is host memory and a kernel's threads are fibers on host threads.
#ifndef SBEMU_EMU_H
#define SBEMU_EMU_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "abi.h"
}

namespace emu {

// CUresult values this driver returns (numbers from the CUDA driver API docs).
enum : int {
    kSuccess = 0,
    kInvalidValue = 1,
    kOutOfMemory = 2,
    kNotInitialized = 3,
    kNoDevice = 100,
    kInvalidDevice = 101,
    kInvalidImage = 200,
    kInvalidContext = 201,
    kNoBinaryForGPU = 209,
    kInvalidHandle = 400,
    kIllegalState = 401,
    kNotFound = 500,
    kNotReady = 600,
    kIllegalAddress = 700,
    kLaunchOutOfResources = 701,
    kAssert = 710,
    kHardwareStackError = 714,
    kIllegalInstruction = 715,
    kMisalignedAddress = 716,
    kLaunchFailed = 719,
    kNotPermitted = 800,
    kNotSupported = 801,
    kCaptureUnsupported = 900,
    kCaptureInvalidated = 901,
    kCapturedEvent = 907,
    kCaptureWrongThread = 908,
    kUnknown = 999,
};

const char *ErrorName(int code);
const char *ErrorString(int code);

// Result of one piece of stream work: a CUresult and, on failure, a message.
struct Result {
    int code = kSuccess;
    std::string detail;
    static Result Ok() { return Result{}; }
    static Result Fail(int c, std::string d) { return Result{c, std::move(d)}; }
};

// Forward, Reverse and Random order a block's threads within each round;
// WarpSerial and WarpSerialReverse run one warp alone from barrier to
// barrier (or exit), then the next, in warp order or its reverse.
enum class Schedule { Forward, Reverse, Random, WarpSerial, WarpSerialReverse };

// Settings come from STEPBENCH_EMU_* variables, read once by cuInit.
struct Settings {
    Schedule schedule = Schedule::Forward;
    uint64_t seed = 1;
    int threads = 1;              // host threads that run blocks
    bool guard_before = false;    // guard page before allocations instead of after
    uint8_t poison = 0xff;        // fill of fresh memory and shared memory (0xff: NaN)
    int devices = 1;
    uint64_t mem_bytes = 0;       // 0: host MemTotal
    bool strict_lazy_loading = true;
    int sms = 132;
    int cc_major = 9, cc_minor = 0; // STEPBENCH_EMU_CC: the compute capability reported
    std::string counters_path;    // STEPBENCH_EMU_COUNTERS: access counters, a JSON line per launch
    bool check_pdl = false;       // STEPBENCH_EMU_CHECK_PDL=1: programmatic launches' pre-wait accesses checked
};
// Load reads the environment; an error names the variable.
Result LoadSettings(Settings *s);

struct Context;

// ---- memory ----
struct Alloc {
    uint64_t id = 0;
    uintptr_t user = 0;     // what cuMemAlloc returned
    size_t size = 0;        // what was asked for
    uintptr_t map = 0;      // the mmap'd region, guard page included
    size_t map_len = 0;
    uintptr_t guard = 0;    // the inaccessible page
    uintptr_t slack = 0;    // bytes between the end and the guard (canary)
    size_t slack_len = 0;
    bool freed = false;
    std::string name;       // set by sbemu_name_allocation, may be empty
    Context *ctx = nullptr;
};

class Memory {
public:
    Result Allocate(Context *ctx, size_t bytes, const Settings &s, Alloc **out);
    Result Free(uintptr_t user);
    Result AllocHost(size_t bytes, void **out);
    Result FreeHost(void *p);
    bool IsPinned(const void *p, size_t bytes);
    // Range is inside one live allocation; otherwise a message saying why not.
    bool CheckRange(uintptr_t p, size_t bytes, std::string *why, const Alloc **found = nullptr);
    // Finds the allocation whose mapping (guard included) holds addr; a copy.
    bool Describe(uintptr_t addr, Alloc *out);
    // Nearest finds the allocation closest to an address outside every
    // mapping (within 1 MiB), for messages about near misses.
    bool Nearest(uintptr_t addr, Alloc *out);
    // Canaries between each live allocation's end and its guard are intact;
    // otherwise describes the first one overwritten.
    bool CheckCanaries(std::string *why);
    void FreeContext(Context *ctx);
    void Name(uintptr_t user, const std::string &name);
    // LiveRanges are the [start, end) of every live allocation, sorted.
    std::vector<std::pair<uintptr_t, uintptr_t>> LiveRanges();
    uint64_t UsedBytes();
    std::string Label(const Alloc &a) const;

private:
    std::mutex mu_;
    std::map<uintptr_t, Alloc *> by_map_;  // live and quarantined (freed) allocations
    std::deque<Alloc *> quarantine_;
    std::map<uintptr_t, size_t> pinned_;
    std::multimap<size_t, uintptr_t> pool_;  // freed mappings by length, for reuse
    size_t pooled_bytes_ = 0;
    void *TakePooled(size_t map_len);
    uint64_t next_id_ = 1;
    uint64_t used_ = 0;
    uint8_t canary_ = 0xff;
};

// ---- stream work ----
struct Op {
    std::string what;  // for messages, e.g. "kernel rope_kv_write"
    std::function<Result()> run;
    bool always = false;  // runs even after a sticky error (event records)
    bool kernel = false;  // a kernel launch: the next programmatic launch may overlap it
};

struct Event;

struct Stream {
    Context *ctx = nullptr;
    bool is_null = false;
    std::thread worker;
    std::mutex mu;
    std::condition_variable cv;       // work arrived / stop
    std::condition_variable idle_cv;  // queue drained
    std::deque<Op> queue;
    bool busy = false;
    bool stopping = false;
    // Capture state (guarded by the driver's global mutex).
    bool capturing = false;
    bool capture_invalid = false;
    std::string capture_invalid_why;
    int capture_mode = 0;
    std::thread::id capture_thread;
    std::vector<Op> captured;
};

struct Event {
    Context *ctx = nullptr;
    std::mutex mu;
    std::condition_variable cv;
    bool recorded = false;   // cuEventRecord called at least once
    bool complete = false;   // the stream reached the last record
    bool captured = false;   // last recorded into a capture
    uint64_t generation = 0; // records issued
    uint64_t completed_generation = 0;
    uint64_t ns = 0;         // CLOCK_MONOTONIC when reached
};

struct Module;
struct Function {
    Module *mod = nullptr;
    const sbemu_kernel_desc *k = nullptr;
    int max_dynamic_shared = 48 * 1024;
    bool dynamic_shared_opted_in = false;
    int carveout = -1;
    std::atomic<bool> loaded{false};          // launched once outside a capture
    std::atomic<size_t> static_shared{0};     // largest seen in a block
};

struct Module {
    Context *ctx = nullptr;
    void *dl = nullptr;
    int memfd = -1;
    const sbemu_module_desc *desc = nullptr;
    std::vector<std::unique_ptr<Function>> functions;
};

struct Graph {
    Context *ctx = nullptr;
    bool executable = false;
    std::shared_ptr<const std::vector<Op>> ops;
};

struct Device;
struct Context {
    Device *dev = nullptr;
    int retains = 0;
    std::atomic<int> sticky{0};
    std::string sticky_detail;  // guarded by the global mutex
    Stream *null_stream = nullptr;
    std::set<Stream *> streams;
    std::set<Event *> events;
    std::set<Module *> modules;
    std::set<Graph *> graphs;  // executable graphs too
    uint64_t incarnation = 0;  // bumps when the primary context is reset
};

struct Device {
    int ordinal = 0;
    Context primary;
};

// A kernel launch with its arguments copied (cuLaunchKernel returns before
// the kernel runs, and a captured launch replays much later).
struct Launch {
    Function *f = nullptr;
    Context *ctx = nullptr;
    sbemu_dim3 grid{}, block{};
    unsigned dynamic_shared = 0;
    std::vector<unsigned char> args;  // packed values
    std::vector<void *> params;       // pointers into args
    bool programmatic = false;        // cuLaunchKernelEx with programmatic stream serialization
};

// ---- access counters (counters.cpp) ----
// What one launch's loads and stores did, per space and direction, in the
// units Nsight Compute reports: warp requests, 32-byte sectors and the bytes
// used of them (global), wavefronts and their ideal count (shared).
struct SpaceCounts {
    uint64_t requests = 0, sectors = 0, bytes = 0;  // bytes: distinct bytes the lanes asked for
    uint64_t wavefronts = 0, ideal_wavefronts = 0;
    void Add(const SpaceCounts &o);
};
struct LaunchCounts {
    SpaceCounts global_ld, global_st, ldgsts, shared_ld, shared_st;
    void Add(const LaunchCounts &o);
};
enum class AccessKind : uint8_t { Load, Store, CpAsyncRead, CpAsyncWrite };
// BlockCounter groups one block's accesses into warp requests: the n-th
// access of a code site by each lane of a warp is one request (lanes run
// the same instruction stream), folded into counts once every live lane of
// the warp has passed it.
class BlockCounter {
public:
    BlockCounter(const std::vector<std::pair<uintptr_t, uintptr_t>> *global, uintptr_t dyn, size_t dyn_bytes,
                 unsigned nwarps);
    ~BlockCounter();
    void AddShared(uintptr_t p, size_t bytes);
    void Access(unsigned warp, unsigned lane, const void *site, uintptr_t addr, unsigned bytes, AccessKind kind);
    // Fold the requests every live lane of each warp has passed; live[w] is
    // warp w's mask of lanes that exist and have not exited.
    void Flush(const std::vector<unsigned> &live);
    void FlushAll();
    LaunchCounts counts;

private:
    struct Impl;
    Impl *impl_;
};
// WriteCounters appends a launch's counters to the counters file as one
// JSON line (a mutex keeps lines whole); an error says why it could not.
Result WriteCounters(const std::string &path, const Launch &l, const LaunchCounts &c, uint64_t ns);

// Runs every block of a launch on the worker pool; the result names the
// first fault, barrier divergence or deadlock, or (STEPBENCH_EMU_CHECK_PDL)
// a programmatic launch's access to its predecessor's data before its
// griddepcontrol.wait.
Result Execute(const Launch &l);
// ForgetPreviousGrid: the stream work this host thread runs next does not
// follow a kernel (a copy, a host op, a graph's start), so a programmatic
// launch after it overlaps nothing. Stream workers call it before every
// op that is not a kernel.
void ForgetPreviousGrid();
// OpaquePreviousGrid: the work just run was a library's kernel (cuBLAS,
// NCCL: sbemu_host_op) whose accesses are not seen; a programmatic launch
// after it may touch no device memory before its wait.
void OpaquePreviousGrid(const std::string &what);
// Runs fn(i) for i < n on the pool (used by the cuBLAS stand-in).
void ParallelFor(size_t n, const std::function<void(size_t)> &fn);
// The pool's kernel-side services (abi.h).
const sbemu_api *KernelAPI();
void StartPool(const Settings &s);

// Global driver state; every API entry takes mu.
struct Driver {
    std::mutex mu;
    bool initialized = false;
    Settings settings;
    std::vector<std::unique_ptr<Device>> devices;
    Memory memory;
    std::set<void *> handles;  // live streams, events, modules, functions, graphs
    uint64_t total_bytes = 0;
    uint64_t launches = 0;
};
Driver &D();

// Stream work.
Stream *NewStream(Context *ctx, bool is_null);
void DestroyStream(Stream *s);  // waits for its work
// Enqueue or, while the stream is capturing, record. Needs D().mu held.
void Submit(Stream *s, Op op);
// Waits until the stream has drained (D().mu must NOT be held).
void Drain(Stream *s);
void SetSticky(Context *ctx, const Result &r);
std::string StickyDetail(Context *ctx);
void ClearSticky(Context *ctx);

uint64_t NowNs();

}  // namespace emu

#endif

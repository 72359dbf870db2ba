// exec.cpp — running kernels: a pool of host threads takes the blocks of a
// launch; each block's threads are fibers on one host thread, switched only
// at __syncthreads, warp collectives and exit, in the schedule order the
// settings give (forward, reverse, or seeded random). Barriers check that
// every live thread waits at the same call site; warp collectives check
// their masks; a block in which nothing can run is a deadlock. Faults in a
// fiber (SIGSEGV on a guard page, ...) end the launch with CUDA's sticky
// error code and a message naming the allocation, byte offset, block and
// thread.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cinttypes>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "emu.h"

extern "C" void sbemu_swap(void **save_sp, void *load_sp);
extern "C" void sbemu_fiber_start(void);

namespace emu {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxSharedOptin = 232448;
constexpr size_t kDefaultSharedLimit = 48 * 1024;
constexpr size_t kPage = 4096;
constexpr int kMaxWorkers = 64;
constexpr size_t kAltStack = 64 * 1024;
constexpr unsigned kMaxExchangeBytes = 256;

enum FiberStateKind : uint8_t { kRunnable, kAtBarrier, kInExchange, kExited };

struct Worker;

struct AsyncCopy {
    void *dst;
    const void *src;
    unsigned bytes;
};

struct Fiber {
    void *sp = nullptr;
    sbemu_thread *self = nullptr;
    Worker *w = nullptr;
    uint8_t state = kRunnable;
    const char *wait_kind = nullptr;
    const char *wait_file = nullptr;
    int wait_line = 0;
    int held = -1;  // exchange whose slots this lane may still read
    unsigned commits = 0;  // cp.async groups committed (names the poison of a refill)
    bool waited = false;   // passed griddepcontrol.wait (programmatic dependent launch)
    // cp.async copies not yet complete: the open group, then committed ones (oldest first).
    std::vector<AsyncCopy> open_copies;
    std::deque<std::vector<AsyncCopy>> copy_groups;
};

struct Exchange {
    unsigned mask = 0, arrived = 0, bytes = 0;
    const char *kind = nullptr, *file = nullptr;
    int line = 0;
    int refs = 0;
    bool pending = false;
    unsigned char slots[32 * kMaxExchangeBytes];
};

struct Warp {
    std::vector<std::unique_ptr<Exchange>> xs;
    unsigned exited = 0;
    unsigned exists = 0;  // lanes that exist (the last warp may be partial)
};

struct Block {
    const Launch *l = nullptr;
    sbemu_dim3 idx{};
    unsigned nthreads = 0, nwarps = 0, live = 0;
    unsigned bar_arrived = 0, bar_first = 0;
    unsigned long long bar_gen = 0;  // barriers released so far
    const char *bar_file = nullptr;
    int bar_line = 0;
    std::vector<Warp> warps;
    int error_code = 0;
    std::string error;
    unsigned long long gen = 0;
    size_t static_shared = 0;
    // smem_retire calls done, by barrier phase: the first of a phase poisons.
    std::vector<std::pair<unsigned long long, const void *>> retired;
};

struct Worker {
    int index = 0;
    unsigned char *stacks = nullptr;  // kMaxThreadsPerBlock fiber stacks, SBEMU_STACK_BYTES-aligned
    unsigned guarded = 0;             // fibers whose guard page is set
    std::vector<Fiber> fibers;
    void *sched_sp = nullptr;
    sigjmp_buf jmp;
    volatile sig_atomic_t in_kernel = 0;
    Fiber *current = nullptr;
    // The forward, reverse and random schedules run a round's fibers in
    // order: a fiber that yields switches straight to the next runnable one
    // of the round (what the scheduler would run next), and only the last
    // returns to the scheduler. null: every yield returns to it.
    const std::vector<unsigned> *order = nullptr;
    size_t pos = 0;  // the running fiber's place in order
    // Warp-serial: order is one warp's lanes, passed in while no barrier
    // is released (the block's bar_gen is still phase).
    bool serial = false;
    unsigned long long phase = 0;
    std::vector<unsigned> lanes;
    unsigned char *dyn = nullptr;  // dynamic shared memory of the running block
    Block block;
    BlockCounter *counter = nullptr;  // the running block's access counters (STEPBENCH_EMU_COUNTERS)
    struct PdlRecorder *pdl = nullptr;  // the running launch's PDL record (STEPBENCH_EMU_CHECK_PDL)
    unsigned long long gen = 0;
    // Fault details, written by the signal handler.
    int fault_sig = 0, fault_code = 0;
    uintptr_t fault_addr = 0;
    bool fault_write = false;
};

// Workers are found from the signal handler by pthread_self, without locks
// or thread-local storage (neither is async-signal-safe).
pthread_t g_threads[kMaxWorkers];
Worker *g_workers[kMaxWorkers];
std::atomic<int> g_nworkers{0};
struct sigaction g_prev[NSIG];

Worker *WorkerOfThisThread() {
    const pthread_t me = pthread_self();
    const int n = g_nworkers.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (pthread_equal(g_threads[i], me)) return g_workers[i];
    }
    return nullptr;
}

void Forward(int sig, siginfo_t *si, void *uc) {
    const struct sigaction &p = g_prev[sig];
    if (p.sa_flags & SA_SIGINFO) {
        if (p.sa_sigaction) p.sa_sigaction(sig, si, uc);
        return;
    }
    if (p.sa_handler == SIG_IGN) return;
    if (p.sa_handler == SIG_DFL) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    p.sa_handler(sig);
}

void OnSignal(int sig, siginfo_t *si, void *uc) {
    Worker *w = WorkerOfThisThread();
    if (w == nullptr || !w->in_kernel) {
        Forward(sig, si, uc);
        return;
    }
    w->fault_sig = sig;
    w->fault_code = si->si_code;
    w->fault_addr = reinterpret_cast<uintptr_t>(si->si_addr);
    const auto *u = static_cast<const ucontext_t *>(uc);
    w->fault_write = (u->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    w->in_kernel = 0;
    siglongjmp(w->jmp, 1);
}

void InstallHandlers() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = OnSignal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;  // NODEFER: siglongjmp need not restore the mask
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, &g_prev[sig]);
}

// ---- programmatic dependent launch (STEPBENCH_EMU_CHECK_PDL) ----
// A grid launched with programmatic stream serialization may run beside its
// predecessor on the stream until it executes griddepcontrol.wait. The
// emulator runs grids one after another, so it cannot show the race by
// timing; instead every grid's global reads and writes are recorded (the
// instrumented build's access hook), and a programmatic grid's access made
// before its thread waited that meets the predecessor's writes (or, for a
// store, its reads) fails the launch, naming both kernels and the buffer.

// IntervalSet is a set of byte ranges [lo, hi), kept merged.
class IntervalSet {
public:
    void Add(uintptr_t lo, uintptr_t hi) {
        if (has_last_ && lo >= last_->first && lo <= last_->second) {  // the common case: the next bytes of a stream
            if (hi <= last_->second) return;
            last_->second = hi;
            Absorb(last_);
            return;
        }
        auto it = m_.upper_bound(lo);
        if (it != m_.begin() && std::prev(it)->second >= lo) {
            it = std::prev(it);
            it->second = std::max(it->second, hi);
        } else {
            it = m_.emplace_hint(it, lo, hi);
        }
        Absorb(it);
        last_ = it;
        has_last_ = true;
    }
    // Overlap reports whether [lo, hi) meets the set, and where first.
    bool Overlap(uintptr_t lo, uintptr_t hi, uintptr_t *at) const {
        auto it = m_.upper_bound(lo);
        if (it != m_.begin() && std::prev(it)->second > lo) {
            *at = lo;
            return true;
        }
        if (it != m_.end() && it->first < hi) {
            *at = it->first;
            return true;
        }
        return false;
    }
    void Merge(const IntervalSet &o) {
        for (const auto &r : o.m_) Add(r.first, r.second);
    }

private:
    using Map = std::map<uintptr_t, uintptr_t>;
    void Absorb(Map::iterator it) {
        auto next = std::next(it);
        while (next != m_.end() && next->first <= it->second) {
            it->second = std::max(it->second, next->second);
            if (has_last_ && last_ == next) has_last_ = false;
            next = m_.erase(next);
        }
    }
    Map m_;
    Map::iterator last_;
    bool has_last_ = false;
};

// GridAccesses is what one finished grid touched in device memory: what a
// programmatic launch after it must not touch before its wait. earlier is
// the grid before it, when that one may still run as well (this grid was a
// programmatic launch that let its dependents begin before it waited, or
// never waited). opaque: a library's work (cuBLAS, NCCL) whose accesses are
// not seen, so every device byte counts as written.
struct GridAccesses {
    std::string kernel;
    IntervalSet reads, writes;
    bool opaque = false;
    std::shared_ptr<const GridAccesses> earlier;
};

// The stream whose work this host thread runs: its last finished grid.
thread_local std::shared_ptr<const GridAccesses> tl_previous;

// PdlRecorder is one pool worker's share of a launch's record.
struct PdlRecorder {
    const std::vector<std::pair<uintptr_t, uintptr_t>> *global = nullptr;  // live allocations, sorted
    const GridAccesses *before = nullptr;  // what a programmatic launch must not touch before waiting; null: no check
    IntervalSet reads, writes;
    bool early_trigger = false;  // a thread let dependents begin before it waited
    bool unwaited_exit = false;  // a thread exited without waiting
    // The allocation the last global access fell in, and the gap between
    // allocations the last other one did (shared memory, a stack): most
    // accesses fall in the same as the one before, and are answered without
    // a search of global (every load and store of the launch comes here).
    uintptr_t hit_lo = 0, hit_hi = 0, gap_lo = 0, gap_hi = 0;
};

// InGlobal reports whether p is in a live allocation of p's recorder.
bool InGlobal(PdlRecorder &r, uintptr_t p) {
    if (p - r.hit_lo < r.hit_hi - r.hit_lo) return true;
    if (p - r.gap_lo < r.gap_hi - r.gap_lo) return false;
    const auto &ranges = *r.global;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(p, UINTPTR_MAX));
    if (it != ranges.begin() && p < std::prev(it)->second) {
        r.hit_lo = std::prev(it)->first;
        r.hit_hi = std::prev(it)->second;
        return true;
    }
    const uintptr_t lo = it == ranges.begin() ? 0 : std::prev(it)->second;
    const uintptr_t hi = it == ranges.end() ? UINTPTR_MAX : it->first;
    if (lo <= p && p < hi) r.gap_lo = lo, r.gap_hi = hi;
    return false;
}

[[noreturn]] void Fail(Fiber &f, int code, const std::string &msg);
std::string ArgumentsInto(const Launch &l, const Alloc &a);

// PdlRace describes a pre-wait access at `at` that meets grid g's data.
std::string PdlRace(const Fiber &f, const GridAccesses &g, uintptr_t at, bool write, bool other_wrote) {
    const Launch &l = *f.w->block.l;
    std::string buffer = "device memory";
    Alloc a;
    if (D().memory.Describe(at, &a)) {
        buffer = "byte offset " + std::to_string((long long)at - (long long)a.user) + " of " + D().memory.Label(a) +
                 ArgumentsInto(l, a);
    }
    const std::string did = g.opaque ? "may have written" : other_wrote ? "wrote" : "read";
    return "kernel " + std::string(l.f->k->name) + " " + (write ? "writes " : "reads ") + buffer +
           " before griddepcontrol.wait, but the grid before it on the stream (" + g.kernel + ") " + did +
           " it: launched with programmatic stream serialization the two may run at once, a race on the GPU "
           "(wait first, SB_PDL_WAIT)";
}

void RecordPdl(Fiber &f, PdlRecorder &p, uintptr_t addr, unsigned bytes, bool write) {
    if (!InGlobal(p, addr)) return;  // shared memory, the fiber's stack
    const uintptr_t end = addr + bytes;
    if (!f.waited) {
        for (const GridAccesses *g = p.before; g != nullptr; g = g->earlier.get()) {
            uintptr_t at = 0;
            if (g->opaque) Fail(f, kLaunchFailed, PdlRace(f, *g, addr, write, true));
            if (g->writes.Overlap(addr, end, &at)) Fail(f, kLaunchFailed, PdlRace(f, *g, at, write, true));
            if (write && g->reads.Overlap(addr, end, &at)) Fail(f, kLaunchFailed, PdlRace(f, *g, at, write, false));
        }
    }
    (write ? p.writes : p.reads).Add(addr, end);
}

// LaunchPdl is a launch's PDL record: the allocations as it began and one
// recorder per pool worker, merged into the stream's previous grid at the end.
struct LaunchPdl {
    std::vector<std::pair<uintptr_t, uintptr_t>> global;
    std::vector<PdlRecorder> workers;
};

}  // namespace

void ForgetPreviousGrid() { tl_previous.reset(); }

void OpaquePreviousGrid(const std::string &what) {
    if (!D().settings.check_pdl) return;
    auto g = std::make_shared<GridAccesses>();
    g->kernel = what;
    g->opaque = true;
    tl_previous = g;
}

namespace {

// ---- the fiber side ----

sbemu_thread *Self() {
    unsigned long sp;
    __asm__("mov %%rsp, %0" : "=r"(sp));
    return reinterpret_cast<sbemu_thread *>((sp & ~(unsigned long)(SBEMU_STACK_BYTES - 1)) + SBEMU_STACK_BYTES -
                                            sizeof(sbemu_thread));
}

Fiber &Me() { return *static_cast<Fiber *>(Self()->fiber); }

// Yield leaves the fiber: for the next runnable fiber of the round, as the
// scheduler would pick it (half the switches of going through it), or the
// scheduler, at the round's end, after a failure and in the warp-serial
// schedules.
void Yield(Fiber &f) {
    Worker &w = *f.w;
    if (w.order != nullptr && w.block.error_code == 0 && (!w.serial || w.block.bar_gen == w.phase)) {
        const std::vector<unsigned> &order = *w.order;
        for (size_t i = w.pos + 1; i < order.size(); i++) {
            Fiber &g = w.fibers[order[i]];
            if (g.state != kRunnable) continue;
            w.pos = i;
            w.current = &g;
            sbemu_swap(&f.sp, g.sp);
            return;
        }
    }
    sbemu_swap(&f.sp, w.sched_sp);
}

std::string Dim(const sbemu_dim3 &d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string Site(const char *file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

std::string Who(const Fiber &f) {
    const sbemu_thread *t = f.self;
    return "thread " + Dim(t->thread_idx) + " (warp " + std::to_string(t->warp) + " lane " + std::to_string(t->lane) +
           ")";
}

std::string Lanes(unsigned mask) {
    std::string out;
    for (int i = 0; i < 32;) {
        if (!((mask >> i) & 1u)) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < 32 && ((mask >> (j + 1)) & 1u)) j++;
        if (!out.empty()) out += ",";
        out += j == i ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
        i = j + 1;
    }
    return out.empty() ? "none" : out;
}

std::string Hex32(unsigned v) {
    char buf[16];
    snprintf(buf, sizeof buf, "%#010x", v);
    return buf;
}

// Fail ends the block: the scheduler sees the error and never resumes it.
[[noreturn]] void Fail(Fiber &f, int code, const std::string &msg) {
    Block &b = f.w->block;
    if (b.error_code == 0) {
        b.error_code = code;
        b.error = Who(f) + ": " + msg;
    }
    for (;;) Yield(f);
}

bool SameSite(const char *fa, int la, const char *fb, int lb) {
    return la == lb && (fa == fb || (fa && fb && strcmp(fa, fb) == 0));
}

void ReleaseBarrier(Worker &w) {
    Block &b = w.block;
    for (unsigned t = 0; t < b.nthreads; t++) {
        if (w.fibers[t].state == kAtBarrier) w.fibers[t].state = kRunnable;
    }
    b.bar_arrived = 0;
    b.bar_gen++;
}

void SyncThreads(const char *file, int line) {
    Fiber &f = Me();
    Worker &w = *f.w;
    Block &b = w.block;
    if (b.bar_arrived == 0) {
        b.bar_file = file;
        b.bar_line = line;
        b.bar_first = f.self->linear_tid;
    } else if (!SameSite(file, line, b.bar_file, b.bar_line)) {
        Fail(f, kLaunchFailed,
             "__syncthreads divergence: waits at " + Site(file, line) + " while " + Who(w.fibers[b.bar_first]) +
                 " waits at " + Site(b.bar_file, b.bar_line));
    }
    if (++b.bar_arrived == b.live) {
        ReleaseBarrier(w);
        return;
    }
    f.state = kAtBarrier;
    f.wait_kind = "__syncthreads";
    f.wait_file = file;
    f.wait_line = line;
    Yield(f);
}

void Release(Warp &warp, Fiber &f) {
    if (f.held >= 0) {
        warp.xs[f.held]->refs--;
        f.held = -1;
    }
}

const void *WarpExchange(unsigned mask, const void *data, unsigned bytes, const char *kind, const char *file,
                         int line) {
    Fiber &f = Me();
    Worker &w = *f.w;
    Block &b = w.block;
    const unsigned lane = f.self->lane;
    Warp &warp = b.warps[f.self->warp];
    Release(warp, f);
    // Messages are built only on failure: this is the hot path of every shuffle.
    auto where = [&] { return kind + std::string(" at ") + Site(file, line); };
    if (bytes > kMaxExchangeBytes) Fail(f, kLaunchFailed, where() + ": exchange of more than 256 bytes per lane");
    if (!((mask >> lane) & 1u)) {
        Fail(f, kLaunchFailed, where() + ": mask " + Hex32(mask) + " does not include the calling lane");
    }
    if (mask & ~warp.exists) {
        Fail(f, kLaunchFailed, where() + ": mask " + Hex32(mask) + " names lanes " + Lanes(mask & ~warp.exists) +
                                   ", which do not exist (the block has " + std::to_string(b.nthreads) + " threads)");
    }
    if (mask & warp.exited) {
        Fail(f, kLaunchFailed, where() + ": mask " + Hex32(mask) + " names lanes " + Lanes(mask & warp.exited) +
                                   ", which have already exited");
    }
    Exchange *x = nullptr;
    int xi = -1;
    for (size_t i = 0; i < warp.xs.size(); i++) {
        Exchange *p = warp.xs[i].get();
        if (!p->pending || !(p->mask & mask)) continue;
        if (p->mask != mask || p->bytes != bytes || (p->kind != kind && strcmp(p->kind, kind) != 0)) {
            Fail(f, kLaunchFailed, where() + " with mask " + Hex32(mask) + " while lanes " + Lanes(p->arrived) +
                                       " wait in " + p->kind + " at " + Site(p->file, p->line) + " with mask " +
                                       Hex32(p->mask));
        }
        x = p;
        xi = (int)i;
        break;
    }
    if (x == nullptr) {
        for (size_t i = 0; i < warp.xs.size(); i++) {
            if (!warp.xs[i]->pending && warp.xs[i]->refs == 0) {
                x = warp.xs[i].get();
                xi = (int)i;
                break;
            }
        }
        if (x == nullptr) {
            warp.xs.push_back(std::make_unique<Exchange>());
            xi = (int)warp.xs.size() - 1;
            x = warp.xs.back().get();
        }
        x->mask = mask;
        x->arrived = 0;
        x->bytes = bytes;
        x->kind = kind;
        x->file = file;
        x->line = line;
        x->pending = true;
    }
    if (bytes > 0) memcpy(x->slots + lane * bytes, data, bytes);
    x->arrived |= 1u << lane;
    if (x->arrived == mask) {
        x->pending = false;
        x->refs = __builtin_popcount(mask);
        const unsigned base = f.self->warp * 32;
        for (unsigned l = 0; l < 32; l++) {
            if (!((mask >> l) & 1u)) continue;
            Fiber &g = w.fibers[base + l];
            g.held = xi;
            if (&g != &f) g.state = kRunnable;
        }
        return x->slots;
    }
    f.state = kInExchange;
    f.wait_kind = kind;
    f.wait_file = file;
    f.wait_line = line;
    Yield(f);
    return warp.xs[f.held]->slots;
}

void SharedAcquire(void *storage, unsigned long long *gen, size_t bytes, const char *name, const char *file,
                   int line) {
    Fiber &f = Me();
    Block &b = f.w->block;
    if (*gen == b.gen) return;
    *gen = b.gen;
    memset(storage, D().settings.poison, bytes);
    if (f.w->counter) f.w->counter->AddShared(reinterpret_cast<uintptr_t>(storage), bytes);
    b.static_shared += bytes;
    Function *fn = b.l->f;
    size_t seen = fn->static_shared.load();
    while (seen < b.static_shared && !fn->static_shared.compare_exchange_weak(seen, b.static_shared)) {
    }
    const size_t limit = fn->dynamic_shared_opted_in ? kMaxSharedOptin : kDefaultSharedLimit;
    if (b.static_shared + b.l->dynamic_shared > limit) {
        Fail(f, kLaunchOutOfResources,
             "too many resources requested for launch: static shared memory " + std::to_string(b.static_shared) +
                 " bytes (reaching '" + name + "' at " + Site(file, line) + ") + dynamic " +
                 std::to_string(b.l->dynamic_shared) + " bytes > " + std::to_string(limit) + " bytes");
    }
}

void Trap(int code, const char *file, int line, const char *what) {
    Fail(Me(), code, std::string(what) + " at " + Site(file, line));
}

// PoisonStale fills dead shared memory: with the default poison, 16-bit
// NaN patterns 0xff81.. numbered by serial (a NaN as bf16, and two of them
// a NaN as fp32), so that a stale read shows and a debugger can tell which
// refill or retirement it came from; with STEPBENCH_EMU_POISON set, that byte.
void PoisonStale(void *p, size_t bytes, unsigned long long serial) {
    const uint8_t byte = D().settings.poison;
    if (byte != 0xff) {
        memset(p, byte, bytes);
        return;
    }
    const uint16_t pattern = (uint16_t)(0xff81u + serial % 126u);
    auto *b = static_cast<unsigned char *>(p);
    for (size_t i = 0; i + 1 < bytes; i += 2) memcpy(b + i, &pattern, 2);
    if (bytes % 2) b[bytes - 1] = 0xff;
}

// CpAsync queues the copy and poisons its destination at once: until the
// wait that completes it, what the destination holds is undefined on a GPU
// (old data, new data or a mix), so reading it then shows as NaN here.
void CpAsync(void *dst, const void *src, unsigned bytes) {
    Fiber &f = Me();
    if (bytes != 4 && bytes != 8 && bytes != 16) Fail(f, kLaunchFailed, "cp.async of " + std::to_string(bytes) + " bytes (4, 8 or 16)");
    if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0) {
        Fail(f, kMisalignedAddress, "cp.async of " + std::to_string(bytes) + " bytes at a misaligned address");
    }
    PoisonStale(dst, bytes, f.commits);
    f.open_copies.push_back({dst, src, bytes});
    if (PdlRecorder *p = f.w->pdl) RecordPdl(f, *p, reinterpret_cast<uintptr_t>(src), bytes, false);
    if (BlockCounter *c = f.w->counter) {
        const void *site = __builtin_return_address(0);
        c->Access(f.self->warp, f.self->lane, site, reinterpret_cast<uintptr_t>(src), bytes, AccessKind::CpAsyncRead);
        c->Access(f.self->warp, f.self->lane, site, reinterpret_cast<uintptr_t>(dst), bytes, AccessKind::CpAsyncWrite);
    }
}

// SmemRetire poisons a dead buffer once per barrier phase (every thread of
// the block may call it after the barrier that ends the buffer's use).
void SmemRetire(void *p, unsigned bytes) {
    Block &b = Me().w->block;
    const std::pair<unsigned long long, const void *> key{b.bar_gen, p};
    for (const auto &r : b.retired) {
        if (r == key) return;
    }
    b.retired.push_back(key);
    PoisonStale(p, bytes, b.bar_gen);
}

void CpAsyncCommit() {
    Fiber &f = Me();
    f.commits++;
    f.copy_groups.push_back(std::move(f.open_copies));
    f.open_copies.clear();
}

// CpAsyncWait completes every committed group but the newest `allowed`.
void CpAsyncWait(int allowed) {
    Fiber &f = Me();
    while ((int)f.copy_groups.size() > std::max(allowed, 0)) {
        for (const AsyncCopy &c : f.copy_groups.front()) memcpy(c.dst, c.src, c.bytes);
        f.copy_groups.pop_front();
    }
}

void OnExit(Fiber &f) {
    Worker &w = *f.w;
    Block &b = w.block;
    const unsigned lane = f.self->lane;
    Warp &warp = b.warps[f.self->warp];
    Release(warp, f);
    f.state = kExited;
    if (!f.waited && w.pdl) w.pdl->unwaited_exit = true;
    warp.exited |= 1u << lane;
    b.live--;
    for (auto &p : warp.xs) {
        if (p->pending && ((p->mask >> lane) & 1u)) {
            Fail(f, kLaunchFailed, "exits while lanes " + Lanes(p->arrived) + " wait for it in " + p->kind + " at " +
                                       Site(p->file, p->line) + " (mask " + Hex32(p->mask) + ")");
        }
    }
    if (b.bar_arrived > 0 && b.bar_arrived == b.live) ReleaseBarrier(w);
}

extern "C" void FiberMain(void *) {
    Fiber &f = Me();
    const Launch &l = *f.w->block.l;
    l.f->k->invoke(l.f->k->fn, l.params.data());
    OnExit(f);
    for (;;) Yield(f);
}

// Access is the hook of an instrumented load or store (device.h's __tsan_* definitions).
void Access(const void *addr, unsigned bytes, int is_write, const void *site) {
    Fiber &f = Me();
    if (BlockCounter *c = f.w->counter) {
        c->Access(f.self->warp, f.self->lane, site, reinterpret_cast<uintptr_t>(addr), bytes,
                  is_write ? AccessKind::Store : AccessKind::Load);
    }
    if (PdlRecorder *p = f.w->pdl) RecordPdl(f, *p, reinterpret_cast<uintptr_t>(addr), bytes, is_write != 0);
}

// PdlWait is griddepcontrol.wait: every grid before this one has finished
// (the emulator runs them in order), so it only records that the thread waited.
void PdlWait() { Me().waited = true; }

// PdlLaunchDependents is griddepcontrol.launch_dependents: before the
// thread's wait, the next programmatic grid may overlap this one's
// predecessor as well.
void PdlLaunchDependents() {
    Fiber &f = Me();
    if (!f.waited && f.w->pdl) f.w->pdl->early_trigger = true;
}

// LiveLanes are each warp's lanes that exist and have not exited.
std::vector<unsigned> LiveLanes(const Block &b) {
    std::vector<unsigned> out(b.nwarps);
    for (unsigned i = 0; i < b.nwarps; i++) out[i] = b.warps[i].exists & ~b.warps[i].exited;
    return out;
}

// FlushCounters folds the warp requests every live lane has passed.
void FlushCounters(Worker &w) {
    if (w.counter) w.counter->Flush(LiveLanes(w.block));
}

const sbemu_api kAPI = {SBEMU_ABI_VERSION, SyncThreads, WarpExchange, SharedAcquire, Trap, CpAsync, CpAsyncCommit, CpAsyncWait,
                        SmemRetire, Access, PdlWait, PdlLaunchDependents};

// ---- the scheduler side ----

uint64_t Mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void Permute(std::vector<unsigned> &order, uint64_t seed) {
    for (size_t i = order.size(); i > 1; i--) {
        seed = Mix(seed);
        std::swap(order[i - 1], order[seed % i]);
    }
}

void FillOrder(std::vector<unsigned> &order, unsigned n, uint64_t seed) {
    order.resize(n);
    const Schedule s = D().settings.schedule;
    for (unsigned i = 0; i < n; i++) order[i] = s == Schedule::Reverse ? n - 1 - i : i;
    if (s == Schedule::Random) Permute(order, seed);
}

void PrepareFiber(Worker &w, unsigned t, const Block &b) {
    const sbemu_dim3 bd = b.l->block;
    Fiber &f = w.fibers[t];
    unsigned char *base = w.stacks + (size_t)t * SBEMU_STACK_BYTES;
    if (t >= w.guarded) {
        mprotect(base, kPage, PROT_NONE);
        w.guarded = t + 1;
    }
    auto *self = reinterpret_cast<sbemu_thread *>(base + SBEMU_STACK_BYTES - sizeof(sbemu_thread));
    self->thread_idx = {t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
    self->block_idx = b.idx;
    self->block_dim = bd;
    self->grid_dim = b.l->grid;
    self->lane = t % 32;
    self->warp = t / 32;
    self->linear_tid = t;
    self->block_gen = b.gen;
    self->dyn_shared = w.dyn;
    self->fiber = &f;
    f.self = self;
    f.w = &w;
    f.state = kRunnable;
    f.held = -1;
    f.open_copies.clear();
    f.copy_groups.clear();
    f.commits = 0;
    f.waited = false;
    // Initial frame for sbemu_swap: r15 r14 r13 r12 rbx rbp, then the return
    // address; after the swap's ret the stack is 16-byte aligned at the call.
    auto *top = reinterpret_cast<uint64_t *>(self);
    uint64_t *sp = top - 9;
    sp[0] = 0;                                              // r15
    sp[1] = 0;                                              // r14
    sp[2] = reinterpret_cast<uint64_t>(&FiberMain);         // r13: function
    sp[3] = 0;                                              // r12: argument
    sp[4] = 0;                                              // rbx
    sp[5] = 0;                                              // rbp
    sp[6] = reinterpret_cast<uint64_t>(&sbemu_fiber_start); // return address
    f.sp = sp;
}

std::string DescribeDeadlock(Worker &w) {
    Block &b = w.block;
    // One description per waiting warp exchange; warps in a row that wait
    // alike are named once ("in warps 0-15, ...").
    std::vector<std::pair<unsigned, std::string>> waits;
    for (unsigned wi = 0; wi < b.nwarps; wi++) {
        for (auto &p : b.warps[wi].xs) {
            if (!p->pending) continue;
            const unsigned missing = p->mask & ~p->arrived;
            std::string d = "lanes " + Lanes(p->arrived) + " wait in " + p->kind + " at " + Site(p->file, p->line) +
                            " (mask " + Hex32(p->mask) + ") for lanes " + Lanes(missing);
            for (unsigned l = 0; l < 32; l++) {
                if (!((missing >> l) & 1u)) continue;
                const Fiber &g = w.fibers[wi * 32 + l];
                d += g.state == kAtBarrier ? ", which wait at __syncthreads at " + Site(g.wait_file, g.wait_line)
                     : g.state == kInExchange
                         ? ", which wait in " + std::string(g.wait_kind) + " at " + Site(g.wait_file, g.wait_line)
                         : ", which exited";
                break;  // the first missing lane speaks for the group
            }
            waits.emplace_back(wi, d);
        }
    }
    std::string msg = "deadlock: no thread can run;";
    for (size_t i = 0; i < waits.size();) {
        size_t j = i + 1;
        while (j < waits.size() && waits[j].second == waits[i].second && waits[j].first == waits[j - 1].first + 1) j++;
        const unsigned first = waits[i].first, last = waits[j - 1].first;
        msg += first == last ? " in warp " + std::to_string(first)
                             : " in warps " + std::to_string(first) + "-" + std::to_string(last);
        msg += ", " + waits[i].second + ";";
        i = j;
    }
    if (b.bar_arrived > 0) {
        msg += " " + std::to_string(b.bar_arrived) + " of " + std::to_string(b.live) +
               " live threads wait at __syncthreads at " + Site(b.bar_file, b.bar_line);
    }
    return msg;
}

// RunFiber runs one fiber until it yields; false when the block failed.
bool RunFiber(Worker &w, Fiber &f) {
    w.current = &f;
    w.in_kernel = 1;
    sbemu_swap(&w.sched_sp, f.sp);
    w.in_kernel = 0;
    return w.block.error_code == 0;
}

// RoundOver ends a scheduling round: the access counters fold what every
// lane passed; true when the block is done, or stuck (a deadlock, recorded).
bool RoundOver(Worker &w, bool ran) {
    Block &b = w.block;
    FlushCounters(w);
    if (b.live == 0) return true;
    if (!ran) {
        b.error_code = kLaunchFailed;
        b.error = DescribeDeadlock(w);
        return true;
    }
    return false;
}

// RunWarpSerial runs each warp alone, in warp order (or reversed), until all
// of its lanes wait at the block barrier or have exited; its lanes meet at
// warp collectives as in every schedule. A barrier's release starts the next
// phase from the first warp again, so no warp of a phase sees another's
// work of that phase: a missing barrier between a buffer's last reader and
// its refill shows.
// A pass over a warp's lanes is a chain: each yielding lane switches to the
// next runnable one of the pass (Yield) while the phase lasts.
void RunWarpSerial(Worker &w, bool reverse) {
    Block &b = w.block;
    struct Unset {
        Worker &w;
        ~Unset() { w.order = nullptr, w.serial = false; }
    } unset{w};
    w.order = &w.lanes;
    w.serial = true;
    for (;;) {
        bool ran = false;
        const unsigned long long phase = w.phase = b.bar_gen;
        for (unsigned k = 0; k < b.nwarps && b.bar_gen == phase; k++) {
            const unsigned wi = reverse ? b.nwarps - 1 - k : k;
            const unsigned first = wi * 32, last = std::min(b.nthreads, first + 32);
            w.lanes.clear();
            for (unsigned t = first; t < last; t++) w.lanes.push_back(t);
            for (bool warp_ran = true; warp_ran && b.bar_gen == phase;) {
                size_t i = 0;
                while (i < w.lanes.size() && w.fibers[w.lanes[i]].state != kRunnable) i++;
                warp_ran = i < w.lanes.size();
                if (warp_ran) {
                    w.pos = i;
                    if (!RunFiber(w, w.fibers[w.lanes[i]])) return;
                    ran = true;
                }
            }
        }
        if (RoundOver(w, ran)) return;
    }
}

void RunFibers(Worker &w, std::vector<unsigned> &order, uint64_t seed) {
    const Schedule schedule = D().settings.schedule;
    if (schedule == Schedule::WarpSerial || schedule == Schedule::WarpSerialReverse) {
        RunWarpSerial(w, schedule == Schedule::WarpSerialReverse);
        return;
    }
    const bool random = schedule == Schedule::Random;
    struct Unset {
        Worker &w;
        ~Unset() { w.order = nullptr; }
    } unset{w};
    w.order = &order;
    for (uint64_t round = 0;; round++) {
        if (random && round > 0) Permute(order, seed + round);
        // The round's first runnable fiber; each passes on to the next (Yield).
        size_t first = 0;
        while (first < order.size() && w.fibers[order[first]].state != kRunnable) first++;
        const bool ran = first < order.size();
        if (ran) {
            w.pos = first;
            if (!RunFiber(w, w.fibers[order[first]])) return;
        }
        if (RoundOver(w, ran)) return;
    }
}

std::string ArgumentsInto(const Launch &l, const Alloc &a) {
    std::string names = l.f->k->param_names ? l.f->k->param_names : "";
    std::vector<std::string> list;
    size_t start = 0;
    while (start <= names.size()) {
        size_t comma = names.find(',', start);
        if (comma == std::string::npos) comma = names.size();
        list.push_back(names.substr(start, comma - start));
        start = comma + 1;
    }
    std::string out;
    size_t off = 0;
    for (int i = 0; i < l.f->k->num_params; i++) {
        const unsigned size = l.f->k->param_sizes[i], align = l.f->k->param_aligns[i];
        off = (off + align - 1) / align * align;
        if (size == 8) {
            uint64_t v;
            memcpy(&v, l.args.data() + off, 8);
            if (v >= a.map && v < a.map + a.map_len) {
                if (!out.empty()) out += ", ";
                out += i < (int)list.size() && !list[i].empty() ? list[i] : "#" + std::to_string(i);
            }
        }
        off += size;
    }
    return out.empty() ? "" : " [argument " + out + "]";
}

Result FaultResult(Worker &w) {
    const Block &b = w.block;
    const Launch &l = *b.l;
    std::string who = "block " + Dim(b.idx) + " " + (w.current ? Who(*w.current) : "thread ?");
    const char *rw = w.fault_write ? "write" : "read";
    const uintptr_t addr = w.fault_addr;
    const uintptr_t stacks = reinterpret_cast<uintptr_t>(w.stacks);
    if (w.fault_sig == SIGFPE) return Result::Fail(kIllegalInstruction, "integer division by zero; " + who);
    if (w.fault_sig == SIGILL) return Result::Fail(kIllegalInstruction, "illegal instruction; " + who);
    if (w.fault_sig == SIGBUS) return Result::Fail(kMisalignedAddress, "bus error (misaligned address?); " + who);
    if (addr == 0 && w.fault_code == SI_KERNEL) {
        return Result::Fail(kMisalignedAddress,
                            "misaligned or invalid address (general protection fault, e.g. a 16-byte vector access "
                            "at an address not 16-byte aligned); " + who);
    }
    if (addr >= stacks && addr < stacks + (size_t)kMaxThreadsPerBlock * SBEMU_STACK_BYTES) {
        return Result::Fail(kHardwareStackError, "stack overflow (more than " +
                                                     std::to_string(SBEMU_STACK_BYTES / 1024) +
                                                     " KiB of local memory); " + who);
    }
    Alloc a;
    char hex[32];
    snprintf(hex, sizeof hex, "%#" PRIxPTR, addr);
    if (!D().memory.Describe(addr, &a)) {
        std::string what = addr < 65536 ? " (a null pointer plus an offset?)" : " (not device memory)";
        if (addr >= 65536 && D().memory.Nearest(addr, &a)) {
            const long long off = (long long)addr - (long long)a.user;
            what = " (not device memory: byte offset " + std::to_string(off) + " of the nearest, " + D().memory.Label(a) +
                   ArgumentsInto(l, a) + ")";
        }
        return Result::Fail(kIllegalAddress, std::string("illegal ") + rw + " at " + hex + what + "; " + who);
    }
    const long long off = (long long)addr - (long long)a.user;
    std::string where = std::string("illegal ") + rw + " at byte offset " + std::to_string(off) + " of " +
                        D().memory.Label(a) + ArgumentsInto(l, a);
    if (a.freed) {
        where += ", which was freed";
    } else if (off == (long long)a.size) {
        where += ", just past its end";
    } else if (off > (long long)a.size) {
        where += ", " + std::to_string(off - (long long)a.size) + " bytes past its end";
    } else if (off < 0) {
        where += ", " + std::to_string(-off) + " bytes before its start";
    }
    return Result::Fail(kIllegalAddress, where + "; " + who);
}

// LaunchCounting is one launch's access counting: the device allocations
// as the launch began (what a global address may fall in) and the sum of
// its blocks' counts.
struct LaunchCounting {
    std::vector<std::pair<uintptr_t, uintptr_t>> global;
    std::mutex mu;
    LaunchCounts total;
};

Result RunBlock(Worker &w, const Launch &l, unsigned linear, LaunchCounting *counting, LaunchPdl *pdl) {
    Block &b = w.block;
    const sbemu_dim3 g = l.grid, bd = l.block;
    b.l = &l;
    b.idx = {linear % g.x, (linear / g.x) % g.y, linear / (g.x * g.y)};
    b.nthreads = bd.x * bd.y * bd.z;
    b.nwarps = (b.nthreads + 31) / 32;
    b.live = b.nthreads;
    b.bar_arrived = 0;
    b.error_code = 0;
    b.error.clear();
    b.gen = ++w.gen;
    b.static_shared = 0;
    b.retired.clear();
    if (b.warps.size() < b.nwarps) b.warps.resize(b.nwarps);
    for (unsigned i = 0; i < b.nwarps; i++) {
        Warp &warp = b.warps[i];
        warp.exited = 0;
        const unsigned lanes = std::min(32u, b.nthreads - i * 32);
        warp.exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        for (auto &x : warp.xs) {
            x->pending = false;
            x->refs = 0;
        }
    }
    memset(w.dyn, D().settings.poison, l.dynamic_shared);
    for (unsigned t = 0; t < b.nthreads; t++) PrepareFiber(w, t, b);
    const uint64_t seed = Mix(D().settings.seed ^ Mix(linear) ^ (uint64_t)(uintptr_t)&l);
    std::vector<unsigned> order;
    FillOrder(order, b.nthreads, seed);
    std::unique_ptr<BlockCounter> counter;
    if (counting != nullptr) {
        counter.reset(new BlockCounter(&counting->global, reinterpret_cast<uintptr_t>(w.dyn), l.dynamic_shared, b.nwarps));
    }
    w.counter = counter.get();
    w.pdl = pdl ? &pdl->workers[w.index] : nullptr;
    if (sigsetjmp(w.jmp, 0) != 0) {
        w.counter = nullptr;
        w.pdl = nullptr;
        return FaultResult(w);
    }
    RunFibers(w, order, seed);
    w.counter = nullptr;
    w.pdl = nullptr;
    if (counter) {
        counter->FlushAll();
        std::lock_guard<std::mutex> lock(counting->mu);
        counting->total.Add(counter->counts);
    }
    if (b.error_code != 0) {
        return Result::Fail(b.error_code, "block " + Dim(b.idx) + " " + b.error);
    }
    return Result::Ok();
}

// ---- the pool ----

struct Job {
    size_t n = 0;
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    std::function<void(size_t, Worker &)> fn;
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
};

class Pool {
public:
    explicit Pool(int n) {
        for (int i = 0; i < n; i++) threads_.emplace_back([this, i] { Loop(i); });
        std::unique_lock<std::mutex> lock(mu_);
        ready_cv_.wait(lock, [&] { return ready_ == n; });
    }
    void Run(size_t n, std::function<void(size_t, Worker &)> fn) {
        if (n == 0) return;
        auto job = std::make_shared<Job>();
        job->n = n;
        job->fn = std::move(fn);
        {
            std::lock_guard<std::mutex> lock(mu_);
            jobs_.push_back(job);
        }
        cv_.notify_all();
        std::unique_lock<std::mutex> lock(job->mu);
        job->cv.wait(lock, [&] { return job->finished; });
    }

private:
    void Loop(int index) {
        sigset_t block;
        sigfillset(&block);
        for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigdelset(&block, sig);
        pthread_sigmask(SIG_SETMASK, &block, nullptr);
        auto *w = new Worker;
        w->index = index;
        stack_t alt;
        alt.ss_sp = malloc(kAltStack);
        alt.ss_size = kAltStack;
        alt.ss_flags = 0;
        sigaltstack(&alt, nullptr);
        const size_t region = (size_t)kMaxThreadsPerBlock * SBEMU_STACK_BYTES;
        void *m = mmap(nullptr, region + SBEMU_STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "stepbench-emu: cannot map fiber stacks: %s\n", strerror(errno));
            abort();
        }
        const uintptr_t aligned =
            (reinterpret_cast<uintptr_t>(m) + SBEMU_STACK_BYTES - 1) & ~(uintptr_t)(SBEMU_STACK_BYTES - 1);
        w->stacks = reinterpret_cast<unsigned char *>(aligned);
        w->fibers.resize(kMaxThreadsPerBlock);
        w->dyn = static_cast<unsigned char *>(aligned_alloc(64, 256 * 1024));
        {
            std::lock_guard<std::mutex> lock(mu_);
            const int slot = g_nworkers.load();
            g_threads[slot] = pthread_self();
            g_workers[slot] = w;
            g_nworkers.store(slot + 1, std::memory_order_release);
            ready_++;
        }
        ready_cv_.notify_all();
        for (;;) {
            std::shared_ptr<Job> job;
            size_t i = 0;
            {
                std::unique_lock<std::mutex> lock(mu_);
                for (;;) {
                    while (!jobs_.empty() && jobs_.front()->next.load() >= jobs_.front()->n) jobs_.pop_front();
                    if (!jobs_.empty()) {
                        job = jobs_.front();
                        i = job->next.fetch_add(1);
                        if (i < job->n) break;
                        continue;
                    }
                    cv_.wait(lock);
                }
            }
            job->fn(i, *w);
            if (job->done.fetch_add(1) + 1 == job->n) {
                std::lock_guard<std::mutex> lock(job->mu);
                job->finished = true;
                job->cv.notify_all();
            }
        }
    }

    std::mutex mu_;
    std::condition_variable cv_, ready_cv_;
    std::deque<std::shared_ptr<Job>> jobs_;
    std::vector<std::thread> threads_;
    int ready_ = 0;
};

Pool *g_pool = nullptr;

}  // namespace

const sbemu_api *KernelAPI() { return &kAPI; }

void StartPool(const Settings &s) {
    if (g_pool != nullptr) return;
    InstallHandlers();
    g_pool = new Pool(std::min(s.threads, kMaxWorkers));
}

void ParallelFor(size_t n, const std::function<void(size_t)> &fn) {
    g_pool->Run(n, [&fn](size_t i, Worker &) { fn(i); });
}

namespace {

// StartPdl begins a launch's PDL record; a programmatic launch is checked
// against the grid before it on this stream.
std::unique_ptr<LaunchPdl> StartPdl(const Launch &l) {
    auto pdl = std::make_unique<LaunchPdl>();
    pdl->global = D().memory.LiveRanges();
    pdl->workers.resize(kMaxWorkers);
    for (PdlRecorder &r : pdl->workers) {
        r.global = &pdl->global;
        r.before = l.programmatic ? tl_previous.get() : nullptr;
    }
    return pdl;
}

// FinishPdl makes the launch the stream's previous grid (a failed one too:
// what ran of it still ran).
void FinishPdl(const Launch &l, LaunchPdl &pdl) {
    auto g = std::make_shared<GridAccesses>();
    g->kernel = std::string("kernel ") + l.f->k->name;
    bool carry = false;
    for (const PdlRecorder &r : pdl.workers) {
        g->reads.Merge(r.reads);
        g->writes.Merge(r.writes);
        carry = carry || r.early_trigger || r.unwaited_exit;
    }
    if (l.programmatic && carry) g->earlier = tl_previous;
    tl_previous = g;
}

}  // namespace

Result Execute(const Launch &l) {
    const uint64_t n = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
    std::vector<unsigned> order;
    FillOrder(order, (unsigned)n, Mix(D().settings.seed ^ (uint64_t)(uintptr_t)&l));
    std::mutex mu;
    Result first;
    std::atomic<bool> failed{false};
    const std::string &counters = D().settings.counters_path;
    std::unique_ptr<LaunchCounting> counting;
    if (!counters.empty()) {
        counting.reset(new LaunchCounting);
        counting->global = D().memory.LiveRanges();
    }
    std::unique_ptr<LaunchPdl> pdl;
    if (D().settings.check_pdl) pdl = StartPdl(l);
    const uint64_t start = NowNs();
    g_pool->Run(n, [&](size_t i, Worker &w) {
        if (failed.load()) return;
        Result r = RunBlock(w, l, order[i], counting.get(), pdl.get());
        if (r.code != kSuccess) {
            std::lock_guard<std::mutex> lock(mu);
            if (!failed.exchange(true)) first = r;
        }
    });
    if (pdl) FinishPdl(l, *pdl);
    if (failed.load()) return first;
    if (counting) {
        Result r = WriteCounters(counters, l, counting->total, NowNs() - start);
        if (r.code != kSuccess) return r;
    }
    std::string why;
    if (!D().memory.CheckCanaries(&why)) return Result::Fail(kIllegalAddress, why);
    return Result::Ok();
}

}  // namespace emu

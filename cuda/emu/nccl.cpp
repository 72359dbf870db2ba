// nccl.cpp — the emulated NCCL (libnccl.so.2 of build/emu): communicators of
// emulated GPUs in one process or in several processes on one machine, and
// the collectives stepbench uses (all-reduce, all-gather, broadcast) as
// stream work of the emulated driver, so they run in stream order and are
// recorded by a stream capture like any kernel.
//
// A communicator is a POSIX shared-memory segment named by the unique id:
// a process-shared mutex and condition variable, a generation-counting
// barrier, and one staging slot per rank. A collective moves its buffers
// through the slots in chunks: every rank copies its chunk in, waits for
// all, computes the result (the same one on every rank: reductions add in
// rank order, bf16 through fp32 with one rounding), waits again. A rank
// that waits longer than STEPBENCH_EMU_NCCL_TIMEOUT_S (default 60) fails
// the collective with a message saying which ranks it waited for.
//
// ncclCommAbort marks the segment failed and wakes every waiter: each rank
// of the communicator, in this process or another, waiting in a collective
// fails within a poll (kPollSeconds) with the abort named, and a rank that
// comes later fails at once (ncclRemoteError, as real NCCL reports a peer
// that went away). The timeout stays as the last resort.
//
// A peer process that dies (kill -9) is noticed too: the mutex is robust
// (a lock its dead owner held is recovered, EOWNERDEAD, and the
// communicator failed), every rank records its process (pid and start
// time) when it joins, and a waiter checks at every poll, as does
// ncclCommGetAsyncError, that the other ranks' processes live; a dead one
// fails the communicator naming its ranks. The segment's name is removed
// when the last rank leaves, when the communicator fails (no one may join
// it then), and, for segments of runs that all died, by the next
// ncclGetUniqueId of any process (SweepStale).
//
// STEPBENCH_EMU_NCCL_FAIL=RANK:N injects a fault, for tests: the N-th
// collective (1-based) that rank RANK of a communicator runs fails on its
// stream before it meets the others, as a rank whose kernel faulted would.
// STEPBENCH_EMU_NCCL_DIE=RANK:N kills rank RANK's process (SIGKILL) in its
// N-th collective while it holds the segment's lock.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#define API extern "C" __attribute__((visibility("default")))

typedef unsigned long long CUdeviceptr;
extern "C" int sbemu_current_context(void);
extern "C" int sbemu_check_device_range(CUdeviceptr p, size_t bytes, char *why, size_t why_len);
extern "C" int sbemu_host_op(void *stream, const char *what, int (*fn)(void *, char *, size_t), void *arg,
                             void (*release)(void *), const char *lazy_key);
extern "C" int cuCtxGetDevice(int *dev);

namespace {

enum {
    kSuccess = 0,
    kUnhandledCudaError = 1,
    kSystemError = 2,
    kInternalError = 3,
    kInvalidArgument = 4,
    kInvalidUsage = 5,
    kRemoteError = 6,  // NCCL 2.13+
};
enum { kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9 };
enum { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

constexpr int kIdBytes = 128;
constexpr char kMagic[] = "SBEMU-NCCL-3";  // 2: Shared gained failed_code; 3: magic, processes
constexpr double kPollSeconds = 0.1;  // how often a waiter looks at the segment besides being woken
constexpr size_t kSlotBytes = 4 << 20;  // staging per rank per chunk
constexpr int kMaxRanks = 64;

struct UniqueId {
    char bytes[kIdBytes];
};

// Process is a rank's process: a pid and its start time (a reused pid
// has another).
struct Process {
    int pid;
    unsigned long long start;
};

// Shared is the communicator's segment header; the slots follow it.
struct Shared {
    char magic[16];  // kMagic once set up
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nranks;
    int joined;
    int setup;  // 0 fresh, -1 set up by the first rank to arrive
    unsigned long long generation;  // barrier generations completed
    int arrived;
    unsigned long long arrived_mask;
    int failed;
    char error[256];
    int failed_code;  // kSystemError for a timeout, kRemoteError for an abort or a dead peer
    Process procs[kMaxRanks];  // pid 0: not joined yet
    int owner;                 // the pid holding mu (who died, on EOWNERDEAD)
};

struct Comm {
    Shared *sh = nullptr;
    size_t map_len = 0;
    std::string name;
    int rank = 0, nranks = 0, device = 0;
    unsigned char *slots = nullptr;
    char last_error[512] = {0};
    // aborted: ncclCommAbort ran; the Comm is then never freed (see there).
    std::atomic<bool> aborted{false};
    long fail_at = 0;             // STEPBENCH_EMU_NCCL_FAIL: this rank's collective to fail, 0 none
    long die_at = 0;              // STEPBENCH_EMU_NCCL_DIE: this rank's collective to die in, 0 none
    std::atomic<long> runs{0};    // collectives this rank ran on its stream
};

thread_local char tl_error[512];

int SetError(Comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int SetError(Comm *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = c ? c->last_error : tl_error;
    vsnprintf(dst, 512, fmt, ap);
    va_end(ap);
    if (c == nullptr) return code;
    snprintf(tl_error, sizeof tl_error, "%s", c->last_error);
    return code;
}

double TimeoutSeconds() {
    const char *v = getenv("STEPBENCH_EMU_NCCL_TIMEOUT_S");
    if (v && *v) {
        const double s = atof(v);
        if (s > 0) return s;
    }
    return 60.0;
}

void Deadline(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_REALTIME, ts);
    const long long ns = ts->tv_nsec + (long long)((seconds - (long long)seconds) * 1e9);
    ts->tv_sec += (time_t)seconds + ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

std::string Missing(unsigned long long arrived, int nranks) {
    std::string s;
    for (int r = 0; r < nranks; r++) {
        if (!((arrived >> r) & 1ull)) s += (s.empty() ? "" : ",") + std::to_string(r);
    }
    return s;
}

// FailLocked marks the communicator failed (sh->mu held) and wakes every
// waiter; the first failure's message stays.
void FailLocked(Shared *sh, int code, const std::string &why) {
    if (!sh->failed) {
        snprintf(sh->error, sizeof sh->error, "%s", why.c_str());
        sh->failed_code = code;
        sh->failed = 1;
    }
    pthread_cond_broadcast(&sh->cv);
}

// ProcessStart is pid's start time (clock ticks after boot, field 22 of
// /proc/PID/stat), 0 when the process is gone or a zombie (dead, not yet
// reaped).
unsigned long long ProcessStart(int pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == nullptr) return 0;
    char buf[1024];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');  // the command may hold spaces and parentheses
    if (p == nullptr) return 0;
    char state = 0;
    unsigned long long start = 0;
    // After ") ": state (field 3), then fields 4..21, then starttime (22).
    if (sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state, &start) != 2) return 0;
    if (state == 'Z' || state == 'X') return 0;
    return start;
}

bool Alive(const Process &p) { return p.pid > 0 && ProcessStart(p.pid) == p.start; }

// Dead is the failure of pid's ranks (sh->mu held): "the process of rank
// 1 (pid 4242) died holding the communicator's lock".
std::string Dead(const Shared *sh, int pid, const char *how) {
    std::string ranks;
    for (int q = 0; q < sh->nranks; q++) {
        if (sh->procs[q].pid == pid) ranks += (ranks.empty() ? "" : ",") + std::to_string(q);
    }
    char why[256];
    snprintf(why, sizeof why, "the process of rank %s (pid %d) died %s", ranks.empty() ? "?" : ranks.c_str(), pid, how);
    return why;
}

// FailDeadPeersLocked fails the communicator when a process of one of its
// ranks (other than this process) is gone, naming its ranks (sh->mu held),
// and removes the segment's name: no one is to join it any more.
void FailDeadPeersLocked(Comm *c) {
    Shared *sh = c->sh;
    if (sh->failed) return;
    const int self = getpid();
    for (int r = 0; r < sh->nranks; r++) {
        const Process p = sh->procs[r];
        if (p.pid == 0 || p.pid == self || Alive(p)) continue;
        FailLocked(sh, kRemoteError, Dead(sh, p.pid, "without leaving the communicator"));
        shm_unlink(c->name.c_str());
        return;
    }
}

// Recover takes over the lock of a process that died holding it (mu held:
// EOWNERDEAD) and fails the communicator, naming that process's ranks:
// what the lock guarded may be half changed.
void Recover(Comm *c) {
    Shared *sh = c->sh;
    pthread_mutex_consistent(&sh->mu);
    FailLocked(sh, kRemoteError, Dead(sh, sh->owner, "holding the communicator's lock"));
    shm_unlink(c->name.c_str());
}

// Lock locks the segment's robust mutex, recovering it from a dead owner.
void Lock(Comm *c) {
    Shared *sh = c->sh;
    if (pthread_mutex_lock(&sh->mu) == EOWNERDEAD) Recover(c);
    sh->owner = getpid();
}

// WaitSlice waits on the condition variable for up to kPollSeconds (mu
// held), recovering the mutex as Lock does, then looks for dead peers.
void WaitSlice(Comm *c) {
    Shared *sh = c->sh;
    struct timespec slice;
    Deadline(&slice, kPollSeconds);
    if (pthread_cond_timedwait(&sh->cv, &sh->mu, &slice) == EOWNERDEAD) Recover(c);
    sh->owner = getpid();
    FailDeadPeersLocked(c);
}

// Barrier waits until every rank arrives; false (with why) on timeout or a
// failed (aborted) communicator. Besides being woken, a waiter looks at the
// segment every kPollSeconds.
bool Barrier(Comm *c, const char *what, std::string *why) {
    Shared *sh = c->sh;
    Lock(c);
    if (sh->failed) {
        *why = std::string("the communicator failed: ") + sh->error;
        pthread_mutex_unlock(&sh->mu);
        return false;
    }
    const unsigned long long gen = sh->generation;
    sh->arrived_mask |= 1ull << c->rank;
    if (++sh->arrived == sh->nranks) {
        sh->arrived = 0;
        sh->arrived_mask = 0;
        sh->generation++;
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->mu);
        return true;
    }
    const double timeout = TimeoutSeconds();
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (sh->generation == gen && !sh->failed) {
        WaitSlice(c);
        clock_gettime(CLOCK_MONOTONIC, &now);
        const double waited = (double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
        if (sh->generation == gen && !sh->failed && waited >= timeout) {
            char msg[256];
            snprintf(msg, sizeof msg, "rank %d waited %.0f s in %s for ranks %s", c->rank, timeout, what,
                     Missing(sh->arrived_mask, sh->nranks).c_str());
            FailLocked(sh, kSystemError, msg);
        }
    }
    const bool ok = sh->generation != gen;
    if (!ok) *why = sh->error;
    pthread_mutex_unlock(&sh->mu);
    return ok;
}

// CheckLive fails a call on an aborted communicator, or on one a peer
// aborted (or that timed out), at once.
int CheckLive(Comm *c, const char *call) {
    if (c->aborted.load()) {
        return SetError(c, kInvalidUsage, "%s: rank %d: this communicator was aborted (ncclCommAbort)", call, c->rank);
    }
    Shared *sh = c->sh;
    Lock(c);
    const int failed = sh->failed, code = sh->failed_code;
    const std::string why = sh->error;
    pthread_mutex_unlock(&sh->mu);
    if (failed) return SetError(c, code ? code : kSystemError, "%s: rank %d: the communicator failed: %s", call, c->rank, why.c_str());
    return kSuccess;
}

// FailAt parses STEPBENCH_EMU_NCCL_FAIL=RANK:N (or another variable of the
// form): the collective of rank to fail (0: none); false for a malformed
// value or a rank not in 0..nranks-1.
bool FailAt(int rank, int nranks, long *at, const char *var = "STEPBENCH_EMU_NCCL_FAIL") {
    *at = 0;
    const char *v = getenv(var);
    if (v == nullptr || *v == 0) return true;
    int r = -1;
    long n = 0;
    char extra = 0;
    if (sscanf(v, "%d:%ld%c", &r, &n, &extra) != 2 || r < 0 || r >= nranks || n < 1 || n > 1000000000L) return false;
    if (r == rank) *at = n;
    return true;
}

size_t TypeSize(int t) {
    switch (t) {
    case kInt8: case kUint8: return 1;
    case kFloat16: case kBfloat16: return 2;
    case kInt32: case kUint32: case kFloat32: return 4;
    case kInt64: case kUint64: case kFloat64: return 8;
    }
    return 0;
}

float Bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ToBf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

template <typename T>
T Combine(T a, T b, int op) {
    switch (op) {
    case kProd: return a * b;
    case kMax: return a > b ? a : b;
    case kMin: return a < b ? a : b;
    default: return a + b;
    }
}

template <typename T>
void ReduceTyped(void *dst, const unsigned char *slots, int nranks, size_t n, int op) {
    T *out = static_cast<T *>(dst);
    for (size_t i = 0; i < n; i++) {
        T acc = reinterpret_cast<const T *>(slots)[i];
        for (int r = 1; r < nranks; r++) acc = Combine(acc, reinterpret_cast<const T *>(slots + r * kSlotBytes)[i], op);
        if (op == kAvg) acc = acc / (T)nranks;
        out[i] = acc;
    }
}

void ReduceBf16(void *dst, const unsigned char *slots, int nranks, size_t n, int op) {
    uint16_t *out = static_cast<uint16_t *>(dst);
    for (size_t i = 0; i < n; i++) {
        float acc = Bf16(reinterpret_cast<const uint16_t *>(slots)[i]);
        for (int r = 1; r < nranks; r++) acc = Combine(acc, Bf16(reinterpret_cast<const uint16_t *>(slots + r * kSlotBytes)[i]), op);
        if (op == kAvg) acc /= (float)nranks;
        out[i] = ToBf16(acc);
    }
}

bool Reduce(void *dst, const unsigned char *slots, int nranks, size_t n, int type, int op) {
    switch (type) {
    case kBfloat16: ReduceBf16(dst, slots, nranks, n, op); return true;
    case kFloat32: ReduceTyped<float>(dst, slots, nranks, n, op); return true;
    case kFloat64: ReduceTyped<double>(dst, slots, nranks, n, op); return true;
    case kInt32: ReduceTyped<int32_t>(dst, slots, nranks, n, op); return true;
    case kUint32: ReduceTyped<uint32_t>(dst, slots, nranks, n, op); return true;
    case kInt64: ReduceTyped<int64_t>(dst, slots, nranks, n, op); return true;
    case kUint64: ReduceTyped<uint64_t>(dst, slots, nranks, n, op); return true;
    case kInt8: ReduceTyped<int8_t>(dst, slots, nranks, n, op); return true;
    case kUint8: ReduceTyped<uint8_t>(dst, slots, nranks, n, op); return true;
    }
    return false;
}

enum Kind { kAllReduce, kAllGather, kBroadcast };

struct Collective {
    Kind kind;
    Comm *comm;
    const unsigned char *send;
    unsigned char *recv;
    size_t count;  // elements per rank (all-gather: send count)
    int type, op, root;
};

const char *KindName(Kind k) {
    return k == kAllReduce ? "ncclAllReduce" : k == kAllGather ? "ncclAllGather" : "ncclBroadcast";
}

int Run(void *arg, char *err, size_t len) {
    const Collective &x = *static_cast<Collective *>(arg);
    Comm *c = x.comm;
    const size_t es = TypeSize(x.type);
    const size_t total = x.count * es;
    const size_t per_chunk = kSlotBytes / es * es;
    std::string why;
    const long n = ++c->runs;
    if (n == c->die_at) {  // STEPBENCH_EMU_NCCL_DIE: a process killed inside the library, holding its lock
        Lock(c);
        raise(SIGKILL);
    }
    if (n == c->fail_at) {
        snprintf(err, len, "NCCL (emulated) %s on rank %d: the injected fault STEPBENCH_EMU_NCCL_FAIL=%d:%ld (this rank's collective %ld)",
                 KindName(x.kind), c->rank, c->rank, n, n);
        return 999;
    }
    for (size_t off = 0; off < total || (off == 0 && total == 0); off += per_chunk) {
        const size_t bytes = std::min(per_chunk, total - off);
        unsigned char *mine = c->slots + (size_t)c->rank * kSlotBytes;
        if (x.kind != kBroadcast || c->rank == x.root) memcpy(mine, x.send + off, bytes);
        if (!Barrier(c, KindName(x.kind), &why)) break;
        if (x.kind == kAllReduce) {
            Reduce(x.recv + off, c->slots, c->nranks, bytes / es, x.type, x.op);
        } else if (x.kind == kAllGather) {
            for (int r = 0; r < c->nranks; r++) memcpy(x.recv + (size_t)r * total + off, c->slots + (size_t)r * kSlotBytes, bytes);
        } else {
            memcpy(x.recv + off, c->slots + (size_t)x.root * kSlotBytes, bytes);
        }
        if (!Barrier(c, KindName(x.kind), &why)) break;
        if (total == 0) break;
    }
    if (!why.empty()) {
        snprintf(err, len, "NCCL (emulated) %s on rank %d: %s", KindName(x.kind), c->rank, why.c_str());
        return 999;  // CUDA_ERROR_UNKNOWN: a failed collective leaves the stream unusable
    }
    return 0;
}

void Free(void *arg) { delete static_cast<Collective *>(arg); }

int Enqueue(Collective *x, void *stream) {
    Comm *c = x->comm;
    char what[160];
    snprintf(what, sizeof what, "%s(rank %d of %d, %zu elements)", KindName(x->kind), c->rank, c->nranks, x->count);
    const int rc = sbemu_host_op(stream, what, Run, x, Free, nullptr);
    if (rc != 0) return SetError(c, kUnhandledCudaError, "%s: the CUDA stream refused the work (CUresult %d)", what, rc);
    return kSuccess;
}

int CheckBuffers(Comm *c, const char *call, const void *send, size_t send_bytes, const void *recv, size_t recv_bytes) {
    char why[512];
    if (send_bytes && !sbemu_check_device_range((CUdeviceptr)send, send_bytes, why, sizeof why)) {
        return SetError(c, kInvalidArgument, "%s: sendbuff: %s", call, why);
    }
    if (recv_bytes && !sbemu_check_device_range((CUdeviceptr)recv, recv_bytes, why, sizeof why)) {
        return SetError(c, kInvalidArgument, "%s: recvbuff: %s", call, why);
    }
    return kSuccess;
}

// SweepStale removes the names of segments whose processes all died (a
// run killed on every node, which no survivor could clean up): the
// creator's pid is in the name, the ranks' processes in the header.
void SweepStale() {
    DIR *d = opendir("/dev/shm");
    if (d == nullptr) return;
    const std::string prefix = "sbemu-nccl-";
    while (struct dirent *e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        const int creator = atoi(name.c_str() + prefix.size());
        if (creator <= 0 || ProcessStart(creator) != 0) continue;  // its creator lives: in use
        const std::string shm = "/" + name;
        const int fd = shm_open(shm.c_str(), O_RDONLY, 0);
        if (fd < 0) continue;
        struct stat st;
        bool live = false;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(Shared)) {
            void *m = mmap(nullptr, sizeof(Shared), PROT_READ, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                const Shared *sh = static_cast<const Shared *>(m);
                if (strncmp(sh->magic, kMagic, sizeof sh->magic) == 0) {
                    for (int r = 0; r < kMaxRanks && !live; r++) live = Alive(sh->procs[r]);
                }
                munmap(m, sizeof(Shared));
            }
        }
        close(fd);
        if (!live) shm_unlink(shm.c_str());
    }
    closedir(d);
}

// Leave drops this rank from the segment (mu not held) and removes the
// segment's name when it was the last rank, or when the communicator
// failed (no one is to join it).
void Leave(Comm *c) {
    Shared *sh = c->sh;
    Lock(c);
    const bool last = --sh->joined == 0;
    const bool failed = sh->failed;
    pthread_mutex_unlock(&sh->mu);
    if (last || failed) shm_unlink(c->name.c_str());
}

}  // namespace

API const char *sbemu_describe(void) {
    return "stepbench emulated NCCL 0.1 (collectives of emulated GPUs through shared memory, one or more processes)";
}

API int ncclGetVersion(int *version) {
    if (version == nullptr) return kInvalidArgument;
    *version = 100;  // 0.1.0: the emulator's own version
    return kSuccess;
}

API const char *ncclGetErrorString(int result) {
    switch (result) {
    case kSuccess: return "no error";
    case kUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case kSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case kInternalError: return "internal error - please report this issue to the NCCL developers";
    case kInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case kInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case kRemoteError: return "remote process exited or there was a network error";
    }
    return "unknown result code";
}

API const char *ncclGetLastError(Comm *comm) { return comm ? comm->last_error : tl_error; }

API int ncclGetUniqueId(UniqueId *id) {
    if (id == nullptr) return SetError(nullptr, kInvalidArgument, "ncclGetUniqueId: null id");
    SweepStale();
    memset(id, 0, sizeof *id);
    std::random_device rd;
    const unsigned long long a = ((unsigned long long)rd() << 32) ^ rd(), b = ((unsigned long long)rd() << 32) ^ rd();
    snprintf(id->bytes, kIdBytes, "%s/sbemu-nccl-%d-%016llx%016llx", kMagic, (int)getpid(), a, b);
    return kSuccess;
}

API int ncclCommInitRank(Comm **out, int nranks, UniqueId id, int rank) {
    if (out == nullptr) return SetError(nullptr, kInvalidArgument, "ncclCommInitRank: null comm");
    if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
        return SetError(nullptr, kInvalidArgument, "ncclCommInitRank: rank %d of %d (the emulator allows 1..%d ranks)", rank, nranks, kMaxRanks);
    }
    if (strncmp(id.bytes, kMagic, strlen(kMagic)) != 0) {
        return SetError(nullptr, kInvalidArgument, "ncclCommInitRank: not a unique id of the emulated NCCL");
    }
    long fail_at = 0;
    if (!FailAt(rank, nranks, &fail_at)) {
        return SetError(nullptr, kInvalidArgument,
                        "ncclCommInitRank: STEPBENCH_EMU_NCCL_FAIL=%s: want RANK:N (rank RANK of 0..%d's N-th collective fails, 1 <= N <= 1e9)",
                        getenv("STEPBENCH_EMU_NCCL_FAIL"), nranks - 1);
    }
    long die_at = 0;
    if (!FailAt(rank, nranks, &die_at, "STEPBENCH_EMU_NCCL_DIE")) {
        return SetError(nullptr, kInvalidArgument, "ncclCommInitRank: STEPBENCH_EMU_NCCL_DIE=%s: want RANK:N (rank RANK of 0..%d dies in its N-th collective)",
                        getenv("STEPBENCH_EMU_NCCL_DIE"), nranks - 1);
    }
    int device = 0;
    if (sbemu_current_context() != 0 || cuCtxGetDevice(&device) != 0) {
        return SetError(nullptr, kUnhandledCudaError, "ncclCommInitRank: no current CUDA context on this thread");
    }
    auto *c = new Comm;
    c->name = id.bytes + strlen(kMagic);
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    c->fail_at = fail_at;
    c->die_at = die_at;
    c->map_len = sizeof(Shared) + 64 + (size_t)nranks * kSlotBytes;
    const int fd = shm_open(c->name.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_len) != 0) {
        const int e = errno;
        if (fd >= 0) close(fd);
        delete c;
        return SetError(nullptr, kSystemError, "ncclCommInitRank: shared memory: %s", strerror(e));
    }
    void *m = mmap(nullptr, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        delete c;
        return SetError(nullptr, kSystemError, "ncclCommInitRank: mmap: %s", strerror(errno));
    }
    c->sh = static_cast<Shared *>(m);
    c->slots = static_cast<unsigned char *>(m) + ((sizeof(Shared) + 63) / 64) * 64;
    // The first rank to arrive sets the segment up; the others wait for it
    // (a fresh segment is all zeros; nranks is written last).
    Shared *sh = c->sh;
    int fresh = 0;
    if (__atomic_compare_exchange_n(&sh->setup, &fresh, -1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);  // a dead owner's lock is recovered, not held forever
        pthread_mutex_init(&sh->mu, &ma);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
        pthread_cond_init(&sh->cv, &ca);
        snprintf(sh->magic, sizeof sh->magic, "%s", kMagic);
        __atomic_store_n(&sh->nranks, nranks, __ATOMIC_RELEASE);
    } else {
        for (int spins = 0; __atomic_load_n(&sh->nranks, __ATOMIC_ACQUIRE) == 0; spins++) {
            if (spins > 200000) {  // about 20 s
                munmap(m, c->map_len);
                delete c;
                return SetError(nullptr, kSystemError, "ncclCommInitRank: the communicator was never set up");
            }
            usleep(100);
        }
    }
    if (sh->nranks != nranks) {
        const int other = sh->nranks;
        munmap(m, c->map_len);
        delete c;
        return SetError(nullptr, kInvalidUsage, "ncclCommInitRank: rank %d says %d ranks, another says %d", rank, nranks, other);
    }
    Lock(c);
    sh->joined++;
    sh->procs[rank] = Process{(int)getpid(), ProcessStart(getpid())};
    pthread_mutex_unlock(&sh->mu);
    std::string why;
    if (!Barrier(c, "ncclCommInitRank", &why)) {
        const int rc = SetError(c, kSystemError, "ncclCommInitRank: %s", why.c_str());
        snprintf(tl_error, sizeof tl_error, "%s", c->last_error);
        Leave(c);
        munmap(m, c->map_len);
        delete c;
        return rc;
    }
    *out = c;
    return kSuccess;
}

API int ncclCommDestroy(Comm *c) {
    if (c == nullptr) return SetError(nullptr, kInvalidArgument, "ncclCommDestroy: null comm");
    if (c->aborted.load()) return SetError(c, kInvalidUsage, "ncclCommDestroy: rank %d: the communicator was aborted (ncclCommAbort freed it)", c->rank);
    Leave(c);
    munmap(c->sh, c->map_len);
    delete c;
    return kSuccess;
}

// ncclCommAbort fails the communicator for every rank and leaves it. The
// Comm and its mapping are never freed: this rank's stream work may still
// be waiting in a barrier (it wakes now and fails), and a call of the
// owning thread may still be inside this library when another thread
// aborts (the Go side does not wait for it); a process aborts a
// communicator once, at the end of a failed run.
API int ncclCommAbort(Comm *c) {
    if (c == nullptr) return SetError(nullptr, kInvalidArgument, "ncclCommAbort: null comm");
    if (c->aborted.exchange(true)) return SetError(c, kInvalidUsage, "ncclCommAbort: rank %d: already aborted", c->rank);
    Shared *sh = c->sh;
    char why[128];
    snprintf(why, sizeof why, "rank %d aborted the communicator (ncclCommAbort)", c->rank);
    Lock(c);
    FailLocked(sh, kRemoteError, why);
    pthread_mutex_unlock(&sh->mu);
    Leave(c);
    return kSuccess;
}

API int ncclCommCount(const Comm *c, int *count) {
    if (c == nullptr || count == nullptr) return kInvalidArgument;
    *count = c->nranks;
    return kSuccess;
}

API int ncclCommUserRank(const Comm *c, int *rank) {
    if (c == nullptr || rank == nullptr) return kInvalidArgument;
    *rank = c->rank;
    return kSuccess;
}

API int ncclCommCuDevice(const Comm *c, int *device) {
    if (c == nullptr || device == nullptr) return kInvalidArgument;
    *device = c->device;
    return kSuccess;
}

API int ncclCommGetAsyncError(Comm *c, int *async) {
    if (c == nullptr || async == nullptr) return kInvalidArgument;
    Lock(c);
    FailDeadPeersLocked(c);  // the Go side polls this while it waits: a dead peer shows here too
    *async = c->sh->failed ? (c->sh->failed_code ? c->sh->failed_code : kSystemError) : kSuccess;
    const std::string why = c->sh->error;
    pthread_mutex_unlock(&c->sh->mu);
    if (*async != kSuccess) SetError(c, *async, "rank %d: the communicator failed: %s", c->rank, why.c_str());  // for ncclGetLastError
    return kSuccess;
}

// Grouping changes nothing here: every collective is already asynchronous
// stream work, and ranks of one process drive their own streams.
API int ncclGroupStart(void) { return kSuccess; }
API int ncclGroupEnd(void) { return kSuccess; }

API int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, Comm *c, void *stream) {
    if (c == nullptr) return SetError(nullptr, kInvalidArgument, "ncclAllReduce: null comm");
    if (TypeSize(type) == 0 || type == kFloat16) return SetError(c, kInvalidArgument, "ncclAllReduce: data type %d is not emulated", type);
    if (op < kSum || op > kAvg) return SetError(c, kInvalidArgument, "ncclAllReduce: reduction %d", op);
    if (int rc = CheckLive(c, "ncclAllReduce")) return rc;
    const size_t bytes = count * TypeSize(type);
    if (int rc = CheckBuffers(c, "ncclAllReduce", send, bytes, recv, bytes)) return rc;
    return Enqueue(new Collective{kAllReduce, c, (const unsigned char *)send, (unsigned char *)recv, count, type, op, 0}, stream);
}

API int ncclAllGather(const void *send, void *recv, size_t count, int type, Comm *c, void *stream) {
    if (c == nullptr) return SetError(nullptr, kInvalidArgument, "ncclAllGather: null comm");
    if (TypeSize(type) == 0) return SetError(c, kInvalidArgument, "ncclAllGather: data type %d", type);
    if (int rc = CheckLive(c, "ncclAllGather")) return rc;
    const size_t bytes = count * TypeSize(type);
    if (int rc = CheckBuffers(c, "ncclAllGather", send, bytes, recv, bytes * c->nranks)) return rc;
    return Enqueue(new Collective{kAllGather, c, (const unsigned char *)send, (unsigned char *)recv, count, type, kSum, 0}, stream);
}

API int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, Comm *c, void *stream) {
    if (c == nullptr) return SetError(nullptr, kInvalidArgument, "ncclBroadcast: null comm");
    if (TypeSize(type) == 0) return SetError(c, kInvalidArgument, "ncclBroadcast: data type %d", type);
    if (root < 0 || root >= c->nranks) return SetError(c, kInvalidArgument, "ncclBroadcast: root %d of %d ranks", root, c->nranks);
    if (int rc = CheckLive(c, "ncclBroadcast")) return rc;
    const size_t bytes = count * TypeSize(type);
    if (int rc = CheckBuffers(c, "ncclBroadcast", c->rank == root ? send : nullptr, c->rank == root ? bytes : 0, recv, bytes)) return rc;
    return Enqueue(new Collective{kBroadcast, c, (const unsigned char *)send, (unsigned char *)recv, count, type, kSum, root}, stream);
}

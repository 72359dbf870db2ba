// stream.cpp — streams as worker threads that run their work in order;
// a capturing stream records the work instead; sticky errors.
#include <signal.h>
#include <time.h>

#include "emu.h"

namespace emu {
namespace {

std::mutex g_sticky_mu;

void Work(Stream *s) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, nullptr);  // Go's signals go to Go's threads
    for (;;) {
        Op op;
        {
            std::unique_lock<std::mutex> lock(s->mu);
            s->cv.wait(lock, [&] { return !s->queue.empty() || s->stopping; });
            if (s->queue.empty()) return;  // stopping and drained
            op = std::move(s->queue.front());
            s->queue.pop_front();
            s->busy = true;
        }
        // After a sticky error the context is unusable: work is dropped.
        if (op.always || s->ctx->sticky.load() == kSuccess) {
            if (!op.kernel) ForgetPreviousGrid();
            Result r = op.run();
            if (r.code != kSuccess) {
                r.detail = op.what + ": " + r.detail;
                SetSticky(s->ctx, r);
            }
        }
        {
            std::lock_guard<std::mutex> lock(s->mu);
            s->busy = false;
            if (s->queue.empty()) s->idle_cv.notify_all();
        }
    }
}

}  // namespace

uint64_t NowNs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void SetSticky(Context *ctx, const Result &r) {
    std::lock_guard<std::mutex> lock(g_sticky_mu);
    int expected = kSuccess;
    if (ctx->sticky.compare_exchange_strong(expected, r.code)) ctx->sticky_detail = r.detail;
}

std::string StickyDetail(Context *ctx) {
    std::lock_guard<std::mutex> lock(g_sticky_mu);
    return ctx->sticky_detail;
}

void ClearSticky(Context *ctx) {
    std::lock_guard<std::mutex> lock(g_sticky_mu);
    ctx->sticky.store(kSuccess);
    ctx->sticky_detail.clear();
}

Stream *NewStream(Context *ctx, bool is_null) {
    auto *s = new Stream;
    s->ctx = ctx;
    s->is_null = is_null;
    s->worker = std::thread(Work, s);
    return s;
}

void Drain(Stream *s) {
    std::unique_lock<std::mutex> lock(s->mu);
    s->idle_cv.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

void DestroyStream(Stream *s) {
    {
        std::lock_guard<std::mutex> lock(s->mu);
        s->stopping = true;
    }
    s->cv.notify_all();
    s->worker.join();
    delete s;
}

void Submit(Stream *s, Op op) {
    if (s->capturing) {
        s->captured.push_back(std::move(op));
        return;
    }
    {
        std::lock_guard<std::mutex> lock(s->mu);
        s->queue.push_back(std::move(op));
    }
    s->cv.notify_one();
}

}  // namespace emu

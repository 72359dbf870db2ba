// memory.cpp — device memory of the emulated GPU: host pages with a guard
// page after (or before) every allocation, poisoned when fresh, canaries in
// the slack that alignment leaves between an allocation and its guard, and
// freed allocations kept inaccessible for a while so that a use after free
// faults instead of reading someone else's data.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "emu.h"

namespace emu {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kAlign = 256;       // cuMemAlloc's alignment
constexpr size_t kHeadCanary = 256;  // bytes before an allocation that are checked
constexpr size_t kQuarantine = 64;   // freed allocations kept inaccessible
constexpr size_t kPoolBytes = (size_t)1 << 30;  // mappings kept for reuse (no page faults)

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string Hex(uintptr_t p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%#" PRIxPTR, p);
    return buf;
}

// FirstChanged returns the offset of the first byte of [p, p+n) that is not
// want, or n.
size_t FirstChanged(const unsigned char *p, size_t n, unsigned char want) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != want) return i;
    }
    return n;
}

}  // namespace

std::string Memory::Label(const Alloc &a) const {
    std::string s = "allocation #" + std::to_string(a.id);
    if (!a.name.empty()) s += " '" + a.name + "'";
    s += " (" + std::to_string(a.size) + " bytes at " + Hex(a.user) + ")";
    return s;
}

Result Memory::Allocate(Context *ctx, size_t bytes, const Settings &s, Alloc **out) {
    if (bytes == 0) return Result::Fail(kInvalidValue, "cuMemAlloc of 0 bytes");
    const size_t need = RoundUp(bytes, kAlign);
    // With the guard after, at least kHeadCanary bytes in front stay free
    // for the canary that catches small underruns.
    const size_t body = RoundUp(s.guard_before ? need : need + kHeadCanary, kPage);
    const size_t map_len = body + kPage;
    {
        std::lock_guard<std::mutex> lock(mu_);
        const uint64_t total = D().total_bytes;
        if (used_ + bytes > total) {
            return Result::Fail(kOutOfMemory, "emulated device memory exhausted: " + std::to_string(used_) + " of " +
                                                  std::to_string(total) + " bytes in use, " +
                                                  std::to_string(bytes) + " more requested");
        }
    }
    void *m = TakePooled(map_len);
    if (m == nullptr) {
        m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (m == MAP_FAILED) {
        return Result::Fail(kOutOfMemory, "mmap of " + std::to_string(map_len) + " bytes failed: " + strerror(errno));
    }
    // Big buffers fault in 2 MiB pages where the kernel allows it: fewer faults.
    if (map_len >= (8u << 20)) madvise(m, map_len, MADV_HUGEPAGE);
    auto *a = new Alloc;
    a->map = reinterpret_cast<uintptr_t>(m);
    a->map_len = map_len;
    a->size = bytes;
    a->ctx = ctx;
    if (s.guard_before) {
        a->guard = a->map;
        a->user = a->map + kPage;
        a->slack = a->user + bytes;
        a->slack_len = body - bytes;
    } else {
        a->guard = a->map + body;
        a->user = a->guard - need;
        a->slack = a->user + bytes;
        a->slack_len = need - bytes;
    }
    if (mprotect(reinterpret_cast<void *>(a->guard), kPage, PROT_NONE) != 0) {
        munmap(m, map_len);
        delete a;
        return Result::Fail(kOutOfMemory, std::string("mprotect of a guard page failed: ") + strerror(errno));
    }
    memset(reinterpret_cast<void *>(a->user), s.poison, bytes);
    memset(reinterpret_cast<void *>(a->slack), s.poison, a->slack_len);
    if (!s.guard_before) {
        const size_t head = a->user - a->map;
        memset(reinterpret_cast<void *>(a->map), s.poison, head);
    }
    std::lock_guard<std::mutex> lock(mu_);
    canary_ = s.poison;
    a->id = next_id_++;
    used_ += bytes;
    by_map_[a->map] = a;
    *out = a;
    return Result::Ok();
}

Result Memory::Free(uintptr_t user) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_map_.upper_bound(user);
    if (it == by_map_.begin()) return Result::Fail(kInvalidValue, Hex(user) + " is not an allocation");
    --it;
    Alloc *a = it->second;
    if (a->user != user) return Result::Fail(kInvalidValue, Hex(user) + " is not the start of an allocation");
    if (a->freed) return Result::Fail(kInvalidValue, Label(*a) + " was already freed");
    a->freed = true;
    used_ -= a->size;
    // Kept inaccessible for a while: a use after free faults and is named.
    mprotect(reinterpret_cast<void *>(a->map), a->map_len, PROT_NONE);
    quarantine_.push_back(a);
    while (quarantine_.size() > kQuarantine) {
        Alloc *old = quarantine_.front();
        quarantine_.pop_front();
        by_map_.erase(old->map);
        if (pooled_bytes_ + old->map_len <= kPoolBytes) {
            pool_.emplace(old->map_len, old->map);
            pooled_bytes_ += old->map_len;
        } else {
            munmap(reinterpret_cast<void *>(old->map), old->map_len);
        }
        delete old;
    }
    return Result::Ok();
}

void *Memory::TakePooled(size_t map_len) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pool_.find(map_len);
    if (it == pool_.end()) return nullptr;
    void *m = reinterpret_cast<void *>(it->second);
    pool_.erase(it);
    pooled_bytes_ -= map_len;
    mprotect(m, map_len, PROT_READ | PROT_WRITE);
    return m;
}

void Memory::FreeContext(Context *ctx) {
    std::vector<uintptr_t> users;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto &kv : by_map_) {
            if (kv.second->ctx == ctx && !kv.second->freed) users.push_back(kv.second->user);
        }
    }
    for (uintptr_t u : users) Free(u);
}

Result Memory::AllocHost(size_t bytes, void **out) {
    if (bytes == 0) return Result::Fail(kInvalidValue, "cuMemAllocHost of 0 bytes");
    const size_t len = RoundUp(bytes, kPage);
    void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return Result::Fail(kOutOfMemory, "mmap of pinned host memory failed");
    std::lock_guard<std::mutex> lock(mu_);
    pinned_[reinterpret_cast<uintptr_t>(m)] = len;
    *out = m;
    return Result::Ok();
}

Result Memory::FreeHost(void *p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_.find(reinterpret_cast<uintptr_t>(p));
    if (it == pinned_.end()) return Result::Fail(kInvalidValue, Hex(reinterpret_cast<uintptr_t>(p)) + " is not pinned host memory");
    munmap(p, it->second);
    pinned_.erase(it);
    return Result::Ok();
}

bool Memory::IsPinned(const void *p, size_t bytes) {
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_.upper_bound(u);
    if (it == pinned_.begin()) return false;
    --it;
    return u >= it->first && u + bytes <= it->first + it->second;
}

bool Memory::CheckRange(uintptr_t p, size_t bytes, std::string *why, const Alloc **found) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_map_.upper_bound(p);
    if (it == by_map_.begin()) {
        *why = Hex(p) + " is not device memory";
        return false;
    }
    --it;
    const Alloc *a = it->second;
    if (p >= a->map + a->map_len) {
        *why = Hex(p) + " is not device memory";
        return false;
    }
    if (a->freed) {
        *why = Hex(p) + " lies in " + Label(*a) + ", which was freed";
        return false;
    }
    if (p < a->user || p + bytes > a->user + a->size) {
        const long long off = (long long)(p - a->user);
        *why = std::to_string(bytes) + " bytes at byte offset " + std::to_string(off) + " of " + Label(*a) +
               " run past its end";
        return false;
    }
    if (found) *found = a;
    return true;
}

bool Memory::Describe(uintptr_t addr, Alloc *out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_map_.upper_bound(addr);
    if (it == by_map_.begin()) return false;
    --it;
    const Alloc *a = it->second;
    if (addr >= a->map + a->map_len) return false;
    *out = *a;
    return true;
}

bool Memory::Nearest(uintptr_t addr, Alloc *out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_map_.lower_bound(addr);
    const Alloc *best = nullptr;
    uintptr_t dist = ~(uintptr_t)0;
    if (it != by_map_.end() && it->second->user - addr < dist) {
        best = it->second;
        dist = it->second->user - addr;
    }
    if (it != by_map_.begin()) {
        const Alloc *below = std::prev(it)->second;
        const uintptr_t end = below->user + below->size;
        if (addr >= end && addr - end < dist) {
            best = below;
            dist = addr - end;
        }
    }
    if (best == nullptr || dist > (1u << 20)) return false;
    *out = *best;
    return true;
}

bool Memory::CheckCanaries(std::string *why) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto &kv : by_map_) {
        const Alloc *a = kv.second;
        if (a->freed) continue;
        const auto *slack = reinterpret_cast<const unsigned char *>(a->slack);
        size_t bad = FirstChanged(slack, a->slack_len, canary_);
        if (bad < a->slack_len) {
            *why = "a write " + std::to_string(bad) + " bytes past the end of " + Label(*a) +
                   " (byte offset " + std::to_string(a->size + bad) + ")";
            return false;
        }
        if (a->guard == a->map) continue;  // guard before: nothing in front
        const size_t head = std::min(kHeadCanary, a->user - a->map);
        const auto *front = reinterpret_cast<const unsigned char *>(a->user - head);
        bad = FirstChanged(front, head, canary_);
        if (bad < head) {
            *why = "a write " + std::to_string(head - bad) + " bytes before the start of " + Label(*a) +
                   " (byte offset -" + std::to_string(head - bad) + ")";
            return false;
        }
    }
    return true;
}

void Memory::Name(uintptr_t user, const std::string &name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_map_.upper_bound(user);
    if (it == by_map_.begin()) return;
    --it;
    if (it->second->user == user && !it->second->freed) it->second->name = name;
}

std::vector<std::pair<uintptr_t, uintptr_t>> Memory::LiveRanges() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    for (const auto &kv : by_map_) {
        const Alloc *a = kv.second;
        if (!a->freed) out.emplace_back(a->user, a->user + a->size);
    }
    std::sort(out.begin(), out.end());
    return out;
}

uint64_t Memory::UsedBytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
}

}  // namespace emu

// counters.cpp — access counters of the emulated device (STEPBENCH_EMU_COUNTERS).
//
// Modules built for the counters have every load and store instrumented by
// g++'s -fsanitize=thread (its __tsan_readN/__tsan_writeN hooks, which
// device.h defines as calls of sbemu_api.access, with no sanitizer runtime
// linked); cp.async copies are counted where they are issued. Each access
// carries its code site (the hook's return address): the n-th access of a
// site by every lane of a warp is one warp request, as the lanes of a warp
// run one instruction stream. A request is then costed as the memory
// system of an sm_80/sm_90 GPU would see it:
//   global: the 32-byte sectors its lanes' bytes fall in, and how many of
//           the sectors' bytes were asked for;
//   shared: 32 banks of 4-byte words; 8- and 16-byte accesses are served
//           in 2 and 4 phases of 16 and 8 lanes; a phase takes as many
//           wavefronts as the most distinct words any one bank holds
//           (lanes reading the same word share it), so bank conflicts =
//           wavefronts - phases.
// g++ splits a 16-byte vector access whose fields are used one by one into
// four 4-byte ones (nvcc keeps one LDG.128/STS.128): a lane's consecutive
// accesses of one kind that stay inside one aligned 16-byte chunk are merged
// back into one access, at the first one's site.
// What it cannot see: caches (every request counts, hit or miss), timing,
// the real compiler's choice of instructions (g++ may split or merge an
// access nvcc would not), local memory (stack accesses are not counted).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "emu.h"

namespace emu {

void SpaceCounts::Add(const SpaceCounts &o) {
    requests += o.requests;
    sectors += o.sectors;
    bytes += o.bytes;
    wavefronts += o.wavefronts;
    ideal_wavefronts += o.ideal_wavefronts;
}

void LaunchCounts::Add(const LaunchCounts &o) {
    global_ld.Add(o.global_ld);
    global_st.Add(o.global_st);
    ldgsts.Add(o.ldgsts);
    shared_ld.Add(o.shared_ld);
    shared_st.Add(o.shared_st);
}

namespace {

enum class Space : uint8_t { None, Global, Shared };

struct Request {
    uint32_t mask = 0;
    uint8_t bytes = 0;
    Space space = Space::None;
    uintptr_t addr[32];
};

struct SiteKey {
    const void *site;
    AccessKind kind;
    bool operator==(const SiteKey &o) const { return site == o.site && kind == o.kind; }
};
struct SiteKeyHash {
    size_t operator()(const SiteKey &k) const {
        return std::hash<const void *>()(k.site) * 31 + static_cast<size_t>(k.kind);
    }
};

// The pending requests of one site in one warp: request i is the
// (base+i)-th access of the site by each lane; occ[l] counts lane l's.
struct Site {
    AccessKind kind;
    uint64_t base = 0;
    uint64_t occ[32] = {};
    std::deque<Request> pending;
};

void CostGlobal(const Request &r, SpaceCounts *c) {
    uintptr_t sectors[64], lo[32], hi[32];
    int ns = 0, nr = 0;
    for (int l = 0; l < 32; l++) {
        if (!((r.mask >> l) & 1u)) continue;
        lo[nr] = r.addr[l];
        hi[nr] = r.addr[l] + r.bytes;
        nr++;
        for (uintptr_t s = r.addr[l] >> 5; s <= (r.addr[l] + r.bytes - 1) >> 5 && ns < 64; s++) sectors[ns++] = s;
    }
    std::sort(sectors, sectors + ns);
    const int distinct = (int)(std::unique(sectors, sectors + ns) - sectors);
    // Distinct bytes: the union of the lanes' ranges.
    std::pair<uintptr_t, uintptr_t> ranges[32];
    for (int i = 0; i < nr; i++) ranges[i] = {lo[i], hi[i]};
    std::sort(ranges, ranges + nr);
    uint64_t bytes = 0;
    uintptr_t end = 0;
    for (int i = 0; i < nr; i++) {
        const uintptr_t start = std::max(ranges[i].first, end);
        if (ranges[i].second > start) bytes += ranges[i].second - start;
        end = std::max(end, ranges[i].second);
    }
    c->requests++;
    c->sectors += distinct;
    c->bytes += bytes;
}

void CostShared(const Request &r, SpaceCounts *c) {
    const unsigned width = std::max<unsigned>(r.bytes, 1);
    const unsigned phases = width <= 4 ? 1 : width <= 8 ? 2 : 4;
    const unsigned per = 32 / phases;
    for (unsigned p = 0; p < phases; p++) {
        uintptr_t words[32][4];  // per bank, the distinct words asked for (up to 4 kept: enough for the max)
        unsigned counts[32] = {};
        bool any = false;
        for (unsigned l = p * per; l < (p + 1) * per; l++) {
            if (!((r.mask >> l) & 1u)) continue;
            any = true;
            for (uintptr_t a = r.addr[l] & ~(uintptr_t)3; a < r.addr[l] + width; a += 4) {
                const unsigned bank = (a >> 2) & 31;
                const uintptr_t word = a >> 2;
                bool seen = false;
                for (unsigned i = 0; i < std::min(counts[bank], 4u); i++) seen = seen || words[bank][i] == word;
                if (seen) continue;
                if (counts[bank] < 4) words[bank][counts[bank]] = word;
                counts[bank]++;
            }
        }
        if (!any) continue;
        unsigned worst = 1;
        for (unsigned b = 0; b < 32; b++) worst = std::max(worst, counts[b]);
        c->wavefronts += worst;
        c->ideal_wavefronts++;
    }
    c->requests++;
    uint64_t bytes = 0;
    for (int l = 0; l < 32; l++) bytes += ((r.mask >> l) & 1u) ? width : 0;
    c->bytes += bytes;
}

}  // namespace

// OpenVector is a lane's access still growing within its 16-byte chunk.
struct OpenVector {
    const void *site = nullptr;
    AccessKind kind = AccessKind::Load;
    uintptr_t lo = 0, hi = 0;  // [lo, hi) so far; lo == hi: empty
    uint64_t age = 0;
};
constexpr int kOpenVectors = 4;  // per lane: loads of a few arrays may interleave

struct BlockCounter::Impl {
    const std::vector<std::pair<uintptr_t, uintptr_t>> *global;
    std::vector<std::pair<uintptr_t, uintptr_t>> shared;
    std::vector<std::unordered_map<SiteKey, Site, SiteKeyHash>> warps;
    std::vector<OpenVector> open;  // [warp][lane][kOpenVectors]
    uint64_t clock = 0;
    size_t last_global = 0;  // index of the last range hit, tried first

    void Record(unsigned warp, unsigned lane, const void *site, uintptr_t addr, unsigned bytes, AccessKind kind);
    void Close(unsigned warp, unsigned lane, OpenVector &v) {
        if (v.hi > v.lo) Record(warp, lane, v.site, v.lo, (unsigned)(v.hi - v.lo), v.kind);
        v.lo = v.hi = 0;
    }
    void CloseAll() {
        for (size_t i = 0; i < open.size(); i++) Close((unsigned)(i / (32 * kOpenVectors)), (unsigned)(i / kOpenVectors % 32), open[i]);
    }

    Space Classify(uintptr_t a) {
        for (const auto &s : shared) {
            if (a >= s.first && a < s.second) return Space::Shared;
        }
        const auto &g = *global;
        if (last_global < g.size() && a >= g[last_global].first && a < g[last_global].second) return Space::Global;
        auto it = std::upper_bound(g.begin(), g.end(), std::make_pair(a, UINTPTR_MAX));
        if (it == g.begin()) return Space::None;
        --it;
        if (a >= it->first && a < it->second) {
            last_global = (size_t)(it - g.begin());
            return Space::Global;
        }
        return Space::None;  // the fiber's stack, the runtime's own memory, module data
    }
};

BlockCounter::BlockCounter(const std::vector<std::pair<uintptr_t, uintptr_t>> *global, uintptr_t dyn,
                           size_t dyn_bytes, unsigned nwarps)
    : impl_(new Impl) {
    impl_->global = global;
    if (dyn_bytes > 0) impl_->shared.emplace_back(dyn, dyn + dyn_bytes);
    impl_->warps.resize(nwarps);
    impl_->open.resize((size_t)nwarps * 32 * kOpenVectors);
}

BlockCounter::~BlockCounter() { delete impl_; }

void BlockCounter::AddShared(uintptr_t p, size_t bytes) { impl_->shared.emplace_back(p, p + bytes); }

void BlockCounter::Access(unsigned warp, unsigned lane, const void *site, uintptr_t addr, unsigned bytes,
                          AccessKind kind) {
    if (warp >= impl_->warps.size() || bytes == 0) return;
    if (impl_->Classify(addr) == Space::None) return;
    OpenVector *slots = &impl_->open[((size_t)warp * 32 + lane) * kOpenVectors];
    const uintptr_t chunk = addr & ~(uintptr_t)15;
    OpenVector *oldest = &slots[0];
    for (int i = 0; i < kOpenVectors; i++) {
        OpenVector &v = slots[i];
        if (v.hi > v.lo && v.kind == kind && (v.lo & ~(uintptr_t)15) == chunk && addr + bytes <= chunk + 16 &&
            addr <= v.hi && addr + bytes >= v.lo) {
            v.lo = std::min(v.lo, addr);
            v.hi = std::max(v.hi, (uintptr_t)(addr + bytes));
            v.age = ++impl_->clock;
            return;
        }
        if (v.hi == v.lo || v.age < oldest->age) oldest = &v;
    }
    impl_->Close(warp, lane, *oldest);
    if (bytes >= 16 || addr + bytes > chunk + 16) {  // a whole vector, or one that crosses chunks: as it is
        impl_->Record(warp, lane, site, addr, bytes, kind);
        return;
    }
    *oldest = OpenVector{site, kind, addr, addr + bytes, ++impl_->clock};
}

void BlockCounter::Impl::Record(unsigned warp, unsigned lane, const void *site, uintptr_t addr, unsigned bytes,
                                AccessKind kind) {
    const Space space = Classify(addr);
    Site &s = warps[warp][SiteKey{site, kind}];
    s.kind = kind;
    const uint64_t i = s.occ[lane]++ - s.base;
    while (s.pending.size() <= i) s.pending.emplace_back();
    Request &r = s.pending[i];
    if (r.mask == 0) r.space = space;
    r.mask |= 1u << lane;
    r.addr[lane] = addr;
    r.bytes = (uint8_t)std::max<unsigned>(r.bytes, std::min(bytes, 255u));
}

namespace {

void Fold(const Request &r, AccessKind kind, LaunchCounts *c) {
    if (r.mask == 0) return;
    if (r.space == Space::Shared) {
        CostShared(r, kind == AccessKind::Load ? &c->shared_ld : &c->shared_st);
        return;
    }
    SpaceCounts *g = kind == AccessKind::Load ? &c->global_ld : kind == AccessKind::Store ? &c->global_st : &c->ldgsts;
    CostGlobal(r, g);
}

}  // namespace

void BlockCounter::Flush(const std::vector<unsigned> &live) {
    impl_->CloseAll();
    for (size_t w = 0; w < impl_->warps.size(); w++) {
        const unsigned mask = w < live.size() ? live[w] : 0;
        for (auto &kv : impl_->warps[w]) {
            Site &s = kv.second;
            uint64_t done = UINT64_MAX;
            for (unsigned l = 0; l < 32; l++) {
                if ((mask >> l) & 1u) done = std::min(done, s.occ[l]);
            }
            if (done == UINT64_MAX) done = s.base + s.pending.size();
            while (s.base < done && !s.pending.empty()) {
                Fold(s.pending.front(), s.kind, &counts);
                s.pending.pop_front();
                s.base++;
            }
        }
    }
}

void BlockCounter::FlushAll() {
    impl_->CloseAll();
    for (auto &warp : impl_->warps) {
        for (auto &kv : warp) {
            for (const Request &r : kv.second.pending) Fold(r, kv.second.kind, &counts);
        }
        warp.clear();
    }
}

namespace {

std::mutex g_file_mu;

void Metrics(std::string *out, const char *op, const SpaceCounts &c, bool first) {
    char buf[1024];
    const double per = c.requests ? (double)c.sectors / (double)c.requests : 0;
    const double used = c.sectors ? 100.0 * (double)c.bytes / (32.0 * (double)c.sectors) : 0;
    snprintf(buf, sizeof buf,
             "%s\"l1tex__t_requests_pipe_lsu_mem_global_op_%s.sum\": %" PRIu64
             ", \"l1tex__t_sectors_pipe_lsu_mem_global_op_%s.sum\": %" PRIu64
             ", \"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_%s.ratio\": %.4g"
             ", \"smsp__sass_average_data_bytes_per_sector_mem_global_op_%s.pct\": %.4g",
             first ? "" : ", ", op, c.requests, op, c.sectors, op, per, op, used);
    *out += buf;
}

void SharedMetrics(std::string *out, const char *op, const SpaceCounts &c) {
    char buf[512];
    snprintf(buf, sizeof buf,
             ", \"smsp__sass_inst_executed_op_shared_%s.sum\": %" PRIu64
             ", \"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_%s.sum\": %" PRIu64
             ", \"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_%s.sum\": %" PRIu64,
             op, c.requests, op, c.wavefronts, op, c.wavefronts - c.ideal_wavefronts);
    *out += buf;
}

}  // namespace

Result WriteCounters(const std::string &path, const Launch &l, const LaunchCounts &c, uint64_t ns) {
    std::string line = "{\"emulated\": true, \"kernel\": \"" + std::string(l.f->k->name) + "\"";
    char buf[256];
    snprintf(buf, sizeof buf, ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"dynamic_shared_bytes\": %u",
             l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z, l.dynamic_shared);
    line += buf;
    const uint64_t global_bytes = c.global_ld.sectors * 32 + c.global_st.sectors * 32 + c.ldgsts.sectors * 32;
    snprintf(buf, sizeof buf, ", \"global_sector_bytes\": %" PRIu64 ", \"emulated_seconds\": %.6g, \"metrics\": {",
             global_bytes, (double)ns / 1e9);
    line += buf;
    Metrics(&line, "ld", c.global_ld, true);
    Metrics(&line, "st", c.global_st, false);
    Metrics(&line, "ldgsts", c.ldgsts, false);
    SharedMetrics(&line, "ld", c.shared_ld);
    SharedMetrics(&line, "st", c.shared_st);
    line += "}}\n";
    std::lock_guard<std::mutex> lock(g_file_mu);
    FILE *f = fopen(path.c_str(), "a");
    if (f == nullptr) return Result::Fail(kNotPermitted, "STEPBENCH_EMU_COUNTERS=" + path + ": " + strerror(errno));
    const bool ok = fwrite(line.data(), 1, line.size(), f) == line.size();
    if (fclose(f) != 0 || !ok) return Result::Fail(kNotPermitted, "STEPBENCH_EMU_COUNTERS=" + path + ": write failed");
    return Result::Ok();
}

}  // namespace emu

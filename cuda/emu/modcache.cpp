// modcache.cpp — the emulated NVRTC's module cache (see modcache.h).
#include "modcache.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

namespace emu {
namespace {

// ---- sha256 (FIPS 180-4) ----

const uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void Block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = k + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
        const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

bool ReadWhole(const std::string &path, std::string *out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return bool(f) || f.eof();
}

// Field appends one length-prefixed field to a key's text.
void Field(std::string *key, const std::string &name, const std::string &value) {
    *key += name + " " + std::to_string(value.size()) + "\n" + value + "\n";
}

std::string Replace(std::string s, const std::string &from, const std::string &to) {
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
    return s;
}

// CompilerIdentity is what names cxx's build: its --version and its
// cc1plus's path, size and modification time (once per process and cxx).
std::string CompilerIdentity(const std::string &cxx) {
    static std::mutex mu;
    static std::string cached_cxx, cached;
    std::lock_guard<std::mutex> lock(mu);
    if (!cached.empty() && cached_cxx == cxx) return cached;
    std::string id;
    const std::string quoted = "'" + Replace(cxx, "'", "'\\''") + "'";
    for (const char *arg : {" --version", " -print-prog-name=cc1plus"}) {
        FILE *p = popen((quoted + arg + " 2>/dev/null").c_str(), "r");
        if (p == nullptr) return "";
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0) id.append(buf, n);
        if (pclose(p) != 0) return "";  // no identity: no caching
    }
    const std::string cc1 = id.substr(id.rfind('\n', id.size() - 2) + 1);
    struct stat st;
    if (stat(Replace(cc1, "\n", "").c_str(), &st) == 0) {
        id += std::to_string((long long)st.st_size) + " " + std::to_string((long long)st.st_mtim.tv_sec) + "." +
              std::to_string((long long)st.st_mtim.tv_nsec) + "\n";
    }
    cached_cxx = cxx;
    cached = id;
    return id;
}

// IncludedFiles is every file the line markers of pre name (# N "path" ...),
// each once, in order of first appearance; <built-in> and the like excluded.
std::vector<std::string> IncludedFiles(const std::string &pre) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    size_t start = 0;
    while (start < pre.size()) {
        size_t nl = pre.find('\n', start);
        if (nl == std::string::npos) nl = pre.size();
        if (pre[start] == '#' && start + 2 < nl && pre[start + 1] == ' ' && isdigit((unsigned char)pre[start + 2])) {
            const size_t q1 = pre.find('"', start);
            const size_t q2 = q1 < nl ? pre.find('"', q1 + 1) : std::string::npos;
            if (q2 < nl && pre[q1 + 1] != '<') {
                std::string path = pre.substr(q1 + 1, q2 - q1 - 1);
                if (seen.insert(path).second) out.push_back(path);
            }
        }
        start = nl + 1;
    }
    return out;
}

const char kEntryMagic[] = "sbemu-module-entry/v1\n";

}  // namespace

std::string Sha256Hex(const std::string &data) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const size_t full = data.size() / 64 * 64;
    for (size_t i = 0; i < full; i += 64) Block(h, reinterpret_cast<const unsigned char *>(data.data()) + i);
    unsigned char tail[128] = {0};
    const size_t rest = data.size() - full;
    memcpy(tail, data.data() + full, rest);
    tail[rest] = 0x80;
    const size_t blocks = rest + 9 > 64 ? 2 : 1;
    const uint64_t bits = uint64_t(data.size()) * 8;
    for (int i = 0; i < 8; i++) tail[blocks * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t b = 0; b < blocks; b++) Block(h, tail + 64 * b);
    char hex[65];
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", h[i]);
    return std::string(hex, 64);
}

std::string ModuleCacheDir() {
    const char *d = getenv("STEPBENCH_EMU_MODULE_CACHE");
    return d != nullptr ? d : "";
}

std::string ModuleKey(const std::string &build_id, const std::string &cxx, const std::vector<std::string> &argv,
                      const std::string &tmpdir, const std::string &pre, const std::string &unit_path,
                      const std::string &unit) {
    const std::string compiler = CompilerIdentity(cxx);
    if (compiler.empty()) return "";
    std::string key;
    Field(&key, "emulator", build_id);
    Field(&key, "compiler", compiler);
    // -I directories matter only through the files g++ found in them,
    // which are below with their paths, and what __has_include saw, which is
    // in the preprocessed text: without them in the key, a --kernels-dir
    // overlay (its directory passed with -I) shares every module but the
    // sources it changed.
    for (size_t i = 0; i < argv.size(); i++) {
        if (argv[i] == "-I") {
            i++;
        } else if (argv[i].rfind("-I", 0) != 0) {
            Field(&key, "arg", Replace(argv[i], tmpdir, "$TMP"));
        }
    }
    Field(&key, "preprocessed", Replace(pre, tmpdir, "$TMP"));
    for (const std::string &path : IncludedFiles(pre)) {
        // A name no file has is a #line directive's (common.cu's in every
        // unit): its text is in the file that holds the directive.
        std::string text = "(no such file)";
        if (path == unit_path) {
            text = unit;
        } else {
            ReadWhole(path, &text);
        }
        Field(&key, "file", Replace(path, tmpdir, "$TMP"));
        Field(&key, "content", text);
    }
    return Sha256Hex(key);
}

bool ModuleCacheGet(const std::string &dir, const std::string &key, std::string *log, std::string *module) {
    std::string data;
    if (key.empty() || !ReadWhole(dir + "/" + key + ".module", &data)) return false;
    const size_t magic = sizeof kEntryMagic - 1;
    if (data.compare(0, magic, kEntryMagic) != 0) return false;
    const size_t nl = data.find('\n', magic);
    if (nl == std::string::npos) return false;
    size_t log_bytes = 0, module_bytes = 0;
    char sum[65] = {0};
    if (sscanf(data.c_str() + magic, "%zu %zu %64s", &log_bytes, &module_bytes, sum) != 3) return false;
    const std::string body = data.substr(nl + 1);
    if (body.size() != log_bytes + module_bytes || Sha256Hex(key + "\n" + body) != sum) return false;
    *log = body.substr(0, log_bytes);
    *module = body.substr(log_bytes);
    return true;
}

void ModuleCachePut(const std::string &dir, const std::string &key, const std::string &log, const std::string &module) {
    if (key.empty()) return;
    mkdir(dir.c_str(), 0755);
    const std::string body = log + module;
    const std::string header = std::string(kEntryMagic) + std::to_string(log.size()) + " " +
                               std::to_string(module.size()) + " " + Sha256Hex(key + "\n" + body) + "\n";
    std::string tmp = dir + "/." + key + ".XXXXXX";
    const int fd = mkstemp(&tmp[0]);
    if (fd < 0) return;
    const std::string data = header + body;
    bool ok = true;
    for (size_t off = 0; ok && off < data.size();) {
        const ssize_t n = write(fd, data.data() + off, data.size() - off);
        ok = n > 0;
        off += ok ? size_t(n) : 0;
    }
    fchmod(fd, 0644);
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), (dir + "/" + key + ".module").c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace emu

// modcache.h — the emulated NVRTC's module cache (STEPBENCH_EMU_MODULE_CACHE).
//
// g++ builds each emulated module in seconds; a test suite asks for the
// same module many times, from many processes (every test binary and the
// child processes they start keep cubin caches of their own). With
// STEPBENCH_EMU_MODULE_CACHE=DIR the emulated NVRTC keeps every module it
// builds in DIR, content-addressed: the key is the sha256 of everything the
// build reads (see ModuleKey), so a module is reused only where g++ would
// have built the same one. Entries are written to a temporary file and
// renamed (processes race), and carry a checksum that a reader verifies: a
// damaged entry is built again and replaced.
#ifndef SBEMU_MODCACHE_H
#define SBEMU_MODCACHE_H

#include <string>
#include <vector>

namespace emu {

// Sha256Hex is the sha256 of data, in hex.
std::string Sha256Hex(const std::string &data);

// ModuleCacheDir is $STEPBENCH_EMU_MODULE_CACHE ("" when unset: no cache).
std::string ModuleCacheDir();

// ModuleKey is the cache key of a build: the emulator's build (build_id:
// its sources), the compiler's identity (cxx's --version and the size and
// time of its cc1plus), the build's command line (argv, with the compile
// directory tmpdir written as "$TMP"; -I directories left out), the
// preprocessed unit pre, and the content of every file pre names in its
// line markers (the unit itself, every header it reached, the system's
// included), each with its path. unit is the unit's final text (the kernel
// table appended), read in place of the file at unit_path. "" (no caching)
// when the compiler cannot say what it is.
std::string ModuleKey(const std::string &build_id, const std::string &cxx, const std::vector<std::string> &argv,
                      const std::string &tmpdir, const std::string &pre, const std::string &unit_path,
                      const std::string &unit);

// ModuleCacheGet reads the entry of key; false when there is none or it
// fails its checksum.
bool ModuleCacheGet(const std::string &dir, const std::string &key, std::string *log, std::string *module);

// ModuleCachePut writes the entry of key atomically (best effort: a cache
// that cannot be written only costs time).
void ModuleCachePut(const std::string &dir, const std::string &key, const std::string &log, const std::string &module);

}  // namespace emu

#endif

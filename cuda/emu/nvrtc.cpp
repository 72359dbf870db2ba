// nvrtc.cpp — the emulated NVRTC (libnvrtc.so.13 of build/emu). It compiles
// the CUDA C++ a program holds with g++ into a shared object, the "cubin"
// that the emulated driver's cuModuleLoadData accepts:
//   1. __shared__ declarations become per-block storage (rewrite.cpp);
//   2. g++ -E with __global__ left as a token finds the kernels;
//   3. a kernel table is appended and g++ builds the module, with device.h
//      (the CUDA device environment) force-included;
//   4. with STEPBENCH_EMU_MODULE_CACHE=DIR, step 3 is skipped when DIR holds
//      a module built from the same inputs (modcache.h): what a test suite's
//      many processes ask for again and again.
// The log has NVRTC's "file(line): error" form, and with -Xptxas -v / 
// --ptxas-options=-v ptxas-style resource lines (registers and shared memory
// are not modelled: they read 0). nvrtcVersion reports the emulator's own
// version (0.1), so real and emulated cubins never share a cache entry.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "modcache.h"
#include "rewrite.h"

extern char **environ;

#define API extern "C" __attribute__((visibility("default")))

// CountersWanted: STEPBENCH_EMU_COUNTERS names a file, or
// STEPBENCH_EMU_CHECK_PDL=1 asks for programmatic launches' accesses to be
// checked, so modules are built with every load and store instrumented
// (g++ -fsanitize=thread's hooks, which device.h turns into sbemu_api.access
// calls).
static bool CountersWanted() {
    const char *v = getenv("STEPBENCH_EMU_COUNTERS");
    const char *pdl = getenv("STEPBENCH_EMU_CHECK_PDL");
    return (v != nullptr && *v != '\0') || (pdl != nullptr && strcmp(pdl, "1") == 0);
}

namespace {

#include "headers.inc"   // kAbiH, kDeviceH: abi.h and device.h as strings
#include "build_id.inc"  // kEmuBuildID: the sha256 of the emulated NVRTC's sources
extern "C" {
#include "abi.h"
}

enum {
    kSuccess = 0,
    kOutOfMemory = 1,
    kProgramCreationFailure = 2,
    kInvalidInput = 3,
    kInvalidProgram = 4,
    kInvalidOption = 5,
    kCompilation = 6,
    kBuiltinOperationFailure = 7,
    kInternalError = 11,
};

struct Program {
    std::string src, name;
    std::vector<std::pair<std::string, std::string>> headers;  // include name, text
    std::string log;
    std::vector<char> cubin;
    bool compiled = false;
};

bool WriteFile(const std::string &path, const std::string &text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    return bool(f);
}

bool ReadFile(const std::string &path, std::string *out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return true;
}

// Run executes argv with stdout and stderr into log; returns the exit status
// (-1 when it could not start).
int Run(const std::vector<std::string> &argv, const std::string &log_path) {
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void RemoveTree(const std::string &dir) {
    std::vector<std::string> argv = {"rm", "-rf", dir};
    Run(argv, "/dev/null");
}

std::string Compiler() {
    const char *cxx = getenv("STEPBENCH_EMU_CXX");
    return cxx && *cxx ? cxx : "g++";
}

struct Options {
    int arch = 0;
    bool virtual_arch = false;  // compute_XX: checked, but no cubin (as NVRTC: PTX only)
    bool verbose = false;
    std::string std = "c++17";
    std::vector<std::string> passthrough;  // -D, -U, -I
};

// ParseOptions accepts NVRTC's options; those that only tune code
// generation on a GPU are accepted and ignored.
bool ParseOptions(int n, const char *const *opts, Options *o, std::string *err) {
    static const char *ignored_prefixes[] = {"-default-device", "--device-as-default-execution-space", "-lineinfo",
                                             "--generate-line-info", "-G", "--device-debug", "-use_fast_math",
                                             "--use_fast_math", "-fmad", "--fmad", "-ftz", "--ftz", "-prec-div",
                                             "--prec-div", "-prec-sqrt", "--prec-sqrt", "-maxrregcount",
                                             "--maxrregcount", "-restrict", "--restrict", "-rdc", "--relocatable-device-code",
                                             "-dopt", "--dopt", "-extra-device-vectorization",
                                             "--extra-device-vectorization", "-dlto", "--dlink-time-opt", "-w",
                                             "--disable-warnings", "-builtin-move-forward", "-builtin-initializer-list",
                                             "--split-compile", "-split-compile", "--time", "-time"};
    for (int i = 0; i < n; i++) {
        std::string a = opts[i] ? opts[i] : "";
        std::string arch;
        if (a.rfind("--gpu-architecture=", 0) == 0) {
            arch = a.substr(19);
        } else if (a.rfind("-arch=", 0) == 0) {
            arch = a.substr(6);
        } else if ((a == "--gpu-architecture" || a == "-arch") && i + 1 < n) {
            arch = opts[++i];
        } else if (a == "--ptxas-options=-v" || a == "--ptxas-options=--verbose" || a == "-Xptxas=-v") {
            o->verbose = true;
            continue;
        } else if (a == "-Xptxas" && i + 1 < n) {
            const std::string v = opts[++i];
            if (v == "-v" || v == "--verbose") o->verbose = true;
            continue;
        } else if (a.rfind("--ptxas-options=", 0) == 0) {
            continue;
        } else if (a.rfind("-std=", 0) == 0 || a.rfind("--std=", 0) == 0) {
            o->std = a.substr(a.find('=') + 1);
            if (o->std != "c++11" && o->std != "c++14" && o->std != "c++17" && o->std != "c++20") {
                *err = "nvrtc: error: invalid value for -std: " + o->std;
                return false;
            }
            continue;
        } else if ((a == "--include-path" || a == "--define-macro") && i + 1 < n) {
            // NVRTC's two-argument spellings: the directory or macro follows.
            o->passthrough.push_back((a == "--include-path" ? "-I" : "-D") + std::string(opts[++i]));
            continue;
        } else if (a.rfind("-D", 0) == 0 || a.rfind("-U", 0) == 0 || a.rfind("-I", 0) == 0 ||
                   a.rfind("--define-macro=", 0) == 0 || a.rfind("--include-path=", 0) == 0) {
            if (a.rfind("--define-macro=", 0) == 0) a = "-D" + a.substr(15);
            if (a.rfind("--include-path=", 0) == 0) a = "-I" + a.substr(15);
            if (a.size() == 2 && i + 1 < n) a += opts[++i];
            o->passthrough.push_back(a);
            continue;
        } else {
            bool known = false;
            for (const char *p : ignored_prefixes) {
                const size_t len = strlen(p);
                if (a.compare(0, len, p) == 0 && (a.size() == len || a[len] == '=')) known = true;
            }
            if (known) continue;
            *err = "nvrtc: error: unrecognized option " + a + " (emulated NVRTC)";
            return false;
        }
        o->virtual_arch = arch.rfind("compute_", 0) == 0;
        if (arch == "sm_80" || arch == "compute_80") {
            o->arch = 80;
        } else if (arch == "sm_90" || arch == "compute_90") {
            o->arch = 90;
        } else {
            *err = "nvrtc: error: invalid value for --gpu-architecture: " + arch +
                   " (the emulated NVRTC builds sm_80 and sm_90 cubins only)";
            return false;
        }
    }
    if (o->arch == 0) {
        *err = "nvrtc: error: the emulated NVRTC needs --gpu-architecture=sm_80 or sm_90 (it makes cubins only)";
        return false;
    }
    return true;
}

std::string PtxasLines(const std::vector<emu::KernelDecl> &kernels, int arch) {
    std::string s;
    for (const emu::KernelDecl &k : kernels) {
        s += "ptxas info    : Compiling entry function '" + k.name + "' for 'sm_" + std::to_string(arch) + "'\n";
        s += "ptxas info    : Function properties for " + k.name + "\n";
        s += "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        s += "ptxas info    : Used 0 registers, 0 bytes smem, 0 bytes cmem[0]\n";
    }
    return s;
}

int Compile(Program *p, const Options &o) {
    char tmpl[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpl, sizeof tmpl, "%s/sbemu-nvrtc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(tmpl) == nullptr) {
        p->log = std::string("emulated NVRTC: cannot create a temporary directory: ") + strerror(errno) + "\n";
        return kBuiltinOperationFailure;
    }
    const std::string dir = tmpl;
    struct Cleanup {
        std::string dir;
        ~Cleanup() {
            const char *keep = getenv("STEPBENCH_EMU_KEEP_TEMP");
            if (!(keep && strcmp(keep, "1") == 0)) RemoveTree(dir);
        }
    } cleanup{dir};

    std::string rewrite_err;
    const std::string unit = emu::RewriteShared(p->src, &rewrite_err);
    std::string name = p->name.empty() ? "default_program" : p->name;
    for (char &c : name) {
        if (c == '/') c = '_';
    }
    const std::string unit_path = dir + "/" + name;
    bool ok = WriteFile(dir + "/sbemu_abi.h", kAbiH) && WriteFile(dir + "/sbemu_device.h", kDeviceH) &&
              WriteFile(unit_path, unit);
    for (const auto &h : p->headers) ok = ok && WriteFile(dir + "/" + h.first, h.second);
    if (!ok) {
        p->log = "emulated NVRTC: cannot write to " + dir + "\n";
        return kBuiltinOperationFailure;
    }
    std::vector<std::string> common = {Compiler(), "-std=" + o.std, "-x", "c++", "-I", dir,
                                       "-D__CUDA_ARCH__=" + std::to_string(o.arch * 10)};
    for (const std::string &a : o.passthrough) common.push_back(a);
    common.insert(common.end(), {"-include", dir + "/sbemu_abi.h", "-include", dir + "/sbemu_device.h"});

    const std::string log_path = dir + "/log.txt";
    std::vector<std::string> scan = common;
    scan.insert(scan.end(), {"-E", "-DSBEMU_SCAN", unit_path, "-o", dir + "/scan.ii"});
    int rc = Run(scan, log_path);
    std::string raw_log;
    ReadFile(log_path, &raw_log);
    std::string header = "emulated NVRTC: " + name + " compiled for sm_" + std::to_string(o.arch) + " by " +
                         Compiler() + " for the emulated device\n";
    if (!rewrite_err.empty()) header += name + ": emulator: " + rewrite_err + "\n";
    if (rc != 0) {
        p->log = header + emu::GccToNvrtcLog(raw_log, dir) +
                 (rc < 0 ? "emulated NVRTC: cannot run " + Compiler() + " (set STEPBENCH_EMU_CXX)\n" : "");
        return kCompilation;
    }
    std::string pre;
    std::vector<emu::KernelDecl> kernels;
    std::string scan_err;
    if (!ReadFile(dir + "/scan.ii", &pre) || !emu::ScanKernels(pre, &kernels, &scan_err)) {
        p->log = header + name + ": error: " + (scan_err.empty() ? "cannot read the preprocessed unit" : scan_err) + "\n";
        return kCompilation;
    }
    const std::string final_unit = unit + emu::RegistrationSource(kernels, o.arch);
    if (!WriteFile(unit_path, final_unit)) {
        p->log = header + "emulated NVRTC: cannot write the unit\n";
        return kBuiltinOperationFailure;
    }
    std::vector<std::string> build = common;
    build.insert(build.end(), {"-O2", "-g0", "-fPIC", "-fno-strict-aliasing", "-fno-exceptions",
                               "-fno-rtti", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fno-gnu-unique",
                               "-Wno-unused-function"});
    const bool counted = CountersWanted();
    if (counted) {
        // Every load and store calls a __tsan_* hook (device.h defines them);
        // compiled only, and linked without -fsanitize: no sanitizer runtime.
        // (Function entries and exits are not counted: no hook calls for them.)
        build.insert(build.end(), {"-DSBEMU_COUNTERS", "-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                                   "-Wno-tsan", "-c", unit_path, "-o", dir + "/module.o"});
    } else {
        build.insert(build.end(), {"-shared", unit_path, "-o", dir + "/module.so"});
    }
    // A module built before from the same inputs (STEPBENCH_EMU_MODULE_CACHE).
    const std::string cache_dir = o.virtual_arch ? "" : emu::ModuleCacheDir();
    std::string key;
    if (!cache_dir.empty()) {
        std::vector<std::string> argv = build;
        argv.push_back(o.verbose ? "(ptxas lines)" : "(no ptxas lines)");
        key = emu::ModuleKey(kEmuBuildID, Compiler(), argv, dir, pre, unit_path, final_unit);
        std::string so;
        if (emu::ModuleCacheGet(cache_dir, key, &p->log, &so)) {
            p->cubin.assign(so.begin(), so.end());
            return kSuccess;
        }
    }
    remove(log_path.c_str());
    rc = Run(build, log_path);
    if (rc == 0 && counted) {
        rc = Run({Compiler(), "-shared", "-fPIC", dir + "/module.o", "-o", dir + "/module.so"}, log_path);
    }
    raw_log.clear();
    ReadFile(log_path, &raw_log);
    p->log = header + emu::GccToNvrtcLog(raw_log, dir);
    if (rc != 0) return kCompilation;
    std::string so;
    if (!ReadFile(dir + "/module.so", &so)) {
        p->log += "emulated NVRTC: the module was not written\n";
        return kBuiltinOperationFailure;
    }
    if (o.virtual_arch) return kSuccess;  // NVRTC makes PTX only; the emulator has none to give
    if (o.verbose) p->log += PtxasLines(kernels, o.arch);
    p->cubin.assign(so.begin(), so.end());
    if (!cache_dir.empty()) emu::ModuleCachePut(cache_dir, key, p->log, so);
    return kSuccess;
}

Program *Prog(void *h) { return static_cast<Program *>(h); }

}  // namespace


#define SBEMU_STR2(x) #x
#define SBEMU_STR(x) SBEMU_STR2(x)

// The description is part of the cubin cache key: it names the module ABI
// and whether the modules are built for the access counters, so that no
// stale or differently built module is ever loaded from the cache.
API const char *sbemu_describe(void) {
    static const std::string plain = "stepbench emulated NVRTC 0.1 (module ABI " SBEMU_STR(SBEMU_ABI_VERSION) "; compiles kernels with g++ into modules for the emulated device)";
    static const std::string counted = "stepbench emulated NVRTC 0.1 (module ABI " SBEMU_STR(SBEMU_ABI_VERSION) ", loads and stores counted; compiles kernels with g++ into modules for the emulated device)";
    return CountersWanted() ? counted.c_str() : plain.c_str();
}

API const char *nvrtcGetErrorString(int result) {
    switch (result) {
    case 0: return "NVRTC_SUCCESS";
    case 1: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case 2: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case 3: return "NVRTC_ERROR_INVALID_INPUT";
    case 4: return "NVRTC_ERROR_INVALID_PROGRAM";
    case 5: return "NVRTC_ERROR_INVALID_OPTION";
    case 6: return "NVRTC_ERROR_COMPILATION";
    case 7: return "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE";
    case 8: return "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case 9: return "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case 10: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    case 11: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
    return "NVRTC_ERROR unknown";
}

API int nvrtcVersion(int *major, int *minor) {
    if (major == nullptr || minor == nullptr) return kInvalidInput;
    *major = 0;
    *minor = 1;
    return kSuccess;
}

API int nvrtcGetNumSupportedArchs(int *n) {
    if (n == nullptr) return kInvalidInput;
    *n = 2;
    return kSuccess;
}

API int nvrtcGetSupportedArchs(int *archs) {
    if (archs == nullptr) return kInvalidInput;
    archs[0] = 80;
    archs[1] = 90;
    return kSuccess;
}

API int nvrtcCreateProgram(void **prog, const char *src, const char *name, int num_headers,
                           const char *const *headers, const char *const *include_names) {
    if (prog == nullptr || src == nullptr) return kInvalidInput;
    if (num_headers < 0 || (num_headers > 0 && (headers == nullptr || include_names == nullptr))) return kInvalidInput;
    auto *p = new Program;
    p->src = src;
    p->name = name ? name : "";
    for (int i = 0; i < num_headers; i++) {
        if (headers[i] == nullptr || include_names[i] == nullptr) {
            delete p;
            return kInvalidInput;
        }
        p->headers.push_back({include_names[i], headers[i]});
    }
    *prog = p;
    return kSuccess;
}

API int nvrtcDestroyProgram(void **prog) {
    if (prog == nullptr || *prog == nullptr) return kInvalidProgram;
    delete Prog(*prog);
    *prog = nullptr;
    return kSuccess;
}

API int nvrtcCompileProgram(void *prog, int num_options, const char *const *options) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (num_options < 0 || (num_options > 0 && options == nullptr)) return kInvalidInput;
    Options o;
    std::string err;
    p->cubin.clear();
    p->compiled = false;
    if (!ParseOptions(num_options, options, &o, &err)) {
        p->log = err + "\n";
        return kInvalidOption;
    }
    const int rc = Compile(p, o);
    p->compiled = rc == kSuccess;
    return rc;
}

API int nvrtcGetProgramLogSize(void *prog, size_t *size) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (size == nullptr) return kInvalidInput;
    *size = p->log.size() + 1;
    return kSuccess;
}

API int nvrtcGetProgramLog(void *prog, char *log) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (log == nullptr) return kInvalidInput;
    memcpy(log, p->log.c_str(), p->log.size() + 1);
    return kSuccess;
}

API int nvrtcGetCUBINSize(void *prog, size_t *size) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (size == nullptr) return kInvalidInput;
    *size = p->cubin.size();
    return kSuccess;
}

API int nvrtcGetCUBIN(void *prog, char *cubin) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (cubin == nullptr) return kInvalidInput;
    if (!p->compiled) return kInvalidProgram;
    if (p->cubin.empty()) return kSuccess;
    memcpy(cubin, p->cubin.data(), p->cubin.size());
    return kSuccess;
}

API int nvrtcGetPTXSize(void *prog, size_t *size) {
    Program *p = Prog(prog);
    if (p == nullptr) return kInvalidProgram;
    if (size == nullptr) return kInvalidInput;
    *size = 1;  // no PTX: the emulated device runs host code
    return kSuccess;
}

API int nvrtcGetPTX(void *prog, char *ptx) {
    if (Prog(prog) == nullptr) return kInvalidProgram;
    if (ptx == nullptr) return kInvalidInput;
    ptx[0] = '\0';
    return kSuccess;
}

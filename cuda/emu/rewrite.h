// rewrite.h — source transformations of the emulated NVRTC.
#ifndef SBEMU_REWRITE_H
#define SBEMU_REWRITE_H

#include <string>
#include <vector>

namespace emu {

// RewriteShared turns every __shared__ declaration of src into per-block
// storage the emulated device understands (see device.h): static ones into
// SBEMU_SHARED(type, name, dims), extern ones (dynamic shared memory) into
// uses of SBEMU_DYNAMIC_SHARED(type). Line structure is kept, so #line-based
// diagnostics stay right. A declaration it cannot parse is left alone and
// fails to compile with a name that says so; err describes it.
std::string RewriteShared(const std::string &src, std::string *err);

struct KernelDecl {
    std::string name;
    std::string bounds;               // __launch_bounds__'s first argument, "" when none
    std::vector<std::string> params;  // parameter names (or "#i")
};

// ScanKernels finds the __global__ function definitions of preprocessed
// text (where __global__ and __launch_bounds__ were left as tokens). A
// template kernel is an error: it has no name a module could export.
bool ScanKernels(const std::string &pre, std::vector<KernelDecl> *out, std::string *err);

// RegistrationSource is the C++ appended to a unit: the module's kernel
// table and sbemu_module_init.
std::string RegistrationSource(const std::vector<KernelDecl> &kernels, int arch);

// GccToNvrtcLog rewrites g++ diagnostics "file:line:col: error: msg" into
// NVRTC's "file(line): error: msg" and drops the temporary directory from paths.
std::string GccToNvrtcLog(const std::string &log, const std::string &tmpdir);

}  // namespace emu

#endif

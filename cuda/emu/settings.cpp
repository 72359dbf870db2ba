// settings.cpp — STEPBENCH_EMU_* environment variables, and CUresult names.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "emu.h"

namespace emu {
namespace {

bool ParseUint(const char *s, uint64_t *out) {
    if (s == nullptr || *s == '\0') return false;
    char *end = nullptr;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || *end != '\0' || s[0] == '-') return false;
    *out = v;
    return true;
}

Result Bad(const char *var, const char *value, const char *want) {
    return Result::Fail(kInvalidValue, std::string(var) + "=" + value + ": want " + want);
}

}  // namespace

Result LoadSettings(Settings *s) {
    *s = Settings{};
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    s->threads = (int)std::min(cpus, 8u);
    if (const char *v = getenv("STEPBENCH_EMU_SCHEDULE"); v && *v) {
        const std::string sv = v;
        if (sv == "forward") {
            s->schedule = Schedule::Forward;
        } else if (sv == "reverse") {
            s->schedule = Schedule::Reverse;
        } else if (sv == "random") {
            s->schedule = Schedule::Random;
        } else if (sv.rfind("random:", 0) == 0 && ParseUint(v + 7, &s->seed)) {
            s->schedule = Schedule::Random;
        } else if (sv == "warp-serial") {
            s->schedule = Schedule::WarpSerial;
        } else if (sv == "warp-serial-reverse") {
            s->schedule = Schedule::WarpSerialReverse;
        } else {
            return Bad("STEPBENCH_EMU_SCHEDULE", v, "forward, reverse, random, random:SEED, warp-serial or warp-serial-reverse");
        }
    }
    if (const char *v = getenv("STEPBENCH_EMU_COUNTERS"); v && *v) s->counters_path = v;
    if (const char *v = getenv("STEPBENCH_EMU_CHECK_PDL"); v && *v) {
        if (strcmp(v, "1") != 0 && strcmp(v, "0") != 0) return Bad("STEPBENCH_EMU_CHECK_PDL", v, "0 or 1");
        s->check_pdl = strcmp(v, "1") == 0;
    }
    uint64_t n = 0;
    if (const char *v = getenv("STEPBENCH_EMU_THREADS"); v && *v) {
        if (!ParseUint(v, &n) || n < 1 || n > 64) return Bad("STEPBENCH_EMU_THREADS", v, "1..64");
        s->threads = (int)n;
    }
    if (const char *v = getenv("STEPBENCH_EMU_GUARD"); v && *v) {
        if (strcmp(v, "after") == 0) {
            s->guard_before = false;
        } else if (strcmp(v, "before") == 0) {
            s->guard_before = true;
        } else {
            return Bad("STEPBENCH_EMU_GUARD", v, "after or before");
        }
    }
    if (const char *v = getenv("STEPBENCH_EMU_POISON"); v && *v) {
        if (strcmp(v, "nan") == 0) {
            s->poison = 0xff;
        } else if (strcmp(v, "zero") == 0) {
            s->poison = 0;
        } else if (ParseUint(v, &n) && n <= 255) {
            s->poison = (uint8_t)n;
        } else {
            return Bad("STEPBENCH_EMU_POISON", v, "nan, zero or a byte value such as 0xa5");
        }
    }
    if (const char *v = getenv("STEPBENCH_EMU_DEVICES"); v && *v) {
        if (!ParseUint(v, &n) || n < 1 || n > 8) return Bad("STEPBENCH_EMU_DEVICES", v, "1..8");
        s->devices = (int)n;
    }
    if (const char *v = getenv("STEPBENCH_EMU_MEM_BYTES"); v && *v) {
        if (!ParseUint(v, &n) || n < (1u << 20)) return Bad("STEPBENCH_EMU_MEM_BYTES", v, "a byte count >= 1048576");
        s->mem_bytes = n;
    }
    if (const char *v = getenv("STEPBENCH_EMU_STRICT_LAZY_LOADING"); v && *v) {
        if (strcmp(v, "1") == 0) {
            s->strict_lazy_loading = true;
        } else if (strcmp(v, "0") == 0) {
            s->strict_lazy_loading = false;
        } else {
            return Bad("STEPBENCH_EMU_STRICT_LAZY_LOADING", v, "0 or 1");
        }
    }
    if (const char *v = getenv("STEPBENCH_EMU_SMS"); v && *v) {
        if (!ParseUint(v, &n) || n < 1 || n > 1024) return Bad("STEPBENCH_EMU_SMS", v, "1..1024");
        s->sms = (int)n;
    }
    if (const char *v = getenv("STEPBENCH_EMU_CC"); v && *v) {
        // MAJOR.MINOR, e.g. 8.0: what the device reports as its compute capability.
        unsigned major = 0, minor = 0;
        char rest = 0;
        if (sscanf(v, "%u.%u%c", &major, &minor, &rest) != 2 || major < 7 || major > 12 || minor > 9) {
            return Bad("STEPBENCH_EMU_CC", v, "a compute capability MAJOR.MINOR such as 8.0 or 9.0");
        }
        s->cc_major = (int)major, s->cc_minor = (int)minor;
    }
    return Result::Ok();
}

const char *ErrorName(int code) {
    switch (code) {
    case kSuccess: return "CUDA_SUCCESS";
    case kInvalidValue: return "CUDA_ERROR_INVALID_VALUE";
    case kOutOfMemory: return "CUDA_ERROR_OUT_OF_MEMORY";
    case kNotInitialized: return "CUDA_ERROR_NOT_INITIALIZED";
    case kNoDevice: return "CUDA_ERROR_NO_DEVICE";
    case kInvalidDevice: return "CUDA_ERROR_INVALID_DEVICE";
    case kInvalidImage: return "CUDA_ERROR_INVALID_IMAGE";
    case kInvalidContext: return "CUDA_ERROR_INVALID_CONTEXT";
    case kNoBinaryForGPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case kInvalidHandle: return "CUDA_ERROR_INVALID_HANDLE";
    case kIllegalState: return "CUDA_ERROR_ILLEGAL_STATE";
    case kNotFound: return "CUDA_ERROR_NOT_FOUND";
    case kNotReady: return "CUDA_ERROR_NOT_READY";
    case kIllegalAddress: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case kLaunchOutOfResources: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case kAssert: return "CUDA_ERROR_ASSERT";
    case kHardwareStackError: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case kIllegalInstruction: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case kMisalignedAddress: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case kLaunchFailed: return "CUDA_ERROR_LAUNCH_FAILED";
    case kNotPermitted: return "CUDA_ERROR_NOT_PERMITTED";
    case kNotSupported: return "CUDA_ERROR_NOT_SUPPORTED";
    case kCaptureUnsupported: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case kCaptureInvalidated: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case kCapturedEvent: return "CUDA_ERROR_CAPTURED_EVENT";
    case kCaptureWrongThread: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case kUnknown: return "CUDA_ERROR_UNKNOWN";
    }
    return nullptr;
}

const char *ErrorString(int code) {
    switch (code) {
    case kSuccess: return "no error";
    case kInvalidValue: return "invalid argument";
    case kOutOfMemory: return "out of memory";
    case kNotInitialized: return "initialization error";
    case kNoDevice: return "no CUDA-capable device is detected";
    case kInvalidDevice: return "invalid device ordinal";
    case kInvalidImage: return "device kernel image is invalid";
    case kInvalidContext: return "invalid device context";
    case kNoBinaryForGPU: return "no kernel image is available for execution on the device";
    case kInvalidHandle: return "invalid resource handle";
    case kIllegalState: return "the operation cannot be performed in the present state";
    case kNotFound: return "named symbol not found";
    case kNotReady: return "device not ready";
    case kIllegalAddress: return "an illegal memory access was encountered";
    case kLaunchOutOfResources: return "too many resources requested for launch";
    case kAssert: return "device-side assert triggered";
    case kHardwareStackError: return "an illegal instruction was encountered (stack error)";
    case kIllegalInstruction: return "an illegal instruction was encountered";
    case kMisalignedAddress: return "misaligned address";
    case kLaunchFailed: return "unspecified launch failure";
    case kNotPermitted: return "operation not permitted";
    case kNotSupported: return "operation not supported";
    case kCaptureUnsupported: return "operation not permitted when stream is capturing";
    case kCaptureInvalidated: return "operation failed due to a previous error during capture";
    case kCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case kCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case kUnknown: return "unknown error";
    }
    return nullptr;
}

}  // namespace emu

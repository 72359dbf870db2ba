// A stand-in for libnvidia-ml.so.1 (NVML) for the emulated CUDA device.
//
// go-nvml dlopens this library and calls the NVML entry points below with
// NVML's C ABI. The telemetry is synthetic: the emulated GPUs have fixed
// clocks, temperatures and power, and the energy counter is power x time.
// Nothing here is NVIDIA code or header text; types are declared from the
// documented ABI (enums are int-sized, structs keep NVML's field order).
//
// Settings, read when the library is loaded and again at every first
// nvmlInit (reference count 0 -> 1), so a process can change them between
// sessions:
//   STEPBENCH_EMU_DEVICES              number of GPUs, 1..8 (default 1)
//   STEPBENCH_EMU_POWER_W              power draw in watts (default 100)
//   STEPBENCH_EMU_CLOCK_EVENT_REASONS  clock-event reason mask, hex (0x...)
//                                      or decimal (default 0)
//   STEPBENCH_EMU_SM_CLOCK_MHZ         current SM clock, 1..1000 MHz (default
//                                      1000, the maximum)
// These three take one value for every GPU, or one per GPU separated by
// commas ("300,350"): GPU i gets the i-th, GPUs past the list the last one;
// a list longer than STEPBENCH_EMU_DEVICES is malformed.
//   STEPBENCH_EMU_MEM_BYTES            memory per GPU (default: the host's
//                                      MemTotal from /proc/meminfo)
// An empty setting counts as unset. A malformed one fails nvmlInit with an
// invalid-argument error and one line on stderr naming it.
//
// What a reading gives: clocks (maximum = default applications clock, so
// clocks read as unlocked; the current SM clock is the maximum unless set
// lower), power usage and the power field values
// (instant and average, mW), the energy counter (mJ; power integrated over
// the monotonic clock since the library was loaded, per GPU, so it never
// goes back),
// GPU temperature 40 C, memory temperature 45 C (field value), and the
// clock-event reasons of STEPBENCH_EMU_CLOCK_EVENT_REASONS. Anything else
// answers NVML_ERROR_NOT_SUPPORTED (3) or is not exported.
//
// Build: gcc -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror
//        -Wl,-soname,libnvidia-ml.so.1 -o build/emu/libnvidia-ml.so.1 cuda/emu/nvml.c

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

// Return codes (nvmlReturn_t values).
enum {
    RET_SUCCESS = 0,
    RET_UNINITIALIZED = 1,
    RET_INVALID_ARGUMENT = 2,
    RET_NOT_SUPPORTED = 3,
    RET_NOT_FOUND = 6,
    RET_INSUFFICIENT_SIZE = 7,
    RET_ARGUMENT_VERSION_MISMATCH = 25,
    RET_UNKNOWN = 999,
};

// Clock domains (nvmlClockType_t).
enum { CLOCK_KIND_GRAPHICS = 0, CLOCK_KIND_SM = 1, CLOCK_KIND_MEM = 2, CLOCK_KIND_VIDEO = 3, CLOCK_KIND_COUNT = 4 };

// Temperature sensors (nvmlTemperatureSensors_t): the GPU die only.
enum { SENSOR_GPU = 0 };

// Field ids modelled by nvmlDeviceGetFieldValues.
enum {
    FIELD_MEMORY_TEMP = 82,               // degrees C, unsigned int
    FIELD_TOTAL_ENERGY_CONSUMPTION = 83,  // mJ, unsigned long long
    FIELD_POWER_AVERAGE = 185,            // mW, unsigned int
    FIELD_POWER_INSTANT = 186,            // mW, unsigned int
};

// Value types of a field value (nvmlValueType_t).
enum { VALUE_UNSIGNED_INT = 1, VALUE_UNSIGNED_LONG_LONG = 3 };

// nvmlValue_t: an 8-byte union.
union field_value {
    double d;
    int si;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    unsigned short us;
};

// nvmlFieldValue_t.
struct field_sample {
    unsigned int field_id;
    unsigned int scope_id;
    long long timestamp_us;  // host wall clock, microseconds since 1970
    long long latency_us;
    int value_type;
    int ret;
    union field_value value;
};

// nvmlMemory_t.
struct memory_v1 {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};

// nvmlMemory_v2_t; its version word is sizeof | 2 << 24.
struct memory_v2 {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
};

_Static_assert(sizeof(union field_value) == 8, "nvmlValue_t is 8 bytes");
_Static_assert(sizeof(struct field_sample) == 40, "nvmlFieldValue_t is 40 bytes");
_Static_assert(offsetof(struct field_sample, value_type) == 24, "valueType at 24");
_Static_assert(offsetof(struct field_sample, value) == 32, "value at 32");
_Static_assert(sizeof(struct memory_v1) == 24, "nvmlMemory_t is 24 bytes");
_Static_assert(sizeof(struct memory_v2) == 40, "nvmlMemory_v2_t is 40 bytes");

#define MEMORY_V2_VERSION ((unsigned int)(sizeof(struct memory_v2) | (2u << 24)))

// The emulated GPUs (see the project's emulated-device constants).
#define MAX_GPUS 8
#define GPU_NAME "stepbench emulated GPU"
#define DRIVER_VERSION "emulated-1.0"
#define CUDA_DRIVER_VERSION 13000
#define COMPUTE_MAJOR 9
#define COMPUTE_MINOR 0
#define MEMORY_BUS_WIDTH_BITS 4096
#define MAX_SM_CLOCK_MHZ 1000
#define MAX_MEMORY_CLOCK_MHZ 1000
#define POWER_LIMIT_MW 700000u
#define DEFAULT_POWER_MW 100000u
#define MAX_POWER_W 100000.0  // keeps milliwatts within an unsigned int
#define GPU_TEMPERATURE_C 40
#define MEMORY_TEMPERATURE_C 45

// A device handle (nvmlDevice_t) points at one of these; handles stay valid
// for the life of the process (the library pins itself, see pin_library).
struct emu_gpu {
    unsigned int index;
};

static struct emu_gpu gpus[MAX_GPUS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

// The settings of one session (between a first nvmlInit and the last
// nvmlShutdown).
struct settings {
    unsigned int gpu_count;
    unsigned int power_mw[MAX_GPUS];
    unsigned long long clock_event_reasons[MAX_GPUS];
    unsigned int sm_clock_mhz[MAX_GPUS];
    unsigned long long memory_bytes;  // 0: unknown (no /proc/meminfo)
};

// Library state, guarded by state_lock. Each GPU's energy counter is
// integrated piecewise: energy_mj_at_mark[i] holds its energy up to
// mark_seconds, and its current power applies after it, so the counter only
// grows even when a new session changes the power.
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_count;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static struct settings current;
static double energy_mj_at_mark[MAX_GPUS];
static double mark_seconds;

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// energy_mj_now returns GPU i's counter at time now; state_lock held.
static double energy_mj_now(unsigned int i, double now) {
    double elapsed = now - mark_seconds;
    if (elapsed < 0) {
        elapsed = 0;
    }
    return energy_mj_at_mark[i] + (double)current.power_mw[i] * elapsed;  // mW x s = mJ
}

// read_meminfo returns the value in bytes of a /proc/meminfo line such as
// "MemTotal:  12345 kB", or 0 when it cannot be read.
static unsigned long long read_meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) {
        return 0;
    }
    size_t key_len = strlen(key);
    char line[256];
    unsigned long long bytes = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
            unsigned long long kib = 0;
            if (sscanf(line + key_len + 1, "%llu", &kib) == 1) {
                bytes = kib * 1024ull;
            }
            break;
        }
    }
    fclose(f);
    return bytes;
}

static int is_digits(const char *s) {
    if (*s == '\0') {
        return 0;
    }
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            return 0;
        }
    }
    return 1;
}

static int is_hex_digits(const char *s) {
    if (*s == '\0') {
        return 0;
    }
    for (; *s != '\0'; s++) {
        int digit = (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F');
        if (!digit) {
            return 0;
        }
    }
    return 1;
}

// parse_unsigned reads a whole decimal integer, or a hex one after 0x when
// allow_hex; 0 on success.
static int parse_unsigned(const char *s, int allow_hex, unsigned long long *out) {
    int base = 10;
    if (allow_hex && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
        base = 16;
        if (!is_hex_digits(s)) {
            return -1;
        }
    } else if (!is_digits(s)) {
        return -1;
    }
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, base);
    if (errno != 0 || end == NULL || *end != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

// setting returns an environment variable, or NULL when unset or empty.
static const char *setting(const char *name) {
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

static int bad_setting(int quiet, const char *name, const char *value, const char *want) {
    if (!quiet) {
        fprintf(stderr, "stepbench emulated NVML: %s=\"%s\": want %s\n", name, value, want);
    }
    return -1;
}

// A parser of one value of a per-GPU setting; 0 on success.
typedef int (*value_parser)(const char *s, unsigned long long *out);

static int parse_watts_mw(const char *s, unsigned long long *mw) {
    char *end = NULL;
    errno = 0;
    double watts = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(watts) || watts < 0 || watts > MAX_POWER_W) {
        return -1;
    }
    *mw = (unsigned long long)(watts * 1e3 + 0.5);
    return 0;
}

static int parse_mask(const char *s, unsigned long long *mask) { return parse_unsigned(s, 1, mask); }

static int parse_sm_clock(const char *s, unsigned long long *mhz) {
    return (parse_unsigned(s, 0, mhz) != 0 || *mhz < 1 || *mhz > MAX_SM_CLOCK_MHZ) ? -1 : 0;
}

// parse_per_gpu reads one value for every GPU, or a comma-separated list of
// at most gpu_count values (GPUs past the list get the last one) into
// out[0..MAX_GPUS); 0 on success.
static int parse_per_gpu(const char *v, unsigned int gpu_count, value_parser parse, unsigned long long out[MAX_GPUS]) {
    char item[64];
    unsigned int n = 0;
    for (const char *p = v;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n >= gpu_count || len == 0 || len >= sizeof item) {
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse(item, &out[n]) != 0) {
            return -1;
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    for (unsigned int i = n + 1; i < MAX_GPUS; i++) {
        out[i] = out[n];
    }
    return 0;
}

// default_settings are one GPU at 100 W and its maximum clock, no reasons.
static struct settings default_settings(void) {
    struct settings r = {.gpu_count = 1};
    for (unsigned int i = 0; i < MAX_GPUS; i++) {
        r.power_mw[i] = DEFAULT_POWER_MW;
        r.sm_clock_mhz[i] = MAX_SM_CLOCK_MHZ;
    }
    return r;
}

// read_per_gpu_settings reads the settings that take a value per GPU.
static int read_per_gpu_settings(struct settings *r, int quiet) {
    const char *v;
    unsigned long long values[MAX_GPUS];
    if ((v = setting("STEPBENCH_EMU_POWER_W")) != NULL) {
        if (parse_per_gpu(v, r->gpu_count, parse_watts_mw, values) != 0) {
            return bad_setting(quiet, "STEPBENCH_EMU_POWER_W", v,
                               "a power in watts from 0 to 100000, or one per GPU separated by commas");
        }
        for (unsigned int i = 0; i < MAX_GPUS; i++) {
            r->power_mw[i] = (unsigned int)values[i];
        }
    }
    if ((v = setting("STEPBENCH_EMU_CLOCK_EVENT_REASONS")) != NULL) {
        if (parse_per_gpu(v, r->gpu_count, parse_mask, values) != 0) {
            return bad_setting(quiet, "STEPBENCH_EMU_CLOCK_EVENT_REASONS", v,
                               "a bit mask, hex (0x...) or decimal, or one per GPU separated by commas");
        }
        memcpy(r->clock_event_reasons, values, sizeof values);
    }
    if ((v = setting("STEPBENCH_EMU_SM_CLOCK_MHZ")) != NULL) {
        if (parse_per_gpu(v, r->gpu_count, parse_sm_clock, values) != 0) {
            return bad_setting(quiet, "STEPBENCH_EMU_SM_CLOCK_MHZ", v,
                               "an SM clock from 1 to 1000 MHz, or one per GPU separated by commas");
        }
        for (unsigned int i = 0; i < MAX_GPUS; i++) {
            r->sm_clock_mhz[i] = (unsigned int)values[i];
        }
    }
    return 0;
}

// read_settings reads the environment into *s; 0, or -1 (after one line on
// stderr naming the bad setting unless quiet).
static int read_settings(struct settings *s, int quiet) {
    struct settings r = default_settings();
    const char *v;
    unsigned long long n;

    if ((v = setting("STEPBENCH_EMU_DEVICES")) != NULL) {
        if (parse_unsigned(v, 0, &n) != 0 || n < 1 || n > MAX_GPUS) {
            return bad_setting(quiet, "STEPBENCH_EMU_DEVICES", v, "a GPU count from 1 to 8");
        }
        r.gpu_count = (unsigned int)n;
    }
    if (read_per_gpu_settings(&r, quiet) != 0) {
        return -1;
    }
    if ((v = setting("STEPBENCH_EMU_MEM_BYTES")) != NULL) {
        if (parse_unsigned(v, 0, &n) != 0 || n == 0) {
            return bad_setting(quiet, "STEPBENCH_EMU_MEM_BYTES", v, "a positive number of bytes");
        }
        r.memory_bytes = n;
    } else {
        r.memory_bytes = read_meminfo("MemTotal");
    }
    *s = r;
    return 0;
}

// apply_settings makes s current; state_lock held. The energy so far is
// folded into the mark at the old power first.
static void apply_settings(const struct settings *s) {
    double now = monotonic_seconds();
    for (unsigned int i = 0; i < MAX_GPUS; i++) {
        energy_mj_at_mark[i] = energy_mj_now(i, now);
    }
    mark_seconds = now;
    current = *s;
}

// The energy counter starts when the library is loaded.
__attribute__((constructor)) static void on_load(void) {
    struct settings s;
    pthread_mutex_lock(&state_lock);
    mark_seconds = monotonic_seconds();
    current = default_settings();
    if (read_settings(&s, 1) == 0) {  // a bad setting is reported by nvmlInit
        current = s;
    }
    pthread_mutex_unlock(&state_lock);
}

EXPORT const char *sbemu_describe(void) {
    return "stepbench emulated CUDA device 1.0: NVML stand-in with synthetic telemetry "
           "(fixed clocks and temperatures, power 100 W or STEPBENCH_EMU_POWER_W per GPU, "
           "energy = power x time since load; nothing is measured)";
}

// pin_library keeps this library mapped after go-nvml's dlclose on the last
// nvmlShutdown: device handles and the energy counter then outlive a session,
// and a call through a handle after shutdown gets an error, not a fault.
// Run once, outside state_lock (dlopen takes the loader's lock).
static void pin_library(void) {
    Dl_info info;
    if (dladdr((void *)&sbemu_describe, &info) != 0 && info.dli_fname != NULL) {
        // The handle is kept forever on purpose; without it the library is
        // merely unloadable, as a real NVML is.
        (void)dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    }
}

EXPORT int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;  // no-GPU and no-attach flags change nothing here
    pthread_once(&pin_once, pin_library);
    int ret = RET_SUCCESS;
    pthread_mutex_lock(&state_lock);
    if (init_count == 0) {
        struct settings s;
        if (read_settings(&s, 0) != 0) {
            ret = RET_INVALID_ARGUMENT;
        } else {
            apply_settings(&s);
        }
    }
    if (ret == RET_SUCCESS) {
        init_count++;
    }
    pthread_mutex_unlock(&state_lock);
    return ret;
}

EXPORT int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT int nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT int nvmlShutdown(void) {
    int ret = RET_SUCCESS;
    pthread_mutex_lock(&state_lock);
    if (init_count == 0) {
        ret = RET_UNINITIALIZED;
    } else {
        init_count--;
    }
    pthread_mutex_unlock(&state_lock);
    return ret;
}

// nvmlErrorString describes a return code in this library's own words.
EXPORT const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "success";
    case 1: return "NVML is not initialised";
    case 2: return "invalid argument";
    case 3: return "not supported by the emulated device";
    case 4: return "no permission";
    case 5: return "already initialised";
    case 6: return "not found";
    case 7: return "buffer too small";
    case 8: return "insufficient external power";
    case 9: return "driver not loaded";
    case 10: return "timed out";
    case 11: return "interrupt request problem";
    case 12: return "NVML library not found";
    case 13: return "function not found";
    case 14: return "infoROM corrupted";
    case 15: return "GPU lost";
    case 16: return "GPU needs a reset";
    case 17: return "operating system error";
    case 18: return "library and driver versions differ";
    case 19: return "in use";
    case 20: return "out of memory";
    case 21: return "no data";
    case 22: return "ECC not enabled";
    case 23: return "insufficient resources";
    case 24: return "frequency not supported";
    case 25: return "structure version not supported";
    case 26: return "deprecated";
    case 27: return "not ready";
    case 28: return "GPU not found";
    case 29: return "invalid state";
    case 999: return "unknown error";
    }
    return "unknown NVML return code";
}

// snapshot copies the session's settings; RET_UNINITIALIZED outside a session.
static int snapshot(struct settings *s) {
    int ret = RET_SUCCESS;
    pthread_mutex_lock(&state_lock);
    if (init_count == 0) {
        ret = RET_UNINITIALIZED;
    } else {
        *s = current;
    }
    pthread_mutex_unlock(&state_lock);
    return ret;
}

// device_call starts every per-device call: NVML must be initialised, the
// handle must name one of this session's GPUs and out must not be NULL.
static int device_call(const struct emu_gpu *gpu, const void *out, struct settings *s) {
    int ret = snapshot(s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (gpu == NULL || out == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    if (gpu < &gpus[0] || gpu >= &gpus[s->gpu_count]) {
        return RET_INVALID_ARGUMENT;
    }
    return RET_SUCCESS;
}

// copy_string copies s into buf of length bytes, NUL included.
static int copy_string(char *buf, unsigned int length, const char *s) {
    size_t n = strlen(s);
    if ((size_t)length < n + 1) {
        return RET_INSUFFICIENT_SIZE;
    }
    memcpy(buf, s, n + 1);
    return RET_SUCCESS;
}

static void format_uuid(unsigned int index, char out[48]) {
    snprintf(out, 48, "GPU-5be00000-0000-4000-8000-0000000000%02x", index);
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    struct settings s;
    int ret = snapshot(&s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (version == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    return copy_string(version, length, DRIVER_VERSION);
}

EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return nvmlSystemGetDriverVersion(version, length);
}

EXPORT int nvmlSystemGetCudaDriverVersion(int *version) {
    struct settings s;
    int ret = snapshot(&s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (version == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    *version = CUDA_DRIVER_VERSION;
    return RET_SUCCESS;
}

EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count) {
    struct settings s;
    int ret = snapshot(&s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (count == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    *count = s.gpu_count;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, struct emu_gpu **device) {
    struct settings s;
    int ret = snapshot(&s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (device == NULL || index >= s.gpu_count) {
        return RET_INVALID_ARGUMENT;
    }
    *device = &gpus[index];
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex(unsigned int index, struct emu_gpu **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, struct emu_gpu **device) {
    struct settings s;
    int ret = snapshot(&s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (uuid == NULL || device == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < s.gpu_count; i++) {
        char want[48];
        format_uuid(i, want);
        if (strcasecmp(uuid, want) == 0) {
            *device = &gpus[i];
            return RET_SUCCESS;
        }
    }
    return RET_NOT_FOUND;
}

EXPORT int nvmlDeviceGetIndex(struct emu_gpu *device, unsigned int *index) {
    struct settings s;
    int ret = device_call(device, index, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *index = device->index;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetName(struct emu_gpu *device, char *name, unsigned int length) {
    struct settings s;
    int ret = device_call(device, name, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    return copy_string(name, length, GPU_NAME);
}

EXPORT int nvmlDeviceGetUUID(struct emu_gpu *device, char *uuid, unsigned int length) {
    struct settings s;
    int ret = device_call(device, uuid, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    char text[48];
    format_uuid(device->index, text);
    return copy_string(uuid, length, text);
}

// clock_mhz is the maximum clock of each domain, also the (default)
// applications clock, so clocks read as unlocked; the current SM clock is
// this unless STEPBENCH_EMU_SM_CLOCK_MHZ sets it lower.
static int clock_mhz(int type, unsigned int *mhz) {
    switch (type) {
    case CLOCK_KIND_GRAPHICS:
    case CLOCK_KIND_SM:
        *mhz = MAX_SM_CLOCK_MHZ;
        return RET_SUCCESS;
    case CLOCK_KIND_MEM:
        *mhz = MAX_MEMORY_CLOCK_MHZ;
        return RET_SUCCESS;
    case CLOCK_KIND_VIDEO:
        return RET_NOT_SUPPORTED;
    }
    return RET_INVALID_ARGUMENT;
}

static int device_clock(struct emu_gpu *device, int type, unsigned int *mhz) {
    struct settings s;
    int ret = device_call(device, mhz, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    return clock_mhz(type, mhz);
}

EXPORT int nvmlDeviceGetMaxClockInfo(struct emu_gpu *device, int type, unsigned int *mhz) {
    return device_clock(device, type, mhz);
}

// The current clock: the SM (and graphics) clock of STEPBENCH_EMU_SM_CLOCK_MHZ.
EXPORT int nvmlDeviceGetClockInfo(struct emu_gpu *device, int type, unsigned int *mhz) {
    struct settings s;
    int ret = device_call(device, mhz, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if ((ret = clock_mhz(type, mhz)) == RET_SUCCESS && (type == CLOCK_KIND_SM || type == CLOCK_KIND_GRAPHICS)) {
        *mhz = s.sm_clock_mhz[device->index];
    }
    return ret;
}

EXPORT int nvmlDeviceGetApplicationsClock(struct emu_gpu *device, int type, unsigned int *mhz) {
    return device_clock(device, type, mhz);
}

EXPORT int nvmlDeviceGetDefaultApplicationsClock(struct emu_gpu *device, int type, unsigned int *mhz) {
    return device_clock(device, type, mhz);
}

EXPORT int nvmlDeviceGetMemoryBusWidth(struct emu_gpu *device, unsigned int *bits) {
    struct settings s;
    int ret = device_call(device, bits, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *bits = MEMORY_BUS_WIDTH_BITS;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetCudaComputeCapability(struct emu_gpu *device, int *major, int *minor) {
    struct settings s;
    int ret = device_call(device, major, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (minor == NULL) {
        return RET_INVALID_ARGUMENT;
    }
    *major = COMPUTE_MAJOR;
    *minor = COMPUTE_MINOR;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetEnforcedPowerLimit(struct emu_gpu *device, unsigned int *milliwatts) {
    struct settings s;
    int ret = device_call(device, milliwatts, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *milliwatts = POWER_LIMIT_MW;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerUsage(struct emu_gpu *device, unsigned int *milliwatts) {
    struct settings s;
    int ret = device_call(device, milliwatts, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *milliwatts = s.power_mw[device->index];
    return RET_SUCCESS;
}

static unsigned long long energy_mj(unsigned int i) {
    pthread_mutex_lock(&state_lock);
    double mj = energy_mj_now(i, monotonic_seconds());
    pthread_mutex_unlock(&state_lock);
    return (unsigned long long)mj;
}

EXPORT int nvmlDeviceGetTotalEnergyConsumption(struct emu_gpu *device, unsigned long long *millijoules) {
    struct settings s;
    int ret = device_call(device, millijoules, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *millijoules = energy_mj(device->index);
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetTemperature(struct emu_gpu *device, int sensor, unsigned int *celsius) {
    struct settings s;
    int ret = device_call(device, celsius, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (sensor != SENSOR_GPU) {
        return RET_INVALID_ARGUMENT;
    }
    *celsius = GPU_TEMPERATURE_C;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetCurrentClocksEventReasons(struct emu_gpu *device, unsigned long long *reasons) {
    struct settings s;
    int ret = device_call(device, reasons, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    *reasons = s.clock_event_reasons[device->index];
    return RET_SUCCESS;
}

// The older name of the same call (same bits).
EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(struct emu_gpu *device, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

EXPORT int nvmlDeviceGetFieldValues(struct emu_gpu *device, int count, struct field_sample *values) {
    struct settings s;
    int ret = device_call(device, values, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (count <= 0) {
        return RET_INVALID_ARGUMENT;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    long long now_us = (long long)wall.tv_sec * 1000000 + wall.tv_nsec / 1000;
    for (int i = 0; i < count; i++) {
        struct field_sample *f = &values[i];
        memset(&f->value, 0, sizeof f->value);
        f->timestamp_us = now_us;
        f->latency_us = 0;
        f->ret = RET_SUCCESS;
        switch (f->field_id) {
        case FIELD_MEMORY_TEMP:
            f->value_type = VALUE_UNSIGNED_INT;
            f->value.ui = MEMORY_TEMPERATURE_C;
            break;
        case FIELD_TOTAL_ENERGY_CONSUMPTION:
            f->value_type = VALUE_UNSIGNED_LONG_LONG;
            f->value.ull = energy_mj(device->index);
            break;
        case FIELD_POWER_AVERAGE:
        case FIELD_POWER_INSTANT:
            f->value_type = VALUE_UNSIGNED_INT;
            f->value.ui = s.power_mw[device->index];
            break;
        default:
            f->value_type = VALUE_UNSIGNED_INT;
            f->ret = RET_NOT_SUPPORTED;
        }
    }
    return RET_SUCCESS;
}

// memory_now returns total and free bytes: the session's memory size, and the
// host's MemAvailable capped at it (device memory is host memory here).
static int memory_now(const struct settings *s, unsigned long long *total, unsigned long long *free_bytes) {
    if (s->memory_bytes == 0) {
        return RET_NOT_SUPPORTED;
    }
    unsigned long long available = read_meminfo("MemAvailable");
    *total = s->memory_bytes;
    *free_bytes = available < s->memory_bytes ? available : s->memory_bytes;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetMemoryInfo(struct emu_gpu *device, struct memory_v1 *memory) {
    struct settings s;
    int ret = device_call(device, memory, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    unsigned long long total, free_bytes;
    if ((ret = memory_now(&s, &total, &free_bytes)) != RET_SUCCESS) {
        return ret;
    }
    memory->total = total;
    memory->free = free_bytes;
    memory->used = total - free_bytes;
    return RET_SUCCESS;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(struct emu_gpu *device, struct memory_v2 *memory) {
    struct settings s;
    int ret = device_call(device, memory, &s);
    if (ret != RET_SUCCESS) {
        return ret;
    }
    if (memory->version != MEMORY_V2_VERSION) {
        return RET_ARGUMENT_VERSION_MISMATCH;
    }
    unsigned long long total, free_bytes;
    if ((ret = memory_now(&s, &total, &free_bytes)) != RET_SUCCESS) {
        return ret;
    }
    memory->total = total;
    memory->reserved = 0;
    memory->free = free_bytes;
    memory->used = total - free_bytes;
    return RET_SUCCESS;
}

// nvtx_recorder.c — the emulated device's NVTX tool (build/emu/libsbemu_nvtx.so):
// the tool side of NVTX v3's injection protocol, declared from its
// documentation. Named in NVTX_INJECTION64_PATH, it is loaded by the NVTX
// client of the program (stepbench's cuda package), fills the client's core
// function table with its own RangePushA, RangePop and MarkA, and appends
// one line per call to STEPBENCH_EMU_PROFILE_LOG, the file the emulated
// driver logs profiler starts, stops and launches to:
//
//   push NAME     a range opened
//   pop           the innermost range closed
//   mark NAME     an instant
//
// Each line is one write to a file opened for appending, so lines of
// several threads (and of the driver) never interleave within a line.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef void (*nvtx_fn)(void);
typedef const void *(*get_export_table_fn)(uint32_t id);

// NvtxExportTableCallbacks (export table 1).
struct callbacks_table {
    size_t struct_size;
    int (*get_module_function_table)(int module, nvtx_fn ***table, unsigned *size);
};

enum { kTableCallbacks = 1, kModuleCore = 1 };
enum { kCoreMarkA = 2, kCoreRangePushA = 9, kCoreRangePop = 11 };

static void append(const char *what, const char *name) {
    const char *path = getenv("STEPBENCH_EMU_PROFILE_LOG");
    if (path == NULL || *path == '\0') return;
    char line[1024];
    int n = name ? snprintf(line, sizeof line, "%s %s\n", what, name) : snprintf(line, sizeof line, "%s\n", what);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) {  // a long name is cut, the line still ends
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    setvbuf(f, NULL, _IOFBF, sizeof line);
    fwrite(line, 1, (size_t)n, f);
    fclose(f);
}

static int range_push(const char *name) {
    append("push", name ? name : "");
    return 0;
}

static int range_pop(void) {
    append("pop", NULL);
    return 0;
}

static void mark(const char *name) { append("mark", name ? name : ""); }

API const char *sbemu_describe(void) { return "stepbench emulated NVTX recorder 0.1"; }

API int InitializeInjectionNvtx2(get_export_table_fn get_export_table) {
    if (get_export_table == NULL) return 0;
    const struct callbacks_table *cb = (const struct callbacks_table *)get_export_table(kTableCallbacks);
    if (cb == NULL || cb->struct_size < sizeof *cb || cb->get_module_function_table == NULL) return 0;
    nvtx_fn **table = NULL;
    unsigned size = 0;
    if (!cb->get_module_function_table(kModuleCore, &table, &size) || table == NULL || size <= kCoreRangePop) return 0;
    *table[kCoreRangePushA] = (nvtx_fn)range_push;
    *table[kCoreRangePop] = (nvtx_fn)range_pop;
    *table[kCoreMarkA] = (nvtx_fn)mark;
    return 1;
}

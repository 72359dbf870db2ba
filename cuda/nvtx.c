// NVTX v3's injection protocol, client side (see nvtx.h). The protocol is
// process-wide by nature: the tool calls back into a table-getter that
// takes no context, so the tables below are this process's one NVTX client.
#include "nvtx.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Callback modules (NvtxCallbackModule) and each one's *_SIZE enumerator:
// a module's table has that many entries (index 0 unused, ids 1..SIZE-1)
// and one NULL after them.
enum {
	kModuleCore = 1,
	kModuleCuda = 2,
	kModuleOpenCL = 3,
	kModuleCudaRt = 4,
	kModuleCore2 = 5,
	kModuleSync = 6,
	kModules = 7,
};
static const unsigned kModuleSize[kModules] = {0, 16, 9, 15, 7, 16, 7};
enum { kMaxModuleSize = 16 };

// Core module function ids (NvtxCallbackIdCore) of the calls we make.
enum { kCoreMarkA = 2, kCoreRangePushA = 9, kCoreRangePop = 11 };

// Export table ids (NvtxExportTableID).
enum { kTableCallbacks = 1, kTableVersionInfo = 3 };
enum { kNvtxVersion = 3 };

typedef void (*nvtx_fn)(void);
typedef int (*push_fn)(const char *);
typedef int (*pop_fn)(void);
typedef void (*mark_fn)(const char *);

// slots[m][id] is where the tool writes its function for id of module m;
// tables[m] lists their addresses, terminated by NULL, as a tool expects.
static nvtx_fn slots[kModules][kMaxModuleSize + 1];
static nvtx_fn *tables[kModules][kMaxModuleSize + 2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int attached;

static int get_module_table(int module, nvtx_fn ***out_table, unsigned *out_size) {
	if (module <= 0 || module >= kModules) return 0;
	for (unsigned i = 1; i < kModuleSize[module]; i++) tables[module][i] = &slots[module][i];
	if (out_table) *out_table = tables[module];
	if (out_size) *out_size = kModuleSize[module];
	return 1;
}

static void set_injection_version(uint32_t version) { (void)version; }

// NvtxExportTableCallbacks and NvtxExportTableVersionInfo.
static const struct {
	size_t struct_size;
	int (*get_module_function_table)(int, nvtx_fn ***, unsigned *);
} callbacks_table = {sizeof callbacks_table, get_module_table};

static const struct {
	size_t struct_size;
	uint32_t version;
	uint32_t reserved0;
	void (*set_injection_nvtx_version)(uint32_t);
} version_table = {sizeof version_table, kNvtxVersion, 0, set_injection_version};

static const void *get_export_table(uint32_t id) {
	switch (id) {
	case kTableCallbacks: return &callbacks_table;
	case kTableVersionInfo: return &version_table;
	}
	return NULL;
}

int sb_nvtx_inject(const char *path, char *err, size_t err_len) {
	pthread_mutex_lock(&mu);
	if (attached) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	void *lib = dlopen(path, RTLD_LAZY);
	if (lib == NULL) {
		const char *why = dlerror();
		snprintf(err, err_len, "%s", why ? why : "dlopen failed");
		pthread_mutex_unlock(&mu);
		return 0;
	}
	int (*init)(const void *(*)(uint32_t)) =
		(int (*)(const void *(*)(uint32_t)))dlsym(lib, "InitializeInjectionNvtx2");
	if (init == NULL) {
		snprintf(err, err_len, "%s exports no InitializeInjectionNvtx2", path);
		dlclose(lib);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	if (!init(get_export_table)) {
		snprintf(err, err_len, "%s: InitializeInjectionNvtx2 returned 0 (the tool declined)", path);
		memset(slots, 0, sizeof slots);
		dlclose(lib);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	attached = 1;
	pthread_mutex_unlock(&mu);
	return 1;
}

int sb_nvtx_use_library(const char *soname, char *err, size_t err_len) {
	pthread_mutex_lock(&mu);
	if (attached) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	void *lib = dlopen(soname, RTLD_LAZY);
	if (lib == NULL) {
		const char *why = dlerror();
		snprintf(err, err_len, "%s", why ? why : "dlopen failed");
		pthread_mutex_unlock(&mu);
		return 0;
	}
	nvtx_fn push = (nvtx_fn)dlsym(lib, "nvtxRangePushA");
	nvtx_fn pop = (nvtx_fn)dlsym(lib, "nvtxRangePop");
	nvtx_fn mark = (nvtx_fn)dlsym(lib, "nvtxMarkA");
	if (push == NULL || pop == NULL || mark == NULL) {
		snprintf(err, err_len, "%s lacks nvtxRangePushA, nvtxRangePop or nvtxMarkA", soname);
		dlclose(lib);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	slots[kModuleCore][kCoreRangePushA] = push;
	slots[kModuleCore][kCoreRangePop] = pop;
	slots[kModuleCore][kCoreMarkA] = mark;
	attached = 1;
	pthread_mutex_unlock(&mu);
	return 1;
}

int sb_nvtx_attached(void) {
	pthread_mutex_lock(&mu);
	const int a = attached;
	pthread_mutex_unlock(&mu);
	return a;
}

// The slots are written once, under mu, before attached is set; the Go side
// calls these only after sb_nvtx_attached said 1.
int sb_nvtx_push(const char *message) {
	push_fn f = (push_fn)slots[kModuleCore][kCoreRangePushA];
	return f ? f(message) : -1;
}

int sb_nvtx_pop(void) {
	pop_fn f = (pop_fn)slots[kModuleCore][kCoreRangePop];
	return f ? f() : -1;
}

void sb_nvtx_mark(const char *message) {
	mark_fn f = (mark_fn)slots[kModuleCore][kCoreMarkA];
	if (f) f(message);
}

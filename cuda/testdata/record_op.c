/* record_op.c — a test fixture of op ABI 2: every op, no kernel. run and
 * plan fail on purpose with a description of the call they were given (its
 * fields, and each tensor's device, dtype, shape, strides and, on the
 * host, its int values), which the tests read back from the error.
 * -DCAPS_HND_ONLY declares the HND layout alone, -DCAPS_PAGES_48 pages of
 * 48 tokens alone, -DCAPS_LSE the log-sum-exp; else zeroed caps.
 * -DCRASH_IN_RUN: no plan, and run writes through a null pointer (the
 * crash handler must name the library, the op and the call);
 * -DHANG_IN_RUN: no plan, and run never returns (--step-timeout must name
 * the call). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stepbench_op.h"

static void put(char **p, char *end, const char *fmt, ...) {
    if (*p >= end) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*p, (size_t)(end - *p), fmt, ap);
    va_end(ap);
    if (n > 0) *p += n;
}

static int describe(const stepbench_op_call *c, const char *what) {
    char *p = c->error, *end = c->error + c->error_bytes;
    put(&p, end, "%s struct_bytes=%u abi=%u phase=%d seqs=%d tokens=%d heads=%d kv_heads=%d head_dim=%d", what,
        c->struct_bytes, c->abi_version, c->phase, c->num_seqs, c->num_tokens, c->num_heads, c->num_kv_heads, c->head_dim);
    put(&p, end, " page_size=%d num_pages=%d max_pages=%d max_query_len=%d max_seq_len=%d layout=%u dtype=%u want_lse=%d",
        c->page_size, c->num_pages, c->max_pages, c->max_query_len, c->max_seq_len, c->kv_layout, c->kv_dtype, c->want_lse);
    put(&p, end, " scale_x1e6=%d capturing=%d workspace=%d tensors=%d", (int)(c->softmax_scale * 1e6f + 0.5f), c->capturing,
        c->workspace != NULL, c->num_tensors);
    for (int i = 0; i < c->num_tensors; i++) {
        const stepbench_tensor *t = &c->tensors[i];
        put(&p, end, " |%d dev=%d code=%d bits=%d null=%d ndim=%d shape=", i, t->device.device_type, t->dtype.code,
            t->dtype.bits, t->data == NULL, t->ndim);
        long long n = 1;
        for (int d = 0; d < t->ndim; d++) {
            put(&p, end, "%lld,", (long long)t->shape[d]);
            n *= t->shape[d];
        }
        put(&p, end, " strides=");
        for (int d = 0; d < t->ndim; d++) put(&p, end, "%lld,", (long long)t->strides[d]);
        if (t->device.device_type == STEPBENCH_DEVICE_CPU && t->dtype.code == STEPBENCH_DTYPE_INT) {
            put(&p, end, " values=");
            for (long long j = 0; j < n; j++)
                put(&p, end, "%lld,", t->dtype.bits == 64 ? (long long)((const int64_t *)t->data)[j] : (long long)((const int32_t *)t->data)[j]);
        }
    }
    return 1;
}

static int run(const stepbench_op_call *c) {
#ifdef CRASH_IN_RUN
    *(volatile int *)(uintptr_t)(c->error_bytes * 0) = 1; /* a write through a null pointer */
#endif
#ifdef HANG_IN_RUN
    for (volatile int spin = 1; spin;) {
    }
#endif
    return describe(c, "run");
}
static int plan(const stepbench_op_call *c) { return describe(c, "plan"); }

uint32_t stepbench_op_abi_version(void) { return STEPBENCH_OP_ABI_VERSION; }

int stepbench_op_get(const char *op, stepbench_op_table *table, char *err, size_t n) {
    (void)err;
    (void)n;
    (void)op;
    if (table->struct_bytes < sizeof *table) return 1;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "record fixture";
    table->run = run;
    table->plan = plan;
#if defined(CRASH_IN_RUN) || defined(HANG_IN_RUN)
    table->plan = NULL;
#endif
#ifdef CAPS_HND_ONLY
    table->caps.kv_layouts = STEPBENCH_KV_HND;
#endif
#ifdef CAPS_PAGES_48
    table->caps.num_page_sizes = 1;
    table->caps.page_sizes[0] = 48;
#endif
#ifdef CAPS_LSE
    table->caps.flags = STEPBENCH_CAP_LSE;
#endif
    return 0;
}

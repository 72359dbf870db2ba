// An op library that misbehaves as the -D definitions say, for the tests
// of a user's library that crashes, hangs or writes escape sequences
// (hostile_oplib_emu_test.go). Without one it is a library whose ops do
// nothing.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stepbench_op.h"

#ifdef BOOM_CTOR
__attribute__((constructor)) static void boom(void) { abort(); }
#endif

uint32_t stepbench_op_abi_version(void) {
#ifdef BOOM_ABI
    *(volatile int *)0 = 1;
#endif
    return STEPBENCH_OP_ABI_VERSION;
}

static int run(const stepbench_op_call *call) {
    (void)call;
#ifdef BOOM_RUN
    *(volatile int *)0 = 1;
#endif
#ifdef HANG_RUN
    for (;;) pause();
#endif
#ifdef ERR_RUN
    snprintf(call->error, call->error_bytes, "\x1b[31mred\x1b[0m run failed\nsecond line");
    return 1;
#endif
    return 0;
}

int stepbench_op_get(const char *op, stepbench_op_table *table, char *error, size_t error_bytes) {
#ifdef BOOM_GET
    *(volatile int *)0 = 1;
#endif
#ifdef HANG_GET
    for (;;) pause();
#endif
#ifdef ERR_GET
    snprintf(error, error_bytes, "\x1b[2J\x1b]0;pwned\x07no %s here\nsecond line", op);
    return 1;
#endif
    (void)op;
    (void)error;
    (void)error_bytes;
    table->abi_version = STEPBENCH_OP_ABI_VERSION;
    table->name = "hostile fixture";
    table->run = run;
    return 0;
}

/* abi1_op.c — a library built for op ABI 1 (include/stepbench_op.h before
 * the paged KV cache): it answers the handshake with 1.0, and stepbench
 * must refuse it in one line before it asks for any op. Self-contained: it
 * does not include today's header. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

uint32_t stepbench_op_abi_version(void) { return (1u << 16) | 0u; }

int stepbench_op_get(const char *op, void *table, char *err, size_t n) {
    (void)table;
    snprintf(err, n, "abi1 fixture: never to be asked for %s", op);
    return 1;
}

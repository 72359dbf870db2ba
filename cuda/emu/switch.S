/* switch.S — fiber context switch for x86-64 System V.
 *
 * void sbemu_swap(void **save_sp, void *load_sp):
 *   saves the callee-saved registers on the current stack, stores the stack
 *   pointer in *save_sp, loads load_sp and restores that stack's registers.
 * sbemu_fiber_start is where a new fiber's first swap returns to: it calls
 * the function in r13 with the argument in r12 and never returns. */
    .text
    .globl sbemu_swap
    .hidden sbemu_swap
    .type sbemu_swap, @function
sbemu_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sbemu_swap, .-sbemu_swap

    .globl sbemu_fiber_start
    .hidden sbemu_fiber_start
    .type sbemu_fiber_start, @function
sbemu_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size sbemu_fiber_start, .-sbemu_fiber_start

    .section .note.GNU-stack,"",@progbits

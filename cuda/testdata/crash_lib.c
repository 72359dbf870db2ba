// A user's library that crashes, for the crash handler's tests.
#include <signal.h>
#include <stdlib.h>

void crash_segv(void) { *(volatile int *)0 = 1; }
void crash_abort(void) { abort(); }
void crash_fpe(void) { raise(SIGFPE); }
void fine(void) {}

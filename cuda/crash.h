// The crash handler of calls into a user's library (an op library): a
// handler of the synchronous signals chained ahead of Go's. While a thread
// is inside a call that set sb_crash_label (its own, thread-local), a
// fault on that thread writes the label and the signal's name to stderr
// with write(2) only, and the process dies by the signal (no Go dump of
// every goroutine, which never named the library); any other fault goes
// to the handler installed before (Go's), unchanged.
#ifndef STEPBENCH_CUDA_CRASH_H
#define STEPBENCH_CUDA_CRASH_H

// The label of the library call this thread is in, NULL outside one: a
// line such as "stepbench: op library /x/lib.so crashed in attn_decode's
// run: " that the signal's name completes. Initial-exec TLS of the
// executable: reading it is async-signal-safe.
extern __thread const char *sb_crash_label;

// sb_crash_install installs the handler once (later calls do nothing);
// 0, or the errno of the sigaction that failed.
int sb_crash_install(void);

// sb_crash_set sets this thread's label (NULL: none).
void sb_crash_set(const char *label);

// sb_crash_call calls fn with sb_crash_label set to label (for tests and
// for calls without arguments).
void sb_crash_call(void (*fn)(void), const char *label);

#endif

#include "crash.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

__thread const char *sb_crash_label;

static const int sb_crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define SB_CRASH_NSIG 5
static struct sigaction sb_crash_prev[SB_CRASH_NSIG];
static volatile sig_atomic_t sb_crash_installed;
static pthread_mutex_t sb_crash_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *sb_crash_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV (an invalid memory access)";
    case SIGBUS: return "SIGBUS (a bus error)";
    case SIGFPE: return "SIGFPE (an arithmetic fault)";
    case SIGILL: return "SIGILL (an illegal instruction)";
    case SIGABRT: return "SIGABRT (abort)";
    }
    return "a fatal signal";
}

static void sb_crash_write(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static int sb_crash_index(int sig) {
    for (int i = 0; i < SB_CRASH_NSIG; i++) {
        if (sb_crash_signals[i] == sig) return i;
    }
    return -1;
}

// sb_crash_die ends the process by sig with its default action.
static void sb_crash_die(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig);
}

static void sb_crash_handler(int sig, siginfo_t *info, void *uctx) {
    const char *label = sb_crash_label;
    if (label != NULL) {
        sb_crash_label = NULL;
        sb_crash_write(label);
        sb_crash_write(sb_crash_name(sig));
        sb_crash_write("\n");
        sb_crash_die(sig);
    }
    int i = sb_crash_index(sig);
    struct sigaction *prev = i >= 0 ? &sb_crash_prev[i] : NULL;
    if (prev != NULL && (prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction != NULL) {
        prev->sa_sigaction(sig, info, uctx);
        return;
    }
    if (prev != NULL && prev->sa_handler == SIG_IGN) return;
    if (prev != NULL && prev->sa_handler != SIG_DFL && prev->sa_handler != NULL) {
        prev->sa_handler(sig);
        return;
    }
    sb_crash_die(sig);
}

int sb_crash_install(void) {
    pthread_mutex_lock(&sb_crash_mu);
    int rc = 0;
    if (!sb_crash_installed) {
        for (int i = 0; i < SB_CRASH_NSIG && rc == 0; i++) {
            struct sigaction prev, sa;
            if (sigaction(sb_crash_signals[i], NULL, &prev) != 0) {
                rc = errno;
                break;
            }
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = sb_crash_handler;
            sa.sa_mask = prev.sa_mask;
            sa.sa_flags = (prev.sa_flags | SA_SIGINFO | SA_ONSTACK) & ~SA_RESETHAND;
            sb_crash_prev[i] = prev;
            if (sigaction(sb_crash_signals[i], &sa, NULL) != 0) rc = errno;
        }
        if (rc == 0) sb_crash_installed = 1;
    }
    pthread_mutex_unlock(&sb_crash_mu);
    return rc;
}

void sb_crash_set(const char *label) { sb_crash_label = label; }

void sb_crash_call(void (*fn)(void), const char *label) {
    const char *outer = sb_crash_label;
    sb_crash_label = label;
    fn();
    sb_crash_label = outer;
}

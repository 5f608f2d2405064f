/* LD_PRELOAD stall at a known step (built and used by stall.rs beside this file).
 *
 * With STALL_AT=fork the process stops itself (SIGSTOP) in its first call of
 * fork(), before forking; with STALL_AT=exec, in its first call of execvp(),
 * before executing. Only the first such call stalls, and the shim removes
 * STALL_AT and LD_PRELOAD from the environment as it loads, so that the
 * processes it starts run unchanged. The real functions are looked up while
 * the library loads: a child of a threaded process may only make
 * async-signal-safe calls between fork and exec, which dlsym is not. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int stall_fork, stall_exec;
static pid_t (*real_fork)(void);
static int (*real_execvp)(const char *, char *const[]);

__attribute__((constructor)) static void init(void) {
    const char *at = getenv("STALL_AT");
    if (at) {
        stall_fork = strcmp(at, "fork") == 0;
        stall_exec = strcmp(at, "exec") == 0;
    }
    unsetenv("STALL_AT");
    unsetenv("LD_PRELOAD");
    real_fork = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
    real_execvp = (int (*)(const char *, char *const[]))dlsym(RTLD_NEXT, "execvp");
}

pid_t fork(void) {
    if (stall_fork) {
        stall_fork = 0;
        raise(SIGSTOP);
    }
    return real_fork();
}

int execvp(const char *file, char *const argv[]) {
    if (stall_exec) {
        stall_exec = 0;
        raise(SIGSTOP);
    }
    return real_execvp(file, argv);
}

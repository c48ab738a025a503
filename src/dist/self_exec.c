/*
 * self_exec.c - see self_exec.h.
 */
#include "dist/self_exec.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/error.h"

extern char **environ;

/* Is entry "NAME=..." one of env's names? */
static int overridden(const char *entry, const char *const *env) {
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], entry, n) && env[i][n] == '=') return 1;
    return 0;
}

vllm_status self_exec_spawn(int argc, char **argv, const char *const *extra, const char *const *env,
                            const char *what, pid_t *pid) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return vllm_error(VLLM_ERR_IO, "cannot find this executable (/proc/self/exe): %s", strerror(errno));
    exe[len] = 0;
    size_t n_extra = 0, n_env = 0, n_environ = 0;
    while (extra && extra[n_extra]) n_extra++;
    while (env && env[n_env]) n_env++;
    while (environ && environ[n_environ]) n_environ++;
    char **args = calloc((size_t)argc + n_extra + 2, sizeof *args);
    char **envp = calloc(n_environ + n_env + 1, sizeof *envp);
    if (!args || !envp) {
        free(args);
        free(envp);
        return vllm_error(VLLM_ERR_NOMEM, "spawning %s", what);
    }
    size_t k = 0;
    args[k++] = exe;
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    for (size_t i = 0; i < n_extra; i++) args[k++] = (char *)extra[i];
    k = 0;
    for (size_t i = 0; i < n_environ; i++)
        if (!overridden(environ[i], env)) envp[k++] = environ[i];
    for (size_t i = 0; i < n_env; i++) envp[k++] = (char *)env[i];

    pid_t parent = getpid();
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(exe, args, envp);
        fprintf(stderr, "vllmc: cannot run %s for %s: %s\n", exe, what, strerror(errno));
        _exit(127);
    }
    int err = errno;
    free(args);
    free(envp);
    if (p < 0) return vllm_error(VLLM_ERR_IO, "cannot fork %s: %s", what, strerror(err));
    *pid = p;
    return VLLM_OK;
}

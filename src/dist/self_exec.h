/*
 * self_exec.h - start this executable again as a child process: the way
 * `vllmc serve` starts its data-parallel engines (dp_engine.h) and its API
 * servers (api_servers.h), as vLLM starts its engine-core and API-server
 * processes.
 *
 * The child runs /proc/self/exe with the parent's arguments plus extra ones,
 * and the parent's environment plus the given NAME=VALUE entries (built
 * before the fork, so the child only calls execve). It gets SIGTERM when the
 * parent dies (PR_SET_PDEATHSIG; one that lost the race exits at once) and
 * starts with no signal blocked, whatever the parent blocked.
 */
#ifndef VLLM_DIST_SELF_EXEC_H
#define VLLM_DIST_SELF_EXEC_H

#include <sys/types.h>

#include "vllm/status.h"

/* argv[0..argc) then extra (NULL-terminated; may be NULL) as the child's
 * arguments after the executable, env (NULL-terminated "NAME=VALUE"; may be
 * NULL) set in its environment. what names the child in errors ("API server
 * 1"). On success *pid is the child's. */
vllm_status self_exec_spawn(int argc, char **argv, const char *const *extra, const char *const *env,
                            const char *what, pid_t *pid);

#endif

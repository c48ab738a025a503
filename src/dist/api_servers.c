/*
 * api_servers.c - see api_servers.h.
 *
 * The supervisor has one thread: it polls the metrics owner's socket in
 * slices of 100 ms and between them reaps children (waitpid) and takes
 * SIGINT/SIGTERM (blocked, then sigtimedwait with no wait).
 */
#include "dist/api_servers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "dist/dp_engine.h"
#include "dist/metrics_link.h"
#include "dist/self_exec.h"

#define ENV_INDEX "VLLMC_API_SERVER_INDEX"
#define ENV_OWNER "VLLMC_METRICS_OWNER"

int32_t api_servers_child_index(void) {
    const char *s = getenv(ENV_INDEX);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > 63 ? -1 : (int32_t)v;
}

const char *api_servers_metrics_owner(void) {
    const char *s = getenv(ENV_OWNER);
    return s && *s ? s : NULL;
}

/* A TCP socket bound to host:port (port 0: any) with SO_REUSEPORT if
 * reuse; -1 when it cannot be bound. *bound gets the port. */
static int bind_port(const char *host, int port, bool reuse, int *bound) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    if (reuse) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!host || !*host || inet_pton(AF_INET, host, &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *bound = ntohs(a.sin_port);
    return fd;
}

/* n consecutive ports free on address (for the API servers' ROUTERs), or 0. */
static int free_port_run(const char *address, int n) {
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int attempt = 0; attempt < 64; attempt++) {
        int base = 20000 + (int)(rand_r(&seed) % 30000u), j, got;
        for (j = 0; j < n; j++) {
            int fd = bind_port(address, base + j, false, &got);
            if (fd < 0) break;
            close(fd);
        }
        if (j == n) return base;
    }
    return 0;
}

/* `<this executable> serve ARGS... --port P --data-parallel-rpc-port R`
 * with VLLMC_API_SERVER_INDEX=i and VLLMC_METRICS_OWNER=owner. */
static vllm_status spawn_api_server(int argc, char **argv, int32_t i, int port, int rpc_port, const char *owner,
                                    pid_t *pid) {
    char port_s[16], rpc_s[16], index_e[64], owner_e[1024], what[32];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(rpc_s, sizeof rpc_s, "%d", rpc_port);
    snprintf(index_e, sizeof index_e, ENV_INDEX "=%d", i);
    if (snprintf(owner_e, sizeof owner_e, ENV_OWNER "=%s", owner) >= (int)sizeof owner_e)
        return vllm_error(VLLM_ERR_INVALID, "metrics owner endpoint too long: %s", owner);
    snprintf(what, sizeof what, "API server %d", i);
    const char *extra[] = {"--port", port_s, "--data-parallel-rpc-port", rpc_s, NULL};
    const char *env[] = {index_e, owner_e, NULL};
    return self_exec_spawn(argc, argv, extra, env, what, pid);
}

static void describe(int st, char *buf, size_t cap) {
    if (WIFSIGNALED(st)) snprintf(buf, cap, "was killed by signal %d", WTERMSIG(st));
    else snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
}

/* Sends sig to the live pids and waits up to seconds for them (answering
 * the metrics calls meanwhile), then SIGKILLs what is left. */
static void stop_all(pid_t *pids, int32_t n, int sig, double seconds, metrics_link_owner *o) {
    for (int32_t i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], sig);
    double until = clock_now() + seconds;
    for (;;) {
        int32_t left = 0;
        for (int32_t i = 0; i < n; i++) {
            int st;
            if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) pids[i] = 0;
            if (pids[i] > 0) left++;
        }
        if (!left) return;
        if (clock_now() > until) break;
        if (o) metrics_link_owner_poll(o, 50);
        else usleep(50000);
    }
    for (int32_t i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

int api_servers_run(const dp_config *c, int argc, char **argv, const char *host, int port, const char *uds) {
    int32_t n = c->api_server_count;
    int32_t local = c->size_local < 0 ? c->size : c->size_local;
    if (uds) {
        fprintf(stderr, "vllmc serve: --uds with --api-server-count %d: a Unix socket path cannot be shared by "
                        "several processes; use --port\n", n);
        return 2;
    }
    if (local > c->size) {
        fprintf(stderr, "vllmc serve: --data-parallel-size-local %d is more than --data-parallel-size %d\n", local,
                c->size);
        return 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    log_set_prefix("(APIServerManager) ");

    int status = 1, http_fd = -1;
    metrics_link_owner *owner = NULL;
    pid_t *eng = calloc((size_t)(local > 0 ? local : 1), sizeof *eng);
    pid_t *api = calloc((size_t)n, sizeof *api);
    int32_t *restarts = calloc((size_t)(local > 0 ? local : 1), sizeof *restarts);
    if (!eng || !api || !restarts) goto out;
    if (port == 0) { /* pick the shared port here and hold it (not listening) so no one else takes it */
        http_fd = bind_port(host, 0, true, &port);
        if (http_fd < 0) {
            log_error("cannot find a free port for the API servers: %s", strerror(errno));
            goto out;
        }
    }
    int rpc_port = c->rpc_port;
    if (!rpc_port) rpc_port = local == c->size ? free_port_run(c->address, n) : DP_DEFAULT_RPC_PORT;
    if (!rpc_port) {
        log_error("cannot find %d free consecutive ports on %s for the engines; give --data-parallel-rpc-port", n,
                  c->address);
        goto out;
    }
    char owner_ep[128];
    if (metrics_link_owner_create(&owner, owner_ep, sizeof owner_ep) != VLLM_OK) {
        log_error("%s", vllm_errmsg());
        goto out;
    }
    log_info("%d API servers on port %d, %d engines (%d started here) at tcp://%s:%d..%d, metrics owned here (%s)",
             n, port, c->size, local, c->address, rpc_port, rpc_port + n - 1, owner_ep);
    for (int32_t k = 0; k < local; k++) {
        if (dp_engine_spawn(argc, argv, k, c->address, rpc_port, &eng[k]) != VLLM_OK) {
            log_error("%s", vllm_errmsg());
            goto out;
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (spawn_api_server(argc, argv, i, port, rpc_port, owner_ep, &api[i]) != VLLM_OK) {
            log_error("%s", vllm_errmsg());
            goto out;
        }

    int32_t api_left = n;
    for (;;) {
        metrics_link_owner_poll(owner, 100);
        struct timespec zero = {0, 0};
        int sig = sigtimedwait(&sigs, NULL, &zero);
        if (sig == SIGINT || sig == SIGTERM) {
            log_info("Shutting down %d API servers and %d engines (%s)", api_left, local,
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
            status = 0;
            break;
        }
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            char why[64];
            describe(st, why, sizeof why);
            for (int32_t i = 0; i < n; i++)
                if (api[i] == p) {
                    api[i] = 0;
                    api_left--;
                    log_error("API server %d (pid %d) %s; %d of %d API servers left", i, (int)p, why, api_left, n);
                }
            for (int32_t k = 0; k < local; k++)
                if (eng[k] == p) {
                    eng[k] = 0;
                    log_error("data parallel engine %d (pid %d) %s; the API servers fail its requests", k, (int)p,
                              why);
                    if (!c->restart_engines) continue;
                    if (restarts[k] >= DP_RESTART_MAX) {
                        log_error("data parallel engine %d: not restarting it (restarted %d times already)", k,
                                  restarts[k]);
                        continue;
                    }
                    if (dp_engine_spawn(argc, argv, k, c->address, rpc_port, &eng[k]) != VLLM_OK) {
                        log_error("data parallel engine %d: cannot restart it: %s", k, vllm_errmsg());
                        continue;
                    }
                    restarts[k]++;
                    log_warn("data parallel engine %d: restarting it (pid %d)", k, (int)eng[k]);
                }
        }
        if (!api_left) {
            log_error("every API server is gone; stopping the engines");
            break;
        }
    }
out:
    if (api) stop_all(api, n, SIGTERM, 10.0, owner);
    if (eng) stop_all(eng, local, SIGTERM, 5.0, NULL);
    metrics_link_owner_free(owner);
    if (http_fd >= 0) close(http_fd);
    free(api);
    free(eng);
    free(restarts);
    return status;
}

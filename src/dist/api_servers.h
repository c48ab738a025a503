/*
 * api_servers.h - `vllmc serve --api-server-count N` (N > 1): N API server
 * processes accepting on one port (SO_REUSEPORT: the kernel spreads the
 * connections), every one reaching every engine, as vLLM's
 * APIServerProcessManager.
 *
 *   supervisor (the process you started; this file):
 *     - owns the one Prometheus registry (dist/metrics_link.h) and answers
 *       every API server's metrics calls
 *     - starts the local engines (dist/dp_engine.h, -dp N, or one engine
 *       when there is no -dp: N > 1 always puts the engine in its own
 *       process behind ZeroMQ), each connected to all N API servers
 *     - starts the N API servers and watches them: one that dies is logged
 *       and the others keep serving; when none is left it stops the engines
 *       and exits 1; SIGINT/SIGTERM stop the API servers, then the engines
 *   API server i (this executable again, VLLMC_API_SERVER_INDEX=i and
 *     VLLMC_METRICS_OWNER=tcp://127.0.0.1:PORT in its environment): the
 *     usual front end (tokenizer, detokenizer, HTTP) whose engines are the
 *     data-parallel client (dist/dp_client.h) bound at
 *     --data-parallel-rpc-port + i, starting none itself; its log lines
 *     begin "(APIServer pid=N) "
 *
 * Ports: the HTTP port is shared (port 0: the supervisor picks a free one
 * and holds it with SO_REUSEPORT); engine k connects to rpc_port + i for
 * every API server i (rpc_port: --data-parallel-rpc-port, else N free
 * consecutive ports when every engine is local, else 29550). Headless
 * engines on other hosts need the same --api-server-count.
 */
#ifndef VLLM_DIST_API_SERVERS_H
#define VLLM_DIST_API_SERVERS_H

#include <stdint.h>

#include "dist/dp_client.h"

/* This process's API server index (VLLMC_API_SERVER_INDEX), or -1 when it
 * is not one the supervisor started. */
int32_t api_servers_child_index(void);
/* The metrics owner's address for an API server (VLLMC_METRICS_OWNER), or NULL. */
const char *api_servers_metrics_owner(void);

/* The supervisor: runs until a signal or until every API server is gone;
 * returns the exit status. host/port/uds: serve's --host, --port, --uds. */
int api_servers_run(const dp_config *c, int argc, char **argv, const char *host, int port, const char *uds);

#endif

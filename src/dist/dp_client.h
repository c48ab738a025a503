/*
 * dp_client.h - the front end's side of data parallelism: N engine
 * processes (dp_engine.h) behind one frontend (server/frontend.h), as
 * vLLM's DPLBAsyncMPClient. It acts as the frontend's engine
 * (frontend_engine_ops): an add is routed to one engine and sent over
 * ZeroMQ, aborts and stop-string stops go to the engine holding the
 * request, and a "step" is the next OUTPUT any engine sent, with that
 * engine's index (metrics label their series with it). Tokenization,
 * detokenization, stop strings and metrics stay in the front end.
 *
 * Routing (--data-parallel-routing):
 *   least_loaded  (default) vLLM's score, waiting x 4 + running, from each
 *                 engine's latest stats plus the ADDs it has not yet
 *                 acknowledged (counted as waiting); ties to the lowest index
 *   prefix_cache  the engine that was sent the longest prefix of this prompt
 *                 in whole KV blocks (chained block hashes the front end
 *                 remembers per engine, the newest 2^16 to 2^17 per engine,
 *                 salted by cache_salt), unless its score exceeds the
 *                 least-loaded engine's by more than DP_PREFIX_SLACK; no
 *                 match: least loaded
 *
 * Engines that die: a spawned engine's exit is seen by waitpid at once; a
 * remote engine's dropped connection by the ROUTER's monitor (the ZeroMQ
 * heartbeat closes a silent one within DP_HEARTBEAT_TIMEOUT_MS), after which
 * sends to it fail (ZMQ_ROUTER_MANDATORY). Either way an ERROR line names
 * the engine, its requests finish with finish_reason "error" and a message
 * naming the engine, and the others keep serving; when none is left, step
 * fails and the frontend reports the engine dead (/health 503).
 *
 * With --data-parallel-restart-engines, a local engine that dies after it
 * was ready is started again (a WARNING names it and its new pid); an
 * engine that says HELLO again under its index (restarted here, or a
 * headless one started again on its host) takes its place once more: the
 * old one's requests have failed, new requests reach it again. One that
 * dies before its HELLO is not restarted.
 */
#ifndef VLLM_DIST_DP_CLIENT_H
#define VLLM_DIST_DP_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "dist/dp_engine.h"
#include "dist/dp_wire.h"
#include "server/frontend.h"

#define DP_DEFAULT_RPC_PORT 29550    /* vLLM's data_parallel_rpc_port */
#define DP_PREFIX_SLACK 8            /* two waiting requests */
#define DP_RESTART_MAX 5             /* restarts of one engine (--data-parallel-restart-engines) */
#define DP_CONTROL_TIMEOUT_S 60      /* a runtime LoRA update's wait for every engine */

typedef enum dp_routing { DP_ROUTING_LEAST_LOADED = 0, DP_ROUTING_PREFIX_CACHE } dp_routing;

/* The -dp flags (vLLM's names), parsed by dp_client_parse_flag. */
typedef struct dp_config {
    int32_t size;                    /* -dp/--data-parallel-size: engines in all (1) */
    int32_t size_local;              /* -dpl/--data-parallel-size-local: on this node (-1 = size) */
    int32_t start_rank;              /* -dpr/--data-parallel-start-rank: the first local engine (0) */
    const char *address;             /* -dpa/--data-parallel-address (127.0.0.1) */
    int32_t rpc_port;                /* -dpp/--data-parallel-rpc-port (0 = 29550, or any free
                                        port when every engine is local) */
    bool headless;                   /* --headless: engines only, no API server */
    dp_routing routing;              /* --data-parallel-routing */
    bool restart_engines;            /* --data-parallel-restart-engines (beyond vLLM): a local
                                        engine that dies after it was ready is started again */
    int32_t api_server_count;        /* -asc/--api-server-count: API server processes (1; dist/api_servers.h) */
    double ready_timeout;            /* seconds to wait for every engine's HELLO
                                        (VLLM_ENGINE_READY_TIMEOUT_S, 600) */
} dp_config;

void dp_client_config_init(dp_config *c);
/* Tries argv[*i] as one of the flags above: 1 (consumed, *i advanced), 0
 * (not one), -1 (bad value; message on stderr naming the flag). */
int dp_client_parse_flag(dp_config *c, int argc, char **argv, int *i);
/* The flags' --help lines. */
const char *dp_client_usage(void);

typedef struct dp_client dp_client;

/* Binds the ROUTER, spawns the local engines (dp_engine_spawn with serve's
 * argv), waits for every engine's HELLO (their info must agree), and
 * returns engine 0's HELLO in *hello. */
vllm_status dp_client_create(const dp_config *c, int argc, char **argv, dp_client **out, dp_hello *hello);
/* The ops to hand to frontend_create_ops with the client (which then owns it). */
const frontend_engine_ops *dp_client_ops(void);
/* Frees without a frontend (start-up failed): stops the local engines. */
void dp_client_free(dp_client *c);

/* A runtime LoRA update (load: vllm_engine_load_lora(name, path), else
 * unload) on every live engine; any thread, waits for every engine's answer
 * (up to DP_CONTROL_TIMEOUT_S). VLLM_OK when all did it, else the first
 * refusal's status and message. Updates run one at a time. */
vllm_status dp_client_lora(dp_client *c, bool load, const char *name, const char *path);

/* Requests each engine was sent so far (for tests and logs); the engine
 * count; an engine's KV pool in blocks (from its HELLO). */
int64_t dp_client_num_routed(dp_client *c, int32_t engine_index);
int32_t dp_client_size(const dp_client *c);
int32_t dp_client_num_gpu_blocks(const dp_client *c, int32_t engine_index);

/* Headless: runs this node's engines (size_local of them from start_rank)
 * until they end; returns the exit status. setup: dp_engine_run's. */
int dp_client_run_headless(const dp_config *c, const vllm_engine_args *ea, int argc, char **argv,
                           dp_engine_setup_fn setup);

#endif

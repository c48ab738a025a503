/*
 * dp_engine.h - one data-parallel engine process: a whole engine
 * (scheduler, KV cache, runner, its own --threads) serving a front end over
 * ZeroMQ (vLLM's EngineCoreProc behind DPLBAsyncMPClient).
 *
 *   front end (dp_client.h): ROUTER, bound at tcp://ADDRESS:RPC_PORT
 *   engine k (here):         DEALER with routing id "engine-k", connected to it
 *
 * The engine connects, sends HELLO (dp_wire.h) once its model is loaded,
 * then loops: take every queued ADD / ABORT / STOP, run one engine step when
 * it has work, send the step's outputs (OUTPUT) with its scheduler stats
 * and the count of ADDs it has taken (the front end's routing reads both).
 * A request the engine refuses comes back as an OUTPUT finishing each of its
 * sequences with finish_reason ERROR and the engine's message.
 *
 * Lifetime: a spawned engine (dp_engine_spawn) dies with its parent
 * (PR_SET_PDEATHSIG); every engine exits when its connection to the front
 * end drops after the HELLO (the ZeroMQ heartbeat notices a silent peer
 * within DP_HEARTBEAT_TIMEOUT_MS), logging why. A failed step exits with
 * status 1 after logging the engine's error; the front end fails that
 * engine's requests and keeps serving on the others.
 *
 * Testing hook: VLLMC_DEBUG_STEP_DELAY_US=N slows every step by N
 * microseconds, as in the frontend (server/frontend.h).
 */
#ifndef VLLM_DIST_DP_ENGINE_H
#define VLLM_DIST_DP_ENGINE_H

#include <stdint.h>
#include <sys/types.h>

#include "vllm/vllm.h"

#define DP_HEARTBEAT_IVL_MS 1000
#define DP_HEARTBEAT_TIMEOUT_MS 5000

/* Builds the engine and serves the front end at tcp://address:port as
 * engine engine_index until the front end goes away (returns 0) or a step
 * fails (returns 1). num_clients > 1 (--api-server-count): one front end
 * per API server, at ports port .. port + num_clients - 1, each sent its own
 * requests' outputs and every step's stats (the step's counters only to the
 * lowest-numbered one still connected, so that summed over the front ends
 * they count once); the engine keeps serving while any is connected.
 * setup (may be NULL) runs once the engine is built, before the HELLO: serve
 * passes the loading of its --lora-modules adapters; its failure is the
 * engine's (logged, status 1). */
typedef vllm_status (*dp_engine_setup_fn)(vllm_engine *e, const vllm_engine_args *ea);
int dp_engine_run(const vllm_engine_args *ea, const char *address, int32_t port, int32_t num_clients,
                  int32_t engine_index, dp_engine_setup_fn setup);

/* Starts `<this executable> serve ARGS... --headless
 * --data-parallel-start-rank RANK --data-parallel-size-local 1
 * --data-parallel-address ADDRESS --data-parallel-rpc-port PORT` (later
 * flags override the same ones in ARGS), as a child that gets SIGTERM when
 * this process dies. argv: serve's arguments (argv[0] = "serve"). */
vllm_status dp_engine_spawn(int argc, char **argv, int32_t rank, const char *address, int32_t port, pid_t *pid);

#endif

/*
 * frontend.h - the server's side of the engine: vLLM's AsyncLLM and its
 * OutputProcessor, for one engine.
 *
 *   any thread ──frontend_add_request / frontend_abort_request──► command queue
 *   engine thread: owns the vllm_engine; applies commands, then
 *                  vllm_engine_step() while there is work, copying each
 *                  step's outputs into a batch; sleeps on a condvar when idle
 *   output thread: per batch, the output processor (engine/
 *                  output_processor.h: detokenization, stop strings, finish
 *                  reasons, logprobs; asks the engine to stop a sequence a
 *                  stop string ended), then the request's sink (the serving
 *                  layer builds responses there)
 *
 * The engine thread does nothing but engine work and copying; everything
 * per-token on the text side happens on the output thread, overlapped with
 * the next step. Neither thread ever waits for a client: the sinks only
 * append to buffers (see http.h), so a slow or vanished client cannot stall
 * the engine or other requests.
 *
 * Testing hook: VLLMC_DEBUG_STEP_DELAY_US=N in the environment makes the
 * engine thread sleep N microseconds after each step, so tests can act
 * (disconnect, shut down) while a request is certainly still running.
 */
#ifndef VLLM_SERVER_FRONTEND_H
#define VLLM_SERVER_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/output_processor.h"
#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

typedef struct frontend frontend;

/* Starts the engine and output threads. The engine moves to the engine
 * thread (nothing else may touch it; frontend_free frees it). tok is
 * borrowed and must outlive f. */
vllm_status frontend_create(vllm_engine *engine, const tokenizer *tok, frontend **out);
/* The engine behind a frontend: the local vllm_engine (frontend_create), or
 * something that acts like one, such as the data-parallel client that talks
 * to engine processes (dist/dp_client.h). Called on the engine thread only,
 * except wake. step may set *out to NULL: nothing arrived (a remote engine
 * had nothing to report within its wait); *engine_index says which engine
 * produced a step (0 for a local one). wake (may be NULL) is called, under
 * the frontend's lock, whenever a command is queued, so a step waiting on
 * sockets can return early. */
typedef struct frontend_engine_ops {
    vllm_status (*add)(void *e, const char *request_id, const int32_t *prompt_ids, int32_t num_prompt_ids,
                       const vllm_sampling_params *sp, const vllm_request_opts *opts);
    vllm_status (*abort)(void *e, const char *request_id);
    vllm_status (*stop_sequence)(void *e, const char *request_id, int32_t index);
    bool (*has_unfinished)(void *e);
    vllm_status (*step)(void *e, const vllm_step_output **out, int32_t *engine_index);
    void (*wake)(void *e);
    void (*free)(void *e);
} frontend_engine_ops;

/* frontend_create over any engine; ops is copied, e moves to the frontend. */
vllm_status frontend_create_ops(const frontend_engine_ops *ops, void *e, const tokenizer *tok, frontend **out);

/* Aborts what is left, joins both threads, frees the engine. NULL: no-op. */
void frontend_free(frontend *f);

/* How a request reports back. Called on the output thread, in this order:
 * on_added once (rc != VLLM_OK: refused, message in error), then on_delta
 * any number of times (never after a delta with a finish reason for that
 * sequence), then on_done once, after which the frontend forgets ud. A
 * delta is the output processor's (engine/output_processor.h: text with
 * stop strings applied, token ids, logprobs in vLLM's order, finish and
 * stop_reason), borrowed for the call; its ud is the frontend's, not the
 * sink's. */
typedef struct frontend_sink {
    void (*on_added)(void *ud, vllm_status rc, const char *error);
    void (*on_delta)(void *ud, const output_delta *d);
    void (*on_done)(void *ud);
    void *ud;
} frontend_sink;

typedef struct frontend_request {
    const char *request_id;              /* unique among live requests; copied */
    const int32_t *prompt_ids;           /* copied */
    int32_t num_prompt_ids;
    vllm_sampling_params sp;             /* validated by the engine on add */
    int32_t priority;
    const char *cache_salt;              /* NULL = none; copied */
    const char *lora_name;               /* NULL = the base model, else a LoRA adapter; copied */
    const char *kv_remote_host;          /* kv_transfer_params remote_host: NULL = none; copied */
    int32_t kv_remote_port;
    vllm_structured_outputs structured_outputs; /* kind NONE = unconstrained; strings copied */
    const char *const *stop;             /* stop strings; copied */
    int32_t num_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens;
} frontend_request;

/* Queues a request; its sink hears the outcome. Fails only when the frontend
 * is shutting down or out of memory (then the sink is never called). */
vllm_status frontend_add_request(frontend *f, const frontend_request *req, const frontend_sink *sink);
/* Aborts a request (any thread; unknown or finished ids are ignored). Its
 * running sequences end with finish_reason ABORT and their KV blocks are freed. */
void frontend_abort_request(frontend *f, const char *request_id);

/* Refuses new requests and aborts every live one; frontend_wait_idle then
 * waits (up to seconds) until the engine has none left. */
void frontend_begin_shutdown(frontend *f);
bool frontend_wait_idle(frontend *f, double seconds);

/* Sees every engine step's output (a copy with the engine's events and
 * scheduler stats), on the output thread, in order, before the step's deltas
 * go to the sinks: where metrics (vLLM's stat loggers) hook in. A sequence a
 * stop string ended in this step reads finish_reason STOP (as its client
 * will see it), whatever the engine said. Borrowed for the call. Set it
 * before the first request. */
typedef void (*frontend_step_fn)(void *ud, const vllm_step_output *out);
void frontend_set_step_observer(frontend *f, frontend_step_fn fn, void *ud);
/* The same with the index of the engine that made the step (data parallel). */
typedef void (*frontend_engine_step_fn)(void *ud, int32_t engine_index, const vllm_step_output *out);
void frontend_set_engine_step_observer(frontend *f, frontend_engine_step_fn fn, void *ud);

typedef struct frontend_stats {
    vllm_scheduler_stats sched;          /* of the latest step */
    int64_t num_live_requests;           /* added and not yet done */
    bool engine_dead;                    /* a step failed; nothing more will run */
} frontend_stats;
void frontend_get_stats(frontend *f, frontend_stats *out);

#endif

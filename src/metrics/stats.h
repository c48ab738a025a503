/*
 * stats.h - per-request timing state and the per-step statistics vLLM's
 * stat loggers consume (vLLM V1's RequestStateStats and IterationStats).
 *
 * The front end tells stats about a request when it arrives (its arrival
 * time on the front end's clock, prompt length, n, max_tokens); then, for
 * every engine step output, stats_update() turns the step's events and new
 * tokens into one stats_iteration: token counts, TTFT and inter-token
 * samples, and a record per finished sequence with its intervals.
 *
 * Intervals (vLLM's metrics design; engine-core timestamps are compared only
 * with engine-core timestamps, front-end times only with front-end times):
 *   queue      QUEUED -> first SCHEDULED
 *   prefill    first SCHEDULED -> first NEW_TOKENS
 *   decode     first NEW_TOKENS -> last NEW_TOKENS
 *   inference  first SCHEDULED -> last NEW_TOKENS
 *   inter-token  successive NEW_TOKENS of a sequence: one sample per
 *              sequence per step, however many tokens the step brought
 *   TTFT       arrival -> the front end handling the first token (front end)
 *   e2e        arrival -> the front end handling the finish (front end)
 *   time per output token (per request) = decode / (generated - 1), 0 when
 *              at most one token was generated
 * A re-SCHEDULED after PREEMPTED does not restart anything: a preemption in
 * decode lengthens one inter-token gap, decode and inference; one in prefill
 * lengthens TTFT, prefill and inference.
 *
 * Like vLLM, which runs an n > 1 request as n child requests, each sequence
 * counts as a request in request-level metrics (success, e2e, TTFT, prompt
 * tokens, ...), while n and the longest generation of the group are recorded
 * once, when the last sequence finishes. Our engine records QUEUED and the
 * first SCHEDULED on sequence 0 only (the others fork from it after
 * prefill), so a sibling starts from sequence 0's timestamps.
 *
 * A finished sequence whose phase never ended (aborted while waiting or in
 * prefill) has that phase end at the finishing step's timestamp; phases that
 * never began count 0. vLLM 0.11 records no metrics at all for aborted
 * requests (its issue #31503); we count them, so request_success_total by
 * reason matches what clients saw.
 *
 * Thread-safety: a stats object is not locked; metrics.c serializes calls.
 * Lifetime: stats_create/stats_free; a request's state is freed when its last
 * sequence finishes, or by stats_remove_request.
 */
#ifndef VLLM_METRICS_STATS_H
#define VLLM_METRICS_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm/vllm.h"

typedef struct stats stats;

/* One finished sequence (vLLM's FinishedRequestStats). */
typedef struct stats_finished {
    const char *request_id;          /* borrowed from the step output */
    int32_t index;                   /* sequence 0..n-1 */
    vllm_finish_reason reason;
    double ttft;                     /* seconds; -1 when no token came */
    double e2e, queue, prefill, decode, inference, time_per_output_token; /* seconds */
    int32_t num_prompt_tokens, num_generation_tokens;
    int32_t max_tokens;              /* <= 0: none given */
    /* The instants behind the intervals (tracing draws them as spans): the
     * arrival on the front end's clock, and on the engine's (the same
     * monotonic clock, clock.h) QUEUED, the first SCHEDULED and the first
     * token, each valid when its has_ flag is set; the phases end at
     * these + queue, prefill and decode, and the request at arrival + e2e. */
    double arrival, queued_ts, scheduled_ts, first_token_ts;
    bool has_queued, has_scheduled, has_first_token;
} stats_finished;

/* One request whose last sequence finished this step. */
typedef struct stats_group {
    int32_t n;
    int32_t max_num_generation_tokens; /* longest generation among its sequences */
} stats_group;

/* What one step output amounts to. The arrays are owned by the iteration and
 * grow to the largest step seen (stats_iteration_deinit frees them). */
typedef struct stats_iteration {
    int64_t num_prompt_tokens;       /* prompts whose prefill completed this step */
    int64_t num_generation_tokens;
    int32_t num_scheduled_events;    /* first SCHEDULED and re-SCHEDULED: prefix-cache lookups */
    double *ttft;                    /* (num_ttft) */
    int32_t num_ttft;
    double *itl;                     /* (num_itl) */
    int32_t num_itl;
    stats_finished *finished;        /* (num_finished) */
    int32_t num_finished;
    stats_group *groups;             /* (num_groups) */
    int32_t num_groups;
    int32_t cap;                     /* capacity of each array */
} stats_iteration;

void stats_iteration_init(stats_iteration *it);
void stats_iteration_deinit(stats_iteration *it);

vllm_status stats_create(stats **out);
void stats_free(stats *s);

/* A request the front end will see outputs for. arrival: the front end's
 * clock. VLLM_ERR_INVALID if the id is live already or n < 1. */
vllm_status stats_add_request(stats *s, const char *request_id, double arrival,
                              int32_t num_prompt_tokens, int32_t n, int32_t max_tokens);
/* Forgets a request without recording anything (refused, or abandoned
 * before the engine saw it). Unknown ids are ignored. */
void stats_remove_request(stats *s, const char *request_id);
int32_t stats_num_requests(const stats *s);

/* Finishes one sequence from the front end (a stop string matched, or the
 * engine died): recorded like an engine finish at front-end time now, its
 * phases ending at its last token; later outputs for it are ignored. Adds a
 * record to it (reset first, like stats_update). Unknown or finished
 * sequences are ignored. */
vllm_status stats_finish_sequence(stats *s, const char *request_id, int32_t index,
                                  vllm_finish_reason reason, double now, stats_iteration *it);

/* Folds one engine step output into it (reset first). now: the front end's
 * clock when it handles this output. Outputs of unknown requests (never
 * added, already finished or removed) are ignored, as vLLM ignores outputs
 * of aborted requests. Fails only when the iteration's arrays cannot grow. */
vllm_status stats_update(stats *s, const vllm_step_output *out, double now, stats_iteration *it);

#endif

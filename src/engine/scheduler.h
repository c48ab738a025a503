/*
 * scheduler.h - continuous batching with chunked prefill, preemption by
 * recompute and FCFS/priority policies (vLLM V1's Scheduler).
 *
 * Each step (scheduler_schedule) fills a token budget
 * (max_num_batched_tokens) and a sequence cap (max_num_seqs):
 *   1. Running sequences first, in queue order: each gets the tokens it has
 *      not computed yet (1 for a decode, the next chunk for a partial
 *      prefill) plus its draft tokens, if a proposer gave it any, capped by
 *      long_prefill_token_threshold and the budget left (drafts that do not
 *      fit are dropped; so are all of them before anyone is preempted for
 *      their blocks). If its blocks cannot be allocated, the lowest-priority
 *      running sequence -- the last one under FCFS, the max (priority,
 *      arrival) under the priority policy -- is preempted (blocks freed, back
 *      to the front of the waiting queue, K/V to be recomputed) until it fits
 *      or preempts itself.
 *   2. Then, only if nothing was preempted this step, waiting sequences in
 *      queue order (FCFS: arrival; priority: lower value, then arrival) while
 *      budget and seats last: prefix-cache lookup, then as much of the prompt
 *      as fits (chunked prefill is always on). The first that cannot get
 *      blocks stops the loop, so nobody overtakes it (no starvation). So
 *      does one whose next uncached block another sequence of this step is
 *      computing: next step it hits that block in the prefix cache (a burst
 *      of requests with one prompt computes the prompt once).
 * A sequence is scored (its logits computed) only when this step computes
 * its last committed token: one row for it, plus one per scheduled draft.
 * A request with prompt_logprobs also has each prompt position's row scored
 * (the logprob of the prompt token after it), at most max_prompt_rows in a
 * step (its chunk is cut to fit, or it waits a step), each position once
 * (prompt_lps_done, kept across a preemption); as in vLLM, such a request
 * does not read the prefix cache (its prompt is computed whole, so every
 * row exists), though it fills it. Its sequence has news in every step
 * that scores prompt rows.
 *
 * After the forward and the sampler, scheduler_update takes each entry's
 * committed tokens (the accepted drafts and one sampled token; for an
 * n > 1 request's first sample, one token per sequence, splitting the
 * siblings off), appends them with the stop conditions checked after each
 * (tokens after a stop are dropped), sets the computed count to what the
 * committed tokens cover, offers newly full blocks to the prefix cache,
 * releases blocks that held only rejected drafts, and frees finished
 * sequences' blocks.
 *
 * Plug points: LoRA ids ride on the request (and in the block hash); a KV
 * connector adds per-step lists of blocks to load and save beside the block
 * copies; structured outputs attach a mask per scored row in the sampler.
 *
 * Events (QUEUED, SCHEDULED, PREEMPTED) and new tokens are recorded on the
 * sequences and listed as "news" for the engine's step output; the scheduler
 * keeps no global statistics beyond the step output's counts.
 */
#ifndef VLLM_ENGINE_SCHEDULER_H
#define VLLM_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/list.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "vllm/vllm.h"

#define SCHEDULER_MAX_EOS 8

typedef struct scheduler_config {
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    int32_t long_prefill_token_threshold; /* 0 = off */
    vllm_scheduling_policy policy;
    int32_t max_model_len;
    int32_t eos_ids[SCHEDULER_MAX_EOS];   /* the model's EOS ids, for the stop check */
    int32_t num_eos;
    int32_t max_prompt_rows;              /* rows of prompt logprobs per step (0: prompt_logprobs
                                             requests are never scheduled) */
    int32_t max_loras;                    /* distinct LoRA adapters among running sequences; 0 = no limit.
                                             After a waiting sequence of another adapter only base-model
                                             sequences are admitted (no adapter's overtakes it), so it
                                             runs once a running adapter drains */
} scheduler_config;

/* One sequence's work in a step. */
typedef struct scheduled_seq {
    seq *seq;
    int32_t num_computed;            /* tokens with K/V before this step = first new position */
    int32_t num_new_tokens;          /* tokens fed: positions [num_computed, num_computed + num_new_tokens),
                                        the last num_drafts of them drafts */
    int32_t num_drafts;              /* drafts scheduled (seq->num_drafts after scheduling) */
    int32_t num_scored;              /* rows of logits: the last num_scored new tokens (0, or drafts + 1) */
    int32_t num_prompt_rows;         /* rows of prompt logprobs just before those (prompt_logprobs):
                                        positions [first_prompt_row, + num_prompt_rows), each scoring
                                        the prompt token after it */
    int32_t first_prompt_row;
    int32_t num_samples;             /* sequences that sample from them: 0, 1, or n when seq 0 forks */
    int32_t out_offset;              /* first of this entry's slots in the step's committed tokens: */
    int32_t num_out;                 /* num_scored slots, or n for a fork (0 when nothing is scored) */
} scheduled_seq;

typedef struct scheduler_output {
    int32_t num_seqs;
    scheduled_seq *seqs;             /* (num_seqs) running ones first, then newly admitted */
    int32_t num_tokens;              /* sum of num_new_tokens */
    int32_t num_scored;              /* sum of num_scored */
    int32_t num_prompt_rows;         /* sum of num_prompt_rows (<= max_prompt_rows) */
    int32_t num_out;                 /* sum of num_out */
    int32_t num_copies;
    block_copy *copies;              /* copy-on-write: run in order, before the forward */
    int32_t num_preemptions;         /* this step */
    int64_t prefix_cache_queries;    /* tokens, this step */
    int64_t prefix_cache_hits;
    int64_t external_prefix_cache_queries; /* tokens asked of the KV connector, this step */
    int64_t external_prefix_cache_hits;    /* tokens it supplied (loaded before the forward) */
} scheduler_output;

typedef struct scheduler scheduler;
typedef struct kv_connector kv_connector;

/* The KV cache manager is borrowed and must outlive the scheduler. Checks
 * the config (max_num_batched_tokens >= max_num_seqs, as vLLM does). */
vllm_status scheduler_create(const scheduler_config *cfg, kv_cache_manager *kv, scheduler **out);
/* Frees the scheduler only; requests belong to the caller. */
void scheduler_free(scheduler *s);

/* A KV connector (engine/kv_connector.h; borrowed, NULL = none): at
 * admission, after the prefix-cache lookup, the blocks it can supply are
 * allocated and counted as computed (they are loaded before the forward). A
 * prompt_logprobs request does not use it (as it does not use the prefix
 * cache). */
void scheduler_set_kv_connector(scheduler *s, kv_connector *c);

/* Queues a new request's first sequence (records QUEUED at now). */
void scheduler_add_request(scheduler *s, request *r, double now);

/* Plans one step. The output is owned by the scheduler, valid until the
 * next schedule; an empty step has num_seqs == 0. */
const scheduler_output *scheduler_schedule(scheduler *s, double now);

/* The k-th sequence that samples from entry e's rows (k < e->num_samples):
 * the entry's own sequence, or for a fork seq 0's sibling k. */
seq *scheduler_entry_seq(const scheduled_seq *e, int32_t k);

/* Applies the last schedule's results: entry i committed num_committed[i]
 * tokens, committed[seqs[i].out_offset ...] (for a fork, n tokens, one per
 * sequence k; otherwise its accepted drafts then one sampled token, at most
 * num_scored). Entries with no scored rows commit nothing. Fails only on
 * VLLM_ERR_NOMEM (a token array could not grow); the step's results are then
 * partly applied and the engine must stop. */
vllm_status scheduler_update(scheduler *s, const int32_t *committed, const int32_t *num_committed, double now);

/* Pipeline parallelism (several batches in flight): scheduler_update of a
 * copy of an earlier schedule's output (seqs and copies arrays of the
 * caller's); and a cap on the entries of each schedule (0 = none), so the
 * sequences spread over the batches in flight. Sequences marked in_flight
 * (request.h) are neither scheduled nor preempted; a running sequence that
 * needs blocks only an in-flight sequence holds waits for a later schedule. */
vllm_status scheduler_update_output(scheduler *s, const scheduler_output *o, const int32_t *committed,
                                    const int32_t *num_committed, double now);
void scheduler_set_batch_cap(scheduler *s, int32_t cap);

/* Finishes one sequence now (abort, or a stop string seen by the front end):
 * takes it out of its queue and frees its blocks. No-op if already finished.
 * Unforked siblings of an aborted seq 0 finish with it. */
void scheduler_finish_seq(scheduler *s, seq *q, vllm_finish_reason reason);
void scheduler_abort_request(scheduler *s, request *r);
/* After the forward, before scheduler_update: q's step is void (a KV
 * connector's load failed its check). Like a preemption: its blocks go back
 * uncached, it waits at the front to be computed again (its next admission
 * looks up the prefix cache and the connector afresh), and scheduler_update
 * skips it. A sequence that has produced nothing yet reports cached tokens
 * from that next admission. No-op unless q is running. */
void scheduler_recompute_seq(scheduler *s, seq *q, double now);

/* Slots in running sequences' blocks that hold no computed token (the tail
 * of each one's last block): vllm_scheduler_stats.num_kv_slots_empty. */
int64_t scheduler_num_empty_slots(const scheduler *s);

/* Sequences in the queues, and seats taken in the running queue. */
int32_t scheduler_num_running(const scheduler *s);
int32_t scheduler_num_waiting(const scheduler *s);
bool scheduler_has_unfinished(const scheduler *s);
/* Anything for the next step output: news or finished requests. */
bool scheduler_has_news(const scheduler *s);

/* Sequences with news (tokens, events, finish) since the last call, linked
 * through news_next; the caller reads them and must call seq_clear_news
 * (request.h) on each (the list is reset here). */
seq *scheduler_take_news(scheduler *s);

/* The next request whose sequences have all finished, or NULL. The request
 * is the caller's again (the scheduler no longer references it). */
request *scheduler_pop_finished(scheduler *s);

/* For tests: iterate the queues. */
const list_node *scheduler_running(const scheduler *s);
const list_node *scheduler_waiting(const scheduler *s);

#endif

/*
 * request.h - a request (what a client added: prompt, sampling params,
 * priority, n) and its sequences (the n samples, the unit the scheduler
 * schedules; vLLM V1's Request).
 *
 * A request with n > 1 is scheduled as its first sequence alone while the
 * prompt is prefilled; seq 0 holds n seats of max_num_seqs meanwhile. When
 * the prompt's last token is computed, n tokens are sampled from that one
 * logits row and the siblings split off (scheduler "fork"): each gets a copy
 * of seq 0's block table with the blocks' ref counts raised, and the last,
 * partially filled block is copied on write when a sequence first writes into
 * it. From then on every sequence lives on its own: it can be preempted,
 * recomputed and finished independently.
 *
 * Every sequence has its own copy of the token ids (prompt + outputs), sized
 * at creation for the prompt and max_tokens, so appending does not allocate
 * on the common path. Draft tokens of speculative decoding (spec/) sit right
 * after the committed ones, tokens[num_tokens .. num_tokens + num_drafts),
 * until the step that scores them accepts some (they become outputs) or
 * rejects them (overwritten). Capacity grows (seq_reserve) when drafts or a
 * caller need more; pointers into tokens are valid until the next append.
 *
 * Lifetime: request_create allocates the request, its sequences and their
 * arrays; request_free releases them (the engine frees a finished request one
 * step after reporting it, since outputs borrow its id and token arrays).
 */
#ifndef VLLM_ENGINE_REQUEST_H
#define VLLM_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "spec/spec_policy.h"
#include "base/list.h"
#include "base/map.h"
#include "engine/block_pool.h"
#include "engine/grammar_cache.h"
#include "sample/sampler.h"
#include "vllm/vllm.h"

typedef enum seq_status {
    SEQ_STATUS_WAITING = 0,          /* in the waiting queue, not yet run */
    SEQ_STATUS_RUNNING,              /* in the running queue */
    SEQ_STATUS_PREEMPTED,            /* back in the waiting queue, blocks freed, to recompute */
    SEQ_STATUS_UNFORKED,             /* n > 1: a sibling that seq 0 has not split off yet */
    SEQ_STATUS_WAITING_FOR_FSM,      /* seq 0 of a request whose grammar is compiling: in no
                                        scheduler queue yet (the engine's list) */
    SEQ_STATUS_WAITING_FOR_REMOTE_KVS, /* seq 0 of a request whose prompt's KV blocks a
                                        TcpConnector is fetching: the engine's list too */
    SEQ_STATUS_FINISHED,             /* finish_reason says why */
} seq_status;

/* Events kept between two step outputs: at most QUEUED, SCHEDULED, PREEMPTED. */
#define SEQ_MAX_EVENTS 4

typedef struct request request;

/* A sequence's state in one KV cache group (model/kv_layout.h), kept by
 * kv_cache_manager. */
typedef struct seq_kv_group {
    int32_t num_skipped;             /* leading table entries released (sliding window): -1 */
    int32_t cache_parent;            /* chained groups: canonical cached block equal to block
                                        num_cached_blocks - 1; -1 before the first, -2 when a
                                        released block broke the chain (nothing more is cached) */
    uint64_t cache_parent_gen;
} seq_kv_group;

typedef struct seq {
    list_node node;                  /* in the scheduler's waiting or running queue */
    request *req;
    int32_t index;                   /* 0..n-1 */
    seq_status status;

    int32_t *tokens;                 /* (cap_tokens) prompt ids, output ids, then drafts */
    int32_t num_tokens, cap_tokens;  /* committed tokens: prompt + outputs */
    int32_t num_drafts;              /* proposed tokens after them, to verify in the next step */
    int32_t num_computed_tokens;     /* tokens whose K/V are in the pool */
    int32_t num_cached_tokens;       /* prompt tokens served by the prefix cache, first schedule */
    bool scheduled_once;
    bool in_flight;                  /* in a batch the engine has not sampled yet (pipeline parallel):
                                        not scheduled again, not preempted until it is back */
    spec_policy_seq spec;            /* speculative decoding: its acceptance record (spec/spec_policy.h) */

    /* KV state, kept by kv_cache_manager: a block table per KV cache group,
     * group g's at block_ids + g * max_blocks (seq_block_table); logical
     * block i of each holds positions [i * block_size, (i + 1) * block_size) */
    int32_t *block_ids;              /* (req->num_kv_groups, max_blocks) the block tables */
    int32_t num_blocks, max_blocks;  /* entries in each table (the same in every group), capacity */
    seq_kv_group *kv_groups;         /* (req->num_kv_groups) */
    block_hash *block_hashes;        /* (max_blocks) chained hashes of full token blocks */
    int32_t num_block_hashes;
    int32_t num_cached_blocks;       /* leading blocks already offered to the prefix cache */

    sampler_rng rng;                 /* seeded by sampler_rng_seed_request */
    st_matcher *matcher;             /* structured outputs: over the committed output; NULL = none */
    int32_t step_slot;               /* engine: this step's first logprob slot, or -1 */
    int32_t prompt_lps_done;         /* prompt positions < this have had their prompt logprobs
                                        reported (kept across preemption) */
    int32_t step_prompt_lps;         /* engine: this step's first prompt-logprob slot, or -1 */
    int32_t step_prompt_lps_start, step_num_prompt_lps; /* its prompt positions */

    /* news for the next step output, kept by the scheduler */
    struct seq *news_next;
    bool in_news;
    int32_t num_events;
    vllm_event events[SEQ_MAX_EVENTS];
    int32_t num_new_output;          /* output tokens appended since the last step output */
    vllm_finish_reason finish_reason;
    int32_t stop_token_id;           /* -1 unless a stop token / EOS finished it */
} seq;

struct request {
    list_node node;                  /* on the scheduler's finished list, then the engine's */
    map_node by_id;                  /* engine: in its request-id map while unfinished */
    bool in_map;
    char *id;
    int32_t num_prompt_tokens;
    vllm_sampling_params params;     /* its lists point into owned_ids */
    int32_t *owned_ids;
    int32_t max_tokens;              /* resolved from params (-1 = up to max_model_len) */
    int32_t priority;
    double arrival_time;
    uint64_t serial;                 /* order of arrival at the engine: the last tie-break */
    block_pool_salt *salt;           /* NULL = none (one reference) */
    int32_t lora_id;                 /* 0 = none; part of the first block's cache key */
    struct lora_adapter *lora;       /* its adapter (one reference, released by request_free), or NULL */
    struct lora_table *loras;        /* the table lora belongs to */
    int32_t block_size;              /* of the KV pool the block tables index */
    int32_t num_kv_groups;           /* block tables per sequence */
    int32_t n;
    bool forked;                     /* siblings split off seq 0 (always true for n == 1) */
    int32_t num_unfinished;          /* sequences not yet finished */
    seq *seqs;                       /* (n) */
    /* structured outputs (NULL = none): the compiled grammar's cache entry
     * (one reference, released by request_free), the cache, the time by which
     * it must be ready; error: the message of a finish with ERROR */
    struct kv_connector_fetch *kv_fetch; /* WAITING_FOR_REMOTE_KVS: the fetch (engine's) */
    grammar_cache_entry *grammar;
    grammar_cache *grammars;
    double fsm_deadline;
    char *error;
};

/* Allocates a request and its n sequences, each with room for the prompt
 * plus its max tokens (capped by max_model_len) and the blocks for that in
 * num_kv_groups block tables (>= 1). Sequence
 * i's generator is seeded by sampler_rng_seed_request (params.seed + i, or
 * default_seed, the request id and i). Inputs are assumed validated
 * (engine_add_request does that); only allocation can fail. */
vllm_status request_create(const char *id, const int32_t *prompt_ids, int32_t num_prompt_ids,
                           const vllm_sampling_params *sp, const vllm_request_opts *opts,
                           int32_t max_model_len, int32_t block_size, int32_t num_kv_groups,
                           uint64_t default_seed, uint64_t serial, request **out);
void request_free(request *r);

/* Gives every sequence its matcher once r->grammar is READY: seq 0 a new
 * one, the others forks of it (n > 1; none has output yet). */
vllm_status request_attach_matchers(request *r);

/* Group g's block table of q. */
static inline int32_t *seq_block_table(const seq *q, int32_t g) {
    return q->block_ids + (size_t)g * (size_t)q->max_blocks;
}

/* Output tokens of a sequence so far. */
static inline int32_t seq_num_output_tokens(const seq *q) {
    return q->num_tokens - q->req->num_prompt_tokens;
}

/* Seats of max_num_seqs this sequence holds: n for seq 0 before the fork. */
static inline int32_t seq_num_seats(const seq *q) { return q->req->forked ? 1 : q->req->n; }

/* Scheduling order under the priority policy: (priority, arrival, serial,
 * index) ascending; < 0 when a goes first. FCFS drops priority. */
int seq_compare(const seq *a, const seq *b, bool use_priority);

/* Makes room in q's token array and block tables for num_tokens tokens
 * (committed and drafts). On VLLM_ERR_NOMEM q is unchanged but for spare
 * capacity. */
vllm_status seq_reserve(seq *q, int32_t num_tokens);

/* Forgets q's news once a step output has reported it: events, new-token
 * count, its place in the scheduler's news list. */
void seq_clear_news(seq *q);

/* Appends a committed token (growing if needed) and counts it as news. */
vllm_status seq_append_token(seq *q, int32_t token_id);

/* vLLM's check_stop, after a token was appended: past min_tokens, STOP for
 * EOS (unless ignore_eos) or a stop_token_id (the token stays in the output
 * and *stop_token_id names it); else LENGTH when num_tokens reaches
 * max_model_len or the outputs reach max_tokens (so an EOS that is also
 * the last allowed token reads "stop", as in vLLM). NONE otherwise. */
vllm_finish_reason seq_check_stop(const seq *q, int32_t max_model_len, const int32_t *eos_ids,
                                  int32_t num_eos, int32_t *stop_token_id);

#endif

/*
 * spec.h - speculative decoding's plug points in the engine core (vLLM's
 * vllm/v1/spec_decode and the rejection sampler's place in the step).
 *
 * After each step, the engine asks the proposer for up to k draft tokens for
 * every running sequence that is decoding (its prompt computed, one token
 * per step otherwise). The drafts ride on the sequence (request.h) into the
 * next step, which schedules them like any token (KV slots in its blocks)
 * and scores k + 1 positions in one forward (model/step_batch.h). The
 * verifier then turns those rows into committed tokens: the accepted drafts
 * and one token of its own (sample/sampler.h, sampler_sample_batch: exact,
 * the tokens one-token decoding gives). The scheduler commits them, computes
 * what the accepted tokens cover, and gives back the blocks of the rejected
 * ones, which the prefix cache never sees.
 *
 * A proposer is anything that guesses the continuation of a token sequence:
 * n-gram prompt lookup, a small draft model, EAGLE/Medusa heads.
 */
#ifndef VLLM_SPEC_SPEC_H
#define VLLM_SPEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "sample/sampler.h"
#include "spec/spec_policy.h"
#include "vllm/status.h"

/* What a proposer sees of one sequence; borrowed for the call. */
typedef struct spec_seq_view {
    const char *request_id;
    int32_t index;                   /* 0..n-1 */
    const int32_t *tokens;           /* (num_tokens): prompt then outputs */
    int32_t num_tokens;
    int32_t num_prompt;
    const vllm_sampling_params *params; /* the request's (a sampling draft uses them for its q) */
    const sampler_rng *rng;          /* the sequence's generator, read only: a sampling draft
                                        seeds its own from it, so seeded requests repeat */
} spec_seq_view;

/* One sequence's part of a batched proposal (spec_proposer.propose_batch). */
typedef struct spec_request {
    spec_seq_view view;
    int32_t max_drafts;              /* >= 1 */
    int32_t *drafts;                 /* (max_drafts) out */
    int32_t num_drafts;              /* out: how many (0: none) */
    void *owner;                     /* the caller's */
} spec_request;

typedef struct spec_proposer {
    /* Writes up to max_drafts token ids (>= 1) that may follow the
     * sequence's tokens to drafts and returns how many (0: none). Ids must
     * be in the vocabulary. */
    int32_t (*propose)(void *ud, const spec_seq_view *q, int32_t max_drafts, int32_t *drafts);
    /* Optional: propose for n sequences at once (a draft model runs one
     * forward per draft position for all of them), the same drafts each
     * would get from propose alone. */
    void (*propose_batch)(void *ud, spec_request *reqs, int32_t n);
    /* Optional: the sequence ended (finished or aborted); a proposer that
     * keeps per-sequence state (a draft model's KV) frees it here. */
    void (*release)(void *ud, const char *request_id, int32_t index);
    /* Optional: the distributions q the sequence's drafts were sampled from
     * ((num_drafts, vocab) rows, row j = q of draft j), valid until the next
     * propose or release; NULL when the drafts are one-hot (n-gram, greedy)
     * or are not the last ones proposed. With q, the verifier is vLLM's
     * rejection sampler (sample_seq.draft_probs); without, it is exact. */
    const float *(*draft_probs)(void *ud, const char *request_id, int32_t index, const int32_t *drafts,
                                int32_t num_drafts);
    void *ud;
} spec_proposer;

/* The step's sampling when drafts are scored: fills each sequence's
 * out_tokens / num_out (accepted drafts, then one token) and out_results'
 * logprobs when asked, as sampler_sample_batch does. */
typedef vllm_status (*spec_verify_fn)(void *ud, sample_seq *seqs, int32_t num_seqs);

typedef struct spec_config {
    int32_t num_speculative_tokens;  /* k: drafts per sequence per step at most (0 = off) */
    int32_t disable_by_batch_size;   /* no drafts while this many sequences run (0 = never) */
    bool adaptive;                   /* k per sequence and step from spec/spec_policy.h (else always k) */
    spec_policy_cost cost;           /* the adaptive k's step cost model; zeroed: the target's alone
                                      * (engine_set_spec fills it), as for a proposer without forwards */
    spec_proposer proposer;
    spec_verify_fn verify;           /* NULL: sampler_sample_batch */
    void *verify_ud;
} spec_config;

#endif

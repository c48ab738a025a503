/*
 * draft_model.h - speculative decoding with a small draft model (method
 * "draft_model": `--speculative-config '{"method":"draft_model","model":PATH,
 * "num_speculative_tokens":K}'`): a second, smaller model with the same
 * vocabulary guesses the next K tokens greedily, and the target verifies them
 * in one forward (spec/spec.h, sample/sampler.h).
 *
 * The draft keeps its own paged KV cache (its own runner and block pool, the
 * target's block size and KV element type), one block table per sequence,
 * keyed by request id and index. A proposal catches the draft's cache up with
 * the sequence (the whole prompt the first time; afterwards the tokens the
 * target committed since, less whatever the draft already holds: its own
 * drafts the target accepted are kept), then decodes K - 1 more tokens one at
 * a time, each the argmax of the draft's logits. Positions past what the
 * target committed are simply overwritten next time, so rejected drafts cost
 * nothing to undo. A sequence's blocks go back to the pool when the engine
 * releases it (spec_proposer.release) or, if the pool runs dry, that
 * sequence gets no drafts this step (never an error).
 *
 * Verification (draft_token_acceptance_method): "rejection_sampler", vLLM's
 * and the default: for a request that samples, each draft is drawn from q,
 * the draft's distribution under the request's sampling parameters
 * (temperature, top-k/p, min-p, penalties, logit_bias; sampler_probs) with
 * a generator seeded from the sequence's own (so a seeded request repeats),
 * and q goes to the verifier (spec_proposer.draft_probs), which accepts with
 * probability min(1, p/q) (sample/sampler.h); greedy requests get argmax
 * drafts and exact verification. "exact": argmax drafts always, verified by
 * sampler_sample_batch: the committed tokens are the ones decoding without a
 * draft gives, sample for sample, at a lower acceptance for sampled
 * requests.
 *
 * Batching: the engine asks for every decoding sequence at once
 * (spec_proposer.propose_batch), and the draft runs one forward per draft
 * position for all of them (up to 64 sequences per forward): the first
 * catches each cache up with its sequence, each later one feeds every
 * sequence's last draft. A sequence's drafts do not depend on the batch
 * (the runner's logits are batch invariant). Each forward runs on the
 * engine thread between target steps, with the draft's own thread pool; a
 * draft model is worth it when it is several times cheaper than the target.
 */
#ifndef VLLM_SPEC_DRAFT_MODEL_H
#define VLLM_SPEC_DRAFT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kv_dtype.h"
#include "spec/spec.h"
#include "vllm/status.h"

typedef struct draft_model draft_model;

typedef struct draft_model_config {
    const char *path;                /* the draft model (directory or .gguf) */
    int32_t vocab_size;              /* the target's: the draft's must match */
    int32_t max_model_len;           /* the target's */
    int32_t block_size;
    int32_t num_blocks;              /* the draft's KV pool */
    kv_dtype kv_cache_dtype;
    int32_t num_threads;             /* 0 = online CPUs */
    struct threadpool *pool;         /* borrowed: the target's workers (NULL: its own of num_threads) */
    bool sample;                     /* sampled requests: draw drafts from q (vLLM's rejection sampler
                                        verifies them); false: argmax drafts, exact verification */
} draft_model_config;

/* Loads the draft model; the error names the path, a vocabulary that
 * differs from the target's, or an architecture the draft cannot be
 * (sliding-window layers). */
vllm_status draft_model_create(const draft_model_config *cfg, draft_model **out);
void draft_model_free(draft_model *d);

/* The proposer the engine calls (spec/spec.h); d is borrowed. */
spec_proposer draft_model_as_proposer(draft_model *d);

/* The draft's weights (for the adaptive k's cost model). */
const struct model *draft_model_model(const draft_model *d);

#endif

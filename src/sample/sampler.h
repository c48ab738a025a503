/*
 * sampler.h - from logits to a token, per request, as vLLM's V1 Sampler does.
 *
 * Order (vLLM V1, default logprobs_mode raw_logprobs):
 *   1. logprobs, if asked for, from log_softmax of the raw logits;
 *   1a. allowed_token_ids: every other token -inf; bad_words: the last token
 *      of a bad sequence -inf when the output ends with the rest of it;
 *   2. min_tokens: EOS ids and stop_token_ids get -inf while fewer than
 *      min_tokens tokens have been generated (even with ignore_eos, as vLLM);
 *   3. logit_bias added;
 *   4. repetition penalty (prompt + output tokens: positive logits divided,
 *      others multiplied), then frequency (x output count) and presence
 *      (x seen in output) penalties subtracted;
 *   5. greedy (temperature 0): argmax, ties to the lowest id - stop here;
 *   6. temperature (0 < t < 0.01 is raised to 0.01, as vLLM does), min_p,
 *      top_k (ties with the k-th value kept), top_p (keep a token while the
 *      mass strictly above it is < top_p), then one draw from what is left.
 *
 * Randomness: every sequence has its own generator (xoshiro256**), seeded
 * from its request's seed, so the same seed gives the same tokens whatever
 * else shares the batch. A random draw consumes exactly one uniform.
 *
 * Cost: no allocation (the caller passes scratch); greedy is one pass over the
 * vocabulary; top_k/top_p use selection (expected O(vocab)), never a full sort.
 */
#ifndef VLLM_SAMPLE_SAMPLER_H
#define VLLM_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "vllm/vllm.h"

/* Per-sequence generator state (xoshiro256**; 32 bytes, embedded by value). */
typedef struct sampler_rng { uint64_t s[4]; } sampler_rng;

/* Seeds from one 64-bit value (expanded with splitmix64). */
void sampler_rng_seed(sampler_rng *rng, uint64_t seed);
/* Seeds sequence `index` of a request: from p->seed + index when the request
 * has a seed (vLLM's n > 1 children), else from engine_seed, request_id and
 * index, so unseeded requests differ from each other but a run is repeatable. */
void sampler_rng_seed_request(sampler_rng *rng, const vllm_sampling_params *p,
                              uint64_t engine_seed, const char *request_id, int32_t index);
uint64_t sampler_rng_next(sampler_rng *rng);
/* Uniform in [0, 1), 53 random bits. */
double sampler_rng_uniform(sampler_rng *rng);

/* The temperature vLLM actually uses (0 < t < 0.01 becomes 0.01). */
float sampler_effective_temperature(float temperature);
/* True when the request samples greedily (effective temperature < 1e-5). */
bool sampler_is_greedy(const vllm_sampling_params *p);

/* Checks what needs the vocabulary: logit_bias ids must lie in [0, vocab_size)
 * (vLLM's message). Call after vllm_sampling_params_validate. */
vllm_status sampler_check_vocab(const vllm_sampling_params *p, int32_t vocab_size);

typedef struct sample_logprob { int32_t token_id; float logprob; int32_t rank; } sample_logprob;

typedef struct sample_result {
    int32_t token_id;
    float logprob;                   /* raw logprob of token_id (if params->logprobs >= 0) */
    int32_t rank;                    /* 1 + number of other tokens with raw logit >= its own */
    int32_t num_top;                 /* entries filled in top[]: min(params->logprobs, vocab) */
    sample_logprob *top;             /* caller-provided, capacity >= params->logprobs;
                                        descending, ties to the lower id, rank = position + 1 */
} sample_result;

/* History a request's penalties and min_tokens look at (borrowed). Ids outside
 * [0, vocab_size) are ignored. */
typedef struct sample_history {
    const int32_t *prompt_ids; int32_t num_prompt;
    const int32_t *output_ids; int32_t num_output;
} sample_history;

/* Bytes of scratch sampler_sample / sampler_probs need: 12 * vocab_size + 8
 * (raw logits copy + (value, id) candidate pairs). Any malloc'd block works
 * (8-byte aligned). One per thread that samples; reused across calls. */
size_t sampler_scratch_bytes(int32_t vocab_size);

/* Samples one token from logits (vocab_size floats, modified in place: they are
 * scratch too). eos_ids: every EOS id of the model (tokenizer's and
 * generation_config's), passed even with ignore_eos: min_tokens masks them,
 * with stop_token_ids, as vLLM's all_stop_token_ids. h may be NULL (no
 * history). out->top must have room for params->logprobs entries when that is
 * > 0 (NULL: no top list). Reentrant: each thread passes its own scratch and
 * each sequence its own rng. Fails (VLLM_ERR_INVALID) only when no token is
 * left with a finite logit. */
vllm_status sampler_sample(const vllm_sampling_params *p, const sample_history *h,
                           const int32_t *eos_ids, int32_t num_eos, float *logits,
                           int32_t vocab_size, sampler_rng *rng, void *scratch,
                           sample_result *out);

/* The raw logprob and rank of token_id under logits (vocab_size floats, read
 * only), and the top min(num_top, vocab_size) in out->top (when not NULL),
 * exactly as sampler_sample reports a sampled token's: vLLM's raw_logprobs.
 * What prompt logprobs are made of. */
void sampler_logprobs(const float *logits, int32_t vocab_size, int32_t token_id, int32_t num_top,
                      sample_result *out);

/* The distribution sampler_sample draws from, after every step above:
 * probs (vocab_size) sums to 1; one-hot at the argmax when greedy. Same
 * arguments and in-place use of logits as sampler_sample. For tests and
 * diagnostics (e.g. comparing with a reference), not the hot path. */
vllm_status sampler_probs(const vllm_sampling_params *p, const sample_history *h,
                          const int32_t *eos_ids, int32_t num_eos, float *logits,
                          int32_t vocab_size, void *scratch, float *probs);

/* ---- a step's sampling, batched ------------------------------------------ */

/* One sequence's draws in a step. Its logits rows belong to positions
 * num_tokens - 1 .. num_tokens - 1 + num_drafts: row j is the distribution
 * of the token after tokens[0 .. num_tokens + j), i.e. after the drafts
 * before it. Rows are sampled in order with the steps above (the history
 * includes the drafts accepted so far): while row j's token equals draft j,
 * the draft is accepted and row j + 1 is sampled; the first token that
 * differs, or the one after the last draft, ends the sequence's turn. So a
 * step commits the accepted drafts plus one token, the generator makes
 * exactly one draw per committed token, and the tokens are exactly those
 * that decoding one token per step would give (greedy or seeded): the
 * drafts only save forwards. (vLLM's rejection sampler accepts by
 * probability ratios when a draft model supplies its own distribution;
 * that is a second verifier with this same shape.)
 *
 * Grammar masks: allowed, when set, holds one bitmask per row over the
 * vocabulary (bit i of word i / 32 set = token i may be sampled); masked
 * tokens get -inf before anything else (vLLM's apply_grammar_bitmask). */
typedef struct sample_seq {
    /* in */
    const vllm_sampling_params *params;
    sampler_rng *rng;                /* the sequence's own, advanced by each draw */
    const int32_t *tokens;           /* prompt, outputs, then num_drafts drafts */
    int32_t num_prompt;
    int32_t num_tokens;              /* prompt + outputs (committed) */
    int32_t num_drafts;
    float *logits;                   /* (num_drafts + 1, vocab); rows are scratch unless shared_logits */
    bool shared_logits;              /* another sample_seq samples the same rows (n > 1): work on a copy */
    const uint32_t *allowed;         /* (num_drafts + 1, (vocab + 31) / 32) or NULL */
    const float *draft_probs;        /* (num_drafts, vocab): q each draft was sampled from, or NULL
                                        (exact verification, above); see below */
    /* out */
    int32_t *out_tokens;             /* (num_drafts + 1): accepted drafts, then the sampled token */
    sample_result *out_results;      /* (num_drafts + 1) or NULL; each .top caller-provided as in
                                        sampler_sample */
    int32_t num_out;                 /* 1 .. num_drafts + 1 */
    vllm_status rc;
} sample_seq;

/* With draft_probs (a draft model that samples, spec/draft_model.h) and a
 * request that is not greedy, the rows are verified by vLLM's rejection
 * sampler instead: p_j is row j's distribution after every step above (the
 * one sampler_probs gives, history including the drafts accepted so far);
 * draft x_j is accepted iff q_j(x_j) > 0, p_j(x_j) > 0 and p_j(x_j) >= u q_j(x_j) for a
 * uniform u from the sequence's generator; at the first rejection one token
 * is drawn (a second uniform) from normalize(max(0, p_j - q_j)) (from p_j if
 * that is all zero) and the turn ends; when every draft is accepted the
 * last row gives the bonus token as sampler_sample does. The committed
 * tokens follow the target's distribution (not sample for sample the
 * tokens of one-token decoding); a seeded request gives the same tokens
 * every time its drafts are the same. Greedy requests stay exact. */

/* Per-engine sampling state: scratch per thread and the threads to share
 * the rows with (borrowed; NULL = the calling thread only). */
typedef struct sampler sampler;
vllm_status sampler_create(int32_t vocab_size, const int32_t *eos_ids, int32_t num_eos, threadpool *pool,
                           sampler **out);
void sampler_free(sampler *s);

/* Samples every sequence of a step (a big batch shares the rows out over the
 * pool; each sequence's result depends only on its own rows, history and
 * generator). Fails with the first failing sequence's error (each one's rc
 * says which). */
vllm_status sampler_sample_batch(sampler *s, sample_seq *seqs, int32_t num_seqs);

/* Testing: caps the partition rounds of top_k/top_p selection before they
 * fall back to sorting (0 = default, 1 = sort at once), so tests can check
 * the fast path against the sorted one. Process-wide; not for production. */
void sampler_set_select_depth(int32_t depth);

#endif

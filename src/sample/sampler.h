/*
 * sampler.h - from logits to a token, per request, as vLLM's V1 Sampler does.
 *
 * Order (vLLM V1, default logprobs_mode raw_logprobs):
 *   1. logprobs, if asked for, from log_softmax of the raw logits;
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

/* The distribution sampler_sample draws from, after every step above:
 * probs (vocab_size) sums to 1; one-hot at the argmax when greedy. Same
 * arguments and in-place use of logits as sampler_sample. For tests and
 * diagnostics (e.g. comparing with a reference), not the hot path. */
vllm_status sampler_probs(const vllm_sampling_params *p, const sample_history *h,
                          const int32_t *eos_ids, int32_t num_eos, float *logits,
                          int32_t vocab_size, void *scratch, float *probs);

/* Testing: caps the partition rounds of top_k/top_p selection before they
 * fall back to sorting (0 = default, 1 = sort at once), so tests can check
 * the fast path against the sorted one. Process-wide; not for production. */
void sampler_set_select_depth(int32_t depth);

#endif

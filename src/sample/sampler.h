/*
 * sampler.h - from logits to a token, per request, as vLLM's Sampler does.
 *
 * Order (vLLM V1): logits processors that change raw logits first (min_tokens
 * masks EOS/stop ids, logit_bias, allowed/bad tokens), then repetition,
 * presence and frequency penalties, then temperature, min_p, top_k, top_p,
 * then the draw. temperature < 1e-5 is greedy (argmax; ties to the lowest id).
 * Logprobs (vLLM's default raw_logprobs) are log_softmax of the raw logits,
 * before any processing: the sampled token's plus the top-N.
 *
 * Randomness: every request has its own generator state, seeded from its seed
 * (or from the engine's seed and the request id when none is given), so the
 * same seed gives the same tokens whatever else shares the batch.
 */
#ifndef VLLM_SAMPLE_SAMPLER_H
#define VLLM_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm/vllm.h"

/* Per-request generator (xoshiro256** or similar; 32 bytes). */
typedef struct sampler_rng { uint64_t s[4]; } sampler_rng;
void sampler_rng_seed(sampler_rng *rng, uint64_t seed);
/* Uniform in [0, 1). */
double sampler_rng_uniform(sampler_rng *rng);

typedef struct sample_logprob { int32_t token_id; float logprob; int32_t rank; } sample_logprob;

typedef struct sample_result {
    int32_t token_id;
    float logprob;                   /* raw logprob of token_id */
    int32_t rank;                    /* 1-based rank of token_id among raw logits */
    int32_t num_top;                 /* entries filled in top[] (= params->logprobs) */
    sample_logprob *top;             /* caller-provided, capacity >= params->logprobs */
} sample_result;

/* History a request's penalties look at. */
typedef struct sample_history {
    const int32_t *prompt_ids; int32_t num_prompt;
    const int32_t *output_ids; int32_t num_output;
} sample_history;

/* Samples one token from logits (vocab_size floats, modified in place: it is
 * scratch). scratch must hold 2 * vocab_size floats + vocab_size int32s
 * (sampler_scratch_bytes). eos ids are those of the model, for min_tokens. */
size_t sampler_scratch_bytes(int32_t vocab_size);
vllm_status sampler_sample(const vllm_sampling_params *p, const sample_history *h,
                           const int32_t *eos_ids, int32_t num_eos, float *logits,
                           int32_t vocab_size, sampler_rng *rng, void *scratch,
                           sample_result *out);

#endif

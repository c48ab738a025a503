/*
 * vllm.h - the public C API of vllm.c: offline inference, the analogue of
 * vLLM's `LLM` class and `SamplingParams`.
 *
 *     vllm_engine_args args;
 *     vllm_engine_args_init(&args);
 *     args.model = "models/stories260K";
 *     vllm_engine *e;
 *     if (vllm_engine_create(&args, &e) != VLLM_OK) die(vllm_errmsg());
 *     vllm_sampling_params sp;
 *     vllm_sampling_params_init(&sp);          // vLLM's defaults
 *     vllm_engine_add_request(e, "req-0", prompt_ids, n, &sp, 0, NULL);
 *     while (vllm_engine_has_unfinished(e)) {
 *         const vllm_step_output *out;
 *         vllm_engine_step(e, &out);           // borrowed until the next step
 *         ...
 *     }
 *     vllm_engine_free(e);
 *
 * Everything here is token ids: text, chat templates and stop strings belong to
 * the front end (the CLI's generate, the server), which detokenizes outputs.
 */
#ifndef VLLM_VLLM_H
#define VLLM_VLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

#define VLLM_MAX_STOP_TOKEN_IDS 32
#define VLLM_MAX_LOGIT_BIAS 64

/* SamplingParams with vLLM's defaults (vllm_sampling_params_init). */
typedef struct vllm_sampling_params {
    int32_t n;                       /* 1 */
    float temperature;               /* 1.0; < 1e-5 = greedy */
    float top_p;                     /* 1.0, in (0, 1] */
    int32_t top_k;                   /* 0 (or -1) = off */
    float min_p;                     /* 0.0 */
    float presence_penalty;          /* 0.0, [-2, 2] */
    float frequency_penalty;         /* 0.0, [-2, 2] */
    float repetition_penalty;        /* 1.0, > 0 */
    bool has_seed;
    uint64_t seed;
    int32_t max_tokens;              /* 16; -1 = up to max_model_len */
    int32_t min_tokens;              /* 0 */
    bool ignore_eos;                 /* false */
    int32_t stop_token_ids[VLLM_MAX_STOP_TOKEN_IDS];
    int32_t num_stop_token_ids;
    int32_t logprobs;                /* -1 = none, else top-N (0 = sampled only) */
    int32_t num_logit_bias;
    int32_t logit_bias_ids[VLLM_MAX_LOGIT_BIAS];
    float logit_bias_values[VLLM_MAX_LOGIT_BIAS];
} vllm_sampling_params;

void vllm_sampling_params_init(vllm_sampling_params *p);
/* Checks ranges as vLLM does; the message names the field and the value. */
vllm_status vllm_sampling_params_validate(const vllm_sampling_params *p);

#endif

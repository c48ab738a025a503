/*
 * sampling_params.c - vLLM's SamplingParams defaults and range checks.
 *
 * The checks run in the order of vLLM's SamplingParams._verify_args, with its
 * messages, so the first complaint a client sees is the one vLLM would give
 * ("temperature must be non-negative, got -1.0."). Floats are printed the way
 * Python prints them (shortest round-trip, "-1.0" not "-1"). Beyond vLLM we
 * refuse non-finite floats (JSON cannot carry them; a C caller can) and the
 * array counts our fixed-size struct can hold. The logprobs cap is vLLM's
 * --max-logprobs default (VLLM_MAX_LOGPROBS); out-of-vocab logit_bias ids are
 * checked by sampler_check_vocab, which knows the vocabulary.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "sample/sampler.h"
#include "vllm/vllm.h"

void vllm_sampling_params_init(vllm_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->min_p = 0.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = 16;
    p->min_tokens = 0;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
}

/* Python's repr of a float: the shortest digits that read back to the same
 * float, with ".0" on integral values. buf holds at least 32 bytes. */
static const char *fmt_float(char *buf, size_t size, float v) {
    if (isnan(v)) return "nan";
    if (isinf(v)) return v > 0 ? "inf" : "-inf";
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, size, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", size - strlen(buf) - 1);
    return buf;
}

vllm_status vllm_sampling_params_validate(const vllm_sampling_params *p) {
    char b[32];
    if (p->n < 1) return vllm_error(VLLM_ERR_INVALID, "n must be at least 1, got %d.", p->n);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return vllm_error(VLLM_ERR_INVALID, "presence_penalty must be in [-2, 2], got %s.",
                          fmt_float(b, sizeof b, p->presence_penalty));
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return vllm_error(VLLM_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %s.",
                          fmt_float(b, sizeof b, p->frequency_penalty));
    if (!isfinite(p->repetition_penalty))
        return vllm_error(VLLM_ERR_INVALID, "repetition_penalty must be a finite number, got %s.",
                          fmt_float(b, sizeof b, p->repetition_penalty));
    if (p->repetition_penalty <= 0.0f)
        return vllm_error(VLLM_ERR_INVALID, "repetition_penalty must be greater than zero, got %s.",
                          fmt_float(b, sizeof b, p->repetition_penalty));
    if (!isfinite(p->temperature))
        return vllm_error(VLLM_ERR_INVALID, "temperature must be a finite number, got %s.",
                          fmt_float(b, sizeof b, p->temperature));
    if (p->temperature < 0.0f)
        return vllm_error(VLLM_ERR_INVALID, "temperature must be non-negative, got %s.",
                          fmt_float(b, sizeof b, p->temperature));
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return vllm_error(VLLM_ERR_INVALID, "top_p must be in (0, 1], got %s.",
                          fmt_float(b, sizeof b, p->top_p));
    if (p->top_k < -1)
        return vllm_error(VLLM_ERR_INVALID, "top_k must be 0 (disable), or at least 1, got %d.", p->top_k);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return vllm_error(VLLM_ERR_INVALID, "min_p must be in [0, 1], got %s.",
                          fmt_float(b, sizeof b, p->min_p));
    if (p->max_tokens != -1 && p->max_tokens < 1)
        return vllm_error(VLLM_ERR_INVALID, "max_tokens must be at least 1, got %d.", p->max_tokens);
    if (p->min_tokens < 0)
        return vllm_error(VLLM_ERR_INVALID, "min_tokens must be greater than or equal to 0, got %d.",
                          p->min_tokens);
    if (p->max_tokens != -1 && p->min_tokens > p->max_tokens)
        return vllm_error(VLLM_ERR_INVALID, "min_tokens must be less than or equal to max_tokens=%d, got %d.",
                          p->max_tokens, p->min_tokens);
    if (p->logprobs < -1)
        return vllm_error(VLLM_ERR_INVALID, "logprobs must be non-negative, got %d.", p->logprobs);
    if (p->num_stop_token_ids < 0 || p->num_stop_token_ids > VLLM_MAX_STOP_TOKEN_IDS)
        return vllm_error(VLLM_ERR_INVALID, "stop_token_ids: at most %d ids are supported, got %d.",
                          VLLM_MAX_STOP_TOKEN_IDS, p->num_stop_token_ids);
    if (p->num_logit_bias < 0 || p->num_logit_bias > VLLM_MAX_LOGIT_BIAS)
        return vllm_error(VLLM_ERR_INVALID, "logit_bias: at most %d entries are supported, got %d.",
                          VLLM_MAX_LOGIT_BIAS, p->num_logit_bias);
    for (int32_t i = 0; i < p->num_logit_bias; i++)
        if (!isfinite(p->logit_bias_values[i]))
            return vllm_error(VLLM_ERR_INVALID, "logit_bias for token %d must be a finite number, got %s.",
                              p->logit_bias_ids[i], fmt_float(b, sizeof b, p->logit_bias_values[i]));
    /* Greedy is decided after vLLM raises 0 < t < 0.01 to 0.01: only t = 0 is greedy. */
    if (sampler_is_greedy(p) && p->n > 1)
        return vllm_error(VLLM_ERR_INVALID, "n must be 1 when using greedy sampling, got %d.", p->n);
    if (p->logprobs > VLLM_MAX_LOGPROBS)
        return vllm_error(VLLM_ERR_INVALID,
                          "Requested sample logprobs of %d, which is greater than max allowed: %d",
                          p->logprobs, VLLM_MAX_LOGPROBS);
    if (p->num_allowed_token_ids < 0 || (p->num_allowed_token_ids > 0 && !p->allowed_token_ids))
        return vllm_error(VLLM_ERR_INVALID, "allowed_token_ids: %d ids without a list", p->num_allowed_token_ids);
    if (p->num_bad_words < 0 || (p->num_bad_words > 0 && (!p->bad_words_ids || !p->bad_words_lens)))
        return vllm_error(VLLM_ERR_INVALID, "bad_words: %d token sequences without the lists", p->num_bad_words);
    for (int32_t i = 0; i < p->num_bad_words; i++)
        if (p->bad_words_lens[i] < 1)
            return vllm_error(VLLM_ERR_INVALID, "bad_words: token sequence %d is empty", i);
    if (p->prompt_logprobs < -1)
        return vllm_error(VLLM_ERR_INVALID, "prompt_logprobs must be non-negative, got %d.", p->prompt_logprobs);
    if (p->prompt_logprobs > VLLM_MAX_LOGPROBS)
        return vllm_error(VLLM_ERR_INVALID,
                          "Requested prompt logprobs of %d, which is greater than max allowed: %d",
                          p->prompt_logprobs, VLLM_MAX_LOGPROBS);
    return VLLM_OK;
}

/*
 * bench_dataset.h - vLLM's "random" benchmark dataset over token ids.
 *
 * As vLLM's RandomDataset: prompt i is prefix ++ inner_i, where the shared
 * prefix is prefix_len random tokens and inner_i has a length drawn uniformly
 * from [floor(L(1-r)), ceil(L(1+r))] (L = input_len, r = range_ratio) and is
 * the run (offset_i + i + j) mod V for a random offset_i; the output length is
 * drawn the same way from output_len (at least 1). Tokens are taken from
 * `allowed` (the vocabulary without special tokens, as vLLM does since
 * v0.10), so V = num_allowed. The prompts stay token ids: our engine and the
 * completions API take ids, so the prompt length is exact, where vLLM decodes
 * to text and re-tokenizes.
 */
#ifndef VLLM_CLI_BENCH_DATASET_H
#define VLLM_CLI_BENCH_DATASET_H

#include <stdint.h>

#include "cli/bench_rng.h"
#include "vllm/status.h"

typedef struct bench_request {
    int32_t *prompt;                 /* (prompt_len) token ids, owned */
    int32_t prompt_len;
    int32_t output_len;              /* expected (max_tokens) */
} bench_request;

typedef struct bench_random_config {
    int32_t num_prompts;
    int32_t input_len;
    int32_t output_len;
    int32_t prefix_len;
    double range_ratio;              /* [0, 1) */
} bench_random_config;

/* Fills *out with num_prompts requests (free with bench_dataset_free).
 * VLLM_ERR_INVALID names the bad field. */
vllm_status bench_dataset_random(bench_rng *rng, const bench_random_config *cfg, const int32_t *allowed,
                                 int32_t num_allowed, bench_request **out);
void bench_dataset_free(bench_request *reqs, int32_t n);

#endif

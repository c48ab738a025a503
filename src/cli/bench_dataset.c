/* bench_dataset.c - see bench_dataset.h. */
#include "cli/bench_dataset.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

void bench_dataset_free(bench_request *reqs, int32_t n) {
    if (!reqs) return;
    for (int32_t i = 0; i < n; i++) free(reqs[i].prompt);
    free(reqs);
}

vllm_status bench_dataset_random(bench_rng *rng, const bench_random_config *cfg, const int32_t *allowed,
                                 int32_t num_allowed, bench_request **out) {
    *out = NULL;
    double r = cfg->range_ratio;
    if (cfg->num_prompts < 1) return vllm_error(VLLM_ERR_INVALID, "num_prompts must be >= 1, got %d", cfg->num_prompts);
    if (cfg->input_len < 0 || cfg->prefix_len < 0 || cfg->output_len < 1)
        return vllm_error(VLLM_ERR_INVALID, "random dataset: lengths must be >= 0 (output >= 1), got input %d, "
                          "prefix %d, output %d", cfg->input_len, cfg->prefix_len, cfg->output_len);
    if (!(r >= 0 && r < 1))
        return vllm_error(VLLM_ERR_INVALID, "random_range_ratio must be in [0, 1), got %g", r);
    if (num_allowed < 1) return vllm_error(VLLM_ERR_INVALID, "random dataset: no non-special token ids");
    int64_t in_lo = (int64_t)floor(cfg->input_len * (1 - r)), in_hi = (int64_t)ceil(cfg->input_len * (1 + r));
    int64_t out_lo = (int64_t)floor(cfg->output_len * (1 - r)), out_hi = (int64_t)ceil(cfg->output_len * (1 + r));
    if (out_lo < 1) out_lo = 1;
    if (in_hi + cfg->prefix_len > INT32_MAX / 2)
        return vllm_error(VLLM_ERR_INVALID, "random dataset: input length %d too large", cfg->input_len);

    bench_request *reqs = calloc((size_t)cfg->num_prompts, sizeof *reqs);
    int32_t *prefix = malloc(((size_t)cfg->prefix_len + 1) * sizeof *prefix);
    if (!reqs || !prefix) goto nomem;
    /* draw order as vLLM's: all input lengths, all output lengths, offsets, prefix */
    for (int32_t i = 0; i < cfg->num_prompts; i++) reqs[i].prompt_len = (int32_t)bench_rng_int(rng, in_lo, in_hi);
    for (int32_t i = 0; i < cfg->num_prompts; i++) reqs[i].output_len = (int32_t)bench_rng_int(rng, out_lo, out_hi);
    int64_t *offsets = malloc((size_t)cfg->num_prompts * sizeof *offsets);
    if (!offsets) goto nomem;
    for (int32_t i = 0; i < cfg->num_prompts; i++) offsets[i] = bench_rng_int(rng, 0, num_allowed - 1);
    for (int32_t j = 0; j < cfg->prefix_len; j++) prefix[j] = allowed[bench_rng_int(rng, 0, num_allowed - 1)];
    for (int32_t i = 0; i < cfg->num_prompts; i++) {
        int32_t inner = reqs[i].prompt_len, n = cfg->prefix_len + inner;
        int32_t *p = malloc(((size_t)n + 1) * sizeof *p);
        if (!p) {
            free(offsets);
            goto nomem;
        }
        for (int32_t j = 0; j < cfg->prefix_len; j++) p[j] = prefix[j];
        for (int32_t j = 0; j < inner; j++) p[cfg->prefix_len + j] = allowed[(offsets[i] + i + j) % num_allowed];
        reqs[i].prompt = p;
        reqs[i].prompt_len = n;
    }
    free(offsets);
    free(prefix);
    *out = reqs;
    return VLLM_OK;
nomem:
    free(prefix);
    bench_dataset_free(reqs, cfg->num_prompts);
    return vllm_error(VLLM_ERR_NOMEM, "random dataset: out of memory for %d prompts", cfg->num_prompts);
}

/*
 * pp_stage.c - a pipeline-parallel stage's layers (see pp_stage.h).
 */
#include "dist/pp_stage.h"

#include <string.h>

#include "base/error.h"

vllm_status pp_stage_check(const model_config *c, int32_t pp) {
    if (pp < 1) return vllm_error(VLLM_ERR_INVALID, "pipeline_parallel_size %d must be >= 1", pp);
    if (pp > c->num_hidden_layers)
        return vllm_error(VLLM_ERR_INVALID,
                          "pipeline_parallel_size %d is larger than the model's num_hidden_layers %d: "
                          "every stage needs at least one layer", pp, c->num_hidden_layers);
    return VLLM_OK;
}

void pp_stage_layers(int32_t num_layers, int32_t pp, int32_t stage, int32_t *begin, int32_t *end) {
    int32_t base = num_layers / pp, rem = num_layers % pp, b = 0;
    for (int32_t s = 0; s <= stage; s++) {
        /* vLLM: partitions[-i] += 1 for i in 2 .. rem + 1 */
        int32_t n = base + (s >= pp - 1 - rem && s < pp - 1 ? 1 : 0);
        if (s == stage) {
            *begin = b;
            *end = b + n;
        }
        b += n;
    }
}

model pp_stage_view(const model *m, int32_t begin, int32_t end) {
    model v = *m;
    v.config.num_hidden_layers = end - begin;
    v.w.layers = m->w.layers + begin;
    memset(v.config.sliding_layers, 0, sizeof v.config.sliding_layers);
    for (int32_t l = begin; l < end; l++)
        if (model_layer_is_sliding(&m->config, l))
            v.config.sliding_layers[(l - begin) >> 6] |= (uint64_t)1 << ((l - begin) & 63);
    return v;
}

/*
 * pp_stage.h - which layers a pipeline-parallel stage runs, and that stage
 * as a model of its own.
 *
 * With pp stages, stage s runs a contiguous run of layers, split as vLLM's
 * get_pp_indices: L / pp each, and the L % pp left over go one each to the
 * stages just before the last (the last stage also runs the final norm
 * and lm_head in vLLM; here rank 0 does, but the split is kept). Stage 0
 * embeds the tokens; a later stage starts from the residual stream the
 * stage before sent it (runner_config.no_embed).
 *
 * The stage's model is a view of the full one: its config says end - begin
 * layers (the sliding-window bits shifted to match), its layers are the
 * full model's from begin on; everything else (embeddings, final norm,
 * lm_head, the mapped files) is the full model's, borrowed. The runner
 * built on it holds KV for those layers only. Tensor parallelism then cuts
 * the stage into shards (dist/tp_shard.h).
 */
#ifndef VLLM_DIST_PP_STAGE_H
#define VLLM_DIST_PP_STAGE_H

#include <stdint.h>

#include "model/model.h"

/* VLLM_ERR_INVALID naming the sizes when cfg cannot be cut into pp stages
 * (fewer layers than stages). */
vllm_status pp_stage_check(const model_config *cfg, int32_t pp);

/* Stage stage's layers [*begin, *end) of num_layers over pp stages. */
void pp_stage_layers(int32_t num_layers, int32_t pp, int32_t stage, int32_t *begin, int32_t *end);

/* The view of m for layers [begin, end) (see the top); m must have no x16
 * copies (model_free_x16) and outlive the view. */
model pp_stage_view(const model *m, int32_t begin, int32_t end);

#endif

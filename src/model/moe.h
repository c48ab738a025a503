/*
 * moe.h - the sparse MLP block of a mixture-of-experts layer
 * (Qwen3MoeForCausalLM, MixtralForCausalLM; model.h: moe_weights), over a
 * whole step's tokens at once.
 *
 * Per token t of the step (x its post-attention-normed row):
 *
 *   logits = x router^T                         (num_experts)
 *   p      = softmax(logits) in F32             (transformers: softmax(float))
 *   top    = the num_experts_per_tok largest p  (ties: the lower expert first)
 *   w      = p[top] / sum(p[top]) when norm_topk_prob (Mixtral always), else p[top]
 *   out    = sum over e in top, in increasing expert order, of
 *            w_e * down_e(silu(gate_e x) * up_e x)
 *   y[t]  += out                                (the residual add)
 *
 * which is transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: its
 * experts' outputs are index_add_-ed into zeros in increasing expert order,
 * then added to the residual.
 *
 * The fused expert stage: the step's (token, expert) pairs are grouped by
 * expert (a counting sort, so each group lists its tokens in batch order),
 * each group's input rows gathered into one block, and each active
 * expert's gate/up (SwiGLU fused) and down run once over its whole group
 * with the dense path's batched kernels (matmul_range): an expert's weights
 * are read once per step, however many tokens chose it. Work items are
 * (expert, row chunk, token chunk) claimed by whichever thread is free.
 *
 * Batch invariance: matmul_range gives every output row the same bits
 * whatever the rows beside it (kernels.h), activation quantization for
 * quantized experts is per row (quant.h), the router and the top-k are per
 * token, and each token sums its own experts' outputs in expert order. So a
 * token's output never depends on which other tokens share its experts.
 *
 * Memory: moe_create allocates all scratch for max_tokens; moe_forward
 * allocates nothing.
 */
#ifndef VLLM_MODEL_MOE_H
#define VLLM_MODEL_MOE_H

#include <stdint.h>

#include "base/threadpool.h"
#include "model/model.h"
#include "vllm/status.h"

typedef struct moe moe;

/* Scratch for the sparse blocks of model m (m->config.num_experts > 0) over
 * at most max_tokens tokens a step, nth threads. */
vllm_status moe_create(const model *m, int32_t max_tokens, int nth, moe **out);
void moe_free(moe *mo);

/* y[t * ldy + i] += block w's output for x[t * ldx + 0..dim), t < tokens,
 * on pool (see the top). x and y must not overlap. */
void moe_forward(moe *mo, const moe_weights *w, const float *x, int64_t ldx, float *y, int64_t ldy, int64_t tokens,
                 threadpool *pool);

/* The routing of one token (exposed for tests): from its router logits
 * (num_experts; overwritten by the probabilities), the top_k experts in
 * increasing expert order and their weights, as described at the top. */
void moe_route(float *logits, int32_t num_experts, int32_t top_k, bool renormalize, int32_t *experts,
               float *weights);

#endif

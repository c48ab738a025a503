/*
 * tp_shard.h - one tensor-parallel rank's part of a model (vLLM's
 * column- and row-parallel linear layers, Megatron-LM's split).
 *
 * With tp ranks, rank r of a layer holds:
 *
 *   q_proj, k_proj, v_proj   column-parallel: its heads' rows (heads
 *                            [r*H/tp, (r+1)*H/tp), KV heads likewise), biases too
 *   gate_proj, up_proj       column-parallel: rows [r*I/tp, (r+1)*I/tp) of the
 *                            intermediate dimension
 *   o_proj, down_proj        row-parallel: the same columns of their input,
 *                            so y = sum over ranks of its partial product
 *                            (the runner's all_reduce: model/runner.h); o_proj's
 *                            bias only on rank 0, added once
 *   norms, q/k norms         whole (per hidden or per head_dim)
 *   embed_tokens             whole (read by rows: only the rows of the step's
 *                            tokens are ever touched)
 *   lm_head, final norm      whole on the rank that computes the logits
 *                            (world rank 0); absent (lm_head data NULL) elsewhere
 *
 * The shard is a model whose config says H/tp heads, KV/tp KV heads and
 * I/tp intermediate, so the runner runs it unchanged and its KV pool holds
 * only this rank's KV heads. Every split weight is copied once into
 * memory the shard owns (rows for column-parallel, each row's slice for
 * row-parallel; a quantized slice must be whole blocks: I/tp and
 * H*head_dim/tp multiples of the type's block, 32 or 256 for K-quants,
 * else tp_shard_create fails naming the tensor). Views into the file would
 * save the copy, but the kernel maps file pages in whole folios (up to
 * 2 MiB on ext4 with large folios), so a rank reading its rows also maps
 * its neighbours' and its resident set stops showing the split.
 *
 * Memory: tp_shard_create ends by dropping the full model's file pages
 * from this process (madvise DONTNEED on its mappings; they stay in the
 * page cache), and the x16 copies of the full model (model.h) are replaced
 * by copies of the shard's weights, so a rank's resident set is its shard:
 * about 1/tp of the layers' weights, plus the embedding rows it reads and,
 * on rank 0, lm_head (still a view into the file).
 *
 * Lifetime: tp_shard_create / tp_shard_free. The full model is borrowed
 * and must outlive the shard; its x16 copies are freed by the call.
 */
#ifndef VLLM_DIST_TP_SHARD_H
#define VLLM_DIST_TP_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* VLLM_ERR_INVALID with a message naming the field when cfg cannot be
 * split over tp ranks (heads, KV heads or the intermediate size not
 * divisible by tp). */
vllm_status tp_shard_check(const model_config *cfg, int32_t tp);

/* Rank rank's shard of m (see the top), with lm_head if lm_head (the
 * rank that computes logits), else lm_head.data NULL. *out is freed with
 * tp_shard_free. */
vllm_status tp_shard_create(model *m, int32_t rank, int32_t tp, bool lm_head, model **out);
void tp_shard_free(model *shard);

/* Bytes of matmul weights the shard holds, for the log. */
size_t tp_shard_weight_bytes(const model *shard);

#endif

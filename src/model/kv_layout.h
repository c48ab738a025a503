/*
 * kv_layout.h - which KV cache group each layer's K/V belong to, and where
 * in a block they live (vLLM's KV cache groups with a uniform page size).
 *
 * A model whose layers all attend to the full context has one group: a
 * block holds every layer's K/V for block_size positions, and a sequence has
 * one block table. A model with sliding-window layers (Gemma 3: five local
 * layers to every global one) would waste most of that: a local layer reads
 * only the last sliding_window positions, so its older blocks can go back to
 * the pool while the global layers keep theirs. So layers are split into
 * groups of equal size, full-attention layers and sliding-window layers never
 * sharing a group:
 *
 *     group_size = min(#full layers, #sliding layers)
 *     groups     = the full layers in order, group_size at a time (group 0
 *                  first), then the sliding ones (the last group of a kind
 *                  may be smaller)
 *
 * Every group has its own block table per sequence, and all of them draw
 * from one block pool whose block holds group_size layers' K/V (slot s of a
 * block = the s-th layer of whichever group owns the block). Blocks are
 * interchangeable between groups, so memory a sliding group releases serves
 * any group, and a model never needs more memory than with one group. Gemma 3
 * 270M (18 layers, 3 global): group_size 3, one full group and five sliding
 * groups; a 4096-token prompt with window 512 keeps 256 full + 5 x 33
 * sliding blocks of 3 layers instead of 256 blocks of 18.
 *
 * What was rejected: one table per kind (full, sliding) with blocks of
 * different sizes in two pools, which needs a fixed split of the memory and
 * runs out of sliding blocks with many short sequences; one table for all
 * layers, which keeps every sliding block.
 *
 * More than KV_LAYOUT_MAX_GROUPS groups (a config with one global layer
 * among hundreds) falls back to one group: correct, without the savings.
 * The layout is a pure function of the model config, so the engine (pool
 * size, block tables) and the runner (where K/V go) agree without passing it.
 */
#ifndef VLLM_MODEL_KV_LAYOUT_H
#define VLLM_MODEL_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kv_dtype.h"
#include "model/model.h"

#define KV_LAYOUT_MAX_GROUPS 16

typedef struct kv_layout {
    int32_t num_groups;
    int32_t group_size;                         /* layers per group = K/V slots per block */
    int32_t window[KV_LAYOUT_MAX_GROUPS];       /* a group's sliding window in tokens, 0 = full attention */
    int32_t num_layers;
    int32_t layer_group[MODEL_MAX_LAYERS];      /* (num_layers) */
    int32_t layer_slot[MODEL_MAX_LAYERS];       /* (num_layers) in [0, group_size) */
} kv_layout;

/* The layout of c's layers (see the top). */
void kv_layout_init(kv_layout *l, const model_config *c);

/* Bytes of one block: K and V (elements of type t) of group_size layers for
 * block_size positions. */
size_t kv_layout_block_bytes(const kv_layout *l, const model_config *c, int32_t block_size, kv_dtype t);

/* The most blocks one sequence of num_tokens tokens holds at once across its
 * tables, when at most max_step_tokens of them are computed per step: a full
 * group's cdiv(num_tokens, block_size); a sliding group's window and one
 * step's tokens, cdiv(window - 1 + max_step_tokens, block_size) + 1, if fewer
 * (vLLM's SlidingWindowSpec.max_memory_usage_bytes). */
int64_t kv_layout_blocks_per_seq(const kv_layout *l, int32_t block_size, int64_t num_tokens,
                                 int64_t max_step_tokens);

#endif

/*
 * kv_layout.c - layers into KV cache groups; see kv_layout.h.
 */
#include "model/kv_layout.h"

#include <string.h>

#include "base/log.h"

/* Puts layers [0, n) of kind `sliding` into groups of l->group_size, from group *g on. */
static void assign(kv_layout *l, const model_config *c, bool sliding, int32_t *g) {
    int32_t slot = 0;
    for (int32_t i = 0; i < l->num_layers; i++) {
        if (model_layer_is_sliding(c, i) != sliding) continue;
        if (slot == 0) l->window[*g] = sliding ? c->sliding_window : 0;
        l->layer_group[i] = *g;
        l->layer_slot[i] = slot;
        if (++slot == l->group_size) slot = 0, (*g)++;
    }
    if (slot) (*g)++;
}

void kv_layout_init(kv_layout *l, const model_config *c) {
    memset(l, 0, sizeof *l);
    l->num_layers = c->num_hidden_layers;
    int32_t n_sliding = 0;
    for (int32_t i = 0; i < l->num_layers; i++) n_sliding += model_layer_is_sliding(c, i);
    int32_t n_full = l->num_layers - n_sliding;
    int32_t gs = n_full < n_sliding ? n_full : n_sliding;
    if (gs == 0) gs = l->num_layers; /* one kind only: one group */
    int32_t groups = (n_full + gs - 1) / gs + (n_sliding + gs - 1) / gs;
    if (groups > KV_LAYOUT_MAX_GROUPS) {
        log_warn("KV cache: %d sliding-window and %d full-attention layers would need %d groups (at most %d): "
                 "one group, sliding layers keep every block",
                 n_sliding, n_full, groups, KV_LAYOUT_MAX_GROUPS);
        l->num_groups = 1, l->group_size = l->num_layers;
        for (int32_t i = 0; i < l->num_layers; i++) l->layer_slot[i] = i;
        return;
    }
    l->group_size = gs;
    int32_t g = 0;
    assign(l, c, false, &g);
    assign(l, c, true, &g);
    l->num_groups = g;
}

size_t kv_layout_block_bytes(const kv_layout *l, const model_config *c, int32_t block_size, kv_dtype t) {
    return (size_t)2 * (size_t)l->group_size * (size_t)c->num_key_value_heads * (size_t)c->head_dim *
           (size_t)block_size * kv_dtype_size(t);
}

int64_t kv_layout_blocks_per_seq(const kv_layout *l, int32_t block_size, int64_t num_tokens,
                                 int64_t max_step_tokens) {
    int64_t bs = block_size, full = (num_tokens + bs - 1) / bs, total = 0;
    for (int32_t g = 0; g < l->num_groups; g++) {
        int64_t n = full;
        if (l->window[g] > 0) {
            int64_t w = (l->window[g] - 1 + max_step_tokens + bs - 1) / bs + 1;
            if (w < n) n = w;
        }
        total += n;
    }
    return total;
}

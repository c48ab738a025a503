/*
 * step_batch.c - the step builder: flattens scheduled sequences into a
 * step_batch (see step_batch.h). All arrays are one allocation made at
 * create time; adding a sequence is a few stores per token.
 */
#include "model/step_batch.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct step_builder {
    step_builder_config cfg;
    step_batch batch;                /* points into the arrays below */
    int64_t *slot_mapping;           /* the arrays, carved from one allocation */
    int32_t *token_ids, *positions, *query_start_loc, *seq_lens, *block_tables, *scored_start,
        *scored_indices, *copies, *lora_ids;
};

void step_builder_free(step_builder *b) { free(b); }

vllm_status step_builder_create(const step_builder_config *cfg, step_builder **out) {
    *out = NULL;
    if (cfg->max_tokens < 1 || cfg->max_seqs < 1 || cfg->max_scored < 0 || cfg->max_copies < 0 ||
        cfg->max_blocks_per_seq < 1 || cfg->block_size < 1)
        return vllm_error(VLLM_ERR_INVALID,
                          "step builder: bad capacities (tokens %d, seqs %d, scored %d, copies %d, "
                          "blocks per seq %d, block size %d)",
                          cfg->max_tokens, cfg->max_seqs, cfg->max_scored, cfg->max_copies,
                          cfg->max_blocks_per_seq, cfg->block_size);
    if (cfg->num_kv_groups < 0)
        return vllm_error(VLLM_ERR_INVALID, "step builder: %d KV cache groups", cfg->num_kv_groups);
    size_t T = (size_t)cfg->max_tokens, S = (size_t)cfg->max_seqs, G = cfg->num_kv_groups ? (size_t)cfg->num_kv_groups : 1;
    /* int32 arrays after the header and the slot mapping (int64 first keeps it aligned) */
    size_t n32[9] = {T, T, S + 1, S, S * G * (size_t)cfg->max_blocks_per_seq, S + 1, (size_t)cfg->max_scored + 1,
                     2 * ((size_t)cfg->max_copies + 1), S};
    size_t words = 0;
    for (int i = 0; i < 9; i++) words += n32[i];
    size_t head = (sizeof(step_builder) + 7) & ~(size_t)7;
    step_builder *b = calloc(1, head + T * G * sizeof(int64_t) + words * sizeof(int32_t));
    if (!b) return vllm_error(VLLM_ERR_NOMEM, "step builder: out of memory for %d tokens, %d sequences",
                              cfg->max_tokens, cfg->max_seqs);
    b->cfg = *cfg;
    b->cfg.num_kv_groups = (int32_t)G;
    b->slot_mapping = (int64_t *)((char *)b + head);
    int32_t *p = (int32_t *)(b->slot_mapping + T * G);
    int32_t **arrays[9] = {&b->token_ids, &b->positions, &b->query_start_loc, &b->seq_lens, &b->block_tables,
                           &b->scored_start, &b->scored_indices, &b->copies, &b->lora_ids};
    for (int i = 0; i < 9; i++) {
        *arrays[i] = p;
        p += n32[i];
    }
    b->batch = (step_batch){
        .token_ids = b->token_ids,
        .positions = b->positions,
        .num_kv_groups = (int32_t)G,
        .slot_mapping = b->slot_mapping,
        .query_start_loc = b->query_start_loc,
        .seq_lens = b->seq_lens,
        .block_tables = b->block_tables,
        .max_blocks_per_seq = cfg->max_blocks_per_seq,
        .scored_start = b->scored_start,
        .scored_indices = b->scored_indices,
        .copies = b->copies,
    };
    step_builder_reset(b);
    *out = b;
    return VLLM_OK;
}

void step_builder_reset(step_builder *b) {
    b->batch.num_tokens = b->batch.num_seqs = b->batch.num_scored = b->batch.num_copies = 0;
    b->query_start_loc[0] = 0;
    b->scored_start[0] = 0;
    b->batch.lora_ids = NULL;
}

vllm_status step_builder_add_seq(step_builder *b, const int32_t *new_tokens, int32_t num_new, int32_t first_pos,
                                 const int32_t *block_ids, int32_t table_stride, int32_t num_blocks,
                                 int32_t num_scored, int32_t lora_id) {
    step_batch *x = &b->batch;
    const step_builder_config *c = &b->cfg;
    int32_t bs = c->block_size, end = first_pos + num_new, G = c->num_kv_groups;
    if (num_new < 0 || first_pos < 0 || num_scored < 0 || num_scored > num_new)
        return vllm_error(VLLM_ERR_INVALID, "step builder: %d new tokens from position %d, %d scored", num_new,
                          first_pos, num_scored);
    if (x->num_seqs == c->max_seqs || x->num_tokens + num_new > c->max_tokens ||
        x->num_scored + num_scored > c->max_scored)
        return vllm_error(VLLM_ERR_INVALID,
                          "step builder: a sequence of %d tokens (%d scored) does not fit: %d/%d sequences, "
                          "%d/%d tokens, %d/%d scored rows",
                          num_new, num_scored, x->num_seqs, c->max_seqs, x->num_tokens, c->max_tokens,
                          x->num_scored, c->max_scored);
    if (num_blocks > c->max_blocks_per_seq || (int64_t)num_blocks * bs < end || (G > 1 && table_stride < num_blocks))
        return vllm_error(VLLM_ERR_INVALID,
                          "step builder: %d blocks (at most %d, table stride %d) cannot hold positions up to %d",
                          num_blocks, c->max_blocks_per_seq, table_stride, end - 1);
    for (int32_t g = 0; g < G; g++)
        for (int32_t p = first_pos; p < end; p += bs - p % bs)
            if (block_ids[(size_t)g * (size_t)table_stride + (size_t)(p / bs)] < 0)
                return vllm_error(VLLM_ERR_INVALID, "step builder: position %d of group %d is on a released block", p, g);
    int32_t s = x->num_seqs, t = x->num_tokens;
    for (int32_t i = 0; i < num_new; i++, t++) {
        int32_t p = first_pos + i;
        b->token_ids[t] = new_tokens[i];
        b->positions[t] = p;
        for (int32_t g = 0; g < G; g++)
            b->slot_mapping[(size_t)t * (size_t)G + (size_t)g] =
                (int64_t)block_ids[(size_t)g * (size_t)table_stride + (size_t)(p / bs)] * bs + p % bs;
    }
    for (int32_t g = 0; g < G; g++)
        memcpy(b->block_tables + ((size_t)s * (size_t)G + (size_t)g) * (size_t)c->max_blocks_per_seq,
               block_ids + (size_t)g * (size_t)table_stride, (size_t)num_blocks * sizeof *block_ids);
    for (int32_t k = num_scored; k > 0; k--) b->scored_indices[x->num_scored++] = t - k;
    b->seq_lens[s] = end;
    b->lora_ids[s] = lora_id;
    if (lora_id != 0) {
        x->lora_ids = b->lora_ids;
    }
    x->num_tokens = t;
    x->num_seqs = s + 1;
    b->query_start_loc[s + 1] = t;
    b->scored_start[s + 1] = x->num_scored;
    return VLLM_OK;
}

vllm_status step_builder_add_copy(step_builder *b, int32_t src, int32_t dst) {
    step_batch *x = &b->batch;
    if (x->num_copies == b->cfg.max_copies)
        return vllm_error(VLLM_ERR_INVALID, "step builder: more than %d block copies in one step", b->cfg.max_copies);
    b->copies[2 * x->num_copies] = src;
    b->copies[2 * x->num_copies + 1] = dst;
    x->num_copies++;
    return VLLM_OK;
}

const step_batch *step_builder_batch(const step_builder *b) { return &b->batch; }

/*
 * step_batch.h - one engine step as the model sees it: a flat, pointer-free
 * description of every token to run, where its K/V go, which rows to score,
 * the block copies to make first, and per-sequence extras (vLLM's
 * SchedulerOutput after the model runner's _prepare_inputs).
 *
 * Every scheduled token of every sequence is flattened into one
 * "super-sequence" with no padding (mission.md §3):
 *
 *   token_ids[t], positions[t]          for t in [0, num_tokens)
 *   slot_mapping[t*G + g]               where token t's K/V are written in KV cache
 *                                       group g (G = num_kv_groups, model/kv_layout.h):
 *                                       block_id * block_size + position % block_size
 *   query_start_loc[s] .. [s+1]         the tokens of sequence s (s < num_seqs)
 *   seq_lens[s]                         sequence s's context length after this step
 *                                       (tokens with K/V before + its new tokens)
 *   block_tables + (s*G + g)*max_blocks_per_seq
 *                                       sequence s's block table of group g (physical
 *                                       block ids; a sliding-window group's entries
 *                                       before its window may be -1)
 *   scored_start[s] .. [s+1]            sequence s's rows in scored_indices: its
 *                                       last scored_start[s+1] - scored_start[s]
 *                                       tokens (0 during a prefill chunk, 1 for a
 *                                       decode, k + 1 with k draft tokens)
 *   scored_indices[i]                   which token rows get logits (i < num_scored),
 *                                       in sequence order
 *   copies[2c], copies[2c+1]            copy-on-write: block src -> dst, in order,
 *                                       before the forward (c < num_copies)
 *   lora_ids[s]                         sequence s's adapter, 0 = the base model
 *                                       (NULL = all 0)
 *
 * A token at position p attends to positions 0..p of its own sequence (a
 * sliding-window layer to the last window of them), through the block table
 * of its layer's group; K/V of earlier steps are already in the pool. With
 * one group (G = 1, every model without sliding layers) the arrays are a
 * single slot mapping and one table per sequence.
 * Scoring several positions of one sequence is how draft tokens are verified:
 * row j is the distribution after positions 0..p_j, so a proposer's k drafts
 * and the token after them cost one forward (spec/ proposes, sample/ accepts).
 *
 * Everything is plain arrays of fixed-width integers: a multi-process
 * executor can send the arrays as they are (no pointers inside), and a worker
 * rebuilds the same view over what it received.
 *
 * The step_builder owns arrays sized at creation and fills them one
 * sequence at a time (the engine's side of "prepare inputs"); its batch
 * points into them and is valid until the next reset. Capacities are
 * checked: a sequence that does not fit is an error value, never an overrun.
 */
#ifndef VLLM_MODEL_STEP_BATCH_H
#define VLLM_MODEL_STEP_BATCH_H

#include <stdint.h>

#include "vllm/status.h"

typedef struct step_batch {
    int32_t num_tokens;
    const int32_t *token_ids;        /* (num_tokens) */
    const int32_t *positions;        /* (num_tokens) */
    int32_t num_kv_groups;           /* G; 0 means 1 */
    const int64_t *slot_mapping;     /* (num_tokens, G) */
    int32_t num_seqs;
    const int32_t *query_start_loc;  /* (num_seqs + 1) */
    const int32_t *seq_lens;         /* (num_seqs) */
    const int32_t *block_tables;     /* (num_seqs, G, max_blocks_per_seq) */
    int32_t max_blocks_per_seq;
    const int32_t *scored_start;     /* (num_seqs + 1), or NULL (then only scored_indices is read) */
    int32_t num_scored;
    const int32_t *scored_indices;   /* (num_scored) token rows to project to the vocab */
    int32_t num_copies;
    const int32_t *copies;           /* (num_copies, 2) src, dst block ids */
    const int32_t *lora_ids;         /* (num_seqs) or NULL */
} step_batch;

typedef struct step_builder_config {
    int32_t max_tokens;              /* max_num_batched_tokens */
    int32_t max_seqs;                /* max_num_seqs */
    int32_t max_scored;              /* rows of logits per step */
    int32_t max_copies;
    int32_t max_blocks_per_seq;
    int32_t block_size;
    int32_t num_kv_groups;           /* 0 means 1 */
} step_builder_config;

typedef struct step_builder step_builder;

vllm_status step_builder_create(const step_builder_config *cfg, step_builder **out);
void step_builder_free(step_builder *b);

/* Empties the batch. */
void step_builder_reset(step_builder *b);

/* Appends one sequence: its num_new tokens (new_tokens, the token ids at
 * positions first_pos .. first_pos + num_new - 1), its block tables (one per
 * KV cache group, group g's num_blocks entries at block_ids + g *
 * table_stride; at least enough blocks for those positions), its last
 * num_scored tokens scored, its adapter. VLLM_ERR_INVALID (nothing appended)
 * when a capacity would be exceeded or the arguments disagree (num_scored >
 * num_new, a position outside the table or on a released (-1) entry). */
vllm_status step_builder_add_seq(step_builder *b, const int32_t *new_tokens, int32_t num_new, int32_t first_pos,
                                 const int32_t *block_ids, int32_t table_stride, int32_t num_blocks,
                                 int32_t num_scored, int32_t lora_id);

/* Appends a copy-on-write block copy. */
vllm_status step_builder_add_copy(step_builder *b, int32_t src, int32_t dst);

/* The batch built so far; borrowed until the next reset or add. */
const step_batch *step_builder_batch(const step_builder *b);

#endif

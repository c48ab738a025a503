/*
 * runner.h - the model runner: one batched forward pass over paged KV.
 *
 * The engine core flattens every token it schedules this step, from all
 * requests, into one "super-sequence" with no padding (mission.md §3):
 *
 *   token_ids[t], positions[t]          for t in [0, num_tokens)
 *   slot_mapping[t]                     where token t's K/V are written:
 *                                       block_id * block_size + position % block_size
 *   query_start_loc[s] .. [s+1]         the tokens of sequence s (s < num_seqs)
 *   seq_lens[s]                         sequence s's context length after this step
 *                                       (cached tokens + new tokens)
 *   block_tables + s*max_blocks_per_seq sequence s's block table (physical block ids)
 *   logits_indices[i]                   which token rows get logits (i < num_logits)
 *
 * A token at position p attends to positions 0..p of its own sequence, read
 * through the block table. K/V of earlier steps are already in the pool.
 *
 * Batch invariance (engine issue): every kernel reduces in an order that
 * depends only on the token's own data, never on how many tokens share the
 * batch or how a prompt was chunked. Matmuls split work over output rows
 * and tokens, never over the reduction dimension; attention scans a token's
 * context in position order. So a request's logits are bit-identical alone,
 * in a batch of 64, or prefilled in chunks of 1.
 *
 * Threads: the runner owns a thread pool whose workers sleep between ops.
 * One thread at a time may call runner_forward / runner_copy_block.
 * Memory: the KV pool and scratch for max_num_batched_tokens are allocated at
 * create time; runner_forward allocates nothing.
 *
 * KV layout (runner.c, kernels/attention.c): per layer a K and a V array of
 * num_blocks blocks, each block (kv_heads, head_dim, block_size) for K
 * (transposed) and (kv_heads, block_size, head_dim) for V, all F32.
 */
#ifndef VLLM_MODEL_RUNNER_H
#define VLLM_MODEL_RUNNER_H

#include <stdint.h>

#include "model/model.h"

typedef struct runner_config {
    int32_t num_blocks;              /* KV pool size in blocks */
    int32_t block_size;              /* tokens per block (16) */
    int32_t max_num_batched_tokens;  /* scratch capacity: tokens per forward */
    int32_t max_num_seqs;            /* sequences per forward */
    int32_t num_threads;             /* 0 = number of online CPUs */
} runner_config;

typedef struct runner_batch {
    int32_t num_tokens;
    const int32_t *token_ids;        /* (num_tokens) */
    const int32_t *positions;        /* (num_tokens) */
    const int64_t *slot_mapping;     /* (num_tokens) */
    int32_t num_seqs;
    const int32_t *query_start_loc;  /* (num_seqs + 1) */
    const int32_t *seq_lens;         /* (num_seqs) */
    const int32_t *block_tables;     /* (num_seqs, max_blocks_per_seq) */
    int32_t max_blocks_per_seq;
    int32_t num_logits;
    const int32_t *logits_indices;   /* (num_logits) token rows to project to the vocab */
} runner_batch;

typedef struct runner runner;

/* Allocates the KV pool (2 * layers * num_blocks * block_size * kv_heads * head_dim
 * floats), scratch and threads. The model is borrowed and must outlive the runner. */
vllm_status runner_create(const model *m, const runner_config *cfg, runner **out);
void runner_free(runner *r);

/* Bytes of KV per block across all layers (for sizing the pool from a budget). */
size_t runner_kv_bytes_per_block(const model_config *cfg, int32_t block_size);

/* Runs the forward pass; writes logits (num_logits, vocab_size) row-major in
 * F32. Returns VLLM_ERR_INVALID (and does nothing) if the batch exceeds the
 * capacities given at create time or names a slot/block outside the pool. */
vllm_status runner_forward(runner *r, const runner_batch *b, float *logits);

/* Copies one block's K/V (all layers) to another: copy-on-write for n > 1.
 * VLLM_ERR_INVALID (nothing copied) if either block is outside the pool. */
vllm_status runner_copy_block(runner *r, int32_t src_block, int32_t dst_block);

#endif

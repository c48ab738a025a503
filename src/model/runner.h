/*
 * runner.h - the model runner: one batched forward pass over paged KV.
 *
 * The input is one step_batch (model/step_batch.h): every token the engine
 * scheduled this step, flattened with its position, K/V slot and sequence,
 * the rows to score, and the block copies to make first.
 *
 * Batch invariance: every kernel reduces in an order that depends only on
 * the token's own data, never on how many tokens share the batch or how a
 * prompt was chunked. Matmuls split work over output rows and tokens, never
 * over the reduction dimension; attention scans a token's context in
 * position order. So a request's logits are bit-identical alone, in a batch
 * of 64, or prefilled in chunks of 1, and a draft token scored in a step of
 * k + 1 positions gets the logits it would get decoded alone.
 *
 * Threads: the runner owns a thread pool whose workers sleep between ops.
 * One thread at a time may call runner_forward, runner_copy_block and the
 * KV accessors.
 * Memory: the KV pool and scratch for max_num_batched_tokens are allocated at
 * create time; runner_forward allocates nothing.
 *
 * KV layout (runner.c, kernels/attention.c): per K/V slot of a block
 * (model/kv_layout.h: one slot per layer of a KV cache group; every layer
 * when the model has no sliding-window layers) a K and a V array of
 * num_blocks blocks, each block (kv_heads, head_dim, block_size) for K
 * (transposed) and (kv_heads, block_size, head_dim) for V, elements of
 * runner_config.kv_cache_dtype (F32, BF16, F16, FP8 E4M3/E5M2: see
 * kernels/kv_dtype.h). A layer reads and writes its slot through its
 * group's block tables in the batch.
 */
#ifndef VLLM_MODEL_RUNNER_H
#define VLLM_MODEL_RUNNER_H

#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/kv_dtype.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/step_batch.h"

typedef struct runner_config {
    int32_t num_blocks;              /* KV pool size in blocks */
    int32_t block_size;              /* tokens per block (16) */
    int32_t max_num_batched_tokens;  /* scratch capacity: tokens per forward */
    int32_t max_num_seqs;            /* sequences per forward */
    int32_t num_threads;             /* 0 = number of online CPUs */
    kv_dtype kv_cache_dtype;         /* element type of the KV pool; 0 = F32 */
    /* --dtype bfloat16 (and auto for a BF16 model): BF16 weights go to the
     * BF16 compute path (kernels/matmul_bf16.c: activations rounded to
     * BF16, vdpbf16ps); false: FP32 activations (matmul_range) */
    bool bf16_compute;
    /* LoRA (model/lora.h): the engine's adapter table (borrowed; NULL = no
     * LoRA, lora_ids must then be absent or 0) and the largest rank */
    lora_table *lora;
    int32_t max_lora_rank;
    /* Tensor parallel (dist/tp_executor.c): the model is this rank's shard
     * (dist/tp_shard.h); o_proj and down_proj give partial sums, which
     * all_reduce(reduce_ctx, rows, n) sums in place across the ranks before
     * they join the residual stream. NULL: one rank, the partial sums are the
     * sums. A non-OK return ends the forward with that status. */
    vllm_status (*all_reduce)(void *reduce_ctx, float *rows, int64_t n);
    void *reduce_ctx;
    bool skip_logits;                /* a worker rank: no final norm, no lm_head (logits may be NULL) */
    /* Pipeline parallel (dist/): a later stage, whose input is the residual
     * stream the stage before computed, written by the caller into
     * runner_hidden() rows 0..num_tokens-1 instead of the embeddings. The
     * model is the stage's layers only (dist/pp_stage.h). */
    bool no_embed;
    /* A thread pool to borrow instead of starting one (a draft model shares
     * the target's: the two forwards alternate on one thread, and one set of
     * workers on the cores beats two). NULL: its own, of num_threads. */
    threadpool *shared_pool;
} runner_config;

typedef struct runner runner;

/* Allocates the KV pool (2 * group_size * num_blocks * block_size * kv_heads *
 * head_dim elements of kv_cache_dtype; group_size = layers unless the model
 * has sliding-window layers), scratch and threads. The model is borrowed and
 * must outlive the runner. */
vllm_status runner_create(const model *m, const runner_config *cfg, runner **out);
void runner_free(runner *r);

/* Bytes of KV per block across its slots, in type t (for sizing the pool
 * from a budget). */
size_t runner_kv_bytes_per_block(const model_config *cfg, int32_t block_size, kv_dtype t);

/* Makes the batch's block copies, then runs the forward pass; writes logits
 * (num_scored, vocab_size) row-major in F32. Returns VLLM_ERR_INVALID (and
 * does nothing) if the batch exceeds the capacities given at create time or
 * names a slot/block outside the pool. */
vllm_status runner_forward(runner *r, const step_batch *b, float *logits);

/* The residual stream, (max_num_batched_tokens, hidden) floats, row t for
 * the batch's token t: after a forward, this stage's output; before a
 * forward with no_embed, its input. Pipeline stages pass it on. */
float *runner_hidden(runner *r);

/* The last stage's half of a forward on rank 0 (pipeline parallel): the
 * final norm and lm_head of the batch's scored rows of runner_hidden(),
 * which the caller filled (rows scored_indices[i]), into logits
 * (num_scored, vocab). VLLM_ERR_INVALID without logits or lm_head. */
vllm_status runner_logits(runner *r, const step_batch *b, float *logits);

/* Copies one block's K/V (all slots) to another: copy-on-write for n > 1.
 * VLLM_ERR_INVALID (nothing copied) if either block is outside the pool. */
vllm_status runner_copy_block(runner *r, int32_t src_block, int32_t dst_block);

/* The KV pool, one block and one layer at a time (what a KV connector moves
 * between instances or tiers). K and V of a block are each
 * runner_kv_block_bytes() bytes, in the pool's layout and element type
 * (the KV layout at the top, runner_kv_cache_dtype()): a connector moves
 * the stored bytes, never converts them, so reading and writing back gives
 * the same attention bit for bit; two instances exchanging blocks must use
 * the same type. VLLM_ERR_INVALID (nothing touched) for a layer or block
 * outside the pool. */
size_t runner_kv_block_bytes(const runner *r);
kv_dtype runner_kv_cache_dtype(const runner *r);
int32_t runner_num_layers(const runner *r);
vllm_status runner_read_kv(const runner *r, int32_t layer, int32_t block, void *k, void *v);
vllm_status runner_write_kv(runner *r, int32_t layer, int32_t block, const void *k, const void *v);

/* Per-layer hooks around every later forward (a KV connector's layer-wise
 * loads and saves): before_attention(ctx, l) runs on the forward's thread
 * just before layer l's attention reads the pool (its loads must be in by
 * then), after_layer(ctx, l) once layer l's K/V of the batch are stored and
 * its attention ran. Both may read and write the pool (runner_read_kv,
 * runner_write_kv). A non-OK return ends the forward with that status.
 * NULL (or NULL members) removes them. */
typedef struct runner_layer_hooks {
    vllm_status (*before_attention)(void *ctx, int32_t layer);
    vllm_status (*after_layer)(void *ctx, int32_t layer);
    void *ctx;
} runner_layer_hooks;
void runner_set_layer_hooks(runner *r, const runner_layer_hooks *h);

/* The runner's worker threads, idle between forwards (the sampler borrows them). */
threadpool *runner_threadpool(runner *r);

#endif

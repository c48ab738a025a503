/*
 * executor.h - where the engine core's steps run (vLLM's Executor and its
 * Workers).
 *
 * The engine hands the executor one step_batch per step (model/step_batch.h:
 * flat arrays only, the same bytes for any executor) and gets back the
 * logits of the batch's scored rows. Sampling stays in the engine core
 * (sample/), so an executor only runs the model:
 *
 *   local (executor_create_local): this process, the runner's thread pool.
 *   multi-process (tensor / pipeline parallel, dist/): rank 0 is the engine's
 *     process; it broadcasts each step_batch to the workers, every worker
 *     runs its shard of the layers or of each layer over its part of the KV
 *     pool, and the logits come back from the output rank. The interface is
 *     what such an executor implements; nothing in the engine changes.
 *
 * KV connectors (disaggregated prefill, KV offloading) reach the pool through
 * executor_read_kv / executor_write_kv: one block of one layer at a time, in
 * the pool's own layout, wherever the pool lives.
 *
 * Batches in flight (pipeline parallelism, vLLM's max_concurrent_batches):
 * an executor whose max_in_flight is P > 1 also takes submit / collect.
 * submit starts a batch (the first stage runs it here and passes it on)
 * and returns; collect waits for the oldest submitted batch and writes its
 * logits. Up to P batches are submitted before the oldest is collected, so
 * while a later stage computes batch A the first computes batch B; batches
 * come back in the order they went in. The engine keeps the batches
 * disjoint (a sequence is in at most one: its next token is unknown until
 * its batch is sampled). execute = submit + collect of one batch.
 *
 * Lifetime: executor_create_local / executor_free. One thread at a time
 * (the engine's) calls an executor.
 */
#ifndef VLLM_ENGINE_EXECUTOR_H
#define VLLM_ENGINE_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "model/model.h"
#include "model/runner.h"
#include "model/step_batch.h"

typedef struct executor executor;

typedef struct executor_ops {
    const char *name;
    /* Block copies, then the forward over b; logits (b->num_scored, vocab) row-major. */
    vllm_status (*execute)(executor *ex, const step_batch *b, float *logits);
    size_t (*kv_block_bytes)(const executor *ex);
    int32_t (*num_layers)(const executor *ex);
    vllm_status (*read_kv)(executor *ex, int32_t layer, int32_t block, void *k, void *v);
    vllm_status (*write_kv)(executor *ex, int32_t layer, int32_t block, const void *k, const void *v);
    /* Optional (NULL: not supported, e.g. the pool is in other processes):
     * per-layer hooks run inside later executes (model/runner.h). */
    void (*set_layer_hooks)(executor *ex, const runner_layer_hooks *h);
    /* Worker threads of this process that are idle between steps, or NULL. */
    threadpool *(*threadpool)(executor *ex);
    void (*free)(executor *ex);
    /* Optional (NULL: one batch in flight): see "Batches in flight" above. */
    int32_t (*max_in_flight)(const executor *ex);
    vllm_status (*submit)(executor *ex, const step_batch *b);
    vllm_status (*collect)(executor *ex, float *logits);
} executor_ops;

struct executor {
    const executor_ops *ops;
};

/* In this process: a runner over the model (borrowed; it must outlive the
 * executor) with cfg's KV pool and capacities. */
vllm_status executor_create_local(const model *m, const runner_config *cfg, executor **out);

static inline vllm_status executor_execute(executor *ex, const step_batch *b, float *logits) {
    return ex->ops->execute(ex, b, logits);
}
/* Bytes of one block's K (and of its V) for one layer. */
static inline size_t executor_kv_block_bytes(const executor *ex) { return ex->ops->kv_block_bytes(ex); }
static inline int32_t executor_num_layers(const executor *ex) { return ex->ops->num_layers(ex); }
static inline vllm_status executor_read_kv(executor *ex, int32_t layer, int32_t block, void *k, void *v) {
    return ex->ops->read_kv(ex, layer, block, k, v);
}
static inline vllm_status executor_write_kv(executor *ex, int32_t layer, int32_t block, const void *k,
                                            const void *v) {
    return ex->ops->write_kv(ex, layer, block, k, v);
}
/* False (nothing set) if the executor cannot run hooks inside its forward. */
static inline bool executor_set_layer_hooks(executor *ex, const runner_layer_hooks *h) {
    if (!ex->ops->set_layer_hooks) return false;
    ex->ops->set_layer_hooks(ex, h);
    return true;
}
static inline threadpool *executor_threadpool(executor *ex) { return ex->ops->threadpool(ex); }
/* Batches the executor can have in flight (>= 1); submit / collect exist when > 1. */
static inline int32_t executor_max_in_flight(const executor *ex) {
    return ex->ops->max_in_flight ? ex->ops->max_in_flight(ex) : 1;
}
static inline vllm_status executor_submit(executor *ex, const step_batch *b) { return ex->ops->submit(ex, b); }
static inline vllm_status executor_collect(executor *ex, float *logits) { return ex->ops->collect(ex, logits); }
/* NULL is a no-op. */
static inline void executor_free(executor *ex) {
    if (ex) ex->ops->free(ex);
}

#endif

/*
 * executor.c - the local executor: the engine's steps on a runner in this
 * process (see executor.h). Everything is the runner's; this file only
 * gives it the executor's shape.
 */
#include "engine/executor.h"

#include <stdlib.h>

#include "base/error.h"

typedef struct local_executor {
    executor base;
    runner *runner;
} local_executor;

static runner *runner_of(const executor *ex) { return ((const local_executor *)ex)->runner; }

static vllm_status local_execute(executor *ex, const step_batch *b, float *logits) {
    return runner_forward(runner_of(ex), b, logits);
}

static size_t local_kv_block_bytes(const executor *ex) { return runner_kv_block_bytes(runner_of(ex)); }

static int32_t local_num_layers(const executor *ex) { return runner_num_layers(runner_of(ex)); }

static vllm_status local_read_kv(executor *ex, int32_t layer, int32_t block, void *k, void *v) {
    return runner_read_kv(runner_of(ex), layer, block, k, v);
}

static vllm_status local_write_kv(executor *ex, int32_t layer, int32_t block, const void *k, const void *v) {
    return runner_write_kv(runner_of(ex), layer, block, k, v);
}

static void local_set_layer_hooks(executor *ex, const runner_layer_hooks *h) {
    runner_set_layer_hooks(runner_of(ex), h);
}

static threadpool *local_threadpool(executor *ex) { return runner_threadpool(runner_of(ex)); }

static void local_free(executor *ex) {
    runner_free(runner_of(ex));
    free(ex);
}

static const executor_ops local_ops = {
    .name = "local",
    .execute = local_execute,
    .kv_block_bytes = local_kv_block_bytes,
    .num_layers = local_num_layers,
    .read_kv = local_read_kv,
    .write_kv = local_write_kv,
    .set_layer_hooks = local_set_layer_hooks,
    .threadpool = local_threadpool,
    .free = local_free,
};

vllm_status executor_create_local(const model *m, const runner_config *cfg, executor **out) {
    *out = NULL;
    local_executor *x = calloc(1, sizeof *x);
    if (!x) return vllm_error(VLLM_ERR_NOMEM, "executor: out of memory");
    vllm_status rc = runner_create(m, cfg, &x->runner);
    if (rc != VLLM_OK) {
        free(x);
        return rc;
    }
    x->base.ops = &local_ops;
    *out = &x->base;
    return VLLM_OK;
}

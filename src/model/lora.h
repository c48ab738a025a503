/*
 * lora.h - LoRA adapters: loading PEFT's files, the table the engine and the
 * runner share, and the batched low-rank update (vLLM's vllm/lora; the
 * Punica/S-LoRA SGMV idea).
 *
 * An adapter is a directory as PEFT's save_pretrained writes it:
 *   adapter_config.json          r, lora_alpha, target_modules (a list, or
 *                                "all-linear"), use_rslora (optional)
 *   adapter_model.safetensors    base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
 *                                (r, in) and ...lora_B.weight (out, r), F32/BF16/F16
 * for the projections q, k, v, o (self_attn) and gate, up, down (mlp). The
 * weights are converted to F32 once at load (they are small: r * (in + out)
 * per projection). scale = lora_alpha / r, or lora_alpha / sqrt(r) with
 * use_rslora, as PEFT. A file that does not fit the base model is refused
 * with a message naming the adapter and the problem: rank above
 * max_lora_rank, a target module the model does not have, a tensor whose
 * shape disagrees with the base projection, a missing file.
 *
 * The update, per projection and per row t of the batch whose sequence has
 * adapter a:  y_t += scale_a * B_a (A_a x_t). Rows are grouped by adapter
 * (lora_batch, built once per step): each work item is a run of up to
 * LORA_ROWS rows of one adapter, gathered contiguous; one F32 matmul of A
 * over them (shrink, the same kernels as the base weights), one of B
 * (expand), then the scaled add. Batch invariance: a row's delta is the same
 * two dot-product chains whatever rows share its run (the matmul kernels
 * compute each output from its own row alone, kernels.h), and the add into
 * y is one float add per element after the base matmul, so a row's result
 * does not depend on which adapters share the step. lora_apply_portable is
 * the reference: plain loops in double-free F32, one row at a time.
 *
 * Lifetime and threads (lora_table): the engine owns the table; adapters
 * are reference counted under the table's mutex. The table holds one
 * reference while the adapter is registered (by name); each request that
 * uses it holds one (lora_table_acquire at add, lora_table_release when the
 * request is freed), so unregistering (runtime unload) never frees an
 * adapter that running sequences still compute with: it disappears when
 * the last of them finishes. The runner resolves a step's ids with
 * lora_batch_build, under the mutex, from any adapter still referenced.
 * Adapter ids are never reused (1, 2, ...): an id is part of the prefix-cache
 * key, so a reloaded adapter never meets blocks computed by an older one.
 */
#ifndef VLLM_MODEL_LORA_H
#define VLLM_MODEL_LORA_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "model/model.h"
#include "vllm/status.h"

typedef enum lora_module {
    LORA_Q = 0, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN,
    LORA_NUM_MODULES
} lora_module;

/* "q_proj", ... */
const char *lora_module_name(lora_module m);

typedef struct lora_weights {
    float *a;                        /* (rank, in) F32, or NULL: not targeted */
    float *b;                        /* (out, rank) F32 */
    int32_t in, out;
} lora_weights;

typedef struct lora_adapter {
    char *name;                      /* as served (--lora-modules NAME=...) */
    char *path;                      /* the adapter directory */
    int32_t id;                      /* > 0, set by lora_table_add */
    int32_t rank;
    float alpha, scale;
    bool use_rslora;
    uint32_t modules;                /* bit m: some layer has module m */
    int32_t num_layers;
    lora_weights *w;                 /* (num_layers, LORA_NUM_MODULES) */
    /* private, under the table's mutex */
    int32_t refs;
    bool registered;
} lora_adapter;

/* Loads the adapter directory path for model m (shapes checked against its
 * config), named name. Errors name the adapter and what is wrong. */
vllm_status lora_adapter_load(const model *m, const char *name, const char *path, int32_t max_lora_rank,
                              lora_adapter **out);
void lora_adapter_free(lora_adapter *a);

/* ---- the table ----------------------------------------------------------- */

typedef struct lora_table lora_table;

vllm_status lora_table_create(int32_t max_cpu_loras, lora_table **out);
/* Frees every adapter still in the table, whatever its references. */
void lora_table_free(lora_table *t);

/* Registers a (the table takes it over, also on failure); sets a->id.
 * VLLM_ERR_INVALID if the name is taken, VLLM_ERR_FULL beyond max_cpu_loras
 * registered adapters. */
vllm_status lora_table_add(lora_table *t, lora_adapter *a);
/* Unregisters name: new requests can no longer name it; its id stays
 * valid while requests hold it. VLLM_ERR_NOT_FOUND if not registered.
 * *id (if not NULL) gets its id. */
vllm_status lora_table_remove(lora_table *t, const char *name, int32_t *id);
/* The registered adapter called name with one more reference, or NULL. */
lora_adapter *lora_table_acquire(lora_table *t, const char *name);
/* Drops a reference taken by acquire; frees the adapter at zero. NULL: no-op. */
void lora_table_release(lora_table *t, lora_adapter *a);
/* Registered adapters: copies up to cap names/paths (borrowed until the
 * next remove; callers on other threads copy them at once) and returns the
 * count. */
typedef struct lora_info { char name[256]; char path[1024]; int32_t id; int32_t rank; } lora_info;
int32_t lora_table_list(lora_table *t, lora_info *out, int32_t cap);
/* Ids unregistered since the last call (at most cap into ids; the rest
 * wait for the next call); the engine drops their cached blocks. */
int32_t lora_table_take_removed(lora_table *t, int32_t *ids, int32_t cap);
/* Copies the name of the adapter with id (registered or still referenced)
 * into buf; false if none. */
bool lora_table_name(lora_table *t, int32_t id, char *buf, size_t cap);
/* True if name is registered. */
bool lora_table_has(lora_table *t, const char *name);

/* ---- one step's rows, grouped by adapter ------------------------------------ */

enum { LORA_ROWS = 8 };              /* rows per work item */

typedef struct lora_run {
    const lora_adapter *a;
    int32_t first, count;            /* rows order[first .. first + count) */
} lora_run;

typedef struct lora_batch {
    int32_t num_runs;
    lora_run *runs;                  /* (capacity) */
    int32_t *order;                  /* (tokens) token rows grouped by adapter, in token order within */
    int32_t num_rows;                /* rows with an adapter */
    int32_t cap_tokens;
    /* per-thread scratch: (nth, LORA_ROWS * (max_in + rank + max_out)) */
    float *scratch;
    int64_t scratch_stride;
    int32_t max_rank;
    const int32_t *token_seq;        /* borrowed: sequence of each token */
} lora_batch;

/* Scratch for max_tokens rows, nth threads, adapters up to max_rank on
 * model m. */
vllm_status lora_batch_init(lora_batch *lb, const model *m, int32_t max_tokens, int32_t max_rank, int nth);
void lora_batch_deinit(lora_batch *lb);
/* Resolves lora_ids[s] of the step's num_seqs sequences (token_seq[t] = the
 * sequence of token t) through t and groups the rows. An id no adapter
 * has is VLLM_ERR_NOT_FOUND. */
vllm_status lora_batch_build(lora_batch *lb, lora_table *t, const int32_t *lora_ids, int32_t num_seqs,
                             const int32_t *token_seq, int32_t num_tokens);
/* True if some run's adapter has module mod in layer. */
bool lora_batch_has(const lora_batch *lb, int32_t layer, lora_module mod);
/* y[t] += scale B (A x[t]) for every grouped row t, module mod of layer,
 * on pool (NULL: the calling thread). x (tokens, ldx), y (tokens, ldy). */
void lora_apply(lora_batch *lb, int32_t layer, lora_module mod, const float *x, int64_t ldx, float *y,
                int64_t ldy, threadpool *pool);
/* The reference: the same update with plain loops, one row at a time. */
void lora_apply_portable(const lora_batch *lb, int32_t layer, lora_module mod, const float *x, int64_t ldx,
                         float *y, int64_t ldy);

#endif

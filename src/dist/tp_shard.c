/*
 * tp_shard.c - one tensor-parallel rank's part of a model (see tp_shard.h).
 */
#include "dist/tp_shard.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/log.h"
#include "model/gguf.h"
#include "model/safetensors.h"

typedef struct shard {
    model m;                         /* first: a shard is passed around as its model */
    void **copies;                   /* (num_copies) row-parallel slices, owned */
    int32_t num_copies;
} shard;

vllm_status tp_shard_check(const model_config *c, int32_t tp) {
    if (tp < 1) return vllm_error(VLLM_ERR_INVALID, "tensor_parallel_size %d must be >= 1", tp);
    if (tp > 1 && c->num_experts)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: tensor parallelism is not supported for mixture-of-experts models",
                          c->architecture);
    if (c->num_attention_heads % tp)
        return vllm_error(VLLM_ERR_INVALID,
                          "Total number of attention heads (%d) must be divisible by tensor parallel size (%d).",
                          c->num_attention_heads, tp);
    if (c->num_key_value_heads % tp)
        return vllm_error(VLLM_ERR_INVALID,
                          "Total number of key/value heads (%d) must be divisible by tensor parallel size (%d) "
                          "(vllm.c does not replicate KV heads).",
                          c->num_key_value_heads, tp);
    if (c->intermediate_size % tp)
        return vllm_error(VLLM_ERR_INVALID, "intermediate_size (%d) must be divisible by tensor parallel size (%d).",
                          c->intermediate_size, tp);
    return VLLM_OK;
}

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of t (a 1-D bias: its
 * elements [c0, c0 + nc), r0 0 and nr 1), copied into memory the shard
 * owns; t unchanged (no data) when t has none. */
static vllm_status slice_copy(shard *s, const char *name, int32_t layer, const tensor *t, int64_t r0, int64_t nr,
                              int64_t c0, int64_t nc, tensor *out) {
    *out = *t;
    out->x16 = NULL, out->x16_bytes = 0;
    if (!t->data) return VLLM_OK;
    int64_t be = dtype_block_elems(t->type);
    if (c0 % be || nc % be)
        return vllm_error(VLLM_ERR_INVALID,
                          "layer %d %s: a tensor-parallel slice of %lld columns at %lld is not whole %s blocks "
                          "of %lld; choose a tensor_parallel_size that divides it into multiples of %lld",
                          layer, name, (long long)nc, (long long)c0, dtype_name(t->type), (long long)be,
                          (long long)be);
    int64_t cols = t->ndim == 1 ? t->shape[0] : t->shape[1];
    size_t row = dtype_row_bytes(t->type, cols), off = dtype_row_bytes(t->type, c0), len = dtype_row_bytes(t->type, nc);
    char *p = aligned_alloc(64, ((size_t)nr * len + 63) & ~(size_t)63);
    void **grown = realloc(s->copies, (size_t)(s->num_copies + 1) * sizeof *grown);
    if (grown) s->copies = grown;
    if (!p || !grown) {
        free(p);
        return vllm_error(VLLM_ERR_NOMEM, "tp shard: out of memory copying layer %d %s", layer, name);
    }
    s->copies[s->num_copies++] = p;
    for (int64_t r = 0; r < nr; r++)
        memcpy(p + (size_t)r * len, (const char *)t->data + (size_t)(r0 + r) * row + off, len);
    out->data = p;
    if (t->ndim == 1) out->shape[0] = nc;
    else out->shape[0] = nr, out->shape[1] = nc;
    return VLLM_OK;
}

/* Rows [r0, r0 + n) of t (column-parallel; a bias: its elements). */
static vllm_status rows_copy(shard *s, const char *name, int32_t layer, const tensor *t, int64_t r0, int64_t n,
                             tensor *out) {
    if (t->ndim == 1) return slice_copy(s, name, layer, t, 0, 1, r0, n, out);
    return slice_copy(s, name, layer, t, r0, n, 0, t->shape[1], out);
}

/* Columns [c0, c0 + n) of every row of t (row-parallel). */
static vllm_status cols_copy(shard *s, const char *name, int32_t layer, const tensor *t, int64_t c0, int64_t n,
                             tensor *out) {
    return slice_copy(s, name, layer, t, 0, t->shape[0], c0, n, out);
}

/* Drops m's file pages from this process's resident set: they stay in the
 * page cache, and what the shard reads later faults back in. */
static void release_file_pages(model *m) {
    for (int32_t i = 0; i < m->num_files; i++)
        if (m->files[i]->map) madvise(m->files[i]->map, m->files[i]->map_size, MADV_DONTNEED);
    if (m->gguf && m->gguf->map) madvise(m->gguf->map, m->gguf->map_size, MADV_DONTNEED);
}

vllm_status tp_shard_create(model *m, int32_t rank, int32_t tp, bool lm_head, model **out) {
    *out = NULL;
    const model_config *c = &m->config;
    vllm_status rc = tp_shard_check(c, tp);
    if (rc != VLLM_OK) return rc;
    if (rank < 0 || rank >= tp) return vllm_error(VLLM_ERR_INVALID, "tp shard: rank %d of %d", rank, tp);
    shard *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "tp shard: out of memory");
    model *d = &s->m;
    d->dir = m->dir; /* borrowed, for messages */
    d->config = m->config;
    d->gen = m->gen;
    d->config.num_attention_heads = c->num_attention_heads / tp;
    d->config.num_key_value_heads = c->num_key_value_heads / tp;
    d->config.intermediate_size = c->intermediate_size / tp;
    int64_t hd = c->head_dim, qh = d->config.num_attention_heads, kh = d->config.num_key_value_heads,
            in = d->config.intermediate_size;
    d->w.embed_tokens = m->w.embed_tokens;
    d->w.norm = m->w.norm;
    d->w.lm_head = m->w.lm_head;
    d->w.lm_head.x16 = NULL, d->w.lm_head.x16_bytes = 0;
    if (!lm_head) d->w.lm_head.data = NULL; /* only rank 0 computes logits */
    if (!(d->w.layers = calloc((size_t)c->num_hidden_layers, sizeof *d->w.layers))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "tp shard: out of memory");
        goto fail;
    }
    for (int32_t l = 0; l < c->num_hidden_layers && rc == VLLM_OK; l++) {
        const layer_weights *a = &m->w.layers[l];
        layer_weights *b = &d->w.layers[l];
        *b = *a;
        struct {
            const char *name;
            const tensor *src;
            tensor *dst;
            int64_t r0, n;
        } rows[] = {
            {"q_proj", &a->q_proj, &b->q_proj, rank * qh * hd, qh * hd},
            {"k_proj", &a->k_proj, &b->k_proj, rank * kh * hd, kh * hd},
            {"v_proj", &a->v_proj, &b->v_proj, rank * kh * hd, kh * hd},
            {"q_bias", &a->q_bias, &b->q_bias, rank * qh * hd, qh * hd},
            {"k_bias", &a->k_bias, &b->k_bias, rank * kh * hd, kh * hd},
            {"v_bias", &a->v_bias, &b->v_bias, rank * kh * hd, kh * hd},
            {"gate_proj", &a->gate_proj, &b->gate_proj, rank * in, in},
            {"up_proj", &a->up_proj, &b->up_proj, rank * in, in},
        };
        for (size_t i = 0; i < sizeof rows / sizeof rows[0] && rc == VLLM_OK; i++)
            rc = rows_copy(s, rows[i].name, l, rows[i].src, rows[i].r0, rows[i].n, rows[i].dst);
        if (rank != 0) b->o_bias.data = NULL;
        if (rc == VLLM_OK) rc = cols_copy(s, "o_proj", l, &a->o_proj, rank * qh * hd, qh * hd, &b->o_proj);
        if (rc == VLLM_OK) rc = cols_copy(s, "down_proj", l, &a->down_proj, rank * in, in, &b->down_proj);
    }
    if (rc != VLLM_OK) goto fail;
    model_free_x16(m);
    release_file_pages(m);
    model_make_x16(d);
    *out = d;
    return VLLM_OK;
fail:
    tp_shard_free(d);
    return rc;
}

void tp_shard_free(model *d) {
    if (!d) return;
    shard *s = (shard *)d;
    model_free_x16(d);
    for (int32_t i = 0; i < s->num_copies; i++) free(s->copies[i]);
    free(s->copies);
    free(d->w.layers);
    free(s);
}

size_t tp_shard_weight_bytes(const model *d) {
    size_t total = 0;
    for (int32_t l = 0; l < d->config.num_hidden_layers; l++) {
        const layer_weights *w = &d->w.layers[l];
        const tensor *t[] = {&w->q_proj, &w->k_proj, &w->v_proj, &w->o_proj, &w->gate_proj, &w->up_proj, &w->down_proj};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i]->data) total += (size_t)t[i]->shape[0] * dtype_row_bytes(t[i]->type, t[i]->shape[1]);
    }
    return total;
}

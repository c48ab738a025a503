/*
 * moe.c - the sparse MLP block of mixture-of-experts layers (see moe.h).
 *
 * One moe_forward is five stages on the runner's thread pool:
 *
 *   route    token chunks: router logits (matmul_range), softmax, top-k
 *   group    the caller alone: counting sort of the (token, expert) pairs by
 *            expert; row r of the grouped block is pair r of the sort
 *   gather   rows: xg[r] = x[token of r] (and its 8-bit quantized copy when
 *            the experts are block-quantized, quant.h)
 *   gate/up  items (active expert, row chunk, token chunk): h = silu(xg
 *            gate^T) * (xg up^T), up's block in per-thread scratch
 *   down     items likewise: xg = h down^T (xg is free again: gate/up read it)
 *   combine  token chunks: y[t] += sum of w * xg[r] over t's pairs, in
 *            increasing expert order
 *
 * The row chunks follow the runner's plan (runner.c mm_plan): ~64 KiB of
 * weight rows per item while a group has 4 tokens or more (each row chunk
 * stays in L2 while the group's token tiles reuse it), ~512 KiB streams at
 * decode, multiples of 48 rows (32 on the AMX-BF16 kernel), halved while
 * there are fewer than 4 items per thread.
 */
#include "model/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

enum {
    TOKEN_CHUNK = 64,          /* tokens per matmul item */
    ROW_ALIGN = 48,            /* row chunks: multiples of every tile height */
    ROW_ALIGN_AMX = 32,
    MAX_ROWS = 480,            /* rows per item at most (the up scratch) */
    CHUNK_BYTES = 64 << 10,
    STREAM_BYTES = 512 << 10,
    ROUTE_CHUNK = 8,           /* tokens per route / combine item */
    PARALLEL_MIN_MACS = 1 << 17,
};

struct moe {
    int32_t dim, inter, n_exp, top_k;
    bool renorm;
    int64_t max_tokens;
    int nth;
    float *logits;             /* (T, n_exp) */
    int32_t *sel;              /* (T, top_k) chosen experts, increasing */
    float *sel_w;              /* (T, top_k) their weights */
    int32_t *sel_row;          /* (T, top_k) the grouped row of each pair */
    int32_t *row_tok;          /* (T * top_k) token of each grouped row */
    int32_t *count;            /* (n_exp + 1) group offsets */
    int32_t *active;           /* (n_exp) experts with tokens, increasing */
    int32_t num_active;
    int64_t *first_item;       /* (n_exp + 1) items of active expert a */
    float *xg;                 /* (T * top_k, dim) gathered inputs, then down's outputs */
    float *h;                  /* (T * top_k, inter) */
    float *up;                 /* (nth, TOKEN_CHUNK * MAX_ROWS) */
    float *acc;                /* (nth, dim) */
    uint8_t *xq;               /* (T * top_k, xq_stride) quantized xg or h, or NULL */
    size_t xq_stride;

    /* the call being run */
    const moe_weights *w;
    const float *x;
    float *y;
    int64_t ldx, ldy, tokens;
    bool down;                 /* the matmul stage: down (else gate/up) */
    int64_t row_chunk;
};

static void *alloc_aligned(size_t n, size_t size, vllm_status *rc) {
    if (*rc) return NULL;
    size_t bytes;
    void *p = NULL;
    if (!__builtin_mul_overflow(n ? n : 1, size, &bytes) && bytes <= SIZE_MAX - 63) {
        bytes = (bytes + 63) & ~(size_t)63;
        if ((p = aligned_alloc(64, bytes))) memset(p, 0, bytes);
    }
    if (!p) *rc = vllm_error(VLLM_ERR_NOMEM, "moe: cannot allocate %zu x %zu bytes", n, size);
    return p;
}

/* True if any expert of any layer of m has a weight dtype satisfying has. */
static bool any_expert(const model *m, bool (*has)(dtype)) {
    const model_config *c = &m->config;
    for (int32_t l = 0; l < c->num_hidden_layers; l++) {
        const moe_weights *w = m->w.layers[l].moe;
        for (int32_t e = 0; w && e < c->num_experts; e++)
            if (has(w->gate[e].type) || has(w->up[e].type) || has(w->down[e].type)) return true;
    }
    return false;
}

vllm_status moe_create(const model *m, int32_t max_tokens, int nth, moe **out) {
    *out = NULL;
    const model_config *c = &m->config;
    if (c->num_experts < 1 || c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts ||
        max_tokens < 1 || nth < 1)
        return vllm_error(VLLM_ERR_INVALID, "moe: %d experts, top %d, %d tokens, %d threads", c->num_experts,
                          c->num_experts_per_tok, max_tokens, nth);
    moe *mo = calloc(1, sizeof *mo);
    if (!mo) return vllm_error(VLLM_ERR_NOMEM, "moe: out of memory");
    vllm_status rc = VLLM_OK;
    mo->dim = c->hidden_size, mo->inter = c->moe_intermediate_size;
    mo->n_exp = c->num_experts, mo->top_k = c->num_experts_per_tok;
    mo->renorm = c->norm_topk_prob;
    mo->max_tokens = max_tokens, mo->nth = nth;
    size_t T = (size_t)max_tokens, P = T * (size_t)mo->top_k, E = (size_t)mo->n_exp;
    mo->logits = alloc_aligned(T * E, sizeof(float), &rc);
    mo->sel = alloc_aligned(P, sizeof(int32_t), &rc);
    mo->sel_w = alloc_aligned(P, sizeof(float), &rc);
    mo->sel_row = alloc_aligned(P, sizeof(int32_t), &rc);
    mo->row_tok = alloc_aligned(P, sizeof(int32_t), &rc);
    mo->count = alloc_aligned(E + 1, sizeof(int32_t), &rc);
    mo->active = alloc_aligned(E, sizeof(int32_t), &rc);
    mo->first_item = alloc_aligned(E + 1, sizeof(int64_t), &rc);
    mo->xg = alloc_aligned(P * (size_t)mo->dim, sizeof(float), &rc);
    mo->h = alloc_aligned(P * (size_t)mo->inter, sizeof(float), &rc);
    mo->up = alloc_aligned((size_t)nth * TOKEN_CHUNK * MAX_ROWS, sizeof(float), &rc);
    mo->acc = alloc_aligned((size_t)nth * (size_t)mo->dim, sizeof(float), &rc);
    if (any_expert(m, quant_has_act_kernel)) {
        int64_t k = mo->dim > mo->inter ? mo->dim : mo->inter;
        mo->xq_stride = quant_act_row_bytes(k);
        mo->xq = alloc_aligned(P, mo->xq_stride, &rc);
    }
    if (rc) {
        moe_free(mo);
        return rc;
    }
    *out = mo;
    return VLLM_OK;
}

void moe_free(moe *mo) {
    if (!mo) return;
    free(mo->logits);
    free(mo->sel);
    free(mo->sel_w);
    free(mo->sel_row);
    free(mo->row_tok);
    free(mo->count);
    free(mo->active);
    free(mo->first_item);
    free(mo->xg);
    free(mo->h);
    free(mo->up);
    free(mo->acc);
    free(mo->xq);
    free(mo);
}

/* ---- routing ---------------------------------------------------------------- */

void moe_route(float *p, int32_t n, int32_t k, bool renormalize, int32_t *experts, float *weights) {
    float max = p[0];
    for (int32_t e = 1; e < n; e++) max = p[e] > max ? p[e] : max;
    float sum = 0;
    for (int32_t e = 0; e < n; e++) sum += (p[e] = expf(p[e] - max));
    for (int32_t e = 0; e < n; e++) p[e] /= sum;
    /* top-k by probability, the lower expert first among equals (the
     * selection order, largest first, is the order the sum adds them in) */
    float topsum = 0;
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j && !taken; i++) taken = experts[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        experts[j] = best;
        weights[j] = p[best];
        topsum += p[best];
    }
    if (renormalize)
        for (int32_t j = 0; j < k; j++) weights[j] /= topsum;
    /* increasing expert order (insertion sort of k pairs) */
    for (int32_t j = 1; j < k; j++)
        for (int32_t i = j; i > 0 && experts[i - 1] > experts[i]; i--) {
            int32_t te = experts[i];
            float tw = weights[i];
            experts[i] = experts[i - 1], weights[i] = weights[i - 1];
            experts[i - 1] = te, weights[i - 1] = tw;
        }
}

static void stage_route(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    moe *mo = arg;
    const tensor *r = &mo->w->router;
    matmul_args a = {.y = mo->logits, .ldy = mo->n_exp, .x = mo->x, .ldx = mo->ldx, .w = r->data,
                     .wtype = r->type, .x16 = r->x16, .n = mo->n_exp, .k = mo->dim};
    matmul_range(&a, 0, mo->n_exp, lo, hi);
    for (int64_t t = lo; t < hi; t++)
        moe_route(mo->logits + t * mo->n_exp, mo->n_exp, mo->top_k, mo->renorm, mo->sel + t * mo->top_k,
                  mo->sel_w + t * mo->top_k);
}

/* The counting sort: count[e] = first grouped row of expert e; row_tok,
 * sel_row; the active experts. */
static void group_pairs(moe *mo) {
    int32_t E = mo->n_exp, K = mo->top_k;
    int64_t P = mo->tokens * K;
    memset(mo->count, 0, (size_t)(E + 1) * sizeof *mo->count);
    for (int64_t i = 0; i < P; i++) mo->count[mo->sel[i] + 1]++;
    mo->num_active = 0;
    for (int32_t e = 0; e < E; e++) {
        if (mo->count[e + 1]) mo->active[mo->num_active++] = e;
        mo->count[e + 1] += mo->count[e];
    }
    /* fill in token order: each group lists its tokens in batch order */
    for (int64_t i = 0; i < P; i++) {
        int32_t e = mo->sel[i], r = mo->count[e]++;
        mo->row_tok[r] = (int32_t)(i / K);
        mo->sel_row[i] = r;
    }
    for (int32_t e = E; e > 0; e--) mo->count[e] = mo->count[e - 1]; /* back to first rows */
    mo->count[0] = 0;
}

/* xg[r] = x[row_tok[r]] (and its quantized copy) for grouped rows [lo, hi). */
static void stage_gather(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    moe *mo = arg;
    for (int64_t r = lo; r < hi; r++) {
        float *dst = mo->xg + r * mo->dim;
        memcpy(dst, mo->x + (int64_t)mo->row_tok[r] * mo->ldx, (size_t)mo->dim * sizeof(float));
        if (mo->xq) quant_quantize_act_row(dst, mo->xq + r * mo->xq_stride, mo->dim);
    }
}

/* xq[r] = h[r] quantized, for the down stage. */
static void stage_quantize_h(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    moe *mo = arg;
    for (int64_t r = lo; r < hi; r++)
        quant_quantize_act_row(mo->h + r * mo->inter, mo->xq + r * mo->xq_stride, mo->inter);
}

/* ---- the expert matmuls ---------------------------------------------------- */

static int32_t group_size(const moe *mo, int32_t e) { return mo->count[e + 1] - mo->count[e]; }

/* Row chunk and items of the current matmul stage (see the top). */
static void plan(moe *mo) {
    const tensor *t = mo->down ? &mo->w->down[mo->active[0]] : &mo->w->gate[mo->active[0]];
    int64_t rows = t->shape[0];
    int64_t row_bytes = (int64_t)dtype_row_bytes(t->type, t->shape[1]) * (mo->down ? 1 : 2);
    int64_t align = matmul_amx_takes(t->type) ? ROW_ALIGN_AMX : ROW_ALIGN;
    int64_t pairs = mo->tokens * mo->top_k;
    int64_t rc = (pairs < 4 * (int64_t)mo->num_active ? STREAM_BYTES : CHUNK_BYTES) / (row_bytes ? row_bytes : 1);
    rc = (rc + align - 1) / align * align;
    if (rc < align) rc = align;
    if (rc > MAX_ROWS) rc = MAX_ROWS / align * align;
    for (;;) {
        int64_t items = 0;
        for (int32_t a = 0; a < mo->num_active; a++) {
            mo->first_item[a] = items;
            items += (rows + rc - 1) / rc * ((group_size(mo, mo->active[a]) + TOKEN_CHUNK - 1) / TOKEN_CHUNK);
        }
        mo->first_item[mo->num_active] = items;
        if (items >= 4 * mo->nth || rc <= align) break;
        rc = (rc / 2 + align - 1) / align * align;
    }
    mo->row_chunk = rc;
}

static matmul_args expert_args(const moe *mo, const tensor *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                               int64_t r0) {
    matmul_args a = {.y = y, .ldy = ldy, .x = x + r0 * ldx, .ldx = ldx, .w = w->data,
                     .wtype = w->type, .x16 = w->x16, .n = w->shape[0], .k = w->shape[1]};
    if (y) a.y = y + r0 * ldy;
    if (mo->xq && quant_has_act_kernel(w->type)) a.xq = mo->xq + r0 * mo->xq_stride, a.ldxq = (int64_t)mo->xq_stride;
    return a;
}

static void stage_experts(void *arg, int64_t lo, int64_t hi, int ith) {
    moe *mo = arg;
    for (int64_t i = lo; i < hi; i++) {
        int32_t a = 0, b = mo->num_active; /* the active expert of item i: binary search */
        while (b - a > 1) {
            int32_t mid = (a + b) / 2;
            if (mo->first_item[mid] <= i) a = mid;
            else b = mid;
        }
        int32_t e = mo->active[a], r0 = mo->count[e], n_tok = group_size(mo, e);
        int64_t tchunks = (n_tok + TOKEN_CHUNK - 1) / TOKEN_CHUNK, local = i - mo->first_item[a];
        int64_t t0 = local % tchunks * TOKEN_CHUNK, t1 = t0 + TOKEN_CHUNK < n_tok ? t0 + TOKEN_CHUNK : n_tok;
        if (mo->down) {
            matmul_args d = expert_args(mo, &mo->w->down[e], mo->h, mo->inter, mo->xg, mo->dim, r0);
            int64_t n0 = local / tchunks * mo->row_chunk, n1 = n0 + mo->row_chunk < d.n ? n0 + mo->row_chunk : d.n;
            matmul_range(&d, n0, n1, t0, t1);
            continue;
        }
        matmul_args g = expert_args(mo, &mo->w->gate[e], mo->xg, mo->dim, mo->h, mo->inter, r0);
        int64_t n0 = local / tchunks * mo->row_chunk, n1 = n0 + mo->row_chunk < g.n ? n0 + mo->row_chunk : g.n;
        matmul_range(&g, n0, n1, t0, t1);
        /* up rows n0..n1 of tokens t0..t1 into this thread's (t1 - t0, n1 - n0) scratch */
        matmul_args u = expert_args(mo, &mo->w->up[e], mo->xg, mo->dim, NULL, 0, r0 + t0);
        u.w = (const char *)u.w + (size_t)n0 * dtype_row_bytes(u.wtype, u.k);
        u.x16 = quant_x16_rows(u.x16, u.wtype, u.k, n0);
        u.y = mo->up + (size_t)ith * TOKEN_CHUNK * MAX_ROWS;
        u.ldy = u.n = n1 - n0;
        matmul_range(&u, 0, n1 - n0, 0, t1 - t0);
        for (int64_t t = t0; t < t1; t++) act_swiglu(g.y + t * g.ldy + n0, u.y + (t - t0) * u.ldy, n1 - n0);
    }
}

/* y[t] += sum of t's experts' outputs times their weights, in expert order. */
static void stage_combine(void *arg, int64_t lo, int64_t hi, int ith) {
    moe *mo = arg;
    float *acc = mo->acc + (size_t)ith * (size_t)mo->dim;
    for (int64_t t = lo; t < hi; t++) {
        memset(acc, 0, (size_t)mo->dim * sizeof *acc);
        for (int32_t j = 0; j < mo->top_k; j++) {
            float wt = mo->sel_w[t * mo->top_k + j];
            const float *o = mo->xg + (int64_t)mo->sel_row[t * mo->top_k + j] * mo->dim;
            for (int32_t i = 0; i < mo->dim; i++) acc[i] += o[i] * wt;
        }
        float *y = mo->y + t * mo->ldy;
        for (int32_t i = 0; i < mo->dim; i++) y[i] += acc[i];
    }
}

static void run_experts(moe *mo, threadpool *pool, bool down) {
    mo->down = down;
    plan(mo);
    int64_t items = mo->first_item[mo->num_active];
    int64_t macs = mo->tokens * mo->top_k * (int64_t)mo->dim * mo->inter * (down ? 1 : 2);
    threadpool_run(pool, stage_experts, mo, items, macs < PARALLEL_MIN_MACS ? items : 1);
}

void moe_forward(moe *mo, const moe_weights *w, const float *x, int64_t ldx, float *y, int64_t ldy, int64_t tokens,
                 threadpool *pool) {
    if (tokens <= 0) return;
    mo->w = w, mo->x = x, mo->y = y, mo->ldx = ldx, mo->ldy = ldy, mo->tokens = tokens;
    int64_t pairs = tokens * mo->top_k;
    threadpool_run(pool, stage_route, mo, tokens, ROUTE_CHUNK);
    group_pairs(mo);
    threadpool_run(pool, stage_gather, mo, pairs, ROUTE_CHUNK);
    run_experts(mo, pool, false);
    if (mo->xq) threadpool_run(pool, stage_quantize_h, mo, pairs, ROUTE_CHUNK);
    run_experts(mo, pool, true);
    threadpool_run(pool, stage_combine, mo, tokens, ROUTE_CHUNK);
    mo->w = NULL, mo->x = NULL, mo->y = NULL;
}

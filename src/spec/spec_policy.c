/*
 * spec_policy.c - see spec_policy.h.
 */
#include "spec/spec_policy.h"

#include <stdlib.h>

#include "base/dtype.h"
#include "model/model.h"

int32_t spec_policy_num_drafts(const spec_policy_seq *s, int32_t k, int32_t num_output) {
    int32_t n = k;
    if (s->num_verified > 0) {
        if (s->mean_accepted < 0.25f && num_output % SPEC_POLICY_PROBE_EVERY != 0) return 0;
        if (s->limit < n) n = s->limit;
    }
    return n > 0 ? n : 0;
}

void spec_policy_update(spec_policy_seq *s, int32_t num_drafts, int32_t num_accepted) {
    if (num_drafts <= 0) return;
    s->mean_accepted = s->num_verified == 0 ? (float)num_accepted : 0.5f * s->mean_accepted + 0.5f * (float)num_accepted;
    s->num_verified++;
    s->hits = 0.5f * s->hits + (float)num_accepted;
    s->tries = 0.5f * s->tries + (float)num_accepted + (num_accepted < num_drafts ? 1.0f : 0.0f);
    if (num_accepted >= num_drafts) { /* every draft accepted: twice as many next (kept if more) */
        int32_t twice = num_drafts > SPEC_POLICY_MAX_K / 2 ? SPEC_POLICY_MAX_K : 2 * num_drafts;
        if (s->limit < twice) s->limit = twice;
    } else {
        s->limit = (int32_t)s->mean_accepted + 1;
    }
}

/* Bytes and parameters of the matmul weights a forward reads (the
 * embedding table is a gather, unless tied to lm_head). */
static void weight_size(const model *m, double *bytes, double *params) {
    *bytes = *params = 0.0;
    const tensor *t[8];
    for (int32_t l = 0; l <= m->config.num_hidden_layers; l++) {
        int32_t n = 0;
        if (l == m->config.num_hidden_layers) {
            t[n++] = &m->w.lm_head;
        } else {
            const layer_weights *lw = &m->w.layers[l];
            t[n++] = &lw->q_proj, t[n++] = &lw->k_proj, t[n++] = &lw->v_proj, t[n++] = &lw->o_proj;
            t[n++] = &lw->gate_proj, t[n++] = &lw->up_proj, t[n++] = &lw->down_proj;
        }
        for (int32_t i = 0; i < n; i++) {
            if (!t[i]->data && !t[i]->x16) continue;
            int64_t rows = t[i]->ndim == 2 ? t[i]->shape[0] : 1, cols = t[i]->shape[t[i]->ndim == 2 ? 1 : 0];
            *bytes += (double)rows * (double)dtype_row_bytes(t[i]->type, cols);
            *params += (double)rows * (double)cols;
        }
    }
}

/* What a read of weights this large costs against one from memory: weights
 * that stay in the caches between steps are read ~10x faster. */
static double cached(double bytes) { return bytes <= SPEC_POLICY_CACHED_BYTES ? 0.1 : 1.0; }

spec_policy_cost spec_policy_cost_of(const model *target, const model *draft) {
    spec_policy_cost c = {0};
    double bt, pt;
    weight_size(target, &bt, &pt);
    if (pt <= 0.0) return c;
    c.weight_rows = cached(bt) * SPEC_POLICY_FLOPS_PER_BYTE * bt / (2.0 * pt);
    const char *dbg = getenv("VLLMC_SPEC_WEIGHT_ROWS"); /* tuning: w by hand */
    if (dbg && atof(dbg) > 0.0) c.weight_rows = atof(dbg);
    if (draft) {
        double bd, pd;
        weight_size(draft, &bd, &pd);
        c.draft_weight_rows = cached(bd) * SPEC_POLICY_FLOPS_PER_BYTE * bd / (2.0 * pt);
        c.draft_row = pd / pt;
    }
    return c;
}

void spec_policy_batch_init(spec_policy_batch *b, int32_t k) {
    b->k = k < 0 ? 0 : k > SPEC_POLICY_MAX_K ? SPEC_POLICY_MAX_K : k;
    b->num = 0;
    b->catchup = 0.0;
    for (int32_t K = 0; K <= b->k; K++) b->drafts[K] = b->accepted[K] = 0.0;
}

void spec_policy_batch_add(spec_policy_batch *b, const spec_policy_seq *s, int32_t own, int32_t num_tokens,
                           int32_t room) {
    if (own < 1) return;
    b->num++;
    int32_t lag = num_tokens - s->proposed_at, h = room < SPEC_POLICY_HORIZON ? room : SPEC_POLICY_HORIZON;
    if (lag > 0) b->catchup += (double)lag / (h > 1 ? h : 1);
    for (int32_t K = 1; K <= b->k; K++) {
        int32_t n = K < own ? K : own;
        /* no record yet, or a probe: the prior (spec_policy.h) */
        double p = s->num_verified > 0 && s->mean_accepted >= 0.25f && s->tries > 0.0f ? s->hits / s->tries
                                                                                     : SPEC_POLICY_PRIOR;
        double a = 0.0, pj = 1.0;
        for (int32_t j = 0; j < n; j++) a += (pj *= p);
        b->drafts[K] += n;
        b->accepted[K] += a;
    }
}

int32_t spec_policy_batch_k(const spec_policy_batch *b, const spec_policy_cost *c, int32_t num_decoding) {
    if (b->num == 0) return 0;
    double R = num_decoding > b->num ? num_decoding : b->num;
    double base = R / (c->weight_rows + R), best = base * SPEC_POLICY_MIN_GAIN;
    int32_t bestk = 0;
    for (int32_t K = 1; K <= b->k; K++) {
        double cost = c->weight_rows + R + b->drafts[K] +
                      (c->draft_row > 0.0 || c->draft_weight_rows > 0.0
                           ? K * c->draft_weight_rows + c->draft_row * (b->drafts[K] + b->accepted[K] + b->catchup)
                           : 0.0);
        double rate = (R + b->accepted[K]) / cost;
        if (rate > best) best = rate, bestk = K;
    }
    return bestk;
}

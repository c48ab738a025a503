/*
 * draft_model.c - see draft_model.h.
 */
#include "spec/draft_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/map.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/runner.h"
#include "model/step_batch.h"

/* One sequence's draft cache: the tokens whose K/V it holds, and its blocks. */
typedef struct dseq {
    map_node by_key;
    char *key;                       /* "<request id>\x1f<index>" */
    int32_t *tokens;                 /* (computed) what the draft KV holds, position by position */
    int32_t computed;
    size_t cap_tokens;
    int32_t *blocks;                 /* (num_blocks) */
    int32_t num_blocks;
    size_t cap_blocks;
    float *q;                        /* (num_q, vocab): the last sampled proposal's distributions */
    int32_t *q_drafts;               /* (num_q) and its drafts */
    int32_t num_q;                   /* 0: the last proposal was greedy */
    size_t cap_q, cap_q_drafts;
} dseq;

enum { DRAFT_MAX_SEQS = 64 }; /* sequences per draft forward */

/* One sequence's proposal in progress (propose_batch). */
typedef struct djob {
    spec_request *req;
    dseq *s;
    int32_t keep;                    /* tokens of the draft cache kept */
    sampler_rng rng;
    bool live;                       /* still drafting */
} djob;

struct draft_model {
    model *m;
    runner *r;
    step_builder *sb;
    draft_model_config cfg;
    float *logits;                   /* (DRAFT_MAX_SEQS, vocab) */
    djob *jobs;                      /* (DRAFT_MAX_SEQS) */
    int32_t *free_blocks;            /* a stack */
    int32_t num_free;
    map seqs;
    int32_t *scratch;                /* (max_model_len) tokens to feed */
    void *sample_scratch;            /* sampler_scratch_bytes(vocab) */
};

vllm_status draft_model_create(const draft_model_config *cfg, draft_model **out) {
    *out = NULL;
    draft_model *d = calloc(1, sizeof *d);
    if (!d) return vllm_error(VLLM_ERR_NOMEM, "draft model: out of memory");
    d->cfg = *cfg;
    map_init(&d->seqs);
    vllm_status rc = model_load(cfg->path, &d->m);
    if (rc) {
        vllm_error_prefix("speculative_config.model");
        goto fail;
    }
    const model_config *mc = &d->m->config;
    if (mc->vocab_size != cfg->vocab_size) {
        rc = vllm_error(VLLM_ERR_INVALID, "speculative_config.model %s: its vocabulary has %d tokens, the "
                        "target's %d: a draft model must share the target's tokenizer", cfg->path,
                        mc->vocab_size, cfg->vocab_size);
        goto fail;
    }
    kv_layout l;
    kv_layout_init(&l, mc);
    if (l.num_groups > 1) {
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "speculative_config.model %s: a draft model with sliding-window "
                        "layers is not supported", cfg->path);
        goto fail;
    }
    runner_config rcfg = {.num_blocks = cfg->num_blocks,
                          .block_size = cfg->block_size,
                          .max_num_batched_tokens = cfg->max_model_len,
                          .max_num_seqs = DRAFT_MAX_SEQS,
                          .num_threads = cfg->num_threads,
                          .kv_cache_dtype = cfg->kv_cache_dtype,
                          .shared_pool = cfg->pool};
    if ((rc = runner_create(d->m, &rcfg, &d->r))) goto fail;
    int32_t max_blocks = (cfg->max_model_len + cfg->block_size - 1) / cfg->block_size + 1;
    step_builder_config bc = {.max_tokens = cfg->max_model_len,
                              .max_seqs = DRAFT_MAX_SEQS,
                              .max_scored = DRAFT_MAX_SEQS,
                              .max_copies = 0,
                              .max_blocks_per_seq = max_blocks,
                              .block_size = cfg->block_size,
                              .num_kv_groups = 1};
    if ((rc = step_builder_create(&bc, &d->sb))) goto fail;
    d->logits = malloc((size_t)DRAFT_MAX_SEQS * (size_t)mc->vocab_size * sizeof *d->logits);
    d->jobs = malloc((size_t)DRAFT_MAX_SEQS * sizeof *d->jobs);
    d->free_blocks = malloc((size_t)cfg->num_blocks * sizeof *d->free_blocks);
    d->scratch = malloc((size_t)cfg->max_model_len * sizeof *d->scratch);
    d->sample_scratch = malloc(sampler_scratch_bytes(mc->vocab_size));
    if (!d->logits || !d->jobs || !d->free_blocks || !d->scratch || !d->sample_scratch) {
        rc = vllm_error(VLLM_ERR_NOMEM, "draft model: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < cfg->num_blocks; i++) d->free_blocks[i] = cfg->num_blocks - 1 - i;
    d->num_free = cfg->num_blocks;
    log_info("speculative decoding: draft model %s (%d layers, hidden %d), %d KV blocks of its own", cfg->path,
             mc->num_hidden_layers, mc->hidden_size, cfg->num_blocks);
    *out = d;
    return VLLM_OK;
fail:
    draft_model_free(d);
    return rc;
}

static void dseq_free(draft_model *d, dseq *s) {
    for (int32_t i = 0; i < s->num_blocks; i++) d->free_blocks[d->num_free++] = s->blocks[i];
    free(s->key);
    free(s->tokens);
    free(s->blocks);
    free(s->q);
    free(s->q_drafts);
    free(s);
}

void draft_model_free(draft_model *d) {
    if (!d) return;
    for (map_node *n = map_first(&d->seqs), *next; n; n = next) {
        next = map_next(&d->seqs, n);
        map_remove(&d->seqs, n);
        dseq_free(d, map_entry(n, dseq, by_key));
    }
    map_deinit(&d->seqs);
    step_builder_free(d->sb);
    runner_free(d->r);
    model_free(d->m);
    free(d->logits);
    free(d->free_blocks);
    free(d->scratch);
    free(d->sample_scratch);
    free(d->jobs);
    free(d);
}

static void seq_key(const char *request_id, int32_t index, char *buf, size_t cap) {
    snprintf(buf, cap, "%s\x1f%d", request_id, index);
}

static dseq *find_or_add(draft_model *d, const char *request_id, int32_t index) {
    char key[320];
    seq_key(request_id, index, key, sizeof key);
    map_node *n = map_find(&d->seqs, key);
    if (n) return map_entry(n, dseq, by_key);
    dseq *s = calloc(1, sizeof *s);
    if (!s || !(s->key = strdup(key)) || map_insert(&d->seqs, &s->by_key, s->key)) {
        if (s) free(s->key);
        free(s);
        return NULL;
    }
    return s;
}

/* Blocks for positions [0, len); false when the pool cannot give them. */
static bool ensure_blocks(draft_model *d, dseq *s, int32_t len) {
    int32_t need = (len + d->cfg.block_size - 1) / d->cfg.block_size;
    if (need <= s->num_blocks) return true;
    if (need - s->num_blocks > d->num_free) return false;
    if (buf_grow((void **)&s->blocks, &s->cap_blocks, (size_t)need, sizeof *s->blocks)) return false;
    while (s->num_blocks < need) s->blocks[s->num_blocks++] = d->free_blocks[--d->num_free];
    return true;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* The next draft after tokens[0, n) from logits (the draft's row, scratch):
 * the argmax, or (sampling a request that is not greedy) a draw from q, the
 * draft's distribution under the request's sampling parameters, kept in
 * s->q row j. -1 if the parameters leave no token. */
static int32_t next_draft(draft_model *d, dseq *s, const spec_seq_view *v, float *logits, int32_t n, int32_t j,
                          sampler_rng *rng) {
    int32_t V = d->cfg.vocab_size;
    if (!d->cfg.sample || !v->params || sampler_is_greedy(v->params)) return argmax(logits, V);
    float *q = s->q + (size_t)j * (size_t)V;
    sample_history h = {.prompt_ids = s->tokens,
                        .num_prompt = v->num_prompt,
                        .output_ids = s->tokens + v->num_prompt,
                        .num_output = n - v->num_prompt};
    if (sampler_probs(v->params, &h, NULL, 0, logits, V, d->sample_scratch, q) != VLLM_OK) return -1;
    double u = sampler_rng_uniform(rng), acc = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < V; i++) {
        if (q[i] <= 0.0f) continue;
        acc += q[i];
        last = i;
        if (u < acc) break;
    }
    if (last >= 0) {
        s->q_drafts[j] = last;
        s->num_q = j + 1;
    }
    return last;
}

/* Sets up job j for req: the draft cache's kept prefix, room for what this
 * call adds, the sequence's tokens, the generator; false: no drafts. */
static bool job_start(draft_model *d, djob *j, spec_request *req) {
    const spec_seq_view *q = &req->view;
    int32_t V = d->cfg.vocab_size, max = req->max_drafts;
    if (q->num_tokens + max > d->cfg.max_model_len) max = d->cfg.max_model_len - q->num_tokens;
    req->num_drafts = 0;
    *j = (djob){.req = req};
    if (max <= 0 || q->num_tokens < 1) return false;
    req->max_drafts = max;
    dseq *s = j->s = find_or_add(d, q->request_id, q->index);
    if (!s) return false;
    s->num_q = 0;
    int32_t keep = 0, lim = s->computed < q->num_tokens - 1 ? s->computed : q->num_tokens - 1;
    while (keep < lim && s->tokens[keep] == q->tokens[keep]) keep++;
    int32_t total = q->num_tokens + max; /* tokens (and drafts) this call sees */
    s->computed = keep;
    if (!ensure_blocks(d, s, total - 1) ||
        buf_grow((void **)&s->tokens, &s->cap_tokens, (size_t)total, sizeof *s->tokens) ||
        (d->cfg.sample && (buf_grow((void **)&s->q, &s->cap_q, (size_t)max * (size_t)V, sizeof *s->q) ||
                           buf_grow((void **)&s->q_drafts, &s->cap_q_drafts, (size_t)max, sizeof *s->q_drafts))))
        return false;
    /* the draft's own generator: a function of the sequence's (its seed and
     * its draws so far) and the position, so seeded requests repeat */
    if (q->rng) {
        uint64_t x = (uint64_t)q->num_tokens * 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < 4; i++) x = (x ^ q->rng->s[i]) * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
        sampler_rng_seed(&j->rng, x);
    }
    memcpy(s->tokens + keep, q->tokens + keep, (size_t)(q->num_tokens - keep) * sizeof *s->tokens);
    j->keep = keep;
    j->live = true;
    return true;
}

/* One draft forward over jobs[0, n) (all live): the first one per job
 * catches its cache up with the sequence, later ones feed its last draft;
 * then each job's next draft. A forward that fails ends those jobs. */
static void step_jobs(draft_model *d, djob **jobs, int32_t n, bool first) {
    step_builder_reset(d->sb);
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) {
        djob *j = jobs[i];
        dseq *s = j->s;
        const spec_seq_view *q = &j->req->view;
        if (first)
            ok = step_builder_add_seq(d->sb, q->tokens + j->keep, q->num_tokens - j->keep, j->keep, s->blocks,
                                      s->num_blocks, s->num_blocks, 1, 0) == VLLM_OK;
        else
            ok = step_builder_add_seq(d->sb, &s->tokens[s->computed], 1, s->computed, s->blocks, s->num_blocks,
                                      s->num_blocks, 1, 0) == VLLM_OK;
    }
    if (!ok || runner_forward(d->r, step_builder_batch(d->sb), d->logits) != VLLM_OK) {
        log_warn("draft model: %s", vllm_errmsg());
        for (int32_t i = 0; i < n; i++) jobs[i]->live = false;
        return;
    }
    int32_t V = d->cfg.vocab_size;
    for (int32_t i = 0; i < n; i++) {
        djob *j = jobs[i];
        dseq *s = j->s;
        spec_request *r = j->req;
        s->computed = first ? r->view.num_tokens : s->computed + 1;
        int32_t t = next_draft(d, s, &r->view, d->logits + (size_t)i * (size_t)V, s->computed, r->num_drafts,
                               &j->rng);
        if (t < 0) {
            j->live = false;
            continue;
        }
        r->drafts[r->num_drafts++] = t;
        s->tokens[s->computed] = t;
        if (r->num_drafts == r->max_drafts) j->live = false;
    }
}

/* Proposes for reqs[0, n), at most DRAFT_MAX_SEQS of them per forward and
 * the first forward's tokens within max_model_len: one forward per draft
 * position for all of them. */
static void propose_batch(void *ud, spec_request *reqs, int32_t n) {
    draft_model *d = ud;
    djob *live[DRAFT_MAX_SEQS];
    for (int32_t i0 = 0; i0 < n; i0 += DRAFT_MAX_SEQS) {
        int32_t m = n - i0 < DRAFT_MAX_SEQS ? n - i0 : DRAFT_MAX_SEQS, nl = 0, tokens = 0;
        for (int32_t i = 0; i < m; i++) {
            djob *j = &d->jobs[i];
            if (!job_start(d, j, &reqs[i0 + i])) continue;
            int32_t cnt = j->req->view.num_tokens - j->keep;
            if (nl > 0 && tokens + cnt > d->cfg.max_model_len) { /* the first forward's token budget */
                step_jobs(d, live, nl, true);
                nl = tokens = 0;
            }
            live[nl++] = j;
            tokens += cnt;
        }
        if (nl > 0) step_jobs(d, live, nl, true);
        for (;;) {
            nl = 0;
            for (int32_t i = 0; i < m; i++)
                if (d->jobs[i].live) live[nl++] = &d->jobs[i];
            if (nl == 0) break;
            step_jobs(d, live, nl, false);
        }
    }
}

static int32_t propose(void *ud, const spec_seq_view *q, int32_t max_drafts, int32_t *drafts) {
    spec_request r = {.view = *q, .max_drafts = max_drafts, .drafts = drafts};
    propose_batch(ud, &r, 1);
    return r.num_drafts;
}

static const float *draft_probs(void *ud, const char *request_id, int32_t index, const int32_t *drafts,
                                int32_t num_drafts) {
    draft_model *d = ud;
    char key[320];
    seq_key(request_id, index, key, sizeof key);
    map_node *n = map_find(&d->seqs, key);
    if (!n || num_drafts <= 0) return NULL;
    dseq *s = map_entry(n, dseq, by_key);
    if (s->num_q < num_drafts || memcmp(s->q_drafts, drafts, (size_t)num_drafts * sizeof *drafts)) return NULL;
    return s->q;
}

static void release(void *ud, const char *request_id, int32_t index) {
    draft_model *d = ud;
    char key[320];
    seq_key(request_id, index, key, sizeof key);
    map_node *n = map_find(&d->seqs, key);
    if (!n) return;
    map_remove(&d->seqs, n);
    dseq_free(d, map_entry(n, dseq, by_key));
}

spec_proposer draft_model_as_proposer(draft_model *d) {
    return (spec_proposer){.propose = propose,
                           .propose_batch = propose_batch,
                           .release = release,
                           .draft_probs = draft_probs,
                           .ud = d};
}

const model *draft_model_model(const draft_model *d) { return d->m; }

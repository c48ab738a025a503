/*
 * request.c - creating and freeing requests and their sequences; the stop
 * check. One allocation per array, all made when the request is added.
 */
#include "engine/request.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "model/lora.h"
#include "base/error.h"

void request_free(request *r) {
    if (!r) return;
    if (r->lora) lora_table_release(r->loras, r->lora);
    if (r->seqs)
        for (int32_t i = 0; i < r->n; i++) {
            free(r->seqs[i].tokens);
            free(r->seqs[i].block_ids);
            free(r->seqs[i].kv_groups);
            free(r->seqs[i].block_hashes);
            st_matcher_free(r->seqs[i].matcher);
        }
    free(r->seqs);
    if (r->grammar) grammar_cache_entry_unref(r->grammars, r->grammar);
    free(r->error);
    free(r->owned_ids);
    block_pool_salt_unref(r->salt);
    free(r->id);
    free(r);
}

vllm_status request_create(const char *id, const int32_t *prompt_ids, int32_t num_prompt_ids,
                           const vllm_sampling_params *sp, const vllm_request_opts *opts,
                           int32_t max_model_len, int32_t block_size, int32_t num_kv_groups,
                           uint64_t default_seed, uint64_t serial, request **out) {
    *out = NULL;
    request *r = calloc(1, sizeof *r);
    if (!r) goto nomem;
    list_init(&r->node);
    r->id = strdup(id);
    r->n = sp->n > 0 ? sp->n : 1;
    r->seqs = calloc((size_t)r->n, sizeof *r->seqs);
    if (!r->id || !r->seqs) goto nomem;
    r->num_prompt_tokens = num_prompt_ids;
    r->params = *sp;
    /* the params' lists, owned: allowed ids, then bad words' ids, then their lengths */
    int64_t nbad = 0;
    for (int32_t i = 0; i < sp->num_bad_words; i++) nbad += sp->bad_words_lens[i];
    int64_t nown = (int64_t)sp->num_allowed_token_ids + nbad + sp->num_bad_words;
    if (nown > 0) {
        if (!(r->owned_ids = malloc((size_t)nown * sizeof *r->owned_ids))) goto nomem;
        int32_t *a = r->owned_ids, *b = a + sp->num_allowed_token_ids, *l = b + nbad;
        if (sp->num_allowed_token_ids) memcpy(a, sp->allowed_token_ids, (size_t)sp->num_allowed_token_ids * sizeof *a);
        if (nbad) memcpy(b, sp->bad_words_ids, (size_t)nbad * sizeof *b);
        if (sp->num_bad_words) memcpy(l, sp->bad_words_lens, (size_t)sp->num_bad_words * sizeof *l);
        r->params.allowed_token_ids = sp->num_allowed_token_ids ? a : NULL;
        r->params.bad_words_ids = nbad ? b : NULL;
        r->params.bad_words_lens = sp->num_bad_words ? l : NULL;
    }
    /* room left in the model after the prompt; at least one token is sampled */
    int32_t room = max_model_len - num_prompt_ids;
    if (room < 1) room = 1;
    r->max_tokens = sp->max_tokens < 0 || sp->max_tokens > room ? room : sp->max_tokens;
    if (r->max_tokens < 1) r->max_tokens = 1;
    if (opts) {
        r->priority = opts->priority;
        r->arrival_time = opts->arrival_time;
        if (opts->cache_salt && opts->cache_salt[0]) {
            r->salt = block_pool_salt_create(opts->cache_salt, strlen(opts->cache_salt));
            if (!r->salt) goto nomem;
        }
    }
    r->serial = serial;
    r->block_size = block_size;
    r->num_kv_groups = num_kv_groups > 0 ? num_kv_groups : 1;
    r->forked = r->n == 1;
    r->num_unfinished = r->n;

    int32_t cap = num_prompt_ids + r->max_tokens;
    int32_t max_blocks = (cap + block_size - 1) / block_size;
    for (int32_t i = 0; i < r->n; i++) {
        seq *q = &r->seqs[i];
        list_init(&q->node);
        q->req = r;
        q->index = i;
        q->status = i == 0 ? SEQ_STATUS_WAITING : SEQ_STATUS_UNFORKED;
        q->cap_tokens = cap;
        q->max_blocks = max_blocks;
        q->tokens = malloc((size_t)cap * sizeof *q->tokens);
        q->block_ids = malloc((size_t)max_blocks * (size_t)r->num_kv_groups * sizeof *q->block_ids);
        q->kv_groups = calloc((size_t)r->num_kv_groups, sizeof *q->kv_groups);
        q->block_hashes = malloc((size_t)max_blocks * sizeof *q->block_hashes);
        if (!q->tokens || !q->block_ids || !q->kv_groups || !q->block_hashes) goto nomem;
        for (int32_t g = 0; g < r->num_kv_groups; g++) q->kv_groups[g].cache_parent = -1;
        memcpy(q->tokens, prompt_ids, (size_t)num_prompt_ids * sizeof *prompt_ids);
        q->num_tokens = num_prompt_ids;
        q->stop_token_id = -1;
        q->step_slot = -1;
        q->step_prompt_lps = -1;
        q->prompt_lps_done = 0;
        sampler_rng_seed_request(&q->rng, sp, default_seed, id, i);
    }
    *out = r;
    return VLLM_OK;
nomem:
    request_free(r);
    return vllm_error(VLLM_ERR_NOMEM, "request '%s': out of memory", id);
}

vllm_status request_attach_matchers(request *r) {
    st_grammar *g = grammar_cache_entry_grammar(r->grammar);
    if (!g) return vllm_error(VLLM_ERR_INVALID, "request '%s': its grammar is not ready", r->id);
    vllm_status rc = r->seqs[0].matcher ? VLLM_OK : st_matcher_new(g, &r->seqs[0].matcher);
    for (int32_t i = 1; i < r->n && rc == VLLM_OK; i++)
        if (!r->seqs[i].matcher) rc = st_matcher_fork(r->seqs[0].matcher, &r->seqs[i].matcher);
    if (rc != VLLM_OK) vllm_error_prefix("request '%s'", r->id);
    return rc;
}

int seq_compare(const seq *a, const seq *b, bool use_priority) {
    const request *x = a->req, *y = b->req;
    if (use_priority && x->priority != y->priority) return x->priority < y->priority ? -1 : 1;
    if (x->arrival_time != y->arrival_time) return x->arrival_time < y->arrival_time ? -1 : 1;
    if (x->serial != y->serial) return x->serial < y->serial ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Group tables of max_blocks entries each grown to `blocks` each: one
 * reallocation, then the tables moved apart (last first, so none is
 * overwritten before it moves). */
static vllm_status grow_tables(seq *q, size_t blocks) {
    size_t G = (size_t)q->req->num_kv_groups, old = (size_t)q->max_blocks;
    if (blocks <= old) return VLLM_OK;
    int32_t *t = realloc(q->block_ids, blocks * G * sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "out of memory for %zu block table entries", blocks * G);
    for (size_t g = G; g-- > 1;) memmove(t + g * blocks, t + g * old, old * sizeof *t);
    q->block_ids = t;
    return VLLM_OK;
}

/* cap_tokens is what both the token array and the block tables can hold. */
vllm_status seq_reserve(seq *q, int32_t num_tokens) {
    if (num_tokens <= q->cap_tokens) return VLLM_OK;
    size_t bs = (size_t)q->req->block_size, blocks = ((size_t)num_tokens + bs - 1) / bs;
    size_t hashes = (size_t)q->max_blocks, cap = (size_t)q->cap_tokens;
    vllm_status rc;
    if ((rc = buf_grow((void **)&q->block_hashes, &hashes, blocks, sizeof *q->block_hashes)) == VLLM_OK &&
        (rc = grow_tables(q, hashes)) == VLLM_OK) {
        q->max_blocks = (int32_t)hashes;
        if ((rc = buf_grow((void **)&q->tokens, &cap, (size_t)num_tokens, sizeof *q->tokens)) == VLLM_OK) {
            size_t covered = (size_t)q->max_blocks * bs;
            q->cap_tokens = (int32_t)(cap < covered ? cap : covered);
        }
    }
    if (rc != VLLM_OK) vllm_error_prefix("request '%s'", q->req->id);
    return rc;
}

void seq_clear_news(seq *q) {
    q->in_news = false;
    q->news_next = NULL;
    q->num_events = 0;
    q->num_new_output = 0;
}

vllm_status seq_append_token(seq *q, int32_t token_id) {
    vllm_status rc = seq_reserve(q, q->num_tokens + 1);
    if (rc != VLLM_OK) return rc;
    q->tokens[q->num_tokens++] = token_id;
    q->num_new_output++;
    return VLLM_OK;
}

vllm_finish_reason seq_check_stop(const seq *q, int32_t max_model_len, const int32_t *eos_ids,
                                  int32_t num_eos, int32_t *stop_token_id) {
    const request *r = q->req;
    int32_t num_out = seq_num_output_tokens(q);
    *stop_token_id = -1;
    if (num_out >= r->params.min_tokens) {
        int32_t last = q->tokens[q->num_tokens - 1];
        if (!r->params.ignore_eos)
            for (int32_t i = 0; i < num_eos; i++)
                if (last == eos_ids[i]) {
                    *stop_token_id = last;
                    return VLLM_FINISH_STOP;
                }
        for (int32_t i = 0; i < r->params.num_stop_token_ids; i++)
            if (last == r->params.stop_token_ids[i]) {
                *stop_token_id = last;
                return VLLM_FINISH_STOP;
            }
    }
    if (q->num_tokens >= max_model_len || num_out >= r->max_tokens) return VLLM_FINISH_LENGTH;
    return VLLM_FINISH_NONE;
}

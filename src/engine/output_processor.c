/*
 * output_processor.c - see output_processor.h for the rules a client sees.
 *
 * State: a map from request id to an op_request (base/map.h), each holding
 * its n sequences' detokenizers and stop matchers. A request leaves the map
 * when it is done, but its memory lives on a retired list until the next
 * call, because the deltas and the done list of this call point into it
 * (its id, its stop strings).
 *
 * Results: one set of arenas per processor, reused by every call, so a
 * steady front end allocates nothing per step once they have grown. Before
 * any state changes, every arena whose size is known from the step (deltas,
 * stops, done, token ids, logprob entries: at most one per output, per new
 * token, per engine logprob) is grown; only the text arena grows as text
 * arrives, so deltas record text offsets and get their pointers at the end.
 *
 * Rejected: keeping token_ids as pointers into the engine's step output
 * (borrowed until the next engine step, a different lifetime from the
 * rest of the result); decoding logprob tokens per step (a cache per
 * vocabulary id decodes each once: tokenizers are immutable).
 */
#include "engine/output_processor.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/map.h"
#include "sample/stop.h"

const char *vllm_finish_reason_str(vllm_finish_reason r) {
    switch (r) {
    case VLLM_FINISH_STOP: return "stop";
    case VLLM_FINISH_LENGTH: return "length";
    case VLLM_FINISH_ABORT: return "abort";
    case VLLM_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

typedef struct op_seq {
    detokenizer *detok;              /* NULL without detokenize */
    stop_matcher stop;
    int32_t num_tokens;              /* output tokens seen (for min_tokens) */
    bool finished;                   /* its final delta went out */
    bool engine_finished;            /* the engine reported its finish */
    bool prompt_lps_sent;            /* its first delta carried the prompt logprobs */
} op_seq;

typedef struct op_request {
    map_node by_id;
    struct op_request *next_retired;
    char *id;
    void *ud;
    char **stop;                     /* (num_stop) the request's stop strings */
    int32_t num_stop;
    int32_t n, min_tokens, logprobs, prompt_logprobs;
    /* prompt logprobs as the engine reports them, position 1 on: each
     * position's entries (prompt token first, then the top-N without it)
     * are plp_count[i] entries of plp_ents from the running sum */
    output_logprob *plp_ents;
    size_t num_plp_ents, cap_plp_ents;
    int32_t *plp_count;
    size_t cap_plp_count;
    int32_t num_plps;
    output_token_logprobs *plps;     /* (num_plps) views, made at the first delta */
    bool ignore_eos, include_stop, detokenize;
    int32_t num_prompt_tokens, num_cached;
    int32_t num_finished, num_engine_finished;
    op_seq seqs[];                   /* (n) */
} op_request;

struct vllm_output_processor {
    const tokenizer *tok;
    int32_t eos_id, vocab_size;
    map requests;
    op_request *retired;             /* done in the last call; freed at the next */
    char **tok_text;                 /* (vocab_size) decode([id]) cache, lazily filled */
    size_t *tok_len;
    char **tok_bytes;                /* (vocab_size) tokenizer_token_bytes cache, likewise */
    size_t *tok_bytes_len;

    output_result res;
    output_delta *deltas;
    size_t cap_deltas;
    size_t *text_off;                /* (num_deltas) each delta's text in `text` */
    size_t cap_text_off;
    output_seq_ref *stops;
    size_t cap_stops;
    output_done *done;
    size_t cap_done;
    int32_t *toks;
    size_t num_toks, cap_toks;
    output_token_logprobs *lps;
    size_t num_lps, cap_lps;
    output_logprob *ents;
    size_t num_ents, cap_ents;
    char *text;                      /* every delta's text, each followed by a NUL */
    size_t text_len, cap_text;
};

/* ---- lifetime -------------------------------------------------------------- */

static void request_free(op_request *r) {
    if (!r) return;
    for (int32_t k = 0; k < r->n; k++) {
        detokenizer_free(r->seqs[k].detok);
        stop_matcher_deinit(&r->seqs[k].stop);
    }
    for (int32_t i = 0; i < r->num_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->id);
    free(r->plp_ents);
    free(r->plp_count);
    free(r->plps);
    free(r);
}

static void free_retired(output_processor *op) {
    for (op_request *r = op->retired, *next; r; r = next) {
        next = r->next_retired;
        request_free(r);
    }
    op->retired = NULL;
}

vllm_status output_processor_create(const tokenizer *tok, output_processor **out) {
    *out = NULL;
    if (!tok) return vllm_error(VLLM_ERR_INVALID, "output_processor_create: no tokenizer");
    output_processor *op = calloc(1, sizeof *op);
    if (!op) return vllm_error(VLLM_ERR_NOMEM, "output processor: out of memory");
    op->tok = tok;
    op->eos_id = tokenizer_eos_id(tok);
    op->vocab_size = tokenizer_vocab_size(tok);
    map_init(&op->requests);
    *out = op;
    return VLLM_OK;
}

void output_processor_free(output_processor *op) {
    if (!op) return;
    free_retired(op);
    for (map_node *n = map_first(&op->requests), *next; n; n = next) {
        next = map_next(&op->requests, n);
        request_free(map_entry(n, op_request, by_id));
    }
    map_deinit(&op->requests);
    if (op->tok_text)
        for (int32_t i = 0; i < op->vocab_size; i++) free(op->tok_text[i]);
    free(op->tok_text);
    free(op->tok_len);
    if (op->tok_bytes)
        for (int32_t i = 0; i < op->vocab_size; i++) free(op->tok_bytes[i]);
    free(op->tok_bytes);
    free(op->tok_bytes_len);
    free(op->deltas);
    free(op->text_off);
    free(op->stops);
    free(op->done);
    free(op->toks);
    free(op->lps);
    free(op->ents);
    free(op->text);
    free(op);
}

vllm_status output_processor_add_request(output_processor *op, const output_request *q) {
    if (!q->request_id) return vllm_error(VLLM_ERR_INVALID, "output processor: a request needs an id");
    if (map_find(&op->requests, q->request_id))
        return vllm_error(VLLM_ERR_INVALID, "Request id %s already running.", q->request_id);
    int32_t n = q->sp->n;
    if (n < 1) return vllm_error(VLLM_ERR_INVALID, "n must be at least 1, got %d.", n);
    if (q->num_stop > 0 && !q->detokenize)
        return vllm_error(VLLM_ERR_INVALID, "stop strings are only supported when detokenize is True. "
                                            "Set detokenize=True to use stop.");
    op_request *r = calloc(1, sizeof *r + (size_t)n * sizeof r->seqs[0]);
    if (!r) return vllm_error(VLLM_ERR_NOMEM, "output processor: out of memory adding %s", q->request_id);
    vllm_status rc = VLLM_OK;
    r->n = n;
    r->ud = q->ud;
    r->min_tokens = q->sp->min_tokens;
    r->logprobs = q->sp->logprobs;
    r->prompt_logprobs = q->sp->prompt_logprobs;
    r->ignore_eos = q->sp->ignore_eos;
    r->include_stop = q->include_stop_str_in_output;
    r->detokenize = q->detokenize;
    r->num_prompt_tokens = q->num_prompt_ids;
    if (!(r->id = strdup(q->request_id))) goto nomem;
    if (q->num_stop > 0) {
        if (!(r->stop = calloc((size_t)q->num_stop, sizeof *r->stop))) goto nomem;
        for (; r->num_stop < q->num_stop; r->num_stop++)
            if (!(r->stop[r->num_stop] = strdup(q->stop[r->num_stop]))) goto nomem;
    }
    for (int32_t k = 0; k < n && rc == VLLM_OK; k++) {
        op_seq *s = &r->seqs[k];
        if (q->detokenize)
            rc = detokenizer_create(op->tok, q->prompt_ids, q->num_prompt_ids, q->skip_special_tokens, &s->detok);
        if (rc == VLLM_OK)
            rc = stop_matcher_init(&s->stop, (const char *const *)r->stop, r->num_stop, r->include_stop);
    }
    if (rc == VLLM_OK) rc = map_insert(&op->requests, &r->by_id, r->id);
    if (rc != VLLM_OK) {
        request_free(r);
        return rc;
    }
    return VLLM_OK;
nomem:
    request_free(r);
    return vllm_error(VLLM_ERR_NOMEM, "output processor: out of memory adding %s", q->request_id);
}

int64_t output_processor_num_requests(const output_processor *op) { return (int64_t)map_size(&op->requests); }

void output_processor_foreach(const output_processor *op,
                              void (*fn)(void *ctx, const char *request_id, void *ud), void *ctx) {
    for (map_node *n = map_first(&op->requests); n; n = map_next(&op->requests, n)) {
        op_request *r = map_entry(n, op_request, by_id);
        fn(ctx, r->id, r->ud);
    }
}

/* One lazily filled per-id cache: decode([id]) (bytes false) or the token's
 * bytes. "" when the id is outside the vocabulary or memory runs out. */
static const char *token_cache(output_processor *op, int32_t id, bool bytes, size_t *len) {
    char ***text = bytes ? &op->tok_bytes : &op->tok_text;
    size_t **lens = bytes ? &op->tok_bytes_len : &op->tok_len;
    if (len) *len = 0;
    if (id < 0 || id >= op->vocab_size) return "";
    if (!*text) {
        *text = calloc((size_t)op->vocab_size, sizeof **text);
        *lens = calloc((size_t)op->vocab_size, sizeof **lens);
        if (!*text || !*lens) {
            free(*text);
            free(*lens);
            *text = NULL;
            *lens = NULL;
            return "";
        }
    }
    if (!(*text)[id]) {
        char *t = NULL;
        size_t n = 0;
        if (bytes) {
            strbuf b = {0};
            if (tokenizer_token_bytes(op->tok, id, &b) != VLLM_OK || sb_add(&b, "", 0) != VLLM_OK) {
                free(b.s);
                return "";
            }
            t = b.s;
            n = b.len;
        } else if (tokenizer_decode(op->tok, &id, 1, false, &t, &n) != VLLM_OK) {
            free(t);
            return "";
        }
        (*text)[id] = t;
        (*lens)[id] = n;
    }
    if (len) *len = (*lens)[id];
    return (*text)[id];
}

const char *output_processor_token_text(output_processor *op, int32_t id, size_t *len) {
    return token_cache(op, id, false, len);
}

const char *output_processor_token_bytes(output_processor *op, int32_t id, size_t *len) {
    return token_cache(op, id, true, len);
}

/* ---- one step --------------------------------------------------------------- */

static void result_reset(output_processor *op) {
    free_retired(op);
    op->res = (output_result){0};
    op->num_toks = op->num_lps = op->num_ents = op->text_len = 0;
}

/* Room for num_deltas deltas (stops and done alike) and the given token ids and entries. */
static vllm_status result_reserve(output_processor *op, size_t num_deltas, size_t num_toks, size_t num_ents) {
    vllm_status rc;
    if ((rc = buf_grow((void **)&op->deltas, &op->cap_deltas, num_deltas, sizeof *op->deltas)) ||
        (rc = buf_grow((void **)&op->text_off, &op->cap_text_off, num_deltas, sizeof *op->text_off)) ||
        (rc = buf_grow((void **)&op->stops, &op->cap_stops, num_deltas, sizeof *op->stops)) ||
        (rc = buf_grow((void **)&op->done, &op->cap_done, num_deltas, sizeof *op->done)) ||
        (rc = buf_grow((void **)&op->toks, &op->cap_toks, num_toks, sizeof *op->toks)) ||
        (rc = buf_grow((void **)&op->lps, &op->cap_lps, num_toks, sizeof *op->lps)) ||
        (rc = buf_grow((void **)&op->ents, &op->cap_ents, num_ents, sizeof *op->ents)))
        return rc;
    return VLLM_OK;
}

static bool text_add(output_processor *op, const char *s, size_t n) {
    if (!n) return true;
    if (buf_grow((void **)&op->text, &op->cap_text, op->text_len + n, 1) != VLLM_OK) return false;
    memcpy(op->text + op->text_len, s, n);
    op->text_len += n;
    return true;
}

/* Feeds text to the sequence's stop matcher and the delta's text. Returns
 * the index of the stop string that ended the output, or -1. */
static int32_t feed(output_processor *op, const op_request *r, op_seq *s, const char *piece, size_t len,
                    bool *oom) {
    stop_update u;
    if (stop_matcher_feed(&s->stop, piece, len, s->num_tokens > r->min_tokens, &u) != VLLM_OK) {
        *oom = true;
        return -1;
    }
    *oom |= !text_add(op, u.text, u.len);
    return u.stop_index;
}

static void retire(output_processor *op, op_request *r) {
    map_remove(&op->requests, &r->by_id);
    r->next_retired = op->retired;
    op->retired = r;
    op->done[op->res.num_done++] = (output_done){r->id, r->ud};
}

static output_delta *delta_begin(output_processor *op, op_request *r, int32_t index, int32_t output_index) {
    int32_t i = op->res.num_deltas++;
    op->text_off[i] = op->text_len;
    output_delta *d = &op->deltas[i];
    *d = (output_delta){
        .request_id = r->id,
        .ud = r->ud,
        .index = index,
        .output_index = output_index,
        .token_ids = op->toks + op->num_toks,
        .stop_token_id = -1,
        .num_prompt_tokens = r->num_prompt_tokens,
        .num_cached_tokens = r->num_cached,
    };
    return d;
}

/* Ends a delta's text with a NUL (its pointer is set in result_finish). */
static void delta_end_text(output_processor *op, output_delta *d, bool oom) {
    size_t off = op->text_off[d - op->deltas];
    if (oom) {
        log_error("request %s: out of memory building output text; some text is lost", d->request_id);
        op->text_len = off;
    }
    d->text_len = op->text_len - off;
    if (!text_add(op, "", 1)) { /* no room for the NUL: drop this delta's text */
        op->text_len = off;
        d->text_len = 0;
        op->text_off[d - op->deltas] = SIZE_MAX;
    }
}

static void result_finish(output_processor *op, const output_result **res) {
    for (int32_t i = 0; i < op->res.num_deltas; i++) {
        output_delta *d = &op->deltas[i];
        d->text = op->text_off[i] == SIZE_MAX || !op->text ? "" : op->text + op->text_off[i];
    }
    op->res.deltas = op->deltas;
    op->res.stops = op->stops;
    op->res.done = op->done;
    *res = &op->res;
}

/* Keeps an engine output's prompt logprobs (in prompt order; a position out
 * of order is dropped with a warning: the engine reports each once). */
static void keep_prompt_logprobs(output_processor *op, op_request *r, const vllm_seq_output *o) {
    if (o->prompt_logprobs_start != r->num_plps + 1) {
        log_warn("request %s: prompt logprobs from position %d, expected %d; dropped", r->id,
                 o->prompt_logprobs_start, r->num_plps + 1);
        return;
    }
    size_t need = 0;
    for (int32_t t = 0; t < o->num_prompt_logprobs; t++) need += 1 + (size_t)o->prompt_logprobs[t].num_top;
    if (buf_grow((void **)&r->plp_ents, &r->cap_plp_ents, r->num_plp_ents + need, sizeof *r->plp_ents) ||
        buf_grow((void **)&r->plp_count, &r->cap_plp_count, (size_t)(r->num_plps + o->num_prompt_logprobs),
                 sizeof *r->plp_count)) {
        log_error("request %s: out of memory keeping prompt logprobs; dropped", r->id);
        return;
    }
    for (int32_t t = 0; t < o->num_prompt_logprobs; t++) {
        const vllm_token_logprobs *lp = &o->prompt_logprobs[t];
        output_logprob *e = r->plp_ents + r->num_plp_ents;
        int32_t ne = 0;
        e[ne++] = (output_logprob){.token_id = lp->token_id, .logprob = lp->logprob, .rank = lp->rank};
        for (int32_t k = 0; k < lp->num_top; k++)
            if (lp->top_ids[k] != lp->token_id)
                e[ne++] = (output_logprob){.token_id = lp->top_ids[k], .logprob = lp->top_logprobs[k], .rank = k + 1};
        if (r->detokenize)
            for (int32_t k = 0; k < ne; k++) {
                e[k].text = output_processor_token_text(op, e[k].token_id, &e[k].text_len);
                e[k].bytes = output_processor_token_bytes(op, e[k].token_id, &e[k].bytes_len);
            }
        r->plp_count[r->num_plps++] = ne;
        r->num_plp_ents += (size_t)ne;
    }
}

/* The views of a request's prompt logprobs, made once: every sequence's
 * first delta comes after the prefill, when all of them are in. */
static const output_token_logprobs *prompt_logprob_views(op_request *r) {
    if (r->plps) return r->plps;
    r->plps = r->num_plps ? malloc((size_t)r->num_plps * sizeof *r->plps) : NULL;
    if (!r->plps) return NULL;
    size_t off = 0;
    for (int32_t i = 0; i < r->num_plps; i++) {
        r->plps[i] = (output_token_logprobs){r->plp_count[i], r->plp_ents + off};
        off += (size_t)r->plp_count[i];
    }
    return r->plps;
}

/* The delta of one engine output for a sequence without a final delta. */
static void emit_delta(output_processor *op, op_request *r, op_seq *s, const vllm_seq_output *o, int32_t oi) {
    output_delta *d = delta_begin(op, r, o->index, oi);
    bool engine_done = o->finish_reason != VLLM_FINISH_NONE;
    bool stop_terminated = o->finish_reason == VLLM_FINISH_STOP && o->stop_token_id >= 0 && o->num_new_tokens > 0;
    int32_t ndetok = o->num_new_tokens - (stop_terminated && !r->include_stop ? 1 : 0);
    int32_t stop_index = -1, kept = o->num_new_tokens;
    bool oom = false;
    for (int32_t i = 0; i < o->num_new_tokens; i++) {
        s->num_tokens++;
        if (!s->detok || i >= ndetok) continue;
        const char *piece;
        size_t len;
        if (detokenizer_push(s->detok, o->new_token_ids[i], &piece, &len) != VLLM_OK) {
            log_warn("request %s: cannot detokenize id %d: %s", r->id, o->new_token_ids[i], vllm_errmsg());
            continue;
        }
        if ((stop_index = feed(op, r, s, piece, len, &oom)) >= 0) {
            kept = i + 1; /* the rest of the step comes after the end of the output */
            break;
        }
    }
    if (stop_index < 0 && engine_done && s->detok) {
        const char *tail;
        size_t len;
        if (detokenizer_flush(s->detok, &tail, &len) == VLLM_OK && len) stop_index = feed(op, r, s, tail, len, &oom);
        if (stop_index < 0) {
            stop_update u;
            stop_matcher_finish(&s->stop, &u);
            oom |= !text_add(op, u.text, u.len);
        }
    }
    delta_end_text(op, d, oom);

    if (kept > 0) memcpy(op->toks + op->num_toks, o->new_token_ids, (size_t)kept * sizeof *op->toks);
    op->num_toks += (size_t)kept;
    d->num_tokens = kept;
    if (r->logprobs >= 0 && o->new_logprobs) {
        d->logprobs = op->lps + op->num_lps;
        for (int32_t t = 0; t < kept; t++) {
            const vllm_token_logprobs *lp = &o->new_logprobs[t];
            output_logprob *e = op->ents + op->num_ents;
            int32_t ne = 0;
            e[ne++] = (output_logprob){.token_id = lp->token_id, .logprob = lp->logprob, .rank = lp->rank};
            for (int32_t k = 0; k < lp->num_top; k++)
                if (lp->top_ids[k] != lp->token_id)
                    e[ne++] = (output_logprob){.token_id = lp->top_ids[k], .logprob = lp->top_logprobs[k],
                                               .rank = k + 1};
            if (r->detokenize)
                for (int32_t k = 0; k < ne; k++) {
                    e[k].text = output_processor_token_text(op, e[k].token_id, &e[k].text_len);
                    e[k].bytes = output_processor_token_bytes(op, e[k].token_id, &e[k].bytes_len);
                }
            op->lps[op->num_lps++] = (output_token_logprobs){ne, e};
            op->num_ents += (size_t)ne;
        }
    }

    if (r->prompt_logprobs >= 0 && !s->prompt_lps_sent) {
        s->prompt_lps_sent = true;
        d->has_prompt_logprobs = true;
        d->prompt_logprobs = prompt_logprob_views(r);
        d->num_prompt_logprobs = d->prompt_logprobs ? r->num_plps : 0;
    }

    if (stop_index >= 0) {
        d->finish_reason = VLLM_FINISH_STOP;
        d->stop_str = r->stop[stop_index];
        if (!engine_done) op->stops[op->res.num_stops++] = (output_seq_ref){r->id, o->index};
    } else if (engine_done) {
        d->finish_reason = o->finish_reason;
        if (stop_terminated && !(o->stop_token_id == op->eos_id && !r->ignore_eos)) d->stop_token_id = o->stop_token_id;
    }
    if (d->finish_reason != VLLM_FINISH_NONE) {
        s->finished = true;
        r->num_finished++;
    }
}

vllm_status output_processor_process(output_processor *op, const vllm_step_output *out,
                                     const output_result **res) {
    result_reset(op);
    *res = &op->res;
    size_t ntok = 0, nent = 0, nout = (size_t)out->num_outputs;
    for (size_t i = 0; i < nout; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        ntok += (size_t)o->num_new_tokens;
        if (o->new_logprobs)
            for (int32_t t = 0; t < o->num_new_tokens; t++) nent += 1 + (size_t)o->new_logprobs[t].num_top;
    }
    vllm_status rc = result_reserve(op, nout, ntok, nent);
    if (rc != VLLM_OK) return rc;
    for (size_t i = 0; i < nout; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        map_node *node = map_find(&op->requests, o->request_id);
        if (!node) continue;
        op_request *r = map_entry(node, op_request, by_id);
        if (o->index < 0 || o->index >= r->n) continue;
        op_seq *s = &r->seqs[o->index];
        if (s->engine_finished) continue;
        if (o->num_prompt_tokens > 0) r->num_prompt_tokens = o->num_prompt_tokens;
        if (o->num_cached_tokens > r->num_cached) r->num_cached = o->num_cached_tokens;
        if (o->num_prompt_logprobs > 0 && o->prompt_logprobs && r->prompt_logprobs >= 0)
            keep_prompt_logprobs(op, r, o);
        bool engine_done = o->finish_reason != VLLM_FINISH_NONE;
        if (!s->finished && (o->num_new_tokens > 0 || engine_done)) emit_delta(op, r, s, o, (int32_t)i);
        if (engine_done) {
            s->engine_finished = true;
            if (++r->num_engine_finished == r->n) retire(op, r); /* every final delta is out by now */
        }
    }
    result_finish(op, res);
    return VLLM_OK;
}

vllm_status output_processor_abort_all(output_processor *op, const output_result **res) {
    result_reset(op);
    *res = &op->res;
    size_t nseq = 0;
    for (map_node *n = map_first(&op->requests); n; n = map_next(&op->requests, n))
        nseq += (size_t)map_entry(n, op_request, by_id)->n;
    vllm_status rc = result_reserve(op, nseq, 0, 0);
    if (rc != VLLM_OK) return rc;
    for (map_node *n = map_first(&op->requests), *next; n; n = next) {
        next = map_next(&op->requests, n);
        op_request *r = map_entry(n, op_request, by_id);
        for (int32_t k = 0; k < r->n; k++) {
            op_seq *s = &r->seqs[k];
            if (s->finished) continue;
            output_delta *d = delta_begin(op, r, k, -1);
            delta_end_text(op, d, false);
            d->finish_reason = VLLM_FINISH_ABORT;
            s->finished = true;
            r->num_finished++;
        }
        retire(op, r);
    }
    result_finish(op, res);
    return VLLM_OK;
}

/*
 * frontend.c - see frontend.h.
 *
 * Two queues, as vLLM's AsyncLLM/EngineCore pair:
 *   commands (add, abort, stop one sequence): any thread -> engine thread,
 *     a FIFO under f->mu; the engine thread takes the whole list at once.
 *   batches: engine thread -> output thread. A batch is what one loop
 *     iteration of the engine thread produced: the outcome of each add, then
 *     a copy of the step's outputs (the engine's are borrowed only until its
 *     next step). Batches are recycled through a free list, so a steady
 *     server allocates nothing per step once the buffers have grown.
 *
 * Ordering: an add's outcome travels in the same queue as, and before, the
 * first outputs of that request, so the output thread registers a request
 * before it can see its tokens. The output thread alone owns the registry
 * (request id -> fe_req), so it needs no lock.
 *
 * Sleeping: the engine thread waits on engine_cv when it has no commands
 * and the engine has no unfinished request; the output thread waits on
 * output_cv for batches. Nobody spins.
 *
 * Stop strings: when a sequence's text hits one, its final delta goes out at
 * once and the engine is asked (a command) to stop the sequence; tokens it
 * makes in the meantime are dropped. The request is forgotten only when the
 * engine has reported every sequence finished, so blocks are always freed
 * by the engine before on_done.
 */
#include "server/frontend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/log.h"
#include "sample/stop.h"

typedef struct fe_seq {
    detokenizer *detok;
    stop_matcher stop;
    int32_t num_tokens;
    bool done_fe;     /* final delta delivered */
    bool done_engine; /* the engine reported it finished */
} fe_seq;

typedef struct fe_req {
    struct fe_req *hnext; /* registry chain */
    char *id;
    int32_t *prompt_ids;
    int32_t num_prompt;
    vllm_sampling_params sp;
    int32_t priority;
    char *cache_salt;
    char **stop;
    int32_t num_stop;
    bool include_stop, skip_special;
    frontend_sink sink;
    fe_seq *seqs; /* (sp.n), created on registration */
    int32_t num_engine_done;
    int32_t num_prompt_tokens, num_cached;
} fe_req;

typedef enum cmd_kind { CMD_ADD, CMD_ABORT, CMD_STOP_SEQ } cmd_kind;

typedef struct cmd {
    struct cmd *next;
    cmd_kind kind;
    fe_req *req;   /* CMD_ADD */
    int32_t index; /* CMD_STOP_SEQ */
    char id[];     /* CMD_ABORT, CMD_STOP_SEQ */
} cmd;

typedef struct fe_added { fe_req *req; vllm_status rc; size_t err_off; } fe_added;


typedef struct fe_batch {
    struct fe_batch *next;
    bool has_step, fatal;
    double timestamp;
    vllm_scheduler_stats stats;
    fe_added *added;
    size_t n_added, cap_added;
    vllm_seq_output *outs; /* pointers into the pools below */
    size_t n_outs, cap_outs;
    vllm_event *evs;
    size_t n_evs, cap_evs;
    int32_t *toks;
    size_t n_toks, cap_toks;
    vllm_token_logprobs *lps;
    size_t n_lps, cap_lps;
    int32_t *top_ids;
    float *top_lps;
    size_t n_top, cap_top, cap_top_lps;
    char *strs;
    size_t n_strs, cap_strs;
} fe_batch;

struct frontend {
    vllm_engine *engine; /* engine thread only */
    const tokenizer *tok;
    pthread_t engine_thread, output_thread;
    bool threads_started;

    pthread_mutex_t mu;
    pthread_cond_t engine_cv, output_cv, idle_cv;
    cmd *cmd_head, *cmd_tail;
    fe_batch *batch_head, *batch_tail, *batch_free;
    int num_free_batches;
    bool stop_engine, stop_output, shutting_down, abort_all, dead;
    long step_delay_us; /* VLLMC_DEBUG_STEP_DELAY_US: a slow engine, for tests */
    frontend_step_fn observer; /* set before any request; output thread */
    void *observer_ud;
    int64_t num_live;
    vllm_scheduler_stats stats;

    /* output thread only */
    fe_req **buckets;
    size_t num_buckets, num_registered;
    char *text;          /* a step's delta texts, each NUL-terminated (fe_pend) */
    size_t text_len, text_cap;
    struct fe_pend *pend; /* (cap_pend) per output of the step being handled */
    size_t cap_pend;
};

/* What the first pass over a step found for one output (see output_main). */
typedef struct fe_pend {
    bool deliver;                 /* a delta goes to the sink */
    int32_t stop_index;           /* the stop string that matched, else -1 */
    vllm_finish_reason engine_finish;
    size_t text_off, text_len;    /* in f->text */
} fe_pend;

/* ---- small helpers ------------------------------------------------------------ */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np) return false;
    *p = np;
    *cap = c;
    return true;
}

static void req_free(fe_req *r) {
    if (!r) return;
    if (r->seqs) {
        for (int32_t i = 0; i < r->sp.n; i++) {
            detokenizer_free(r->seqs[i].detok);
            stop_matcher_deinit(&r->seqs[i].stop);
        }
        free(r->seqs);
    }
    for (int32_t i = 0; i < r->num_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->id);
    free(r->prompt_ids);
    free(r->cache_salt);
    free(r);
}

static void push_cmd(frontend *f, cmd *c) {
    c->next = NULL;
    if (f->cmd_tail) f->cmd_tail->next = c;
    else f->cmd_head = c;
    f->cmd_tail = c;
    pthread_cond_signal(&f->engine_cv);
}

static cmd *cmd_new(cmd_kind kind, const char *id, int32_t index) {
    size_t n = id ? strlen(id) + 1 : 1;
    cmd *c = calloc(1, sizeof *c + n);
    if (!c) return NULL;
    c->kind = kind;
    c->index = index;
    if (id) memcpy(c->id, id, n);
    return c;
}

/* ---- registry (output thread) ------------------------------------------------- */

static size_t id_hash(const char *id) { return (size_t)XXH64(id, strlen(id), 0); }

static fe_req *registry_find(frontend *f, const char *id) {
    if (!f->num_buckets) return NULL;
    for (fe_req *r = f->buckets[id_hash(id) & (f->num_buckets - 1)]; r; r = r->hnext)
        if (!strcmp(r->id, id)) return r;
    return NULL;
}

static bool registry_add(frontend *f, fe_req *r) {
    if (f->num_registered + 1 > f->num_buckets) {
        size_t nb = f->num_buckets ? f->num_buckets * 2 : 64;
        fe_req **b = calloc(nb, sizeof *b);
        if (!b) return false;
        for (size_t i = 0; i < f->num_buckets; i++) {
            for (fe_req *x = f->buckets[i], *next; x; x = next) {
                next = x->hnext;
                size_t h = id_hash(x->id) & (nb - 1);
                x->hnext = b[h];
                b[h] = x;
            }
        }
        free(f->buckets);
        f->buckets = b;
        f->num_buckets = nb;
    }
    size_t h = id_hash(r->id) & (f->num_buckets - 1);
    r->hnext = f->buckets[h];
    f->buckets[h] = r;
    f->num_registered++;
    return true;
}

static void registry_remove(frontend *f, fe_req *r) {
    fe_req **pp = &f->buckets[id_hash(r->id) & (f->num_buckets - 1)];
    while (*pp && *pp != r) pp = &(*pp)->hnext;
    if (*pp) {
        *pp = r->hnext;
        f->num_registered--;
    }
}

/* ---- engine thread ---------------------------------------------------------- */

static fe_batch *batch_get(frontend *f) {
    pthread_mutex_lock(&f->mu);
    fe_batch *b = f->batch_free;
    if (b) {
        f->batch_free = b->next;
        f->num_free_batches--;
    }
    pthread_mutex_unlock(&f->mu);
    if (!b) b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->next = NULL;
    b->has_step = b->fatal = false;
    b->n_added = b->n_outs = b->n_evs = b->n_toks = b->n_lps = b->n_top = b->n_strs = 0;
    return b;
}

static void batch_destroy(fe_batch *b) {
    free(b->added);
    free(b->outs);
    free(b->evs);
    free(b->toks);
    free(b->lps);
    free(b->top_ids);
    free(b->top_lps);
    free(b->strs);
    free(b);
}

static void batch_put(frontend *f, fe_batch *b) {
    pthread_mutex_lock(&f->mu);
    if (f->num_free_batches < 4) {
        b->next = f->batch_free;
        f->batch_free = b;
        f->num_free_batches++;
        b = NULL;
    }
    pthread_mutex_unlock(&f->mu);
    if (b) batch_destroy(b);
}

/* Appends a NUL-terminated string to the batch's pool; returns its offset. */
static size_t batch_str(fe_batch *b, const char *s) {
    size_t n = strlen(s) + 1;
    if (!grow((void **)&b->strs, &b->cap_strs, b->n_strs + n, 1)) return SIZE_MAX;
    memcpy(b->strs + b->n_strs, s, n);
    size_t off = b->n_strs;
    b->n_strs += n;
    return off;
}

static void note_added(fe_batch *b, fe_req *r, vllm_status rc, const char *err) {
    if (!grow((void **)&b->added, &b->cap_added, b->n_added + 1, sizeof *b->added)) {
        log_error("frontend: out of memory recording an add; request %s is lost", r->id);
        return;
    }
    fe_added *a = &b->added[b->n_added++];
    a->req = r;
    a->rc = rc;
    a->err_off = rc == VLLM_OK ? SIZE_MAX : batch_str(b, err);
}

/* Copies a step's outputs into b (engine memory is borrowed until the next
 * step): the same vllm_seq_output records, their pointers redirected into
 * the batch's pools. Every pool is grown first, so the pointers stay valid. */
static bool batch_copy_step(fe_batch *b, const vllm_step_output *out) {
    size_t ntok = 0, nlp = 0, ntop = 0, nstr = 0, nev = 0;
    for (int32_t i = 0; i < out->num_outputs; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        ntok += (size_t)o->num_new_tokens;
        nstr += strlen(o->request_id) + 1;
        nev += (size_t)o->num_events;
        if (o->new_logprobs) {
            nlp += (size_t)o->num_new_tokens;
            for (int32_t t = 0; t < o->num_new_tokens; t++) ntop += (size_t)o->new_logprobs[t].num_top;
        }
    }
    if (!grow((void **)&b->outs, &b->cap_outs, b->n_outs + (size_t)out->num_outputs, sizeof *b->outs) ||
        !grow((void **)&b->evs, &b->cap_evs, b->n_evs + nev, sizeof *b->evs) ||
        !grow((void **)&b->toks, &b->cap_toks, b->n_toks + ntok, sizeof *b->toks) ||
        !grow((void **)&b->lps, &b->cap_lps, b->n_lps + nlp, sizeof *b->lps) ||
        !grow((void **)&b->top_ids, &b->cap_top, b->n_top + ntop, sizeof *b->top_ids) ||
        !grow((void **)&b->top_lps, &b->cap_top_lps, b->n_top + ntop, sizeof *b->top_lps) ||
        !grow((void **)&b->strs, &b->cap_strs, b->n_strs + nstr, 1))
        return false;
    b->has_step = true;
    b->timestamp = out->timestamp;
    b->stats = out->stats;
    for (int32_t i = 0; i < out->num_outputs; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        vllm_seq_output *d = &b->outs[b->n_outs++];
        *d = *o;
        size_t idn = strlen(o->request_id) + 1;
        memcpy(b->strs + b->n_strs, o->request_id, idn);
        d->request_id = b->strs + b->n_strs;
        b->n_strs += idn;
        if (o->num_new_tokens > 0)
            memcpy(b->toks + b->n_toks, o->new_token_ids, (size_t)o->num_new_tokens * sizeof(int32_t));
        d->new_token_ids = b->toks + b->n_toks;
        b->n_toks += (size_t)o->num_new_tokens;
        if (o->num_events > 0)
            memcpy(b->evs + b->n_evs, o->events, (size_t)o->num_events * sizeof *o->events);
        d->events = o->num_events > 0 ? b->evs + b->n_evs : NULL;
        b->n_evs += (size_t)o->num_events;
        if (o->new_logprobs) {
            d->new_logprobs = b->lps + b->n_lps;
            for (int32_t t = 0; t < o->num_new_tokens; t++) {
                vllm_token_logprobs lp = o->new_logprobs[t];
                if (lp.num_top > 0) {
                    memcpy(b->top_ids + b->n_top, lp.top_ids, (size_t)lp.num_top * sizeof(int32_t));
                    memcpy(b->top_lps + b->n_top, lp.top_logprobs, (size_t)lp.num_top * sizeof(float));
                }
                lp.top_ids = b->top_ids + b->n_top;
                lp.top_logprobs = b->top_lps + b->n_top;
                b->n_top += (size_t)lp.num_top;
                b->lps[b->n_lps++] = lp;
            }
        }
    }
    return true;
}

static void apply_cmd(frontend *f, fe_batch *b, cmd *c, bool dead) {
    vllm_status rc;
    switch (c->kind) {
    case CMD_ADD: {
        fe_req *r = c->req;
        if (dead) {
            note_added(b, r, VLLM_ERR_INVALID, "The engine is not running (a step failed); see the server log.");
            break;
        }
        vllm_request_opts opts = {.priority = r->priority, .cache_salt = r->cache_salt};
        rc = vllm_engine_add_request(f->engine, r->id, r->prompt_ids, r->num_prompt, &r->sp, &opts);
        note_added(b, r, rc, rc == VLLM_OK ? NULL : vllm_errmsg());
        break;
    }
    case CMD_ABORT:
        if (!dead) vllm_engine_abort_request(f->engine, c->id); /* NOT_FOUND: already finished */
        break;
    case CMD_STOP_SEQ:
        if (!dead) vllm_engine_stop_sequence(f->engine, c->id, c->index);
        break;
    }
}

static void push_batch(frontend *f, fe_batch *b) {
    pthread_mutex_lock(&f->mu);
    if (f->batch_tail) f->batch_tail->next = b;
    else f->batch_head = b;
    f->batch_tail = b;
    pthread_cond_signal(&f->output_cv);
    pthread_mutex_unlock(&f->mu);
}

static void *engine_main(void *arg) {
    frontend *f = arg;
    bool busy = false, dead = false;
    pthread_setname_np(pthread_self(), "vllm-engine");
    for (;;) {
        pthread_mutex_lock(&f->mu);
        while (!f->cmd_head && !busy && !f->stop_engine) pthread_cond_wait(&f->engine_cv, &f->mu);
        cmd *list = f->cmd_head;
        f->cmd_head = f->cmd_tail = NULL;
        bool stop = f->stop_engine;
        pthread_mutex_unlock(&f->mu);

        fe_batch *b = batch_get(f);
        if (!b) { /* no memory for even a batch: try again later rather than lose commands */
            pthread_mutex_lock(&f->mu);
            if (list) { /* put them back in front */
                cmd *last = list;
                while (last->next) last = last->next;
                last->next = f->cmd_head;
                f->cmd_head = list;
                if (!f->cmd_tail) f->cmd_tail = last;
            }
            pthread_mutex_unlock(&f->mu);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        while (list) {
            cmd *next = list->next;
            apply_cmd(f, b, list, dead);
            free(list);
            list = next;
        }
        if (stop) { /* frontend_free: no more steps */
            if (b->n_added) push_batch(f, b);
            else batch_put(f, b);
            break;
        }
        busy = !dead && vllm_engine_has_unfinished(f->engine);
        if (busy) {
            const vllm_step_output *out = NULL;
            vllm_status rc = vllm_engine_step(f->engine, &out);
            if (rc != VLLM_OK) {
                log_error("engine step failed, the engine is dead: %s", vllm_errmsg());
                dead = true;
                busy = false;
                b->fatal = true;
                pthread_mutex_lock(&f->mu);
                f->dead = true;
                pthread_mutex_unlock(&f->mu);
            } else if (!batch_copy_step(b, out)) {
                log_error("frontend: out of memory copying a step's outputs; the engine is stopped");
                dead = true;
                busy = false;
                b->fatal = true;
                pthread_mutex_lock(&f->mu);
                f->dead = true;
                pthread_mutex_unlock(&f->mu);
            }
            if (!dead) busy = vllm_engine_has_unfinished(f->engine);
            if (f->step_delay_us > 0) {
                struct timespec ts = {f->step_delay_us / 1000000, (f->step_delay_us % 1000000) * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (b->n_added || b->has_step || b->fatal) push_batch(f, b);
        else batch_put(f, b);
    }
    return NULL;
}

/* ---- output thread ------------------------------------------------------------ */

static bool text_append(frontend *f, const char *s, size_t n) {
    if (!n) return true;
    if (!grow((void **)&f->text, &f->text_cap, f->text_len + n + 1, 1)) return false;
    memcpy(f->text + f->text_len, s, n);
    f->text_len += n;
    f->text[f->text_len] = 0;
    return true;
}

static void request_done(frontend *f, fe_req *r) {
    registry_remove(f, r);
    r->sink.on_done(r->sink.ud);
    req_free(r);
    pthread_mutex_lock(&f->mu);
    f->num_live--;
    pthread_cond_broadcast(&f->idle_cv);
    pthread_mutex_unlock(&f->mu);
}

static void enqueue(frontend *f, cmd_kind kind, const char *id, int32_t index) {
    cmd *c = cmd_new(kind, id, index);
    if (!c) {
        log_error("frontend: out of memory queueing a command for %s", id);
        return;
    }
    pthread_mutex_lock(&f->mu);
    push_cmd(f, c);
    pthread_mutex_unlock(&f->mu);
}

static void register_added(frontend *f, fe_batch *b, fe_added *a) {
    fe_req *r = a->req;
    if (a->rc != VLLM_OK) {
        const char *err = a->err_off == SIZE_MAX ? vllm_status_str(a->rc) : b->strs + a->err_off;
        r->sink.on_added(r->sink.ud, a->rc, err);
        r->seqs = NULL;
        r->sink.on_done(r->sink.ud);
        req_free(r);
        pthread_mutex_lock(&f->mu);
        f->num_live--;
        pthread_cond_broadcast(&f->idle_cv);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    vllm_status rc = VLLM_OK;
    r->seqs = calloc((size_t)r->sp.n, sizeof *r->seqs);
    if (!r->seqs) rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; rc == VLLM_OK && i < r->sp.n; i++) {
        rc = detokenizer_create(f->tok, r->prompt_ids, r->num_prompt, r->skip_special, &r->seqs[i].detok);
        if (rc == VLLM_OK)
            rc = stop_matcher_init(&r->seqs[i].stop, (const char *const *)r->stop, r->num_stop,
                                   r->include_stop);
    }
    if (rc == VLLM_OK && !registry_add(f, r)) rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
    if (rc != VLLM_OK) {
        /* The engine has it: abort there, report here, and let a later output
         * find no registry entry (ignored). */
        enqueue(f, CMD_ABORT, r->id, 0);
        r->sink.on_added(r->sink.ud, rc, vllm_errmsg());
        r->sink.on_done(r->sink.ud);
        req_free(r);
        pthread_mutex_lock(&f->mu);
        f->num_live--;
        pthread_cond_broadcast(&f->idle_cv);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    r->sink.on_added(r->sink.ud, VLLM_OK, NULL);
    pthread_mutex_lock(&f->mu);
    bool abort_now = f->shutting_down;
    pthread_mutex_unlock(&f->mu);
    if (abort_now) enqueue(f, CMD_ABORT, r->id, 0);
}

static bool in_stop_ids(const fe_req *r, int32_t id) {
    for (int32_t i = 0; i < r->sp.num_stop_token_ids; i++)
        if (r->sp.stop_token_ids[i] == id) return true;
    return false;
}

/* First pass (before the step observer): detokenizes one output's new
 * tokens and applies stop strings, the text going to f->text. */
static void prepare_out(frontend *f, const vllm_seq_output *o, fe_pend *p) {
    *p = (fe_pend){.stop_index = -1, .engine_finish = o->finish_reason};
    fe_req *r = registry_find(f, o->request_id);
    if (!r || o->index < 0 || o->index >= r->sp.n) return;
    fe_seq *s = &r->seqs[o->index];
    if (s->done_engine || s->done_fe || (o->num_new_tokens == 0 && o->finish_reason == VLLM_FINISH_NONE))
        return;
    p->deliver = true;
    p->text_off = f->text_len;
    const int32_t *toks = o->new_token_ids;
    bool stop_terminated = o->finish_reason == VLLM_FINISH_STOP && o->stop_token_id >= 0;
    int32_t ndetok = o->num_new_tokens - (stop_terminated && !r->include_stop && o->num_new_tokens > 0 ? 1 : 0);
    int32_t stop_index = -1;
    bool oom = false;
    stop_update u;
    for (int32_t i = 0; i < o->num_new_tokens; i++) {
        s->num_tokens++;
        if (i >= ndetok || stop_index >= 0) continue;
        const char *piece = "";
        size_t plen = 0;
        if (detokenizer_push(s->detok, toks[i], &piece, &plen) != VLLM_OK) {
            log_warn("request %s: cannot detokenize id %d: %s", r->id, toks[i], vllm_errmsg());
            continue;
        }
        if (stop_matcher_feed(&s->stop, piece, plen, s->num_tokens > r->sp.min_tokens, &u) != VLLM_OK) {
            oom = true;
            continue;
        }
        oom |= !text_append(f, u.text, u.len);
        if (u.stop_index >= 0) stop_index = u.stop_index;
    }
    if (stop_index < 0 && o->finish_reason != VLLM_FINISH_NONE) {
        const char *tail = "";
        size_t tlen = 0;
        if (detokenizer_flush(s->detok, &tail, &tlen) == VLLM_OK && tlen) {
            if (stop_matcher_feed(&s->stop, tail, tlen, s->num_tokens > r->sp.min_tokens, &u) == VLLM_OK) {
                oom |= !text_append(f, u.text, u.len);
                if (u.stop_index >= 0) stop_index = u.stop_index;
            }
        }
        if (stop_index < 0) {
            stop_matcher_finish(&s->stop, &u);
            oom |= !text_append(f, u.text, u.len);
        }
    }
    p->text_len = f->text_len - p->text_off;
    oom |= !text_append(f, "", 1); /* the NUL after this delta's text */
    if (oom) {
        log_error("request %s: out of memory building output text; some text is lost", r->id);
        p->text_off = p->text_len = 0;
    }
    p->stop_index = stop_index;
}

/* Second pass (after the step observer): the delta to the sink. */
static void deliver(frontend *f, fe_req *r, fe_seq *s, const vllm_seq_output *o, const fe_pend *p) {
    bool stop_terminated = o->finish_reason == VLLM_FINISH_STOP && o->stop_token_id >= 0;
    frontend_delta d = {
        .index = o->index,
        .text = f->text && p->text_len ? f->text + p->text_off : "",
        .text_len = p->text_len,
        .token_ids = o->new_token_ids,
        .num_tokens = o->num_new_tokens,
        .logprobs = o->new_logprobs,
        .finish_reason = o->finish_reason,
        .stop_str = NULL,
        .stop_token_id = -1,
        .num_prompt_tokens = r->num_prompt_tokens,
        .num_cached_tokens = r->num_cached,
    };
    if (p->stop_index >= 0) {
        d.finish_reason = VLLM_FINISH_STOP;
        d.stop_str = r->stop[p->stop_index];
        if (o->finish_reason == VLLM_FINISH_NONE) enqueue(f, CMD_STOP_SEQ, r->id, o->index);
    } else if (stop_terminated && in_stop_ids(r, o->stop_token_id)) {
        d.stop_token_id = o->stop_token_id;
    }
    if (d.finish_reason != VLLM_FINISH_NONE) s->done_fe = true;
    r->sink.on_delta(r->sink.ud, &d);
}

static void process_out(frontend *f, const vllm_seq_output *o, const fe_pend *p) {
    fe_req *r = registry_find(f, o->request_id);
    if (!r || o->index < 0 || o->index >= r->sp.n) return;
    fe_seq *s = &r->seqs[o->index];
    if (s->done_engine) return;
    if (o->num_prompt_tokens > 0) r->num_prompt_tokens = o->num_prompt_tokens;
    if (o->num_cached_tokens > r->num_cached) r->num_cached = o->num_cached_tokens;
    if (p->deliver) deliver(f, r, s, o, p);
    if (o->finish_reason != VLLM_FINISH_NONE) {
        s->done_engine = true;
        if (++r->num_engine_done == r->sp.n) request_done(f, r);
    }
}

/* Ends every registered request with ABORT (the engine is gone or stopping). */
static void finish_all(frontend *f) {
    for (size_t i = 0; i < f->num_buckets; i++) {
        while (f->buckets[i]) {
            fe_req *r = f->buckets[i];
            for (int32_t k = 0; k < r->sp.n; k++) {
                fe_seq *s = &r->seqs[k];
                if (s->done_fe) continue;
                f->text_len = 0;
                frontend_delta d = {.index = k, .text = "", .finish_reason = VLLM_FINISH_ABORT,
                                    .stop_token_id = -1, .num_prompt_tokens = r->num_prompt_tokens,
                                    .num_cached_tokens = r->num_cached};
                s->done_fe = true;
                r->sink.on_delta(r->sink.ud, &d);
            }
            request_done(f, r);
        }
    }
}

static void abort_all(frontend *f) {
    for (size_t i = 0; i < f->num_buckets; i++)
        for (fe_req *r = f->buckets[i]; r; r = r->hnext) enqueue(f, CMD_ABORT, r->id, 0);
}

static void *output_main(void *arg) {
    frontend *f = arg;
    pthread_setname_np(pthread_self(), "vllm-output");
    for (;;) {
        pthread_mutex_lock(&f->mu);
        while (!f->batch_head && !f->abort_all && !f->stop_output)
            pthread_cond_wait(&f->output_cv, &f->mu);
        fe_batch *list = f->batch_head;
        f->batch_head = f->batch_tail = NULL;
        bool do_abort = f->abort_all, stop = f->stop_output;
        f->abort_all = false;
        pthread_mutex_unlock(&f->mu);
        while (list) {
            fe_batch *b = list;
            list = b->next;
            for (size_t i = 0; i < b->n_added; i++) register_added(f, b, &b->added[i]);
            /* Two passes, so that the observer sees the finishes the clients
             * will see (a stop string matched in a step where the engine
             * also stopped for length reads STOP) before any client does. */
            if (!grow((void **)&f->pend, &f->cap_pend, b->n_outs, sizeof *f->pend)) {
                log_error("frontend: out of memory handling a step; its outputs are lost");
                b->n_outs = 0;
            }
            f->text_len = 0;
            for (size_t i = 0; i < b->n_outs; i++) prepare_out(f, &b->outs[i], &f->pend[i]);
            if (b->has_step && f->observer) {
                for (size_t i = 0; i < b->n_outs; i++)
                    if (f->pend[i].stop_index >= 0) b->outs[i].finish_reason = VLLM_FINISH_STOP;
                vllm_step_output view = {.timestamp = b->timestamp, .num_outputs = (int32_t)b->n_outs,
                                         .outputs = b->outs, .stats = b->stats};
                f->observer(f->observer_ud, &view);
                for (size_t i = 0; i < b->n_outs; i++) b->outs[i].finish_reason = f->pend[i].engine_finish;
            }
            for (size_t i = 0; i < b->n_outs; i++) process_out(f, &b->outs[i], &f->pend[i]);
            if (b->has_step) {
                pthread_mutex_lock(&f->mu);
                f->stats = b->stats;
                pthread_mutex_unlock(&f->mu);
            }
            if (b->fatal) finish_all(f);
            batch_put(f, b);
        }
        if (do_abort) abort_all(f);
        if (stop) {
            pthread_mutex_lock(&f->mu);
            bool more = f->batch_head != NULL;
            pthread_mutex_unlock(&f->mu);
            if (!more) break;
        }
    }
    return NULL;
}

/* ---- public -------------------------------------------------------------------- */

vllm_status frontend_create(vllm_engine *engine, const tokenizer *tok, frontend **out) {
    *out = NULL;
    frontend *f = calloc(1, sizeof *f);
    if (!f) return vllm_error(VLLM_ERR_NOMEM, "frontend: out of memory");
    f->engine = engine;
    f->tok = tok;
    const char *delay = getenv("VLLMC_DEBUG_STEP_DELAY_US");
    if (delay && *delay) {
        f->step_delay_us = atol(delay);
        log_warn("VLLMC_DEBUG_STEP_DELAY_US=%ld: every engine step is slowed down (testing only)",
                 f->step_delay_us);
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->engine_cv, NULL);
    pthread_cond_init(&f->output_cv, NULL);
    pthread_cond_init(&f->idle_cv, NULL);
    if (pthread_create(&f->output_thread, NULL, output_main, f) != 0) {
        f->engine = NULL; /* still the caller's */
        frontend_free(f);
        return vllm_error(VLLM_ERR_NOMEM, "frontend: cannot start the output thread");
    }
    if (pthread_create(&f->engine_thread, NULL, engine_main, f) != 0) {
        pthread_mutex_lock(&f->mu);
        f->stop_output = true;
        pthread_cond_broadcast(&f->output_cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->output_thread, NULL);
        f->engine = NULL; /* still the caller's */
        frontend_free(f);
        return vllm_error(VLLM_ERR_NOMEM, "frontend: cannot start the engine thread");
    }
    f->threads_started = true;
    *out = f;
    return VLLM_OK;
}

void frontend_free(frontend *f) {
    if (!f) return;
    if (f->threads_started) {
        pthread_mutex_lock(&f->mu);
        f->stop_engine = true;
        pthread_cond_broadcast(&f->engine_cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->engine_thread, NULL);
        pthread_mutex_lock(&f->mu);
        f->stop_output = true; /* after the engine's last batch is queued */
        pthread_cond_broadcast(&f->output_cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->output_thread, NULL);
    }
    finish_all(f); /* whatever the engine did not get to finish */
    for (cmd *c = f->cmd_head, *next; c; c = next) { /* only if the engine thread never ran */
        next = c->next;
        if (c->kind == CMD_ADD) {
            c->req->sink.on_added(c->req->sink.ud, VLLM_ERR_INVALID, "The server is shutting down.");
            c->req->sink.on_done(c->req->sink.ud);
            req_free(c->req);
        }
        free(c);
    }
    for (fe_batch *b = f->batch_free, *next; b; b = next) {
        next = b->next;
        batch_destroy(b);
    }
    vllm_engine_free(f->engine);
    free(f->buckets);
    free(f->text);
    free(f->pend);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->engine_cv);
    pthread_cond_destroy(&f->output_cv);
    pthread_cond_destroy(&f->idle_cv);
    free(f);
}

vllm_status frontend_add_request(frontend *f, const frontend_request *q, const frontend_sink *sink) {
    if (q->sp.n < 1) return vllm_error(VLLM_ERR_INVALID, "n must be at least 1, got %d.", q->sp.n);
    fe_req *r = calloc(1, sizeof *r);
    cmd *c = cmd_new(CMD_ADD, NULL, 0);
    if (!r || !c) goto nomem;
    r->id = strdup(q->request_id);
    r->prompt_ids = malloc(((size_t)q->num_prompt_ids + 1) * sizeof(int32_t));
    r->stop = q->num_stop ? calloc((size_t)q->num_stop, sizeof *r->stop) : NULL;
    if (!r->id || !r->prompt_ids || (q->num_stop && !r->stop)) goto nomem;
    if (q->num_prompt_ids) memcpy(r->prompt_ids, q->prompt_ids, (size_t)q->num_prompt_ids * sizeof(int32_t));
    r->num_prompt = q->num_prompt_ids;
    r->sp = q->sp;
    r->priority = q->priority;
    if (q->cache_salt && !(r->cache_salt = strdup(q->cache_salt))) goto nomem;
    for (int32_t i = 0; i < q->num_stop; i++) {
        if (!(r->stop[i] = strdup(q->stop[i]))) goto nomem;
        r->num_stop++;
    }
    r->include_stop = q->include_stop_str_in_output;
    r->skip_special = q->skip_special_tokens;
    r->sink = *sink;
    c->req = r;
    pthread_mutex_lock(&f->mu);
    if (f->shutting_down || f->stop_engine) {
        pthread_mutex_unlock(&f->mu);
        req_free(r);
        free(c);
        return vllm_error(VLLM_ERR_FULL, "The server is shutting down.");
    }
    f->num_live++;
    push_cmd(f, c);
    pthread_mutex_unlock(&f->mu);
    return VLLM_OK;
nomem:
    req_free(r);
    free(c);
    return vllm_error(VLLM_ERR_NOMEM, "out of memory queueing request %s", q->request_id);
}

void frontend_abort_request(frontend *f, const char *request_id) {
    enqueue(f, CMD_ABORT, request_id, 0);
}

void frontend_begin_shutdown(frontend *f) {
    pthread_mutex_lock(&f->mu);
    f->shutting_down = true;
    f->abort_all = true;
    pthread_cond_signal(&f->output_cv);
    pthread_mutex_unlock(&f->mu);
}

bool frontend_wait_idle(frontend *f, double seconds) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double t = (double)dl.tv_sec + dl.tv_nsec * 1e-9 + seconds;
    dl.tv_sec = (time_t)t;
    dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    pthread_mutex_lock(&f->mu);
    while (f->num_live > 0)
        if (pthread_cond_timedwait(&f->idle_cv, &f->mu, &dl) != 0) break;
    bool idle = f->num_live == 0;
    pthread_mutex_unlock(&f->mu);
    return idle;
}

void frontend_set_step_observer(frontend *f, frontend_step_fn fn, void *ud) {
    pthread_mutex_lock(&f->mu);
    f->observer = fn;
    f->observer_ud = ud;
    pthread_mutex_unlock(&f->mu);
}

void frontend_get_stats(frontend *f, frontend_stats *out) {
    pthread_mutex_lock(&f->mu);
    out->sched = f->stats;
    out->num_live_requests = f->num_live;
    out->engine_dead = f->dead;
    pthread_mutex_unlock(&f->mu);
}

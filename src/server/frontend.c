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
 * (with the output processor, engine/output_processor.h, whose request
 * state carries the fe_req) before it can see its tokens. The output thread
 * alone owns the processor, so it needs no lock.
 *
 * Sleeping: the engine thread waits on engine_cv when it has no commands
 * and the engine has no unfinished request; the output thread waits on
 * output_cv for batches. Nobody spins.
 *
 * Stop strings: when a sequence's text hits one, its final delta goes out at
 * once and the engine is asked (a command) to stop the sequence; tokens it
 * makes in the meantime are dropped. The processor forgets a request only
 * when the engine has reported every sequence finished, so blocks are
 * always freed by the engine before on_done.
 */
#include "server/frontend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

/* A request from frontend_add_request until on_done; after registration it
 * is the output processor's ud for the request. */
typedef struct fe_req {
    char *id;
    int32_t *prompt_ids;
    int32_t num_prompt;
    vllm_sampling_params sp;
    int32_t priority;
    char *cache_salt;
    char *lora_name;             /* NULL = the base model */
    char *kv_remote_host;
    int32_t kv_remote_port;
    vllm_structured_outputs so;  /* text and whitespace_pattern owned */
    char **stop;
    int32_t num_stop;
    bool include_stop, skip_special;
    frontend_sink sink;
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
    int32_t engine_index;
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
    frontend_engine_ops ops;
    void *engine; /* engine thread only (ops.wake: any thread, under mu) */
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
    frontend_engine_step_fn engine_observer;
    void *observer_ud;
    int64_t num_live;
    vllm_scheduler_stats stats;

    /* output thread only (frontend_free after both threads are joined) */
    output_processor *op;
    vllm_finish_reason *engine_finish; /* (cap_engine_finish) a step's finishes, saved around the observer */
    size_t cap_engine_finish;
};

/* ---- small helpers ------------------------------------------------------------ */

static void req_free(fe_req *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->num_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->id);
    free(r->prompt_ids);
    free(r->cache_salt);
    free(r->lora_name);
    free(r->kv_remote_host);
    free((char *)r->so.text);
    free((char *)r->so.whitespace_pattern);
    free(r);
}

static void push_cmd(frontend *f, cmd *c) {
    c->next = NULL;
    if (f->cmd_tail) f->cmd_tail->next = c;
    else f->cmd_head = c;
    f->cmd_tail = c;
    pthread_cond_signal(&f->engine_cv);
    if (f->ops.wake) f->ops.wake(f->engine);
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
    if (buf_grow((void **)&b->strs, &b->cap_strs, b->n_strs + n, 1) != VLLM_OK) return SIZE_MAX;
    memcpy(b->strs + b->n_strs, s, n);
    size_t off = b->n_strs;
    b->n_strs += n;
    return off;
}

static void note_added(fe_batch *b, fe_req *r, vllm_status rc, const char *err) {
    if (buf_grow((void **)&b->added, &b->cap_added, b->n_added + 1, sizeof *b->added) != VLLM_OK) {
        log_error("frontend: out of memory recording an add; request %s is lost", r->id);
        return;
    }
    fe_added *a = &b->added[b->n_added++];
    a->req = r;
    a->rc = rc;
    a->err_off = rc == VLLM_OK ? SIZE_MAX : batch_str(b, err);
}

/* Copies n logprob records and their top lists into b's pools (grown by the caller). */
static const vllm_token_logprobs *batch_copy_logprobs(fe_batch *b, const vllm_token_logprobs *src, int32_t n) {
    const vllm_token_logprobs *first = b->lps + b->n_lps;
    for (int32_t t = 0; t < n; t++) {
        vllm_token_logprobs lp = src[t];
        if (lp.num_top > 0) {
            memcpy(b->top_ids + b->n_top, lp.top_ids, (size_t)lp.num_top * sizeof(int32_t));
            memcpy(b->top_lps + b->n_top, lp.top_logprobs, (size_t)lp.num_top * sizeof(float));
        }
        lp.top_ids = b->top_ids + b->n_top;
        lp.top_logprobs = b->top_lps + b->n_top;
        b->n_top += (size_t)lp.num_top;
        b->lps[b->n_lps++] = lp;
    }
    return first;
}

/* Copies a step's outputs into b (engine memory is borrowed until the next
 * step): the same vllm_seq_output records, their pointers redirected into
 * the batch's pools. Every pool is grown first, so the pointers stay valid. */
static bool batch_copy_step(fe_batch *b, const vllm_step_output *out) {
    size_t ntok = 0, nlp = 0, ntop = 0, nstr = 0, nev = 0;
    for (int32_t i = 0; i < out->num_outputs; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        ntok += (size_t)o->num_new_tokens;
        nstr += strlen(o->request_id) + 1 + (o->error ? strlen(o->error) + 1 : 0);
        nev += (size_t)o->num_events;
        if (o->new_logprobs) {
            nlp += (size_t)o->num_new_tokens;
            for (int32_t t = 0; t < o->num_new_tokens; t++) ntop += (size_t)o->new_logprobs[t].num_top;
        }
        if (o->prompt_logprobs) {
            nlp += (size_t)o->num_prompt_logprobs;
            for (int32_t t = 0; t < o->num_prompt_logprobs; t++) ntop += (size_t)o->prompt_logprobs[t].num_top;
        }
    }
    if (buf_grow((void **)&b->outs, &b->cap_outs, b->n_outs + (size_t)out->num_outputs, sizeof *b->outs) ||
        buf_grow((void **)&b->evs, &b->cap_evs, b->n_evs + nev, sizeof *b->evs) ||
        buf_grow((void **)&b->toks, &b->cap_toks, b->n_toks + ntok, sizeof *b->toks) ||
        buf_grow((void **)&b->lps, &b->cap_lps, b->n_lps + nlp, sizeof *b->lps) ||
        buf_grow((void **)&b->top_ids, &b->cap_top, b->n_top + ntop, sizeof *b->top_ids) ||
        buf_grow((void **)&b->top_lps, &b->cap_top_lps, b->n_top + ntop, sizeof *b->top_lps) ||
        buf_grow((void **)&b->strs, &b->cap_strs, b->n_strs + nstr, 1))
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
        if (o->error) {
            size_t en = strlen(o->error) + 1;
            memcpy(b->strs + b->n_strs, o->error, en);
            d->error = b->strs + b->n_strs;
            b->n_strs += en;
        }
        if (o->num_new_tokens > 0)
            memcpy(b->toks + b->n_toks, o->new_token_ids, (size_t)o->num_new_tokens * sizeof(int32_t));
        d->new_token_ids = b->toks + b->n_toks;
        b->n_toks += (size_t)o->num_new_tokens;
        if (o->num_events > 0)
            memcpy(b->evs + b->n_evs, o->events, (size_t)o->num_events * sizeof *o->events);
        d->events = o->num_events > 0 ? b->evs + b->n_evs : NULL;
        b->n_evs += (size_t)o->num_events;
        if (o->new_logprobs) d->new_logprobs = batch_copy_logprobs(b, o->new_logprobs, o->num_new_tokens);
        if (o->prompt_logprobs)
            d->prompt_logprobs = batch_copy_logprobs(b, o->prompt_logprobs, o->num_prompt_logprobs);
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
        vllm_request_opts opts = {.priority = r->priority, .cache_salt = r->cache_salt, .structured_outputs = r->so,
                                  .lora_name = r->lora_name,
                                  .kv_remote_host = r->kv_remote_host, .kv_remote_port = r->kv_remote_port};
        rc = f->ops.add(f->engine, r->id, r->prompt_ids, r->num_prompt, &r->sp, &opts);
        note_added(b, r, rc, rc == VLLM_OK ? NULL : vllm_errmsg());
        break;
    }
    case CMD_ABORT:
        if (!dead) f->ops.abort(f->engine, c->id); /* NOT_FOUND: already finished */
        break;
    case CMD_STOP_SEQ:
        if (!dead) f->ops.stop_sequence(f->engine, c->id, c->index);
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
        busy = !dead && f->ops.has_unfinished(f->engine);
        if (busy) {
            const vllm_step_output *out = NULL;
            int32_t engine_index = 0;
            vllm_status rc = f->ops.step(f->engine, &out, &engine_index);
            b->engine_index = engine_index;
            if (rc != VLLM_OK) {
                log_error("engine step failed, the engine is dead: %s", vllm_errmsg());
                dead = true;
                busy = false;
                b->fatal = true;
                pthread_mutex_lock(&f->mu);
                f->dead = true;
                pthread_mutex_unlock(&f->mu);
            } else if (out && !batch_copy_step(b, out)) {
                log_error("frontend: out of memory copying a step's outputs; the engine is stopped");
                dead = true;
                busy = false;
                b->fatal = true;
                pthread_mutex_lock(&f->mu);
                f->dead = true;
                pthread_mutex_unlock(&f->mu);
            }
            if (!dead) busy = f->ops.has_unfinished(f->engine);
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

static void request_done(frontend *f, fe_req *r) {
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
        request_done(f, r);
        return;
    }
    output_request q = {
        .request_id = r->id,
        .prompt_ids = r->prompt_ids,
        .num_prompt_ids = r->num_prompt,
        .sp = &r->sp,
        .stop = (const char *const *)r->stop,
        .num_stop = r->num_stop,
        .include_stop_str_in_output = r->include_stop,
        .skip_special_tokens = r->skip_special,
        .detokenize = true,
        .ud = r,
    };
    vllm_status rc = output_processor_add_request(f->op, &q);
    if (rc != VLLM_OK) {
        /* The engine has it: abort there, report here, and let its later
         * outputs find no request in the processor (ignored). */
        enqueue(f, CMD_ABORT, r->id, 0);
        r->sink.on_added(r->sink.ud, rc, vllm_errmsg());
        request_done(f, r);
        return;
    }
    r->sink.on_added(r->sink.ud, VLLM_OK, NULL);
    pthread_mutex_lock(&f->mu);
    bool abort_now = f->shutting_down;
    pthread_mutex_unlock(&f->mu);
    if (abort_now) enqueue(f, CMD_ABORT, r->id, 0);
}

/* The processor's results to the sinks: stop commands first (the engine
 * should hear of them as early as possible), then every delta, then on_done
 * of the requests the processor is done with. */
static void deliver(frontend *f, const output_result *res) {
    for (int32_t i = 0; i < res->num_stops; i++) enqueue(f, CMD_STOP_SEQ, res->stops[i].request_id, res->stops[i].index);
    for (int32_t i = 0; i < res->num_deltas; i++) {
        const output_delta *d = &res->deltas[i];
        fe_req *r = d->ud;
        r->sink.on_delta(r->sink.ud, d);
    }
    for (int32_t i = 0; i < res->num_done; i++) request_done(f, res->done[i].ud);
}

/* One batch's step: the processor, the step observer, the sinks. The
 * observer sees the finishes the clients will see (a stop string matched in
 * a step where the engine also stopped for length reads STOP), before any
 * client does. */
static void handle_step(frontend *f, fe_batch *b) {
    vllm_step_output view = {.timestamp = b->timestamp, .num_outputs = (int32_t)b->n_outs,
                             .outputs = b->outs, .stats = b->stats};
    const output_result *res;
    if (output_processor_process(f->op, &view, &res) != VLLM_OK) {
        log_error("frontend: out of memory handling a step; its outputs are lost: %s", vllm_errmsg());
        return;
    }
    if (b->has_step && (f->observer || f->engine_observer)) {
        bool saved = buf_grow((void **)&f->engine_finish, &f->cap_engine_finish, b->n_outs,
                              sizeof *f->engine_finish) == VLLM_OK;
        for (int32_t i = 0; saved && i < res->num_deltas; i++) {
            const output_delta *d = &res->deltas[i];
            if (d->output_index < 0 || d->finish_reason == VLLM_FINISH_NONE) continue;
            f->engine_finish[d->output_index] = b->outs[d->output_index].finish_reason;
            b->outs[d->output_index].finish_reason = d->finish_reason;
        }
        if (f->observer) f->observer(f->observer_ud, &view);
        else f->engine_observer(f->observer_ud, b->engine_index, &view);
        for (int32_t i = 0; saved && i < res->num_deltas; i++) {
            const output_delta *d = &res->deltas[i];
            if (d->output_index >= 0 && d->finish_reason != VLLM_FINISH_NONE)
                b->outs[d->output_index].finish_reason = f->engine_finish[d->output_index];
        }
    }
    deliver(f, res);
}

/* Ends every registered request with ABORT (the engine is gone or stopping). */
static void finish_all(frontend *f) {
    const output_result *res;
    if (output_processor_abort_all(f->op, &res) != VLLM_OK) {
        log_error("frontend: out of memory ending the live requests: %s", vllm_errmsg());
        return;
    }
    deliver(f, res);
}

static void abort_one(void *ctx, const char *request_id, void *ud) {
    (void)ud;
    enqueue(ctx, CMD_ABORT, request_id, 0);
}

static void abort_all(frontend *f) { output_processor_foreach(f->op, abort_one, f); }

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
            if (b->n_outs || b->has_step) handle_step(f, b);
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

static vllm_status local_add(void *e, const char *id, const int32_t *p, int32_t n, const vllm_sampling_params *sp,
                             const vllm_request_opts *opts) {
    return vllm_engine_add_request(e, id, p, n, sp, opts);
}
static vllm_status local_abort(void *e, const char *id) { return vllm_engine_abort_request(e, id); }
static vllm_status local_stop(void *e, const char *id, int32_t index) { return vllm_engine_stop_sequence(e, id, index); }
static bool local_has_unfinished(void *e) { return vllm_engine_has_unfinished(e); }
static vllm_status local_step(void *e, const vllm_step_output **out, int32_t *engine_index) {
    *engine_index = 0;
    return vllm_engine_step(e, out);
}
static void local_free(void *e) { vllm_engine_free(e); }

vllm_status frontend_create(vllm_engine *engine, const tokenizer *tok, frontend **out) {
    static const frontend_engine_ops local = {local_add, local_abort, local_stop, local_has_unfinished,
                                              local_step, NULL, local_free};
    return frontend_create_ops(&local, engine, tok, out);
}

vllm_status frontend_create_ops(const frontend_engine_ops *ops, void *engine, const tokenizer *tok, frontend **out) {
    *out = NULL;
    frontend *f = calloc(1, sizeof *f);
    if (!f) return vllm_error(VLLM_ERR_NOMEM, "frontend: out of memory");
    vllm_status rc = output_processor_create(tok, &f->op);
    if (rc != VLLM_OK) {
        free(f);
        return rc;
    }
    f->ops = *ops;
    f->engine = engine;
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
        if (f->ops.wake) f->ops.wake(f->engine); /* a remote engine's step may be waiting on sockets */
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
    if (f->engine) f->ops.free(f->engine);
    output_processor_free(f->op);
    free(f->engine_finish);
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
    if (q->lora_name && !(r->lora_name = strdup(q->lora_name))) goto nomem;
    if (q->kv_remote_host && !(r->kv_remote_host = strdup(q->kv_remote_host))) goto nomem;
    r->kv_remote_port = q->kv_remote_port;
    r->so = q->structured_outputs;
    r->so.text = NULL;
    r->so.whitespace_pattern = NULL;
    if (q->structured_outputs.text) {
        size_t n = q->structured_outputs.len ? q->structured_outputs.len : strlen(q->structured_outputs.text);
        char *t = malloc(n + 1);
        if (!t) goto nomem;
        memcpy(t, q->structured_outputs.text, n);
        t[n] = 0;
        r->so.text = t;
        r->so.len = n;
    }
    if (q->structured_outputs.whitespace_pattern &&
        !(r->so.whitespace_pattern = strdup(q->structured_outputs.whitespace_pattern)))
        goto nomem;
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
    struct timespec dl = clock_deadline(seconds);
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

void frontend_set_engine_step_observer(frontend *f, frontend_engine_step_fn fn, void *ud) {
    pthread_mutex_lock(&f->mu);
    f->engine_observer = fn;
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

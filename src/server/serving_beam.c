/*
 * serving_beam.c - `use_beam_search` in /v1/completions (vLLM's
 * OpenAIServing.beam_search): engine/beam_search.h's loop on a worker
 * thread, each step's one-token requests sent through the frontend like any
 * other ("<id>-<prompt>-<step>-<beam>"; vLLM's beam search also makes real
 * engine requests, so they count in the metrics as requests), the prompt's
 * KV shared through the prefix cache. The answer is one JSON response
 * (prompt-major choices: index = prompt * n + beam, n = the beam width),
 * each beam's text decoded from its tokens, vLLM's usage (the prompts, and
 * every beam's tokens).
 *
 * vLLM's semantics: n is the beam width (at most max_logprobs / 2: each step
 * asks for 2 x width logprobs), temperature (default 0 here, as vLLM's
 * BeamSearchParams) picks each step's sampled token, length_penalty ranks
 * (cumulative_logprob / len ** length_penalty, len with the prompt),
 * ignore_eos, max_tokens (default 16). Refused with a 400 naming the field:
 * stream, echo, logprobs, stop strings, min_tokens -- which vLLM's beam
 * search would ignore or mishandle -- so nobody gets silently different output.
 *
 * Threads: the handler validates, then starts a detached worker holding a
 * reference on the HTTP request; the sinks (output thread) fill a step's
 * candidates and count the step's requests down; a client that leaves sets
 * a flag the worker sees between steps and while it waits (its outstanding
 * requests are aborted). ctx->beam_workers counts live workers, so the
 * server's shutdown waits for them before the frontend goes away.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/beam_search.h"
#include "metrics/metrics.h"
#include "server/serving.h"

typedef struct beam_call beam_call;

/* One one-token request of a step. */
typedef struct beam_slot {
    beam_call *call;
    int32_t beam;
    bool got;
    bool metered;
} beam_slot;

struct beam_call {
    serving_ctx *ctx;
    http_request *http;
    openai_request req;
    const char *model_name;
    char id[80];
    int64_t created;
    double arrival;
    int32_t **prompt_ids;
    int32_t *prompt_lens;
    vllm_beam_search_params bp;
    /* the current step (slots and candidates belong to it) */
    int32_t prompt, step, k;
    beam_slot *slots;
    beam_candidate *cand;
    int32_t *num_cand;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t pending;             /* step requests not yet done */
    bool failed;
    char error[512];
    atomic_bool gone;            /* the client left */
    atomic_int refs;             /* the worker's and the HTTP close callback's */
};

static void call_free(beam_call *c) {
    for (int32_t i = 0; i < c->req.num_prompts; i++) free(c->prompt_ids ? c->prompt_ids[i] : NULL);
    free(c->prompt_ids);
    free(c->prompt_lens);
    free(c->slots); /* cand and num_cand belong to beam_search_run */
    openai_request_free(&c->req);
    http_request_release(c->http);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void call_release(beam_call *c) {
    if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

static void slot_id(const beam_call *c, int32_t beam, char *id, size_t cap) {
    snprintf(id, cap, "%s-%d-%d-%d", c->id, c->prompt, c->step, beam);
}

/* ---- sinks (output thread) ---------------------------------------------------------------- */

static void on_added(void *ud, vllm_status rc, const char *error) {
    beam_slot *s = ud;
    beam_call *c = s->call;
    if (rc == VLLM_OK) return;
    pthread_mutex_lock(&c->mu);
    if (!c->failed) {
        c->failed = true;
        snprintf(c->error, sizeof c->error, "%s", error ? error : "the engine refused a beam search step");
    }
    pthread_mutex_unlock(&c->mu);
    if (s->metered) {
        char id[160];
        slot_id(c, s->beam, id, sizeof id);
        metrics_request_released(c->ctx->metrics, id);
    }
}

/* The candidates in the engine step's order: the top k by rank, the
 * sampled token at its rank or after them (engine/beam_search.c does the same). */
static void on_delta(void *ud, const output_delta *d) {
    beam_slot *s = ud;
    beam_call *c = s->call;
    if (d->finish_reason != VLLM_FINISH_NONE && c->ctx->metrics) {
        char id[160];
        slot_id(c, s->beam, id, sizeof id);
        metrics_sequence_finished(c->ctx->metrics, id, d->index, d->finish_reason, vllm_monotonic_time());
    }
    pthread_mutex_lock(&c->mu);
    if (d->num_tokens > 0 && d->logprobs && !s->got) {
        const output_token_logprobs *l = &d->logprobs[0];
        beam_candidate *out = c->cand + (size_t)s->beam * (size_t)(c->k + 1);
        int32_t n = 0;
        for (int32_t r = 1; r <= c->k; r++) /* ranks 1..k: every entry has its own rank */
            for (int32_t j = 0; j < l->num_entries; j++)
                if (l->entries[j].rank == r) {
                    out[n++] = (beam_candidate){l->entries[j].token_id, l->entries[j].logprob};
                    break;
                }
        if (l->num_entries > 0 && l->entries[0].rank > c->k)
            out[n++] = (beam_candidate){l->entries[0].token_id, l->entries[0].logprob};
        c->num_cand[s->beam] = n;
        s->got = true;
    }
    if (d->finish_reason == VLLM_FINISH_ABORT && !c->failed) {
        c->failed = true;
        snprintf(c->error, sizeof c->error, "the request was aborted");
    }
    pthread_mutex_unlock(&c->mu);
}

static void on_done(void *ud) {
    beam_slot *s = ud;
    beam_call *c = s->call;
    pthread_mutex_lock(&c->mu);
    if (--c->pending == 0) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_http_close(void *arg, bool completed) {
    beam_call *c = arg;
    if (!completed) {
        atomic_store(&c->gone, true);
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    call_release(c);
}

/* ---- the step (worker thread) ------------------------------------------------------------- */

static vllm_status frontend_step(void *ud, const int32_t *const *seqs, const int32_t *lens, int32_t n, int32_t k,
                                 beam_candidate *out, int32_t *num_out) {
    beam_call *c = ud;
    serving_ctx *ctx = c->ctx;
    if (atomic_load(&c->gone)) return vllm_error(VLLM_ERR_IO, "the client disconnected");
    c->k = k;
    c->cand = out;
    c->num_cand = num_out;
    for (int32_t i = 0; i < n; i++) {
        num_out[i] = 0;
        c->slots[i] = (beam_slot){c, i, false, false};
    }
    pthread_mutex_lock(&c->mu);
    c->pending = 0;
    pthread_mutex_unlock(&c->mu);
    vllm_status rc = VLLM_OK;
    for (int32_t i = 0; i < n && !rc; i++) {
        char id[160];
        slot_id(c, i, id, sizeof id);
        frontend_request q = {
            .request_id = id,
            .prompt_ids = seqs[i],
            .num_prompt_ids = lens[i],
            .priority = c->req.priority,
            .cache_salt = c->req.cache_salt,
            .lora_name = serving_lora_name(ctx, c->model_name),
            .skip_special_tokens = true,
        };
        vllm_sampling_params_init(&q.sp);
        q.sp.max_tokens = 1;
        q.sp.logprobs = k;
        q.sp.temperature = c->bp.temperature;
        q.sp.ignore_eos = true; /* the loop decides what EOS means */
        if (ctx->metrics && metrics_request_arrived(ctx->metrics, id, vllm_monotonic_time(), lens[i], 1, 1) == VLLM_OK)
            c->slots[i].metered = true;
        frontend_sink sink = {on_added, on_delta, on_done, &c->slots[i]};
        pthread_mutex_lock(&c->mu);
        c->pending++;
        pthread_mutex_unlock(&c->mu);
        if ((rc = frontend_add_request(ctx->fe, &q, &sink)) != VLLM_OK) {
            pthread_mutex_lock(&c->mu);
            c->pending--;
            pthread_mutex_unlock(&c->mu);
            if (c->slots[i].metered) metrics_request_released(ctx->metrics, id);
        }
    }
    /* wait for the step; a client that leaves aborts what is still running */
    bool aborted = false;
    pthread_mutex_lock(&c->mu);
    while (c->pending > 0) {
        if (atomic_load(&c->gone) && !aborted) {
            aborted = true;
            pthread_mutex_unlock(&c->mu);
            for (int32_t i = 0; i < n; i++) {
                char id[160];
                slot_id(c, i, id, sizeof id);
                frontend_abort_request(ctx->fe, id);
            }
            pthread_mutex_lock(&c->mu);
            continue;
        }
        struct timespec dl = clock_deadline(1.0);
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    }
    bool failed = c->failed;
    pthread_mutex_unlock(&c->mu);
    if (rc) return rc;
    if (atomic_load(&c->gone)) return vllm_error(VLLM_ERR_IO, "the client disconnected");
    if (failed) return vllm_error(VLLM_ERR_INVALID, "%s", c->error);
    for (int32_t i = 0; i < n; i++)
        if (!c->slots[i].got) return vllm_error(VLLM_ERR_INVALID, "beam search: beam %d of step %d got no token", i, c->step);
    c->step++;
    return VLLM_OK;
}

/* ---- the worker ------------------------------------------------------------------------------ */

static void respond_error(beam_call *c, int status, const char *type, const char *msg) {
    openai_error e;
    openai_fail(&e, status, type, NULL, "%s", msg);
    char *body = openai_error_body(&e);
    http_request_finish(c->http, status, "application/json", body ? body : "{}", body ? strlen(body) : 2);
    free(body);
}

static void *worker(void *arg) {
    beam_call *c = arg;
    serving_ctx *ctx = c->ctx;
    int32_t n = c->bp.beam_width;
    json_t *choices = json_array();
    int64_t prompt_tokens = 0, completion_tokens = 0;
    bool ok = true;
    for (int32_t p = 0; p < c->req.num_prompts && ok; p++) {
        c->prompt = p;
        c->step = 0;
        vllm_beam *beams = NULL;
        int32_t nb = 0;
        vllm_status rc = beam_search_run(&c->bp, ctx->eos_ids, ctx->num_eos_ids, c->prompt_ids[p], c->prompt_lens[p],
                                         frontend_step, c, &beams, &nb);
        if (rc) {
            if (!atomic_load(&c->gone)) respond_error(c, 500, "Internal Server Error", vllm_errmsg());
            ok = false;
            break;
        }
        prompt_tokens += c->prompt_lens[p];
        for (int32_t i = 0; i < nb; i++) {
            char *text = NULL;
            size_t len = 0;
            if (tokenizer_decode(ctx->tok, beams[i].token_ids, beams[i].num_tokens, c->req.skip_special_tokens, &text,
                                 &len) != VLLM_OK) {
                respond_error(c, 500, "Internal Server Error", vllm_errmsg());
                ok = false;
                break;
            }
            completion_tokens += beams[i].num_tokens;
            json_t *o = json_object();
            json_object_set_new(o, "index", json_integer((json_int_t)p * n + i));
            json_object_set_new(o, "text", openai_json_text(text, len));
            json_object_set_new(o, "logprobs", json_null());
            json_object_set_new(o, "finish_reason", json_string(vllm_finish_reason_str(beams[i].finish_reason)));
            json_object_set_new(o, "stop_reason", beams[i].stop_token_id >= 0 ? json_integer(beams[i].stop_token_id)
                                                                             : json_null());
            if (c->req.return_token_ids) {
                json_t *ids = json_array();
                for (int32_t t = 0; t < beams[i].num_tokens; t++) json_array_append_new(ids, json_integer(beams[i].token_ids[t]));
                json_object_set_new(o, "token_ids", ids);
            }
            json_array_append_new(choices, o);
            free(text);
        }
        vllm_beams_free(beams, nb);
    }
    if (ok) {
        json_t *j = json_object();
        json_object_set_new(j, "id", json_string(c->id));
        json_object_set_new(j, "object", json_string("text_completion"));
        json_object_set_new(j, "created", json_integer(c->created));
        json_object_set_new(j, "model", json_string(c->model_name));
        json_object_set_new(j, "choices", choices);
        choices = NULL;
        json_object_set_new(j, "service_tier", json_null());
        json_object_set_new(j, "system_fingerprint", json_null());
        json_object_set_new(j, "usage", openai_usage_json(prompt_tokens, completion_tokens, 0, false));
        json_object_set_new(j, "kv_transfer_params", json_null());
        char *s = openai_dumps(j);
        json_decref(j);
        if (s) http_request_finish(c->http, 200, "application/json", s, strlen(s));
        else respond_error(c, 500, "Internal Server Error", "out of memory building the response");
        free(s);
    }
    json_decref(choices);
    serving_ctx *x = c->ctx;
    call_release(c);
    atomic_fetch_sub(&x->beam_workers, 1);
    atomic_fetch_sub(&x->server_load, 1);
    return NULL;
}

/* ---- the handler ------------------------------------------------------------------------------- */

void serving_beam_search(serving_ctx *ctx, http_request *http, openai_request *req, serving_prompt *prompts,
                         int32_t num_prompts, const char *model_name) {
    openai_error e = {0};
    const char *bad = req->stream ? "stream" : req->echo ? "echo" : req->logprobs >= 0 ? "logprobs"
                    : req->num_stop > 0 ? "stop" : req->min_tokens > 0 ? "min_tokens" : NULL;
    beam_call *c = NULL;
    if (bad) {
        openai_fail(&e, 400, "BadRequestError", bad, "use_beam_search does not take `%s` here", bad);
        goto fail;
    }
    if (req->n < 1 || 2 * req->n > ctx->max_logprobs) {
        openai_fail(&e, 400, "BadRequestError", "n", "use_beam_search: n (the beam width) is %d; it must be 1..%d "
                    "(each step asks for 2 x n logprobs, at most --max-logprobs %d)", req->n, ctx->max_logprobs / 2,
                    ctx->max_logprobs);
        goto fail;
    }
    if (!(c = calloc(1, sizeof *c))) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ctx = ctx;
    c->http = http;
    http_request_retain(http);
    c->req = *req;
    memset(req, 0, sizeof *req);
    c->model_name = model_name;
    c->created = (int64_t)time(NULL);
    c->arrival = vllm_monotonic_time();
    openai_random_id("cmpl-", c->id, sizeof c->id);
    vllm_beam_search_params_init(&c->bp);
    c->bp.beam_width = c->req.n;
    c->bp.ignore_eos = c->req.ignore_eos;
    c->bp.temperature = c->req.has_temperature ? (float)c->req.temperature : 0.0f;
    c->bp.length_penalty = (float)c->req.length_penalty;
    c->prompt_ids = calloc((size_t)num_prompts, sizeof *c->prompt_ids);
    c->prompt_lens = calloc((size_t)num_prompts, sizeof *c->prompt_lens);
    c->slots = calloc((size_t)c->req.n, sizeof *c->slots);
    if (!c->prompt_ids || !c->prompt_lens || !c->slots) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    int32_t max_tokens = INT32_MAX;
    for (int32_t i = 0; i < num_prompts; i++) {
        c->prompt_ids[i] = prompts[i].ids; /* taken */
        prompts[i].ids = NULL;
        c->prompt_lens[i] = prompts[i].num_ids;
        int32_t room = ctx->max_model_len - prompts[i].num_ids;
        if (room < max_tokens) max_tokens = room;
    }
    c->bp.max_tokens = c->req.has_max_tokens ? (int32_t)c->req.max_tokens : 16;
    if (c->bp.max_tokens > max_tokens) {
        openai_fail(&e, 400, "BadRequestError", "max_tokens", "This model's maximum context length is %d tokens. "
                    "However, you requested %d output tokens and a prompt of %d tokens.", ctx->max_model_len,
                    c->bp.max_tokens, ctx->max_model_len - max_tokens);
        goto fail;
    }
    http_request_defer(http);
    atomic_init(&c->refs, 2);
    http_request_on_close(http, on_http_close, c);
    atomic_fetch_add(&ctx->beam_workers, 1);
    atomic_fetch_add(&ctx->server_load, 1);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, worker, c);
    pthread_attr_destroy(&attr);
    if (err) {
        atomic_fetch_sub(&ctx->beam_workers, 1);
        atomic_fetch_sub(&ctx->server_load, 1);
        respond_error(c, 500, "Internal Server Error", "cannot start the beam search thread");
        call_release(c); /* the close callback drops the other */
    }
    return;
fail:
    if (c) call_free(c);
    else openai_request_free(req);
    serving_respond_error(http, &e);
}

bool serving_beam_wait(serving_ctx *ctx, double seconds) {
    double end = clock_now() + seconds;
    while (atomic_load(&ctx->beam_workers) > 0) {
        if (clock_now() > end) return false;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return true;
}

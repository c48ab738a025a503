/*
 * serving.c - the lifecycle shared by completions and chat (see serving.h):
 * submitting a call's engine requests, the frontend sink that turns deltas
 * into stream chunks or an accumulated response, disconnects, and the small
 * helpers both formats use (usage, stop_reason, logprob tokens, SSE).
 *
 * A call's mutex serialises the sink callbacks (output thread) with its
 * submission (MHD thread) and the HTTP close callback (MHD thread); lock
 * order is call -> http request, never the reverse (and call -> metrics).
 *
 * Metrics: each engine request is announced (metrics_request_arrived)
 * before the frontend can output for it and forgotten if it never reaches
 * the engine; the engine's steps reach the metrics through the frontend's
 * step observer, before the step's deltas; every finish a client sees is
 * reported too, which records the ones the front end decides (stop strings,
 * a dead engine) and is ignored for those the engine step already reported.
 */
#include "server/serving.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "metrics/metrics.h"
#include "metrics/tracing.h"
#include "sample/sampler.h"

/* the call's lock lives beside it; kept out of serving.h's struct on purpose
 * (nothing outside this file may take it) */
typedef struct call_box {
    serving_call call;
    pthread_mutex_t mu;
    int32_t num_submitted;
    bool *added_ok; /* (num_prompts) */
    bool *metered;  /* (num_prompts) metrics_request_arrived succeeded; shares added_ok's block */
    bool aborted;   /* abort_all ran */
} call_box;

static call_box *box_of(serving_call *c) { return (call_box *)c; }

void serving_respond_error(http_request *http, const openai_error *e) {
    char *body = openai_error_body(e);
    if (body) http_respond(http, e->status, "application/json", body, strlen(body));
    else http_respond(http, 500, "application/json", "{}", 2);
    free(body);
}

static void finish_error(serving_call *c, const openai_error *e) {
    char *body = openai_error_body(e);
    http_request_finish(c->http, e->status, "application/json", body ? body : "{}",
                        body ? strlen(body) : 2);
    free(body);
}

const char *serving_check_model(serving_ctx *ctx, const char *model, openai_error *e) {
    if (!model) return ctx->served_names[0];
    for (int i = 0; i < ctx->num_served_names; i++)
        if (!strcmp(model, ctx->served_names[i])) return ctx->served_names[i];
    if (serving_lora_has(ctx, model)) return model;
    openai_fail(e, 404, "NotFoundError", "model", "The model `%s` does not exist.", model);
    return NULL;
}

const char *serving_lora_name(const serving_ctx *ctx, const char *model) {
    if (!serving_lora_enabled(ctx) || !model) return NULL;
    for (int i = 0; i < ctx->num_served_names; i++)
        if (!strcmp(model, ctx->served_names[i])) return NULL;
    return model;
}

serving_call *serving_call_new(serving_ctx *ctx, http_request *http, openai_request *req,
                               const serving_format *fmt, const char *id_prefix) {
    call_box *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    serving_call *c = &b->call;
    pthread_mutex_init(&b->mu, NULL);
    atomic_init(&c->refs, 1);
    atomic_init(&c->http_gone, false);
    c->ctx = ctx;
    c->http = http;
    http_request_retain(http);
    c->fmt = fmt;
    c->req = *req;
    memset(req, 0, sizeof *req); /* moved */
    json_t *as_ids = json_object_get(c->req.body, "return_tokens_as_token_ids");
    if ((!as_ids || json_is_null(as_ids)) && ctx->return_tokens_as_token_ids) /* the request's wins, as vLLM */
        c->req.return_tokens_as_token_ids = true;
    c->created = (int64_t)time(NULL);
    c->arrival = vllm_monotonic_time();
    const char *hdr = http_request_header(http, "X-Request-Id");
    const char *base = hdr && *hdr ? hdr : c->req.request_id;
    if (base && *base) snprintf(c->id, sizeof c->id, "%s%s", id_prefix, base);
    else openai_random_id(id_prefix, c->id, sizeof c->id);
    atomic_fetch_add(&ctx->server_load, 1);
    return c;
}

void serving_call_release(serving_call *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    call_box *b = box_of(c);
    atomic_fetch_sub(&c->ctx->server_load, 1);
    if (c->admitted_seqs) atomic_fetch_sub(&c->ctx->num_queued_seqs, c->admitted_seqs);
    for (int32_t i = 0; i < c->num_prompts; i++) {
        free(c->prompts[i].ids);
        free(c->prompts[i].text);
        json_decref(c->prompts[i].prompt_logprobs);
    }
    free(c->prompts);
    for (int32_t i = 0; i < c->num_choices; i++) {
        free(c->choices[i].text);
        free(c->choices[i].token_ids);
        free(c->choices[i].stop_str);
        if (c->choices[i].parse_free) c->choices[i].parse_free(c->choices[i].parse);
        json_decref(c->choices[i].logprobs);
    }
    free(c->choices);
    free(c->echo_text);
    if (c->ext_free) c->ext_free(c->ext);
    free(b->added_ok);
    if (c->grammar) grammar_cache_entry_unref(c->ctx->grammars, c->grammar);
    openai_request_free(&c->req);
    http_request_release(c->http);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void serving_call_retain(serving_call *c) { atomic_fetch_add(&c->refs, 1); }

static void abort_all(serving_call *c);

void serving_call_abort(serving_call *c) {
    call_box *b = box_of(c);
    pthread_mutex_lock(&b->mu);
    abort_all(c);
    pthread_mutex_unlock(&b->mu);
}

/* ---- helpers for the formats ---------------------------------------------------- */

json_t *serving_stop_reason(const serving_choice *ch) {
    if (ch->stop_str) return json_string(ch->stop_str);
    if (ch->stop_token_id >= 0) return json_integer(ch->stop_token_id);
    return json_null();
}

/* Removes null members, recursively (pydantic's exclude_none). */
static void drop_nulls(json_t *j) {
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(j, tmp, k, v) {
            if (json_is_null(v)) json_object_del(j, k);
            else drop_nulls(v);
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) drop_nulls(v);
    }
}

void serving_send_event(serving_call *c, json_t *j, bool exclude_nulls) {
    if (!j) return;
    if (exclude_nulls) drop_nulls(j);
    char *s = openai_dumps(j);
    json_decref(j);
    if (!s) return;
    size_t n = strlen(s);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, s, n);
        memcpy(ev + 6 + n, "\n\n", 2);
        if (!http_request_write(c->http, ev, n + 8)) atomic_store(&c->http_gone, true);
        free(ev);
    }
    free(s);
}

json_t *serving_token_json(serving_call *c, const output_logprob *e) {
    if (c->req.return_tokens_as_token_ids) {
        char buf[32];
        snprintf(buf, sizeof buf, "token_id:%d", e->token_id);
        return json_string(buf);
    }
    json_t *j = e->bytes ? openai_json_text(e->bytes, e->bytes_len) : NULL;
    return j ? j : json_string("");
}

json_t *serving_response_new(serving_call *c, const char *object, json_t *choices) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(c->id));
    json_object_set_new(j, "object", json_string(object));
    json_object_set_new(j, "created", json_integer(c->created));
    json_object_set_new(j, "model", json_string(c->model_name));
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "service_tier", json_null());
    json_object_set_new(j, "system_fingerprint", json_null());
    json_object_set_new(j, "usage", serving_usage(c, false));
    return j;
}

json_t *serving_usage(serving_call *c, bool omit_null) {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (int32_t i = 0; i < c->num_prompts; i++) {
        prompt += c->prompts[i].num_ids;
        cached += c->prompts[i].num_cached;
    }
    for (int32_t i = 0; i < c->num_choices; i++) completion += c->choices[i].num_tokens;
    /* vLLM: only with --enable-prompt-tokens-details (and then only when some were cached) */
    return openai_usage_json(prompt, completion, c->ctx->enable_prompt_tokens_details ? cached : 0, omit_null);
}

bool serving_check_prompt_ids(serving_ctx *ctx, const int32_t *ids, int32_t n, openai_error *e) {
    if (n == 0)
        return openai_fail(e, 400, "BadRequestError", "prompt", "The decoder prompt cannot be empty");
    int32_t max = ids[0];
    for (int32_t i = 1; i < n; i++)
        if (ids[i] > max) max = ids[i];
    int32_t vocab = tokenizer_vocab_size(ctx->tok);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return openai_fail(e, 400, "BadRequestError", "prompt", "Token id %d is out of vocabulary",
                               ids[i]);
    if (max >= vocab)
        return openai_fail(e, 400, "BadRequestError", "prompt", "Token id %d is out of vocabulary", max);
    return true;
}

bool serving_tokenize_prompt(serving_ctx *ctx, const char *text, size_t len, bool add_special,
                             int32_t **ids, int32_t *n, openai_error *e) {
    *ids = NULL;
    *n = 0;
    if (tokenizer_encode(ctx->tok, text, len, add_special, ids, n) != VLLM_OK) {
        free(*ids);
        *ids = NULL;
        return openai_fail(e, 400, "BadRequestError", "prompt", "%s", vllm_errmsg());
    }
    return true;
}

/* ---- the sink (output thread) ------------------------------------------------------ */

static void complete(serving_call *c) {
    if (c->responded) return;
    c->responded = true;
    if (c->streaming && c->fmt->stream_end) {
        c->fmt->stream_end(c);
        http_request_end_stream(c->http);
        return;
    }
    if (c->streaming) {
        if (c->req.include_usage || c->ctx->enable_force_include_usage) {
            json_t *j = json_object();
            json_object_set_new(j, "id", json_string(c->id));
            json_object_set_new(j, "object", json_string(c->req.chat ? "chat.completion.chunk"
                                                                      : "text_completion"));
            json_object_set_new(j, "created", json_integer(c->created));
            json_object_set_new(j, "model", json_string(c->model_name));
            json_object_set_new(j, "choices", json_array());
            json_object_set_new(j, "usage", serving_usage(c, true));
            serving_send_event(c, j, true);
        }
        static const char done[] = "data: [DONE]\n\n";
        http_request_write(c->http, done, sizeof done - 1);
        http_request_end_stream(c->http);
        return;
    }
    json_t *j = c->fmt->final_response(c);
    if (j && c->fmt->completed) c->fmt->completed(c, j);
    if (c->background) { /* answered when it began */
        json_decref(j);
        return;
    }
    char *s = j ? openai_dumps(j) : NULL;
    json_decref(j);
    if (s) {
        http_request_finish(c->http, 200, "application/json", s, strlen(s));
    } else {
        openai_error e;
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory building the response");
        finish_error(c, &e);
    }
    free(s);
}

static void engine_id(const serving_call *c, int32_t prompt, char *id, size_t cap) {
    if (c->req.chat) snprintf(id, cap, "%s", c->id);
    else snprintf(id, cap, "%s-%d", c->id, prompt);
}

/* Aborts every accepted, unfinished engine request of the call (once; a
 * request accepted later is aborted by on_added). Caller holds the lock. */
static void abort_all(serving_call *c) {
    call_box *b = box_of(c);
    if (b->aborted) return;
    b->aborted = true;
    char id[160];
    for (int32_t i = 0; i < b->num_submitted; i++) {
        if (!b->added_ok[i] || c->prompts[i].done) continue;
        engine_id(c, i, id, sizeof id);
        frontend_abort_request(c->ctx->fe, id);
    }
}

/* The sink's ud is a small record naming the call and the prompt. */
typedef struct sink_ud { serving_call *call; int32_t prompt; } sink_ud;

static void on_added(void *ud, vllm_status rc, const char *error) {
    sink_ud *u = ud;
    serving_call *c = u->call;
    call_box *b = box_of(c);
    pthread_mutex_lock(&b->mu);
    c->num_added++;
    if (rc == VLLM_OK) {
        b->added_ok[u->prompt] = true;
        if (b->aborted) { /* the client left (or a sibling failed) before this was accepted */
            char id[160];
            engine_id(c, u->prompt, id, sizeof id);
            frontend_abort_request(c->ctx->fe, id);
        }
    } else {
        c->num_add_failed++;
        if (b->metered[u->prompt]) {
            char id[160];
            engine_id(c, u->prompt, id, sizeof id);
            metrics_request_released(c->ctx->metrics, id);
        }
        if (!c->add_error.status) {
            if (rc == VLLM_ERR_FULL) openai_fail(&c->add_error, 503, "Service Unavailable", NULL, "%s", error);
            else if (rc == VLLM_ERR_NOMEM) openai_fail(&c->add_error, 500, "Internal Server Error", NULL, "%s", error);
            else openai_fail(&c->add_error, 400, "BadRequestError", NULL, "%s", error);
        }
    }
    if (c->num_added == b->num_submitted) {
        if (c->num_add_failed || c->add_error.status) {
            abort_all(c);
            c->responded = true;
            finish_error(c, &c->add_error);
        } else if (c->streaming) {
            http_request_start_stream(c->http, 200, "text/event-stream; charset=utf-8");
            c->fmt->stream_begin(c);
        } else if (c->background && c->fmt->background_begin) {
            c->fmt->background_begin(c);
        }
    }
    pthread_mutex_unlock(&b->mu);
}

static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (buf_grow((void **)buf, cap, *len + n + 1, 1) != VLLM_OK) return false;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

/* vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...],
 * the prompt token first in each dict, then the top-N; -inf clamped to
 * -9999 (clamp_prompt_logprobs); decoded_token is decode([id]) as vLLM's. */
static json_t *prompt_logprobs_json(const output_delta *d) {
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (int32_t i = 0; i < d->num_prompt_logprobs; i++) {
        const output_token_logprobs *l = &d->prompt_logprobs[i];
        json_t *o = json_object();
        for (int32_t k = 0; k < l->num_entries; k++) {
            const output_logprob *e = &l->entries[k];
            char key[16];
            snprintf(key, sizeof key, "%d", e->token_id);
            json_t *v = json_object();
            json_object_set_new(v, "logprob", json_real(isinf(e->logprob) && e->logprob < 0 ? -9999.0 : (double)e->logprob));
            json_object_set_new(v, "rank", json_integer(e->rank));
            json_t *t = e->text ? openai_json_text(e->text, e->text_len) : NULL;
            json_object_set_new(v, "decoded_token", t ? t : json_null());
            json_object_set_new(o, key, v);
        }
        json_array_append_new(a, o);
    }
    return a;
}

/* Python's repr() of a str (what vLLM's %r logs): single quotes unless the
 * text has ' and no ", backslash escapes for the quote, \\, \n, \r, \t and
 * other control characters; at most max characters (-1: all). */
static void py_repr(strbuf *b, const char *s, size_t n, int32_t max) {
    bool sq = memchr(s, '\'', n) && !memchr(s, '"', n);
    char q = sq ? '"' : '\'';
    sb_add(b, &q, 1);
    for (size_t i = 0, chars = 0; i < n && (max < 0 || chars < (size_t)max); i++) {
        unsigned char ch = (unsigned char)s[i];
        chars += (ch & 0xC0) != 0x80;
        if ((ch & 0xC0) == 0x80 || ch >= 0x80) { /* UTF-8 bytes: printable as they are */
            sb_add(b, s + i, 1);
            continue;
        }
        char esc[8];
        int k = ch == '\\' ? snprintf(esc, sizeof esc, "\\\\") : ch == (unsigned char)q ? snprintf(esc, sizeof esc, "\\%c", q)
              : ch == '\n' ? snprintf(esc, sizeof esc, "\\n") : ch == '\r' ? snprintf(esc, sizeof esc, "\\r")
              : ch == '\t' ? snprintf(esc, sizeof esc, "\\t") : ch < 0x20 || ch == 0x7f ? snprintf(esc, sizeof esc, "\\x%02x", ch)
              : snprintf(esc, sizeof esc, "%c", ch);
        sb_add(b, esc, (size_t)k);
    }
    sb_add(b, &q, 1);
}

/* "[1, 2, 3]" of at most max ids (-1: all). */
static void ids_list(strbuf *b, const int32_t *ids, int32_t n, int32_t max) {
    if (max >= 0 && n > max) n = max;
    sb_add(b, "[", 1);
    for (int32_t i = 0; i < n; i++) {
        char t[16];
        int k = snprintf(t, sizeof t, "%s%d", i ? ", " : "", ids[i]);
        sb_add(b, t, (size_t)k);
    }
    sb_add(b, "]", 1);
}

/* vLLM's RequestLogger.log_inputs: the prompt (its text, or the decoded ids)
 * and ids cut to --max-log-len, and the sampling parameters. */
static void log_request(serving_call *c, int32_t prompt, const char *id) {
    const serving_prompt *p = &c->prompts[prompt];
    const vllm_sampling_params *sp = &p->sp;
    int32_t max = c->ctx->max_log_len;
    strbuf text = {0}, ids = {0};
    char *decoded = NULL;
    size_t dlen = 0;
    const openai_prompt *q = !c->req.chat && prompt < c->req.num_prompts ? &c->req.prompts[prompt] : NULL;
    if (q && q->text && c->req.truncate_prompt_tokens == 0) py_repr(&text, q->text, q->text_len, max);
    else if (tokenizer_decode(c->ctx->tok, p->ids, p->num_ids, false, &decoded, &dlen) == VLLM_OK)
        py_repr(&text, decoded, dlen, max);
    ids_list(&ids, p->ids, p->num_ids, max);
    log_info("Received request %s: prompt: %s, params: SamplingParams(n=%d, presence_penalty=%g, "
             "frequency_penalty=%g, repetition_penalty=%g, temperature=%g, top_p=%g, top_k=%d, min_p=%g, "
             "seed=%s, stop=[%d strings], stop_token_ids=[%d ids], ignore_eos=%s, max_tokens=%d, "
             "min_tokens=%d, logprobs=%d, prompt_logprobs=%d, skip_special_tokens=%s, "
             "allowed_token_ids=%d ids, bad_words=%d sequences), prompt_token_ids: %s, prompt_embeds shape: "
             "None, lora_request: None.",
             id, text.s ? text.s : "None", sp->n, (double)sp->presence_penalty, (double)sp->frequency_penalty,
             (double)sp->repetition_penalty, (double)sp->temperature, (double)sp->top_p, sp->top_k,
             (double)sp->min_p, sp->has_seed ? "set" : "None", c->req.num_stop, sp->num_stop_token_ids,
             sp->ignore_eos ? "True" : "False", sp->max_tokens, sp->min_tokens, sp->logprobs,
             sp->prompt_logprobs, c->req.skip_special_tokens ? "True" : "False", sp->num_allowed_token_ids,
             sp->num_bad_words, ids.s ? ids.s : "[]");
    free(text.s);
    free(ids.s);
    free(decoded);
}

/* vLLM's RequestLogger.log_outputs, once a choice has finished. */
static void log_output(serving_call *c, int32_t prompt, const serving_choice *ch) {
    char id[160];
    engine_id(c, prompt, id, sizeof id);
    strbuf text = {0}, ids = {0};
    py_repr(&text, ch->text ? ch->text : "", ch->text_len, c->ctx->max_log_len);
    ids_list(&ids, ch->token_ids, ch->num_tokens, c->ctx->max_log_len);
    const char *fr = vllm_finish_reason_str(ch->finish_reason);
    log_info("Generated response %s%s: output: %s, output_token_ids: %s, finish_reason: %s", id,
             c->streaming ? " (streaming complete)" : "", text.s ? text.s : "''", ids.s ? ids.s : "[]",
             fr ? fr : "None");
    free(text.s);
    free(ids.s);
}

static void on_delta(void *ud, const output_delta *d) {
    sink_ud *u = ud;
    serving_call *c = u->call;
    call_box *b = box_of(c);
    pthread_mutex_lock(&b->mu);
    if (d->finish_reason != VLLM_FINISH_NONE && c->ctx->metrics) { /* before the client can see it */
        char id[160];
        engine_id(c, u->prompt, id, sizeof id);
        metrics_sequence_finished(c->ctx->metrics, id, d->index, d->finish_reason, vllm_monotonic_time());
    }
    int32_t ci = u->prompt * c->n + d->index;
    if (c->responded || ci < 0 || ci >= c->num_choices || c->choices[ci].finished) goto out;
    serving_choice *ch = &c->choices[ci];
    serving_prompt *p = &c->prompts[u->prompt];
    if (d->num_cached_tokens > p->num_cached) p->num_cached = d->num_cached_tokens;
    if (d->has_prompt_logprobs && !p->prompt_logprobs) p->prompt_logprobs = prompt_logprobs_json(d);
    if (d->num_tokens > 0) {
        buf_grow((void **)&ch->token_ids, &ch->cap_tokens, (size_t)(ch->num_tokens + d->num_tokens),
                 sizeof *ch->token_ids); /* else the ids are not kept (usage still counts them) */
        if ((size_t)(ch->num_tokens + d->num_tokens) <= ch->cap_tokens)
            memcpy(ch->token_ids + ch->num_tokens, d->token_ids, (size_t)d->num_tokens * sizeof(int32_t));
        ch->num_tokens += d->num_tokens;
    }
    if (d->finish_reason != VLLM_FINISH_NONE) {
        ch->finished = true;
        ch->finish_reason = d->finish_reason;
        ch->stop_token_id = d->stop_token_id;
        if (d->stop_str) ch->stop_str = strdup(d->stop_str);
    }
    if (c->streaming) {
        if (!atomic_load(&c->http_gone)) c->fmt->stream_delta(c, ci, d, d->text, d->text_len);
        if (c->ctx->log_outputs && !append(&ch->text, &ch->text_len, &ch->text_cap, d->text, d->text_len))
            log_error("%s: out of memory accumulating output text", c->id);
    } else {
        c->fmt->stream_delta(c, ci, d, d->text, d->text_len); /* accumulates */
        if (!append(&ch->text, &ch->text_len, &ch->text_cap, d->text, d->text_len))
            log_error("%s: out of memory accumulating output text", c->id);
        /* A suspended connection cannot tell us its client left; look now and then. */
        double t = clock_now();
        if (!c->background && t - c->last_probe > 1.0) {
            c->last_probe = t;
            if (http_request_peer_closed(c->http)) atomic_store(&c->http_gone, true);
        }
    }
    if (ch->finished && c->ctx->log_outputs) log_output(c, u->prompt, ch);
    if (ch->finished && ++c->num_finished == c->num_choices) complete(c);
    if (atomic_load(&c->http_gone) && !c->responded && !c->background) {
        abort_all(c);
    }
out:
    pthread_mutex_unlock(&b->mu);
}

static void on_done(void *ud) {
    sink_ud *u = ud;
    serving_call *c = u->call;
    call_box *b = box_of(c);
    pthread_mutex_lock(&b->mu);
    c->prompts[u->prompt].done = true;
    pthread_mutex_unlock(&b->mu);
    free(u);
    serving_call_release(c);
}

/* The HTTP exchange ended (MHD thread). */
static void on_http_close(void *arg, bool completed) {
    serving_call *c = arg;
    call_box *b = box_of(c);
    atomic_store(&c->http_gone, true);
    pthread_mutex_lock(&b->mu);
    if (!c->background && (!completed || c->num_finished < c->num_choices)) {
        if (c->num_finished < c->num_choices)
            log_info("%s: client disconnected; aborting the request", c->id);
        abort_all(c);
    }
    pthread_mutex_unlock(&b->mu);
    serving_call_release(c);
}

/* Admission control, inside the handler: takes num_prompts * n slots of
 * ctx->max_num_queued_reqs, or answers 503 + Retry-After and returns false.
 * The slots are given back when the call is released (every sequence done
 * and the exchange over), so what the server holds for queued work -- bodies,
 * prompts, output buffers -- is bounded by the limit. */
static bool admit(serving_call *c) {
    serving_ctx *ctx = c->ctx;
    int64_t want = (int64_t)c->num_prompts * c->n, max = ctx->max_num_queued_reqs;
    openai_error e;
    if (max > 0 && want > max) { /* could never be admitted: the request's fault (nothing taken) */
        openai_fail(&e, 400, "BadRequestError", "n",
                    "This request needs %lld sequences (%d prompts x n=%d), more than the server "
                    "ever queues (--max-num-queued-reqs %lld).",
                    (long long)want, c->num_prompts, c->n, (long long)max);
        serving_respond_error(c->http, &e);
        return false;
    }
    int64_t now = atomic_fetch_add(&ctx->num_queued_seqs, want) + want;
    c->admitted_seqs = want; /* given back by serving_call_release */
    if (max <= 0 || now <= max) return true;
    openai_fail(&e, 503, "Service Unavailable", NULL,
                "The server is overloaded: %lld sequences are queued or running and this request "
                "needs %lld more (--max-num-queued-reqs %lld). Retry later.",
                (long long)(now - want), (long long)want, (long long)max);
    http_request_add_header(c->http, "Retry-After", "1");
    serving_respond_error(c->http, &e);
    return false;
}

/* Structured outputs: the call's constraint is compiled here, before
 * admission, on this MHD thread, which waits for it at most the engine's
 * compile timeout. So a constraint that does not compile (or not in time)
 * is a 400 naming the field and the problem, as vLLM validates structured
 * outputs when the request arrives, and the engine finds the grammar READY
 * (the call's reference keeps it cached until the call ends): the server's
 * requests never wait in WAITING_FOR_FSM. The price is an MHD thread held
 * during a compile (milliseconds for real schemas; a compile past the
 * timeout goes on in the cache's thread, not this one). */
static bool compile_structured(serving_call *c) {
    serving_ctx *ctx = c->ctx;
    const vllm_structured_outputs *so = &c->req.structured;
    if (so->kind == VLLM_STRUCTURED_NONE) return true;
    const char *field = c->req.structured_field ? c->req.structured_field : "structured_outputs";
    openai_error e = {0};
    st_spec spec;
    grammar_cache_entry *g = NULL;
    if (!ctx->grammars) {
        openai_fail(&e, 400, "BadRequestError", field, "Structured outputs are not available on this server.");
    } else if (grammar_cache_spec(so, &spec) != VLLM_OK) {
        openai_fail(&e, 400, "BadRequestError", field, "%s: %s", field, vllm_errmsg());
    } else if (grammar_cache_get(ctx->grammars, &spec, &g) != VLLM_OK) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "%s", vllm_errmsg());
    } else {
        grammar_state st = grammar_cache_entry_wait(ctx->grammars, g, clock_now() + ctx->compile_timeout);
        if (st == GRAMMAR_READY) {
            c->grammar = g;
            return true;
        }
        if (st == GRAMMAR_FAILED)
            openai_fail(&e, 400, "BadRequestError", field, "%s: %s", field, grammar_cache_entry_error(g));
        else
            openai_fail(&e, 400, "BadRequestError", field,
                        "%s: the grammar did not compile within %g s (--structured-outputs-compile-timeout)",
                        field, ctx->compile_timeout);
        grammar_cache_entry_unref(ctx->grammars, g);
    }
    serving_respond_error(c->http, &e);
    return false;
}

/* Tracing (metrics/tracing.h): the request's trace context and parameters,
 * before the engine can finish it; with tracing off, only vLLM's warning
 * about trace headers. */
static void trace_arrived(serving_call *c, const char *id, const vllm_sampling_params *sp) {
    /* the values as the request (or the generation config) gave them, not their float copies */
    const openai_request *q = &c->req;
    const openai_defaults *d = &c->ctx->defaults;
    double temperature = q->has_temperature ? q->temperature : d->has_temperature ? d->temperature : sp->temperature;
    double top_p = q->has_top_p ? q->top_p : d->has_top_p ? d->top_p : sp->top_p;
    tracing_request r = {
        .request_id = id, .response_id = c->id, .model = c->model_name,
        .operation = c->req.chat ? "chat" : "text_completion",
        .traceparent = http_request_header(c->http, "traceparent"),
        .tracestate = http_request_header(c->http, "tracestate"),
        .temperature = temperature, .top_p = top_p, .max_tokens = sp->max_tokens, .n = sp->n,
    };
    tracing_request_arrived(c->ctx->tracing, &r);
}

void serving_submit(serving_call *c) {
    call_box *b = box_of(c);
    serving_ctx *ctx = c->ctx;
    if (!compile_structured(c) || !admit(c)) {
        serving_call_release(c);
        return;
    }
    c->num_choices = c->num_prompts * c->n;
    c->choices = calloc((size_t)c->num_choices, sizeof *c->choices);
    b->added_ok = calloc(2 * (size_t)c->num_prompts, sizeof *b->added_ok);
    b->metered = b->added_ok ? b->added_ok + c->num_prompts : NULL;
    c->streaming = c->req.stream;
    c->last_probe = clock_now();
    http_request_defer(c->http);
    if (!c->choices || !b->added_ok) {
        openai_error e;
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        finish_error(c, &e);
        serving_call_release(c);
        return;
    }
    for (int32_t i = 0; i < c->num_choices; i++) c->choices[i].stop_token_id = -1;
    /* one reference for the HTTP side (released by on_http_close) */
    http_request_on_close(c->http, on_http_close, c);

    pthread_mutex_lock(&b->mu);
    for (int32_t i = 0; i < c->num_prompts; i++) {
        char id[160];
        engine_id(c, i, id, sizeof id);
        int32_t kv_port = 0;
        frontend_request q = {
            .request_id = id,
            .prompt_ids = c->prompts[i].ids,
            .num_prompt_ids = c->prompts[i].num_ids,
            .sp = c->prompts[i].sp,
            .priority = c->req.priority,
            .cache_salt = c->req.cache_salt,
            .lora_name = serving_lora_name(ctx, c->model_name),
            .kv_remote_host = serving_kv_remote(&c->req, &kv_port),
            .kv_remote_port = kv_port,
            .structured_outputs = c->req.structured,
            .stop = (const char *const *)c->req.stop,
            .num_stop = c->req.num_stop,
            .include_stop_str_in_output = c->req.include_stop_str_in_output,
            .skip_special_tokens = c->req.skip_special_tokens,
        };
        sink_ud *u = malloc(sizeof *u);
        vllm_status rc = VLLM_ERR_NOMEM;
        if (u) {
            *u = (sink_ud){c, i};
            frontend_sink sink = {on_added, on_delta, on_done, u};
            atomic_fetch_add(&c->refs, 1); /* released by on_done */
            if (ctx->metrics) {
                if (metrics_request_arrived(ctx->metrics, id, c->arrival, q.num_prompt_ids, q.sp.n,
                                            q.sp.max_tokens) == VLLM_OK)
                    b->metered[i] = true;
                else
                    log_warn("%s: not in the metrics: %s", id, vllm_errmsg());
            }
            if (b->metered[i] || !ctx->tracing) trace_arrived(c, id, &q.sp);
            rc = frontend_add_request(ctx->fe, &q, &sink);
            if (rc != VLLM_OK) {
                if (b->metered[i]) metrics_request_released(ctx->metrics, id);
                atomic_fetch_sub(&c->refs, 1);
                free(u);
            }
        }
        if (rc != VLLM_OK) {
            if (rc == VLLM_ERR_FULL)
                openai_fail(&c->add_error, 503, "Service Unavailable", NULL, "%s", vllm_errmsg());
            else
                openai_fail(&c->add_error, 500, "Internal Server Error", NULL, "%s", vllm_errmsg());
            break;
        }
        b->num_submitted++;
        if (ctx->log_requests) log_request(c, i, id);
    }
    if (c->add_error.status && c->num_added == b->num_submitted) {
        /* nothing pending could report back (or every report is in): answer now */
        abort_all(c);
        c->responded = true;
        finish_error(c, &c->add_error);
    }
    pthread_mutex_unlock(&b->mu);
}

void serving_truncate_prompt(serving_ctx *ctx, const openai_request *req, int32_t *ids, int32_t *n) {
    int32_t keep = req->truncate_prompt_tokens < 0 ? ctx->max_model_len : req->truncate_prompt_tokens;
    if (keep <= 0 || *n <= keep) return;
    memmove(ids, ids + (*n - keep), (size_t)keep * sizeof *ids);
    *n = keep;
}

/* Appends one bad word's ids to req's lists. */
static bool bad_words_add(openai_request *req, const int32_t *ids, int32_t n, size_t *cap_ids, size_t *cap_lens,
                          size_t *num_ids) {
    if (buf_grow((void **)&req->bad_words_ids, cap_ids, *num_ids + (size_t)n, sizeof(int32_t)) ||
        buf_grow((void **)&req->bad_words_lens, cap_lens, (size_t)req->num_bad_words + 1, sizeof(int32_t)))
        return false;
    memcpy(req->bad_words_ids + *num_ids, ids, (size_t)n * sizeof *ids);
    *num_ids += (size_t)n;
    req->bad_words_lens[req->num_bad_words++] = n;
    return true;
}

static bool tokenize_bad_words(serving_ctx *ctx, openai_request *req, openai_error *e) {
    size_t cap_ids = 0, cap_lens = 0, num_ids = 0, i;
    json_t *w;
    json_array_foreach(req->bad_words, i, w) {
        const char *s = json_string_value(w);
        size_t len = json_string_length(w);
        while (len && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) s++, len--; /* str.lstrip() */
        int32_t *a = NULL, *b = NULL, na = 0, nb = 0;
        char *spaced = malloc(len + 2);
        bool ok = spaced != NULL;
        if (ok) {
            spaced[0] = ' ';
            memcpy(spaced + 1, s, len);
        }
        ok = ok && tokenizer_encode(ctx->tok, s, len, false, &a, &na) == VLLM_OK &&
             tokenizer_encode(ctx->tok, spaced, len + 1, false, &b, &nb) == VLLM_OK;
        if (ok && na == 0) {
            free(a), free(b), free(spaced);
            return openai_fail(e, 400, "BadRequestError", "bad_words", "bad_words: '%.*s' has no tokens", (int)len, s);
        }
        ok = ok && bad_words_add(req, a, na, &cap_ids, &cap_lens, &num_ids);
        if (ok && nb > 0 && b[0] != a[0] && nb == na) ok = bad_words_add(req, b, nb, &cap_ids, &cap_lens, &num_ids);
        free(a), free(b), free(spaced);
        if (!ok) return openai_fail(e, 500, "Internal Server Error", NULL, "bad_words: %s", vllm_errmsg());
    }
    return true;
}

bool serving_check_sampling(serving_ctx *ctx, openai_request *req, vllm_sampling_params *sp, openai_error *e) {
    if (req->bad_words && !req->bad_words_lens && json_array_size(req->bad_words) > 0 &&
        !tokenize_bad_words(ctx, req, e))
        return false;
    sp->bad_words_ids = req->bad_words_ids;
    sp->bad_words_lens = req->bad_words_lens;
    sp->num_bad_words = req->num_bad_words;
    if (sampler_check_vocab(sp, tokenizer_vocab_size(ctx->tok)) == VLLM_OK) return true;
    const char *msg = vllm_errmsg();
    const char *param = strstr(msg, "allowed_token_ids") ? "allowed_token_ids"
                        : strstr(msg, "specified as bad") ? "bad_words" : "logit_bias";
    return openai_fail(e, 400, "BadRequestError", param, "%s", msg);
}

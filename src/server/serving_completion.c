/*
 * serving_completion.c - POST /v1/completions (vLLM's OpenAIServingCompletion).
 *
 * Prompts are a string, strings, token ids or lists of token ids; each
 * becomes an engine request. Responses follow vLLM's shapes exactly,
 * including its quirks:
 *   - stream chunks are serialised with every field (nulls included), the
 *     final usage chunk without nulls;
 *   - logprobs: tokens are the tokens' bytes in the text (not vLLM's
 *     decode([id]): see serving_token_json); text_offset indexes into the
 *     text those bytes make (completion_logprobs_append);
 *     top_logprobs holds the sampled token first, then the top-N
 *     (V1's dict order), so it can have N + 1 entries;
 *   - echo prepends the prompt text; echo with max_tokens 0 generates one
 *     token and returns only the prompt. echo with logprobs asks the engine
 *     for the prompt's logprobs (to_sampling_params), which come first in
 *     logprobs (the first prompt token's as null) and in each choice's
 *     prompt_logprobs, as vLLM.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "sample/sampler.h"
#include "server/serving.h"

static json_t *ids_json(const int32_t *ids, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* Characters that start in bytes[0..n) (UTF-8 lead and ASCII bytes). */
static int64_t lead_bytes(const char *b, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)b[i] & 0xC0) != 0x80;
    return k;
}

/* vLLM's _create_completion_logprobs for n tokens, appended to lp's arrays.
 * *chars: characters the choice's tokens so far span (from their bytes).
 * A token's text_offset is the index of the character its first byte
 * belongs to, so it indexes into the text the tokens' bytes make (vLLM
 * adds up len(decode([id])), which drifts wherever that is not the token's
 * text: SentencePiece's leading spaces, byte pieces). An entry whose
 * logprob is NaN is vLLM's None (the first prompt token with echo). */
static void completion_logprobs_append(serving_call *c, json_t *lp, const output_token_logprobs *l,
                                       int32_t num, int64_t *chars) {
    json_t *offs = json_object_get(lp, "text_offset"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *tops = json_object_get(lp, "top_logprobs");
    for (int32_t i = 0; i < num; i++) {
        const output_logprob *e = l[i].entries;
        json_t *tok = serving_token_json(c, &e[0]);
        bool none = e[0].logprob != e[0].logprob;
        json_array_append(toks, tok);
        json_array_append_new(tlp, none ? json_null()
                                        : json_real(e[0].logprob < -9999.0f ? -9999.0 : (double)e[0].logprob));
        json_t *top = none ? json_null() : json_object();
        int32_t n = l[i].num_entries;
        if (n > c->logprobs + 1) n = c->logprobs + 1;
        for (int32_t k = 0; k < n && !none; k++) {
            json_t *t = k == 0 ? json_incref(tok) : serving_token_json(c, &e[k]);
            double tv = e[k].logprob < -9999.0f ? -9999.0 : (double)e[k].logprob;
            json_object_set_new(top, json_string_value(t), json_real(tv));
            json_decref(t);
        }
        json_array_append_new(tops, top);
        const char *b = e[0].bytes ? e[0].bytes : "";
        size_t bn = e[0].bytes ? e[0].bytes_len : 0;
        bool cont = bn > 0 && ((unsigned char)b[0] & 0xC0) == 0x80;
        json_array_append_new(offs, json_integer(*chars - (cont && *chars > 0)));
        *chars += lead_bytes(b, bn);
        json_decref(tok);
    }
}

static json_t *completion_logprobs_new(void) {
    json_t *lp = json_object();
    json_object_set_new(lp, "text_offset", json_array());
    json_object_set_new(lp, "token_logprobs", json_array());
    json_object_set_new(lp, "tokens", json_array());
    json_object_set_new(lp, "top_logprobs", json_array());
    return lp;
}

/* Appends each array member of `from` to the same member of `into`. */
static void merge_logprobs(json_t **into, json_t *from) {
    if (!*into) {
        *into = from;
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach(from, k, v) {
        json_t *dst = json_object_get(*into, k);
        if (json_is_array(dst) && json_is_array(v)) json_array_extend(dst, v);
    }
    json_decref(from);
}

static bool echo_only(const serving_call *c) {
    return c->req.echo && c->req.has_max_tokens && c->req.max_tokens == 0;
}

static void completion_begin(serving_call *c) { (void)c; }

static void completion_delta(serving_call *c, int32_t ci, const output_delta *d, const char *text,
                             size_t text_len) {
    serving_choice *ch = &c->choices[ci];
    serving_prompt *p = &c->prompts[ci / c->n];
    json_t *lp = NULL;
    if (c->logprobs >= 0 && c->req.echo && d->has_prompt_logprobs && p->num_ids > 0) {
        /* echo: the prompt's tokens first, the first one without a logprob (vLLM's None) */
        strbuf b = {0};
        if (tokenizer_token_bytes(c->ctx->tok, p->ids[0], &b) != VLLM_OK) b.len = 0;
        output_logprob first = {.token_id = p->ids[0], .logprob = NAN, .bytes = b.s ? b.s : "", .bytes_len = b.len};
        output_token_logprobs one = {1, &first};
        lp = completion_logprobs_new();
        completion_logprobs_append(c, lp, &one, 1, &ch->lp_offset);
        completion_logprobs_append(c, lp, d->prompt_logprobs, d->num_prompt_logprobs, &ch->lp_offset);
        free(b.s);
    }
    if (c->logprobs >= 0 && d->logprobs && d->num_tokens > 0 && !echo_only(c)) {
        if (!lp) lp = completion_logprobs_new();
        completion_logprobs_append(c, lp, d->logprobs, d->num_tokens, &ch->lp_offset);
    }
    if (!c->streaming) {
        if (lp) merge_logprobs(&ch->logprobs, lp);
        return;
    }
    /* stream: one chunk per delta, every field present (exclude_unset=False) */
    char *joined = NULL;
    if (c->req.echo && !ch->first_sent) {
        size_t n = p->text_len + (echo_only(c) ? 0 : text_len);
        joined = malloc(n + 1);
        if (joined) {
            memcpy(joined, p->text, p->text_len);
            if (!echo_only(c)) memcpy(joined + p->text_len, text, text_len);
            text = joined;
            text_len = n;
        }
    } else if (echo_only(c)) {
        text_len = 0;
    }
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(ci));
    json_object_set_new(choice, "text", openai_json_text(text, text_len));
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
    const char *fr = vllm_finish_reason_str(ch->finish_reason);
    json_object_set_new(choice, "finish_reason", ch->finished && fr ? json_string(fr) : json_null());
    json_object_set_new(choice, "stop_reason", ch->finished ? serving_stop_reason(ch) : json_null());
    if (c->req.return_token_ids) {
        if (!ch->first_sent) json_object_set_new(choice, "prompt_token_ids", ids_json(p->ids, p->num_ids));
        json_object_set_new(choice, "token_ids", ids_json(d->token_ids, d->num_tokens));
    }
    ch->first_sent = true;
    json_t *chunk = json_object();
    json_object_set_new(chunk, "id", json_string(c->id));
    json_object_set_new(chunk, "object", json_string("text_completion"));
    json_object_set_new(chunk, "created", json_integer(c->created));
    json_object_set_new(chunk, "model", json_string(c->model_name));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(chunk, "choices", choices);
    if ((c->req.include_usage || c->ctx->enable_force_include_usage) && c->req.continuous_usage_stats)
        json_object_set_new(chunk, "usage",
                            openai_usage_json(p->num_ids, ch->num_tokens, 0, true));
    else
        json_object_set_new(chunk, "usage", json_null());
    serving_send_event(c, chunk, false);
    free(joined);
}

static json_t *completion_final(serving_call *c) {
    json_t *choices = json_array();
    for (int32_t i = 0; i < c->num_choices; i++) {
        serving_choice *ch = &c->choices[i];
        serving_prompt *p = &c->prompts[i / c->n];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(i));
        if (c->req.echo) {
            size_t n = p->text_len + (echo_only(c) ? 0 : ch->text_len);
            char *t = malloc(n + 1);
            if (t) {
                memcpy(t, p->text, p->text_len);
                if (!echo_only(c) && ch->text_len) memcpy(t + p->text_len, ch->text, ch->text_len);
                json_object_set_new(o, "text", openai_json_text(t, n));
                free(t);
            }
        } else {
            json_object_set_new(o, "text", openai_json_text(ch->text ? ch->text : "", ch->text_len));
        }
        json_object_set_new(o, "logprobs", ch->logprobs ? json_incref(ch->logprobs) : json_null());
        const char *fr = vllm_finish_reason_str(ch->finish_reason);
        json_object_set_new(o, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set_new(o, "stop_reason", serving_stop_reason(ch));
        json_object_set_new(o, "prompt_logprobs", p->prompt_logprobs ? json_incref(p->prompt_logprobs) : json_null());
        if (c->req.return_token_ids) {
            json_object_set_new(o, "prompt_token_ids", ids_json(p->ids, p->num_ids));
            json_object_set_new(o, "token_ids", echo_only(c) ? ids_json(p->ids, p->num_ids)
                                                            : ids_json(ch->token_ids, ch->num_tokens));
        }
        json_array_append_new(choices, o);
    }
    json_t *j = serving_response_new(c, "text_completion", choices);
    json_object_set_new(j, "kv_transfer_params", serving_kv_transfer_params(c->ctx, &c->req, c->id));
    return j;
}

static const serving_format completion_format = {completion_begin, completion_delta, completion_final, NULL, NULL,
                                                  NULL};

void serving_completions(serving_ctx *ctx, http_request *http, openai_request *req) {
    openai_error e = {0};
    serving_prompt *prompts = NULL;
    int32_t num = 0;
    const char *model = serving_check_model(ctx, req->model, &e);
    if (!model) goto fail;
    if (req->priority != 0 && ctx->policy != VLLM_SCHEDULING_PRIORITY) {
        openai_fail(&e, 400, "BadRequestError", "priority",
                    "Got priority %d but Priority scheduling is not enabled.", req->priority);
        goto fail;
    }
    prompts = calloc((size_t)req->num_prompts, sizeof *prompts);
    if (!prompts) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    for (; num < req->num_prompts; num++) {
        openai_prompt *q = &req->prompts[num];
        serving_prompt *p = &prompts[num];
        if (q->text) {
            if (!serving_tokenize_prompt(ctx, q->text, q->text_len, req->add_special_tokens, &p->ids,
                                         &p->num_ids, &e))
                goto fail;
        } else {
            p->ids = malloc(((size_t)q->num_ids + 1) * sizeof(int32_t));
            if (!p->ids) {
                openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
                goto fail;
            }
            memcpy(p->ids, q->ids, (size_t)q->num_ids * sizeof(int32_t));
            p->num_ids = q->num_ids;
        }
        serving_truncate_prompt(ctx, req, p->ids, &p->num_ids);
        if (!serving_check_prompt_ids(ctx, p->ids, p->num_ids, &e)) goto fail;
        /* beam search's n is its width, not n samples: validated by serving_beam_search */
        int32_t n_req = req->n;
        if (req->use_beam_search) req->n = 1;
        bool sp_ok = openai_request_sampling_params(req, &ctx->defaults, ctx->max_model_len, p->num_ids,
                                                    ctx->max_logprobs, &p->sp, &e);
        req->n = n_req;
        if (!sp_ok) goto fail;
        if (!serving_check_sampling(ctx, req, &p->sp, &e)) goto fail;
        if (req->echo) { /* the text the response starts with */
            if (q->text && req->truncate_prompt_tokens == 0) {
                p->text = malloc(q->text_len + 1);
                if (p->text) memcpy(p->text, q->text, q->text_len + 1);
                p->text_len = q->text_len;
            } else if (tokenizer_decode(ctx->tok, p->ids, p->num_ids, false, &p->text, &p->text_len) != VLLM_OK) {
                p->text = NULL;
                p->text_len = 0;
            }
        }
    }
    if (req->unknown_fields[0])
        log_warn("The following fields were present in the request but ignored: {%s}", req->unknown_fields);
    if (req->use_beam_search) {
        serving_beam_search(ctx, http, req, prompts, num, model);
        for (int32_t i = 0; i < num; i++) {
            free(prompts[i].ids);
            free(prompts[i].text);
        }
        free(prompts);
        return;
    }
    int32_t n = req->n, logprobs = req->logprobs;
    serving_call *c = serving_call_new(ctx, http, req, &completion_format, "cmpl-");
    if (!c) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    c->model_name = model;
    c->prompts = prompts;
    c->num_prompts = num;
    c->n = n;
    c->logprobs = logprobs;
    serving_submit(c);
    return;
fail:
    for (int32_t i = 0; prompts && i <= num && i < req->num_prompts; i++) {
        free(prompts[i].ids);
        free(prompts[i].text);
    }
    free(prompts);
    openai_request_free(req);
    serving_respond_error(http, &e);
}

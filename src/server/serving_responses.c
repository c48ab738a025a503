/*
 * serving_responses.c - vLLM's OpenAIServingResponses: the Responses API,
 *   POST /v1/responses             create (plain, streamed, or background)
 *   GET  /v1/responses/{id}        a stored response
 *   POST /v1/responses/{id}/cancel cancel a background one
 * over the chat path. A Responses request becomes a chat request: `input`
 * (a string, or message / function_call / function_call_output items) the
 * messages, `instructions` a system message before them, the conversation
 * of `previous_response_id` (from the store) before those, max_output_tokens
 * max_tokens, top_logprobs the chat logprobs, `text.format` response_format,
 * function `tools` and `tool_choice` in chat's shape. That request goes
 * through serving_chat_run with this file's output format: one output
 * message with one output_text part, streamed as the typed SSE events
 * (`event: response.output_text.delta` ...), in OpenAI's shapes (checked
 * against OpenAI's published OpenAPI schema by tests/test_server_responses.sh).
 *
 * The store, as vLLM's: off unless VLLM_ENABLE_RESPONSES_API_STORE=1, and
 * then `store` (default true) keeps each response, with its conversation for
 * previous_response_id; `background` needs it. With the store off, store=true
 * is answered as store=false, as vLLM does. Unlike vLLM's (which never
 * forgets), ours holds at most STORE_MAX responses and drops the oldest
 * finished ones first. A background call answers "queued" at once and keeps
 * generating (serving.h: serving_call.background); GET shows it "queued"
 * until it ends; cancel aborts it and it ends "cancelled".
 *
 * Decisions where vLLM 0.11 and OpenAI leave room: the stream always ends with
 * response.completed, whose response carries the status (incomplete when
 * max_output_tokens cut it), as vLLM does; truncation "auto", background
 * with stream, and non-function tools are 400s naming the field.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "server/serving.h"

#define STORE_MAX 1024

typedef struct stored {
    char id[96];
    char *json;                /* the response as last known */
    json_t *conversation;      /* messages without instructions, the answer last */
    serving_call *running;     /* a background call still generating (a reference), or NULL */
    bool background;
    struct stored *next;       /* oldest first */
} stored;

struct responses_store {
    pthread_mutex_t mu;
    bool enabled;
    stored *head;
    int count;
};

/* A call's state (serving_call.ext). */
typedef struct resp_state {
    json_t *echo;              /* request fields the response repeats */
    json_t *conversation;      /* the messages sent, without instructions */
    char msg_id[48];
    int64_t seq;               /* the next event's sequence_number */
    strbuf text;               /* stream: the text sent so far */
    json_t *logprobs;          /* ResponseLogProb entries so far */
    bool store, want_logprobs;
    atomic_bool cancelled;
} resp_state;

static void state_free(void *p) {
    resp_state *st = p;
    if (!st) return;
    json_decref(st->echo);
    json_decref(st->conversation);
    json_decref(st->logprobs);
    free(st->text.s);
    free(st);
}

/* ---- the store ------------------------------------------------------------------------ */

vllm_status serving_responses_init(serving_ctx *ctx) {
    struct responses_store *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "responses store: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    const char *v = getenv("VLLM_ENABLE_RESPONSES_API_STORE");
    s->enabled = v && (!strcmp(v, "1") || !strcasecmp(v, "true"));
    if (s->enabled)
        log_warn("`VLLM_ENABLE_RESPONSES_API_STORE` is enabled: responses are kept in memory "
                 "(at most %d; the oldest finished ones are dropped first).", STORE_MAX);
    ctx->responses = s;
    return VLLM_OK;
}

static void stored_free(stored *e) {
    free(e->json);
    json_decref(e->conversation);
    if (e->running) serving_call_release(e->running);
    free(e);
}

void serving_responses_free(serving_ctx *ctx) {
    struct responses_store *s = ctx->responses;
    if (!s) return;
    for (stored *e = s->head, *n; e; e = n) {
        n = e->next;
        stored_free(e);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
    ctx->responses = NULL;
}

/* Caller holds s->mu. */
static stored *store_find(struct responses_store *s, const char *id) {
    for (stored *e = s->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

/* Puts (or replaces) a response; conversation and running are taken. */
static void store_put(struct responses_store *s, const char *id, json_t *response, json_t *conversation,
                      serving_call *running, bool background) {
    char *text = openai_dumps(response);
    pthread_mutex_lock(&s->mu);
    stored *e = store_find(s, id);
    if (!e && (e = calloc(1, sizeof *e))) {
        snprintf(e->id, sizeof e->id, "%s", id);
        e->background = background;
        stored **tail = &s->head;
        while (*tail) tail = &(*tail)->next;
        *tail = e;
        s->count++;
    }
    if (e && text) {
        free(e->json);
        e->json = text;
        text = NULL;
        if (conversation) {
            json_decref(e->conversation);
            e->conversation = json_incref(conversation);
        }
        if (e->running != running) {
            if (e->running) serving_call_release(e->running);
            e->running = running;
            running = NULL;
        }
    }
    /* over the cap: drop the oldest entries that are not generating */
    for (stored **p = &s->head; *p && s->count > STORE_MAX;) {
        if ((*p)->running || *p == e) {
            p = &(*p)->next;
            continue;
        }
        stored *old = *p;
        *p = old->next;
        s->count--;
        stored_free(old);
    }
    pthread_mutex_unlock(&s->mu);
    if (running) serving_call_release(running);
    json_decref(conversation);
    free(text);
}

/* ---- errors in vLLM's words ------------------------------------------------------------- */

static bool fail_store_off(openai_error *e) {
    return openai_fail(e, 400, "invalid_request_error", "store",
                       "`store=True` (default) is not supported. Please set `store=False` in Responses "
                       "API or set `VLLM_ENABLE_RESPONSES_API_STORE=1` in the env var when running the "
                       "vLLM server.");
}

static bool fail_not_found(openai_error *e, const char *id) {
    return openai_fail(e, 404, "invalid_request_error", "response_id", "Response with id '%s' not found.", id);
}

/* ---- request -> chat request ---------------------------------------------------------- */

/* A message's content: a string, or parts (input_text / output_text) as chat text parts. */
static json_t *content_of(const json_t *content, const char *where, openai_error *e) {
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        openai_fail(e, 400, "Bad Request", "input", "%s.content: expected a string or a list of parts", where);
        return NULL;
    }
    json_t *parts = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text")) ||
            !json_is_string(text)) {
            openai_fail(e, 400, "BadRequestError", "input", "%s.content[%zu]: part type '%s' is not supported "
                        "(this model reads text: input_text, output_text)", where, i, type ? type : "(none)");
            json_decref(parts);
            return NULL;
        }
        json_t *q = json_object();
        json_object_set_new(q, "type", json_string("text"));
        json_object_set(q, "text", text);
        json_array_append_new(parts, q);
    }
    return parts;
}

/* Appends the chat messages of one input item. */
static bool add_item(json_t *msgs, const json_t *item, size_t idx, openai_error *e) {
    char where[48];
    snprintf(where, sizeof where, "input[%zu]", idx);
    if (!json_is_object(item)) return openai_fail(e, 400, "Bad Request", "input", "%s: expected an object", where);
    const char *type = json_string_value(json_object_get(item, "type"));
    json_t *m = json_object();
    if (!type || !strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(item, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            json_decref(m);
            return openai_fail(e, 400, "Bad Request", "input",
                               "%s.role: expected 'user', 'assistant', 'system' or 'developer'", where);
        }
        json_t *content = content_of(json_object_get(item, "content"), where, e);
        if (!content) {
            json_decref(m);
            return false;
        }
        json_object_set_new(m, "role", json_string(!strcmp(role, "developer") ? "system" : role));
        json_object_set_new(m, "content", content);
    } else if (!strcmp(type, "function_call")) {
        json_t *call_id = json_object_get(item, "call_id"), *name = json_object_get(item, "name");
        json_t *args = json_object_get(item, "arguments");
        if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args)) {
            json_decref(m);
            return openai_fail(e, 400, "Bad Request", "input",
                               "%s: a function_call needs string call_id, name and arguments", where);
        }
        json_t *fn = json_object(), *call = json_object(), *calls = json_array();
        json_object_set(fn, "name", name);
        json_object_set(fn, "arguments", args);
        json_object_set(call, "id", call_id);
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(call, "function", fn);
        json_array_append_new(calls, call);
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", json_null());
        json_object_set_new(m, "tool_calls", calls);
    } else if (!strcmp(type, "function_call_output")) {
        json_t *call_id = json_object_get(item, "call_id"), *out = json_object_get(item, "output");
        if (!json_is_string(call_id) || !json_is_string(out)) {
            json_decref(m);
            return openai_fail(e, 400, "Bad Request", "input",
                               "%s: a function_call_output needs string call_id and output", where);
        }
        json_object_set_new(m, "role", json_string("tool"));
        json_object_set(m, "tool_call_id", call_id);
        json_object_set(m, "content", out);
    } else {
        json_decref(m);
        return openai_fail(e, 400, "BadRequestError", "input", "%s: item type '%s' is not supported", where, type);
    }
    json_array_append_new(msgs, m);
    return true;
}

/* Function tools in chat's shape; any other tool type is a 400. */
static json_t *chat_tools(const json_t *tools, openai_error *e) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function") || !json_is_string(json_object_get(t, "name"))) {
            openai_fail(e, 400, "BadRequestError", "tools", "tools[%zu]: tool type '%s' is not supported "
                        "(only function tools with a name)", i, type ? type : "(none)");
            json_decref(out);
            return NULL;
        }
        json_t *fn = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (json_object_get(t, keys[k])) json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_t *c = json_object();
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", fn);
        json_array_append_new(out, c);
    }
    return out;
}

/* The chat request body for a Responses body; st gets what the response repeats. */
static json_t *to_chat(serving_ctx *ctx, const json_t *body, resp_state *st, openai_error *e) {
    json_t *chat = json_object(), *msgs = json_array(), *conv = json_array();
    const json_t *input = json_object_get(body, "input");
    const json_t *instr = json_object_get(body, "instructions");
    const json_t *prev = json_object_get(body, "previous_response_id");
    if (instr && !json_is_null(instr) && !json_is_string(instr)) {
        openai_fail(e, 400, "Bad Request", "instructions", "instructions: expected a string");
        goto fail;
    }
    if (json_is_string(prev)) {
        struct responses_store *s = ctx->responses;
        if (!s->enabled) {
            fail_store_off(e);
            goto fail;
        }
        pthread_mutex_lock(&s->mu);
        stored *p = store_find(s, json_string_value(prev));
        if (p && p->conversation) json_array_extend(conv, p->conversation);
        pthread_mutex_unlock(&s->mu);
        if (!p) {
            fail_not_found(e, json_string_value(prev));
            goto fail;
        }
    } else if (prev && !json_is_null(prev)) {
        openai_fail(e, 400, "Bad Request", "previous_response_id", "previous_response_id: expected a string");
        goto fail;
    }
    if (json_is_string(input)) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set(m, "content", (json_t *)input);
        json_array_append_new(conv, m);
    } else if (json_is_array(input) && json_array_size(input) > 0) {
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it) if (!add_item(conv, it, i, e)) goto fail;
    } else {
        openai_fail(e, 400, "Bad Request", "input", "input: expected a string or a non-empty list of items");
        goto fail;
    }
    if (json_is_string(instr)) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("system"));
        json_object_set(m, "content", (json_t *)instr);
        json_array_append_new(msgs, m);
    }
    json_array_extend(msgs, conv);
    json_object_set_new(chat, "messages", msgs);
    msgs = NULL;
    st->conversation = conv;
    conv = NULL;

    /* fields passed to the chat request under the same name */
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "user", "seed", "top_k",
                                       "min_p", "repetition_penalty", "stop", "stop_token_ids", "priority",
                                       "cache_salt", "request_id", "ignore_eos", "min_tokens",
                                       "skip_special_tokens", "logit_bias", "presence_penalty",
                                       "frequency_penalty", "chat_template_kwargs", "parallel_tool_calls"};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        json_t *v = json_object_get(body, same[k]);
        if (v) json_object_set(chat, same[k], v);
    }
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (mot && !json_is_null(mot)) json_object_set(chat, "max_tokens", mot);
    json_t *tl = json_object_get(body, "top_logprobs");
    json_t *include = json_object_get(body, "include");
    bool inc_lp = false;
    size_t i;
    json_t *v;
    json_array_foreach(include, i, v) inc_lp |= json_is_string(v) && !strcmp(json_string_value(v), "message.output_text.logprobs");
    if ((json_is_integer(tl) && json_integer_value(tl) > 0) || inc_lp) {
        json_object_set_new(chat, "logprobs", json_true());
        json_object_set_new(chat, "top_logprobs", json_is_integer(tl) ? json_incref(tl) : json_integer(0));
        st->want_logprobs = true;
    }
    json_t *tools = json_object_get(body, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) {
        json_t *ct = chat_tools(tools, e);
        if (!ct) goto fail;
        json_object_set_new(chat, "tools", ct);
    }
    json_t *tc = json_object_get(body, "tool_choice");
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
    } else if (json_is_object(tc)) {
        json_t *fn = json_object(), *c = json_object();
        json_object_set(fn, "name", json_object_get(tc, "name"));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", fn);
        json_object_set_new(chat, "tool_choice", c);
    }
    json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ftype = json_string_value(json_object_get(fmt, "type"));
    if (ftype && !strcmp(ftype, "json_schema")) { /* Responses flattens chat's json_schema object */
        json_t *js = json_object(), *rf = json_object();
        static const char *const keys[] = {"name", "description", "schema", "strict"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (json_object_get(fmt, keys[k])) json_object_set(js, keys[k], json_object_get(fmt, keys[k]));
        json_object_set_new(rf, "type", json_string("json_schema"));
        json_object_set_new(rf, "json_schema", js);
        json_object_set_new(chat, "response_format", rf);
    } else if (ftype && strcmp(ftype, "text")) {
        json_object_set(chat, "response_format", fmt);
    } else if (fmt && !ftype) {
        openai_fail(e, 400, "Bad Request", "text", "text.format: expected an object with a type");
        goto fail;
    }
    const char *trunc = json_string_value(json_object_get(body, "truncation"));
    if (trunc && strcmp(trunc, "disabled")) {
        openai_fail(e, 400, "BadRequestError", "truncation",
                    "truncation '%s' is not supported: a conversation longer than the model's context "
                    "is an error (truncation 'disabled')", trunc);
        goto fail;
    }
    json_t *n = json_object_get(body, "n");
    if (n && !(json_is_integer(n) && json_integer_value(n) == 1)) {
        openai_fail(e, 400, "Bad Request", "n", "n: the Responses API makes one response");
        goto fail;
    }

    /* what the response object repeats */
    st->echo = json_object();
    json_object_set_new(st->echo, "instructions", json_is_string(instr) ? json_incref((json_t *)instr) : json_null());
    json_object_set_new(st->echo, "max_output_tokens", mot ? json_incref(mot) : json_null());
    json_object_set_new(st->echo, "previous_response_id", json_is_string(prev) ? json_incref((json_t *)prev) : json_null());
    json_t *md = json_object_get(body, "metadata");
    json_object_set_new(st->echo, "metadata", json_is_object(md) ? json_incref(md) : json_object());
    json_t *usr = json_object_get(body, "user");
    json_object_set_new(st->echo, "user", json_is_string(usr) ? json_incref(usr) : json_null());
    json_t *txt = json_object_get(body, "text");
    if (json_is_object(txt) && json_object_get(txt, "format")) {
        json_object_set_new(st->echo, "text", json_incref(txt));
    } else {
        json_t *t = json_object(), *f = json_object();
        json_object_set_new(f, "type", json_string("text"));
        json_object_set_new(t, "format", f);
        json_object_set_new(st->echo, "text", t);
    }
    json_object_set_new(st->echo, "tools", json_is_array(tools) ? json_incref(tools) : json_array());
    json_object_set_new(st->echo, "tool_choice", tc ? json_incref(tc) : json_string("auto"));
    json_object_set_new(st->echo, "top_logprobs", json_is_integer(tl) ? json_incref(tl) : json_integer(0));
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    json_object_set_new(st->echo, "parallel_tool_calls", json_is_boolean(ptc) ? json_incref(ptc) : json_true());
    json_t *reasoning = json_object_get(body, "reasoning");
    json_object_set_new(st->echo, "reasoning", json_is_object(reasoning) ? json_incref(reasoning) : json_null());
    return chat;
fail:
    json_decref(chat);
    json_decref(msgs);
    json_decref(conv);
    return NULL;
}

/* ---- the response object --------------------------------------------------------------- */

static const char *status_of(serving_call *c, resp_state *st, bool done) {
    if (!done) return c->background ? "queued" : "in_progress";
    serving_choice *ch = &c->choices[0];
    if (atomic_load(&st->cancelled)) return "cancelled";
    if (ch->finish_reason == VLLM_FINISH_LENGTH) return "incomplete";
    if (ch->finish_reason == VLLM_FINISH_ABORT) return "failed";
    return "completed";
}

static json_t *output_text_part(const char *text, size_t len, json_t *logprobs) {
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string("output_text"));
    json_object_set_new(p, "text", openai_json_text(text ? text : "", len));
    json_object_set_new(p, "annotations", json_array());
    json_object_set_new(p, "logprobs", logprobs ? json_incref(logprobs) : json_array());
    return p;
}

static json_t *message_item(resp_state *st, const char *status, json_t *part) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(st->msg_id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "status", json_string(status));
    json_object_set_new(m, "role", json_string("assistant"));
    json_t *content = json_array();
    if (part) json_array_append_new(content, part);
    json_object_set_new(m, "content", content);
    return m;
}

/* The response; done: every choice has finished (else status queued/in_progress, no output). */
static json_t *response_json(serving_call *c, resp_state *st, bool done) {
    const char *status = status_of(c, st, done);
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(c->id));
    json_object_set_new(j, "object", json_string("response"));
    json_object_set_new(j, "created_at", json_integer(c->created));
    json_object_set_new(j, "status", json_string(status));
    json_object_set_new(j, "background", json_boolean(c->background));
    json_object_set_new(j, "completed_at", !strcmp(status, "completed") ? json_integer((int64_t)time(NULL)) : json_null());
    json_object_set_new(j, "error", json_null());
    json_t *inc = json_null();
    if (!strcmp(status, "incomplete")) {
        inc = json_object();
        json_object_set_new(inc, "reason", json_string("max_output_tokens"));
    }
    json_object_set_new(j, "incomplete_details", inc);
    json_object_set(j, "instructions", json_object_get(st->echo, "instructions"));
    json_object_set(j, "max_output_tokens", json_object_get(st->echo, "max_output_tokens"));
    json_object_set_new(j, "max_tool_calls", json_null());
    json_object_set_new(j, "model", json_string(c->model_name));
    json_t *output = json_array();
    if (done) {
        serving_choice *ch = &c->choices[0];
        const char *text = c->streaming ? st->text.s : ch->text;
        size_t len = c->streaming ? st->text.len : ch->text_len;
        json_array_append_new(output, message_item(st, !strcmp(status, "completed") ? "completed" : "incomplete",
                                                   output_text_part(text, len, st->logprobs)));
    }
    json_object_set_new(j, "output", output);
    json_object_set(j, "parallel_tool_calls", json_object_get(st->echo, "parallel_tool_calls"));
    json_object_set(j, "previous_response_id", json_object_get(st->echo, "previous_response_id"));
    json_object_set(j, "reasoning", json_object_get(st->echo, "reasoning"));
    json_object_set_new(j, "service_tier", json_string("auto"));
    json_object_set_new(j, "store", json_boolean(st->store));
    json_object_set_new(j, "temperature", json_real(c->prompts[0].sp.temperature));
    json_object_set(j, "text", json_object_get(st->echo, "text"));
    json_object_set(j, "tool_choice", json_object_get(st->echo, "tool_choice"));
    json_object_set(j, "tools", json_object_get(st->echo, "tools"));
    json_object_set(j, "top_logprobs", json_object_get(st->echo, "top_logprobs"));
    json_object_set_new(j, "top_p", json_real(c->prompts[0].sp.top_p));
    json_object_set_new(j, "truncation", json_string("disabled"));
    json_t *usage = NULL; /* absent until done: the schema has no null usage */
    if (done) {
        int64_t in = c->prompts[0].num_ids, out = c->choices[0].num_tokens;
        usage = json_object();
        json_t *ind = json_object(), *outd = json_object();
        json_object_set_new(ind, "cached_tokens", json_integer(c->prompts[0].num_cached));
        json_object_set_new(ind, "cache_write_tokens", json_integer(0)); /* OpenAPI requires it */
        json_object_set_new(outd, "reasoning_tokens", json_integer(0));
        json_object_set_new(usage, "input_tokens", json_integer(in));
        json_object_set_new(usage, "input_tokens_details", ind);
        json_object_set_new(usage, "output_tokens", json_integer(out));
        json_object_set_new(usage, "output_tokens_details", outd);
        json_object_set_new(usage, "total_tokens", json_integer(in + out));
    }
    if (usage) json_object_set_new(j, "usage", usage);
    if (json_is_string(json_object_get(st->echo, "user"))) /* a string when there is one (OpenAPI) */
        json_object_set(j, "user", json_object_get(st->echo, "user"));
    json_object_set(j, "metadata", json_object_get(st->echo, "metadata"));
    return j;
}

/* The conversation to store: what was sent, then the answer. */
static json_t *conversation_after(serving_call *c, resp_state *st) {
    json_t *conv = json_copy(st->conversation);
    json_t *m = json_object();
    const char *text = c->streaming ? st->text.s : c->choices[0].text;
    size_t len = c->streaming ? st->text.len : c->choices[0].text_len;
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", openai_json_text(text ? text : "", len));
    json_array_append_new(conv, m);
    return conv;
}

/* ---- the output format ----------------------------------------------------------------- */

/* event: <type>\ndata: <json>\n\n, sequence_number added; consumes j. */
static void send_typed(serving_call *c, resp_state *st, const char *type, json_t *j) {
    json_t *ev = json_object();
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
    json_object_update(ev, j);
    json_decref(j);
    char *s = openai_dumps(ev);
    json_decref(ev);
    strbuf b = {0};
    if (s && !sb_add(&b, "event: ", 7) && !sb_add(&b, type, strlen(type)) && !sb_add(&b, "\ndata: ", 7) &&
        !sb_add(&b, s, strlen(s)) && !sb_add(&b, "\n\n", 2))
        if (!http_request_write(c->http, b.s, b.len)) atomic_store(&c->http_gone, true);
    free(b.s);
    free(s);
}

static json_t *with(const char *k1, json_t *v1, const char *k2, json_t *v2) {
    json_t *j = json_object();
    if (k1) json_object_set_new(j, k1, v1);
    if (k2) json_object_set_new(j, k2, v2);
    return j;
}

static json_t *part_event(resp_state *st, const char *k, json_t *v) {
    json_t *j = json_object();
    json_object_set_new(j, "item_id", json_string(st->msg_id));
    json_object_set_new(j, "output_index", json_integer(0));
    json_object_set_new(j, "content_index", json_integer(0));
    if (k) json_object_set_new(j, k, v);
    return j;
}

static void responses_begin(serving_call *c) {
    resp_state *st = c->ext;
    send_typed(c, st, "response.created", with("response", response_json(c, st, false), NULL, NULL));
    send_typed(c, st, "response.in_progress", with("response", response_json(c, st, false), NULL, NULL));
    send_typed(c, st, "response.output_item.added",
               with("output_index", json_integer(0), "item", message_item(st, "in_progress", NULL)));
    send_typed(c, st, "response.content_part.added", part_event(st, "part", output_text_part("", 0, NULL)));
}

/* One token's logprob: {token, logprob[, bytes]} (bytes: the output_text
 * part's LogProb and TopLogProb have them, a delta event's ResponseLogProb
 * does not). */
static json_t *logprob_entry(serving_call *c, const output_logprob *e, bool bytes) {
    json_t *o = json_object();
    json_t *tok = serving_token_json(c, e);
    if (bytes) {
        json_t *b = json_array();
        const unsigned char *p = (const unsigned char *)json_string_value(tok);
        for (size_t i = 0; i < json_string_length(tok); i++) json_array_append_new(b, json_integer(p[i]));
        json_object_set_new(o, "bytes", b);
    }
    json_object_set_new(o, "token", tok);
    json_object_set_new(o, "logprob", json_real(e->logprob < -9999.0f ? -9999.0 : (double)e->logprob));
    return o;
}

/* The logprob entries of a delta, with or without bytes. */
static json_t *delta_logprobs(serving_call *c, const output_delta *d, bool bytes) {
    json_t *out = json_array();
    for (int32_t i = 0; i < d->num_tokens && d->logprobs; i++) {
        const output_token_logprobs *l = &d->logprobs[i];
        json_t *top = json_array();
        int32_t n = l->num_entries < c->logprobs ? l->num_entries : c->logprobs;
        for (int32_t k = 0; k < n; k++) json_array_append_new(top, logprob_entry(c, &l->entries[k], bytes));
        json_t *e = logprob_entry(c, &l->entries[0], bytes);
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(out, e);
    }
    return out;
}

static void responses_delta(serving_call *c, int32_t ci, const output_delta *d, const char *text, size_t text_len) {
    resp_state *st = c->ext;
    bool has = st->want_logprobs && d->logprobs && d->num_tokens > 0;
    if (has) {
        if (!st->logprobs) st->logprobs = json_array();
        json_t *full = delta_logprobs(c, d, true);
        json_array_extend(st->logprobs, full);
        json_decref(full);
    }
    json_t *lp = has && c->streaming ? delta_logprobs(c, d, false) : NULL;
    if (c->streaming) {
        sb_add(&st->text, text, text_len);
        if (text_len || lp) {
            json_t *j = part_event(st, "delta", openai_json_text(text, text_len));
            json_object_set_new(j, "logprobs", lp ? json_incref(lp) : json_array());
            send_typed(c, st, "response.output_text.delta", j);
        }
    }
    json_decref(lp);
}

static void responses_end(serving_call *c) {
    resp_state *st = c->ext;
    json_t *final = response_json(c, st, true);
    json_t *lp = st->logprobs ? json_incref(st->logprobs) : json_array();
    json_t *j = part_event(st, "text", openai_json_text(st->text.s ? st->text.s : "", st->text.len));
    json_object_set_new(j, "logprobs", lp);
    send_typed(c, st, "response.output_text.done", j);
    send_typed(c, st, "response.content_part.done",
               part_event(st, "part", output_text_part(st->text.s, st->text.len, st->logprobs)));
    json_t *item = json_array_get(json_object_get(final, "output"), 0);
    send_typed(c, st, "response.output_item.done", with("output_index", json_integer(0), "item", json_incref(item)));
    if (st->store) store_put(c->ctx->responses, c->id, final, conversation_after(c, st), NULL, false);
    send_typed(c, st, "response.completed", with("response", final, NULL, NULL));
}

static json_t *responses_final(serving_call *c) { return response_json(c, c->ext, true); }

static void responses_completed(serving_call *c, json_t *response) {
    resp_state *st = c->ext;
    if (st->store) store_put(c->ctx->responses, c->id, response, conversation_after(c, st), NULL, c->background);
}

static void responses_background_begin(serving_call *c) {
    resp_state *st = c->ext;
    json_t *j = response_json(c, st, false);
    serving_call_retain(c); /* the store's, until the call completes */
    store_put(c->ctx->responses, c->id, j, NULL, c, true);
    char *s = openai_dumps(j);
    json_decref(j);
    if (s) http_request_finish(c->http, 200, "application/json", s, strlen(s));
    free(s);
}

static const serving_format responses_format = {responses_begin, responses_delta, responses_final,
                                                responses_end, responses_background_begin,
                                                responses_completed};

/* ---- handlers ------------------------------------------------------------------------------ */

void serving_responses_create(serving_ctx *ctx, http_request *http) {
    if (!ctx->responses) {
        openai_error e;
        openai_fail(&e, 500, "Internal Server Error", NULL, "the Responses API is not set up in this server");
        serving_respond_error(http, &e);
        return;
    }
    size_t len;
    const char *text = http_request_body(http, &len);
    openai_error e = {0};
    json_error_t jerr;
    json_t *body = json_loadb(text, len, 0, &jerr);
    resp_state *st = calloc(1, sizeof *st);
    json_t *chat = NULL;
    if (!st) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    if (!json_is_object(body)) {
        openai_fail(&e, 400, "Bad Request", NULL, "the body is not a JSON object%s%s", body ? "" : ": ",
                    body ? "" : jerr.text);
        goto fail;
    }
    json_t *store = json_object_get(body, "store"), *bg = json_object_get(body, "background");
    bool want_store = !json_is_false(store), background = json_is_true(bg);
    if (background && !ctx->responses->enabled) {
        fail_store_off(&e);
        goto fail;
    }
    if (background && !want_store) {
        openai_fail(&e, 400, "invalid_request_error", "background", "background can only be used when `store` is true");
        goto fail;
    }
    if (background && json_is_true(json_object_get(body, "stream"))) {
        openai_fail(&e, 400, "BadRequestError", "background", "background responses cannot be streamed here; "
                    "poll GET /v1/responses/{id} instead");
        goto fail;
    }
    st->store = want_store && ctx->responses->enabled; /* vLLM: store=true is dropped while the store is off */
    if (!(chat = to_chat(ctx, body, st, &e))) goto fail;
    char *chat_text = openai_dumps(chat);
    json_decref(chat);
    chat = NULL;
    openai_request req;
    bool ok = chat_text && openai_request_parse(chat_text, strlen(chat_text), true, &req, &e);
    free(chat_text);
    if (!ok) {
        if (!e.status) openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    openai_random_id("msg_", st->msg_id, sizeof st->msg_id);
    json_decref(body);
    serving_chat_as as = {&responses_format, "resp_", st, state_free, background};
    serving_chat_run(ctx, http, &req, &as);
    return;
fail:
    json_decref(body);
    json_decref(chat);
    state_free(st);
    serving_respond_error(http, &e);
}

void serving_responses_get(serving_ctx *ctx, http_request *http, const char *rest) {
    struct responses_store *s = ctx->responses;
    const char *method = http_request_method(http);
    openai_error e = {0};
    if (!s) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "the Responses API is not set up in this server");
        serving_respond_error(http, &e);
        return;
    }
    char id[96];
    size_t n = strcspn(rest, "/");
    bool cancel = !strcmp(rest + n, "/cancel");
    if (n == 0 || n >= sizeof id || (rest[n] && !cancel)) {
        static const char body[] = "{\"detail\":\"Not Found\"}";
        http_respond(http, 404, "application/json", body, sizeof body - 1);
        return;
    }
    if (strcmp(method, cancel ? "POST" : "GET")) {
        static const char body[] = "{\"detail\":\"Method Not Allowed\"}";
        http_respond(http, 405, "application/json", body, sizeof body - 1);
        return;
    }
    memcpy(id, rest, n);
    id[n] = 0;
    if (!s->enabled) {
        fail_store_off(&e);
        serving_respond_error(http, &e);
        return;
    }
    pthread_mutex_lock(&s->mu);
    stored *p = store_find(s, id);
    char *text = NULL;
    serving_call *running = NULL;
    bool background = p && p->background;
    if (p) {
        text = p->json ? strdup(p->json) : NULL;
        if (cancel && p->running) {
            running = p->running;
            serving_call_retain(running);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!p) {
        fail_not_found(&e, id);
        serving_respond_error(http, &e);
        return;
    }
    if (cancel && !background) {
        free(text);
        openai_fail(&e, 400, "invalid_request_error", "response_id", "Cannot cancel a synchronous response.");
        serving_respond_error(http, &e);
        return;
    }
    if (running) {
        resp_state *st = running->ext;
        atomic_store(&st->cancelled, true);
        serving_call_abort(running);
        serving_call_release(running);
        json_t *j = text ? json_loads(text, 0, NULL) : NULL; /* answered before the abort lands */
        if (j) {
            json_object_set_new(j, "status", json_string("cancelled"));
            free(text);
            text = openai_dumps(j);
            json_decref(j);
        }
    }
    if (text) http_respond(http, 200, "application/json", text, strlen(text));
    else http_respond(http, 500, "application/json", "{}", 2);
    free(text);
}

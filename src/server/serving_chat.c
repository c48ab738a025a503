/*
 * serving_chat.c - POST /v1/chat/completions (vLLM's OpenAIServingChat).
 *
 * The prompt is the model's chat template (src/template) rendered over the
 * request's messages (normalized as vLLM's parse_chat_messages does), with
 * continue_final_message applied as transformers does (cut the rendering
 * right after the final message's content), then tokenized without special
 * tokens unless add_special_tokens. Response shapes are vLLM's:
 *   - stream: a first chunk per choice with delta {role, content: ""}, then
 *     content deltas; chunks serialised with exclude_unset (logprobs and
 *     finish_reason present, stop_reason only on the last chunk of a
 *     choice); usage chunk (choices []) and [DONE] at the end;
 *   - logprobs {"content": [{token, logprob, bytes, top_logprobs}]} (token
 *     and bytes from the token's own bytes, see token_entry), with
 *     top_logprobs the first N entries of V1's dict (sampled token first);
 *   - echo prepends the last message's content when its role is the
 *     response's.
 * Tool calling: tool_choice "required" and a named function are structured
 * outputs (vLLM's _get_json_schema_from_tool): named constrains the output
 * by the function's parameters schema, required by an array (minItems 1)
 * of {name: enum [the tool's name], parameters: its schema} for any of the
 * tools (no other keys: vLLM's XGrammar backend is strict by default), their
 * $defs merged at the root. The output becomes message.tool_calls
 * (content ""): named -> one call whose arguments are the generated text;
 * required -> one call per array item, arguments json.dumps(parameters) as
 * Python writes it, finish_reason "tool_calls" (vLLM's stream says that,
 * its non-stream response "stop"; we say "tool_calls" in both, as OpenAI
 * does). "auto" with --enable-auto-tool-choice --tool-call-parser NAME
 * parses the model's own format (tool_parser.c: hermes, llama3_json) into
 * tool_calls and content, finish_reason "tool_calls" when it made calls;
 * without the flags it gets vLLM's refusal. Streaming: named streams
 * argument deltas (the first with the call's id, type and name), as vLLM;
 * required and auto stream each call when it is complete, as
 * {index, id, type, function.name} then {index, function.arguments}.
 * --reasoning-parser splits <think>...</think> off as reasoning_content
 * (streamed as delta.reasoning_content) before the tool parser sees the
 * rest, and makes a constraint wait for the reasoning's end
 * (constrain_after_reasoning). Tools are shown to the template either way,
 * as vLLM's model_dump() of them.
 */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "sample/sampler.h"
#include "server/serving.h"
#include "server/tool_parser.h"
#include "structured/structured.h"
#include "template/chat_template.h"

static json_t *ids_json(const int32_t *ids, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* Text of a message's content: the string, or its text parts joined by "\n". */
static char *content_text(const json_t *content) {
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (!json_is_array(content)) return strdup("");
    size_t len = 0, i;
    json_t *p;
    json_array_foreach(content, i, p) len += json_string_length(json_object_get(p, "text")) + 1;
    char *s = malloc(len + 1), *w = s;
    if (!s) return NULL;
    json_array_foreach(content, i, p) {
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t)) continue;
        if (w != s) *w++ = '\n';
        memcpy(w, json_string_value(t), json_string_length(t));
        w += json_string_length(t);
    }
    *w = 0;
    return s;
}

static const char *response_role(serving_ctx *ctx, const openai_request *req) {
    if (req->add_generation_prompt) return ctx->response_role;
    size_t n = json_array_size(req->messages);
    json_t *role = n ? json_object_get(json_array_get(req->messages, n - 1), "role") : NULL;
    return json_is_string(role) ? json_string_value(role) : ctx->response_role;
}

/* transformers' continue_final_message: end the prompt right after the final
 * message's content, so the model continues it. */
static bool cut_after_final_message(const json_t *messages, char *text, size_t *len, openai_error *e) {
    size_t n = json_array_size(messages);
    json_t *content = n ? json_object_get(json_array_get(messages, n - 1), "content") : NULL;
    const char *final = NULL;
    if (json_is_string(content)) final = json_string_value(content);
    else if (json_is_array(content) && json_array_size(content))
        final = json_string_value(json_object_get(json_array_get(content, json_array_size(content) - 1), "text"));
    if (!final) final = "";
    size_t flen = strlen(final);
    for (int pass = 0; pass < 2; pass++) { /* as is, then stripped */
        const char *f = final;
        size_t fl = flen;
        if (pass == 1) {
            while (fl && strchr(" \t\n\r", *f)) f++, fl--;
            while (fl && strchr(" \t\n\r", f[fl - 1])) fl--;
        }
        for (size_t at = *len >= fl ? *len - fl + 1 : 0; at-- > 0;) {
            if (!memcmp(text + at, f, fl)) {
                *len = at + fl;
                text[*len] = 0;
                return true;
            }
        }
    }
    return openai_fail(e, 400, "BadRequestError", "continue_final_message",
                       "continue_final_message is set but the final message does not appear in the "
                       "chat after applying the chat template! This can happen if the chat template "
                       "deletes portions of the final message. Please verify the chat template and "
                       "final message in your chat to ensure the final message is not modified.");
}

/* The tools as vLLM hands them to the template: ChatCompletionToolsParam's
 * model_dump(), i.e. {type, function: {name, description, parameters}} with
 * unset fields as null, declared fields first, extra ones after. */
static json_t *normalize_tools(const json_t *tools) {
    if (!tools) return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        json_t *nf = json_object();
        static const char *const declared[] = {"name", "description", "parameters"};
        for (int k = 0; k < 3; k++) {
            json_t *v = json_object_get(fn, declared[k]);
            json_object_set(nf, declared[k], v ? v : json_null());
        }
        const char *key;
        json_t *v;
        json_object_foreach(fn, key, v) if (!json_object_get(nf, key)) json_object_set(nf, key, v);
        json_t *nt = json_object();
        json_object_set_new(nt, "type", json_string("function"));
        json_object_set_new(nt, "function", nf);
        json_object_foreach(t, key, v) if (!json_object_get(nt, key)) json_object_set(nt, key, v);
        json_array_append_new(out, nt);
    }
    return out;
}

bool serving_chat_prompt(serving_ctx *ctx, openai_request *req, int32_t **ids, int32_t *n,
                         openai_error *e) {
    *ids = NULL;
    *n = 0;
    chat_template *own = NULL;
    const chat_template *ct = ctx->chat_template;
    if (req->chat_template) {
        if (!ctx->trust_request_chat_template)
            return openai_fail(e, 400, "BadRequestError", "chat_template",
                               "Chat template is passed with request, but "
                               "--trust-request-chat-template is not set. Refused request with "
                               "untrusted chat template.");
        if (chat_template_create(ctx->tokenizer_config, req->chat_template, &own) != VLLM_OK)
            return openai_fail(e, 400, "BadRequestError", "chat_template", "%s", vllm_errmsg());
        ct = own;
    }
    if (!ct)
        return openai_fail(e, 400, "BadRequestError", NULL,
                           "As of transformers v4.44, default chat template is no longer allowed, so "
                           "you must provide a chat template if the tokenizer does not define one.");
    json_t *msgs = NULL, *tools = normalize_tools(req->tools);
    char *text = NULL;
    size_t len = 0;
    bool ok = false;
    if (chat_template_prepare_messages(req->messages, chat_template_content_format(ct), &msgs) != VLLM_OK) {
        openai_fail(e, 400, "BadRequestError", "messages", "%s", vllm_errmsg());
        goto out;
    }
    chat_template_request tr = {
        .messages = msgs,
        .tools = tools,
        .documents = req->documents,
        .add_generation_prompt = req->add_generation_prompt,
        .kwargs = req->chat_template_kwargs,
    };
    if (chat_template_render(ct, &tr, &text, &len) != VLLM_OK) {
        openai_fail(e, 400, "BadRequestError", NULL, "%s", vllm_errmsg());
        goto out;
    }
    if (req->continue_final_message && !cut_after_final_message(msgs, text, &len, e)) goto out;
    ok = serving_tokenize_prompt(ctx, text, len, req->add_special_tokens, ids, n, e);
out:
    json_decref(msgs);
    json_decref(tools);
    free(text);
    chat_template_free(own);
    return ok;
}

/* ---- response format ------------------------------------------------------------ */

static json_t *chunk_new(serving_call *c) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(c->id));
    json_object_set_new(j, "object", json_string("chat.completion.chunk"));
    json_object_set_new(j, "created", json_integer(c->created));
    json_object_set_new(j, "model", json_string(c->model_name));
    return j;
}

static void send_choice(serving_call *c, json_t *choice, json_t *usage) {
    json_t *j = chunk_new(c);
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(j, "choices", choices);
    if (usage) json_object_set_new(j, "usage", usage);
    serving_send_event(c, j, false);
}

/* {token, logprob, bytes}: bytes are the token's own (raw, maybe a part of
 * a UTF-8 character), or with return_tokens_as_token_ids those of
 * "token_id:N" as vLLM. */
static json_t *token_entry(serving_call *c, const output_logprob *e) {
    json_t *o = json_object();
    json_t *tok = serving_token_json(c, e);
    const unsigned char *b = (const unsigned char *)json_string_value(tok);
    size_t n = json_string_length(tok);
    if (!c->req.return_tokens_as_token_ids && e->bytes) {
        b = (const unsigned char *)e->bytes;
        n = e->bytes_len;
    }
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer(b[i]));
    json_object_set_new(o, "token", tok);
    json_object_set_new(o, "logprob", json_real(e->logprob < -9999.0f ? -9999.0 : (double)e->logprob));
    json_object_set_new(o, "bytes", bytes);
    return o;
}

static json_t *chat_logprobs(serving_call *c, const output_delta *d) {
    json_t *content = json_array();
    for (int32_t i = 0; i < d->num_tokens; i++) {
        const output_token_logprobs *l = &d->logprobs[i];
        json_t *entry = token_entry(c, &l->entries[0]);
        json_t *top = json_array();
        int32_t n = l->num_entries < c->logprobs ? l->num_entries : c->logprobs;
        for (int32_t k = 0; k < n; k++) json_array_append_new(top, token_entry(c, &l->entries[k]));
        json_object_set_new(entry, "top_logprobs", top);
        json_array_append_new(content, entry);
    }
    json_t *lp = json_object();
    json_object_set_new(lp, "content", content);
    return lp;
}

static json_t *running_usage(serving_call *c, int32_t completion) {
    return openai_usage_json(c->prompts[0].num_ids, completion, 0, true);
}

static bool continuous_usage(const serving_call *c) {
    return (c->req.include_usage || c->ctx->enable_force_include_usage) && c->req.continuous_usage_stats;
}

/* ---- tool calls (required / named) ---------------------------------------------- */

static int tool_mode(const serving_call *c) { /* 0 none, 1 named, 2 required, 3 auto (with a parser) */
    const char *tc = c->req.tool_choice;
    if (!tc || !c->req.tools) return 0;
    if (!strcmp(tc, "auto")) return c->ctx->enable_auto_tool_choice && c->ctx->tool_call_parser ? 3 : 0;
    return !strcmp(tc, "named") ? 1 : !strcmp(tc, "required") ? 2 : 0;
}

/* vLLM's _get_json_schema_from_tool, serialised; NULL with e set. */
static char *tools_schema(const openai_request *req, openai_error *e) {
    json_t *schema = NULL;
    size_t i;
    json_t *t;
    if (!strcmp(req->tool_choice, "named")) {
        json_array_foreach(req->tools, i, t) {
            json_t *fn = json_object_get(t, "function");
            json_t *name = json_object_get(fn, "name");
            if (!json_is_string(name) || strcmp(json_string_value(name), req->tool_choice_name)) continue;
            json_t *params = json_object_get(fn, "parameters");
            schema = json_is_object(params) && json_object_size(params) ? json_deep_copy(params) : NULL;
            break;
        }
        if (!schema) schema = json_pack("{s:s, s:{}}", "type", "object", "properties");
    } else {
        json_t *any = json_array(), *defs = json_object();
        json_array_foreach(req->tools, i, t) {
            json_t *fn = json_object_get(t, "function");
            json_t *params = json_object_get(fn, "parameters");
            json_t *p = json_is_object(params) && json_object_size(params) ? json_deep_copy(params)
                                                                            : json_pack("{s:s, s:{}}", "type", "object", "properties");
            json_t *d = json_object_get(p, "$defs");
            const char *k;
            json_t *v;
            if (json_is_object(d)) {
                json_object_foreach(d, k, v) {
                    json_t *have = json_object_get(defs, k);
                    if (have && !json_equal(have, v)) {
                        openai_fail(e, 400, "BadRequestError", "tools",
                                    "Tool definition '%s' has multiple schemas, which is not supported.", k);
                        json_decref(p);
                        json_decref(any);
                        json_decref(defs);
                        return NULL;
                    }
                    json_object_set(defs, k, v);
                }
                json_object_del(p, "$defs");
            }
            /* additionalProperties false: what vLLM's schema means under XGrammar,
             * whose strict mode (vLLM's default) allows no other keys */
            json_t *one = json_pack("{s:{s:{s:s, s:[O]}, s:o}, s:[s,s], s:b}", "properties", "name", "type", "string",
                                    "enum", json_object_get(fn, "name"), "parameters", p, "required", "name",
                                    "parameters", "additionalProperties", 0);
            json_array_append_new(any, one);
        }
        schema = json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "array", "minItems", 1, "items", "type", "object",
                           "anyOf", any);
        if (json_object_size(defs)) json_object_set(schema, "$defs", defs);
        json_decref(defs);
    }
    char *s = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    if (!s) openai_fail(e, 500, "Internal Server Error", NULL, "out of memory");
    return s;
}

/* One tool call {id, type, function: {name, arguments}}. */
static json_t *tool_call_json(const char *name, json_t *arguments) {
    char id[80];
    openai_random_id("chatcmpl-tool-", id, sizeof id);
    json_t *call = json_object(), *fn = json_object();
    json_object_set_new(call, "id", json_string(id));
    json_object_set_new(call, "type", json_string("function"));
    json_object_set_new(fn, "name", json_string(name));
    json_object_set_new(fn, "arguments", arguments);
    json_object_set_new(call, "function", fn);
    return call;
}

/* A choice's whole text -> its message's reasoning, content and calls
 * (tool_parser.c's rules): named, the content is the arguments; required,
 * the array of {name, parameters}; auto, the --tool-call-parser's format.
 * *calls NULL when none were made (required cut short by max_tokens: the
 * text stays the content). *content / *reasoning NULL = JSON null. */
static void parse_message(serving_call *c, const char *text, size_t len, char **reasoning, char **content,
                          json_t **calls) {
    *reasoning = NULL;
    *calls = NULL;
    if (c->ctx->reasoning_parser)
        tool_parser_reasoning_split((reasoning_parser_kind)c->ctx->reasoning_parser, text, len, reasoning, content);
    else
        *content = strndup(text, len);
    int mode = tool_mode(c);
    if (mode == 1) {
        const char *a = *content ? *content : "";
        *calls = json_array();
        json_array_append_new(*calls, tool_call_json(c->req.tool_choice_name, openai_json_text(a, strlen(a))));
        free(*content);
        *content = strdup("");
    } else if (mode >= 2) {
        char *rest = NULL;
        const char *a = *content ? *content : "";
        *calls = tool_parser_extract(mode == 2 ? TOOL_PARSER_REQUIRED : (tool_parser_kind)c->ctx->tool_call_parser, a,
                                     strlen(a), &rest);
        if (*calls) {
            free(*content);
            *content = mode == 2 ? strdup("") : rest;
            if (mode == 2) free(rest);
        } else {
            free(rest);
        }
    }
}

static void chat_begin(serving_call *c) {
    const char *role = response_role(c->ctx, &c->req);
    for (int32_t i = 0; i < c->num_choices; i++) {
        json_t *delta = json_object();
        json_object_set_new(delta, "role", json_string(role));
        json_object_set_new(delta, "content", json_string(""));
        json_t *choice = json_object();
        json_object_set_new(choice, "index", json_integer(i));
        json_object_set_new(choice, "delta", delta);
        json_object_set_new(choice, "logprobs", json_null());
        json_object_set_new(choice, "finish_reason", json_null());
        json_t *j = chunk_new(c);
        json_t *choices = json_array();
        json_array_append_new(choices, choice);
        json_object_set_new(j, "choices", choices);
        if (continuous_usage(c)) json_object_set_new(j, "usage", running_usage(c, 0));
        if (c->req.return_token_ids)
            json_object_set_new(j, "prompt_token_ids", ids_json(c->prompts[0].ids, c->prompts[0].num_ids));
        serving_send_event(c, j, false);
    }
    if (c->echo_text) {
        for (int32_t i = 0; i < c->num_choices; i++) {
            json_t *delta = json_object();
            json_object_set_new(delta, "content", json_string(c->echo_text));
            json_t *choice = json_object();
            json_object_set_new(choice, "index", json_integer(i));
            json_object_set_new(choice, "delta", delta);
            json_object_set_new(choice, "logprobs", json_null());
            json_object_set_new(choice, "finish_reason", json_null());
            send_choice(c, choice, continuous_usage(c) ? running_usage(c, 0) : NULL);
        }
    }
}

/* Appends the delta's logprob entries to the choice's. */
static void merge_logprobs(json_t **into, json_t *from) {
    if (!*into) {
        *into = from;
        return;
    }
    json_array_extend(json_object_get(*into, "content"), json_object_get(from, "content"));
    json_decref(from);
}

/* A choice's parsers while streaming (reasoning first, then tool calls on
 * what is content, as vLLM chains them). */
typedef struct chat_parse {
    reasoning_stream rs;
    tool_parser_stream ts;
} chat_parse;

static void chat_parse_free(void *p) {
    chat_parse *ps = p;
    if (!ps) return;
    tool_parser_reasoning_stream_free(&ps->rs);
    tool_parser_stream_free(&ps->ts);
    free(ps);
}

/* Streaming through the parsers: one chunk for the text (reasoning_content
 * and/or content; named: an arguments delta), then one per tool-call delta;
 * the logprobs and token ids ride on the first, finish_reason and
 * stop_reason on the last. Text the parsers hold back sends nothing yet. */
/* tool_choice named: the generated text is the call's arguments, streamed as argument deltas; the
 * first delta of a choice also carries the call's id, type and name (vLLM's shape). */
static json_t *named_call_delta(serving_call *c, int32_t ci, const char *args, size_t len) {
    serving_choice *ch = &c->choices[ci];
    json_t *tc = json_object(), *fn = json_object();
    if (!ch->first_sent) {
        char id[80];
        openai_random_id("chatcmpl-tool-", id, sizeof id);
        json_object_set_new(tc, "id", json_string(id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(fn, "name", json_string(c->req.tool_choice_name));
        ch->first_sent = true;
    }
    json_object_set_new(fn, "arguments", openai_json_text(args, len));
    json_object_set_new(tc, "function", fn);
    json_object_set_new(tc, "index", json_integer(ci));
    return json_pack("[o]", tc);
}

static void stream_parsed(serving_call *c, int32_t ci, const output_delta *d, const char *text, size_t len,
                          json_t *lp) {
    serving_choice *ch = &c->choices[ci];
    int mode = tool_mode(c);
    chat_parse *ps = ch->parse;
    if (!ps) {
        ps = calloc(1, sizeof *ps);
        if (!ps) {
            json_decref(lp);
            return;
        }
        tool_parser_reasoning_stream_init(&ps->rs, (reasoning_parser_kind)c->ctx->reasoning_parser);
        tool_parser_stream_init(&ps->ts, mode == 3   ? (tool_parser_kind)c->ctx->tool_call_parser
                                         : mode == 2 ? TOOL_PARSER_REQUIRED
                                                     : TOOL_PARSER_NONE);
        ch->parse = ps;
        ch->parse_free = chat_parse_free;
    }
    strbuf reasoning = {0}, content = {0}, rest = {0};
    tool_parser_reasoning_stream_feed(&ps->rs, text, len, ch->finished, &reasoning, &content);
    json_t *tds = json_array();
    tool_parser_stream_feed(&ps->ts, content.s ? content.s : "", content.len, ch->finished, &rest, tds);
    json_t *deltas = json_array();
    if (reasoning.len || rest.len) {
        json_t *delta = json_object();
        if (reasoning.len) json_object_set_new(delta, "reasoning_content", openai_json_text(reasoning.s, reasoning.len));
        if (rest.len && mode == 1)
            json_object_set_new(delta, "tool_calls", named_call_delta(c, ci, rest.s, rest.len));
        else if (rest.len) {
            json_object_set_new(delta, "content", openai_json_text(rest.s, rest.len));
        }
        json_array_append_new(deltas, delta);
    }
    size_t k;
    json_t *td;
    json_array_foreach(tds, k, td) json_array_append_new(deltas, json_pack("{s:[O]}", "tool_calls", td));
    json_decref(tds);
    free(reasoning.s);
    free(content.s);
    free(rest.s);
    if (!json_array_size(deltas) && (ch->finished || c->req.return_token_ids)) json_array_append_new(deltas, json_object());
    const char *fr = vllm_finish_reason_str(ch->finish_reason);
    if (ps->ts.num_calls && (mode == 3 || (mode == 2 && ch->finish_reason == VLLM_FINISH_STOP))) fr = "tool_calls";
    size_t n = json_array_size(deltas);
    json_t *delta;
    json_array_foreach(deltas, k, delta) {
        bool last = k + 1 == n;
        json_t *choice = json_object();
        json_object_set_new(choice, "index", json_integer(ci));
        json_object_set_new(choice, "delta", json_incref(delta));
        json_object_set_new(choice, "logprobs", k == 0 && lp ? json_incref(lp) : json_null());
        json_object_set_new(choice, "finish_reason", last && ch->finished && fr ? json_string(fr) : json_null());
        if (last && ch->finished) json_object_set_new(choice, "stop_reason", serving_stop_reason(ch));
        if (k == 0 && c->req.return_token_ids)
            json_object_set_new(choice, "token_ids", ids_json(d->token_ids, d->num_tokens));
        send_choice(c, choice, continuous_usage(c) ? running_usage(c, ch->num_tokens) : NULL);
    }
    json_decref(deltas);
    json_decref(lp);
}

static void chat_delta(serving_call *c, int32_t ci, const output_delta *d, const char *text,
                       size_t text_len) {
    serving_choice *ch = &c->choices[ci];
    json_t *lp = c->logprobs >= 0 && d->logprobs && d->num_tokens > 0 ? chat_logprobs(c, d) : NULL;
    if (!c->streaming) {
        if (lp) merge_logprobs(&ch->logprobs, lp);
        return;
    }
    if (tool_mode(c) >= 2 || c->ctx->reasoning_parser) {
        stream_parsed(c, ci, d, text, text_len, lp);
        return;
    }
    json_t *delta = json_object();
    const char *fr = vllm_finish_reason_str(ch->finish_reason);
    int mode = tool_mode(c);
    if (mode == 1)
        json_object_set_new(delta, "tool_calls", named_call_delta(c, ci, text, text_len));
    else
        json_object_set_new(delta, "content", openai_json_text(text, text_len));
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(ci));
    json_object_set_new(choice, "delta", delta);
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
    json_object_set_new(choice, "finish_reason", ch->finished && fr ? json_string(fr) : json_null());
    if (ch->finished) json_object_set_new(choice, "stop_reason", serving_stop_reason(ch));
    if (c->req.return_token_ids) json_object_set_new(choice, "token_ids", ids_json(d->token_ids, d->num_tokens));
    send_choice(c, choice, continuous_usage(c) ? running_usage(c, ch->num_tokens) : NULL);
}

static json_t *chat_final(serving_call *c) {
    const char *role = response_role(c->ctx, &c->req);
    json_t *choices = json_array();
    for (int32_t i = 0; i < c->num_choices; i++) {
        serving_choice *ch = &c->choices[i];
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string(role));
        /* the parsers see the generated text only; echo then prefixes the content (vLLM) */
        char *reasoning = NULL, *content = NULL;
        json_t *calls = NULL;
        parse_message(c, ch->text ? ch->text : "", ch->text_len, &reasoning, &content, &calls);
        if (c->echo_text) {
            size_t elen = strlen(c->echo_text), clen = content ? strlen(content) : 0;
            char *full = malloc(elen + clen + 1);
            if (full) {
                memcpy(full, c->echo_text, elen);
                if (clen) memcpy(full + elen, content, clen);
                full[elen + clen] = 0;
            }
            free(content);
            content = full;
        }
        json_object_set_new(msg, "content", content ? openai_json_text(content, strlen(content)) : json_null());
        json_object_set_new(msg, "refusal", json_null());
        json_object_set_new(msg, "annotations", json_null());
        json_object_set_new(msg, "audio", json_null());
        json_object_set_new(msg, "function_call", json_null());
        const char *fr = vllm_finish_reason_str(ch->finish_reason);
        int mode = tool_mode(c);
        if (calls && (mode == 3 || (mode == 2 && ch->finish_reason == VLLM_FINISH_STOP))) fr = "tool_calls";
        json_object_set_new(msg, "tool_calls", calls ? calls : json_array());
        json_object_set_new(msg, "reasoning_content",
                            reasoning ? openai_json_text(reasoning, strlen(reasoning)) : json_null());
        free(reasoning);
        free(content);
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(i));
        json_object_set_new(o, "message", msg);
        json_object_set_new(o, "logprobs", ch->logprobs ? json_incref(ch->logprobs) : json_null());
        json_object_set_new(o, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set_new(o, "stop_reason", serving_stop_reason(ch));
        if (c->req.return_token_ids) json_object_set_new(o, "token_ids", ids_json(ch->token_ids, ch->num_tokens));
        json_array_append_new(choices, o);
    }
    json_t *j = serving_response_new(c, "chat.completion", choices);
    json_object_set_new(j, "prompt_logprobs",
                        c->prompts[0].prompt_logprobs ? json_incref(c->prompts[0].prompt_logprobs) : json_null());
    if (c->req.return_token_ids)
        json_object_set_new(j, "prompt_token_ids", ids_json(c->prompts[0].ids, c->prompts[0].num_ids));
    json_object_set_new(j, "kv_transfer_params", serving_kv_transfer_params(c->ctx, &c->req, c->id));
    return j;
}

/* The last occurrence of pat in s[0..n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *pat) {
    const char *last = NULL, *p = s;
    size_t pl = strlen(pat);
    while ((p = memmem(p, n - (size_t)(p - s), pat, pl)) != NULL) last = p++;
    return last;
}

/* --reasoning-parser: a constraint applies once the reasoning has ended,
 * as vLLM starts the grammar after the parser's end token. The prompt has
 * ended it when its last think tag is "</think>" (the rule of vLLM's newer
 * parsers, which scan the prompt's ids backwards: 0.11's "end token
 * anywhere in the prompt" would count an earlier turn's think block in a
 * multi-turn or few-shot conversation); otherwise the constraint becomes
 * GBNF behind free text that ends with "</think>" (st_gbnf_after_text). */
static bool constrain_after_reasoning(serving_ctx *ctx, openai_request *req, const int32_t *ids, int32_t n,
                                      openai_error *e) {
    if (!ctx->reasoning_parser || req->structured.kind == VLLM_STRUCTURED_NONE) return true;
    char *text = NULL;
    size_t len = 0;
    bool ended = false;
    if (tokenizer_decode(ctx->tok, ids, n, false, &text, &len) == VLLM_OK) {
        const char *close = last_of(text, len, "</think>"), *open = last_of(text, len, "<think>");
        ended = close && (!open || close > open);
    }
    free(text);
    if (ended) return true;
    const char *field = req->structured_field ? req->structured_field : "structured_outputs";
    st_spec spec;
    strbuf g = {0}, w = {0};
    vllm_status rc = grammar_cache_spec(&req->structured, &spec);
    if (!rc) rc = st_spec_to_gbnf(&spec, &g);
    if (!rc) rc = st_gbnf_after_text(g.s ? g.s : "", g.len, "</think>", &w);
    free(g.s);
    if (rc) {
        free(w.s);
        return openai_fail(e, 400, "BadRequestError", field, "%s: %s", field, vllm_errmsg());
    }
    free((char *)req->structured.text);
    req->structured.kind = VLLM_STRUCTURED_GRAMMAR;
    req->structured.text = w.s;
    req->structured.len = w.len;
    return true;
}

static const serving_format chat_format = {chat_begin, chat_delta, chat_final, NULL, NULL, NULL};

void serving_chat_completions(serving_ctx *ctx, http_request *http, openai_request *req) {
    serving_chat_as as = {&chat_format, "chatcmpl-", NULL, NULL, false};
    serving_chat_run(ctx, http, req, &as);
}

void serving_chat_run(serving_ctx *ctx, http_request *http, openai_request *req, const serving_chat_as *as) {
    openai_error e = {0};
    serving_prompt *prompt = NULL;
    char *echo = NULL;
    const char *model = serving_check_model(ctx, req->model, &e);
    if (!model) goto fail;
    if (req->tool_choice && !strcmp(req->tool_choice, "auto") && !(ctx->enable_auto_tool_choice && ctx->tool_call_parser)) {
        openai_fail(&e, 400, "BadRequestError", "tool_choice",
                    "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser "
                    "to be set");
        goto fail;
    }
    if (req->tool_choice && req->tools && (!strcmp(req->tool_choice, "required") || !strcmp(req->tool_choice, "named"))) {
        if (req->structured.kind != VLLM_STRUCTURED_NONE) {
            openai_fail(&e, 400, "BadRequestError", "tool_choice",
                        "You can only either use constraints for structured outputs or tools, not both.");
            goto fail;
        }
        char *schema = tools_schema(req, &e);
        if (!schema) goto fail;
        req->structured.kind = VLLM_STRUCTURED_JSON; /* its whitespace options stay */
        req->structured.text = schema;
        req->structured.len = strlen(schema);
        req->structured_field = "tools";
    }
    if (req->priority != 0 && ctx->policy != VLLM_SCHEDULING_PRIORITY) {
        openai_fail(&e, 400, "BadRequestError", "priority",
                    "Got priority %d but Priority scheduling is not enabled.", req->priority);
        goto fail;
    }
    prompt = calloc(1, sizeof *prompt);
    if (!prompt) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    if (!serving_chat_prompt(ctx, req, &prompt->ids, &prompt->num_ids, &e)) goto fail;
    serving_truncate_prompt(ctx, req, prompt->ids, &prompt->num_ids);
    if (!constrain_after_reasoning(ctx, req, prompt->ids, prompt->num_ids, &e)) goto fail;
    if (!serving_check_prompt_ids(ctx, prompt->ids, prompt->num_ids, &e)) goto fail;
    if (!openai_request_sampling_params(req, &ctx->defaults, ctx->max_model_len, prompt->num_ids,
                                        ctx->max_logprobs, &prompt->sp, &e))
        goto fail;
    if (!serving_check_sampling(ctx, req, &prompt->sp, &e)) goto fail;
    if (req->echo) {
        size_t nm = json_array_size(req->messages);
        json_t *last = nm ? json_array_get(req->messages, nm - 1) : NULL;
        json_t *role = json_object_get(last, "role");
        if (last && json_object_get(last, "content") && json_is_string(role) &&
            !strcmp(json_string_value(role), response_role(ctx, req)))
            echo = content_text(json_object_get(last, "content"));
    }
    if (req->unknown_fields[0])
        log_warn("The following fields were present in the request but ignored: {%s}", req->unknown_fields);
    int32_t n = req->n, logprobs = req->logprobs;
    serving_call *c = serving_call_new(ctx, http, req, as->fmt, as->id_prefix);
    if (!c) {
        openai_fail(&e, 500, "Internal Server Error", NULL, "out of memory");
        goto fail;
    }
    c->ext = as->ext;
    c->ext_free = as->ext_free;
    c->background = as->background;
    c->model_name = model;
    c->prompts = prompt;
    c->num_prompts = 1;
    c->n = n;
    c->logprobs = logprobs;
    c->echo_text = echo;
    serving_submit(c);
    return;
fail:
    if (prompt) free(prompt->ids);
    free(prompt);
    free(echo);
    if (as->ext_free) as->ext_free(as->ext);
    openai_request_free(req);
    serving_respond_error(http, &e);
}

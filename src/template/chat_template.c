/*
 * chat_template.c - from tokenizer_config.json and an OpenAI conversation to
 * the prompt text, the way vLLM (message normalization) and transformers'
 * apply_chat_template (template choice, render context) do it.
 *
 * Template choice: `chat_template` may be one string or a list of
 * {name, template}; with a list, a request with tools uses "tool_use" when it
 * exists, otherwise "default" (or the name the request asks for). All are
 * compiled at creation so a broken template fails at startup.
 *
 * Special tokens: bos/eos/unk/sep/pad/cls/mask_token, each a string or an
 * AddedToken object ({"content": ...}); empty or null ones are left out, as
 * transformers does. (transformers.js rejects AddedToken objects without
 * "__type"; Python transformers accepts them, so we do too.)
 */
#include "template/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja.h"

typedef struct named_template {
    char *name; /* NULL for the single unnamed template */
    jinja_template *tpl;
} named_template;

struct chat_template {
    named_template *t;
    size_t n;
    json_t *special; /* object: bos_token -> "<s>", ... in transformers' order */
    chat_content_format format;
};

static const char *const special_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    for (size_t i = 0; i < ct->n; i++) {
        free(ct->t[i].name);
        jinja_template_free(ct->t[i].tpl);
    }
    free(ct->t);
    json_decref(ct->special);
    free(ct);
}

static vllm_status add_template(chat_template *ct, const char *name, const char *source) {
    named_template *t = realloc(ct->t, (ct->n + 1) * sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    ct->t = t;
    named_template *nt = &ct->t[ct->n];
    nt->name = name ? strdup(name) : NULL;
    if (name && !nt->name) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    vllm_status rc = jinja_template_parse(source, strlen(source), &nt->tpl);
    if (rc) {
        free(nt->name);
        if (name) vllm_error_prefix("chat template '%s'", name);
        return rc;
    }
    ct->n++;
    return VLLM_OK;
}

static const named_template *find_template(const chat_template *ct, const char *name) {
    for (size_t i = 0; i < ct->n; i++)
        if (ct->t[i].name && !strcmp(ct->t[i].name, name)) return &ct->t[i];
    return NULL;
}

vllm_status chat_template_create(const json_t *config, const char *override_source, chat_template **out) {
    *out = NULL;
    if (config && !json_is_object(config))
        return vllm_error(VLLM_ERR_FORMAT, "tokenizer_config.json: not a JSON object");
    chat_template *ct = calloc(1, sizeof *ct);
    if (!ct || !(ct->special = json_object())) {
        free(ct);
        return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    }
    vllm_status rc = VLLM_OK;
    const json_t *src = config ? json_object_get(config, "chat_template") : NULL;
    if (override_source) {
        rc = add_template(ct, NULL, override_source);
    } else if (json_is_string(src)) {
        rc = add_template(ct, NULL, json_string_value(src));
    } else if (json_is_array(src) && json_array_size(src) > 0) {
        size_t i;
        const json_t *item;
        json_array_foreach(src, i, item) {
            const char *name = json_string_value(json_object_get(item, "name"));
            const char *text = json_string_value(json_object_get(item, "template"));
            if (!name || !text) {
                rc = vllm_error(VLLM_ERR_FORMAT, "tokenizer_config.json: chat_template[%zu] needs string "
                                                 "\"name\" and \"template\"", i);
                break;
            }
            if ((rc = add_template(ct, name, text))) break;
        }
        if (!rc && !find_template(ct, "default"))
            rc = vllm_error(VLLM_ERR_FORMAT, "tokenizer_config.json: chat_template has several templates "
                                             "and none is named \"default\"");
    } else if (src && !json_is_null(src)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "tokenizer_config.json: chat_template must be a string or a list");
    } else {
        rc = vllm_error(VLLM_ERR_NOT_FOUND, "the model has no chat template (no chat_template in "
                                            "tokenizer_config.json, no tokenizer.chat_template in a GGUF); pass "
                                            "one with --chat-template");
    }
    for (size_t i = 0; !rc && config && i < sizeof special_keys / sizeof *special_keys; i++) {
        const json_t *v = json_object_get(config, special_keys[i]);
        const char *s = NULL;
        if (json_is_string(v)) s = json_string_value(v);
        else if (json_is_object(v)) s = json_string_value(json_object_get(v, "content"));
        if (s && *s && json_object_set_new(ct->special, special_keys[i], json_string(s)))
            rc = vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    }
    if (rc) {
        chat_template_free(ct);
        return rc;
    }
    const named_template *def = ct->t[0].name ? find_template(ct, "default") : &ct->t[0];
    ct->format = jinja_template_iterates_content(def->tpl) ? CHAT_CONTENT_OPENAI : CHAT_CONTENT_STRING;
    *out = ct;
    return VLLM_OK;
}

vllm_status chat_template_load(const char *config_path, const char *override_source, chat_template **out) {
    json_error_t err;
    json_t *config = NULL;
    if (config_path) {
        config = json_load_file(config_path, JSON_DECODE_INT_AS_REAL, &err);
        if (!config)
            return vllm_error(VLLM_ERR_FORMAT, "%s: line %d: %s", config_path, err.line, err.text);
    }
    vllm_status rc = chat_template_create(config, override_source, out);
    if (rc && config_path) vllm_error_prefix("%s", config_path);
    json_decref(config);
    return rc;
}

chat_content_format chat_template_content_format(const chat_template *ct) { return ct->format; }

const char *chat_template_bos_token(const chat_template *ct) {
    return json_string_value(json_object_get(ct->special, "bos_token"));
}

const char *chat_template_eos_token(const chat_template *ct) {
    return json_string_value(json_object_get(ct->special, "eos_token"));
}

/* ---- messages ------------------------------------------------------------- */

static vllm_status message_content(const json_t *content, chat_content_format format, size_t idx, json_t **out) {
    *out = NULL;
    if (!content || json_is_null(content)) {
        *out = format == CHAT_CONTENT_STRING ? json_string("") : json_array();
    } else if (json_is_string(content)) {
        if (format == CHAT_CONTENT_STRING) {
            *out = json_incref((json_t *)content);
        } else {
            *out = json_pack("[{s:s,s:O}]", "type", "text", "text", content);
        }
    } else if (json_is_array(content)) {
        size_t i;
        const json_t *part;
        json_t *parts = json_array();
        size_t total = 0;
        json_array_foreach(content, i, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            const json_t *text = json_object_get(part, "text");
            if (!type || strcmp(type, "text") || !json_is_string(text)) {
                json_decref(parts);
                return vllm_error(VLLM_ERR_INVALID, "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                                    "\"text\": string} parts are supported%s%s",
                                  idx, i, type ? ", got type " : "", type ? type : "");
            }
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
            total += json_string_length(text) + 1;
        }
        if (format == CHAT_CONTENT_OPENAI) {
            *out = parts;
        } else {
            char *joined = malloc(total + 1), *p = joined;
            if (!joined) {
                json_decref(parts);
                return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
            }
            json_array_foreach(parts, i, part) {
                const json_t *text = json_object_get(part, "text");
                if (i) *p++ = '\n';
                memcpy(p, json_string_value(text), json_string_length(text));
                p += json_string_length(text);
            }
            *out = json_stringn(joined, (size_t)(p - joined));
            free(joined);
            json_decref(parts);
        }
    } else {
        return vllm_error(VLLM_ERR_INVALID, "messages[%zu].content must be a string, a list of parts or null", idx);
    }
    return *out ? VLLM_OK : vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
}

/* Copies tool_calls, parsing function.arguments given as JSON text. */
static vllm_status message_tool_calls(const json_t *calls, size_t idx, json_t **out) {
    *out = json_deep_copy(calls);
    if (!*out) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    size_t i;
    json_t *call;
    json_array_foreach(*out, i, call) {
        json_t *fn = json_object_get(call, "function");
        if (!json_is_object(call) || !json_is_object(fn)) {
            json_decref(*out);
            return vllm_error(VLLM_ERR_INVALID, "messages[%zu].tool_calls[%zu] must be an object with a "
                                                "\"function\" object", idx, i);
        }
        json_t *args = json_object_get(fn, "arguments");
        bool empty = !args || json_is_null(args) || json_is_false(args) ||
                     (json_is_string(args) && json_string_length(args) == 0) ||
                     (json_is_integer(args) && json_integer_value(args) == 0);
        if (empty) {
            json_object_set_new(fn, "arguments", json_object());
        } else if (json_is_string(args)) {
            json_error_t err;
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &err);
            if (!parsed) /* integers beyond int64 are fine as doubles (JavaScript's numbers) */
                parsed = json_loadb(json_string_value(args), json_string_length(args),
                                    JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
            if (!parsed) {
                json_decref(*out);
                return vllm_error(VLLM_ERR_INVALID, "messages[%zu].tool_calls[%zu].function.arguments is not "
                                                    "valid JSON: %s", idx, i, err.text);
            }
            json_object_set_new(fn, "arguments", parsed);
        }
    }
    return VLLM_OK;
}

vllm_status chat_template_prepare_messages(const json_t *messages, chat_content_format format, json_t **out) {
    *out = NULL;
    if (!json_is_array(messages)) return vllm_error(VLLM_ERR_INVALID, "messages must be a list");
    json_t *result = json_array();
    if (!result) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    size_t i;
    const json_t *m;
    vllm_status rc = VLLM_OK;
    json_array_foreach(messages, i, m) {
        const json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            rc = vllm_error(VLLM_ERR_INVALID, "messages[%zu] needs a string \"role\"", i);
            break;
        }
        json_t *msg = json_object(), *content;
        json_array_append_new(result, msg);
        json_object_set(msg, "role", (json_t *)role);
        if ((rc = message_content(json_object_get(m, "content"), format, i, &content))) break;
        json_object_set_new(msg, "content", content);
        const char *r = json_string_value(role);
        if (!strcmp(r, "assistant")) {
            const json_t *calls = json_object_get(m, "tool_calls");
            if (calls && !json_is_null(calls)) {
                if (!json_is_array(calls)) {
                    rc = vllm_error(VLLM_ERR_INVALID, "messages[%zu].tool_calls must be a list", i);
                    break;
                }
                if (json_array_size(calls) > 0) {
                    json_t *copy;
                    if ((rc = message_tool_calls(calls, i, &copy))) break;
                    json_object_set_new(msg, "tool_calls", copy);
                }
            }
            const json_t *reasoning = json_object_get(m, "reasoning");
            if (!reasoning || json_is_null(reasoning)) reasoning = json_object_get(m, "reasoning_content");
            if (reasoning && !json_is_null(reasoning)) {
                if (!json_is_string(reasoning)) {
                    rc = vllm_error(VLLM_ERR_INVALID, "messages[%zu].reasoning_content must be a string", i);
                    break;
                }
                json_object_set(msg, "reasoning", (json_t *)reasoning);
                json_object_set(msg, "reasoning_content", (json_t *)reasoning);
            }
        } else if (!strcmp(r, "tool")) {
            const json_t *id = json_object_get(m, "tool_call_id");
            if (id) json_object_set(msg, "tool_call_id", (json_t *)id);
        }
        const json_t *name = json_object_get(m, "name");
        if (json_is_string(name)) json_object_set(msg, "name", (json_t *)name);
    }
    if (rc) {
        json_decref(result);
        return rc;
    }
    *out = result;
    return VLLM_OK;
}

/* ---- rendering ------------------------------------------------------------ */

vllm_status chat_template_render(const chat_template *ct, const chat_template_request *req, char **out,
                                 size_t *len) {
    *out = NULL;
    *len = 0;
    if (!json_is_array(req->messages)) return vllm_error(VLLM_ERR_INVALID, "messages must be a list");
    const named_template *t = &ct->t[0];
    if (req->template_name) {
        if (!(t = find_template(ct, req->template_name)))
            return vllm_error(VLLM_ERR_INVALID, "the model has no chat template named '%s'", req->template_name);
    } else if (ct->t[0].name) {
        t = NULL;
        if (req->tools && !json_is_null(req->tools)) t = find_template(ct, "tool_use");
        if (!t) t = find_template(ct, "default");
    }
    json_t *ctx = json_object();
    if (!ctx) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    json_object_set(ctx, "messages", (json_t *)req->messages);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(req->add_generation_prompt));
    json_object_set_new(ctx, "tools", req->tools ? json_incref((json_t *)req->tools) : json_null());
    json_object_set_new(ctx, "documents", req->documents ? json_incref((json_t *)req->documents) : json_null());
    json_object_update(ctx, ct->special);
    if (req->kwargs) {
        if (!json_is_object(req->kwargs)) {
            json_decref(ctx);
            return vllm_error(VLLM_ERR_INVALID, "chat_template_kwargs must be an object");
        }
        json_object_update(ctx, (json_t *)req->kwargs);
    }
    jinja_render_opts opts = {.now = req->now, .max_output = req->max_output};
    vllm_status rc = jinja_template_render(t->tpl, ctx, &opts, out, len);
    json_decref(ctx);
    return rc;
}

/*
 * openai_protocol.c - see openai_protocol.h.
 *
 * Parsing follows pydantic's lax mode, which is what vLLM's request models
 * get: an int field takes 3, 3.0 and "3"; a float field takes numbers and
 * numeric strings; a bool takes true/false, 0/1 and "true"/"false"; a str
 * takes only strings. Optional fields take null as "unset". Type errors read
 * like pydantic's ("1 validation error for CompletionRequest\nn\n  Input
 * should be a valid integer ..."), so the field is always named.
 *
 * Check order is vLLM's: the request model's validators (400 "Bad Request"),
 * then serving-layer checks and SamplingParams ranges (400 "BadRequestError");
 * the model name (404) and the prompt (tokenization, context length) are the
 * serving layer's, between the two.
 */
#include "server/openai_protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

#define TYPE_VALIDATION "Bad Request"
#define TYPE_VALUE "BadRequestError"

bool openai_fail(openai_error *e, int status, const char *type, const char *param,
                 const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

char *openai_dumps(const json_t *j) {
    return json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
}

json_t *openai_json_text(const char *s, size_t len) {
    json_t *j = json_stringn(s, len);
    if (j) return j;
    /* invalid UTF-8: replace each bad byte as Python's errors="replace" does */
    char *out = malloc(len * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = need > 0 && i + need <= len;
        for (size_t k = 1; ok && k < need; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok && need > 1) {
            json_t *probe = json_stringn(s + i, need); /* rejects overlongs, surrogates */
            ok = probe != NULL;
            json_decref(probe);
        }
        if (ok) {
            memcpy(out + o, s + i, need);
            o += need;
            i += need;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(out, o);
    free(out);
    return j;
}

char *openai_error_body(const openai_error *e) {
    json_t *err = json_object();
    /* a message quoting the request (or cut at its buffer size) may hold invalid
     * UTF-8, which json_string() would refuse, dropping the message */
    json_object_set_new(err, "message", openai_json_text(e->message, strlen(e->message)));
    json_object_set_new(err, "type", json_string(e->type ? e->type : TYPE_VALUE));
    json_object_set_new(err, "param", e->param[0] ? openai_json_text(e->param, strlen(e->param)) : json_null());
    json_object_set_new(err, "code", json_integer(e->status));
    json_t *root = json_object();
    json_object_set_new(root, "error", err);
    char *s = openai_dumps(root);
    json_decref(root);
    return s;
}

/* ---- typed field access ------------------------------------------------------ */

typedef struct pctx {
    json_t *obj;
    const char *model; /* "CompletionRequest" / "ChatCompletionRequest" */
    openai_error *e;
} pctx;

static const char *py_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    case JSON_ARRAY: return "list";
    case JSON_OBJECT: return "dict";
    default: return "NoneType";
    }
}

static bool type_error(pctx *c, const char *field, const char *should, const char *kind,
                       const json_t *v) {
    char *repr = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (repr && strlen(repr) > 60) strcpy(repr + 57, "...");
    openai_fail(c->e, 400, TYPE_VALIDATION, field,
                "1 validation error for %s\n%s\n  Input should be %s [type=%s, input_value=%s, "
                "input_type=%s]",
                c->model, field, should, kind, repr ? repr : "?", py_type(v));
    free(repr);
    return false;
}

/* A model validator's ValueError, as pydantic reports it. */
static bool value_error(pctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool value_error(pctx *c, const char *field, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return openai_fail(c->e, 400, TYPE_VALIDATION, field,
                       "1 validation error for %s\n  Value error, %s [type=value_error, "
                       "input_type=dict]",
                       c->model, msg);
}

/* Each getter: returns false on a type error; *set tells whether a non-null
 * value was given (a null on a non-optional field is a type error). */
static bool get_int(pctx *c, const char *f, bool optional, int64_t *out, bool *set) {
    json_t *v = json_object_get(c->obj, f);
    *set = false;
    if (!v) return true;
    if (json_is_null(v)) return optional ? true : type_error(c, f, "a valid integer", "int_type", v);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > 9.2e18)
            return type_error(c, f, "a valid integer, got a number with a fractional part",
                              "int_from_float", v);
        *out = (int64_t)d;
    } else if (json_is_string(v)) {
        char *end;
        errno = 0;
        long long x = strtoll(json_string_value(v), &end, 10);
        if (errno || end == json_string_value(v) || *end)
            return type_error(c, f, "a valid integer, unable to parse string as an integer",
                              "int_parsing", v);
        *out = x;
    } else {
        return type_error(c, f, "a valid integer", "int_type", v);
    }
    *set = true;
    return true;
}

static bool get_i32(pctx *c, const char *f, bool optional, int32_t *out, bool *set) {
    int64_t x;
    bool s;
    if (!get_int(c, f, optional, &x, &s)) return false;
    if (s) {
        if (x < INT32_MIN || x > INT32_MAX)
            return type_error(c, f, "a 32-bit integer", "int_range", json_object_get(c->obj, f));
        *out = (int32_t)x;
    }
    if (set) *set = s;
    return true;
}

static bool get_float(pctx *c, const char *f, bool optional, double *out, bool *set) {
    json_t *v = json_object_get(c->obj, f);
    bool dummy;
    if (!set) set = &dummy;
    *set = false;
    if (!v) return true;
    if (json_is_null(v)) return optional ? true : type_error(c, f, "a valid number", "float_type", v);
    if (json_is_number(v)) {
        *out = json_number_value(v);
    } else if (json_is_string(v)) {
        char *end;
        double d = strtod(json_string_value(v), &end);
        if (end == json_string_value(v) || *end)
            return type_error(c, f, "a valid number, unable to parse string as a number",
                              "float_parsing", v);
        *out = d;
    } else {
        return type_error(c, f, "a valid number", "float_type", v);
    }
    *set = true;
    return true;
}

static bool get_bool(pctx *c, const char *f, bool optional, bool *out) {
    json_t *v = json_object_get(c->obj, f);
    if (!v) return true;
    if (json_is_null(v)) return optional ? true : type_error(c, f, "a valid boolean", "bool_type", v);
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
    } else if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *out = json_integer_value(v) == 1;
    } else if (json_is_string(v)) {
        static const char *yes[] = {"true", "1", "yes", "on", "t", "y"};
        static const char *no[] = {"false", "0", "no", "off", "f", "n"};
        const char *s = json_string_value(v);
        for (size_t i = 0; i < 6; i++) {
            if (!strcasecmp(s, yes[i])) return (*out = true), true;
            if (!strcasecmp(s, no[i])) return (*out = false), true;
        }
        return type_error(c, f, "a valid boolean, unable to interpret input", "bool_parsing", v);
    } else {
        return type_error(c, f, "a valid boolean", "bool_type", v);
    }
    return true;
}

/* A string field; *out borrowed from the JSON (NULL if unset/null). */
static bool get_str(pctx *c, const char *f, bool optional, const char **out) {
    json_t *v = json_object_get(c->obj, f);
    *out = NULL;
    if (!v) return true;
    if (json_is_null(v)) return optional ? true : type_error(c, f, "a valid string", "string_type", v);
    if (!json_is_string(v)) return type_error(c, f, "a valid string", "string_type", v);
    *out = json_string_value(v);
    return true;
}

static bool is_set(const json_t *obj, const char *f) {
    json_t *v = json_object_get(obj, f);
    return v && !json_is_null(v);
}

/* Python truthiness of a JSON value (what `data.get(x)` tests). */
static bool truthy(const json_t *v) {
    if (!v) return false;
    switch (json_typeof(v)) {
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    default: return false;
    }
}

/* ---- known fields (for "present in the request but ignored") ------------- */

static const char *const common_fields[] = {
    "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "temperature", "top_p",
    "user", "best_of", "use_beam_search", "top_k", "min_p", "repetition_penalty",
    "length_penalty", "stop_token_ids", "include_stop_str_in_output", "ignore_eos",
    "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "truncate_prompt_tokens", "allowed_token_ids", "prompt_logprobs", "add_special_tokens",
    "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern", "priority",
    "request_id", "logits_processors", "return_tokens_as_token_ids", "return_token_ids",
    "cache_salt", "kv_transfer_params", "vllm_xargs", "echo", NULL};
static const char *const completion_fields[] = {"prompt", "prompt_embeds", "suffix", NULL};
static const char *const chat_fields[] = {
    "messages", "top_logprobs", "max_completion_tokens", "tools", "tool_choice",
    "reasoning_effort", "include_reasoning", "parallel_tool_calls", "bad_words",
    "add_generation_prompt", "continue_final_message", "documents", "chat_template",
    "chat_template_kwargs", "mm_processor_kwargs", "structural_tag", NULL};

static bool in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

static void note_unknown_fields(openai_request *r) {
    const char *k;
    json_t *v;
    size_t len = 0;
    r->unknown_fields[0] = 0;
    json_object_foreach(r->body, k, v) {
        if (in_list(common_fields, k) || in_list(r->chat ? chat_fields : completion_fields, k))
            continue;
        int n = snprintf(r->unknown_fields + len, sizeof r->unknown_fields - len, "%s'%s'",
                         len ? ", " : "", k);
        if (n < 0 || (size_t)n >= sizeof r->unknown_fields - len) break;
        len += (size_t)n;
    }
}

/* ---- pieces ------------------------------------------------------------------ */

static bool parse_stop(pctx *c, openai_request *r) {
    json_t *v = json_object_get(c->obj, "stop");
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) {
        r->stop[0] = strdup(json_string_value(v));
        r->num_stop = 1;
        return true;
    }
    if (!json_is_array(v)) return type_error(c, "stop", "a valid string or list of strings", "union_type", v);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return type_error(c, "stop", "a valid string", "string_type", s);
        if (r->num_stop == OPENAI_MAX_STOP)
            return openai_fail(c->e, 400, TYPE_VALUE, "stop", "at most %d stop strings are supported",
                               OPENAI_MAX_STOP);
        r->stop[r->num_stop++] = strdup(json_string_value(s));
    }
    return true;
}

static bool parse_int_list(pctx *c, const char *f, int32_t *out, int32_t *n, int32_t cap) {
    json_t *v = json_object_get(c->obj, f);
    *n = 0;
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v)) return type_error(c, f, "a valid list", "list_type", v);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x)) return type_error(c, f, "a valid integer", "int_type", x);
        if (*n == cap)
            return openai_fail(c->e, 400, TYPE_VALUE, f, "at most %d entries are supported in `%s`",
                               cap, f);
        json_int_t id = json_integer_value(x);
        if (id < INT32_MIN || id > INT32_MAX)
            return type_error(c, f, "a 32-bit integer", "int_range", x);
        out[(*n)++] = (int32_t)id;
    }
    return true;
}

static bool parse_logit_bias(pctx *c, openai_request *r) {
    json_t *v = json_object_get(c->obj, "logit_bias");
    if (!v || json_is_null(v)) return true;
    if (!json_is_object(v)) return type_error(c, "logit_bias", "a valid dictionary", "dict_type", v);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!json_is_number(x)) return type_error(c, "logit_bias", "a valid number", "float_type", x);
        char *end;
        errno = 0;
        long id = strtol(k, &end, 10);
        if (errno || end == k || *end || id < INT32_MIN || id > INT32_MAX)
            return openai_fail(c->e, 400, TYPE_VALUE, "logit_bias",
                               "invalid literal for int() with base 10: '%s'", k);
        if (r->num_logit_bias == VLLM_MAX_LOGIT_BIAS)
            return openai_fail(c->e, 400, TYPE_VALUE, "logit_bias",
                               "at most %d logit_bias entries are supported", VLLM_MAX_LOGIT_BIAS);
        double b = json_number_value(x);
        b = b < -100.0 ? -100.0 : b > 100.0 ? 100.0 : b; /* SamplingParams clamps */
        r->logit_bias_ids[r->num_logit_bias] = (int32_t)id;
        r->logit_bias_values[r->num_logit_bias++] = (float)b;
    }
    return true;
}

/* prompt: str | list[str] | list[int] | list[list[int]] */
static bool parse_prompt(pctx *c, openai_request *r) {
    json_t *v = json_object_get(c->obj, "prompt");
    static const char *shape = "a valid string, a list of strings, a list of token ids or a list "
                               "of lists of token ids";
    if (json_is_string(v)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
        r->num_prompts = 1;
        r->prompts[0].text_len = json_string_length(v);
        r->prompts[0].text = malloc(r->prompts[0].text_len + 1);
        memcpy(r->prompts[0].text, json_string_value(v), r->prompts[0].text_len + 1);
        return true;
    }
    if (!json_is_array(v)) return type_error(c, "prompt", shape, "union_type", v);
    size_t n = json_array_size(v);
    if (n == 0)
        return openai_fail(c->e, 400, TYPE_VALUE, "prompt", "please provide at least one prompt");
    json_t *first = json_array_get(v, 0);
    bool tokens = json_is_integer(first);
    r->prompts = calloc(tokens ? 1 : n, sizeof *r->prompts);
    if (!r->prompts) return openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
    if (tokens) { /* one prompt of token ids */
        r->num_prompts = 1;
        r->prompts[0].ids = malloc(n * sizeof(int32_t));
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_integer(x)) return type_error(c, "prompt", shape, "union_type", v);
            json_int_t id = json_integer_value(x);
            if (id < INT32_MIN || id > INT32_MAX)
                return type_error(c, "prompt", "a 32-bit token id", "int_range", x);
            r->prompts[0].ids[r->prompts[0].num_ids++] = (int32_t)id;
        }
        return true;
    }
    bool strings = json_is_string(first);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        openai_prompt *p = &r->prompts[r->num_prompts++];
        if (strings) {
            if (!json_is_string(x)) return type_error(c, "prompt", shape, "union_type", v);
            p->text_len = json_string_length(x);
            p->text = malloc(p->text_len + 1);
            memcpy(p->text, json_string_value(x), p->text_len + 1);
        } else {
            if (!json_is_array(x)) return type_error(c, "prompt", shape, "union_type", v);
            p->ids = malloc((json_array_size(x) + 1) * sizeof(int32_t));
            size_t j;
            json_t *y;
            json_array_foreach(x, j, y) {
                if (!json_is_integer(y)) return type_error(c, "prompt", shape, "union_type", v);
                json_int_t id = json_integer_value(y);
                if (id < INT32_MIN || id > INT32_MAX)
                    return type_error(c, "prompt", "a 32-bit token id", "int_range", y);
                p->ids[p->num_ids++] = (int32_t)id;
            }
        }
    }
    return true;
}

static bool parse_messages(pctx *c, openai_request *r) {
    json_t *v = json_object_get(c->obj, "messages");
    if (!v) {
        return openai_fail(c->e, 400, TYPE_VALIDATION, "messages",
                           "1 validation error for %s\nmessages\n  Field required [type=missing, "
                           "input_type=dict]",
                           c->model);
    }
    if (!json_is_array(v)) return type_error(c, "messages", "a valid list", "list_type", v);
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        char field[48];
        snprintf(field, sizeof field, "messages.%zu", i);
        if (!json_is_object(m)) return type_error(c, field, "a valid dictionary", "dict_type", m);
        json_t *role = json_object_get(m, "role");
        snprintf(field, sizeof field, "messages.%zu.role", i);
        if (!role) {
            return openai_fail(c->e, 400, TYPE_VALIDATION, field,
                               "1 validation error for %s\n%s\n  Field required [type=missing]",
                               c->model, field);
        }
        if (!json_is_string(role)) return type_error(c, field, "a valid string", "string_type", role);
        json_t *content = json_object_get(m, "content");
        snprintf(field, sizeof field, "messages.%zu.content", i);
        if (content && !json_is_null(content) && !json_is_string(content)) {
            if (!json_is_array(content))
                return type_error(c, field, "a valid string or a list of content parts",
                                  "union_type", content);
            size_t j;
            json_t *part;
            json_array_foreach(content, j, part) {
                json_t *type = json_object_get(part, "type");
                if (!json_is_object(part) || !json_is_string(type))
                    return type_error(c, field, "a content part with a `type`", "union_type", part);
                const char *t = json_string_value(type);
                if (!strcmp(t, "text") || !strcmp(t, "input_text")) {
                    if (!json_is_string(json_object_get(part, "text")))
                        return type_error(c, field, "a text part with a string `text`",
                                          "string_type", part);
                } else {
                    return openai_fail(c->e, 400, TYPE_VALUE, field,
                                       "Content part type '%s' is not supported: this model "
                                       "takes text only",
                                       t);
                }
            }
        }
    }
    r->messages = v;
    return true;
}

static bool parse_tools(pctx *c, openai_request *r) {
    json_t *tools = json_object_get(c->obj, "tools");
    json_t *choice = json_object_get(c->obj, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return type_error(c, "tools", "a valid list", "list_type", tools);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *fn = json_object_get(t, "function");
            json_t *type = json_object_get(t, "type");
            if (!json_is_object(t) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return type_error(c, "tools", "a function tool {type, function: {name, ...}}",
                                  "model_type", t);
            if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
                return type_error(c, "tools", "'function'", "literal_error", type);
        }
        r->tools = tools;
    }
    /* check_tool_usage */
    const char *tc = NULL;
    if (!choice) {
        tc = r->tools && json_array_size(r->tools) ? "auto" : "none";
    } else if (json_is_null(choice)) {
        tc = "none"; /* explicitly null: no validation in vLLM either */
    } else if (json_is_string(choice)) {
        tc = json_string_value(choice);
    } else if (!json_is_object(choice)) {
        return type_error(c, "tool_choice", "'none', 'auto', 'required' or a named tool",
                          "union_type", choice);
    }
    if (tc && !strcmp(tc, "none")) {
        r->tool_choice = strdup("none");
        return true;
    }
    if (!r->tools) return value_error(c, "tool_choice", "When using `tool_choice`, `tools` must be set.");
    if (tc && strcmp(tc, "auto") && strcmp(tc, "required"))
        return value_error(c, "tool_choice",
                           "Invalid value for `tool_choice`: %s! Only named tools, \"none\", "
                           "\"auto\" or \"required\" are supported.",
                           tc);
    if (tc && !strcmp(tc, "required") && json_array_size(r->tools) == 0) {
        r->tools = NULL;
        r->tool_choice = strdup("none");
        return true;
    }
    if (!tc) {
        static const char usage[] =
            "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
        json_t *fn = json_object_get(choice, "function");
        if (!json_is_object(fn))
            return value_error(c, "tool_choice", "Invalid value for `function`: `%s` in `tool_choice`! %s",
                               fn ? "..." : "None", usage);
        json_t *name = json_object_get(fn, "name");
        if (!name)
            return value_error(c, "tool_choice", "Expected field `name` in `function` in `tool_choice`! %s",
                               usage);
        if (!json_is_string(name) || !json_string_length(name))
            return value_error(c, "tool_choice", "Invalid `name` in `function`: `%s` in `tool_choice`! %s",
                               json_is_string(name) ? "" : "...", usage);
        bool found = false;
        size_t i;
        json_t *t;
        json_array_foreach(r->tools, i, t) {
            json_t *tn = json_object_get(json_object_get(t, "function"), "name");
            if (json_is_string(tn) && !strcmp(json_string_value(tn), json_string_value(name))) found = true;
        }
        if (!found)
            return value_error(c, "tool_choice",
                               "The tool specified in `tool_choice` does not match any of the "
                               "specified `tools`");
        tc = "named";
        r->tool_choice_name = strdup(json_string_value(name));
    }
    r->tool_choice = strdup(tc);
    return true;
}

/* ---- structured outputs ------------------------------------------------------- */

/* One candidate constraint found in the request. */
typedef struct so_kind {
    const char *field;           /* where it came from, e.g. "structured_outputs.regex" */
    vllm_structured_kind kind;
    const json_t *value;         /* the JSON value (schema object or string, regex, list, ...) */
} so_kind;

/* A constraint's text: strings as they are, a schema object serialised,
 * a choice list checked (strings only) and serialised. */
static bool so_text(pctx *c, const so_kind *k, char **out) {
    *out = NULL;
    const json_t *v = k->value;
    switch (k->kind) {
    case VLLM_STRUCTURED_JSON:
        if (json_is_string(v)) break;
        if (!json_is_object(v) && !json_is_boolean(v))
            return type_error(c, k->field, "a valid dictionary or string", "dict_type", v);
        *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        return *out || openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
    case VLLM_STRUCTURED_CHOICE: {
        if (!json_is_array(v)) return type_error(c, k->field, "a valid list", "list_type", v);
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) if (!json_is_string(x))
            return type_error(c, k->field, "a valid string", "string_type", x);
        *out = json_dumps(v, JSON_COMPACT);
        return *out || openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
    }
    case VLLM_STRUCTURED_JSON_OBJECT: return true;
    default: break;
    }
    if (!json_is_string(v)) return type_error(c, k->field, "a valid string", "string_type", v);
    *out = strndup(json_string_value(v), json_string_length(v));
    return *out || openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
}

/* "You can only use one kind ..." with the kinds given, as vLLM's
 * StructuredOutputsParams.__post_init__ says it (its __dict__ rendered as
 * the JSON of the fields that were set). */
static bool so_too_many(pctx *c, const so_kind *kinds, int n) {
    json_t *d = json_object();
    for (int i = 0; i < n; i++) {
        const char *dot = strrchr(kinds[i].field, '.');
        const char *name = dot ? dot + 1 : kinds[i].field;
        if (!strncmp(name, "guided_", 7)) name += 7;
        json_object_set(d, name, (json_t *)kinds[i].value);
    }
    char *repr = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    if (repr && strlen(repr) > 300) strcpy(repr + 297, "...");
    bool r = value_error(c, "structured_outputs",
                         "You can only use one kind of structured outputs constraint but multiple are "
                         "specified: %s", repr ? repr : "{}");
    free(repr);
    return r;
}

/* vLLM 0.11's to_sampling_params: structured_outputs {json, regex, choice,
 * grammar, json_object, structural_tag, disable_any_whitespace,
 * whitespace_pattern}; when it is absent, the deprecated guided_json /
 * guided_regex / guided_choice / guided_grammar / guided_whitespace_pattern
 * (guided_decoding_backend is accepted and ignored: there is one backend);
 * then response_format json_object / json_schema{name, schema, strict} and
 * chat's structural_tag add theirs. More than one kind in all is a 400. */
static bool parse_structured(pctx *c, openai_request *r) {
    json_t *o = c->obj;
    so_kind kinds[12];
    int n = 0;
    bool daw = false;
    const char *ws = NULL;
    json_t *so = json_object_get(o, "structured_outputs");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return type_error(c, "structured_outputs", "a valid dictionary", "dict_type", so);
        static const struct { const char *name; vllm_structured_kind kind; } fields[] = {
            {"json", VLLM_STRUCTURED_JSON},       {"regex", VLLM_STRUCTURED_REGEX},
            {"choice", VLLM_STRUCTURED_CHOICE},   {"grammar", VLLM_STRUCTURED_GRAMMAR},
            {"json_object", VLLM_STRUCTURED_JSON_OBJECT}, {"structural_tag", VLLM_STRUCTURED_STRUCTURAL_TAG}};
        static const char *const full[] = {"structured_outputs.json", "structured_outputs.regex",
                                           "structured_outputs.choice", "structured_outputs.grammar",
                                           "structured_outputs.json_object", "structured_outputs.structural_tag"};
        for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
            if (is_set(so, fields[i].name))
                kinds[n++] = (so_kind){full[i], fields[i].kind, json_object_get(so, fields[i].name)};
        pctx sc = {so, "StructuredOutputsParams", c->e};
        if (!get_bool(&sc, "disable_any_whitespace", true, &daw)) return false;
        if (!get_str(&sc, "whitespace_pattern", true, &ws)) return false;
        for (int i = 0; i < n; i++)
            if (kinds[i].kind == VLLM_STRUCTURED_JSON_OBJECT) {
                if (!json_is_boolean(kinds[i].value))
                    return type_error(c, kinds[i].field, "a valid boolean", "bool_type", kinds[i].value);
            }
    } else {
        static const struct { const char *name; vllm_structured_kind kind; } fields[] = {
            {"guided_json", VLLM_STRUCTURED_JSON},
            {"guided_regex", VLLM_STRUCTURED_REGEX},
            {"guided_choice", VLLM_STRUCTURED_CHOICE},
            {"guided_grammar", VLLM_STRUCTURED_GRAMMAR}};
        for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
            if (is_set(o, fields[i].name))
                kinds[n++] = (so_kind){fields[i].name, fields[i].kind, json_object_get(o, fields[i].name)};
        if (!get_str(c, "guided_whitespace_pattern", true, &ws)) return false;
        const char *backend;
        if (!get_str(c, "guided_decoding_backend", true, &backend)) return false;
    }
    json_t *rf = json_object_get(o, "response_format");
    if (rf && !json_is_null(rf)) {
        json_t *t = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(t))
            return type_error(c, "response_format", "a valid response format {type, ...}", "model_type", rf);
        const char *type = json_string_value(t);
        if (!strcmp(type, "json_object")) {
            kinds[n++] = (so_kind){"response_format", VLLM_STRUCTURED_JSON_OBJECT, json_true()};
        } else if (!strcmp(type, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!js || json_is_null(js))
                return value_error(c, "response_format",
                                   "When response_format type is 'json_schema', the 'json_schema' field must "
                                   "be provided.");
            if (!json_is_object(js))
                return type_error(c, "response_format.json_schema", "a valid dictionary", "dict_type", js);
            pctx jc = {js, "JsonSchemaResponseFormat", c->e};
            const char *name;
            bool strict = false;
            if (!get_str(&jc, "name", false, &name) || !get_bool(&jc, "strict", true, &strict)) return false;
            json_t *schema = json_object_get(js, "schema");
            if (!schema || json_is_null(schema))
                return openai_fail(c->e, 400, TYPE_VALUE, "response_format",
                                   "response_format.json_schema.schema is required: the JSON schema the "
                                   "output must follow.");
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return type_error(c, "response_format.json_schema.schema", "a valid dictionary", "dict_type", schema);
            kinds[n++] = (so_kind){"response_format.json_schema.schema", VLLM_STRUCTURED_JSON, schema};
        } else if (!strcmp(type, "structural_tag")) {
            kinds[n++] = (so_kind){"response_format", VLLM_STRUCTURED_STRUCTURAL_TAG, rf};
        } else if (strcmp(type, "text")) {
            return openai_fail(c->e, 400, TYPE_VALIDATION, "response_format",
                               "1 validation error for %s\nresponse_format\n  Input tag '%s' found using 'type' "
                               "does not match any of the expected tags: 'text', 'json_object', 'json_schema', "
                               "'structural_tag' [type=union_tag_invalid, input_type=dict]",
                               c->model, type);
        }
    }
    if (r->chat && is_set(o, "structural_tag"))
        kinds[n++] = (so_kind){"structural_tag", VLLM_STRUCTURED_STRUCTURAL_TAG, json_object_get(o, "structural_tag")};
    /* a json_object: false alone constrains nothing, but still counts as a kind */
    if (n > 1) return so_too_many(c, kinds, n);
    /* no kind: the whitespace options are kept for a constraint tools may add */
    r->structured.disable_any_whitespace = daw;
    if (ws && !(r->structured.whitespace_pattern = strdup(ws)))
        return openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
    if (n == 0 || (kinds[0].kind == VLLM_STRUCTURED_JSON_OBJECT && !json_is_true(kinds[0].value))) return true;
    char *text = NULL;
    if (kinds[0].kind == VLLM_STRUCTURED_STRUCTURAL_TAG) {
        if (!json_is_string(kinds[0].value) && !json_is_object(kinds[0].value))
            return type_error(c, kinds[0].field, "a valid string", "string_type", kinds[0].value);
        if (!(text = json_is_string(kinds[0].value) ? strdup(json_string_value(kinds[0].value))
                                                     : json_dumps(kinds[0].value, JSON_COMPACT)))
            return openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
    } else if (!so_text(c, &kinds[0], &text)) {
        return false;
    }
    r->structured.kind = kinds[0].kind;
    r->structured.text = text;
    r->structured.len = text ? strlen(text) : 0;
    r->structured_field = kinds[0].field;
    return true;
}

bool openai_structured_from_json(json_t *obj, bool chat, vllm_structured_outputs *out, const char **field,
                                 openai_error *e) {
    openai_request r = {.chat = chat};
    pctx c = {obj, chat ? "ChatCompletionRequest" : "CompletionRequest", e};
    json_t *sof = json_object_get(obj, "structured_outputs");
    if (json_is_object(sof) && is_set(sof, "json") + is_set(sof, "regex") + is_set(sof, "choice") > 1)
        return value_error(&c, "structured_outputs",
                           "You can only use one kind of constraints for structured outputs ('json', "
                           "'regex' or 'choice').");
    if (!parse_structured(&c, &r)) {
        free((char *)r.structured.text);
        free((char *)r.structured.whitespace_pattern);
        return false;
    }
    *out = r.structured;
    if (field) *field = r.structured_field;
    return true;
}

/* Fields vLLM accepts that this engine cannot honour: refused, not ignored,
 * so nobody gets silently different output. */
static bool refuse_unsupported(pctx *c, openai_request *r) {
    json_t *o = c->obj;
    int64_t best_of;
    bool set;
    if (!get_int(c, "best_of", true, &best_of, &set)) return false;
    if (set && best_of > 1)
        return openai_fail(c->e, 400, TYPE_VALUE, "best_of", "vLLM V1 does not yet support best_of.");
    bool beam = false;
    if (!get_bool(c, "use_beam_search", false, &beam)) return false;
    if (beam && r->chat)
        return openai_fail(c->e, 400, TYPE_VALUE, "use_beam_search",
                           "Beam search is supported in /v1/completions only by this server.");
    r->use_beam_search = beam;
    r->length_penalty = 1.0;
    if (!get_float(c, "length_penalty", true, &r->length_penalty, NULL)) return false;
    if (is_set(o, "logits_processors"))
        return openai_fail(c->e, 400, TYPE_VALUE, "logits_processors",
                           "The `logits_processors` argument is not supported by this server. See "
                           "--logits-processor-pattern engine argument for more information.");
    if (!r->chat) {
        if (is_set(o, "suffix"))
            return openai_fail(c->e, 400, TYPE_VALUE, "suffix", "suffix is not currently supported");
        if (is_set(o, "prompt_embeds"))
            return openai_fail(c->e, 400, TYPE_VALUE, "prompt_embeds",
                               "You must set `--enable-prompt-embeds` to input `prompt_embeds`.");
    }
    return true;
}

static bool parse_fields(pctx *c, openai_request *r) {
    json_t *o = c->obj;
    bool set;
    const char *s;

    /* model validators first, as pydantic runs mode="before" validators */
    if (truthy(json_object_get(o, "stream_options")) && !truthy(json_object_get(o, "stream")))
        return value_error(c, "stream_options", "Stream options can only be defined when `stream=True`.");
    json_t *pl = json_object_get(o, "prompt_logprobs");
    if (json_is_number(pl)) {
        if (truthy(json_object_get(o, "stream")) && json_number_value(pl) > 0)
            return value_error(c, "prompt_logprobs",
                               "`prompt_logprobs` are not available when `stream=True`.");
        if (json_number_value(pl) < 0)
            return value_error(c, "prompt_logprobs", "`prompt_logprobs` must be a positive value.");
    }
    if (r->chat) {
        json_t *tl = json_object_get(o, "top_logprobs");
        if (json_is_number(tl)) {
            if (json_number_value(tl) < 0)
                return value_error(c, "top_logprobs", "`top_logprobs` must be a positive value.");
            if (json_number_value(tl) > 0 && !truthy(json_object_get(o, "logprobs")))
                return value_error(c, "top_logprobs",
                                   "when using `top_logprobs`, `logprobs` must be set to true.");
        }
        if (truthy(json_object_get(o, "continue_final_message")) &&
            truthy(json_object_get(o, "add_generation_prompt")))
            return value_error(c, "continue_final_message",
                               "Cannot set both `continue_final_message` and "
                               "`add_generation_prompt` to True.");
    } else {
        json_t *lp = json_object_get(o, "logprobs");
        if (json_is_number(lp) && json_number_value(lp) < 0)
            return value_error(c, "logprobs", "`logprobs` must be a positive value.");
        if (!is_set(o, "prompt") && !is_set(o, "prompt_embeds"))
            return value_error(c, "prompt", "At least one of `prompt` or `prompt_embeds` must be set.");
    }
    json_t *salt = json_object_get(o, "cache_salt");
    if (salt && !json_is_null(salt) && (!json_is_string(salt) || !json_string_length(salt)))
        return value_error(c, "cache_salt",
                           "Parameter 'cache_salt' must be a non-empty string if provided.");
    json_t *sof = json_object_get(o, "structured_outputs");
    if (json_is_object(sof) && is_set(sof, "json") + is_set(sof, "regex") + is_set(sof, "choice") > 1)
        return value_error(c, "structured_outputs",
                           "You can only use one kind of constraints for structured outputs ('json', "
                           "'regex' or 'choice').");
    if (r->chat) {
        if (!parse_messages(c, r) || !parse_tools(c, r)) return false;
    }

    /* field types and values */
    if (!get_str(c, "model", true, &s)) return false;
    if (s) r->model = strdup(s);
    if (!get_bool(c, "stream", true, &r->stream)) return false;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return type_error(c, "stream_options", "a valid dictionary", "dict_type", so);
        pctx sc = {so, "StreamOptions", c->e};
        r->include_usage = true;
        if (!get_bool(&sc, "include_usage", true, &r->include_usage)) return false;
        if (!get_bool(&sc, "continuous_usage_stats", true, &r->continuous_usage_stats)) return false;
    }
    if (!get_bool(c, "echo", !r->chat, &r->echo)) return false;
    if (!get_i32(c, "n", r->chat, &r->n, NULL)) return false;
    if (!get_float(c, "frequency_penalty", true, &r->frequency_penalty, NULL)) return false;
    if (!get_float(c, "presence_penalty", true, &r->presence_penalty, NULL)) return false;
    if (!get_float(c, "temperature", true, &r->temperature, &r->has_temperature)) return false;
    if (!get_float(c, "top_p", true, &r->top_p, &r->has_top_p)) return false;
    if (!get_float(c, "min_p", true, &r->min_p, &r->has_min_p)) return false;
    if (!get_float(c, "repetition_penalty", true, &r->repetition_penalty, &r->has_repetition_penalty))
        return false;
    if (!get_i32(c, "top_k", true, &r->top_k, &r->has_top_k)) return false;
    if (!get_int(c, "seed", true, &r->seed, &r->has_seed)) return false;
    if (!parse_stop(c, r)) return false;
    if (!parse_int_list(c, "stop_token_ids", r->stop_token_ids, &r->num_stop_token_ids,
                        VLLM_MAX_STOP_TOKEN_IDS))
        return false;
    if (!get_bool(c, "include_stop_str_in_output", false, &r->include_stop_str_in_output)) return false;
    if (!get_bool(c, "ignore_eos", false, &r->ignore_eos)) return false;
    if (!get_bool(c, "skip_special_tokens", false, &r->skip_special_tokens)) return false;
    if (!get_bool(c, "spaces_between_special_tokens", false, &r->spaces_between_special_tokens))
        return false;
    if (!get_i32(c, "min_tokens", false, &r->min_tokens, NULL)) return false;
    if (!get_i32(c, "priority", false, &r->priority, NULL)) return false;
    if (!get_bool(c, "add_special_tokens", false, &r->add_special_tokens)) return false;
    if (!get_bool(c, "return_token_ids", true, &r->return_token_ids)) return false;
    if (!get_bool(c, "return_tokens_as_token_ids", true, &r->return_tokens_as_token_ids)) return false;
    if (!get_i32(c, "prompt_logprobs", true, &r->prompt_logprobs, &set)) return false;
    if (!set) r->prompt_logprobs = -1;
    if (!get_str(c, "cache_salt", true, &s)) return false;
    if (s) r->cache_salt = strdup(s);
    if (!get_str(c, "request_id", false, &s)) return false;
    if (s) r->request_id = strdup(s);
    if (!parse_logit_bias(c, r)) return false;
    json_t *kvt = json_object_get(o, "kv_transfer_params");
    if (kvt && !json_is_null(kvt)) {
        if (!json_is_object(kvt)) return type_error(c, "kv_transfer_params", "a valid dictionary", "dict_type", kvt);
        r->kv_transfer_params = kvt;
    }
    int32_t truncate = 0;
    if (!get_i32(c, "truncate_prompt_tokens", true, &truncate, &set)) return false;
    if (set && (truncate < -1 || truncate == 0)) /* Field(ge=-1); 0 would leave no prompt */
        return openai_fail(c->e, 400, TYPE_VALIDATION, "truncate_prompt_tokens",
                           "1 validation error for %s\ntruncate_prompt_tokens\n  Input should be "
                           "greater than or equal to %d [type=greater_than_equal, input_value=%d, "
                           "input_type=int]",
                           c->model, truncate == 0 ? 1 : -1, truncate);
    r->truncate_prompt_tokens = set ? truncate : 0;
    json_t *allowed = json_object_get(o, "allowed_token_ids");
    if (allowed && !json_is_null(allowed)) {
        if (!json_is_array(allowed)) return type_error(c, "allowed_token_ids", "a valid list", "list_type", allowed);
        size_t na = json_array_size(allowed);
        r->has_allowed_token_ids = true;
        r->allowed_token_ids = malloc((na ? na : 1) * sizeof *r->allowed_token_ids);
        if (!r->allowed_token_ids) return openai_fail(c->e, 500, "Internal Server Error", NULL, "out of memory");
        size_t i;
        json_t *x;
        json_array_foreach(allowed, i, x) {
            if (!json_is_integer(x)) return type_error(c, "allowed_token_ids", "a valid integer", "int_type", x);
            json_int_t id = json_integer_value(x);
            if (id < INT32_MIN || id > INT32_MAX)
                return type_error(c, "allowed_token_ids", "a 32-bit integer", "int_range", x);
            r->allowed_token_ids[r->num_allowed_token_ids++] = (int32_t)id;
        }
    }
    json_t *bad = json_object_get(o, "bad_words");
    if (bad && !json_is_null(bad)) {
        if (!json_is_array(bad)) return type_error(c, "bad_words", "a valid list", "list_type", bad);
        size_t i;
        json_t *x;
        json_array_foreach(bad, i, x)
            if (!json_is_string(x)) return type_error(c, "bad_words", "a valid string", "string_type", x);
        r->bad_words = bad;
    }

    if (r->chat) {
        bool lp = false;
        int32_t top = 0;
        if (!get_bool(c, "logprobs", true, &lp)) return false;
        if (!get_i32(c, "top_logprobs", true, &top, NULL)) return false;
        r->logprobs = lp ? top : -1;
        int64_t mct, mt;
        bool mct_set, mt_set;
        if (!get_int(c, "max_completion_tokens", true, &mct, &mct_set)) return false;
        if (!get_int(c, "max_tokens", true, &mt, &mt_set)) return false;
        /* `max_completion_tokens or max_tokens`: Python's `or` skips a 0 */
        if (mct_set && mct != 0) r->max_tokens = mct, r->has_max_tokens = true;
        else if (mt_set) r->max_tokens = mt, r->has_max_tokens = true;
        else if (mct_set) r->max_tokens = mct, r->has_max_tokens = true;
        if (!get_bool(c, "add_generation_prompt", false, &r->add_generation_prompt)) return false;
        if (!get_bool(c, "continue_final_message", false, &r->continue_final_message)) return false;
        if (!get_str(c, "chat_template", true, &r->chat_template)) return false;
        json_t *kw = json_object_get(o, "chat_template_kwargs");
        if (kw && !json_is_null(kw)) {
            if (!json_is_object(kw))
                return type_error(c, "chat_template_kwargs", "a valid dictionary", "dict_type", kw);
            r->chat_template_kwargs = kw;
        }
        json_t *docs = json_object_get(o, "documents");
        if (docs && !json_is_null(docs)) {
            if (!json_is_array(docs)) return type_error(c, "documents", "a valid list", "list_type", docs);
            r->documents = docs;
        }
    } else {
        int32_t lp = -1;
        if (!get_i32(c, "logprobs", true, &lp, &set)) return false;
        r->logprobs = set ? lp : -1;
        int64_t mt;
        if (!get_int(c, "max_tokens", true, &mt, &set)) return false;
        if (set) r->max_tokens = mt;
        else if (json_object_get(o, "max_tokens")) r->has_max_tokens = false; /* explicit null */
        if (set) r->has_max_tokens = true;
        if (!parse_prompt(c, r)) return false;
    }
    if (!parse_structured(c, r)) return false;
    return refuse_unsupported(c, r);
}

bool openai_request_parse(const char *body, size_t len, bool chat, openai_request *r,
                          openai_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->chat = chat;
    /* defaults (protocol.py) */
    r->n = 1;
    r->skip_special_tokens = true;
    r->spaces_between_special_tokens = true;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    r->add_special_tokens = !chat;
    r->add_generation_prompt = true;
    r->has_max_tokens = !chat;
    r->max_tokens = chat ? 0 : 16;
    const char *model = chat ? "ChatCompletionRequest" : "CompletionRequest";
    json_error_t jerr;
    r->body = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!r->body) {
        openai_fail(e, 400, TYPE_VALIDATION, NULL,
                    "1 validation error for %s\n  JSON decode error: %s (line %d, column %d) "
                    "[type=json_invalid]",
                    model, jerr.text, jerr.line, jerr.column);
        openai_request_free(r);
        return false;
    }
    if (!json_is_object(r->body)) {
        pctx c = {r->body, model, e};
        type_error(&c, "body", "a valid dictionary or object to extract fields from",
                   "model_attributes_type", r->body);
        openai_request_free(r);
        return false;
    }
    pctx c = {r->body, model, e};
    if (!parse_fields(&c, r)) {
        openai_request_free(r);
        return false;
    }
    note_unknown_fields(r);
    return true;
}

void openai_request_free(openai_request *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->num_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int32_t i = 0; i < r->num_stop; i++) free(r->stop[i]);
    free(r->model);
    free(r->request_id);
    free(r->cache_salt);
    free(r->tool_choice);
    free(r->tool_choice_name);
    free((char *)r->structured.text);
    free((char *)r->structured.whitespace_pattern);
    free(r->allowed_token_ids);
    free(r->bad_words_ids);
    free(r->bad_words_lens);
    json_decref(r->body);
    memset(r, 0, sizeof *r);
}

/* ---- generation config ------------------------------------------------------- */

void openai_defaults_from_sampling(const vllm_sampling_params *sp, openai_defaults *d) {
    vllm_sampling_params base;
    vllm_sampling_params_init(&base);
    memset(d, 0, sizeof *d);
    d->has_temperature = d->has_top_p = d->has_top_k = d->has_min_p = true;
    d->has_repetition_penalty = true;
    d->temperature = sp->temperature;
    d->top_p = sp->top_p;
    d->top_k = sp->top_k;
    d->min_p = sp->min_p;
    d->repetition_penalty = sp->repetition_penalty;
    /* max_new_tokens shows as a max_tokens other than SamplingParams' 16 */
    d->has_max_tokens = sp->max_tokens > 0 && sp->max_tokens != base.max_tokens;
    d->max_tokens = sp->max_tokens;
}

/* ---- to SamplingParams ------------------------------------------------------- */

bool openai_request_sampling_params(const openai_request *r, const openai_defaults *d,
                                    int32_t max_model_len, int32_t prompt_len,
                                    int32_t max_logprobs, vllm_sampling_params *sp,
                                    openai_error *e) {
    /* the renderer's and _validate_input's context-window checks */
    bool too_long = prompt_len > max_model_len || (!r->has_max_tokens && prompt_len >= max_model_len);
    if (too_long)
        return openai_fail(e, 400, TYPE_VALUE, NULL,
                           "This model's maximum context length is %d tokens. However, your "
                           "request has %d input tokens. Please reduce the length of the input "
                           "messages.",
                           max_model_len, prompt_len);
    if (r->has_max_tokens && r->max_tokens > (int64_t)max_model_len - prompt_len)
        return openai_fail(e, 400, TYPE_VALUE, r->chat ? "max_completion_tokens" : "max_tokens",
                           "'max_tokens' or 'max_completion_tokens' is too large: %lld. This "
                           "model's maximum context length is %d tokens and your request has %d "
                           "input tokens (%lld > %d - %d).",
                           (long long)r->max_tokens, max_model_len, prompt_len,
                           (long long)r->max_tokens, max_model_len, prompt_len);

    vllm_sampling_params_init(sp);
    /* get_max_tokens: min of what was asked, what fits, the model's default */
    int64_t max_tokens = max_model_len - prompt_len;
    if (r->has_max_tokens && r->max_tokens < max_tokens) max_tokens = r->max_tokens;
    if (d && d->has_max_tokens && d->max_tokens < max_tokens) max_tokens = d->max_tokens;
    if (!r->chat && r->echo && r->has_max_tokens && r->max_tokens == 0) max_tokens = 1;
    /* SamplingParams' -1 ("up to max_model_len") is internal; from a request it
     * is an error, as in vLLM */
    if (max_tokens < 1)
        return openai_fail(e, 400, TYPE_VALUE, r->chat ? "max_completion_tokens" : "max_tokens",
                           "max_tokens must be at least 1, got %lld.", (long long)max_tokens);

    sp->n = r->n;
    sp->temperature = (float)(r->has_temperature ? r->temperature
                              : d && d->has_temperature ? d->temperature : 1.0);
    sp->top_p = (float)(r->has_top_p ? r->top_p : d && d->has_top_p ? d->top_p : 1.0);
    sp->top_k = r->has_top_k ? r->top_k : d && d->has_top_k ? d->top_k : 0;
    sp->min_p = (float)(r->has_min_p ? r->min_p : d && d->has_min_p ? d->min_p : 0.0);
    sp->repetition_penalty = (float)(r->has_repetition_penalty ? r->repetition_penalty
                                     : d && d->has_repetition_penalty ? d->repetition_penalty
                                                                       : 1.0);
    sp->presence_penalty = (float)r->presence_penalty;
    sp->frequency_penalty = (float)r->frequency_penalty;
    sp->has_seed = r->has_seed;
    sp->seed = (uint64_t)r->seed;
    sp->min_tokens = r->min_tokens;
    sp->ignore_eos = r->ignore_eos;
    sp->logprobs = r->logprobs;
    /* CompletionRequest.to_sampling_params: echo asks for the prompt's logprobs */
    sp->prompt_logprobs = r->prompt_logprobs >= 0 ? r->prompt_logprobs
                          : !r->chat && r->echo && r->logprobs >= 0 ? r->logprobs : -1;
    sp->num_stop_token_ids = r->num_stop_token_ids;
    memcpy(sp->stop_token_ids, r->stop_token_ids, sizeof r->stop_token_ids);
    sp->allowed_token_ids = r->allowed_token_ids;
    sp->num_allowed_token_ids = r->num_allowed_token_ids;
    sp->bad_words_ids = r->bad_words_ids;
    sp->bad_words_lens = r->bad_words_lens;
    sp->num_bad_words = r->num_bad_words;
    sp->num_logit_bias = r->num_logit_bias;
    memcpy(sp->logit_bias_ids, r->logit_bias_ids, sizeof r->logit_bias_ids);
    memcpy(sp->logit_bias_values, r->logit_bias_values, sizeof r->logit_bias_values);

    /* SamplingParams._verify_args (src/sample/sampling_params.c has its words) */
    sp->max_tokens = max_tokens > INT32_MAX ? INT32_MAX : max_tokens < INT32_MIN ? INT32_MIN
                                                                             : (int32_t)max_tokens;
    if (vllm_sampling_params_validate(sp) != VLLM_OK) {
        const char *msg = vllm_errmsg();
        size_t flen = strcspn(msg, " :");
        char field[64];
        snprintf(field, sizeof field, "%.*s", (int)flen, msg);
        if (!strcmp(field, "max_tokens") && r->chat) strcpy(field, "max_completion_tokens");
        if (!strncmp(msg, "Requested prompt", 16)) /* "Requested prompt logprobs of N, ..." */
            strcpy(field, "prompt_logprobs");
        else if (!strcmp(field, "Requested")) /* "Requested sample logprobs of N, ..." */
            strcpy(field, r->chat ? "top_logprobs" : "logprobs");
        return openai_fail(e, 400, TYPE_VALUE, field, "%s", msg);
    }
    for (int32_t i = 0; i < r->num_stop; i++)
        if (!r->stop[i][0])
            return openai_fail(e, 400, TYPE_VALUE, "stop", "stop cannot contain an empty string.");
    if (sp->logprobs > max_logprobs) /* V1 Processor._validate_logprobs, with --max-logprobs */
        return openai_fail(e, 400, TYPE_VALUE, r->chat ? "top_logprobs" : "logprobs",
                           "Requested sample logprobs of %d, which is greater than max allowed: %d",
                           sp->logprobs, max_logprobs);
    if (r->has_allowed_token_ids && r->num_allowed_token_ids == 0)
        return openai_fail(e, 400, TYPE_VALUE, "allowed_token_ids", "allowed_token_ids is not None and empty!");
    if (sp->prompt_logprobs > max_logprobs)
        return openai_fail(e, 400, TYPE_VALUE, "prompt_logprobs",
                           "Requested prompt logprobs of %d, which is greater than max allowed: %d",
                           sp->prompt_logprobs, max_logprobs);
    return true;
}

/* ---- response pieces ------------------------------------------------------------ */

void openai_random_id(const char *prefix, char *out, size_t cap) {
    unsigned char b[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) { /* no urandom: time and a counter still make it unique */
        static _Atomic unsigned long counter;
        unsigned long x = (unsigned long)time(NULL) ^ ((unsigned long)counter++ << 32);
        for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)i;
    }
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof b && n + 2 < cap; i++) n += (size_t)snprintf(out + n, cap - n, "%02x", b[i]);
}

json_t *openai_model_card(const char *id, const char *root, const char *parent, int32_t max_model_len,
                          int64_t now) {
    json_t *perm = json_object();
    char pid[64];
    openai_random_id("modelperm-", pid, sizeof pid);
    json_object_set_new(perm, "id", json_string(pid));
    json_object_set_new(perm, "object", json_string("model_permission"));
    json_object_set_new(perm, "created", json_integer(now));
    json_object_set_new(perm, "allow_create_engine", json_false());
    json_object_set_new(perm, "allow_sampling", json_true());
    json_object_set_new(perm, "allow_logprobs", json_true());
    json_object_set_new(perm, "allow_search_indices", json_false());
    json_object_set_new(perm, "allow_view", json_true());
    json_object_set_new(perm, "allow_fine_tuning", json_false());
    json_object_set_new(perm, "organization", json_string("*"));
    json_object_set_new(perm, "group", json_null());
    json_object_set_new(perm, "is_blocking", json_false());
    json_t *card = json_object();
    json_object_set_new(card, "id", json_string(id));
    json_object_set_new(card, "object", json_string("model"));
    json_object_set_new(card, "created", json_integer(now));
    json_object_set_new(card, "owned_by", json_string("vllm"));
    json_object_set_new(card, "root", json_string(root));
    json_object_set_new(card, "parent", parent ? json_string(parent) : json_null());
    json_object_set_new(card, "max_model_len", max_model_len > 0 ? json_integer(max_model_len) : json_null());
    json_t *perms = json_array();
    json_array_append_new(perms, perm);
    json_object_set_new(card, "permission", perms);
    return card;
}

json_t *openai_usage_json(int64_t prompt, int64_t completion, int64_t cached, bool omit_null) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt));
    json_object_set_new(u, "total_tokens", json_integer(prompt + completion));
    json_object_set_new(u, "completion_tokens", json_integer(completion));
    if (cached > 0) {
        json_t *det = json_object();
        json_object_set_new(det, "cached_tokens", json_integer(cached));
        json_object_set_new(u, "prompt_tokens_details", det);
    } else if (!omit_null) {
        json_object_set_new(u, "prompt_tokens_details", json_null());
    }
    return u;
}

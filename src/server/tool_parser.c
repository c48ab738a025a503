/*
 * tool_parser.c - tool-call and reasoning parsers over generated text
 * (vLLM 0.11's hermes / llama3_json tool parsers and qwen3 / deepseek_r1
 * reasoning parsers; their rules, none of their code).
 *
 * Whole outputs, as vLLM's extract_tool_calls:
 *   hermes      - no "<tool_call>" in the text: no calls, all content. Else
 *                 every "<tool_call>X</tool_call>" (and a last unclosed
 *                 "<tool_call>X" to the end) is a JSON object {name,
 *                 arguments}; arguments become json.dumps(arguments,
 *                 ensure_ascii=False); content is the text before the first
 *                 "<tool_call>" (null when empty). Any X that is not such an
 *                 object: no calls, the whole text is content.
 *   llama3_json - the first run of JSON objects (at most two levels of
 *                 braces, vLLM's regex) separated by ";" anywhere in the
 *                 text; each {name, arguments | parameters}; arguments are
 *                 json.dumps(..) with ensure_ascii (vLLM's default here);
 *                 content null. No such run or a bad object: all content.
 *   required    - tool_choice "required"'s constrained output, the array
 *                 [{name, parameters}] (serving_chat.c makes the schema).
 * Streaming (one state machine per choice, fed the detokenized deltas):
 *   hermes      - content passes until "<tool_call>", holding back a tail
 *                 that could be the start of the tag; each call is sent
 *                 when its "</tool_call>" arrives (or at the end), as two
 *                 deltas: {index, id, type, function: {name}}, then
 *                 {index, function: {arguments}}; text after the first call
 *                 is dropped as the whole-output rule drops it. A call that
 *                 does not parse is sent as content (the whole-output rule
 *                 would make everything content; what was streamed stays).
 *   llama3_json - vLLM streams calls only when the output starts with
 *                 "<|python_tag|>" or "{": such an output is held and
 *                 parsed whole at the end; any other streams as content.
 *   required    - each array item is sent (name, then arguments) as soon as
 *                 its closing brace arrives (a JSON scanner tracks depth);
 *                 after an item that is not a call none is sent, and an
 *                 output with no call sent ends as content. An output broken
 *                 after some calls went out is all content as a message.
 * So the deltas of a stream add up to the non-streamed message, except in
 * the error cases named above and a llama3_json output whose JSON starts
 * after some text (vLLM's stream gives content there too).
 *
 * Reasoning (vLLM's qwen3 / deepseek_r1 parsers):
 *   qwen3       - both "<think>" and "</think>" in the text: reasoning is
 *                 between (after the first <think>, up to the first
 *                 </think>), content after (null when empty); else all
 *                 content. Streamed: an output starting with "<think>"
 *                 streams reasoning until "</think>", then content; any
 *                 other output streams as content (vLLM's stream calls that
 *                 reasoning; we keep the stream equal to the message).
 *   deepseek_r1 - a leading "<think>" is dropped; reasoning up to the first
 *                 "</think>", content after; no "</think>": all reasoning,
 *                 content null (the template put <think> in the prompt).
 */
#include "server/tool_parser.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai_protocol.h"

/* ---- Python's json.dumps ------------------------------------------------------ */

static void py_string(strbuf *b, const char *s, size_t n, bool ascii) {
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            sb_add(b, esc, 2);
            i++;
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                                : c == '\f' ? "\\f" : NULL;
            if (named) sb_add(b, named, 2);
            else sb_add(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
            i++;
        } else if (c < 0x80 || !ascii) {
            sb_add(b, s + i, 1);
            i++;
        } else { /* a UTF-8 sequence (jansson validated it) as \uXXXX, pairs above the BMP */
            int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
            unsigned cp = c & (0x3f >> extra);
            for (int k = 1; k <= extra && i + (size_t)k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
            i += (size_t)extra + 1;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                sb_add(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                                                0xdc00 + (cp & 0x3ff)));
            } else {
                sb_add(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp));
            }
        }
    }
    sb_add(b, "\"", 1);
}

/* Python's float repr: the shortest digits that round-trip, fixed notation
 * for exponents -4..15 (with ".0" when integral), else d.ddde+XX. */
static void py_float(strbuf *b, double x) {
    char t[64];
    if (isnan(x)) { sb_add(b, "NaN", 3); return; }
    if (isinf(x)) { sb_add(b, x > 0 ? "Infinity" : "-Infinity", x > 0 ? 8 : 9); return; }
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, x);
        if (strtod(t, NULL) == x) break;
    }
    /* t = [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, exp10;
    const char *q = t;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) sb_add(b, "-", 1);
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            sb_add(b, "0.", 2);
            for (int k = 0; k < -exp10 - 1; k++) sb_add(b, "0", 1);
            sb_add(b, digits, (size_t)nd);
        } else {
            for (int k = 0; k <= exp10; k++) sb_add(b, k < nd ? &digits[k] : "0", 1);
            sb_add(b, ".", 1);
            if (nd > exp10 + 1) sb_add(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else sb_add(b, "0", 1);
        }
    } else {
        sb_add(b, digits, 1);
        if (nd > 1) {
            sb_add(b, ".", 1);
            sb_add(b, digits + 1, (size_t)nd - 1);
        }
        sb_add(b, t, (size_t)snprintf(t, sizeof t, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10)));
    }
}

static void py_dumps(strbuf *b, const json_t *v, bool ascii) {
    char t[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        sb_add(b, "{", 1);
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if (!first) sb_add(b, ", ", 2);
            first = false;
            py_string(b, k, strlen(k), ascii);
            sb_add(b, ": ", 2);
            py_dumps(b, x, ascii);
        }
        sb_add(b, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_add(b, ", ", 2);
            py_dumps(b, json_array_get(v, i), ascii);
        }
        sb_add(b, "]", 1);
        break;
    }
    case JSON_STRING: py_string(b, json_string_value(v), json_string_length(v), ascii); break;
    case JSON_INTEGER:
        sb_add(b, t, (size_t)snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v)));
        break;
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: sb_add(b, "true", 4); break;
    case JSON_FALSE: sb_add(b, "false", 5); break;
    default: sb_add(b, "null", 4); break;
    }
}

char *tool_parser_py_dumps(const json_t *v, bool ascii) {
    strbuf b = {0};
    py_dumps(&b, v, ascii);
    if (!b.s) return strdup("");
    return b.s;
}

/* ---- helpers ----------------------------------------------------------------- */

bool tool_parser_kind_from_name(const char *name, tool_parser_kind *out) {
    if (!strcmp(name, "hermes")) *out = TOOL_PARSER_HERMES;
    else if (!strcmp(name, "llama3_json") || !strcmp(name, "llama4_json")) *out = TOOL_PARSER_LLAMA3_JSON;
    else return false;
    return true;
}

static const char *find(const char *s, size_t n, const char *pat) {
    size_t pl = strlen(pat);
    for (size_t i = 0; i + pl <= n; i++)
        if (!memcmp(s + i, pat, pl)) return s + i;
    return NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag
 * (text that may still become the tag; held back while streaming). */
static size_t tag_prefix_tail(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static json_t *call_json(const char *name, const char *args) {
    char id[80];
    openai_random_id("chatcmpl-tool-", id, sizeof id);
    return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name,
                     "arguments", args);
}

/* One {name, <args key>} object in s[0..n) -> a call, or NULL. alt: a
 * second key accepted for the arguments (llama3's "parameters"). */
static json_t *parse_call(const char *s, size_t n, const char *key, const char *alt, bool ascii) {
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, key);
    if (!args && alt) args = json_object_get(o, alt);
    json_t *call = NULL;
    if (json_is_string(name) && args) {
        char *a = tool_parser_py_dumps(args, ascii);
        call = call_json(json_string_value(name), a);
        free(a);
    }
    json_decref(o);
    return call;
}

/* ---- whole outputs ------------------------------------------------------------- */

static json_t *extract_hermes(const char *text, size_t len, char **content) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *first = find(text, len, open);
    if (!first) return NULL;
    json_t *calls = json_array();
    const char *p = first, *end = text + len;
    while (p) {
        const char *body = p + strlen(open);
        const char *c = find(body, (size_t)(end - body), close);
        const char *body_end = c ? c : end;
        json_t *call = parse_call(body, (size_t)(body_end - body), "arguments", NULL, false);
        if (!call) {
            json_decref(calls);
            return NULL;
        }
        json_array_append_new(calls, call);
        if (!c) break;
        const char *after = c + strlen(close);
        p = find(after, (size_t)(end - after), open);
    }
    *content = first > text ? dup_n(text, (size_t)(first - text)) : NULL;
    return calls;
}

/* vLLM's llama3 regex {[^{}]*(?:{[^{}]*}[^{}]*)*}: an object with at most
 * one level of nested braces starting at s[0] == '{'; its length or 0. */
static size_t llama_object(const char *s, size_t n) {
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '{') {
            if (++depth > 2) return 0;
        } else if (s[i] == '}') {
            if (--depth == 0) return i + 1;
        }
    }
    return 0;
}

static json_t *extract_llama3(const char *text, size_t len) {
    for (size_t at = 0; at < len; at++) {
        if (text[at] != '{') continue;
        size_t m = llama_object(text + at, len - at);
        if (!m) continue;
        size_t end = at + m; /* then (\s*;\s*{...})* */
        for (;;) {
            size_t j = end;
            while (j < len && strchr(" \t\n\r\f\v", text[j])) j++;
            if (j >= len || text[j] != ';') break;
            j++;
            while (j < len && strchr(" \t\n\r\f\v", text[j])) j++;
            size_t m2 = j < len && text[j] == '{' ? llama_object(text + j, len - j) : 0;
            if (!m2) break;
            end = j + m2;
        }
        /* split on ';' as vLLM does (even inside strings) */
        json_t *calls = json_array();
        size_t s = at;
        while (s <= end) {
            const char *semi = memchr(text + s, ';', end - s);
            size_t e = semi ? (size_t)(semi - text) : end;
            size_t a = s, b = e;
            while (a < b && strchr(" \t\n\r\f\v", text[a])) a++;
            while (b > a && strchr(" \t\n\r\f\v", text[b - 1])) b--;
            if (b > a) {
                json_t *call = parse_call(text + a, b - a, "arguments", "parameters", true);
                if (!call) {
                    json_decref(calls);
                    return NULL;
                }
                json_array_append_new(calls, call);
            }
            s = e + 1;
        }
        return calls;
    }
    return NULL;
}

static json_t *extract_required(const char *text, size_t len) {
    json_error_t je;
    json_t *arr = json_loadb(text, len, 0, &je);
    if (!json_is_array(arr) || !json_array_size(arr)) { /* [] (the schema's minItems forbids it): content */
        json_decref(arr);
        return NULL;
    }
    json_t *calls = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        json_t *name = json_object_get(x, "name"), *params = json_object_get(x, "parameters");
        if (!json_is_string(name) || !params) {
            json_decref(calls);
            calls = NULL;
            break;
        }
        char *a = tool_parser_py_dumps(params, false);
        json_array_append_new(calls, call_json(json_string_value(name), a));
        free(a);
    }
    json_decref(arr);
    return calls;
}

json_t *tool_parser_extract(tool_parser_kind k, const char *text, size_t len, char **content) {
    *content = NULL;
    json_t *calls = k == TOOL_PARSER_HERMES ? extract_hermes(text, len, content)
                    : k == TOOL_PARSER_LLAMA3_JSON ? extract_llama3(text, len)
                    : k == TOOL_PARSER_REQUIRED ? extract_required(text, len)
                    : NULL;
    if (!calls) *content = dup_n(text, len);
    return calls;
}

/* ---- streaming ------------------------------------------------------------------ */

void tool_parser_stream_init(tool_parser_stream *s, tool_parser_kind k) {
    memset(s, 0, sizeof *s);
    s->kind = k;
}

void tool_parser_stream_free(tool_parser_stream *s) {
    free(s->pending.s);
    memset(&s->pending, 0, sizeof s->pending);
}

/* Sends one call as its two deltas. */
static void send_call(tool_parser_stream *s, json_t *call, json_t *deltas) {
    json_t *fn = json_object_get(call, "function");
    json_array_append_new(deltas, json_pack("{s:i, s:O, s:s, s:{s:O}}", "index", s->num_calls, "id",
                                            json_object_get(call, "id"), "type", "function", "function",
                                            "name", json_object_get(fn, "name")));
    json_array_append_new(deltas, json_pack("{s:i, s:{s:O}}", "index", s->num_calls, "function", "arguments",
                                            json_object_get(fn, "arguments")));
    s->num_calls++;
}

static void drop_front(strbuf *b, size_t n) {
    if (!b->s) return;
    memmove(b->s, b->s + n, b->len - n + 1);
    b->len -= n;
}

/* hermes states: 0 content, 1 inside a call, 2 after a call (outside) */
static void feed_hermes(tool_parser_stream *s, bool final, strbuf *content, json_t *deltas) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    strbuf *p = &s->pending;
    for (;;) {
        if (!p->len && !final) return;
        if (s->state == 0 || s->state == 2) {
            const char *o = find(p->s ? p->s : "", p->len, open);
            if (o) {
                if (s->state == 0) sb_add(content, p->s, (size_t)(o - p->s));
                drop_front(p, (size_t)(o - p->s) + strlen(open));
                s->state = 1;
                continue;
            }
            size_t keep = final ? 0 : tag_prefix_tail(p->s, p->len, open);
            if (s->state == 0) sb_add(content, p->s, p->len - keep);
            drop_front(p, p->len - keep);
            return;
        }
        const char *c = find(p->s ? p->s : "", p->len, close);
        if (!c && !final) return;
        size_t body = c ? (size_t)(c - p->s) : p->len;
        json_t *call = parse_call(p->s ? p->s : "", body, "arguments", NULL, false);
        if (call) {
            send_call(s, call, deltas);
            json_decref(call);
        } else { /* not a call: its text as content */
            sb_add(content, open, strlen(open));
            sb_add(content, p->s, c ? body + strlen(close) : body);
        }
        drop_front(p, c ? body + strlen(close) : body);
        s->state = 2;
        if (!c) return;
    }
}

/* llama3 states: 0 undecided, 1 content, 2 JSON (held to the end) */
static void feed_llama3(tool_parser_stream *s, bool final, strbuf *content, json_t *deltas) {
    static const char bot[] = "<|python_tag|>";
    strbuf *p = &s->pending;
    if (s->state == 0 && p->len) {
        if (p->s[0] == '{' || (p->len >= strlen(bot) && !memcmp(p->s, bot, strlen(bot)))) s->state = 2;
        else if (p->len >= strlen(bot) || memcmp(p->s, bot, p->len)) s->state = 1;
    }
    if (s->state == 1 || (s->state == 0 && final)) {
        sb_add(content, p->s, p->len);
        p->len = 0;
        return;
    }
    if (s->state == 2 && final) {
        char *rest = NULL;
        json_t *calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, p->s, p->len, &rest);
        if (calls) {
            size_t i;
            json_t *x;
            json_array_foreach(calls, i, x) send_call(s, x, deltas);
            json_decref(calls);
        } else if (rest) {
            sb_add(content, rest, strlen(rest));
        }
        free(rest);
        p->len = 0;
    }
}

/* required: scan the array, send each top-level item as it closes, until an item is not a call
 * (state 1: the whole-output rule makes such an output all content; calls already sent stay) */
static void feed_required(tool_parser_stream *s, bool final, strbuf *content, json_t *deltas) {
    strbuf *p = &s->pending;
    for (; s->scanned < p->len; s->scanned++) {
        char ch = p->s[s->scanned];
        if (s->in_string) {
            if (s->escape) s->escape = false;
            else if (ch == '\\') s->escape = true;
            else if (ch == '"') s->in_string = false;
            continue;
        }
        if (ch == '"') s->in_string = true;
        else if (ch == '{' || ch == '[') {
            if (++s->depth == 2 && ch == '{') s->item_start = s->scanned;
        } else if (ch == '}' || ch == ']') {
            if (s->depth-- == 2 && ch == '}') {
                json_t *call = NULL;
                char *rest = NULL;
                json_t *one = json_loadb(p->s + s->item_start, s->scanned + 1 - s->item_start, 0, NULL);
                if (one) {
                    json_t *arr = json_pack("[o]", one);
                    char *txt = json_dumps(arr, JSON_COMPACT);
                    json_decref(arr);
                    json_t *calls = txt ? tool_parser_extract(TOOL_PARSER_REQUIRED, txt, strlen(txt), &rest) : NULL;
                    if (calls) call = json_incref(json_array_get(calls, 0));
                    json_decref(calls);
                    free(txt);
                    free(rest);
                }
                if (call && s->state == 0) send_call(s, call, deltas);
                else s->state = 1; /* a broken item: the message will be all content, send no more calls */
                json_decref(call);
            }
        }
    }
    if (final && !s->num_calls && p->len) { /* not an array of calls (cut short): the text as content */
        sb_add(content, p->s, p->len);
        p->len = 0;
        s->scanned = 0;
    }
}

void tool_parser_stream_feed(tool_parser_stream *s, const char *text, size_t len, bool final, strbuf *content,
                             json_t *deltas) {
    if (len) sb_add(&s->pending, text, len);
    switch (s->kind) {
    case TOOL_PARSER_HERMES: feed_hermes(s, final, content, deltas); break;
    case TOOL_PARSER_LLAMA3_JSON: feed_llama3(s, final, content, deltas); break;
    case TOOL_PARSER_REQUIRED: feed_required(s, final, content, deltas); break;
    default:
        sb_add(content, s->pending.s, s->pending.len);
        s->pending.len = 0;
        break;
    }
}

/* ---- reasoning ------------------------------------------------------------------ */

static const char think_open[] = "<think>", think_close[] = "</think>";

bool tool_parser_reasoning_from_name(const char *name, reasoning_parser_kind *out) {
    if (!strcmp(name, "qwen3")) *out = REASONING_PARSER_QWEN3;
    else if (!strcmp(name, "deepseek_r1")) *out = REASONING_PARSER_DEEPSEEK_R1;
    else return false;
    return true;
}

void tool_parser_reasoning_split(reasoning_parser_kind k, const char *text, size_t len, char **reasoning,
                                 char **content) {
    *reasoning = *content = NULL;
    const char *o = find(text, len, think_open);
    const char *c = find(text, len, think_close);
    if (k == REASONING_PARSER_QWEN3 && (!o || !c)) {
        *content = dup_n(text, len);
        return;
    }
    const char *r = o ? o + strlen(think_open) : text, *end = text + len;
    c = find(r, (size_t)(end - r), think_close);
    if (!c) {
        if (k == REASONING_PARSER_QWEN3) *content = dup_n(r, (size_t)(end - r));
        else *reasoning = dup_n(r, (size_t)(end - r));
        return;
    }
    *reasoning = dup_n(r, (size_t)(c - r));
    const char *after = c + strlen(think_close);
    if (after < end) *content = dup_n(after, (size_t)(end - after));
}

void tool_parser_reasoning_stream_init(reasoning_stream *s, reasoning_parser_kind k) {
    memset(s, 0, sizeof *s);
    s->kind = k;
    s->state = k == REASONING_PARSER_NONE ? 2 : 0;
}

void tool_parser_reasoning_stream_free(reasoning_stream *s) {
    free(s->pending.s);
    memset(&s->pending, 0, sizeof s->pending);
}

void tool_parser_reasoning_stream_feed(reasoning_stream *s, const char *text, size_t len, bool final,
                                       strbuf *reasoning, strbuf *content) {
    strbuf *p = &s->pending;
    if (len) sb_add(p, text, len);
    size_t ol = strlen(think_open);
    if (s->state == 0) { /* does the output start with <think>? */
        if (p->len < ol && (!p->len || !memcmp(p->s, think_open, p->len)) && !final) return;
        if (p->len >= ol && !memcmp(p->s, think_open, ol)) {
            drop_front(p, ol);
            s->state = 1;
        } else {
            s->state = s->kind == REASONING_PARSER_QWEN3 ? 2 : 1;
        }
    }
    if (s->state == 1) {
        const char *c = find(p->s ? p->s : "", p->len, think_close);
        if (c) {
            sb_add(reasoning, p->s, (size_t)(c - p->s));
            drop_front(p, (size_t)(c - p->s) + strlen(think_close));
            s->state = 2;
        } else {
            size_t keep = final ? 0 : tag_prefix_tail(p->s, p->len, think_close);
            sb_add(reasoning, p->s, p->len - keep);
            drop_front(p, p->len - keep);
            return;
        }
    }
    if (p->len) sb_add(content, p->s, p->len);
    p->len = 0;
}

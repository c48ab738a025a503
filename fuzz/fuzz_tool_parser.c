/*
 * fuzz_tool_parser.c - the tool-call and reasoning parsers of the chat
 * endpoint (src/server/tool_parser.c) on arbitrary generated text.
 *
 * Input: byte 0 picks the parsers (bits 0..1: none / hermes / llama3_json /
 * required; bits 2..3: reasoning none / qwen3 / deepseek_r1), byte 1 seeds
 * the chunk sizes of the streamed run (1..16 bytes each); the rest is the
 * model's output text (any bytes: a model can stop inside a UTF-8 sequence).
 *
 * Checks beyond memory safety (what serving_chat.c relies on):
 *   - extract: every call is {id, type "function", function {name: string,
 *     arguments: a string that parses as JSON}};
 *   - the stream fed the whole text at once equals extract: the same content
 *     (NULL counting as ""), the same number of calls, and per call the same
 *     name and the concatenation of its argument deltas equal to extract's
 *     arguments (tool_parser.h promises exactly this);
 *   - the stream fed in chunks sends the same calls and content as fed at
 *     once (the state machines hold back only text that could be a tag);
 *   - reasoning: the stream in chunks gives what it gives at once, and on a
 *     text with one well-formed think block that equals the split.
 * Where tool_parser.c documents that vLLM's message and stream differ, only
 * the chunked-equals-at-once check applies.
 */
#include "fuzz.h"

#include <jansson.h>

#include "server/tool_parser.h"

int fuzz_tool_parser_init(void) { return 0; }

typedef struct fuzz_streamed {
    strbuf content;
    json_t *names;  /* per call index: name string */
    json_t *args;   /* per call index: concatenated arguments */
} fuzz_streamed;

static void fuzz_streamed_free(fuzz_streamed *r) {
    free(r->content.s);
    json_decref(r->names);
    json_decref(r->args);
}

/* Folds the stream's deltas into per-call names and arguments; 0 when a delta is malformed. */
static int fuzz_fold_deltas(fuzz_streamed *r, json_t *deltas) {
    size_t k;
    json_t *d;
    json_array_foreach(deltas, k, d) {
        json_t *idx = json_object_get(d, "index"), *fn = json_object_get(d, "function");
        FUZZ_CHECK(json_is_integer(idx) && json_is_object(fn), "tool-call delta without index or function");
        size_t i = (size_t)json_integer_value(idx);
        FUZZ_CHECK(i <= json_array_size(r->names), "tool-call delta index %zu skips a call", i);
        if (i == json_array_size(r->names)) {
            json_t *name = json_object_get(fn, "name");
            FUZZ_CHECK(json_is_string(name), "call %zu's first delta has no name", i);
            FUZZ_CHECK(json_is_string(json_object_get(d, "id")), "call %zu's first delta has no id", i);
            json_array_append(r->names, name);
            json_array_append_new(r->args, json_string(""));
        }
        json_t *a = json_object_get(fn, "arguments");
        if (a) {
            FUZZ_CHECK(json_is_string(a), "call %zu: arguments delta is not a string", i);
            json_t *cur = json_array_get(r->args, i);
            size_t n1 = json_string_length(cur), n2 = json_string_length(a);
            char *cat = malloc(n1 + n2 + 1);
            if (!cat) return 0;
            memcpy(cat, json_string_value(cur), n1);
            memcpy(cat + n1, json_string_value(a), n2);
            json_array_set_new(r->args, i, json_stringn_nocheck(cat, n1 + n2));
            free(cat);
        }
    }
    return 1;
}

/* Streams text through the tool parser in chunks of sizes drawn from seed (0: all at once). */
static int fuzz_stream_tools(tool_parser_kind k, const char *text, size_t len, unsigned seed, fuzz_streamed *r) {
    tool_parser_stream s;
    tool_parser_stream_init(&s, k);
    r->names = json_array();
    r->args = json_array();
    size_t pos = 0;
    int ok = 1;
    do {
        size_t n = seed ? 1 + (seed = seed * 1103515245u + 12345u, (seed >> 16) % 16) : len;
        if (n > len - pos) n = len - pos;
        json_t *deltas = json_array();
        tool_parser_stream_feed(&s, text + pos, n, pos + n == len, &r->content, deltas);
        pos += n;
        ok = ok && fuzz_fold_deltas(r, deltas);
        json_decref(deltas);
    } while (pos < len && ok);
    tool_parser_stream_free(&s);
    return ok;
}

static int fuzz_count(const char *s, size_t n, const char *pat) {
    size_t pl = strlen(pat);
    int c = 0;
    for (size_t i = 0; i + pl <= n; i++) c += !memcmp(s + i, pat, pl);
    return c;
}

static int fuzz_find(const char *s, size_t n, const char *pat) { return fuzz_count(s, n, pat) > 0; }

static int fuzz_starts(const char *s, size_t n, const char *pat) {
    size_t pl = strlen(pat);
    return n >= pl && !memcmp(s, pat, pl);
}

static int fuzz_streq(const char *a, size_t alen, const char *b) {
    size_t blen = b ? strlen(b) : 0;
    return alen == blen && (alen == 0 || !memcmp(a, b, alen));
}

static int fuzz_tools(tool_parser_kind k, const char *text, size_t len, unsigned seed) {
    char *content = NULL;
    json_t *calls = tool_parser_extract(k, text, len, &content);
    fuzz_streamed once = {0}, chunked = {0};
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *args = json_object_get(fn, "arguments");
        FUZZ_CHECK_GOTO(out, json_is_string(json_object_get(c, "id")) &&
                                 json_is_string(json_object_get(c, "type")) &&
                                 !strcmp(json_string_value(json_object_get(c, "type")), "function") &&
                                 json_is_string(json_object_get(fn, "name")) && json_is_string(args),
                        "call %zu is not {id, type: function, function: {name, arguments}}", i);
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
        FUZZ_CHECK_GOTO(out, parsed != NULL, "call %zu's arguments are not JSON: %s", i, json_string_value(args));
        json_decref(parsed);
    }
    if (!fuzz_stream_tools(k, text, len, 0, &once)) goto out;
    /* tool_parser.c's documented exceptions: a hermes call that does not parse (the message
     * becomes all content, the stream keeps what it sent), llama3_json JSON that starts
     * after some text (vLLM streams that as content), and a required array broken after
     * some calls were streamed */
    bool diverges = (k == TOOL_PARSER_HERMES && !calls && fuzz_find(text, len, "<tool_call>")) ||
                    (k == TOOL_PARSER_LLAMA3_JSON && !fuzz_starts(text, len, "<|python_tag|>") &&
                     !fuzz_starts(text, len, "{")) ||
                    (k == TOOL_PARSER_REQUIRED && !calls && json_array_size(once.names) > 0);
    if (diverges) goto chunks;
    FUZZ_CHECK_GOTO(out, fuzz_streq(once.content.s, once.content.len, content),
                    "streamed at once, content '%.*s' != extract's '%s'", (int)once.content.len,
                    once.content.s ? once.content.s : "", content ? content : "(null)");
    FUZZ_CHECK_GOTO(out, json_array_size(once.names) == json_array_size(calls), "streamed %zu calls, extract %zu",
                    json_array_size(once.names), json_array_size(calls));
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        FUZZ_CHECK_GOTO(out, json_equal(json_array_get(once.names, i), json_object_get(fn, "name")),
                        "call %zu: streamed name differs from extract's", i);
        FUZZ_CHECK_GOTO(out, json_equal(json_array_get(once.args, i), json_object_get(fn, "arguments")),
                        "call %zu: streamed arguments '%s' != extract's '%s'", i,
                        json_string_value(json_array_get(once.args, i)),
                        json_string_value(json_object_get(fn, "arguments")));
    }
chunks:
    if (!fuzz_stream_tools(k, text, len, seed | 1u, &chunked)) goto out;
    FUZZ_CHECK_GOTO(out, chunked.content.len == once.content.len &&
                             (!once.content.len || !memcmp(chunked.content.s, once.content.s, once.content.len)),
                    "content streamed in chunks '%.*s' != at once '%.*s'", (int)chunked.content.len,
                    chunked.content.s ? chunked.content.s : "", (int)once.content.len,
                    once.content.s ? once.content.s : "");
    FUZZ_CHECK_GOTO(out, json_equal(chunked.names, once.names) && json_equal(chunked.args, once.args),
                    "calls streamed in chunks differ from at once");
out:
    fuzz_streamed_free(&once);
    fuzz_streamed_free(&chunked);
    json_decref(calls);
    free(content);
    return 0;
}

static void fuzz_stream_reasoning(reasoning_parser_kind k, const char *text, size_t len, unsigned seed,
                                  strbuf *reasoning, strbuf *content) {
    reasoning_stream s;
    tool_parser_reasoning_stream_init(&s, k);
    size_t pos = 0;
    do {
        size_t n = seed ? 1 + (seed = seed * 1103515245u + 12345u, (seed >> 16) % 16) : len;
        if (n > len - pos) n = len - pos;
        tool_parser_reasoning_stream_feed(&s, text + pos, n, pos + n == len, reasoning, content);
        pos += n;
    } while (pos < len);
    tool_parser_reasoning_stream_free(&s);
}

static int fuzz_reasoning(reasoning_parser_kind k, const char *text, size_t len, unsigned seed) {
    char *reasoning = NULL, *content = NULL;
    tool_parser_reasoning_split(k, text, len, &reasoning, &content);
    strbuf r1 = {0}, c1 = {0}, r2 = {0}, c2 = {0};
    fuzz_stream_reasoning(k, text, len, 0, &r1, &c1);
    fuzz_stream_reasoning(k, text, len, seed | 1u, &r2, &c2);
    /* The message and the stream agree on one well-formed think block; elsewhere vLLM's own
     * parsers split a message and a stream differently (an unclosed qwen3 block streams as
     * reasoning but is content in the message; deepseek_r1's message cuts at any <think>). */
    int opens = fuzz_count(text, len, "<think>"), closes = fuzz_count(text, len, "</think>");
    bool comparable = k != REASONING_PARSER_NONE && closes == 1 &&
                      (k == REASONING_PARSER_QWEN3 ? opens == 1 && fuzz_starts(text, len, "<think>")
                                                   : opens == 0 || (opens == 1 && fuzz_starts(text, len, "<think>")));
    FUZZ_CHECK_GOTO(out, !comparable || (fuzz_streq(r1.s, r1.len, reasoning) && fuzz_streq(c1.s, c1.len, content)),
                    "reasoning streamed at once ('%.*s' / '%.*s') != split ('%s' / '%s')", (int)r1.len,
                    r1.s ? r1.s : "", (int)c1.len, c1.s ? c1.s : "", reasoning ? reasoning : "(null)",
                    content ? content : "(null)");
    FUZZ_CHECK_GOTO(out, r2.len == r1.len && c2.len == c1.len && (!r1.len || !memcmp(r1.s, r2.s, r1.len)) &&
                             (!c1.len || !memcmp(c1.s, c2.s, c1.len)),
                    "reasoning streamed in chunks differs from at once");
out:
    free(reasoning);
    free(content);
    free(r1.s);
    free(c1.s);
    free(r2.s);
    free(c2.s);
    return 0;
}

int fuzz_tool_parser_one(const uint8_t *data, size_t size) {
    if (size < 2 || size > 4096) return 0;
    static const tool_parser_kind tools[4] = {TOOL_PARSER_NONE, TOOL_PARSER_HERMES, TOOL_PARSER_LLAMA3_JSON,
                                              TOOL_PARSER_REQUIRED};
    static const reasoning_parser_kind reasoners[4] = {REASONING_PARSER_NONE, REASONING_PARSER_QWEN3,
                                                       REASONING_PARSER_DEEPSEEK_R1, REASONING_PARSER_QWEN3};
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    if (memchr(text, 0, len)) return 0; /* the parsers' content is a C string (so is the text they get) */
    if (data[0] & 3) fuzz_tools(tools[data[0] & 3], text, len, data[1]);
    fuzz_reasoning(reasoners[(data[0] >> 2) & 3], text, len, data[1]);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_tool_parser_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_tool_parser_one(data, size); }
#endif

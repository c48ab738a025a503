/*
 * test_tool_parser.c - the tool-call and reasoning parsers
 * (src/server/tool_parser.c) on texts whose expected results are worked
 * out by hand from vLLM 0.11's rules (hermes, llama3_json; qwen3 and
 * deepseek_r1, whose cases are taken from vLLM's own
 * tests/reasoning/test_deepseekr1_reasoning_parser.py), Python's
 * json.dumps output for the arguments (values printed by CPython), and the
 * streaming state machines against the whole-output parse: every text fed
 * one byte at a time and in uneven pieces must add up to the same content,
 * reasoning and calls, and a tag split across deltas must never leak as
 * content.
 */
/* checks: 9 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/tool_parser.h"

static const char *fn_name(json_t *call) {
    return json_string_value(json_object_get(json_object_get(call, "function"), "name"));
}
static const char *fn_args(json_t *call) {
    return json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
}
static bool streq(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

TEST(test_hermes_whole) {
    char *content;
    json_t *calls = tool_parser_extract(TOOL_PARSER_HERMES, "Hello world", 11, &content);
    CHECK(!calls && streq(content, "Hello world"));
    free(content);
    const char *t = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\xc3\xbcrich\", "
                    "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>{\"name\":\"f\",\"arguments\":{\"x\":[1,2.50]}}"
                    "</tool_call>trailing";
    calls = tool_parser_extract(TOOL_PARSER_HERMES, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 2, "%zu calls", json_array_size(calls));
    CHECK(streq(content, "Sure.\n"), "content %s", content);
    CHECK(streq(fn_name(json_array_get(calls, 0)), "get_weather"));
    CHECK(streq(fn_args(json_array_get(calls, 0)), "{\"city\": \"Z\xc3\xbcrich\", \"unit\": \"celsius\"}"),
          "%s", fn_args(json_array_get(calls, 0)));
    CHECK(streq(fn_args(json_array_get(calls, 1)), "{\"x\": [1, 2.5]}"), "%s", fn_args(json_array_get(calls, 1)));
    const char *id = json_string_value(json_object_get(json_array_get(calls, 0), "id"));
    CHECK(id && !strncmp(id, "chatcmpl-tool-", 14));
    CHECK(streq(json_string_value(json_object_get(json_array_get(calls, 0), "type")), "function"));
    json_decref(calls);
    free(content);
    /* unclosed last call: to the end of the text; no content before it -> null */
    t = "<tool_call>{\"name\": \"f\", \"arguments\": {}}";
    calls = tool_parser_extract(TOOL_PARSER_HERMES, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 1 && !content && streq(fn_args(json_array_get(calls, 0)), "{}"));
    json_decref(calls);
    /* not JSON: no calls, the whole text is content */
    t = "a<tool_call>{\"name\": f}</tool_call>";
    calls = tool_parser_extract(TOOL_PARSER_HERMES, t, strlen(t), &content);
    CHECK(!calls && streq(content, t));
    free(content);
    /* no "arguments": vLLM's KeyError -> no calls */
    t = "<tool_call>{\"name\": \"f\"}</tool_call>";
    calls = tool_parser_extract(TOOL_PARSER_HERMES, t, strlen(t), &content);
    CHECK(!calls && streq(content, t));
    free(content);
}

TEST(test_llama3_whole) {
    char *content;
    const char *t = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Z\xc3\xbcrich\", \"n\": 1.5}} ; "
                    "{\"name\": \"g\", \"arguments\": {}}";
    json_t *calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 2 && !content);
    CHECK(streq(fn_args(json_array_get(calls, 0)), "{\"city\": \"Z\\u00fcrich\", \"n\": 1.5}"), "%s",
          fn_args(json_array_get(calls, 0)));
    CHECK(streq(fn_name(json_array_get(calls, 1)), "g") && streq(fn_args(json_array_get(calls, 1)), "{}"));
    json_decref(calls);
    t = "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}";
    calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 1 && streq(fn_args(json_array_get(calls, 0)), "{\"a\": [1, 2]}"));
    json_decref(calls);
    /* arguments nested two deep make three levels of braces: vLLM's regex
     * then matches only {"b": 1}, which has no name -> no calls */
    t = "{\"name\": \"f\", \"parameters\": {\"a\": {\"b\": 1}}}";
    calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, t, strlen(t), &content);
    CHECK(!calls && streq(content, t));
    free(content);
    /* three levels of braces are beyond vLLM's regex: the inner object is the match */
    t = "{\"x\": {\"name\": \"f\", \"parameters\": {\"a\": 1}}}";
    calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 1 && streq(fn_name(json_array_get(calls, 0)), "f"));
    json_decref(calls);
    calls = tool_parser_extract(TOOL_PARSER_LLAMA3_JSON, "no json here", 12, &content);
    CHECK(!calls && streq(content, "no json here"));
    free(content);
}

TEST(test_required_whole) {
    char *content;
    const char *t = "[{\"name\": \"a\", \"parameters\": {\"q\": \"x\"}}, {\"name\":\"b\",\"parameters\":{}}]";
    json_t *calls = tool_parser_extract(TOOL_PARSER_REQUIRED, t, strlen(t), &content);
    CHECK(calls && json_array_size(calls) == 2 && streq(fn_args(json_array_get(calls, 0)), "{\"q\": \"x\"}"));
    json_decref(calls);
    free(content);
    calls = tool_parser_extract(TOOL_PARSER_REQUIRED, "[{\"name\": \"a\", \"par", 19, &content);
    CHECK(!calls && streq(content, "[{\"name\": \"a\", \"par"));
    free(content);
}

/* Python's json.dumps, values printed by CPython 3 */
TEST(test_py_dumps) {
    static const struct { const char *json, *ascii, *raw; } cases[] = {
        {"[1e16, 0.0001, 1e-5, 100.0, 0.1, 1.5e300, -2.5, 1e15, 5e-324]",
         "[1e+16, 0.0001, 1e-05, 100.0, 0.1, 1.5e+300, -2.5, 1000000000000000.0, 5e-324]", NULL},
        {"[123456789012345.6, 7, -3, true, null]", "[123456789012345.6, 7, -3, true, null]", NULL},
        {"{\"a\": \"\xf0\x9f\x98\x80\xc3\xbc\\n\\u0001\\\"\"}", "{\"a\": \"\\ud83d\\ude00\\u00fc\\n\\u0001\\\"\"}",
         "{\"a\": \"\xf0\x9f\x98\x80\xc3\xbc\\n\\u0001\\\"\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *v = json_loads(cases[i].json, 0, NULL);
        CHECK(v, "case %zu", i);
        char *a = tool_parser_py_dumps(v, true), *r = tool_parser_py_dumps(v, false);
        bool ok = streq(a, cases[i].ascii) && (!cases[i].raw || streq(r, cases[i].raw));
        char msg[512];
        snprintf(msg, sizeof msg, "%s | %s", a, r);
        free(a);
        free(r);
        json_decref(v);
        CHECK(ok, "case %zu: %s", i, msg);
    }
}

/* Feeds t in pieces of `step` bytes (0: uneven 1,2,3,... pieces); returns
 * the accumulated content and "name(args)" of each call streamed. */
static void stream_tools(tool_parser_kind k, const char *t, size_t step, strbuf *content, strbuf *calls,
                         bool *leaked) {
    tool_parser_stream s;
    tool_parser_stream_init(&s, k);
    json_t *deltas = json_array();
    size_t n = strlen(t), at = 0, piece = 1;
    *leaked = false;
    while (at < n) {
        size_t m = step ? step : piece++;
        if (m > n - at) m = n - at;
        tool_parser_stream_feed(&s, t + at, m, at + m == n, content, deltas);
        at += m;
    }
    if (content->s && (strstr(content->s, "<tool_call>") || strstr(content->s, "</tool_call>"))) *leaked = true;
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) {
        json_t *fn = json_object_get(d, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (name) {
            sb_add(calls, name, strlen(name));
            sb_add(calls, "(", 1);
            if (!json_is_string(json_object_get(d, "id")) || !json_is_integer(json_object_get(d, "index")))
                sb_add(calls, "NO-ID", 5);
        }
        if (args) {
            sb_add(calls, args, strlen(args));
            sb_add(calls, ")", 1);
        }
    }
    json_decref(deltas);
    tool_parser_stream_free(&s);
}

static bool stream_matches(tool_parser_kind k, const char *t, char *why, size_t cap) {
    char *content = NULL;
    json_t *calls = tool_parser_extract(k, t, strlen(t), &content);
    strbuf want = {0};
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        sb_add(&want, fn_name(c), strlen(fn_name(c)));
        sb_add(&want, "(", 1);
        sb_add(&want, fn_args(c), strlen(fn_args(c)));
        sb_add(&want, ")", 1);
    }
    bool ok = true;
    for (size_t step = 0; step <= 3 && ok; step++) {
        strbuf got_content = {0}, got_calls = {0};
        bool leaked;
        stream_tools(k, t, step, &got_content, &got_calls, &leaked);
        ok = streq(got_content.s ? got_content.s : "", content ? content : "") &&
             streq(got_calls.s ? got_calls.s : "", want.s ? want.s : "") && !leaked;
        if (!ok)
            snprintf(why, cap, "step %zu: content [%s] vs [%s], calls [%s] vs [%s]%s", step,
                     got_content.s ? got_content.s : "", content ? content : "", got_calls.s ? got_calls.s : "",
                     want.s ? want.s : "", leaked ? ", a tag leaked" : "");
        free(got_content.s);
        free(got_calls.s);
    }
    free(content);
    free(want.s);
    json_decref(calls);
    return ok;
}

TEST(test_hermes_stream) {
    static const char *const texts[] = {
        "Hello world, no calls here.",
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>\n<tool_call>{\"name\": \"b\", "
        "\"arguments\": {\"s\": \"</tool\"}}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {}}",
        "a < b and <tool but <tool_cal is no tag",
    };
    char why[1024];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        CHECK(stream_matches(TOOL_PARSER_HERMES, texts[i], why, sizeof why), "text %zu: %s", i, why);
}

TEST(test_llama3_required_stream) {
    char why[1024];
    CHECK(stream_matches(TOOL_PARSER_LLAMA3_JSON, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", "
                                                  "\"parameters\": {}}", why, sizeof why), "%s", why);
    CHECK(stream_matches(TOOL_PARSER_LLAMA3_JSON, "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}", why, sizeof why),
          "%s", why);
    CHECK(stream_matches(TOOL_PARSER_LLAMA3_JSON, "plain text", why, sizeof why), "%s", why);
    CHECK(stream_matches(TOOL_PARSER_REQUIRED, "[{\"name\": \"a\", \"parameters\": {\"s\": \"}{]\\\"\"}}, {\"name\": "
                                               "\"b\", \"parameters\": {\"n\": [1, {\"m\": 2}]}}]", why, sizeof why),
          "%s", why);
}

/* vLLM's tests/reasoning/test_deepseekr1_reasoning_parser.py cases; qwen3's
 * rule (both tags needed) by hand */
typedef struct rcase { reasoning_parser_kind k; const char *out, *reasoning, *content; } rcase;
static const rcase rcases[] = {
    {REASONING_PARSER_DEEPSEEK_R1, "This is a reasoning section</think>This is the rest", "This is a reasoning section",
     "This is the rest"},
    {REASONING_PARSER_DEEPSEEK_R1, "This is a reasoning section</think>", "This is a reasoning section", NULL},
    {REASONING_PARSER_DEEPSEEK_R1, "This is content", "This is content", NULL},
    {REASONING_PARSER_DEEPSEEK_R1, "<think>This is a reasoning section</think>This is the rest",
     "This is a reasoning section", "This is the rest"},
    {REASONING_PARSER_DEEPSEEK_R1, "This\nThat</think>This is the rest\nThat", "This\nThat", "This is the rest\nThat"},
    {REASONING_PARSER_DEEPSEEK_R1, "</think>This is the rest", "", "This is the rest"},
    {REASONING_PARSER_QWEN3, "<think>abc</think>\n\nHi", "abc", "\n\nHi"},
    {REASONING_PARSER_QWEN3, "no tags at all", NULL, "no tags at all"},
    {REASONING_PARSER_QWEN3, "<think>unfinished thought", NULL, "<think>unfinished thought"},
    {REASONING_PARSER_QWEN3, "<think></think>", "", NULL},
};

TEST(test_reasoning_whole) {
    for (size_t i = 0; i < sizeof rcases / sizeof *rcases; i++) {
        char *r, *c;
        tool_parser_reasoning_split(rcases[i].k, rcases[i].out, strlen(rcases[i].out), &r, &c);
        bool ok = streq(r, rcases[i].reasoning) && streq(c, rcases[i].content);
        char msg[256];
        snprintf(msg, sizeof msg, "[%s] [%s]", r ? r : "(null)", c ? c : "(null)");
        free(r);
        free(c);
        CHECK(ok, "case %zu: %s", i, msg);
    }
}

TEST(test_reasoning_stream) {
    for (size_t i = 0; i < sizeof rcases / sizeof *rcases; i++) {
        if (rcases[i].k == REASONING_PARSER_QWEN3 && !rcases[i].reasoning && rcases[i].out[0] == '<')
            continue; /* a <think> never closed: the stream already sent reasoning (documented) */
        for (size_t step = 1; step <= 4; step++) {
            reasoning_stream s;
            tool_parser_reasoning_stream_init(&s, rcases[i].k);
            strbuf r = {0}, c = {0};
            size_t n = strlen(rcases[i].out);
            for (size_t at = 0; at < n; at += step) {
                size_t m = step < n - at ? step : n - at;
                size_t before = c.len;
                tool_parser_reasoning_stream_feed(&s, rcases[i].out + at, m, at + m == n, &r, &c);
                CHECK(!c.len || !memchr(c.s + before, '<', c.len - before) || rcases[i].k == REASONING_PARSER_QWEN3,
                      "case %zu: a tag leaked into content", i);
            }
            bool ok = streq(r.s ? r.s : "", rcases[i].reasoning ? rcases[i].reasoning : "") &&
                      streq(c.s ? c.s : "", rcases[i].content ? rcases[i].content : "");
            char msg[256];
            snprintf(msg, sizeof msg, "step %zu: [%s] [%s]", step, r.s ? r.s : "", c.s ? c.s : "");
            free(r.s);
            free(c.s);
            tool_parser_reasoning_stream_free(&s);
            CHECK(ok, "case %zu: %s", i, msg);
        }
    }
}

TEST(test_names) {
    tool_parser_kind k;
    reasoning_parser_kind r;
    CHECK(tool_parser_kind_from_name("hermes", &k) && k == TOOL_PARSER_HERMES);
    CHECK(tool_parser_kind_from_name("llama3_json", &k) && k == TOOL_PARSER_LLAMA3_JSON);
    CHECK(!tool_parser_kind_from_name("mistral", &k));
    CHECK(tool_parser_reasoning_from_name("qwen3", &r) && r == REASONING_PARSER_QWEN3);
    CHECK(tool_parser_reasoning_from_name("deepseek_r1", &r) && r == REASONING_PARSER_DEEPSEEK_R1);
    CHECK(!tool_parser_reasoning_from_name("granite", &r));
    /* an empty output, its only delta the final one */
    for (int kind = TOOL_PARSER_NONE; kind <= TOOL_PARSER_REQUIRED; kind++) {
        tool_parser_stream ts;
        tool_parser_stream_init(&ts, (tool_parser_kind)kind);
        strbuf c = {0};
        json_t *d = json_array();
        tool_parser_stream_feed(&ts, NULL, 0, true, &c, d);
        bool empty = c.len == 0 && json_array_size(d) == 0;
        json_decref(d);
        free(c.s);
        tool_parser_stream_free(&ts);
        CHECK(empty, "tool parser %d", kind);
    }
    for (int kind = REASONING_PARSER_NONE; kind <= REASONING_PARSER_DEEPSEEK_R1; kind++) {
        reasoning_stream rs;
        tool_parser_reasoning_stream_init(&rs, (reasoning_parser_kind)kind);
        strbuf a = {0}, b = {0};
        tool_parser_reasoning_stream_feed(&rs, NULL, 0, true, &a, &b);
        bool empty = a.len == 0 && b.len == 0;
        free(a.s);
        free(b.s);
        tool_parser_reasoning_stream_free(&rs);
        CHECK(empty, "reasoning parser %d", kind);
    }
}

int main(void) {
    RUN(test_hermes_whole);
    RUN(test_llama3_whole);
    RUN(test_required_whole);
    RUN(test_py_dumps);
    RUN(test_hermes_stream);
    RUN(test_llama3_required_stream);
    RUN(test_reasoning_whole);
    RUN(test_reasoning_stream);
    RUN(test_names);
    return harness_done();
}

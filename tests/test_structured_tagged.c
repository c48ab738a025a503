/*
 * test_structured_tagged.c - free text with tagged regions
 * (src/structured/tagged.c): vLLM's structural_tag (free text until a
 * trigger, then begin + JSON per the schema + end, then free text again)
 * and a constraint that starts only after the reasoning's "</think>".
 * Verdicts are worked out by hand from those rules: a text is fed one byte
 * at a time through stories260K's byte-fallback tokens (<0xNN>), every mask
 * bit must agree with accept_token, and EOS must be allowed exactly where
 * the text is complete.
 */
/* checks: 6 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

static tokenizer *stories;
static st_vocab *sv;
static int32_t byte_tok[256];

static bool open_stories(void) {
    if (sv) return true;
    if (tokenizer_load("models/stories260K", &stories) != VLLM_OK) return false;
    if (st_vocab_new(stories, NULL, 0, &sv) != VLLM_OK) return false;
    for (int b = 0; b < 256; b++) {
        char piece[16];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        byte_tok[b] = tokenizer_piece_to_id(stories, piece);
    }
    return true;
}

static bool mask_has(const uint32_t *mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

/* 1 accepted and complete, 0 rejected or incomplete, -2 mask and accept disagree */
static int verdict(st_grammar *g, const char *text) {
    st_matcher *m;
    if (st_matcher_new(g, &m) != VLLM_OK) return -1;
    uint32_t *mask = malloc((size_t)st_mask_words(sv) * 4);
    int out = 1;
    for (size_t i = 0; text[i] && out == 1; i++) {
        int32_t id = byte_tok[(unsigned char)text[i]];
        st_matcher_fill_mask(m, mask);
        bool bit = mask_has(mask, id), ok = st_matcher_accept_token(m, id);
        if (bit != ok) out = -2;
        else if (!ok) out = 0;
    }
    if (out == 1) {
        st_matcher_fill_mask(m, mask);
        bool eos = mask_has(mask, tokenizer_eos_id(stories));
        if (eos != st_matcher_can_end(m)) out = -2;
        else if (!eos) out = 0;
    }
    free(mask);
    st_matcher_free(m);
    return out;
}

typedef struct vcase {
    const char *text;
    int want;
} vcase;

static bool run_cases(st_grammar *g, const vcase *cs, size_t n, char *why, size_t cap) {
    for (size_t k = 0; k < n; k++) {
        int got = verdict(g, cs[k].text);
        if (got != cs[k].want) {
            snprintf(why, cap, "\"%s\": got %d, want %d", cs[k].text, got, cs[k].want);
            return false;
        }
    }
    return true;
}

static st_grammar *compile_tag(const char *json) {
    st_spec spec = {.kind = ST_STRUCTURAL_TAG, .text = json, .len = strlen(json)};
    st_grammar *g = NULL;
    return st_compile(&spec, sv, &g) == VLLM_OK ? g : NULL;
}

static const char weather[] =
    "{\"type\": \"structural_tag\", \"structures\": [{\"begin\": \"<function=get_weather>\", \"schema\": {\"type\": "
    "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"], "
    "\"additionalProperties\": false}, \"end\": \"</function>\"}, {\"begin\": \"<function=add>\", \"schema\": "
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"], "
    "\"additionalProperties\": false}, \"end\": \"</function>\"}], \"triggers\": [\"<function=\"]}";

TEST(test_structural_tag_free_text) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    st_grammar *g = compile_tag(weather);
    CHECK(g, "%s", vllm_errmsg());
    static const vcase cs[] = {
        {"", 1},
        {"Just some text, no calls. a < b, <func, <function is fine", 1},
        {"<functio", 1},                    /* a trigger prefix may end the text */
        {"<function", 1},
        {"<<function <funct x", 1},         /* fallbacks of the trigger automaton */
        {"\xc3\xa9t\xc3\xa9 \xe2\x82\xac", 1}, /* UTF-8 free text */
    };
    char why[256];
    bool ok = run_cases(g, cs, sizeof cs / sizeof *cs, why, sizeof why);
    st_grammar_unref(g);
    CHECK(ok, "%s", why);
}

TEST(test_structural_tag_regions) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    st_grammar *g = compile_tag(weather);
    CHECK(g, "%s", vllm_errmsg());
    static const vcase cs[] = {
        {"Sure.<function=get_weather>{\"city\": \"Paris\"}</function>", 1},
        {"<function=get_weather>{\"city\":\"Paris\"}</function> then <function=add>{\"a\": 12}</function> done", 1},
        {"<<function=add>{\"a\": 1}</function>", 1}, /* the trigger found after a false start */
        {"<<function=add>{\"a\": 1.5}</function>", 0}, /* ... and so the schema applies there */
        {"<function=get_weather>{\"city\": 3}</function>", 0},      /* schema: city is a string */
        {"<function=get_weather>{\"city\": \"P\", \"x\": 1}</function>", 0}, /* no other keys */
        {"<function=add>{\"a\": 1.5}</function>", 0},
        {"<function=unknown>{}</function>", 0},                      /* a trigger commits to a structure */
        {"<function=add>{\"a\": 1}", 0},                             /* the end is required */
        {"<function=add>{\"a\": 1}</function", 0},
    };
    char why[256];
    bool ok = run_cases(g, cs, sizeof cs / sizeof *cs, why, sizeof why);
    st_grammar_unref(g);
    CHECK(ok, "%s", why);
}

TEST(test_structural_tag_errors) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    static const struct { const char *json, *want; } cs[] = {
        {"not json", "structural_tag: not a JSON object"},
        {"{\"structures\": [], \"triggers\": []}", "triggers"},
        {"{\"structures\": [{\"begin\": \"<a>\", \"schema\": {}, \"end\": \"</a>\"}], \"triggers\": [\"<b\"]}",
         "structures[0].begin \"<a>\" does not start with any of the triggers"},
        {"{\"structures\": [{\"begin\": \"<a>\", \"schema\": {\"uniqueItems\": true}, \"end\": \"</a>\"}], "
         "\"triggers\": [\"<a\"]}",
         "structural_tag: structures[0].schema"},
        {"{\"structures\": [{\"begin\": \"<a>\", \"end\": \"</a>\"}], \"triggers\": [\"<a\"]}", "{begin, schema, end}"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        st_grammar *g = compile_tag(cs[i].json);
        st_grammar_unref(g);
        CHECK(!g && strstr(vllm_errmsg(), cs[i].want), "case %zu: %s", i, g ? "compiled" : vllm_errmsg());
    }
}

/* A trigger set with shared prefixes and two triggers: the automaton's
 * fallbacks ("aab" inside "aaab") and a trigger no structure begins with. */
TEST(test_structural_tag_two_triggers) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    st_grammar *g = compile_tag("{\"structures\": [{\"begin\": \"aab:\", \"schema\": {\"enum\": [1, 2]}, \"end\": \";\"}], "
                                "\"triggers\": [\"aab\", \"<x>\"]}");
    CHECK(g, "%s", vllm_errmsg());
    static const vcase cs[] = {
        {"aaab:1;", 1}, {"aaaab:2; aa", 1}, {"aaab:3;", 0}, {"aaaab:0;", 0}, {"ab aab:3;", 0}, {"xx aab", 0}, {"aab1", 0},
        {"<x> anything after the bare trigger", 1}, {"<<x>aab:2;", 1},
    };
    char why[256];
    bool ok = run_cases(g, cs, sizeof cs / sizeof *cs, why, sizeof why);
    st_grammar_unref(g);
    CHECK(ok, "%s", why);
}

static st_grammar *compile_after(const char *gbnf) {
    strbuf b = {0};
    st_grammar *g = NULL;
    if (st_gbnf_after_text(gbnf, strlen(gbnf), "</think>", &b) == VLLM_OK) st_compile_gbnf(b.s, b.len, sv, &g);
    free(b.s);
    return g;
}

TEST(test_after_reasoning) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    /* root refers to itself and names like root_x stay: only `root` is renamed */
    st_grammar *g = compile_after("root ::= \"yes\" | \"no\" | \"(\" root \")\" root_x\nroot_x ::= \"!\"? # root\n");
    CHECK(g, "%s", vllm_errmsg());
    static const vcase cs[] = {
        {"Let me think: yes or no? </thin </think>yes", 1},
        {"</think>(no)!", 1},
        {"</think>(no)", 1},
        {"thinking, cut short by max_tokens", 1}, /* EOS is free during the reasoning */
        {"yes", 1},                                 /* still reasoning: any text */
        {"hmm</think>maybe", 0},
        {"hmm</think>", 0},                         /* after the end the grammar applies: not complete */
        {"a</think>yes</think>", 0},
    };
    char why[256];
    bool ok = run_cases(g, cs, sizeof cs / sizeof *cs, why, sizeof why);
    st_grammar_unref(g);
    CHECK(ok, "%s", why);
}

TEST(test_after_reasoning_json) {
    if (!open_stories()) SKIP("models/stories260K not loadable");
    static const char schema[] = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, "
                                 "\"required\": [\"n\"]}";
    st_spec spec = {.kind = ST_JSON_SCHEMA, .text = schema, .len = sizeof schema - 1};
    strbuf j = {0};
    CHECK(st_spec_to_gbnf(&spec, &j) == VLLM_OK, "%s", vllm_errmsg());
    st_grammar *g = compile_after(j.s);
    free(j.s);
    CHECK(g, "%s", vllm_errmsg());
    static const vcase cs[] = {
        {"{\"n\": \"not yet\"} </think>{\"n\": 3}", 1},
        {"</think>\n{\"n\": 3}", 0}, /* JSON from the first byte after the end (no leading whitespace) */
        {"x</think>{\"n\": \"3\"}", 0},
    };
    char why[256];
    bool ok = run_cases(g, cs, sizeof cs / sizeof *cs, why, sizeof why);
    st_grammar_unref(g);
    CHECK(ok, "%s", why);
}

int main(void) {
    RUN(test_structural_tag_free_text);
    RUN(test_structural_tag_regions);
    RUN(test_structural_tag_errors);
    RUN(test_structural_tag_two_triggers);
    RUN(test_after_reasoning);
    RUN(test_after_reasoning_json);
    int rc = harness_done();
    st_vocab_free(sv);
    tokenizer_free(stories);
    return rc;
}

/*
 * test_structured_schema.c - st_schema_to_gbnf through our matcher.
 *
 * tests/data/schema_cases.json holds hand-written cases per JSON Schema
 * keyword (accepting and rejecting instance texts derived from the spec:
 * minLength counts code points, integer rejects 1.5, additionalProperties
 * false rejects an extra key, $ref recursion accepts nested trees, ...);
 * tests/ref/schema_ref.py checks the same file's labels against jsonschema
 * and our grammars against XGrammar (test_structured_schema_ref.sh). Here
 * each schema is compiled with st_compile against stories260K's vocabulary
 * and each text walked one byte at a time through its byte-fallback tokens
 * (<0xNN>): mask bit, then accept; "accepted" is every byte allowed and the
 * grammar able to end. Then what the case file cannot say: whitespace
 * options and bounds, OpenAPI's nullable, errors (not JSON, a 10 MB schema
 * in bounded time, nesting), rule names, and a MaskBench sample (200 files
 * of ../shared/data/maskbench, every 29th by name; skipped without it): no
 * invalid instance accepted.
 */
/* checks: 146 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli/bench_pyjson.h"
#include "harness.h"
#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

static tokenizer *stories;
static st_vocab *sv;
static int32_t byte_tok[256];
static uint32_t *mask;

static bool open_stories(void) {
    if (sv) return true;
    if (tokenizer_load("models/stories260K", &stories) != VLLM_OK) return false;
    if (st_vocab_new(stories, NULL, 0, &sv) != VLLM_OK) return false;
    for (int b = 0; b < 256; b++) {
        char piece[16];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        byte_tok[b] = tokenizer_piece_to_id(stories, piece);
        if (byte_tok[b] < 0) return false;
    }
    mask = malloc(sizeof *mask * (size_t)st_mask_words(sv));
    return mask != NULL;
}

/* 1: the grammar accepts text whole; 0: it does not; with_mask: check each
 * byte's mask bit too (else accept alone, for speed) */
static int walk(st_grammar *g, const char *text, size_t n, bool with_mask) {
    st_matcher *m;
    if (st_matcher_new(g, &m)) return -1;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        int32_t id = byte_tok[(unsigned char)text[i]];
        if (with_mask) {
            st_matcher_fill_mask(m, mask);
            if (!((mask[id >> 5] >> (id & 31)) & 1)) { ok = false; break; }
        }
        ok = st_matcher_accept_token(m, id);
    }
    if (ok) ok = st_matcher_can_end(m);
    st_matcher_free(m);
    return ok;
}

static vllm_status compile_opts(const char *schema, size_t len, const st_spec *base, st_grammar **g) {
    st_spec spec = base ? *base : (st_spec){0};
    spec.kind = base && base->kind ? base->kind : ST_JSON_SCHEMA;
    spec.text = schema;
    spec.len = len;
    return st_compile(&spec, sv, g);
}

/* ---- the case file ------------------------------------------------------------ */

static json_t *the_case;

static void run_case(void) {
    if (!open_stories()) SKIP("models/stories260K did not load: %s", vllm_errmsg());
    json_t *c = the_case;
    char *schema = json_dumps(json_object_get(c, "schema"), JSON_ENCODE_ANY | JSON_COMPACT);
    CHECK(schema, "out of memory");
    st_grammar *g = NULL;
    vllm_status rc = compile_opts(schema, strlen(schema), NULL, &g);
    free(schema);
    json_t *err = json_object_get(c, "error");
    if (err) {
        CHECK(rc != VLLM_OK, "compiled; want an error containing \"%s\"", json_string_value(err));
        CHECK(strstr(vllm_errmsg(), json_string_value(err)), "error \"%s\" lacks \"%s\"", vllm_errmsg(), json_string_value(err));
        return;
    }
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    const char *sets[2] = {"valid", "invalid"};
    for (int s = 0; s < 2; s++) {
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(c, sets[s]), i, t) {
            int got = walk(g, json_string_value(t), json_string_length(t), true);
            if (got != (s == 0)) {
                st_grammar_unref(g);
                CHECK(false, "%s %s: %s", sets[s], s == 0 ? "rejected" : "accepted", json_string_value(t));
            }
        }
    }
    st_grammar_unref(g);
}

/* ---- what the case file cannot say --------------------------------------------- */

/* compiles schema with opts; each of texts[] (NULL-terminated) must be accepted
 * iff its first character is '+' (which is not part of the text) */
static void expect(const char *schema, const st_spec *opts, const char *const *texts) {
    if (!open_stories()) SKIP("models/stories260K did not load: %s", vllm_errmsg());
    st_grammar *g = NULL;
    CHECK(compile_opts(schema, strlen(schema), opts, &g) == VLLM_OK, "%s", vllm_errmsg());
    for (; *texts; texts++) {
        bool want = (*texts)[0] == '+';
        const char *t = *texts + 1;
        int got = walk(g, t, strlen(t), true);
        if (got != want) {
            st_grammar_unref(g);
            CHECK(false, "%s: want %s", t, want ? "accepted" : "rejected");
        }
    }
    st_grammar_unref(g);
}

TEST(test_nullable_openapi) {
    expect("{\"type\": \"string\", \"nullable\": true}", NULL, (const char *const[]){"+null", "+\"a\"", "-1", NULL});
}

TEST(test_disable_any_whitespace) {
    st_spec o = {.disable_any_whitespace = true};
    expect("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}", &o,
           (const char *const[]){"+{\"a\":[1,2]}", "+{}", "-{\"a\": [1,2]}", "-{\"a\":[1, 2]}", "-{ }", NULL});
}

TEST(test_whitespace_pattern) {
    st_spec o = {.whitespace_pattern = "[ ]?"};
    expect("{\"type\": \"array\"}", &o, (const char *const[]){"+[1, 2]", "+[ 1,2 ]", "-[1,  2]", "-[1,\n2]", NULL});
}

TEST(test_whitespace_bounded) {
    /* a pretty-printer's whitespace between two tokens: at most one line
     * break, then at most 20 spaces or tabs (ST_SCHEMA_MAX_WS) */
    char ok[64], bad[64], ok_nl[64], bad_nl[64];
    snprintf(ok, sizeof ok, "+[1,%20s2]", "");
    snprintf(bad, sizeof bad, "-[1,%21s2]", "");
    snprintf(ok_nl, sizeof ok_nl, "+[\n%20s1,\r\n\t2\n]", "");
    snprintf(bad_nl, sizeof bad_nl, "-[1,\n%21s2]", "");
    expect("{\"type\": \"array\"}", NULL,
           (const char *const[]){ok, bad, ok_nl, bad_nl, "+[\n  [\n    1\n  ],\n  2\n]", "-[1,\n\n2]", "-[1, \n2]",
                                 "-[1,\r2]", "-[1, 2] ", "- [1, 2]", NULL});
}

TEST(test_json_object_kind) {
    st_spec o = {.kind = ST_JSON_OBJECT};
    expect("ignored", &o, (const char *const[]){"+{}", "+{\"a\": {\"b\": [1, null]}}", "-[]", "-\"x\"", NULL});
}

TEST(test_property_order) {
    /* the schema's order; optional ones may be skipped; additional keys after them */
    expect("{\"type\": \"object\", \"properties\": {\"a\": {}, \"b\": {}}}", NULL,
           (const char *const[]){"+{\"a\": 1, \"b\": 2}", "+{\"b\": 2}", "+{\"a\": 1, \"z\": 3}", "-{\"b\": 2, \"a\": 1}",
                                 "-{\"z\": 3, \"a\": 1}", NULL});
}

TEST(test_additional_key_spellings) {
    /* an additional key never spells a known name, escaped or not */
    expect("{\"type\": \"object\", \"properties\": {\"ab\": {\"type\": \"integer\"}}, \"additionalProperties\": {\"type\": \"string\"}}",
           NULL,
           (const char *const[]){"+{\"ab\": 1}", "+{\"a\": \"x\"}", "+{\"abc\": \"x\"}", "-{\"ab\": \"x\"}", "-{\"a\\u0062\": \"x\"}",
                                 "-{\"ab\": 1, \"ab\": \"x\"}", NULL});
}

TEST(test_integer_ranges_exhaustive) {
    /* every integer in -1200..1200 against three ranges, worked out by comparison */
    if (!open_stories()) SKIP("models/stories260K did not load: %s", vllm_errmsg());
    static const struct { const char *schema; long lo, hi; } r[] = {
        {"{\"type\": \"integer\", \"minimum\": -1007, \"maximum\": 99}", -1007, 99},
        {"{\"type\": \"integer\", \"exclusiveMinimum\": 9, \"exclusiveMaximum\": 1001}", 10, 1000},
        {"{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 0}", 0, 0},
    };
    for (size_t k = 0; k < sizeof r / sizeof *r; k++) {
        st_grammar *g = NULL;
        CHECK(compile_opts(r[k].schema, strlen(r[k].schema), NULL, &g) == VLLM_OK, "%s", vllm_errmsg());
        for (long v = -1200; v <= 1200; v++) {
            char t[32];
            snprintf(t, sizeof t, "%ld", v);
            int got = walk(g, t, strlen(t), false);
            if (got != (v >= r[k].lo && v <= r[k].hi)) {
                st_grammar_unref(g);
                CHECK(false, "%s: %ld %s", r[k].schema, v, got ? "accepted" : "rejected");
            }
        }
        st_grammar_unref(g);
    }
}

TEST(test_multiple_of_exhaustive) {
    if (!open_stories()) SKIP("models/stories260K did not load: %s", vllm_errmsg());
    static const char schema[] = "{\"type\": \"integer\", \"multipleOf\": 13, \"minimum\": 0}";
    st_grammar *g = NULL;
    CHECK(compile_opts(schema, strlen(schema), NULL, &g) == VLLM_OK, "%s", vllm_errmsg());
    for (long v = -30; v <= 2000; v++) {
        char t[32];
        snprintf(t, sizeof t, "%ld", v);
        int got = walk(g, t, strlen(t), false);
        if (got != (v >= 0 && v % 13 == 0)) {
            st_grammar_unref(g);
            CHECK(false, "%ld %s", v, got ? "accepted" : "rejected");
        }
    }
    st_grammar_unref(g);
}

static void expect_error(const char *schema, size_t len, const char *want) {
    strbuf out = {0};
    vllm_status rc = st_schema_to_gbnf(schema, len, NULL, "root", &out);
    free(out.s);
    CHECK(rc != VLLM_OK, "translated; want an error with \"%s\"", want);
    CHECK(strstr(vllm_errmsg(), want), "error \"%s\" lacks \"%s\"", vllm_errmsg(), want);
}

TEST(test_error_not_json) { expect_error("{\"type\": ", 9, "not JSON"); }

TEST(test_error_ten_megabytes) {
    /* a 10 MB schema: refused by size at once (bounded time and memory) */
    size_t n = 10u << 20;
    char *s = malloc(n);
    CHECK(s, "out of memory");
    memset(s, ' ', n);
    memcpy(s, "{\"description\": \"", 17);
    memcpy(s + n - 2, "\"}", 2);
    double t0 = clock_now();
    strbuf out = {0};
    vllm_status rc = st_schema_to_gbnf(s, n, NULL, "root", &out);
    double dt = clock_now() - t0;
    free(s);
    free(out.s);
    CHECK(rc == VLLM_ERR_UNSUPPORTED, "rc %d: %s", rc, vllm_errmsg());
    CHECK(strstr(vllm_errmsg(), "10485760 bytes"), "%s", vllm_errmsg());
    CHECK(dt < 0.5, "took %.2f s", dt);
}

TEST(test_error_deep_nesting) {
    /* 300 nested arrays' items: beyond the nesting bound, named */
    strbuf s = {0};
    for (int i = 0; i < 300; i++) sb_add(&s, "{\"items\": ", 10);
    sb_add(&s, "{}", 2);
    for (int i = 0; i < 300; i++) sb_add(&s, "}", 1);
    expect_error(s.s, s.len, "nest deeper than");
    free(s.s);
}

TEST(test_error_recursive_allof) {
    static const char s[] = "{\"$defs\": {\"a\": {\"allOf\": [{\"$ref\": \"#/$defs/a\"}, {\"type\": \"object\"}]}}, \"$ref\": \"#/$defs/a\"}";
    expect_error(s, sizeof s - 1, "deeper than");
}

TEST(test_error_pinned_anyof_bomb) {
    /* values pinned (enum) beside an anyOf that recurses three ways through
     * $ref: checking the values would visit 3^depth subschemas; the budget
     * (ST_SCHEMA_PIN_BUDGET per compile) keeps it to well under a second */
    static const char s[] = "{\"$defs\": {\"a\": {\"anyOf\": [{\"$ref\": \"#/$defs/a\"}, {\"$ref\": \"#/$defs/a\"}, "
                            "{\"$ref\": \"#/$defs/a\"}, {\"const\": 1}]}}, \"enum\": [1, 2], \"allOf\": [{\"$ref\": \"#/$defs/a\"}]}";
    double t0 = clock_now();
    strbuf out = {0};
    vllm_status rc = st_schema_to_gbnf(s, sizeof s - 1, NULL, "root", &out);
    free(out.s);
    double dt = clock_now() - t0;
    CHECK(rc != VLLM_OK && dt < 3.0, "rc %d after %.2f s: %s", (int)rc, dt, vllm_errmsg());
}

TEST(test_error_not_a_schema) { expect_error("{\"properties\": {\"a\": 5}}", 24, "properties.a: a schema must be an object or a boolean"); }

TEST(test_rule_names_prefixed) {
    /* every rule the translation defines starts with the given root name */
    static const char s[] = "{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": \"date\"}, "
                            "\"n\": {\"type\": \"integer\", \"multipleOf\": 3}, \"p\": {\"type\": \"string\", \"pattern\": \"^a+$\"}}}";
    strbuf out = {0};
    CHECK(st_schema_to_gbnf(s, sizeof s - 1, NULL, "tool_args", &out) == VLLM_OK, "%s", vllm_errmsg());
    const char *line = out.s;
    bool good = true;
    while (line && *line) {
        if (*line != ' ' && *line != '|' && *line != '\n' && *line != '#' && strncmp(line, "tool_args", 9)) good = false;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    bool has_root = strstr(out.s, "\ntool_args ::= ") || !strncmp(out.s, "tool_args ::= ", 14);
    free(out.s);
    CHECK(good, "a rule without the prefix");
    CHECK(has_root, "no tool_args rule");
}

/* ---- a MaskBench sample ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

TEST(test_maskbench_sample) {
    const char *dir = "../shared/data/maskbench";
    DIR *d = opendir(dir);
    if (!d) SKIP("%s absent", dir);
    if (!open_stories()) { closedir(d); SKIP("models/stories260K did not load: %s", vllm_errmsg()); }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 8192) * sizeof *names);
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    long files = 0, compiled = 0, valid = 0, valid_acc = 0, invalid = 0, invalid_acc = 0;
    char first_bad[512] = "";
    strbuf text = {0};
    for (size_t i = 0; i < n && files < 200; i += 29) {
        files++;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        json_t *doc = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        char *schema = doc ? json_dumps(json_object_get(doc, "schema"), JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        st_grammar *g = NULL;
        if (schema && compile_opts(schema, strlen(schema), NULL, &g) == VLLM_OK) {
            compiled++;
            size_t k;
            json_t *t;
            json_array_foreach(json_object_get(doc, "tests"), k, t) {
                text.len = 0;
                if (bench_pyjson_dumps(json_object_get(t, "data"), &text)) continue;
                int got = walk(g, text.s, text.len, false);
                if (json_is_true(json_object_get(t, "valid"))) { valid++; valid_acc += got == 1; }
                else {
                    invalid++;
                    invalid_acc += got == 1;
                    if (got == 1 && !first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s: %.300s", names[i], text.s);
                }
            }
            st_grammar_unref(g);
        }
        free(schema);
        json_decref(doc);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(text.s);
    fprintf(stderr, "maskbench sample: %ld files, %ld compiled, valid accepted %ld / %ld, invalid accepted %ld / %ld\n",
            files, compiled, valid_acc, valid, invalid_acc, invalid);
    CHECK(files == 200, "only %ld files", files);
    CHECK(invalid_acc == 0, "%ld invalid instances accepted, first %s", invalid_acc, first_bad);
    CHECK(compiled >= 150 && valid_acc * 100 >= valid * 95, "compiled %ld, valid accepted %ld / %ld", compiled, valid_acc, valid);
}

int main(void) {
    json_error_t je;
    json_t *cases = json_load_file("tests/data/schema_cases.json", 0, &je);
    if (!json_is_array(cases)) {
        printf("FAIL schema_cases: tests/data/schema_cases.json: %s\n", je.text);
        return 1;
    }
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        char name[160];
        snprintf(name, sizeof name, "case_%s", json_string_value(json_object_get(c, "name")));
        the_case = c;
        harness_run(name, run_case);
    }
    json_decref(cases);
    RUN(test_nullable_openapi);
    RUN(test_disable_any_whitespace);
    RUN(test_whitespace_pattern);
    RUN(test_whitespace_bounded);
    RUN(test_json_object_kind);
    RUN(test_property_order);
    RUN(test_additional_key_spellings);
    RUN(test_integer_ranges_exhaustive);
    RUN(test_multiple_of_exhaustive);
    RUN(test_error_not_json);
    RUN(test_error_ten_megabytes);
    RUN(test_error_deep_nesting);
    RUN(test_error_recursive_allof);
    RUN(test_error_pinned_anyof_bomb);
    RUN(test_error_not_a_schema);
    RUN(test_rule_names_prefixed);
    RUN(test_maskbench_sample);
    free(mask);
    st_vocab_free(sv);
    tokenizer_free(stories);
    return harness_done();
}

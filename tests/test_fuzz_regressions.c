/*
 * test_fuzz_regressions.c - replays fuzz inputs through the fuzz targets in
 * the ordinary test suite (gcc, and ASan/UBSan under make SAN=1).
 *
 * Every libFuzzer target fuzz/fuzz_<name>.c is compiled in here with
 * FUZZ_NO_MAIN, so the same code -- including its checks of round trips and
 * invariants -- runs on every file in
 *   tests/fuzz_regressions/<name>/   inputs that once crashed or failed a
 *                                    check (each stays here once fixed), and
 *   fuzz/corpus/<name>/              the committed seed corpus.
 * A failed check is a FAIL line naming the input file; a memory error is a
 * sanitizer report in the SAN=1 build. One test per target.
 */
/* checks: 13 */
#include <dirent.h>
#include <stdarg.h>

#include "harness.h"

static const char *fuzz_current_input;
static void fuzz_report(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define FUZZ_REPORT(...) fuzz_report(__FILE__, __LINE__, __VA_ARGS__)
#define FUZZ_NO_MAIN

#include "../fuzz/fuzz_chat_template.c"
#include "../fuzz/fuzz_config.c"
#include "../fuzz/fuzz_detokenizer.c"
#include "../fuzz/fuzz_encode.c"
#include "../fuzz/fuzz_gbnf.c"
#include "../fuzz/fuzz_gguf.c"
#include "../fuzz/fuzz_openai_request.c"
#include "../fuzz/fuzz_regex.c"
#include "../fuzz/fuzz_safetensors.c"
#include "../fuzz/fuzz_schema.c"
#include "../fuzz/fuzz_tokenizer_json.c"
#include "../fuzz/fuzz_tool_parser.c"

static void fuzz_report(const char *file, int line, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    harness_fail(file, line, fuzz_current_input ? fuzz_current_input : "?", "%s", msg);
}

static int fuzz_cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs one_input on every regular file in dir (sorted); returns how many, or
 * -1 if a file could not be read. A missing dir is 0 inputs. */
static int fuzz_replay_dir(const char *dir, int (*one_input)(const uint8_t *, size_t)) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    int n = 0, cap = 0, done = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".py")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, fuzz_cmp_names);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        long size = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)size + 1)) != NULL && fread(buf, 1, (size_t)size, f) == (size_t)size) {
            fuzz_current_input = path;
            one_input(buf, (size_t)size); /* exactly size bytes: ASan sees overreads */
            fuzz_current_input = NULL;
            done++;
        } else {
            harness_fail(__FILE__, __LINE__, path, "cannot read");
            done = -1;
        }
        free(buf);
        if (f) fclose(f);
        if (done < 0) break;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return done;
}

/* Replays the regression inputs and the seeds of one target; at least one input. */
static void fuzz_replay(const char *name, int (*init)(void), int (*one_input)(const uint8_t *, size_t)) {
    char regress[256], seeds[256];
    snprintf(regress, sizeof regress, "tests/fuzz_regressions/%s", name);
    snprintf(seeds, sizeof seeds, "fuzz/corpus/%s", name);
    CHECK(init() == 0, "%s: init failed", name);
    int a = fuzz_replay_dir(regress, one_input);
    CHECK(a >= 0);
    int b = fuzz_replay_dir(seeds, one_input);
    CHECK(b >= 0);
    CHECK(a + b > 0, "no inputs for %s in %s or %s", name, regress, seeds);
}

TEST(fuzz_safetensors) { fuzz_replay("safetensors", fuzz_safetensors_init, fuzz_safetensors_one); }
TEST(fuzz_gguf) { fuzz_replay("gguf", fuzz_gguf_init, fuzz_gguf_one); }
TEST(fuzz_config) { fuzz_replay("config", fuzz_config_init, fuzz_config_one); }
TEST(fuzz_tokenizer_json) { fuzz_replay("tokenizer_json", fuzz_tokenizer_json_init, fuzz_tokenizer_json_one); }
TEST(fuzz_encode) { fuzz_replay("encode", fuzz_encode_init, fuzz_encode_one); }
TEST(fuzz_detokenizer) { fuzz_replay("detokenizer", fuzz_detokenizer_init, fuzz_detokenizer_one); }
TEST(fuzz_openai_request) { fuzz_replay("openai_request", fuzz_openai_request_init, fuzz_openai_request_one); }
TEST(fuzz_gbnf) { fuzz_replay("gbnf", fuzz_gbnf_init, fuzz_gbnf_one); }
TEST(fuzz_regex) { fuzz_replay("regex", fuzz_regex_init, fuzz_regex_one); }
TEST(fuzz_schema) { fuzz_replay("schema", fuzz_schema_init, fuzz_schema_one); }
TEST(fuzz_chat_template) { fuzz_replay("chat_template", fuzz_chat_template_init, fuzz_chat_template_one); }
TEST(fuzz_tool_parser) { fuzz_replay("tool_parser", fuzz_tool_parser_init, fuzz_tool_parser_one); }

/* The checks themselves must be able to fail: a round trip that is off by
 * one byte, and a safetensors file whose tensor lies past its data. */
TEST(fuzz_checks_can_fail) {
    CHECK(fuzz_utf8_valid("a\xc3\xa9", 3) && !fuzz_utf8_valid("\xc3", 1) && !fuzz_utf8_valid("\xed\xa0\x80", 3) &&
          !fuzz_utf8_valid("\xc0\xaf", 2) && !fuzz_utf8_valid("\xf4\x90\x80\x80", 4));
    size_t n = 0;
    char *s = fuzz_utf8_lossy("a\xf0\x9f\x98" "b\xff", 6, &n);
    CHECK(s && n == 8 && !memcmp(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd", 8), "lossy gave %zu bytes", n);
    free(s);
    CHECK(fuzz_encode_init() == 0);
    size_t expect_len;
    char *e = fuzz_encode_expect(FUZZ_TOK_QWEN3, "e\xcc\x81", 3, &expect_len); /* NFC: U+00E9 */
    CHECK(e && expect_len == 2 && !memcmp(e, "\xc3\xa9", 2));
    free(e);
    CHECK(fuzz_encode_expect(FUZZ_TOK_LLAMA3, "a .", 3, &expect_len) == NULL);
    CHECK(fuzz_encode_expect(FUZZ_TOK_STORIES, "<s>x", 4, &expect_len) == NULL);
}

int main(void) {
    RUN(fuzz_checks_can_fail);
    RUN(fuzz_safetensors);
    RUN(fuzz_gguf);
    RUN(fuzz_config);
    RUN(fuzz_tokenizer_json);
    RUN(fuzz_encode);
    RUN(fuzz_detokenizer);
    RUN(fuzz_openai_request);
    RUN(fuzz_chat_template);
    RUN(fuzz_tool_parser);
    RUN(fuzz_gbnf);
    RUN(fuzz_regex);
    RUN(fuzz_schema);
    for (int i = 0; i < FUZZ_TOK_COUNT; i++) tokenizer_free(fuzz_toks[i]);
    for (int i = 0; i < 2; i++) free(fuzz_template_real[i]);
    st_vocab_free(fuzz_gbnf_vocab);
    tokenizer_free(fuzz_gbnf_tok);
    return harness_done();
}

/*
 * cmd_tokenize.c - `vllmc tokenize` and `vllmc detokenize`: one JSON value
 * per line on stdin, one per line on stdout.
 *
 *   vllmc tokenize [--model DIR] [--no-special-tokens]
 *       JSON strings -> JSON arrays of token ids. add_special_tokens is on
 *       by default, as in vLLM's /tokenize.
 *   vllmc detokenize [--model DIR] [--skip-special-tokens] [--stream]
 *       JSON arrays of token ids -> JSON strings. --stream decodes with the
 *       incremental detokenizer instead and prints, per line, the JSON array
 *       of pieces it emitted (one per id, then the flush); their
 *       concatenation is the full decode.
 *
 * Both run the same loop (run_lines): flags, the tokenizer, then each line
 * through the command's handler. A line the handler cannot take (not the
 * JSON expected, ids outside the vocabulary) stops the run with a message
 * naming the line (exit 1).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "cli/cli.h"
#include "cli/model_alias.h"
#include "tokenizer/tokenizer.h"

/* A command's on/off flags (the loop takes --model itself). */
typedef struct line_flag {
    const char *name;
    bool *value;                     /* set to true when given */
} line_flag;

/* One line's work: prints its output line, or returns false after setting the
 * error message (vllm_error) for run_lines to print with the line number. */
typedef bool (*line_fn)(const tokenizer *tok, const char *line, size_t len, void *ctx);

static int run_lines(const char *cmd, int argc, char **argv, const line_flag *flags, int num_flags,
                     void (*usage)(FILE *), line_fn fn, void *ctx) {
    const char *model = cli_default_model_dir();
    for (int i = 1; i < argc; i++) {
        int f = 0;
        while (f < num_flags && strcmp(argv[i], flags[f].name)) f++;
        if (f < num_flags) *flags[f].value = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strncmp(argv[i], "--model=", 8)) model = argv[i] + 8;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vllmc %s: unknown option '%s'\n", cmd, argv[i]);
            usage(stderr);
            return 2;
        }
    }
    tokenizer *tok;
    if (model_alias_resolve(&model, NULL) != VLLM_OK || tokenizer_load(model, &tok) != VLLM_OK) {
        fprintf(stderr, "vllmc %s: %s\n", cmd, vllm_errmsg());
        return 1;
    }
    int status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    while (status == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (!fn(tok, line, (size_t)n, ctx)) {
            fprintf(stderr, "vllmc %s: stdin line %ld: %s\n", cmd, lineno, vllm_errmsg());
            status = 1;
        }
    }
    free(line);
    tokenizer_free(tok);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "vllmc %s: write error on stdout\n", cmd);
        status = 1;
    }
    return status;
}

/* ---- tokenize ----------------------------------------------------------- */

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: vllmc tokenize [--model DIR] [--no-special-tokens]\n"
               "Reads one JSON string per line on stdin, prints one JSON array of token ids per line.\n"
               "  --model DIR            a model directory with tokenizer.json, a .gguf file, or\n"
               "                         smollm2 / gemma3 (scripts/fetch_models.sh) (default: %s)\n"
               "  --no-special-tokens    do not add BOS/EOS etc. (add_special_tokens=false)\n",
            cli_default_model_dir());
}

static bool tokenize_line(const tokenizer *tok, const char *line, size_t len, void *ctx) {
    bool no_special = *(const bool *)ctx;
    json_error_t err;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!json_is_string(j)) {
        json_decref(j);
        vllm_error(VLLM_ERR_INVALID, "expected a JSON string%s%s", j ? "" : ": ", j ? "" : err.text);
        return false;
    }
    int32_t *ids, n_ids;
    vllm_status rc = tokenizer_encode(tok, json_string_value(j), json_string_length(j), !no_special, &ids, &n_ids);
    json_decref(j);
    if (rc != VLLM_OK) return false;
    putchar('[');
    for (int32_t i = 0; i < n_ids; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]\n", stdout);
    free(ids);
    return true;
}

int cmd_tokenize(int argc, char **argv) {
    bool no_special = false;
    line_flag flags[] = {{"--no-special-tokens", &no_special}};
    return run_lines("tokenize", argc, argv, flags, 1, tokenize_usage, tokenize_line, &no_special);
}

/* ---- detokenize --------------------------------------------------------- */

static void detokenize_usage(FILE *f) {
    fprintf(f, "usage: vllmc detokenize [--model DIR] [--skip-special-tokens] [--stream]\n"
               "Reads one JSON array of token ids per line on stdin, prints one JSON string per line.\n"
               "  --model DIR             a model directory with tokenizer.json, a .gguf file, or\n"
               "                          smollm2 / gemma3 (scripts/fetch_models.sh) (default: %s)\n"
               "  --skip-special-tokens   leave special tokens (BOS, EOS, ...) out of the text\n"
               "  --stream                print the incremental detokenizer's pieces as a JSON array\n",
            cli_default_model_dir());
}

typedef struct detok_ctx {
    bool skip, stream;
    int32_t *ids;                    /* a line's ids, reused */
    size_t cap;
} detok_ctx;

/* Prints s[0..n) as a JSON string (no newline). */
static void print_json_string(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(out ? out : "null", stdout);
    free(out);
    json_decref(j);
}

/* Streams ids through a detokenizer, printing the pieces as a JSON array. */
static bool print_stream(const tokenizer *tok, const int32_t *ids, int32_t n, bool skip) {
    detokenizer *d;
    if (detokenizer_create(tok, NULL, 0, skip, &d) != VLLM_OK) return false;
    putchar('[');
    for (int32_t i = 0; i <= n; i++) {
        const char *piece;
        size_t len;
        vllm_status rc = i < n ? detokenizer_push(d, ids[i], &piece, &len) : detokenizer_flush(d, &piece, &len);
        if (rc != VLLM_OK) {
            detokenizer_free(d);
            return false;
        }
        if (i) putchar(',');
        print_json_string(piece, len);
    }
    putchar(']');
    detokenizer_free(d);
    return true;
}

static bool detokenize_line(const tokenizer *tok, const char *line, size_t len, void *ctx) {
    detok_ctx *c = ctx;
    json_error_t err;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY, &err), *v;
    size_t i, n = json_array_size(j);
    const char *bad = !json_is_array(j) ? "expected a JSON array of token ids" : NULL;
    if (!bad && buf_grow((void **)&c->ids, &c->cap, n, sizeof *c->ids) != VLLM_OK) bad = "out of memory";
    json_array_foreach(j, i, v) {
        if (bad) break;
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < INT32_MIN || x > INT32_MAX) bad = "ids must be 32-bit integers";
        else c->ids[i] = (int32_t)x;
    }
    json_decref(j);
    if (bad) {
        vllm_error(VLLM_ERR_INVALID, "%s%s%s", bad, j ? "" : ": ", j ? "" : err.text);
        return false;
    }
    if (c->stream) {
        if (!print_stream(tok, c->ids, (int32_t)n, c->skip)) return false;
    } else {
        char *text;
        size_t tlen;
        if (tokenizer_decode(tok, c->ids, (int32_t)n, c->skip, &text, &tlen) != VLLM_OK) return false;
        print_json_string(text, tlen);
        free(text);
    }
    putchar('\n');
    return true;
}

int cmd_detokenize(int argc, char **argv) {
    detok_ctx c = {0};
    line_flag flags[] = {{"--skip-special-tokens", &c.skip}, {"--stream", &c.stream}};
    int status = run_lines("detokenize", argc, argv, flags, 2, detokenize_usage, detokenize_line, &c);
    free(c.ids);
    return status;
}

/*
 * cmd_detokenize.c - `vllmc detokenize`: JSON arrays of token ids on stdin,
 * one per line -> JSON strings on stdout, one per line.
 *
 *   vllmc detokenize [--model DIR] [--skip-special-tokens] [--stream]
 *
 * --stream decodes with the incremental detokenizer instead and prints, per
 * line, the JSON array of pieces it emitted (one per id, then the flush); their
 * concatenation is the full decode. Ids outside the vocabulary, or a line that
 * is not an array of integers, stop the run with a message (exit 1).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static void detokenize_usage(FILE *f) {
    fprintf(f, "usage: vllmc detokenize [--model DIR] [--skip-special-tokens] [--stream]\n"
               "Reads one JSON array of token ids per line on stdin, prints one JSON string per line.\n"
               "  --model DIR             model directory with tokenizer.json (default: %s)\n"
               "  --skip-special-tokens   leave special tokens (BOS, EOS, ...) out of the text\n"
               "  --stream                print the incremental detokenizer's pieces as a JSON array\n",
            cli_default_model_dir());
}

/* Prints s[0..n) as a JSON string (no newline). */
static void print_json_string(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(out ? out : "null", stdout);
    free(out);
    json_decref(j);
}

/* Streams ids through a detokenizer, printing the pieces as a JSON array. */
static int print_stream(const tokenizer *tok, const int32_t *ids, int32_t n, bool skip) {
    detokenizer *d;
    if (detokenizer_create(tok, NULL, 0, skip, &d)) return 1;
    putchar('[');
    for (int32_t i = 0; i <= n; i++) {
        const char *piece;
        size_t len;
        vllm_status rc = i < n ? detokenizer_push(d, ids[i], &piece, &len) : detokenizer_flush(d, &piece, &len);
        if (rc) {
            detokenizer_free(d);
            return 1;
        }
        if (i) putchar(',');
        print_json_string(piece, len);
    }
    putchar(']');
    detokenizer_free(d);
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = cli_default_model_dir();
    bool skip = false, stream = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strncmp(argv[i], "--model=", 8)) model = argv[i] + 8;
        else if (!strcmp(argv[i], "--skip-special-tokens")) skip = true;
        else if (!strcmp(argv[i], "--stream")) stream = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            detokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vllmc detokenize: unknown option '%s'\n", argv[i]);
            detokenize_usage(stderr);
            return 2;
        }
    }
    tokenizer *tok;
    if (tokenizer_load(model, &tok) != VLLM_OK) {
        fprintf(stderr, "vllmc detokenize: %s\n", vllm_errmsg());
        return 1;
    }
    int status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int32_t *ids = NULL;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t err;
        json_t *j = json_loadb(line, (size_t)n, JSON_DECODE_ANY, &err), *v;
        size_t i, len = json_array_size(j);
        int32_t *grown = json_is_array(j) ? realloc(ids, (len ? len : 1) * sizeof *ids) : NULL;
        if (grown) ids = grown;
        const char *bad = !json_is_array(j) ? "expected a JSON array of token ids" : grown ? NULL : "out of memory";
        json_array_foreach(j, i, v) {
            if (bad) break;
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (!json_is_integer(v) || x < INT32_MIN || x > INT32_MAX) bad = "ids must be 32-bit integers";
            else ids[i] = (int32_t)x;
        }
        json_decref(j);
        if (bad) {
            fprintf(stderr, "vllmc detokenize: stdin line %ld: %s%s%s\n", lineno, bad, j ? "" : ": ",
                    j ? "" : err.text);
            status = 1;
            break;
        }
        if (stream) {
            if (print_stream(tok, ids, (int32_t)len, skip)) {
                fprintf(stderr, "vllmc detokenize: stdin line %ld: %s\n", lineno, vllm_errmsg());
                status = 1;
                break;
            }
        } else {
            char *text;
            size_t tlen;
            if (tokenizer_decode(tok, ids, (int32_t)len, skip, &text, &tlen)) {
                fprintf(stderr, "vllmc detokenize: stdin line %ld: %s\n", lineno, vllm_errmsg());
                status = 1;
                break;
            }
            print_json_string(text, tlen);
            free(text);
        }
        putchar('\n');
    }
    free(ids);
    free(line);
    tokenizer_free(tok);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "vllmc detokenize: write error on stdout\n");
        status = 1;
    }
    return status;
}

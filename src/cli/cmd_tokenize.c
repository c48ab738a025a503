/*
 * cmd_tokenize.c - `vllmc tokenize`: JSON strings on stdin, one per line ->
 * JSON arrays of token ids on stdout, one per line.
 *
 *   vllmc tokenize [--model DIR] [--no-special-tokens]
 *
 * add_special_tokens is on by default, as in vLLM's /tokenize. A line that is
 * not a JSON string stops the run with a message naming the line (exit 1).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: vllmc tokenize [--model DIR] [--no-special-tokens]\n"
               "Reads one JSON string per line on stdin, prints one JSON array of token ids per line.\n"
               "  --model DIR            model directory with tokenizer.json (default: %s)\n"
               "  --no-special-tokens    do not add BOS/EOS etc. (add_special_tokens=false)\n",
            cli_default_model_dir());
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = cli_default_model_dir();
    bool add_special = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strncmp(argv[i], "--model=", 8)) model = argv[i] + 8;
        else if (!strcmp(argv[i], "--no-special-tokens")) add_special = false;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vllmc tokenize: unknown option '%s'\n", argv[i]);
            tokenize_usage(stderr);
            return 2;
        }
    }
    tokenizer *tok;
    if (tokenizer_load(model, &tok) != VLLM_OK) {
        fprintf(stderr, "vllmc tokenize: %s\n", vllm_errmsg());
        return 1;
    }
    int status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t err;
        json_t *j = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!json_is_string(j)) {
            fprintf(stderr, "vllmc tokenize: stdin line %ld: expected a JSON string%s%s\n", lineno,
                    j ? "" : ": ", j ? "" : err.text);
            json_decref(j);
            status = 1;
            break;
        }
        int32_t *ids;
        int32_t n_ids;
        if (tokenizer_encode(tok, json_string_value(j), json_string_length(j), add_special, &ids, &n_ids)) {
            fprintf(stderr, "vllmc tokenize: stdin line %ld: %s\n", lineno, vllm_errmsg());
            json_decref(j);
            status = 1;
            break;
        }
        json_decref(j);
        putchar('[');
        for (int32_t i = 0; i < n_ids; i++) printf(i ? ",%d" : "%d", ids[i]);
        fputs("]\n", stdout);
        free(ids);
    }
    free(line);
    tokenizer_free(tok);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "vllmc tokenize: write error on stdout\n");
        status = 1;
    }
    return status;
}

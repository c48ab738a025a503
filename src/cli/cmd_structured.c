/*
 * cmd_structured.c - `vllmc structured check`: compile a constraint against
 * a tokenizer and walk candidate texts through the matcher exactly as
 * generation would, for the acceptance checks and for debugging grammars.
 *
 *   vllmc structured check --tokenizer DIR (--json-schema FILE | --regex R |
 *       --grammar FILE | --choice S ...) [--disable-any-whitespace]
 *
 * Prints {"compile_us": N} (or, when the constraint does not compile, the
 * error on stderr and exit 2), then for each stdin line (a JSON string):
 * tokenize it without special tokens, and per token fill the mask, check
 * the token's bit and accept it; one line per candidate:
 *
 *   {"accepted": bool, "complete": bool, "tokens": N, "rejected_at": i|null,
 *    "mask_us_max": X, "mask_us_total": Y}
 *
 * accepted: every token was in its step's mask; complete: after the last
 * token the mask allows EOS (the grammar can end; st_matcher_can_end when
 * the tokenizer has no EOS). The mask after the last token is timed too: it
 * is the step that would sample EOS. --print-masks (for the tests'
 * comparison with xgrammar) prints before each candidate's line one line
 * per step: {"mask": hex of the 32-bit words, "id": the token taken or -1}.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

static void structured_usage(FILE *f) {
    fprintf(f, "usage: vllmc structured check --tokenizer DIR (--json-schema FILE | --regex R | --grammar FILE |\n"
               "                              --choice S ...) [--disable-any-whitespace]\n"
               "Compiles the constraint, prints {\"compile_us\": N}, then reads candidate texts (one JSON\n"
               "string per line on stdin) and prints per candidate whether the matcher accepts its tokens:\n"
               "{\"accepted\", \"complete\", \"tokens\", \"rejected_at\", \"mask_us_max\", \"mask_us_total\"}.\n"
               "  --tokenizer DIR            a directory with tokenizer.json, or a .gguf file\n"
               "  --json-schema FILE         a JSON schema\n"
               "  --regex R                  a regular expression (whole-string match)\n"
               "  --grammar FILE             a GBNF grammar (start rule `root`)\n"
               "  --choice S ...             the output is exactly one of the strings\n"
               "  --disable-any-whitespace   JSON without whitespace between tokens\n"
               "Exit status: 0, 2 when the constraint does not compile (message on stderr), 1 on other errors.\n");
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    size_t cap = 0, n = 0;
    while (1) {
        if (n + 4096 + 1 > cap) {
            char *t = realloc(s, cap = (n + 4096 + 1) * 2);
            if (!t) {
                free(s);
                fclose(f);
                return NULL;
            }
            s = t;
        }
        size_t got = fread(s + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    *len = n;
    return s;
}

/* walks one candidate; prints its line */
static bool check_line(const tokenizer *tok, const st_vocab *v, st_grammar *g, uint32_t *mask, bool print_masks,
                       const char *line, size_t len) {
    json_error_t err;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!json_is_string(j)) {
        json_decref(j);
        vllm_error(VLLM_ERR_INVALID, "expected a JSON string%s%s", j ? "" : ": ", j ? "" : err.text);
        return false;
    }
    int32_t *ids, n_ids;
    vllm_status rc = tokenizer_encode(tok, json_string_value(j), json_string_length(j), false, &ids, &n_ids);
    json_decref(j);
    if (rc) return false;
    st_matcher *m;
    if (st_matcher_new(g, &m)) {
        free(ids);
        return false;
    }
    double total = 0, max = 0;
    int32_t rejected = -1;
    bool complete = false;
    int32_t eos = tokenizer_eos_id(tok);
    for (int32_t i = 0; i <= n_ids; i++) {
        double t0 = clock_now();
        st_matcher_fill_mask(m, mask);
        double us = (clock_now() - t0) * 1e6;
        total += us;
        if (us > max) max = us;
        if (print_masks) { /* for tests/ref/structured_ref.py: the mask in hex words, then the id */
            printf("{\"mask\": \"");
            for (int32_t w = 0; w < st_mask_words(v); w++) printf("%08x", mask[w]);
            printf("\", \"id\": %d}\n", i < n_ids ? ids[i] : -1);
        }
        if (i == n_ids) {
            complete = eos >= 0 && eos < st_vocab_size(v) ? (mask[eos >> 5] >> (eos & 31)) & 1 : st_matcher_can_end(m);
            break;
        }
        int32_t id = ids[i];
        bool in_mask = id >= 0 && id < st_vocab_size(v) && ((mask[id >> 5] >> (id & 31)) & 1);
        if (!in_mask || !st_matcher_accept_token(m, id)) {
            rejected = i;
            break;
        }
    }
    char rej[32] = "null";
    if (rejected >= 0) snprintf(rej, sizeof rej, "%d", rejected);
    printf("{\"accepted\": %s, \"complete\": %s, \"tokens\": %d, \"rejected_at\": %s, \"mask_us_max\": %.3f, "
           "\"mask_us_total\": %.3f}\n",
           rejected < 0 ? "true" : "false", rejected < 0 && complete ? "true" : "false", n_ids, rej, max, total);
    st_matcher_free(m);
    free(ids);
    return true;
}

static int structured_check(int argc, char **argv) {
    const char *tok_dir = NULL, *schema_file = NULL, *regex = NULL, *grammar_file = NULL;
    bool compact = false, print_masks = false;
    json_t *choices = json_array();
    int kinds = 0, status = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(a, "--json-schema") && i + 1 < argc) schema_file = argv[++i], kinds++;
        else if (!strcmp(a, "--regex") && i + 1 < argc) regex = argv[++i], kinds++;
        else if (!strcmp(a, "--grammar") && i + 1 < argc) grammar_file = argv[++i], kinds++;
        else if (!strcmp(a, "--choice") && i + 1 < argc) {
            kinds++;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) json_array_append_new(choices, json_string(argv[++i]));
        } else if (!strcmp(a, "--disable-any-whitespace")) compact = true;
        else if (!strcmp(a, "--print-masks")) print_masks = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            structured_usage(stdout);
            json_decref(choices);
            return 0;
        } else {
            fprintf(stderr, "vllmc structured check: unknown or incomplete option '%s'\n", a);
            structured_usage(stderr);
            json_decref(choices);
            return 2;
        }
    }
    if (!tok_dir || kinds != 1) {
        fprintf(stderr, "vllmc structured check: %s\n",
                !tok_dir ? "--tokenizer is required" : "give exactly one of --json-schema, --regex, --grammar, --choice");
        structured_usage(stderr);
        json_decref(choices);
        return 2;
    }
    tokenizer *tok = NULL;
    st_vocab *v = NULL;
    st_grammar *g = NULL;
    uint32_t *mask = NULL;
    char *text = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    st_spec spec = {.disable_any_whitespace = compact};
    if (tokenizer_load(tok_dir, &tok) || st_vocab_new(tok, NULL, 0, &v)) {
        fprintf(stderr, "vllmc structured check: %s\n", vllm_errmsg());
        goto done;
    }
    if (schema_file || grammar_file) {
        const char *path = schema_file ? schema_file : grammar_file;
        if (!(text = read_file(path, &len))) {
            fprintf(stderr, "vllmc structured check: cannot read %s\n", path);
            goto done;
        }
        spec.kind = schema_file ? ST_JSON_SCHEMA : ST_GRAMMAR;
    } else if (regex) {
        spec.kind = ST_REGEX;
        text = strdup(regex);
        len = strlen(regex);
    } else {
        spec.kind = ST_CHOICE;
        text = json_dumps(choices, JSON_COMPACT);
        len = text ? strlen(text) : 0;
    }
    if (!text) {
        fprintf(stderr, "vllmc structured check: out of memory\n");
        goto done;
    }
    spec.text = text;
    spec.len = len;
    double t0 = clock_now();
    if (st_compile(&spec, v, &g)) {
        fprintf(stderr, "vllmc structured check: %s\n", vllm_errmsg());
        status = 2;
        goto done;
    }
    printf("{\"compile_us\": %.0f}\n", (clock_now() - t0) * 1e6);
    mask = malloc((size_t)st_mask_words(v) * sizeof *mask);
    if (!mask) goto done;
    status = 0;
    ssize_t n;
    long lineno = 0;
    while (status == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (!check_line(tok, v, g, mask, print_masks, line, (size_t)n)) {
            fprintf(stderr, "vllmc structured check: stdin line %ld: %s\n", lineno, vllm_errmsg());
            status = 1;
        }
        fflush(stdout);
    }
done:
    free(line);
    free(mask);
    free(text);
    st_grammar_unref(g);
    st_vocab_free(v);
    tokenizer_free(tok);
    json_decref(choices);
    return status;
}

int cmd_structured(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "check")) return structured_check(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        structured_usage(stdout);
        return 0;
    }
    fprintf(stderr, "vllmc structured: expected the subcommand 'check'\n");
    structured_usage(stderr);
    return 2;
}

/*
 * structured_masks.c - per-token mask times of the structured matcher.
 *
 *   build/bench/structured_masks TOKENIZER_DIR GRAMMAR.gbnf TEXTS.jsonl [REPEAT]
 *
 * Compiles the grammar, then walks each text (one JSON string per line,
 * tokenized without special tokens) REPEAT times (default 1) with a fresh
 * matcher, timing every fill_mask; prints compile time and the per-token
 * mask percentiles (µs). The first walk of a text meets the grammar's cold
 * caches, the repeats warm ones: REPEAT 1 is the pessimistic number.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "structured/structured.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR GRAMMAR.gbnf TEXTS.jsonl [REPEAT]\n", argv[0]);
        return 2;
    }
    int repeat = argc > 4 ? atoi(argv[4]) : 1;
    tokenizer *t;
    st_vocab *v;
    if (tokenizer_load(argv[1], &t) || st_vocab_new(t, NULL, 0, &v)) {
        fprintf(stderr, "%s\n", vllm_errmsg());
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    static char gbnf[1 << 20];
    size_t glen = fread(gbnf, 1, sizeof gbnf - 1, f);
    fclose(f);
    st_grammar *g;
    double t0 = clock_now();
    if (st_compile_gbnf(gbnf, glen, v, &g)) {
        fprintf(stderr, "%s\n", vllm_errmsg());
        return 1;
    }
    printf("compile %.1f us\n", (clock_now() - t0) * 1e6);
    f = fopen(argv[3], "rb");
    if (!f) return 1;
    double *times = NULL;
    size_t n = 0, cap = 0, rejected = 0;
    uint32_t *mask = malloc((size_t)st_mask_words(v) * 4);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        json_t *j = json_loadb(line, (size_t)len, JSON_DECODE_ANY, NULL);
        if (!json_is_string(j)) continue;
        int32_t *ids, nid;
        tokenizer_encode(t, json_string_value(j), json_string_length(j), false, &ids, &nid);
        json_decref(j);
        for (int r = 0; r < repeat; r++) {
            st_matcher *m;
            st_matcher_new(g, &m);
            for (int32_t i = 0; i <= nid; i++) {
                double a = clock_now();
                st_matcher_fill_mask(m, mask);
                double us = (clock_now() - a) * 1e6;
                if (n == cap) times = realloc(times, (cap = cap ? cap * 2 : 1024) * sizeof *times);
                times[n++] = us;
                if (i == nid) break;
                if (!((mask[ids[i] >> 5] >> (ids[i] & 31)) & 1) || !st_matcher_accept_token(m, ids[i])) {
                    rejected++;
                    break;
                }
            }
            st_matcher_free(m);
        }
        free(ids);
    }
    fclose(f);
    qsort(times, n, sizeof *times, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += times[i];
    if (n)
        printf("masks %zu (rejected texts %zu): avg %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f us\n", n, rejected,
               sum / (double)n, times[n / 2], times[n * 9 / 10], times[n * 99 / 100], times[n - 1]);
    free(times);
    free(mask);
    free(line);
    st_grammar_unref(g);
    st_vocab_free(v);
    tokenizer_free(t);
    return 0;
}

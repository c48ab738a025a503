/*
 * cmd_bench_structured.c - `vllmc bench structured`: JSONSchemaBench's
 * MaskBench over a directory of its files, one thread.
 *
 *   vllmc bench structured --tokenizer DIR --data DIR [--limit N] [--every K]
 *       [--verbose] [--json] [--dump-instances]
 *
 * For each file ({"schema", "tests": [{"valid", "data"}]}, in name order,
 * every K-th, at most N): compile the schema (st_compile: st_schema_to_gbnf
 * then st_compile_gbnf against the vocabulary; timed); for each test,
 * serialize `data` as Python's json.dumps(data, ensure_ascii=False) does
 * (", " and ": ", Python's float repr, insertion order), tokenize it without
 * special tokens and walk it: per token fill the mask (timed), check the
 * token's bit, accept it; after the last token fill the mask once more
 * (timed: the step that would sample EOS) and require EOS in it. A valid
 * instance must be accepted to the end; an invalid one must be rejected at
 * some step. Prints the compile-time and per-token mask-time percentiles
 * (avg, p50, p75, p90, p95, p99, p99.9, max), schemas compiled / refused /
 * passing (compiled, every valid accepted, every invalid rejected), valid
 * and invalid instances accepted, and the commonest refusal reasons (--json:
 * one JSON line with the same figures, for bench/structured/side_by_side.sh).
 * --dump-instances prints each instance's text instead (one JSON string a
 * line), for checking the serializer against Python's.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli/bench_pyjson.h"
#include "cli/bench_stats.h"
#include "cli/cmd_bench.h"
#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

typedef struct dvec { double *x; size_t n, cap; } dvec;

static int dvec_push(dvec *v, double x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 4096;
        double *nx = realloc(v->x, nc * sizeof *nx);
        if (!nx) return -1;
        v->x = nx;
        v->cap = nc;
    }
    v->x[v->n++] = x;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct reason { char msg[96]; int n; } reason;

static void add_reason(reason **rs, int *n, const char *full) {
    /* the message without its JSON path: "properties.x: not is not supported" -> "not is not supported" */
    const char *m = strstr(full, ": ");
    m = m ? m + 2 : full;
    char key[96];
    snprintf(key, sizeof key, "%s", m);
    for (int i = 0; i < *n; i++)
        if (!strcmp((*rs)[i].msg, key)) { (*rs)[i].n++; return; }
    reason *nr = realloc(*rs, sizeof *nr * (size_t)(*n + 1));
    if (!nr) return;
    *rs = nr;
    snprintf(nr[*n].msg, sizeof nr[*n].msg, "%s", key);
    nr[*n].n = 1;
    (*n)++;
}

static int cmp_reason(const void *a, const void *b) { return ((const reason *)b)->n - ((const reason *)a)->n; }

/* {"avg", "p50", ..., "max", "n"} of v (sorted by print_pcts or here) */
static json_t *pcts_json(dvec *v, double scale) {
    bench_stats_sort(v->x, v->n);
    json_t *o = json_object();
    json_object_set_new(o, "avg", json_real(bench_stats_mean(v->x, v->n) * scale));
    static const double ps[] = {50, 75, 90, 95, 99, 99.9};
    static const char *const names[] = {"p50", "p75", "p90", "p95", "p99", "p99.9"};
    for (int i = 0; i < 6; i++) json_object_set_new(o, names[i], json_real(bench_stats_percentile(v->x, v->n, ps[i]) * scale));
    json_object_set_new(o, "max", json_real(v->n ? v->x[v->n - 1] * scale : 0.0));
    json_object_set_new(o, "n", json_integer((json_int_t)v->n));
    return o;
}

static void print_pcts(const char *what, dvec *v, double scale, const char *unit) {
    bench_stats_sort(v->x, v->n);
    static const double ps[] = {50, 75, 90, 95, 99, 99.9};
    printf("%-16s avg %9.1f", what, bench_stats_mean(v->x, v->n) * scale);
    static const char *const names[] = {"p50", "p75", "p90", "p95", "p99", "p99.9"};
    for (int i = 0; i < 6; i++) printf("  %s %9.1f", names[i], bench_stats_percentile(v->x, v->n, ps[i]) * scale);
    printf("  max %9.1f %s (n=%zu)\n", v->n ? v->x[v->n - 1] * scale : 0.0, unit, v->n);
}

/* --cpu-time: this thread's CPU seconds, so that other processes on a
 * loaded machine do not count. */
static bool cpu_time;
static double bench_now(void) {
    if (!cpu_time) return clock_now();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmd_bench_structured(int argc, char **argv) {
    static const char usage[] =
        "usage: vllmc bench structured --tokenizer DIR --data DIR [--limit N] [--every K] [--verbose] [--json]\n"
        "                              [--cpu-time] [--slow-us N]\n"
        "JSONSchemaBench's MaskBench: compile each file's schema, walk each test instance\n"
        "(json.dumps(data, ensure_ascii=False)) token by token through the matcher; prints\n"
        "compile and per-token mask time percentiles and the accepted/refused counts. One thread.\n"
        "--cpu-time: time with the thread's CPU clock instead of the wall clock (a loaded machine).\n"
        "--slow-us N: print each mask that took N us or more (file, test, token index) on stderr.\n";
    const char *tok_dir = NULL, *data_dir = NULL;
    int32_t limit = 0, every = 1, slow_us = 0;
    bool verbose = false, dump = false, as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(a, "--data") && i + 1 < argc) data_dir = argv[++i];
        else if (!strcmp(a, "--limit") && i + 1 < argc) {
            if (!bench_parse_i32("bench structured", "--limit", argv[++i], 0, INT32_MAX, &limit)) return 2;
        } else if (!strcmp(a, "--every") && i + 1 < argc) {
            if (!bench_parse_i32("bench structured", "--every", argv[++i], 1, INT32_MAX, &every)) return 2;
        } else if (!strcmp(a, "--verbose")) verbose = true;
        else if (!strcmp(a, "--dump-instances")) dump = true;
        else if (!strcmp(a, "--json")) as_json = true;
        else if (!strcmp(a, "--cpu-time")) cpu_time = true;
        else if (!strcmp(a, "--slow-us") && i + 1 < argc) {
            if (!bench_parse_i32("bench structured", "--slow-us", argv[++i], 1, INT32_MAX, &slow_us)) return 2;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else {
            fprintf(stderr, "vllmc bench structured: unknown or incomplete option '%s'\n%s", a, usage);
            return 2;
        }
    }
    if (!data_dir || (!tok_dir && !dump)) {
        fprintf(stderr, "vllmc bench structured: --tokenizer and --data are required\n%s", usage);
        return 2;
    }
    DIR *d = opendir(data_dir);
    if (!d) {
        fprintf(stderr, "vllmc bench structured: cannot open %s\n", data_dir);
        return 1;
    }
    char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (n_names == cap_names) {
            cap_names = cap_names ? 2 * cap_names : 1024;
            char **nn = realloc(names, cap_names * sizeof *nn);
            if (!nn) break;
            names = nn;
        }
        names[n_names++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n_names, sizeof *names, cmp_name);

    int status = 1;
    tokenizer *tok = NULL;
    st_vocab *v = NULL;
    uint32_t *mask = NULL;
    dvec compile_t = {0}, mask_t = {0};
    reason *reasons = NULL;
    int n_reasons = 0;
    long files = 0, compiled = 0, refused = 0, unreadable = 0, passing = 0;
    long valid_n = 0, valid_acc = 0, invalid_n = 0, invalid_acc = 0, tokens = 0;
    strbuf text = {0};
    if (!dump) {
        if (tokenizer_load(tok_dir, &tok) || st_vocab_new(tok, NULL, 0, &v)) {
            fprintf(stderr, "vllmc bench structured: %s\n", vllm_errmsg());
            goto done;
        }
        mask = malloc(sizeof *mask * (size_t)st_mask_words(v));
        if (!mask) goto done;
    }
    int32_t eos = tok ? tokenizer_eos_id(tok) : -1;
    double t_start = clock_now();
    for (size_t fi = 0; fi < n_names; fi += (size_t)every) {
        if (limit && files >= limit) break;
        files++;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", data_dir, names[fi]);
        json_error_t je;
        json_t *doc = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        json_t *schema = json_object_get(doc, "schema"), *tests = json_object_get(doc, "tests");
        if (!doc || !schema || !json_is_array(tests)) {
            unreadable++;
            if (verbose) fprintf(stderr, "unreadable %s: %s\n", names[fi], doc ? "no schema/tests" : je.text);
            json_decref(doc);
            continue;
        }
        if (dump) {
            size_t i;
            json_t *t;
            json_array_foreach(tests, i, t) {
                text.len = 0;
                if (bench_pyjson_dumps(json_object_get(t, "data"), &text)) continue;
                json_t *js = json_stringn(text.s, text.len);
                char *line = json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT);
                printf("%s\n", line ? line : "null");
                free(line);
                json_decref(js);
            }
            json_decref(doc);
            continue;
        }
        char *schema_text = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT);
        st_spec spec = {.kind = ST_JSON_SCHEMA, .text = schema_text, .len = schema_text ? strlen(schema_text) : 0};
        st_grammar *g = NULL;
        double t0 = bench_now();
        vllm_status rc = schema_text ? st_compile(&spec, v, &g) : VLLM_ERR_NOMEM;
        double ct = bench_now() - t0;
        free(schema_text);
        if (rc) {
            refused++;
            add_reason(&reasons, &n_reasons, vllm_errmsg());
            if (verbose) fprintf(stderr, "refused %s: %s\n", names[fi], vllm_errmsg());
            json_decref(doc);
            continue;
        }
        compiled++;
        dvec_push(&compile_t, ct);
        bool pass = true;
        size_t i;
        json_t *t;
        json_array_foreach(tests, i, t) {
            bool valid = json_is_true(json_object_get(t, "valid"));
            text.len = 0;
            int32_t *ids = NULL, n_ids = 0;
            if (bench_pyjson_dumps(json_object_get(t, "data"), &text) ||
                tokenizer_encode(tok, text.s, text.len, false, &ids, &n_ids)) {
                fprintf(stderr, "vllmc bench structured: %s test %zu: %s\n", names[fi], i, vllm_errmsg());
                goto done;
            }
            st_matcher *m = NULL;
            if (st_matcher_new(g, &m)) { free(ids); goto done; }
            bool ok = true;
            for (int32_t k = 0; k <= n_ids; k++) {
                double m0 = bench_now();
                st_matcher_fill_mask(m, mask);
                double mt = bench_now() - m0;
                dvec_push(&mask_t, mt);
                if (slow_us > 0 && mt * 1e6 >= slow_us)
                    fprintf(stderr, "slow mask %.0f us: %s test %zu token %d after %.120s\n", mt * 1e6, names[fi], i, k,
                            text.s);
                if (k == n_ids) {
                    ok = eos >= 0 && eos < st_vocab_size(v) ? (mask[eos >> 5] >> (eos & 31)) & 1 : st_matcher_can_end(m);
                    break;
                }
                int32_t id = ids[k];
                if (id < 0 || id >= st_vocab_size(v) || !((mask[id >> 5] >> (id & 31)) & 1) || !st_matcher_accept_token(m, id)) {
                    ok = false;
                    break;
                }
            }
            tokens += n_ids;
            st_matcher_free(m);
            free(ids);
            if (valid) {
                valid_n++;
                valid_acc += ok;
                if (!ok) pass = false;
                if (!ok && verbose) fprintf(stderr, "valid rejected %s: %.200s\n", names[fi], text.s);
            } else {
                invalid_n++;
                invalid_acc += ok;
                if (ok) pass = false;
                if (ok) fprintf(stderr, "INVALID ACCEPTED %s: %.300s\n", names[fi], text.s);
            }
        }
        passing += pass;
        st_grammar_unref(g);
        json_decref(doc);
    }
    if (dump) { status = 0; goto done; }
    if (as_json) {
        json_t *o = json_pack("{s:s, s:I, s:f, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "engine", "ours",
                              "files", (json_int_t)files, "seconds", clock_now() - t_start, "compile_ms",
                              pcts_json(&compile_t, 1e3), "mask_us", pcts_json(&mask_t, 1e6), "compiled",
                              (json_int_t)compiled, "refused", (json_int_t)refused, "unreadable", (json_int_t)unreadable,
                              "passing", (json_int_t)passing, "valid_accepted", (json_int_t)valid_acc, "valid",
                              (json_int_t)valid_n, "invalid_accepted", (json_int_t)invalid_acc, "invalid",
                              (json_int_t)invalid_n, "tokens", (json_int_t)tokens);
        char *t = json_dumps(o, JSON_COMPACT);
        printf("%s\n", t ? t : "{}");
        free(t);
        json_decref(o);
        status = invalid_acc ? 1 : 0;
        goto done;
    }
    printf("MaskBench (%s): %ld files, %.1f s, one thread\n", data_dir, files, clock_now() - t_start);
    print_pcts("compile (ms)", &compile_t, 1e3, "ms");
    print_pcts("mask (us/token)", &mask_t, 1e6, "us");
    printf("schemas: %ld compiled, %ld refused, %ld unreadable, %ld passing (compiled, all valid accepted, all invalid rejected)\n",
           compiled, refused, unreadable, passing);
    printf("valid instances accepted: %ld / %ld\n", valid_acc, valid_n);
    printf("invalid instances accepted: %ld / %ld\n", invalid_acc, invalid_n);
    printf("tokens walked: %ld\n", tokens);
    qsort(reasons, (size_t)n_reasons, sizeof *reasons, cmp_reason);
    if (n_reasons) printf("refusals (commonest):\n");
    for (int r = 0; r < n_reasons && r < 15; r++) printf("  %5d  %s\n", reasons[r].n, reasons[r].msg);
    status = invalid_acc ? 1 : 0;
done:
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    free(text.s);
    free(compile_t.x);
    free(mask_t.x);
    free(reasons);
    free(mask);
    st_vocab_free(v);
    tokenizer_free(tok);
    return status;
}

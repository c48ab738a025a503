/*
 * cmd_bench.c - `vllmc bench latency|throughput|serve`, vLLM's benchmark
 * commands with its flags and printed labels (vllm bench ...).
 *
 *   latency     one batch of random prompts through the engine, timed end to
 *               end over --num-iters runs after --num-iters-warmup runs:
 *               `Avg latency: X seconds`, `P% percentile latency: Y seconds`.
 *   throughput  the random dataset, every prompt at once (LLM.generate):
 *               `Throughput: X requests/s, Y total tokens/s, Z output tokens/s`.
 *   serve       a load generator against an OpenAI-compatible server
 *               (cmd_bench_serve.c).
 *
 * latency and throughput run the public engine API in-process with the
 * output processor after every step (bench_generate), as vLLM's run
 * LLM.generate: outputs are detokenized unless --disable-detokenize, as
 * vLLM's benchmarks. Every request has ignore_eos, temperature 1 and top_p 1
 * as in vLLM, so output lengths are exact. The timed region is generation
 * and output processing: prompts are made, the tokenizer loaded and the
 * engine built first.
 */
#include "cli/cmd_bench.h"
#include "cli/model_alias.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli/bench_dataset.h"
#include "cli/bench_rng.h"
#include "cli/bench_stats.h"
#include "cli/cli.h"
#include "cli/engine_args.h"
#include "engine/output_processor.h"
#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

/* ---- shared helpers ----------------------------------------------------- */

const char *bench_flag_value(const char *cmd, const char *name, const char *inline_val, int argc,
                             char **argv, int *i) {
    if (inline_val) {
        (*i)++;
        return inline_val;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "vllmc %s: argument %s: expected one argument\n", cmd, name);
        return NULL;
    }
    *i += 2;
    return argv[*i - 1];
}

bool bench_parse_i32(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "vllmc %s: argument %s: '%s' is not an integer in [%d, %d]\n", cmd, flag, s, lo, hi);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

int bench_parse_int_flag(const char *cmd, const bench_int_flag *flags, size_t n, const char *name,
                         const char *iv, int argc, char **argv, int *i) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(name, flags[k].flag)) {
            const char *v = bench_flag_value(cmd, name, iv, argc, argv, i);
            return v && bench_parse_i32(cmd, name, v, flags[k].lo, INT32_MAX, flags[k].dst) ? 1 : -1;
        }
    return 0;
}

bool bench_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "vllmc %s: argument %s: '%s' is not an integer >= 0\n", cmd, flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool bench_parse_f64(const char *cmd, const char *flag, const char *s, double lo, bool allow_inf, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v) || v < lo || (isinf(v) && !allow_inf)) {
        fprintf(stderr, "vllmc %s: argument %s: '%s' is not a %snumber >= %g\n", cmd, flag, s,
                allow_inf ? "" : "finite ", lo);
        return false;
    }
    *out = v;
    return true;
}

void bench_format_float(char *buf, size_t cap, double v) {
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "inf" : "-inf");
        return;
    }
    if (isnan(v)) {
        snprintf(buf, cap, "nan");
        return;
    }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, cap, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    int exp = v == 0 ? 0 : (int)floor(log10(fabs(v)));
    snprintf(buf, cap, "%.*e", p - 1, v); /* exact exponent after rounding */
    const char *e = strchr(buf, 'e');
    if (e) exp = atoi(e + 1);
    if (exp < -4 || exp >= 16) {
        /* Python: 1e-05, 1.5e+16 */
        char mant[32];
        snprintf(mant, sizeof mant, "%.*f", p - 1, v / pow(10, exp));
        snprintf(buf, cap, "%se%c%02d", mant, exp < 0 ? '-' : '+', abs(exp));
        return;
    }
    int decimals = p - 1 - exp;
    snprintf(buf, cap, "%.*f", decimals < 1 ? 1 : decimals, v);
}

/* The vocabulary without BOS/EOS: what random prompts draw from. */
static int32_t *allowed_ids(const vllm_engine *e, int32_t *n) {
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    int32_t *ids = malloc((size_t)(info.vocab_size > 0 ? info.vocab_size : 1) * sizeof *ids);
    *n = 0;
    if (!ids) return NULL;
    for (int32_t t = 0; t < info.vocab_size; t++) {
        bool special = t == info.bos_token_id;
        for (int32_t k = 0; k < info.num_eos_token_ids; k++) special |= t == info.eos_token_ids[k];
        if (!special) ids[(*n)++] = t;
    }
    return ids;
}

/* Engine flags, --threads and --help for latency/throughput. Returns 1 if
 * argv[*i] was one (consumed), 0 if not, -1 on error, 2 on --help. */
static int parse_common(const char *cmd, vllm_engine_args *args, int argc, char **argv, int *i) {
    int r = engine_args_parse(args, argc, argv, i);
    if (r != 0) return r;
    char name[64];
    const char *iv = engine_args_flag_name(argv[*i], name, sizeof name);
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) return 2;
    if (!strcmp(name, "--threads")) {
        const char *v = bench_flag_value(cmd, name, iv, argc, argv, i);
        return v && bench_parse_i32(cmd, name, v, 0, 4096, &args->num_threads) ? 1 : -1;
    }
    return 0;
}

static void engine_usage(FILE *f) {
    engine_args_usage(f);
    fprintf(f, "  --threads N                     worker threads (default: online CPUs)\n"
               "  --disable-detokenize            do not detokenize outputs (vLLM's benchmarks do by\n"
               "                                  default)\n");
}

/* The engine and the output processor of a latency/throughput run. */
typedef struct bench_engine {
    vllm_engine *engine;
    tokenizer *tok;
    output_processor *op;
} bench_engine;

static bool bench_engine_create(const char *cmd, const vllm_engine_args *given, bench_engine *b) {
    memset(b, 0, sizeof *b);
    vllm_engine_args resolved = *given, *args = &resolved; /* model aliases (smollm2, ...) -> their files */
    if (model_alias_resolve(&args->model, NULL) != VLLM_OK || model_alias_resolve(&args->tokenizer, NULL) != VLLM_OK ||
        tokenizer_load(args->tokenizer ? args->tokenizer : args->model, &b->tok) != VLLM_OK ||
        output_processor_create(b->tok, &b->op) != VLLM_OK || vllm_engine_create(args, &b->engine) != VLLM_OK) {
        fprintf(stderr, "vllmc %s: %s\n", cmd, vllm_errmsg());
        return false;
    }
    return true;
}

static void bench_engine_free(bench_engine *b) {
    vllm_engine_free(b->engine);
    output_processor_free(b->op);
    tokenizer_free(b->tok);
}

/* vLLM's LLM.generate for the benchmarks: every prompt enters the engine at
 * once (ids "bench-<i>"), and every step's outputs go through the output
 * processor (text unless !detokenize). *num_output_tokens counts the tokens
 * of every sequence's output. On failure nothing is left in the engine or
 * the processor. */
static vllm_status bench_generate(bench_engine *b, int32_t num_prompts, const int32_t *const *prompts,
                                  const int32_t *lens, const vllm_sampling_params *sps, bool detokenize,
                                  int64_t *num_output_tokens) {
    *num_output_tokens = 0;
    vllm_status rc = VLLM_OK;
    char id[32];
    int32_t added = 0;
    for (; added < num_prompts && rc == VLLM_OK; added++) {
        snprintf(id, sizeof id, "bench-%d", added);
        if ((rc = vllm_engine_add_request(b->engine, id, prompts[added], lens[added], &sps[added], NULL)) != VLLM_OK)
            break;
        output_request q = {.request_id = id, .prompt_ids = prompts[added], .num_prompt_ids = lens[added],
                            .sp = &sps[added], .skip_special_tokens = true, .detokenize = detokenize};
        if ((rc = output_processor_add_request(b->op, &q)) != VLLM_OK) {
            vllm_engine_abort_request(b->engine, id);
            break;
        }
    }
    while (rc == VLLM_OK && vllm_engine_has_unfinished(b->engine)) {
        const vllm_step_output *so;
        const output_result *res;
        if ((rc = vllm_engine_step(b->engine, &so)) != VLLM_OK ||
            (rc = output_processor_process(b->op, so, &res)) != VLLM_OK)
            break;
        for (int32_t i = 0; i < res->num_stops; i++)
            vllm_engine_stop_sequence(b->engine, res->stops[i].request_id, res->stops[i].index);
        for (int32_t i = 0; i < res->num_deltas; i++) *num_output_tokens += res->deltas[i].num_tokens;
    }
    if (rc != VLLM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vllm_errmsg());
        for (int32_t i = 0; i < added; i++) {
            snprintf(id, sizeof id, "bench-%d", i);
            vllm_engine_abort_request(b->engine, id);
        }
        const vllm_step_output *so; /* flush the aborts; a dead engine stays dead */
        while (vllm_engine_has_unfinished(b->engine) && vllm_engine_step(b->engine, &so) == VLLM_OK) {}
        const output_result *res;
        output_processor_abort_all(b->op, &res);
        vllm_error(rc, "%s", msg);
    }
    return rc;
}

static bool write_json_file(const char *cmd, const char *path, json_t *o) {
    int rc = json_dump_file(o, path, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (rc != 0) fprintf(stderr, "vllmc %s: cannot write %s: %s\n", cmd, path, strerror(errno));
    return rc == 0;
}

/* ---- latency ------------------------------------------------------------ */

static void latency_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench latency [options]\n"
            "Latency of one batch of random prompts (ignore_eos, temperature 1).\n"
            "  --input-len N          prompt tokens per request (32)\n"
            "  --output-len N         generated tokens per request (128)\n"
            "  --batch-size N         requests per batch (8)\n"
            "  --n N                  sequences per request (1)\n"
            "  --num-iters-warmup N   untimed runs first (10)\n"
            "  --num-iters N          timed runs (30)\n"
            "  --ignore-eos           (always on: output lengths are exact)\n"
            "  --output-json FILE     also write the latencies as JSON\n");
    engine_usage(f);
}

/* --disable-detokenize (latency and throughput): 1 if argv[*i] is it, else 0. */
static int parse_detokenize(const char *name, const char *iv, int *i, bool *detokenize) {
    if (strcmp(name, "--disable-detokenize") || iv) return 0;
    *detokenize = false;
    (*i)++;
    return 1;
}

int cmd_bench_latency(int argc, char **argv) {
    const char *cmd = "bench latency";
    vllm_engine_args args;
    vllm_engine_args_init(&args);
    args.model = cli_default_model_dir();
    int32_t input_len = 32, output_len = 128, batch = 8, n = 1, warmup = 10, iters = 30;
    const char *output_json = NULL;
    bool detokenize = true;
    for (int i = 1; i < argc;) {
        int r = parse_common(cmd, &args, argc, argv, &i);
        if (r == 2) {
            latency_usage(stdout);
            return 0;
        }
        if (r < 0) return 2;
        if (r > 0) continue;
        char name[64];
        const char *iv = engine_args_flag_name(argv[i], name, sizeof name);
        const bench_int_flag ints[] = {
            {"--input-len", &input_len, 1}, {"--output-len", &output_len, 1}, {"--batch-size", &batch, 1},
            {"--n", &n, 1}, {"--num-iters-warmup", &warmup, 0}, {"--num-iters", &iters, 1}};
        int got = bench_parse_int_flag(cmd, ints, sizeof ints / sizeof *ints, name, iv, argc, argv, &i);
        bool found = got != 0, ok = got >= 0;
        if (!found) found = parse_detokenize(name, iv, &i, &detokenize);
        if (!found && !strcmp(name, "--ignore-eos") && !iv) { /* always on */
            found = true;
            i++;
        }
        if (!found && !strcmp(name, "--output-json")) {
            found = true;
            ok = (output_json = bench_flag_value(cmd, name, iv, argc, argv, &i)) != NULL;
        }
        if (!found) {
            fprintf(stderr, "vllmc %s: unknown option '%s'\n", cmd, argv[i]);
            latency_usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }

    int status = 1;
    bench_engine be;
    int32_t *allowed = NULL, **prompts = NULL, *lens = NULL;
    vllm_sampling_params *sps = NULL;
    double *lat = NULL;
    json_t *out = NULL;
    if (!bench_engine_create(cmd, &args, &be)) goto done;
    vllm_engine *e = be.engine;
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    if ((int64_t)input_len + output_len > info.max_model_len) { /* vLLM asserts the same */
        fprintf(stderr, "vllmc %s: input_len %d + output_len %d exceeds max_model_len %d; please ensure that "
                "max_model_len is greater than the sum of input_len and output_len\n", cmd, input_len,
                output_len, info.max_model_len);
        goto done;
    }
    int32_t num_allowed;
    bench_rng rng;
    bench_rng_seed(&rng, args.seed);
    prompts = calloc((size_t)batch, sizeof *prompts);
    lens = calloc((size_t)batch, sizeof *lens);
    sps = calloc((size_t)batch, sizeof *sps);
    lat = calloc((size_t)iters, sizeof *lat);
    if (!(allowed = allowed_ids(e, &num_allowed)) || !prompts || !lens || !sps || !lat) goto nomem;
    for (int32_t b = 0; b < batch; b++) {
        if (!(prompts[b] = malloc((size_t)input_len * sizeof **prompts))) goto nomem;
        /* vLLM: np.random.randint(10000, size=(batch_size, input_len)) */
        for (int32_t j = 0; j < input_len; j++) prompts[b][j] = allowed[bench_rng_int(&rng, 0, num_allowed - 1)];
        lens[b] = input_len;
        vllm_sampling_params_init(&sps[b]);
        sps[b].n = n;
        sps[b].temperature = 1.0f;
        sps[b].top_p = 1.0f;
        sps[b].ignore_eos = true;
        sps[b].max_tokens = output_len;
    }
    printf("Warming up...\n");
    fflush(stdout);
    for (int32_t it = -warmup; it < iters; it++) {
        if (it == 0) {
            printf("Profiling iterations...\n");
            fflush(stdout);
        }
        int64_t num_out;
        double t0 = vllm_monotonic_time();
        if (bench_generate(&be, batch, (const int32_t *const *)prompts, lens, sps, detokenize, &num_out) != VLLM_OK) {
            fprintf(stderr, "vllmc %s: %s\n", cmd, vllm_errmsg());
            goto done;
        }
        double dt = vllm_monotonic_time() - t0;
        if (it >= 0) lat[it] = dt;
    }
    static const int pcts[] = {10, 25, 50, 75, 90, 99};
    char buf[64];
    double avg = bench_stats_mean(lat, (size_t)iters);
    out = json_object();
    json_t *jl = json_array(), *jp = json_object();
    for (int32_t it = 0; it < iters; it++) json_array_append_new(jl, json_real(lat[it]));
    bench_stats_sort(lat, (size_t)iters);
    bench_format_float(buf, sizeof buf, avg);
    printf("Avg latency: %s seconds\n", buf);
    for (size_t k = 0; k < sizeof pcts / sizeof *pcts; k++) {
        double p = bench_stats_percentile(lat, (size_t)iters, pcts[k]);
        bench_format_float(buf, sizeof buf, p);
        printf("%d%% percentile latency: %s seconds\n", pcts[k], buf);
        char key[8];
        snprintf(key, sizeof key, "%d", pcts[k]);
        json_object_set_new(jp, key, json_real(p));
    }
    json_object_set_new(out, "avg_latency", json_real(avg));
    json_object_set_new(out, "latencies", jl);
    json_object_set_new(out, "percentiles", jp);
    if (output_json && !write_json_file(cmd, output_json, out)) goto done;
    status = fflush(stdout) == 0 ? 0 : 1;
    goto done;
nomem:
    fprintf(stderr, "vllmc %s: out of memory\n", cmd);
done:
    json_decref(out);
    if (prompts)
        for (int32_t b = 0; b < batch; b++) free(prompts[b]);
    free(prompts);
    free(lens);
    free(sps);
    free(lat);
    free(allowed);
    bench_engine_free(&be);
    return status;
}

/* ---- throughput --------------------------------------------------------- */

static void throughput_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench throughput [options]\n"
            "Offline throughput: every prompt of the dataset enters the engine at once.\n"
            "  --backend vllm         (the only one)\n"
            "  --dataset-name random  (the only one)\n"
            "  --input-len N          prompt tokens per request (1024)\n"
            "  --output-len N         generated tokens per request (128)\n"
            "  --num-prompts N        requests (1000)\n"
            "  --n N                  sequences per request (1)\n"
            "  --prefix-len N         shared random prefix before each prompt (0); prompts are\n"
            "                         prefix-len + input-len tokens, as vLLM's random dataset\n"
            "  --ignore-eos           (always on: output lengths are exact)\n"
            "  --random-range-ratio R lengths drawn from [L(1-R), L(1+R)] (0.0)\n"
            "  --output-json FILE     also write the results as JSON\n"
            "  (--seed also seeds the dataset)\n");
    engine_usage(f);
}

int cmd_bench_throughput(int argc, char **argv) {
    const char *cmd = "bench throughput";
    vllm_engine_args args;
    vllm_engine_args_init(&args);
    args.model = cli_default_model_dir();
    bench_random_config cfg = {.num_prompts = 1000, .input_len = 1024, .output_len = 128};
    int32_t n = 1;
    const char *output_json = NULL;
    bool detokenize = true;
    for (int i = 1; i < argc;) {
        int r = parse_common(cmd, &args, argc, argv, &i);
        if (r == 2) {
            throughput_usage(stdout);
            return 0;
        }
        if (r < 0) return 2;
        if (r > 0) continue;
        char name[64];
        const char *iv = engine_args_flag_name(argv[i], name, sizeof name);
        const bench_int_flag ints[] = {
            {"--input-len", &cfg.input_len, 0}, {"--output-len", &cfg.output_len, 1},
            {"--num-prompts", &cfg.num_prompts, 1}, {"--n", &n, 1}, {"--prefix-len", &cfg.prefix_len, 0}};
        int got = bench_parse_int_flag(cmd, ints, sizeof ints / sizeof *ints, name, iv, argc, argv, &i);
        if (got < 0) return 2;
        if (got > 0 || parse_detokenize(name, iv, &i, &detokenize)) continue;
        const char *v = NULL;
        if (!strcmp(name, "--random-range-ratio")) {
            if (!(v = bench_flag_value(cmd, name, iv, argc, argv, &i)) ||
                !bench_parse_f64(cmd, name, v, 0, false, &cfg.range_ratio))
                return 2;
        } else if (!strcmp(name, "--output-json")) {
            if (!(output_json = bench_flag_value(cmd, name, iv, argc, argv, &i))) return 2;
        } else if (!strcmp(name, "--ignore-eos") && !iv) {
            i++; /* always on (every request ignores EOS); accepted as bench serve takes it */
        } else if (!strcmp(name, "--dataset-name") || !strcmp(name, "--backend")) {
            if (!(v = bench_flag_value(cmd, name, iv, argc, argv, &i))) return 2;
            const char *want = name[2] == 'd' ? "random" : "vllm";
            if (strcmp(v, want)) {
                fprintf(stderr, "vllmc %s: argument %s: '%s' is not supported (only '%s')\n", cmd, name, v, want);
                return 2;
            }
        } else {
            fprintf(stderr, "vllmc %s: unknown option '%s'\n", cmd, argv[i]);
            throughput_usage(stderr);
            return 2;
        }
    }

    int status = 1;
    bench_engine be;
    bench_request *reqs = NULL;
    int32_t *allowed = NULL, *lens = NULL;
    const int32_t **prompts = NULL;
    vllm_sampling_params *sps = NULL;
    json_t *out = NULL;
    int32_t np = cfg.num_prompts, num_allowed;
    if (!bench_engine_create(cmd, &args, &be)) goto done;
    vllm_engine *e = be.engine;
    bench_rng rng;
    bench_rng_seed(&rng, args.seed);
    if (!(allowed = allowed_ids(e, &num_allowed))) goto nomem;
    if (bench_dataset_random(&rng, &cfg, allowed, num_allowed, &reqs) != VLLM_OK) {
        fprintf(stderr, "vllmc %s: %s\n", cmd, vllm_errmsg());
        goto done;
    }
    prompts = calloc((size_t)np, sizeof *prompts);
    lens = calloc((size_t)np, sizeof *lens);
    sps = calloc((size_t)np, sizeof *sps);
    if (!prompts || !lens || !sps) goto nomem;
    int64_t prompt_tokens = 0, output_tokens = 0;
    for (int32_t k = 0; k < np; k++) {
        prompts[k] = reqs[k].prompt;
        lens[k] = reqs[k].prompt_len;
        prompt_tokens += reqs[k].prompt_len;
        vllm_sampling_params_init(&sps[k]);
        sps[k].n = n;
        sps[k].temperature = 1.0f;
        sps[k].top_p = 1.0f;
        sps[k].ignore_eos = true;
        sps[k].max_tokens = reqs[k].output_len;
    }
    vllm_engine_reset_kv_cache_report(e);
    double t0 = vllm_monotonic_time();
    /* output_tokens: what was generated (= sum of output lengths x n under ignore_eos) */
    if (bench_generate(&be, np, prompts, lens, sps, detokenize, &output_tokens) != VLLM_OK) {
        fprintf(stderr, "vllmc %s: %s\n", cmd, vllm_errmsg());
        goto done;
    }
    double elapsed = vllm_monotonic_time() - t0;
    int64_t total = prompt_tokens + output_tokens;
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", np / elapsed,
           (double)total / elapsed, (double)output_tokens / elapsed);
    printf("Total num prompt tokens:  %lld\n", (long long)prompt_tokens);
    printf("Total num output tokens:  %lld\n", (long long)output_tokens);
    /* Ours, after vLLM's lines. A slot is one token's K/V in a block. Peak
     * usage: the most blocks in use at the end of any step, of the pool.
     * Wasted slots: slots in allocated blocks that held no token (the
     * unfilled tail of each sequence's last block), summed over steps, over
     * allocated slots summed over steps; in parentheses the wasted slots at
     * the peak step over the whole pool. */
    vllm_kv_cache_report kr;
    vllm_engine_get_kv_cache_report(e, &kr);
    double pool_slots = (double)kr.num_blocks * kr.block_size;
    printf("KV cache: peak usage %.1f%% of %d blocks, wasted slots %.2f%% of allocated (%.2f%% of the pool "
           "at peak)\n",
           kr.num_blocks ? 100.0 * kr.peak_used_blocks / kr.num_blocks : 0.0, kr.num_blocks,
           kr.sum_used_slots ? 100.0 * (double)kr.sum_empty_slots / (double)kr.sum_used_slots : 0.0,
           pool_slots > 0 ? 100.0 * (double)kr.peak_empty_slots / pool_slots : 0.0);
    out = json_object();
    json_object_set_new(out, "elapsed_time", json_real(elapsed));
    json_object_set_new(out, "num_requests", json_integer(np));
    json_object_set_new(out, "total_num_tokens", json_integer(total));
    json_object_set_new(out, "requests_per_second", json_real(np / elapsed));
    json_object_set_new(out, "tokens_per_second", json_real((double)total / elapsed));
    if (output_json && !write_json_file(cmd, output_json, out)) goto done;
    status = fflush(stdout) == 0 ? 0 : 1;
    goto done;
nomem:
    fprintf(stderr, "vllmc %s: out of memory\n", cmd);
done:
    json_decref(out);
    bench_dataset_free(reqs, np);
    free(prompts);
    free(lens);
    free(sps);
    free(allowed);
    bench_engine_free(&be);
    return status;
}

/* ---- dispatch ----------------------------------------------------------- */

int cmd_bench(int argc, char **argv) {
    static const char usage[] =
        "usage: vllmc bench latency|throughput|serve|structured|tune [options]\n"
        "  latency     time one batch through the engine (vllm bench latency)\n"
        "  throughput  offline throughput on the random dataset (vllm bench throughput)\n"
        "  serve       load-test an OpenAI-compatible server (vllm bench serve)\n"
        "  structured  JSONSchemaBench's MaskBench: schema compile and token mask times\n"
        "  tune        server flags with the best throughput that meets an SLO (vLLM's auto_tune)\n"
        "Run 'vllmc bench <command> --help' for its options.\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "latency")) return cmd_bench_latency(argc - 1, argv + 1);
    if (!strcmp(sub, "throughput")) return cmd_bench_throughput(argc - 1, argv + 1);
    if (!strcmp(sub, "serve")) return cmd_bench_serve(argc - 1, argv + 1);
    if (!strcmp(sub, "structured")) return cmd_bench_structured(argc - 1, argv + 1);
    if (!strcmp(sub, "tune")) return cmd_bench_tune(argc - 1, argv + 1);
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "vllmc bench: unknown command '%s'\n%s", sub, usage);
    return 2;
}

/*
 * test_bench_stats.c - the benchmarks' arithmetic: mean/std/median/percentile
 * against numpy (tests/ref/bench_stats_ref.py, run at test time), the Gamma
 * inter-arrival generator's moments against the published ones (mean k*theta,
 * variance k*theta^2) on a fixed seed, and the random dataset's lengths and
 * token ranges.
 */
/* checks: 5 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_dataset.h"
#include "cli/bench_rng.h"
#include "cli/bench_stats.h"
#include "harness.h"

static bool close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(1e-300, fabs(b)) + 1e-15; }

TEST(test_stats_all_cases_match_numpy) {
    FILE *p = popen("/usr/bin/python3 tests/ref/bench_stats_ref.py", "r");
    CHECK(p != NULL);
    json_t *ref = json_loadf(p, 0, NULL);
    pclose(p);
    CHECK(ref != NULL);
    json_t *pcts = json_object_get(ref, "pcts"), *cases = json_object_get(ref, "cases");
    size_t ncases = json_array_size(cases), bad = 0;
    for (size_t ci = 0; ci < ncases; ci++) {
        json_t *c = json_array_get(cases, ci), *jx = json_object_get(c, "x");
        size_t n = json_array_size(jx);
        double *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = json_real_value(json_array_get(jx, i));
        if (!close_rel(bench_stats_mean(x, n), json_real_value(json_object_get(c, "mean")), 1e-12)) bad++;
        if (!close_rel(bench_stats_std(x, n), json_real_value(json_object_get(c, "std")), 1e-9)) bad++;
        bench_stats_sort(x, n);
        if (!close_rel(bench_stats_median(x, n), json_real_value(json_object_get(c, "median")), 1e-12)) bad++;
        for (size_t k = 0; k < json_array_size(pcts); k++) {
            double want = json_real_value(json_array_get(json_object_get(c, "percentiles"), k));
            double pk = json_number_value(json_array_get(pcts, k)), got = bench_stats_percentile(x, n, pk);
            if (!close_rel(got, want, 1e-12)) {
                fprintf(stderr, "case %zu p%g: got %.17g, numpy %.17g\n", ci, pk, got, want);
                bad++;
            }
        }
        free(x);
    }
    json_decref(ref);
    CHECK(ncases == 5 && bad == 0, "%zu values differ from numpy over %zu cases", bad, ncases);
}

TEST(test_stats_empty_is_zero) {
    CHECK(bench_stats_mean(NULL, 0) == 0 && bench_stats_std(NULL, 0) == 0 &&
          bench_stats_percentile(NULL, 0, 99) == 0);
}

/* Inter-arrival gaps Gamma(b, 1/(rate b)): mean 1/rate, variance 1/(rate^2 b). */
TEST(test_gamma_arrivals_moments) {
    const double rate = 5.0, shapes[] = {0.25, 1.0, 4.0};
    const int n = 200000;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        bench_rng rng;
        bench_rng_seed(&rng, 42);
        double b = shapes[s], sum = 0, sum2 = 0;
        bool positive = true;
        for (int i = 0; i < n; i++) {
            double x = bench_rng_gamma(&rng, b, 1.0 / (rate * b));
            positive &= x >= 0;
            sum += x;
            sum2 += x * x;
        }
        double mean = sum / n, var = sum2 / n - mean * mean;
        double want_mean = 1 / rate, want_var = 1 / (rate * rate * b);
        CHECK(positive, "negative gap for shape %g", b);
        CHECK(fabs(mean - want_mean) < 0.02 * want_mean, "shape %g: mean %g, want %g", b, mean, want_mean);
        CHECK(fabs(var - want_var) < 0.06 * want_var, "shape %g: variance %g, want %g", b, var, want_var);
    }
}

TEST(test_rng_int_uniform_and_seeded) {
    bench_rng a, b;
    bench_rng_seed(&a, 7);
    bench_rng_seed(&b, 7);
    int counts[6] = {0};
    for (int i = 0; i < 60000; i++) {
        int64_t x = bench_rng_int(&a, 3, 8);
        CHECK(x >= 3 && x <= 8, "%lld out of [3, 8]", (long long)x);
        CHECK(x == bench_rng_int(&b, 3, 8), "same seed, different stream at %d", i);
        counts[x - 3]++;
    }
    for (int k = 0; k < 6; k++) CHECK(counts[k] > 9500 && counts[k] < 10500, "value %d drawn %d times", k + 3, counts[k]);
}

TEST(test_random_dataset_lengths) {
    int32_t allowed[100];
    for (int i = 0; i < 100; i++) allowed[i] = 3 + i; /* ids 0..2 "special" */
    bench_rng rng;
    bench_rng_seed(&rng, 0);
    bench_random_config cfg = {.num_prompts = 50, .input_len = 20, .output_len = 10, .prefix_len = 5, .range_ratio = 0.5};
    bench_request *r;
    CHECK(bench_dataset_random(&rng, &cfg, allowed, 100, &r) == VLLM_OK);
    bool spread_in = false, spread_out = false;
    for (int i = 0; i < 50; i++) {
        CHECK(r[i].prompt_len >= 5 + 10 && r[i].prompt_len <= 5 + 30, "prompt %d length %d", i, r[i].prompt_len);
        CHECK(r[i].output_len >= 5 && r[i].output_len <= 15, "output %d length %d", i, r[i].output_len);
        spread_in |= r[i].prompt_len != r[0].prompt_len;
        spread_out |= r[i].output_len != r[0].output_len;
        for (int j = 0; j < r[i].prompt_len; j++) CHECK(r[i].prompt[j] >= 3 && r[i].prompt[j] < 103);
        CHECK(!memcmp(r[i].prompt, r[0].prompt, 5 * sizeof(int32_t)), "prefix of prompt %d differs", i);
        /* the inner part is a run modulo the vocabulary */
        for (int j = 6; j < r[i].prompt_len; j++)
            CHECK(r[i].prompt[j] - 3 == (r[i].prompt[j - 1] - 3 + 1) % 100, "prompt %d not a run at %d", i, j);
    }
    CHECK(spread_in && spread_out, "range ratio 0.5 gave constant lengths");
    bench_dataset_free(r, 50);

    cfg.range_ratio = 0;
    cfg.prefix_len = 0;
    CHECK(bench_dataset_random(&rng, &cfg, allowed, 100, &r) == VLLM_OK);
    for (int i = 0; i < 50; i++) CHECK(r[i].prompt_len == 20 && r[i].output_len == 10);
    bench_dataset_free(r, 50);

    cfg.range_ratio = 1.0;
    CHECK(bench_dataset_random(&rng, &cfg, allowed, 100, &r) == VLLM_ERR_INVALID, "ratio 1 accepted");
}

int main(void) {
    RUN(test_stats_all_cases_match_numpy);
    RUN(test_stats_empty_is_zero);
    RUN(test_gamma_arrivals_moments);
    RUN(test_rng_int_uniform_and_seeded);
    RUN(test_random_dataset_lengths);
    return harness_done();
}

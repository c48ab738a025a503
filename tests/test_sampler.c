/*
 * test_sampler.c - the sampler against tests/ref/sampler_ref.py (numpy, from
 * vLLM's semantics), run at test time: processed probability vectors, raw
 * logprobs and top-N on a few hundred random cases; chi-square of seeded
 * draws; plus hand-worked cases (ties, penalties, min_tokens, top-k/top-p
 * edges), seeding, validation messages and a timing report on a 128k vocab;
 * the step's batch: draft verification by hand (greedy rows with known
 * argmaxes), seeded rows equal to drawing them one by one, grammar masks,
 * shared rows, masks of every word kind (empty, full, mixed, the partial
 * tail) against the masked row's log-softmax by hand, and the pool-split
 * batch equal to the serial one.
 */
/* checks: 19 */
/* tags: tsan */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "harness.h"
#include "sample/sampler.h"

/* ---- reference cases ----------------------------------------------------- */

typedef struct ref_case {
    char name[32];
    int32_t V;
    vllm_sampling_params p;
    int32_t eos[8], num_eos;
    int32_t *prompt, num_prompt, *output, num_output;
    float *logits;
    double *probs, *rawlp, *alt;
    int32_t top[VLLM_MAX_LOGPROBS], num_top;
} ref_case;

static ref_case *cases;
static int num_cases;
static char *ref_text;

static char *word(char **cur) {
    char *s = *cur;
    while (*s == ' ' || *s == '\n') s++;
    char *e = s;
    while (*e && *e != ' ' && *e != '\n') e++;
    if (*e) *e++ = 0;
    *cur = e;
    return s;
}

static bool peek(const char *cur, const char *key) {
    while (*cur == ' ' || *cur == '\n') cur++;
    size_t n = strlen(key);
    return !strncmp(cur, key, n) && (cur[n] == ' ' || cur[n] == '\n' || !cur[n]);
}

static bool expect(char **cur, const char *key) { return !strcmp(word(cur), key); }
static long int_word(char **cur) { return strtol(word(cur), NULL, 10); }
static double real_word(char **cur) { return strtod(word(cur), NULL); }

static int32_t *ids_line(char **cur, const char *key, int32_t *n) {
    if (!expect(cur, key)) return NULL;
    *n = (int32_t)int_word(cur);
    int32_t *v = calloc((size_t)*n + 1, sizeof *v);
    for (int32_t i = 0; i < *n; i++) v[i] = (int32_t)int_word(cur);
    return v;
}

static double *reals_line(char **cur, const char *key, int32_t V) {
    if (!expect(cur, key)) return NULL;
    double *v = malloc((size_t)V * sizeof *v);
    for (int32_t i = 0; i < V; i++) v[i] = real_word(cur);
    return v;
}

/* Runs the reference and parses its cases; false (with a FAIL) if it cannot. */
static bool load_reference(void) {
    if (cases) return true;
    const char *py = getenv("VLLM_REF_PYTHON");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tests/ref/sampler_ref.py", py ? py : "/usr/bin/python3");
    FILE *f = popen(cmd, "r");
    CHECK_OR(false, f, "cannot run %s", cmd);
    size_t cap = 1 << 20, len = 0, got;
    ref_text = malloc(cap);
    while ((got = fread(ref_text + len, 1, cap - len - 1, f)) > 0)
        if ((len += got) + 1 == cap) ref_text = realloc(ref_text, cap *= 2);
    ref_text[len] = 0;
    int rc = pclose(f);
    CHECK_OR(false, rc == 0 && len > 0, "%s failed (status %d; needs python3-numpy: scripts/setup.sh)", cmd, rc);

    char *cur = ref_text;
    int cap_cases = 0;
    while (expect(&cur, "case")) {
        if (num_cases == cap_cases) cases = realloc(cases, (size_t)(cap_cases = cap_cases * 2 + 64) * sizeof *cases);
        ref_case *c = &cases[num_cases];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", word(&cur));
        c->V = (int32_t)int_word(&cur);
        vllm_sampling_params *p = &c->p;
        vllm_sampling_params_init(p);
        CHECK_OR(false, expect(&cur, "p"), "%s: no p line", c->name);
        p->temperature = strtof(word(&cur), NULL);
        p->top_k = (int32_t)int_word(&cur);
        p->top_p = strtof(word(&cur), NULL);
        p->min_p = strtof(word(&cur), NULL);
        p->presence_penalty = strtof(word(&cur), NULL);
        p->frequency_penalty = strtof(word(&cur), NULL);
        p->repetition_penalty = strtof(word(&cur), NULL);
        p->min_tokens = (int32_t)int_word(&cur);
        p->logprobs = (int32_t)int_word(&cur);
        int32_t n, *v;
        v = ids_line(&cur, "eos", &n);
        CHECK_OR(false, v && n <= 8, "%s: eos", c->name);
        memcpy(c->eos, v, (size_t)n * sizeof *v), c->num_eos = n, free(v);
        v = ids_line(&cur, "stop", &n);
        CHECK_OR(false, v && n <= VLLM_MAX_STOP_TOKEN_IDS, "%s: stop", c->name);
        memcpy(p->stop_token_ids, v, (size_t)n * sizeof *v), p->num_stop_token_ids = n, free(v);
        CHECK_OR(false, expect(&cur, "bias"), "%s: bias", c->name);
        p->num_logit_bias = (int32_t)int_word(&cur);
        for (int32_t i = 0; i < p->num_logit_bias; i++) {
            p->logit_bias_ids[i] = (int32_t)int_word(&cur);
            p->logit_bias_values[i] = strtof(word(&cur), NULL);
        }
        c->prompt = ids_line(&cur, "prompt", &c->num_prompt);
        c->output = ids_line(&cur, "output", &c->num_output);
        CHECK_OR(false, c->prompt && c->output, "%s: history", c->name);
        CHECK_OR(false, expect(&cur, "logits"), "%s: logits", c->name);
        c->logits = malloc((size_t)c->V * sizeof *c->logits);
        for (int32_t i = 0; i < c->V; i++) c->logits[i] = strtof(word(&cur), NULL);
        c->probs = reals_line(&cur, "probs", c->V);
        c->rawlp = reals_line(&cur, "rawlp", c->V);
        v = ids_line(&cur, "top", &n);
        CHECK_OR(false, c->probs && c->rawlp && v && n <= VLLM_MAX_LOGPROBS, "%s: probs/rawlp/top", c->name);
        memcpy(c->top, v, (size_t)n * sizeof *v), c->num_top = n, free(v);
        if (peek(cur, "alt")) c->alt = reals_line(&cur, "alt", c->V);
        CHECK_OR(false, expect(&cur, "end"), "%s: no end", c->name);
        CHECK_OR(false, vllm_sampling_params_validate(p) == VLLM_OK, "%s: %s", c->name, vllm_errmsg());
        num_cases++;
    }
    CHECK_OR(false, num_cases >= 200, "only %d reference cases parsed", num_cases);
    return true;
}

static void free_reference(void) {
    for (int i = 0; i < num_cases; i++) {
        ref_case *c = &cases[i];
        free(c->prompt), free(c->output), free(c->logits), free(c->probs), free(c->rawlp), free(c->alt);
    }
    free(cases);
    free(ref_text);
}

static sample_history case_history(const ref_case *c) {
    return (sample_history){c->prompt, c->num_prompt, c->output, c->num_output};
}

/* ---- against the reference ----------------------------------------------- */

static bool check_case_probs(const ref_case *c, float *work, float *probs, void *scratch) {
    memcpy(work, c->logits, (size_t)c->V * sizeof *work);
    sample_history h = case_history(c);
    vllm_status rc = sampler_probs(&c->p, &h, c->eos, c->num_eos, work, c->V, scratch, probs);
    CHECK_OR(false, rc == VLLM_OK, "%s: %s", c->name, vllm_errmsg());
    double sum = 0.0;
    for (int32_t i = 0; i < c->V; i++) {
        double want = c->probs[i], got = probs[i];
        sum += got;
        CHECK_OR(false, fabs(got - want) <= 1e-6 + 1e-3 * want, "%s: p[%d] = %.9g, reference %.9g", c->name, i, got,
                 want);
        /* what the reference cuts must be cut; what it keeps must be kept unless float32 underflows */
        CHECK_OR(false, want == 0 ? got == 0 : (got > 0 || want < 1e-30), "%s: token %d p=%g, reference %g", c->name,
                 i, got, want);
    }
    CHECK_OR(false, fabs(sum - 1.0) < 1e-4, "%s: probabilities sum to %.9g", c->name, sum);
    return true;
}

TEST(test_probs_match_reference) {
    if (!load_reference()) return;
    int32_t vmax = 0;
    for (int i = 0; i < num_cases; i++) vmax = cases[i].V > vmax ? cases[i].V : vmax;
    float *work = malloc((size_t)vmax * sizeof *work), *probs = malloc((size_t)vmax * sizeof *probs);
    void *scratch = malloc(sampler_scratch_bytes(vmax));
    int checked = 0;
    for (int i = 0; i < num_cases && !harness_failed(); i++) checked += check_case_probs(&cases[i], work, probs, scratch);
    /* the same again with top_k/top_p forced down the sorting path */
    sampler_set_select_depth(1);
    for (int i = 0; i < num_cases && !harness_failed(); i++) checked += check_case_probs(&cases[i], work, probs, scratch);
    sampler_set_select_depth(0);
    free(work), free(probs), free(scratch);
    CHECK(checked == 2 * num_cases, "%d of %d cases checked", checked, 2 * num_cases);
}

TEST(test_logprobs_match_reference) {
    if (!load_reference()) return;
    int32_t vmax = 0;
    for (int i = 0; i < num_cases; i++) vmax = cases[i].V > vmax ? cases[i].V : vmax;
    float *work = malloc((size_t)vmax * sizeof *work);
    void *scratch = malloc(sampler_scratch_bytes(vmax));
    int with_logprobs = 0;
    for (int i = 0; i < num_cases; i++) {
        const ref_case *c = &cases[i];
        memcpy(work, c->logits, (size_t)c->V * sizeof *work);
        sample_history h = case_history(c);
        sampler_rng rng;
        sampler_rng_seed(&rng, 1000 + (uint64_t)i);
        sample_logprob top[VLLM_MAX_LOGPROBS];
        sample_result r = {.top = top};
        vllm_status rc = sampler_sample(&c->p, &h, c->eos, c->num_eos, work, c->V, &rng, scratch, &r);
        CHECK(rc == VLLM_OK, "%s: %s", c->name, vllm_errmsg());
        CHECK(r.token_id >= 0 && r.token_id < c->V && c->probs[r.token_id] > 0,
              "%s: sampled %d, which the reference gives probability %g", c->name, r.token_id,
              r.token_id >= 0 && r.token_id < c->V ? c->probs[r.token_id] : -1.0);
        if (c->p.logprobs < 0) {
            CHECK(r.num_top == 0, "%s: %d top logprobs without logprobs", c->name, r.num_top);
            continue;
        }
        with_logprobs++;
        double want = c->rawlp[r.token_id];
        int32_t rank = 0;
        for (int32_t j = 0; j < c->V; j++) rank += c->rawlp[j] >= want;
        CHECK(fabs(r.logprob - want) < 1e-4, "%s: logprob of %d = %.7g, reference %.7g", c->name, r.token_id,
              r.logprob, want);
        CHECK(r.rank == rank, "%s: rank of %d = %d, reference %d", c->name, r.token_id, r.rank, rank);
        CHECK(r.num_top == c->num_top, "%s: %d top logprobs, reference %d", c->name, r.num_top, c->num_top);
        for (int32_t j = 0; j < r.num_top; j++) {
            CHECK(top[j].token_id == c->top[j], "%s: top[%d] = %d, reference %d", c->name, j, top[j].token_id,
                  c->top[j]);
            CHECK(fabs(top[j].logprob - c->rawlp[c->top[j]]) < 1e-4 && top[j].rank == j + 1,
                  "%s: top[%d] logprob %.7g rank %d, reference %.7g", c->name, j, top[j].logprob, top[j].rank,
                  c->rawlp[c->top[j]]);
        }
    }
    free(work), free(scratch);
    CHECK(with_logprobs > 50, "only %d cases asked for logprobs", with_logprobs);
}

/* Wilson-Hilferty: the chi-square quantile of df at standard-normal z. */
static double chi2_quantile(int df, double z) {
    double a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3);
}

/* Pearson's statistic of counts against probs, pooling bins expecting < 5. */
static double chi2_stat(const int *counts, const double *probs, int32_t V, int n, int *df) {
    double stat = 0.0, pool_e = 0.0;
    int pool_o = 0, bins = 0;
    for (int32_t i = 0; i < V; i++) {
        double e = probs[i] * n;
        if (e < 5.0) { pool_e += e; pool_o += counts[i]; continue; }
        stat += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_e > 0.0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1e-9 ? pool_e : 1e-9);
        bins++;
    }
    *df = bins - 1;
    return stat;
}

TEST(test_chi_square_of_seeded_draws) {
    if (!load_reference()) return;
    int done = 0;
    for (int i = 0; i < num_cases; i++) {
        const ref_case *c = &cases[i];
        if (!c->alt) continue;
        enum { DRAWS = 20000 };
        int *counts = calloc((size_t)c->V, sizeof *counts);
        float *work = malloc((size_t)c->V * sizeof *work);
        void *scratch = malloc(sampler_scratch_bytes(c->V));
        sampler_rng rng;
        sampler_rng_seed(&rng, 7 + (uint64_t)i);
        sample_history h = case_history(c);
        for (int d = 0; d < DRAWS; d++) {
            memcpy(work, c->logits, (size_t)c->V * sizeof *work);
            sample_result r = {0};
            sampler_sample(&c->p, &h, c->eos, c->num_eos, work, c->V, &rng, scratch, &r);
            counts[r.token_id]++;
        }
        int df, df_alt;
        double stat = chi2_stat(counts, c->probs, c->V, DRAWS, &df);
        double stat_alt = chi2_stat(counts, c->alt, c->V, DRAWS, &df_alt);
        double crit = chi2_quantile(df, 5.0), crit_alt = chi2_quantile(df_alt, 5.0);
        int outside = 0;
        for (int32_t t = 0; t < c->V; t++) outside += c->probs[t] == 0.0 ? counts[t] : 0;
        printf("# %s: chi2 %.1f (df %d, limit %.1f); against a 1.25x temperature %.1f (limit %.1f)\n", c->name,
               stat, df, crit, stat_alt, crit_alt);
        free(counts), free(work), free(scratch);
        CHECK(outside == 0, "%s: %d draws of tokens the reference excludes", c->name, outside);
        CHECK(df >= 5 && stat < crit, "%s: chi2 %.1f >= %.1f (df %d)", c->name, stat, crit, df);
        CHECK(stat_alt > crit_alt, "%s: draws fit the wrong distribution too (%.1f <= %.1f)", c->name, stat_alt,
              crit_alt);
        done++;
    }
    CHECK(done == 4, "%d chi-square cases", done);
}

/* ---- hand-worked cases --------------------------------------------------- */

static vllm_status probs_of(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos,
                            int32_t num_eos, const float *logits, int32_t V, float *probs) {
    float work[64];
    static double scratch[(64 * 12 + 8) / sizeof(double)];
    memcpy(work, logits, (size_t)V * sizeof *work);
    return sampler_probs(p, h, eos, num_eos, work, V, scratch, probs);
}

static int32_t sample_of(const vllm_sampling_params *p, const float *logits, int32_t V, sampler_rng *rng) {
    float work[64];
    static double scratch[(64 * 12 + 8) / sizeof(double)];
    memcpy(work, logits, (size_t)V * sizeof *work);
    sample_result r = {0};
    if (sampler_sample(p, NULL, NULL, 0, work, V, rng, scratch, &r) != VLLM_OK) return -1;
    return r.token_id;
}

static bool near(float a, double b) { return fabs(a - b) < 1e-6 + 1e-5 * fabs(b); }

TEST(test_greedy_ties_go_to_lowest_id) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = 0.0f;
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    float a[] = {1, 3, 3, 2, 3};
    CHECK(sample_of(&p, a, 5, &rng) == 1, "got %d", sample_of(&p, a, 5, &rng));
    float b[] = {NAN, -INFINITY, 2, NAN, 2};
    CHECK(sample_of(&p, b, 5, &rng) == 2, "NaN must not win: got %d", sample_of(&p, b, 5, &rng));
    /* a repetition penalty moves the argmax: 3 / 2 = 1.5 < 2 */
    int32_t prompt[] = {1, 2, 4};
    sample_history h = {prompt, 3, NULL, 0};
    p.repetition_penalty = 2.0f;
    float probs[5];
    CHECK(probs_of(&p, &h, NULL, 0, a, 5, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(probs[3] == 1.0f && probs[1] == 0.0f, "one-hot at 3 expected: %g %g %g %g %g", probs[0], probs[1],
          probs[2], probs[3], probs[4]);
    /* greedy consumes no randomness */
    sampler_rng before = rng;
    sample_of(&p, a, 5, &rng);
    CHECK(!memcmp(&before, &rng, sizeof rng), "greedy drew a random number");
}

TEST(test_penalties_by_hand) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    float logits[] = {2, -2, 1, 0.5f, 3};
    int32_t prompt[] = {0, 1, 0, -1, 99};  /* out-of-vocab ids are ignored */
    int32_t output[] = {2, 2, 4, 1000};
    sample_history h = {prompt, 5, output, 4};
    /* repetition over prompt+output, then frequency x output count, then presence:
     * 0: 2/2 = 1; 1: -2*2 = -4; 2: 1/2 - 0.5*2 - 0.25 = -0.75; 3: 0.5; 4: 3/2 - 0.5 - 0.25 = 0.75 */
    double want[] = {1, -4, -0.75, 0.5, 0.75}, z = 0;
    for (int i = 0; i < 5; i++) z += exp(want[i]);
    float probs[5];
    CHECK(probs_of(&p, &h, NULL, 0, logits, 5, probs) == VLLM_OK, "%s", vllm_errmsg());
    for (int i = 0; i < 5; i++) CHECK(near(probs[i], exp(want[i]) / z), "p[%d] = %g, want %g", i, probs[i], exp(want[i]) / z);
}

TEST(test_min_tokens_masks_eos_and_stop_ids) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.min_tokens = 4;
    p.ignore_eos = true; /* vLLM masks EOS during min_tokens even then */
    p.stop_token_ids[0] = 5;
    p.num_stop_token_ids = 1;
    float logits[] = {0, 0, 0, 10, 0, 9, 0, 0};
    int32_t eos = 3, out[4] = {1, 1, 1, 1};
    sample_history h = {NULL, 0, out, 3};
    float probs[8];
    CHECK(probs_of(&p, &h, &eos, 1, logits, 8, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(probs[3] == 0.0f && probs[5] == 0.0f && near(probs[0], 1.0 / 6), "masked: %g %g %g", probs[3], probs[5],
          probs[0]);
    h.num_output = 4;
    CHECK(probs_of(&p, &h, &eos, 1, logits, 8, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(probs[3] > 0.7f && probs[5] > 0.2f, "after min_tokens EOS and stop id are back: %g %g", probs[3], probs[5]);
    /* masking the whole vocabulary is an error, not a crash */
    float two[] = {1, 2};
    int32_t eos0 = 0;
    p.stop_token_ids[0] = 1;
    h.num_output = 0;
    vllm_status rc = probs_of(&p, &h, &eos0, 1, two, 2, probs);
    CHECK(rc == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "no token"), "rc %d: %s", rc, vllm_errmsg());
}

TEST(test_top_k_top_p_min_p_edges) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    float probs[5];
    /* top_k keeps every token tied with the k-th value */
    float tied[] = {1, 2, 2, 2, 0};
    p.top_k = 2;
    CHECK(probs_of(&p, NULL, NULL, 0, tied, 5, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(probs[0] == 0 && probs[4] == 0 && near(probs[1], 1.0 / 3) && near(probs[3], 1.0 / 3), "top_k ties: %g %g %g",
          probs[0], probs[1], probs[4]);
    /* top_p: a token stays while the mass above it is < top_p */
    float lg[] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    p.top_k = 0;
    p.top_p = 0.7f;
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(near(probs[0], 0.625) && near(probs[1], 0.375) && probs[2] == 0, "top_p 0.7: %g %g %g", probs[0], probs[1],
          probs[2]);
    p.top_p = 0.85f;
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(near(probs[2], 0.15 / 0.95) && probs[3] == 0, "top_p 0.85: %g %g", probs[2], probs[3]);
    p.top_p = 1e-6f; /* the most likely token always survives */
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK && probs[0] == 1.0f, "top_p tiny: %g", probs[0]);
    /* min_p: tokens below min_p x the top probability go */
    p.top_p = 1.0f;
    p.min_p = 0.4f;
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(near(probs[1], 0.375) && probs[2] == 0, "min_p 0.4: %g %g", probs[1], probs[2]);
    /* top_k larger than the vocabulary, or -1, is off */
    p.min_p = 0.0f;
    p.top_k = 50;
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK && near(probs[3], 0.05), "top_k 50: %g", probs[3]);
    p.top_k = -1;
    CHECK(probs_of(&p, NULL, NULL, 0, lg, 4, probs) == VLLM_OK && near(probs[3], 0.05), "top_k -1: %g", probs[3]);
}

TEST(test_temperature_clamp_and_greedy_threshold) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    float logits[] = {0.01f, 0.0f, -0.02f}, a[3], b[3];
    p.temperature = 0.001f; /* vLLM raises 0 < t < 0.01 to 0.01: still random */
    CHECK(!sampler_is_greedy(&p), "t=0.001 must not be greedy");
    CHECK(probs_of(&p, NULL, NULL, 0, logits, 3, a) == VLLM_OK, "%s", vllm_errmsg());
    p.temperature = 0.01f;
    CHECK(probs_of(&p, NULL, NULL, 0, logits, 3, b) == VLLM_OK, "%s", vllm_errmsg());
    double z = 1 + exp(-1.0) + exp(-3.0);
    CHECK(a[0] == b[0] && a[2] == b[2] && near(a[0], 1 / z) && near(a[2], exp(-3.0) / z), "t=0.001 %g %g vs 0.01 %g",
          a[0], a[2], b[0]);
    p.temperature = 0.0f;
    CHECK(sampler_is_greedy(&p), "t=0 is greedy");
    CHECK(sampler_effective_temperature(0.5f) == 0.5f && sampler_effective_temperature(1e-7f) == 0.01f,
          "effective temperature");
}

/* ---- randomness ---------------------------------------------------------- */

static void random_logits(float *x, int32_t n, uint64_t seed) {
    sampler_rng g;
    sampler_rng_seed(&g, seed);
    for (int32_t i = 0; i < n; i++) { /* Irwin-Hall approximation of a normal, x2 */
        double s = 0;
        for (int k = 0; k < 4; k++) s += sampler_rng_uniform(&g);
        x[i] = (float)((s - 2.0) * 2.0 * 1.7);
    }
}

enum { SEQ_V = 1000, SEQ_LEN = 200 };

static void run_sequence(const vllm_sampling_params *p, sampler_rng *rng, const float *base, int32_t *toks, int step,
                         void *scratch) {
    float work[SEQ_V];
    memcpy(work, base, sizeof work);
    work[step % SEQ_V] += 0.5f; /* logits change a little from step to step */
    sample_result r = {0};
    sampler_sample(p, NULL, NULL, 0, work, SEQ_V, rng, scratch, &r);
    toks[step] = r.token_id;
}

TEST(test_seeded_sequences_repeat_and_differ) {
    static float base[SEQ_V];
    random_logits(base, SEQ_V, 99);
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.top_p = 0.9f;
    p.has_seed = true;
    void *scratch = malloc(sampler_scratch_bytes(SEQ_V));
    int32_t a[SEQ_LEN], b[SEQ_LEN], c[SEQ_LEN], other[SEQ_LEN];
    sampler_rng ra, rb, rc, ro;
    p.seed = 42;
    sampler_rng_seed_request(&ra, &p, 0, "a", 0);
    for (int s = 0; s < SEQ_LEN; s++) run_sequence(&p, &ra, base, a, s, scratch);
    /* same seed, now sharing the "batch" with another request step by step */
    sampler_rng_seed_request(&rb, &p, 0, "b", 0);
    vllm_sampling_params q = p;
    q.seed = 7;
    sampler_rng_seed_request(&ro, &q, 0, "o", 0);
    for (int s = 0; s < SEQ_LEN; s++) {
        run_sequence(&q, &ro, base, other, s, scratch);
        run_sequence(&p, &rb, base, b, s, scratch);
    }
    CHECK(!memcmp(a, b, sizeof a), "same seed, different batch: sequences differ");
    p.seed = 43;
    sampler_rng_seed_request(&rc, &p, 0, "a", 0);
    int differ = 0;
    for (int s = 0; s < SEQ_LEN; s++) {
        run_sequence(&p, &rc, base, c, s, scratch);
        differ += c[s] != a[s];
    }
    free(scratch);
    CHECK(differ > SEQ_LEN * 3 / 4, "seeds 42 and 43 agree on %d of %d tokens", SEQ_LEN - differ, SEQ_LEN);
}

TEST(test_rng_seeding) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    sampler_rng a, b;
    p.has_seed = true;
    p.seed = 1000;
    sampler_rng_seed_request(&a, &p, 5, "x", 2); /* child 2 of n: vLLM's seed + index */
    sampler_rng_seed(&b, 1002);
    CHECK(!memcmp(&a, &b, sizeof a), "seeded child must use seed + index");
    p.has_seed = false;
    sampler_rng_seed_request(&a, &p, 5, "x", 0);
    sampler_rng_seed_request(&b, &p, 5, "x", 0);
    CHECK(!memcmp(&a, &b, sizeof a), "same engine seed and id: same stream");
    sampler_rng_seed_request(&b, &p, 5, "y", 0);
    CHECK(memcmp(&a, &b, sizeof a), "different request ids: same stream");
    sampler_rng_seed_request(&b, &p, 5, "x", 1);
    CHECK(memcmp(&a, &b, sizeof a), "different indices: same stream");
    sampler_rng_seed_request(&b, &p, 6, "x", 0);
    CHECK(memcmp(&a, &b, sizeof a), "different engine seeds: same stream");
    /* uniforms lie in [0, 1) and look uniform */
    double sum = 0, lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sampler_rng_uniform(&a);
        sum += u, lo = u < lo ? u : lo, hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0 && hi < 1 && fabs(sum / 100000 - 0.5) < 0.005, "uniforms: min %g max %g mean %g", lo, hi,
          sum / 100000);
}

/* ---- parameters ---------------------------------------------------------- */

TEST(test_defaults_are_vllms) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    CHECK(p.n == 1 && p.temperature == 1.0f && p.top_p == 1.0f && p.top_k == 0 && p.min_p == 0.0f, "sampling");
    CHECK(p.presence_penalty == 0 && p.frequency_penalty == 0 && p.repetition_penalty == 1.0f, "penalties");
    CHECK(p.max_tokens == 16 && p.min_tokens == 0 && !p.ignore_eos && !p.has_seed && p.logprobs == -1, "limits");
    CHECK(p.num_stop_token_ids == 0 && p.num_logit_bias == 0, "lists");
    CHECK(vllm_sampling_params_validate(&p) == VLLM_OK, "%s", vllm_errmsg());
}

TEST(test_validation_messages) {
    struct { const char *field; double value; const char *msg; } cases_[] = {
        {"n", 0, "n must be at least 1, got 0."},
        {"presence_penalty", 2.5, "presence_penalty must be in [-2, 2], got 2.5."},
        {"frequency_penalty", -3, "frequency_penalty must be in [-2, 2], got -3.0."},
        {"repetition_penalty", 0, "repetition_penalty must be greater than zero, got 0.0."},
        {"temperature", -1, "temperature must be non-negative, got -1.0."},
        {"temperature", NAN, "temperature must be a finite number, got nan."},
        {"top_p", 0, "top_p must be in (0, 1], got 0.0."},
        {"top_p", 1.5, "top_p must be in (0, 1], got 1.5."},
        {"top_k", -2, "top_k must be 0 (disable), or at least 1, got -2."},
        {"min_p", 1.1, "min_p must be in [0, 1], got 1.1."},
        {"max_tokens", 0, "max_tokens must be at least 1, got 0."},
        {"min_tokens", -1, "min_tokens must be greater than or equal to 0, got -1."},
        {"min_tokens", 17, "min_tokens must be less than or equal to max_tokens=16, got 17."},
        {"logprobs", -2, "logprobs must be non-negative, got -2."},
        {"logprobs", 21, "Requested sample logprobs of 21, which is greater than max allowed: 20"},
        {"greedy_n", 2, "n must be 1 when using greedy sampling, got 2."},
        {"bias_nan", NAN, "logit_bias for token 3 must be a finite number, got nan."},
    };
    for (size_t i = 0; i < sizeof cases_ / sizeof cases_[0]; i++) {
        vllm_sampling_params p;
        vllm_sampling_params_init(&p);
        const char *f = cases_[i].field;
        double v = cases_[i].value;
        if (!strcmp(f, "n")) p.n = (int32_t)v;
        else if (!strcmp(f, "presence_penalty")) p.presence_penalty = (float)v;
        else if (!strcmp(f, "frequency_penalty")) p.frequency_penalty = (float)v;
        else if (!strcmp(f, "repetition_penalty")) p.repetition_penalty = (float)v;
        else if (!strcmp(f, "temperature")) p.temperature = (float)v;
        else if (!strcmp(f, "top_p")) p.top_p = (float)v;
        else if (!strcmp(f, "top_k")) p.top_k = (int32_t)v;
        else if (!strcmp(f, "min_p")) p.min_p = (float)v;
        else if (!strcmp(f, "max_tokens")) p.max_tokens = (int32_t)v;
        else if (!strcmp(f, "min_tokens")) p.min_tokens = (int32_t)v;
        else if (!strcmp(f, "logprobs")) p.logprobs = (int32_t)v;
        else if (!strcmp(f, "greedy_n")) p.n = (int32_t)v, p.temperature = 0;
        else if (!strcmp(f, "bias_nan")) p.num_logit_bias = 1, p.logit_bias_ids[0] = 3, p.logit_bias_values[0] = (float)v;
        vllm_status rc = vllm_sampling_params_validate(&p);
        CHECK(rc == VLLM_ERR_INVALID, "%s = %g accepted", f, v);
        CHECK(!strcmp(vllm_errmsg(), cases_[i].msg), "%s: got \"%s\", want \"%s\"", f, vllm_errmsg(), cases_[i].msg);
    }
    /* edges that are fine */
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.max_tokens = -1, p.min_tokens = 1000, p.top_k = -1, p.logprobs = 20, p.min_p = 1, p.presence_penalty = -2;
    p.temperature = 0.001f, p.n = 4; /* raised to 0.01: random, so n > 1 is allowed */
    CHECK(vllm_sampling_params_validate(&p) == VLLM_OK, "%s", vllm_errmsg());
}

TEST(test_logit_bias_vocab_check) {
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.num_logit_bias = 3;
    p.logit_bias_ids[0] = 5, p.logit_bias_ids[1] = 32000, p.logit_bias_ids[2] = -1;
    vllm_status rc = sampler_check_vocab(&p, 32000);
    const char *want = "token_id(s) [32000, -1] in logit_bias contain out-of-vocab token ids. Vocabulary size: 32000";
    CHECK(rc == VLLM_ERR_INVALID && !strcmp(vllm_errmsg(), want), "got \"%s\"", vllm_errmsg());
    p.num_logit_bias = 1;
    CHECK(sampler_check_vocab(&p, 32000) == VLLM_OK, "in-vocab id rejected");
    /* the bias shifts the distribution as a logit offset */
    float logits[] = {0, 0}, probs[2];
    p.logit_bias_ids[0] = 1, p.logit_bias_values[0] = logf(3.0f);
    CHECK(probs_of(&p, NULL, NULL, 0, logits, 2, probs) == VLLM_OK && near(probs[1], 0.75), "bias: %g", probs[1]);
}

/* ---- speed (reported, not asserted: the machine is shared) ---------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

TEST(test_speed_128k_vocab) {
    enum { V = 128256, REPS = 40 };
    float *base = malloc(V * sizeof *base), *work = malloc(V * sizeof *work);
    void *scratch = malloc(sampler_scratch_bytes(V));
    random_logits(base, V, 5);
    struct { const char *name; float t, top_p, min_p; int32_t top_k, logprobs; } cfg[] = {
        {"greedy", 0, 1, 0, 0, -1},          {"temperature 1", 1, 1, 0, 0, -1},
        {"top_k 50", 0.8f, 1, 0, 50, -1},    {"top_p 0.9", 0.8f, 0.9f, 0, 0, -1},
        {"top_k 50 + top_p 0.9", 0.8f, 0.9f, 0, 50, -1}, {"min_p 0.05", 1, 1, 0.05f, 0, -1},
        {"greedy + 20 logprobs", 0, 1, 0, 0, 20},
    };
    sampler_rng rng;
    sampler_rng_seed(&rng, 3);
    int32_t prompt[512];
    for (int i = 0; i < 512; i++) prompt[i] = (i * 2654435761u) % V;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        vllm_sampling_params p;
        vllm_sampling_params_init(&p);
        p.temperature = cfg[c].t, p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p, p.top_k = cfg[c].top_k;
        p.logprobs = cfg[c].logprobs, p.repetition_penalty = 1.1f;
        sample_history h = {prompt, 512, prompt, 64};
        sample_logprob top[VLLM_MAX_LOGPROBS];
        double best = 1e9; /* the fastest run: the least disturbed by other processes */
        for (int r = 0; r < REPS; r++) {
            memcpy(work, base, V * sizeof *work);
            sample_result res = {.top = top};
            double t0 = now();
            vllm_status rc = sampler_sample(&p, &h, NULL, 0, work, V, &rng, scratch, &res);
            double dt = now() - t0;
            CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
            best = dt < best ? dt : best;
        }
        printf("# sampler %-22s %7.3f ms/token (vocab %d, repetition penalty over 512+64 ids)\n", cfg[c].name,
               best * 1e3, V);
    }
    free(base), free(work), free(scratch);
}

/* ---- the step's batch ------------------------------------------------------ */

/* Greedy rows whose argmax is known: row j peaks at token peak[j]. */
static void peaked_rows(float *rows, int32_t nrows, int32_t V, const int32_t *peak) {
    for (int32_t j = 0; j < nrows; j++)
        for (int32_t i = 0; i < V; i++) rows[(size_t)j * V + i] = i == peak[j] ? 5.0f : (float)(i % 7) * 0.1f;
}

TEST(test_batch_drafts_accepted_while_equal) {
    enum { V = 64 };
    sampler *s;
    CHECK(sampler_create(V, (int32_t[]){1}, 1, NULL, &s) == VLLM_OK);
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = 0;
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    /* prompt 3 tokens, 1 output; drafts 10 11 12 13; the rows' argmaxes 10 11 40 13 14:
     * drafts 10 and 11 accepted, 12 rejected for 40 (13 never looked at) */
    int32_t tokens[9] = {7, 8, 9, 20, 10, 11, 12, 13}, peak[5] = {10, 11, 40, 13, 14}, out[5];
    float rows[5 * V];
    peaked_rows(rows, 5, V, peak);
    sample_seq q = {.params = &p, .rng = &rng, .tokens = tokens, .num_prompt = 3, .num_tokens = 4,
                    .num_drafts = 4, .logits = rows, .out_tokens = out};
    CHECK(sampler_sample_batch(s, &q, 1) == VLLM_OK);
    CHECK(q.num_out == 3 && out[0] == 10 && out[1] == 11 && out[2] == 40, "got %d: %d %d %d", q.num_out, out[0],
          out[1], out[2]);
    /* every draft right: all 4 and the bonus token 14 */
    int32_t peak2[5] = {10, 11, 12, 13, 14};
    peaked_rows(rows, 5, V, peak2);
    CHECK(sampler_sample_batch(s, &q, 1) == VLLM_OK);
    CHECK(q.num_out == 5 && out[3] == 13 && out[4] == 14, "got %d tokens", q.num_out);
    /* no drafts: one token */
    q.num_drafts = 0;
    peaked_rows(rows, 1, V, (int32_t[]){33});
    CHECK(sampler_sample_batch(s, &q, 1) == VLLM_OK && q.num_out == 1 && out[0] == 33);
    sampler_free(s);
}

/* Seeded random rows: drafts equal to what one-row-at-a-time sampling gives
 * are all accepted, the tokens and logprobs are that sampling's, and the
 * generator ends where that sampling leaves it. Penalties see the drafts
 * accepted before them as output. */
TEST(test_batch_seeded_rows_equal_sequential) {
    enum { V = 300, K = 4 };
    sampler *s;
    CHECK(sampler_create(V, (int32_t[]){2}, 1, NULL, &s) == VLLM_OK);
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.logprobs = 2;
    float rows[(K + 1) * V], work[V];
    uint64_t x = 7;
    for (int32_t i = 0; i < (K + 1) * V; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        rows[i] = (float)((x >> 40) % 1000) / 150.0f;
    }
    int32_t tokens[16] = {5, 6, 7, 8}, n = 4;
    sampler_rng seq_rng, batch_rng;
    sampler_rng_seed(&seq_rng, 42);
    batch_rng = seq_rng;
    void *scratch = malloc(sampler_scratch_bytes(V));
    sample_logprob tops[K + 1][2];
    float want_lp[K + 1];
    for (int32_t j = 0; j <= K; j++) { /* the reference: one row at a time, history growing */
        memcpy(work, rows + (size_t)j * V, sizeof work);
        sample_history h = {tokens, 4, tokens + 4, n - 4};
        sample_result r = {.top = tops[j]};
        CHECK(sampler_sample(&p, &h, (int32_t[]){2}, 1, work, V, &seq_rng, scratch, &r) == VLLM_OK);
        tokens[n++] = r.token_id;
        want_lp[j] = r.logprob;
    }
    int32_t out[K + 1];
    sample_result res[K + 1];
    sample_logprob btops[K + 1][2];
    for (int32_t j = 0; j <= K; j++) res[j].top = btops[j];
    sample_seq q = {.params = &p, .rng = &batch_rng, .tokens = tokens, .num_prompt = 4, .num_tokens = 5,
                    .num_drafts = K - 1, .logits = rows + V, .out_tokens = out, .out_results = res};
    /* rows + V: the batch's first row is the reference's second (one output already committed) */
    sampler_rng_seed(&batch_rng, 42);
    memcpy(work, rows, sizeof work);
    sample_history h0 = {tokens, 4, tokens + 4, 0};
    sample_result r0 = {.top = NULL};
    CHECK(sampler_sample(&p, &h0, (int32_t[]){2}, 1, work, V, &batch_rng, scratch, &r0) == VLLM_OK);
    CHECK(sampler_sample_batch(s, &q, 1) == VLLM_OK);
    CHECK(q.num_out == K, "%d of %d accepted+1", q.num_out, K);
    for (int32_t j = 0; j < K; j++) {
        CHECK(out[j] == tokens[5 + j], "row %d: token %d, sequential %d", j, out[j], tokens[5 + j]);
        CHECK(res[j].logprob == want_lp[j + 1] && res[j].num_top == 2 && !memcmp(btops[j], tops[j + 1], sizeof tops[0]),
              "row %d: logprobs differ", j);
    }
    CHECK(!memcmp(&batch_rng, &seq_rng, sizeof seq_rng), "one draw per committed token");
    free(scratch);
    sampler_free(s);
}

TEST(test_batch_grammar_mask_and_shared_rows) {
    enum { V = 70 }; /* three mask words, the last partial */
    sampler *s;
    CHECK(sampler_create(V, (int32_t[]){1}, 1, NULL, &s) == VLLM_OK);
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = 0;
    p.logprobs = 0;
    float row[V];
    for (int32_t i = 0; i < V; i++) row[i] = (float)i; /* argmax 69, then 68, ... */
    uint32_t mask[3] = {0, 0, 0};
    mask[40 / 32] |= 1u << (40 % 32);
    mask[65 / 32] |= 1u << (65 % 32);
    int32_t tokens[2] = {3, 4}, out[2][1];
    sampler_rng rng[2];
    sampler_rng_seed(&rng[0], 1);
    sampler_rng_seed(&rng[1], 2);
    sample_result res[2];
    sample_seq q[2] = {
        {.params = &p, .rng = &rng[0], .tokens = tokens, .num_prompt = 2, .num_tokens = 2, .logits = row,
         .shared_logits = true, .allowed = mask, .out_tokens = out[0], .out_results = &res[0]},
        {.params = &p, .rng = &rng[1], .tokens = tokens, .num_prompt = 2, .num_tokens = 2, .logits = row,
         .shared_logits = true, .out_tokens = out[1], .out_results = &res[1]},
    };
    res[0].top = res[1].top = NULL;
    CHECK(sampler_sample_batch(s, q, 2) == VLLM_OK);
    CHECK(out[0][0] == 65, "masked: only 40 and 65 allowed, got %d", out[0][0]);
    CHECK(out[1][0] == 69, "the shared row must stay unmasked for the second sequence, got %d", out[1][0]);
    /* the logprob is over the masked row: log(e^65 / (e^40 + e^65)) */
    double want = 65.0 - log(exp(40.0) + exp(65.0));
    CHECK(fabs(res[0].logprob - want) < 1e-6, "logprob %g, want %g", res[0].logprob, want);
    for (int32_t i = 0; i < V; i++) CHECK(row[i] == (float)i, "shared row modified at %d", i);
    uint32_t none[3] = {0, 0, 0};
    q[0].allowed = none;
    CHECK(sampler_sample_batch(s, q, 1) == VLLM_ERR_INVALID && q[0].rc == VLLM_ERR_INVALID,
          "a mask that allows nothing is an error");
    sampler_free(s);
}

/* Masks made of empty, full and mixed words and a partial last word: the
 * greedy token is the argmax over the allowed ids and its logprob is its
 * logit minus the log-sum-exp over the allowed ids alone (computed here in
 * double). The logits are all close, so one wrongly kept or dropped id
 * moves the logprob by ~1/1000 of the mass or more. */
TEST(test_batch_grammar_mask_words) {
    enum { V = 1000, CASES = 200 }; /* 31 full words and 8 ids in the last */
    sampler *s;
    CHECK(sampler_create(V, (int32_t[]){1}, 1, NULL, &s) == VLLM_OK);
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = 0;
    p.logprobs = 0;
    static float row[V];
    uint32_t mask[(V + 31) / 32];
    uint64_t x = 88172645463325252ull;
    for (int c = 0; c < CASES; c++) {
        for (int32_t i = 0; i < V; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            row[i] = (float)(x % 1000) / 1000.0f;
        }
        for (int32_t w = 0; w < (V + 31) / 32; w++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int kind = (int)(x % 4);
            mask[w] = kind == 0 ? 0u : kind == 1 ? UINT32_MAX : kind == 2 ? (uint32_t)(x >> 20) : 1u << (x >> 40) % 32;
        }
        mask[c % ((V + 31) / 32)] |= 1u; /* at least one id allowed */
        double mx = -1e30, sum = 0;
        int32_t want = -1;
        for (int32_t i = 0; i < V; i++)
            if (mask[i / 32] >> (i % 32) & 1u) {
                if (row[i] > mx) mx = row[i], want = i;
            }
        for (int32_t i = 0; i < V; i++)
            if (mask[i / 32] >> (i % 32) & 1u) sum += exp((double)row[i] - mx);
        int32_t tokens[2] = {3, 4}, out[1];
        sampler_rng rng;
        sampler_rng_seed(&rng, 1);
        sample_result res = {.top = NULL};
        sample_seq q = {.params = &p, .rng = &rng, .tokens = tokens, .num_prompt = 2, .num_tokens = 2,
                        .logits = row, .allowed = mask, .out_tokens = out, .out_results = &res};
        CHECK(sampler_sample_batch(s, &q, 1) == VLLM_OK, "case %d", c);
        double lp = -log(sum);
        CHECK(out[0] == want, "case %d: token %d, want %d (the argmax of the allowed ids)", c, out[0], want);
        CHECK(fabs(res.logprob - lp) < 1e-5, "case %d: logprob %.7f, want %.7f", c, res.logprob, lp);
        for (int32_t i = 0; i < V; i++)
            CHECK((mask[i / 32] >> (i % 32) & 1u) ? isfinite(row[i]) : row[i] == -INFINITY,
                  "case %d: id %d is %g with mask bit %u", c, i, row[i], mask[i / 32] >> (i % 32) & 1u);
    }
    sampler_free(s);
}

TEST(test_batch_on_pool_equals_serial) {
    enum { V = 500, N = 40 };
    threadpool *pool;
    CHECK(threadpool_create(2, &pool) == VLLM_OK);
    sampler *par, *ser;
    CHECK(sampler_create(V, (int32_t[]){2}, 1, pool, &par) == VLLM_OK);
    CHECK(sampler_create(V, (int32_t[]){2}, 1, NULL, &ser) == VLLM_OK);
    static float rows[2][N * 3 * V];
    uint64_t x = 3;
    for (int32_t i = 0; i < N * 3 * V; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        rows[0][i] = rows[1][i] = (float)((x >> 40) % 1000) / 120.0f;
    }
    vllm_sampling_params p[N];
    sampler_rng rng[2][N];
    int32_t tokens[N][8], out[2][N][3];
    sample_seq q[2][N];
    for (int32_t i = 0; i < N; i++) {
        vllm_sampling_params_init(&p[i]);
        p[i].temperature = i % 3 ? 1.0f : 0.0f;
        p[i].top_k = i % 5 ? 0 : 20;
        for (int32_t t = 0; t < 8; t++) tokens[i][t] = (i * 7 + t * 13) % V;
        for (int32_t c = 0; c < 2; c++) {
            sampler_rng_seed(&rng[c][i], 100 + (uint64_t)i);
            q[c][i] = (sample_seq){.params = &p[i], .rng = &rng[c][i], .tokens = tokens[i], .num_prompt = 4,
                                   .num_tokens = 6, .num_drafts = i % 3, .logits = rows[c] + (size_t)i * 3 * V,
                                   .out_tokens = out[c][i]};
        }
    }
    CHECK(sampler_sample_batch(par, q[0], N) == VLLM_OK && sampler_sample_batch(ser, q[1], N) == VLLM_OK);
    for (int32_t i = 0; i < N; i++) {
        CHECK(q[0][i].num_out == q[1][i].num_out && !memcmp(out[0][i], out[1][i], sizeof(int32_t) * (size_t)q[0][i].num_out),
              "sequence %d differs between the pool and the calling thread", i);
        CHECK(!memcmp(&rng[0][i], &rng[1][i], sizeof rng[0][i]));
    }
    sampler_free(par);
    sampler_free(ser);
    threadpool_free(pool);
}

int main(void) {
    RUN(test_probs_match_reference);
    RUN(test_logprobs_match_reference);
    RUN(test_chi_square_of_seeded_draws);
    RUN(test_greedy_ties_go_to_lowest_id);
    RUN(test_penalties_by_hand);
    RUN(test_min_tokens_masks_eos_and_stop_ids);
    RUN(test_top_k_top_p_min_p_edges);
    RUN(test_temperature_clamp_and_greedy_threshold);
    RUN(test_seeded_sequences_repeat_and_differ);
    RUN(test_rng_seeding);
    RUN(test_defaults_are_vllms);
    RUN(test_validation_messages);
    RUN(test_logit_bias_vocab_check);
    RUN(test_batch_drafts_accepted_while_equal);
    RUN(test_batch_seeded_rows_equal_sequential);
    RUN(test_batch_grammar_mask_and_shared_rows);
    RUN(test_batch_grammar_mask_words);
    RUN(test_batch_on_pool_equals_serial);
    RUN(test_speed_128k_vocab);
    free_reference();
    return harness_done();
}

/*
 * test_spec_rejection.c - vLLM's rejection sampler (sample_seq.draft_probs,
 * sample/sampler.h) from hand-computed cases: a 4-token vocabulary whose
 * logits are log p (temperature 1, so the target's distribution is p), a
 * given draft distribution q, and the sequence generator's uniforms u1, u2
 * read from a copy of it. What each case expects follows from the rule
 * alone: accept draft x iff q(x) > 0 and p(x) >= u1 q(x); on rejection the
 * token is the inverse CDF, in id order, of normalize(max(0, p - q)) at u2;
 * when all drafts are accepted the bonus token is the inverse CDF of the
 * last row's p at the next uniform. Plus: greedy requests stay exact (no
 * draw), the emitted tokens' logprobs are log p, and a chi-square over
 * 20,000 seeded draws (drafts sampled from a bad q) against p: statistic
 * below 16.27, the 1e-3 critical value with 3 degrees of freedom; the seeds
 * are fixed, so the verdict is the same every run. Planting a bug (accepting
 * when p(x) >= q(x) alone, ignoring u) fails accept_by_ratio and chisq.
 */
/* checks: 6 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "sample/sampler.h"

enum { V = 4 };

static const float P0[V] = {0.1f, 0.2f, 0.3f, 0.4f};  /* row 0's target distribution */
static const float P1[V] = {0.7f, 0.1f, 0.1f, 0.1f};  /* row 1's */
static const float P2[V] = {0.25f, 0.25f, 0.25f, 0.25f};

/* inverse CDF of w (unnormalised, id order) at u */
static int32_t icdf(const double *w, double u) {
    double m = 0.0, acc = 0.0;
    for (int i = 0; i < V; i++) m += w[i];
    int32_t last = -1;
    for (int i = 0; i < V; i++) {
        if (w[i] <= 0.0) continue;
        acc += w[i];
        last = i;
        if (u * m < acc) return i;
    }
    return last;
}

typedef struct run {
    int32_t out[3];
    int32_t num_out;
    float logprob[3];
    double u[3];                     /* the generator's first three uniforms */
    vllm_status rc;
} run;

/* Verifies drafts (num_drafts of them, each with its q row) against rows
 * P0, P1, P2 for a request with the given temperature and seed. */
static run verify(float temperature, uint64_t seed, const int32_t *drafts, int32_t num_drafts, const float *q) {
    run r = {0};
    sampler *s = NULL;
    if ((r.rc = sampler_create(V, (int32_t[]){99}, 0, NULL, &s)) != VLLM_OK) return r;
    vllm_sampling_params p;
    vllm_sampling_params_init(&p);
    p.temperature = temperature;
    p.logprobs = 0;
    sampler_rng rng, copy;
    sampler_rng_seed(&rng, seed);
    copy = rng;
    for (int i = 0; i < 3; i++) r.u[i] = sampler_rng_uniform(&copy);
    int32_t tokens[8] = {0, 1, 2};
    for (int32_t j = 0; j < num_drafts; j++) tokens[3 + j] = drafts[j];
    float logits[3 * V];
    const float *rows[3] = {P0, P1, P2};
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < V; i++) logits[j * V + i] = logf(rows[j][i]);
    int32_t out[3];
    sample_result res[3] = {{.top = NULL}};
    sample_seq sq = {.params = &p, .rng = &rng, .tokens = tokens, .num_prompt = 3, .num_tokens = 3,
                     .num_drafts = num_drafts, .logits = logits, .draft_probs = q, .out_tokens = out,
                     .out_results = res};
    r.rc = sampler_sample_batch(s, &sq, 1);
    r.num_out = sq.num_out;
    for (int32_t j = 0; j < sq.num_out; j++) r.out[j] = out[j], r.logprob[j] = res[j].logprob;
    sampler_free(s);
    return r;
}

/* A seed whose first uniform is below (want_below) or above x. */
static uint64_t seed_with_u1(double x, bool want_below) {
    for (uint64_t seed = 1;; seed++) {
        sampler_rng rng;
        sampler_rng_seed(&rng, seed);
        double u = sampler_rng_uniform(&rng);
        if ((u < x) == want_below && fabs(u - x) > 1e-3) return seed;
    }
}

/* p(1)/q(1) = 0.2/0.5 = 0.4: accepted iff u1 <= 0.4; on rejection the
 * residual is {0, 0, 0.175, 0.275}. */
TEST(accept_by_ratio) {
    const float q[V] = {0.25f, 0.5f, 0.125f, 0.125f};
    int32_t d = 1;
    for (int trial = 0; trial < 2; trial++) {
        bool accept = trial == 0;
        run r = verify(1.0f, seed_with_u1(0.4, accept), &d, 1, q);
        CHECK(r.rc == VLLM_OK);
        if (accept) {
            double w[V] = {0.7, 0.1, 0.1, 0.1};
            CHECK(r.num_out == 2 && r.out[0] == 1, "u1 %.4f: got %d tokens, first %d", r.u[0], r.num_out, r.out[0]);
            CHECK(r.out[1] == icdf(w, r.u[1]), "bonus %d, want %d (u2 %.4f)", r.out[1], icdf(w, r.u[1]), r.u[1]);
        } else {
            double w[V] = {0, 0, 0.175, 0.275};
            CHECK(r.num_out == 1 && r.out[0] == icdf(w, r.u[1]), "u1 %.4f u2 %.4f: got %d tokens, first %d, want %d",
                  r.u[0], r.u[1], r.num_out, r.out[0], icdf(w, r.u[1]));
        }
    }
}

/* p(x) >= q(x): accepted whatever u1 (32 seeds); both drafts here, then
 * the bonus from row 2 (uniform) at u3. */
TEST(accept_when_p_covers_q) {
    const float q[2 * V] = {0.4f, 0.3f, 0.2f, 0.1f, /* row 0: x = 3, p 0.4 >= q 0.1 */
                            0.1f, 0.3f, 0.3f, 0.3f}; /* row 1: x = 0, p 0.7 >= q 0.1 */
    int32_t d[2] = {3, 0};
    for (uint64_t seed = 1; seed <= 32; seed++) {
        run r = verify(1.0f, seed, d, 2, q);
        double w[V] = {1, 1, 1, 1};
        CHECK(r.rc == VLLM_OK && r.num_out == 3 && r.out[0] == 3 && r.out[1] == 0 && r.out[2] == icdf(w, r.u[2]),
              "seed %llu: %d tokens %d %d %d", (unsigned long long)seed, r.num_out, r.out[0], r.out[1], r.out[2]);
    }
}

/* q(x) = 0 (a draft its q cannot give): rejected even at the smallest u1,
 * the token from max(0, p - q) = {0, 0, 0.3, 0.4}. */
TEST(reject_when_q_is_zero) {
    const float q[V] = {0.5f, 0.5f, 0.0f, 0.0f};
    int32_t d = 2;
    uint64_t seed = seed_with_u1(0.05, true);
    run r = verify(1.0f, seed, &d, 1, q);
    double w[V] = {0, 0, 0.3, 0.4};
    CHECK(r.rc == VLLM_OK && r.num_out == 1 && r.out[0] == icdf(w, r.u[1]), "u1 %.4f: %d tokens, %d",
          r.u[0], r.num_out, r.out[0]);
}

/* Greedy: the drafts are checked against the argmax (3, then 0), no draw. */
TEST(greedy_stays_exact) {
    const float q[2 * V] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
    int32_t good[2] = {3, 0}, bad[2] = {2, 0};
    run a = verify(0.0f, 5, good, 2, q), b = verify(0.0f, 5, bad, 2, q);
    CHECK(a.rc == VLLM_OK && a.num_out == 3 && a.out[0] == 3 && a.out[1] == 0 && a.out[2] == 0,
          "%d tokens %d %d %d", a.num_out, a.out[0], a.out[1], a.out[2]);
    CHECK(b.rc == VLLM_OK && b.num_out == 1 && b.out[0] == 3, "%d tokens %d", b.num_out, b.out[0]);
}

/* The logprob of each emitted token is log p (raw logits = log p). */
TEST(logprobs_of_emitted) {
    const float q[V] = {0.25f, 0.5f, 0.125f, 0.125f};
    int32_t d = 1;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        run r = verify(1.0f, seed, &d, 1, q);
        const float *rows[2] = {P0, P1};
        for (int32_t j = 0; j < r.num_out; j++)
            CHECK(fabsf(r.logprob[j] - logf(rows[j][r.out[j]])) < 1e-5f, "seed %llu row %d: %f vs %f",
                  (unsigned long long)seed, j, r.logprob[j], logf(rows[j][r.out[j]]));
    }
}

/* 20,000 drafts drawn from a bad q = {0.7, 0.1, 0.1, 0.1} (its own
 * generator), verified: the first emitted token follows p = P0. */
TEST(chisq_first_token_is_p) {
    const float q[V] = {0.7f, 0.1f, 0.1f, 0.1f};
    enum { N = 20000 };
    int count[V] = {0};
    sampler_rng drafter;
    sampler_rng_seed(&drafter, 12345);
    double cq[V] = {0.7, 0.1, 0.1, 0.1};
    for (int i = 0; i < N; i++) {
        int32_t d = icdf(cq, sampler_rng_uniform(&drafter));
        run r = verify(1.0f, 1000 + (uint64_t)i, &d, 1, q);
        CHECK(r.rc == VLLM_OK && r.num_out >= 1);
        count[r.out[0]]++;
    }
    double chi = 0.0;
    for (int i = 0; i < V; i++) {
        double e = N * (double)P0[i];
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    CHECK(chi < 16.27, "chi-square %.2f (counts %d %d %d %d)", chi, count[0], count[1], count[2], count[3]);
    printf("# chi-square %.2f over %d draws, counts %d %d %d %d\n", chi, N, count[0], count[1], count[2], count[3]);
}

int main(void) {
    RUN(accept_by_ratio);
    RUN(accept_when_p_covers_q);
    RUN(reject_when_q_is_zero);
    RUN(greedy_stays_exact);
    RUN(logprobs_of_emitted);
    RUN(chisq_first_token_is_p);
    return harness_done();
}

/*
 * test_spec_policy.c - speculative decoding's adaptive k (spec/spec_policy.h)
 * from its rules, worked by hand: the first step gets k; then
 * floor(mean accepted) + 1 with the mean weighted 1/2 on the newest step
 * after a rejection, twice the drafts after a step that accepted them all;
 * below a mean of 1/4 only every 8th output token proposes; the batch's K
 * is the one with the most expected tokens per cost (a sequence accepting
 * a draft with chance p expects p + ... + p^k of k; p = 3/4 without a
 * record or when probing), cost = w + R + sum k_i
 * (+ a draft model's K w_d + c_d (sum k_i + sum a_i + catch-up)), and 0
 * unless it beats R / (w + R) by 5%. Every expected value below is worked
 * out in the comment beside it.
 */
/* checks: 7 */
#include "harness.h"
#include "model/model.h"
#include "spec/spec_policy.h"

TEST(first_step_gets_k) {
    spec_policy_seq s = {0};
    CHECK(spec_policy_num_drafts(&s, 4, 0) == 4);
    CHECK(spec_policy_num_drafts(&s, 7, 3) == 7);
}

TEST(follows_acceptance) {
    spec_policy_seq s = {0};
    spec_policy_update(&s, 4, 4);                           /* mean 4 */
    CHECK(spec_policy_num_drafts(&s, 4, 5) == 4, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 4, 0);                           /* 2 */
    CHECK(spec_policy_num_drafts(&s, 4, 6) == 3, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 3, 1);                           /* 1.5 */
    CHECK(spec_policy_num_drafts(&s, 4, 8) == 2, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 0, 0);                           /* nothing verified: no change */
    CHECK(s.num_verified == 3 && s.mean_accepted == 1.5f);
    spec_policy_update(&s, 2, 0);                           /* 0.75 */
    CHECK(spec_policy_num_drafts(&s, 4, 9) == 1, "mean %f", s.mean_accepted);
}

/* After a rejection a copying text climbs back to k: the limit doubles
 * with each step that accepts every draft. (The mean alone would stay
 * below 1: 0.75, 0.875, 0.9375, ... with one draft accepted per step.) */
TEST(climbs_after_rejection) {
    spec_policy_seq s = {0};
    spec_policy_update(&s, 6, 6);                           /* limit 12 */
    CHECK(spec_policy_num_drafts(&s, 6, 7) == 6, "limit %d", s.limit);
    spec_policy_update(&s, 6, 0);                           /* mean 3: limit 4 */
    CHECK(spec_policy_num_drafts(&s, 6, 8) == 4, "limit %d", s.limit);
    spec_policy_update(&s, 4, 0);                           /* mean 1.5: limit 2 */
    spec_policy_update(&s, 2, 0);                           /* mean 0.75: limit 1 */
    CHECK(spec_policy_num_drafts(&s, 6, 9) == 1, "limit %d", s.limit);
    spec_policy_update(&s, 1, 1);                           /* mean 0.875: 2 */
    CHECK(spec_policy_num_drafts(&s, 6, 11) == 2, "limit %d mean %f", s.limit, s.mean_accepted);
    spec_policy_update(&s, 2, 2);                           /* 4 */
    CHECK(spec_policy_num_drafts(&s, 6, 14) == 4, "limit %d", s.limit);
    spec_policy_update(&s, 4, 4);                           /* 8, capped at k */
    CHECK(spec_policy_num_drafts(&s, 6, 19) == 6, "limit %d", s.limit);
    spec_policy_update(&s, 2, 2);                           /* fewer drafts (the proposer's), all taken: kept */
    CHECK(s.limit == 8, "limit %d", s.limit);
    spec_policy_update(&s, 6, 3);                           /* a rejection: floor(mean) + 1 */
    CHECK(s.limit == (int32_t)s.mean_accepted + 1 && s.limit < 6, "limit %d mean %f", s.limit, s.mean_accepted);
}

TEST(probes_when_missing) {
    spec_policy_seq s = {0};
    spec_policy_update(&s, 4, 0);                           /* mean 0 */
    CHECK(spec_policy_num_drafts(&s, 4, 9) == 0);
    CHECK(spec_policy_num_drafts(&s, 4, 15) == 0);
    CHECK(spec_policy_num_drafts(&s, 4, 16) == 1);
    spec_policy_update(&s, 1, 1);                           /* 0.5: back to every step, and its one
                                                               draft accepted: 2 */
    CHECK(spec_policy_num_drafts(&s, 4, 17) == 2, "mean %f", s.mean_accepted);
}

/* n-gram (no draft forwards), w = 3 rows (a Q4_x model) */
TEST(batch_ngram) {
    spec_policy_cost c = {.weight_rows = 3.0};
    spec_policy_batch b;
    spec_policy_seq fresh = {0};
    /* one sequence, no record (the prior p = 3/4: expects 0.75, 1.3125,
     * 1.734 of 1, 2, 3): base 1/4 = 0.25; K=1 1.75/5 = 0.35, K=2 2.3125/6
     * = 0.385, K=3 2.734/7 = 0.391: K = 3 */
    spec_policy_batch_init(&b, 3);
    spec_policy_batch_add(&b, &fresh, 3, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 1) == 3);
    /* 5 without a record: base 5/8 x 1.05 = 0.656; K=1 8.75/13 = 0.673,
     * K=2 11.5625/18 = 0.642: K = 1; 6: base 6/9 x 1.05 = 0.7, K=1
     * 10.5/15 = 0.7, not more: 0 (a loaded server tries no drafts that no
     * sequence has shown it accepts); 16: K=1 28/35 = 0.8 < 0.884: 0 */
    spec_policy_batch_init(&b, 3);
    for (int i = 0; i < 5; i++) spec_policy_batch_add(&b, &fresh, 3, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 5) == 1);
    spec_policy_batch_add(&b, &fresh, 3, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 6) == 0);
    for (int i = 0; i < 10; i++) spec_policy_batch_add(&b, &fresh, 3, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 0);
    /* 16 probing (mean < 1/4: one draft each, at the prior): the same 0 */
    spec_policy_seq probe = {.mean_accepted = 0.0f, .num_verified = 3, .limit = 1, .tries = 2.0f};
    spec_policy_batch_init(&b, 4);
    for (int i = 0; i < 16; i++) spec_policy_batch_add(&b, &probe, 1, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 0);
    /* no candidates: 0 */
    spec_policy_batch_init(&b, 3);
    CHECK(spec_policy_batch_k(&b, &c, 8) == 0);
    /* 16 sequences accepting 0.5 (p = 1/2, own limit 1): base 16/19 = 0.842;
     * K=1 (16 + 8)/(19 + 16) = 0.686 (and K > 1 adds nothing): K = 0 */
    spec_policy_seq half = {.mean_accepted = 0.5f, .num_verified = 3, .hits = 1.0f, .tries = 2.0f};
    spec_policy_batch_init(&b, 4);
    for (int i = 0; i < 16; i++) spec_policy_batch_add(&b, &half, 1, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 0);
    /* 16 accepting every draft (p = 4/4 = 1, own 4), k = 4: need > 0.842 x
     * 1.05 = 0.884; K=1 32/35 = 0.914, K=2 48/51 = 0.941, K=3 64/67 =
     * 0.955, K=4 80/83 = 0.964: K = 4 */
    spec_policy_seq all = {.mean_accepted = 4.0f, .num_verified = 3, .hits = 4.0f, .tries = 4.0f};
    spec_policy_batch_init(&b, 4);
    for (int i = 0; i < 16; i++) spec_policy_batch_add(&b, &all, 4, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 4);
    /* the same 16 and 16 more decoding without candidates (R = 32):
     * base 32/35 x 1.05 = 0.960; K=4 (32 + 64)/(35 + 64) = 0.970: 4;
     * R = 40: base 40/43 x 1.05 = 0.977, K=4 104/107 = 0.972, K=3 88/91 =
     * 0.967 (and less below): 0 */
    CHECK(spec_policy_batch_k(&b, &c, 32) == 4);
    CHECK(spec_policy_batch_k(&b, &c, 40) == 0);
    /* 16 whose drafts are accepted with p = 3/4 (expected accepted of K:
     * 0.75, 1.3125, 1.734, 2.051): K=1 (16 + 12)/35 = 0.80, K=2 0.726,
     * K=3 0.653, K=4 0.588, all below 0.884: 0 */
    spec_policy_seq most = {.mean_accepted = 3.0f, .num_verified = 3, .hits = 3.0f, .tries = 4.0f};
    spec_policy_batch_init(&b, 4);
    for (int i = 0; i < 16; i++) spec_policy_batch_add(&b, &most, 4, 50, 10);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 0);
    /* the record: 3 of 4 accepted, then 2 of 2: hits 0.5 x 3 + 2 = 3.5,
     * tries 0.5 x 4 + 2 = 4 (the first step's rejected draft counts, the
     * unjudged ones after it do not) */
    spec_policy_seq r = {0};
    spec_policy_update(&r, 4, 3);
    spec_policy_update(&r, 2, 2);
    CHECK(r.hits == 3.5f && r.tries == 4.0f, "hits %f tries %f", r.hits, r.tries);
}

/* a draft model: w = 20 (an F32 target), w_d = 3, c_d = 1 (its Q4 copy) */
TEST(batch_draft_model) {
    spec_policy_cost c = {.weight_rows = 20.0, .draft_weight_rows = 3.0, .draft_row = 1.0};
    spec_policy_batch b;
    /* one new sequence of 100 tokens, room 50 (catch-up 100/32 = 3.125),
     * the prior p = 3/4 (expects 0.75, 1.3125, 1.734, 2.051 of 1..4):
     * base 1/21 = 0.0476; K=1 1.75/(22 + 3 + 1.75 + 3.125) = 0.0586,
     * K=2 2.3125/(23 + 6 + 3.3125 + 3.125) = 0.0653, K=3 2.734/(24 + 9 +
     * 4.734 + 3.125) = 0.0669, K=4 3.051/(25 + 12 + 6.051 + 3.125) =
     * 0.0661: K = 3 */
    spec_policy_seq fresh = {0};
    spec_policy_batch_init(&b, 4);
    spec_policy_batch_add(&b, &fresh, 4, 100, 50);
    CHECK(spec_policy_batch_k(&b, &c, 1) == 3);
    /* 16 with p = 3/4 (own 4), k = 3, 4 tokens behind, room 100 (catch-up
     * 16 x 4/32 = 2): base 16/36 = 0.444; K=1 (16 + 12)/(36 + 16 + 3 + 16 +
     * 12 + 2) = 0.329, K=2 0.287, K=3 0.256: K = 0 */
    spec_policy_seq most = {.mean_accepted = 3.0f, .num_verified = 3, .proposed_at = 96, .hits = 3.0f, .tries = 4.0f};
    spec_policy_batch_init(&b, 3);
    for (int i = 0; i < 16; i++) spec_policy_batch_add(&b, &most, 4, 100, 100);
    CHECK(spec_policy_batch_k(&b, &c, 16) == 0);
    /* 2 of them: base 2/22 = 0.0909 (x 1.05 = 0.0955); K=1 3.5/(22 + 2 + 3
     * + 2 + 1.5 + 0.25) = 0.114, K=2 4.625/(22 + 4 + 6 + 4 + 2.625 + 0.25)
     * = 0.119, K=3 5.469/(22 + 6 + 9 + 6 + 3.469 + 0.25) = 0.117: K = 2 */
    spec_policy_batch_init(&b, 3);
    for (int i = 0; i < 2; i++) spec_policy_batch_add(&b, &most, 4, 100, 100);
    CHECK(spec_policy_batch_k(&b, &c, 2) == 2);
    /* 2 accepting every draft (p = 1): K=3 8/(28 + 9 + 6 + 6 + 0.25) =
     * 0.162 beats K=2 6/(26 + 6 + 4 + 4 + 0.25) = 0.149: K = 3 */
    spec_policy_seq all = {.mean_accepted = 3.0f, .num_verified = 3, .proposed_at = 96, .hits = 3.0f, .tries = 3.0f};
    spec_policy_batch_init(&b, 3);
    for (int i = 0; i < 2; i++) spec_policy_batch_add(&b, &all, 4, 100, 100);
    CHECK(spec_policy_batch_k(&b, &c, 2) == 3);
    /* a paused sequence 3,000 tokens behind with room 10: catch-up 300 rows:
     * K=1 2/(22 + 3 + 2 + 300) < 1/21: K = 0 */
    spec_policy_seq paused = {.mean_accepted = 3.0f, .num_verified = 3, .proposed_at = 100};
    spec_policy_batch_init(&b, 3);
    spec_policy_batch_add(&b, &paused, 4, 3100, 10);
    CHECK(spec_policy_batch_k(&b, &c, 1) == 0);
}

/* the cost model from the weights: w = 10 flops/byte x bytes / (2 params) */
TEST(cost_from_weights) {
    static float dummy[1];
    layer_weights lw = {0}, lq = {0};
    tensor *tf[] = {&lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.gate_proj, &lw.up_proj, &lw.down_proj};
    tensor *tq[] = {&lq.q_proj, &lq.k_proj, &lq.v_proj, &lq.o_proj, &lq.gate_proj, &lq.up_proj, &lq.down_proj};
    for (int i = 0; i < 7; i++) { /* 16 MiB each in F32, 2.25 MiB in Q4_0: more than the caches keep */
        *tf[i] = (tensor){.type = DTYPE_F32, .ndim = 2, .shape = {4096, 1024}, .data = dummy};
        *tq[i] = (tensor){.type = DTYPE_Q4_0, .ndim = 2, .shape = {4096, 1024}, .data = dummy};
    }
    model t = {0}, d = {0};
    t.config.num_hidden_layers = d.config.num_hidden_layers = 1;
    t.w.layers = &lw;
    d.w.layers = &lq;
    t.w.lm_head = (tensor){.type = DTYPE_F32, .ndim = 2, .shape = {8192, 1024}, .data = dummy};
    d.w.lm_head = (tensor){.type = DTYPE_Q4_0, .ndim = 2, .shape = {8192, 1024}, .data = dummy};
    /* F32: 4 bytes a parameter: 10 x 4 / 2 = 20 */
    spec_policy_cost c = spec_policy_cost_of(&t, NULL);
    CHECK(c.weight_rows > 19.999 && c.weight_rows < 20.001, "w %f", c.weight_rows);
    CHECK(c.draft_weight_rows == 0.0 && c.draft_row == 0.0);
    /* Q4_0 draft of the same shape: 18 bytes per 32: 10 x 0.5625 / 2 = 2.8125, c_d = 1 */
    c = spec_policy_cost_of(&t, &d);
    CHECK(c.draft_weight_rows > 2.8124 && c.draft_weight_rows < 2.8126, "w_d %f", c.draft_weight_rows);
    CHECK(c.draft_row > 0.9999 && c.draft_row < 1.0001, "c_d %f", c.draft_row);
    /* a model of 8 x 64 x 64 F32 weights (128 KiB) stays in the caches: a tenth, 2 */
    for (int i = 0; i < 7; i++) tf[i]->shape[0] = tf[i]->shape[1] = 64;
    t.w.lm_head.shape[0] = t.w.lm_head.shape[1] = 64;
    c = spec_policy_cost_of(&t, NULL);
    CHECK(c.weight_rows > 1.9999 && c.weight_rows < 2.0001, "w %f", c.weight_rows);
}

int main(void) {
    RUN(first_step_gets_k);
    RUN(follows_acceptance);
    RUN(climbs_after_rejection);
    RUN(probes_when_missing);
    RUN(batch_ngram);
    RUN(batch_draft_model);
    RUN(cost_from_weights);
    return harness_done();
}

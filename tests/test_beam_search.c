/*
 * test_beam_search.c - the beam search loop (engine/beam_search.h) on a toy
 * "model" whose next-token logprobs depend only on the last token, with the
 * answers worked out by hand from vLLM's algorithm (vllm/beam_search.py and
 * LLM.beam_search): the top 2 x width continuations of every beam, EOS ones
 * set aside as completed, the best width of the rest go on; at the end the
 * best width of all by cumulative_logprob / len ** length_penalty, len
 * counting the prompt and not a final EOS. Against transformers on a real
 * model: tests/test_beam_search.sh.
 *
 * The toy (EOS = 2; each list is what the step returns, best first):
 *   after 10: 11 -0.1, 12 -0.5,  2 -1.0, 13 -2.0
 *   after 11:  2 -0.2, 14 -1.5, 15 -2.5, 16 -3.0
 *   after 12: 17 -0.3,  2 -0.9, 18 -1.2, 19 -4.0
 *   else:     20 -0.05, 2 -3.0, 21 -3.5, 22 -4.0
 * Width 2 from the prompt [10], 3 tokens:
 *   step 1: [10,2] completes (score -1.0/1); live [10,11] (-0.1), [10,12] (-0.5)
 *   step 2: [10,11,2] completes (-0.3/2 = -0.15), [10,12,2] too (-1.4/2);
 *           live [10,12,17] (-0.8/3), [10,11,14] (-1.6/3)
 *   step 3: live [10,12,17,20] (-0.85/4 = -0.2125), [10,11,14,20] (-1.65/4)
 *   answer: [11,2] (cum -0.3, score -0.15, stop), [12,17,20] (-0.85, -0.2125, length)
 * length_penalty 2 keeps the same beams (each step's scores share a length)
 * but ranks [12,17,20] (-0.85/16) above [11,2] (-0.3/4). ignore_eos: EOS is
 * a token like any other: [11,2,20] (-0.35), [12,17,20] (-0.85), both length.
 */
/* checks: 5 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/beam_search.h"
#include "harness.h"

static const beam_candidate after10[] = {{11, -0.1f}, {12, -0.5f}, {2, -1.0f}, {13, -2.0f}};
static const beam_candidate after11[] = {{2, -0.2f}, {14, -1.5f}, {15, -2.5f}, {16, -3.0f}};
static const beam_candidate after12[] = {{17, -0.3f}, {2, -0.9f}, {18, -1.2f}, {19, -4.0f}};
static const beam_candidate other[] = {{20, -0.05f}, {2, -3.0f}, {21, -3.5f}, {22, -4.0f}};

typedef struct toy { int calls, max_n; bool fail_at_2; } toy;

static vllm_status toy_step(void *ud, const int32_t *const *seqs, const int32_t *lens, int32_t n, int32_t k,
                            beam_candidate *out, int32_t *num_out) {
    toy *t = ud;
    if (t->fail_at_2 && t->calls == 1) return vllm_error(VLLM_ERR_IO, "the toy failed");
    t->calls++;
    if (n > t->max_n) t->max_n = n;
    for (int32_t i = 0; i < n; i++) {
        int32_t last = seqs[i][lens[i] - 1];
        const beam_candidate *c = last == 10 ? after10 : last == 11 ? after11 : last == 12 ? after12 : other;
        int32_t m = k < 4 ? k : 4;
        memcpy(out + (size_t)i * (size_t)(k + 1), c, (size_t)m * sizeof *c);
        num_out[i] = m;
    }
    return VLLM_OK;
}

static const int32_t eos[] = {2};
static const int32_t prompt[] = {10};

static bool same_ids(const vllm_beam *b, const int32_t *ids, int32_t n) {
    return b->num_tokens == n && !memcmp(b->token_ids, ids, (size_t)n * sizeof *ids);
}

static vllm_status run(float lp, bool ignore_eos, toy *t, vllm_beam **out, int32_t *n) {
    vllm_beam_search_params p;
    vllm_beam_search_params_init(&p);
    p.beam_width = 2;
    p.max_tokens = 3;
    p.length_penalty = lp;
    p.ignore_eos = ignore_eos;
    return beam_search_run(&p, eos, 1, prompt, 1, toy_step, t, out, n);
}

TEST(test_beam_eos_completes) {
    toy t = {0};
    vllm_beam *b;
    int32_t n;
    CHECK(run(1.0f, false, &t, &b, &n) == VLLM_OK, "%s", vllm_errmsg());
    static const int32_t a[] = {11, 2}, c[] = {12, 17, 20};
    bool ok = n == 2 && same_ids(&b[0], a, 2) && same_ids(&b[1], c, 3) && fabs(b[0].cumulative_logprob + 0.3) < 1e-6 &&
              fabs(b[0].score + 0.15) < 1e-6 && b[0].finish_reason == VLLM_FINISH_STOP && b[0].stop_token_id == 2 &&
              fabs(b[1].cumulative_logprob + 0.85) < 1e-6 && fabs(b[1].score + 0.2125) < 1e-6 &&
              b[1].finish_reason == VLLM_FINISH_LENGTH && b[1].stop_token_id == -1;
    vllm_beams_free(b, n);
    CHECK(ok, "the beams are not the hand-derived ones");
    CHECK(t.calls == 3 && t.max_n == 2, "%d steps of at most %d beams", t.calls, t.max_n);
}

TEST(test_beam_length_penalty_ranks) {
    toy t = {0};
    vllm_beam *b;
    int32_t n;
    CHECK(run(2.0f, false, &t, &b, &n) == VLLM_OK, "%s", vllm_errmsg());
    static const int32_t a[] = {12, 17, 20}, c[] = {11, 2};
    bool ok = n == 2 && same_ids(&b[0], a, 3) && same_ids(&b[1], c, 2) && fabs(b[0].score + 0.85 / 16) < 1e-6 &&
              fabs(b[1].score + 0.3 / 4) < 1e-6;
    vllm_beams_free(b, n);
    CHECK(ok, "length_penalty 2 should put [12,17,20] first");
}

TEST(test_beam_ignore_eos) {
    toy t = {0};
    vllm_beam *b;
    int32_t n;
    CHECK(run(1.0f, true, &t, &b, &n) == VLLM_OK, "%s", vllm_errmsg());
    static const int32_t a[] = {11, 2, 20}, c[] = {12, 17, 20};
    bool ok = n == 2 && same_ids(&b[0], a, 3) && same_ids(&b[1], c, 3) && fabs(b[0].cumulative_logprob + 0.35) < 1e-6 &&
              b[0].finish_reason == VLLM_FINISH_LENGTH && b[1].finish_reason == VLLM_FINISH_LENGTH;
    vllm_beams_free(b, n);
    CHECK(ok, "ignore_eos beams are not the hand-derived ones");
}

TEST(test_beam_width_one_is_greedy) {
    toy t = {0};
    vllm_beam_search_params p;
    vllm_beam_search_params_init(&p);
    p.max_tokens = 3;
    p.ignore_eos = true;
    vllm_beam *b;
    int32_t n;
    CHECK(beam_search_run(&p, eos, 1, prompt, 1, toy_step, &t, &b, &n) == VLLM_OK, "%s", vllm_errmsg());
    static const int32_t a[] = {11, 2, 20}; /* the best token each time */
    bool ok = n == 1 && same_ids(&b[0], a, 3);
    vllm_beams_free(b, n);
    CHECK(ok, "width 1 is not greedy");
}

TEST(test_beam_errors) {
    toy t = {.fail_at_2 = true};
    vllm_beam *b = (vllm_beam *)1;
    int32_t n = 5;
    CHECK(run(1.0f, false, &t, &b, &n) == VLLM_ERR_IO && b == NULL && n == 0, "a failing step must fail the search");
    vllm_beam_search_params p;
    vllm_beam_search_params_init(&p);
    p.beam_width = 11;
    CHECK(beam_search_run(&p, eos, 1, prompt, 1, toy_step, &t, &b, &n) == VLLM_ERR_INVALID &&
              strstr(vllm_errmsg(), "beam_width 11"), "%s", vllm_errmsg());
}

int main(void) {
    RUN(test_beam_eos_completes);
    RUN(test_beam_length_penalty_ranks);
    RUN(test_beam_ignore_eos);
    RUN(test_beam_width_one_is_greedy);
    RUN(test_beam_errors);
    return harness_done();
}

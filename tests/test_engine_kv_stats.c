/* test_engine_kv_stats.c - the KV slot counts of vllm_scheduler_stats and
 * the engine's KV report, on a scenario computed by hand (block size 4):
 *
 *   A: prompt 6 tokens, 3 generated; B: prompt 9 tokens, 2 generated.
 *   step 1  both prefill: A 6 computed in 2 blocks (2 empty), B 9 in 3 (3 empty)
 *           -> used 5 blocks = 20 slots, 5 empty
 *   step 2  both decode: A 7 computed (1 empty); B 10 computed, then it has
 *           its 2 tokens and finishes, freeing its blocks
 *           -> used 2 blocks = 8 slots, 1 empty
 *   step 3  A 8 computed (its 2 blocks full), 3 tokens: finishes -> 0, 0
 *   report: 3 steps, peak 5 blocks with 5 empty, sums 28 used / 6 empty.
 *
 * Then a shared prompt: 3 requests with one 8-token prompt (2 full blocks)
 * arriving together: step 1 runs the first alone (8 computed, 0 empty);
 * step 2 the others hit both blocks (7 tokens each) and compute their last
 * token into their own copy of block 1, while the first decodes into a third
 * block (9 computed, 3 empty) -> 3 tokens, 5 blocks in use, 3 empty slots.
 * The copies must give the same greedy tokens and logprobs as the first.
 */
/* checks: 2 */
#include <string.h>

#include "harness.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"

static vllm_engine *make_engine(void) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    a.num_threads = 1;
    a.max_model_len = 64;
    a.max_num_seqs = 8;
    a.block_size = 4;
    a.num_gpu_blocks_override = 64;
    vllm_engine *e = NULL;
    CHECK_OR(NULL, vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    return e;
}

static vllm_sampling_params params(int32_t max_tokens) {
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    sp.logprobs = 0;
    return sp;
}

TEST(test_kv_slots_by_hand) {
    vllm_engine *e = make_engine();
    if (!e) return;
    int32_t pa[6], pb[9];
    for (int32_t i = 0; i < 6; i++) pa[i] = 10 + i;
    for (int32_t i = 0; i < 9; i++) pb[i] = 100 + i;
    vllm_sampling_params sa = params(3), sb = params(2);
    CHECK(vllm_engine_add_request(e, "a", pa, 6, &sa, NULL) == VLLM_OK);
    CHECK(vllm_engine_add_request(e, "b", pb, 9, &sb, NULL) == VLLM_OK);
    static const int64_t used[3] = {20, 8, 0}, empty[3] = {5, 1, 0};
    const vllm_step_output *so;
    for (int32_t step = 0; step < 3; step++) {
        CHECK(vllm_engine_step(e, &so) == VLLM_OK, "%s", vllm_errmsg());
        CHECK(so->stats.num_kv_slots_used == used[step] && so->stats.num_kv_slots_empty == empty[step],
              "step %d: used %lld empty %lld, expected %lld %lld", step + 1,
              (long long)so->stats.num_kv_slots_used, (long long)so->stats.num_kv_slots_empty,
              (long long)used[step], (long long)empty[step]);
    }
    CHECK(!vllm_engine_has_unfinished(e));
    vllm_kv_cache_report k;
    vllm_engine_get_kv_cache_report(e, &k);
    CHECK(k.num_blocks == 64 && k.block_size == 4 && k.num_steps == 3);
    CHECK(k.peak_used_blocks == 5 && k.peak_empty_slots == 5, "peak %d blocks, %lld empty", k.peak_used_blocks,
          (long long)k.peak_empty_slots);
    CHECK(k.sum_used_slots == 28 && k.sum_empty_slots == 6, "sums %lld %lld", (long long)k.sum_used_slots,
          (long long)k.sum_empty_slots);
    vllm_engine_reset_kv_cache_report(e);
    vllm_engine_get_kv_cache_report(e, &k);
    CHECK(k.num_steps == 0 && k.peak_used_blocks == 0 && k.sum_used_slots == 0 && k.num_blocks == 64);
    vllm_engine_free(e);
}

typedef struct collected {
    int32_t tok[3][4], ntok[3];
    float lp[3][4];
} collected;

/* Records the tokens of requests "x", "y", "z". */
static void collect(collected *c, const vllm_step_output *so) {
    for (int32_t i = 0; i < so->num_outputs; i++) {
        const vllm_seq_output *o = &so->outputs[i];
        int32_t r = o->request_id[0] - 'x';
        for (int32_t t = 0; t < o->num_new_tokens && c->ntok[r] < 4; t++, c->ntok[r]++) {
            c->tok[r][c->ntok[r]] = o->new_token_ids[t];
            c->lp[r][c->ntok[r]] = o->new_logprobs ? o->new_logprobs[t].logprob : 0;
        }
    }
}

TEST(test_shared_prompt_computed_once) {
    collected c = {0};
    vllm_engine *e = make_engine();
    if (!e) return;
    int32_t p[8];
    for (int32_t i = 0; i < 8; i++) p[i] = 20 + i;
    vllm_sampling_params sp = params(3);
    CHECK(vllm_engine_add_request(e, "x", p, 8, &sp, NULL) == VLLM_OK);
    CHECK(vllm_engine_add_request(e, "y", p, 8, &sp, NULL) == VLLM_OK);
    CHECK(vllm_engine_add_request(e, "z", p, 8, &sp, NULL) == VLLM_OK);
    const vllm_step_output *so;
    CHECK(vllm_engine_step(e, &so) == VLLM_OK);
    CHECK(so->stats.num_scheduled_seqs == 1 && so->stats.num_scheduled_tokens == 8,
          "step 1: %d seqs %d tokens", so->stats.num_scheduled_seqs, so->stats.num_scheduled_tokens);
    CHECK(so->stats.num_kv_slots_used == 8 && so->stats.num_kv_slots_empty == 0);
    collect(&c, so);
    CHECK(vllm_engine_step(e, &so) == VLLM_OK);
    CHECK(so->stats.num_scheduled_seqs == 3 && so->stats.num_scheduled_tokens == 3,
          "step 2: %d seqs %d tokens", so->stats.num_scheduled_seqs, so->stats.num_scheduled_tokens);
    CHECK(so->stats.prefix_cache_queries == 16 && so->stats.prefix_cache_hits == 14);
    /* x: blocks 0, 1 and a third (1 of 4 used); y, z: block 0 shared, own copies of block 1 */
    CHECK(so->stats.num_kv_slots_used == 5 * 4 && so->stats.num_kv_slots_empty == 3, "used %lld empty %lld",
          (long long)so->stats.num_kv_slots_used, (long long)so->stats.num_kv_slots_empty);
    for (int32_t i = 0; i < so->num_outputs; i++)
        if (strcmp(so->outputs[i].request_id, "x"))
            CHECK(so->outputs[i].num_cached_tokens == 7, "%s: %d cached", so->outputs[i].request_id,
                  so->outputs[i].num_cached_tokens);
    collect(&c, so);
    /* every request saw the same prompt: the same greedy tokens and logprobs */
    while (vllm_engine_has_unfinished(e)) {
        CHECK(vllm_engine_step(e, &so) == VLLM_OK);
        collect(&c, so);
    }
    CHECK(c.ntok[0] == 3 && c.ntok[1] == 3 && c.ntok[2] == 3);
    for (int32_t r = 1; r < 3; r++)
        for (int32_t t = 0; t < 3; t++)
            CHECK(c.tok[r][t] == c.tok[0][t] && c.lp[r][t] == c.lp[0][t], "request %c token %d: %d (%g) vs %d (%g)",
                  'x' + r, t, c.tok[r][t], c.lp[r][t], c.tok[0][t], c.lp[0][t]);
    vllm_engine_free(e);
}

int main(void) {
    RUN(test_kv_slots_by_hand);
    RUN(test_shared_prompt_computed_once);
    return harness_done();
}

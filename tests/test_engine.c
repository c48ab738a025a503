/*
 * test_engine.c - the engine core on the real stories260K model.
 *
 *  - greedy from BOS equals llama2.c's run.c output (reference_bos_greedy200.json,
 *    produced independently of this code base);
 *  - batch invariance: 64 mixed requests (greedy with logprobs, seeded random,
 *    n > 1, some with prompt_logprobs) give bit-identical token ids,
 *    logprobs and prompt logprobs (each position once, in order, whatever
 *    the chunking and preemptions) alone and together,
 *    with prefix caching on and off, chunk thresholds 1, 7, 64 and none, a
 *    small token budget, and a KV pool so small that preemption happens many
 *    times;
 *  - n > 1 with seed s equals n separate requests seeded s, s+1, ...;
 *  - prefix caching: a second request sharing a 10-block prefix computes only
 *    the tail, its output equals the cold run, another cache salt gets no hits;
 *  - priority scheduling with preemption: the most important request is never
 *    preempted and is never overtaken;
 *  - abort / stop_sequence, events and stats, bad input;
 *  - --kv-cache-dtype: each value's storage type, pool size for a fixed
 *    budget, bytes per token, the KV accessors; "auto" per model kind; the
 *    batch invariance above in every type;
 *  - speculative decoding through the engine: with a proposer that is right
 *    three times in four and the exact verifier, the 64 requests give the
 *    same tokens and logprobs, bit for bit, as one token per step (also with
 *    a tiny pool and a small budget); with a fake proposer and a fake
 *    verifier that accepts a prefix of the drafts, the committed tokens are
 *    exactly the accepted ones plus the verifier's own, the KV pool empties,
 *    and no prompt that continues a sequence with its rejected drafts ever
 *    hits the prefix cache past the committed tokens.
 */
/* checks: 13 */
/* tags: tsan */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "harness.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"
#define NREQ 64
#define MAX_OUT 48

typedef struct req_spec {
    int32_t prompt[160];
    int32_t len;
    vllm_sampling_params sp;
    int32_t priority;
} req_spec;

typedef struct seq_result {
    int32_t n;
    int32_t ids[MAX_OUT];
    float lps[MAX_OUT];
    float top[MAX_OUT][3];           /* the top-3 logprobs */
    vllm_finish_reason finish;
} seq_result;

typedef struct req_result {
    seq_result seqs[4];
    int32_t num_plp;                 /* prompt logprobs seen, positions 1.. in order */
    int32_t plp_ids[160];            /* the token each is for, and its top-2 */
    float plp[160], plp_top[160][2];
    int32_t plp_rank[160];
    bool plp_out_of_order;
    int32_t cached;
    int32_t preempted;               /* PREEMPTED events seen */
    double first_scheduled;          /* SCHEDULED timestamp, first */
    double finished_at;
} req_result;

typedef struct run_stats {
    int64_t steps, preemptions, queries, hits, tokens, multi_token_outputs;
    int32_t max_tokens_step, max_seqs_step, blocks_total, blocks_free;
} run_stats;

static uint64_t rng = 12345;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 33);
}

/* The tests below run with an F32 KV cache: llama2.c's reference is F32
 * arithmetic, and the prefix-cache test expects 20 tokens before an EOS;
 * test_batch_invariance runs again for every other --kv-cache-dtype. */
static vllm_engine_args base_args(void) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    a.num_threads = 2;
    a.max_model_len = 256;
    a.max_num_seqs = 64;
    a.kv_cache_dtype = "float32";
    return a;
}

static const spec_config *run_spec; /* speculative decoding for run_all, or NULL */

/* Adds all specs at once, steps to the end, collects outputs and stats. */
static bool run_all(const vllm_engine_args *args, const req_spec *specs, const int32_t *which,
                    int32_t count, req_result *res, run_stats *st) {
    vllm_engine *e;
    CHECK_OR(false, vllm_engine_create(args, &e) == VLLM_OK, "%s", vllm_errmsg());
    if (run_spec && engine_set_spec(e, run_spec) != VLLM_OK) {
        vllm_engine_free(e);
        CHECK_OR(false, false, "engine_set_spec: %s", vllm_errmsg());
    }
    memset(st, 0, sizeof *st);
    bool ok = true;
    for (int32_t i = 0; i < count && ok; i++) {
        const req_spec *s = &specs[which[i]];
        char id[16];
        snprintf(id, sizeof id, "%d", which[i]);
        vllm_request_opts o = {.priority = s->priority};
        memset(&res[which[i]], 0, sizeof res[which[i]]);
        ok = vllm_engine_add_request(e, id, s->prompt, s->len, &s->sp, &o) == VLLM_OK;
        CHECK_OR(false, ok, "add %s: %s", id, vllm_errmsg());
    }
    while (ok && vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        ok = vllm_engine_step(e, &so) == VLLM_OK;
        CHECK_OR(false, ok, "step: %s", vllm_errmsg());
        st->steps++;
        st->preemptions += so->stats.num_preemptions;
        st->queries += so->stats.prefix_cache_queries;
        st->hits += so->stats.prefix_cache_hits;
        st->tokens += so->stats.num_scheduled_tokens;
        if (so->stats.num_scheduled_tokens > st->max_tokens_step)
            st->max_tokens_step = so->stats.num_scheduled_tokens;
        if (so->stats.num_scheduled_seqs > st->max_seqs_step)
            st->max_seqs_step = so->stats.num_scheduled_seqs;
        CHECK_OR(false, so->stats.num_scheduled_tokens <= args->max_num_batched_tokens ||
                            args->max_num_batched_tokens == 0);
        st->blocks_total = so->stats.num_blocks_total;
        st->blocks_free = so->stats.num_blocks_free;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            req_result *r = &res[atoi(o->request_id)];
            seq_result *q = &r->seqs[o->index];
            for (int32_t k = 0; k < o->num_events; k++) {
                if (o->events[k].type == VLLM_EVENT_PREEMPTED) r->preempted++;
                if (o->events[k].type == VLLM_EVENT_SCHEDULED && r->first_scheduled == 0)
                    r->first_scheduled = o->events[k].timestamp;
            }
            st->multi_token_outputs += o->num_new_tokens > 1 && o->index == 0 ? 1 : 0;
            for (int32_t t = 0; t < o->num_new_tokens; t++) {
                CHECK_OR(false, q->n < MAX_OUT, "too many tokens");
                q->ids[q->n] = o->new_token_ids[t];
                if (o->new_logprobs) {
                    q->lps[q->n] = o->new_logprobs[t].logprob;
                    CHECK_OR(false, o->new_logprobs[t].token_id == o->new_token_ids[t]);
                    for (int32_t m = 0; m < 3 && m < o->new_logprobs[t].num_top; m++)
                        q->top[q->n][m] = o->new_logprobs[t].top_logprobs[m];
                }
                q->n++;
            }
            r->cached = o->num_cached_tokens;
            if (o->num_prompt_logprobs > 0) {
                CHECK_OR(false, o->index == 0 && o->prompt_logprobs, "prompt logprobs on seq %d", o->index);
                if (o->prompt_logprobs_start != r->num_plp + 1) r->plp_out_of_order = true;
                for (int32_t t = 0; t < o->num_prompt_logprobs && r->num_plp < 160; t++, r->num_plp++) {
                    const vllm_token_logprobs *l = &o->prompt_logprobs[t];
                    r->plp_ids[r->num_plp] = l->token_id;
                    r->plp[r->num_plp] = l->logprob;
                    r->plp_rank[r->num_plp] = l->rank;
                    for (int32_t m = 0; m < 2 && m < l->num_top; m++) r->plp_top[r->num_plp][m] = l->top_logprobs[m];
                }
            }
            if (o->finish_reason != VLLM_FINISH_NONE) {
                q->finish = o->finish_reason;
                r->finished_at = so->timestamp;
            }
        }
    }
    vllm_engine_free(e);
    return ok;
}

static void make_specs(req_spec *specs) {
    static const int32_t shared[96] = {0}; /* filled below: a common "system prompt" */
    int32_t common[96];
    for (int32_t i = 0; i < 96; i++) common[i] = 3 + (int32_t)((i * 37 + 11) % 500);
    (void)shared;
    for (int32_t i = 0; i < NREQ; i++) {
        req_spec *s = &specs[i];
        memset(s, 0, sizeof *s);
        int32_t pre = i % 3 == 0 ? (int32_t)(rnd() % 96) : 0;
        int32_t tail = 1 + (int32_t)(rnd() % (i % 5 == 0 ? 60 : 20));
        memcpy(s->prompt, common, (size_t)pre * sizeof(int32_t));
        s->len = pre;
        if (i == 0) s->prompt[s->len++] = 1; /* BOS alone */
        else
            for (int32_t t = 0; t < tail; t++) s->prompt[s->len++] = 3 + (int32_t)(rnd() % 509);
        vllm_sampling_params_init(&s->sp);
        s->sp.max_tokens = 4 + (int32_t)(rnd() % (MAX_OUT - 4));
        s->sp.ignore_eos = i % 4 != 1;
        if (i % 8 == 3) { /* seeded random, n = 3 */
            s->sp.temperature = 0.9f;
            s->sp.top_p = 0.9f;
            s->sp.has_seed = true;
            s->sp.seed = 1000 + (uint64_t)i;
            s->sp.n = 3;
        } else if (i % 8 == 5) { /* seeded random with penalties */
            s->sp.temperature = 1.3f;
            s->sp.top_k = 40;
            s->sp.repetition_penalty = 1.2f;
            s->sp.has_seed = true;
            s->sp.seed = 77 + (uint64_t)i;
        } else {
            s->sp.temperature = 0.0f;
            s->sp.logprobs = 3;
        }
        if (i % 6 == 2) s->sp.prompt_logprobs = 2;
        s->priority = (int32_t)(rnd() % 4);
    }
}

static bool same_result(const req_result *a, const req_result *b, int32_t n, const char *what, int32_t i) {
    CHECK_OR(false, !a->plp_out_of_order && !b->plp_out_of_order && a->num_plp == b->num_plp &&
                        memcmp(a->plp_ids, b->plp_ids, sizeof a->plp_ids) == 0 &&
                        memcmp(a->plp, b->plp, sizeof a->plp) == 0 && memcmp(a->plp_top, b->plp_top, sizeof a->plp_top) == 0 &&
                        memcmp(a->plp_rank, b->plp_rank, sizeof a->plp_rank) == 0,
             "%s: request %d: prompt logprobs differ (%d vs %d positions, out of order %d/%d)", what, i, a->num_plp,
             b->num_plp, a->plp_out_of_order, b->plp_out_of_order);
    for (int32_t k = 0; k < n; k++) {
        const seq_result *x = &a->seqs[k], *y = &b->seqs[k];
        CHECK_OR(false, x->n == y->n && x->finish == y->finish, "%s: request %d seq %d: %d tokens (%d) vs %d (%d)",
                 what, i, k, x->n, x->finish, y->n, y->finish);
        CHECK_OR(false, memcmp(x->ids, y->ids, (size_t)x->n * sizeof(int32_t)) == 0,
                 "%s: request %d seq %d: token ids differ", what, i, k);
        CHECK_OR(false, memcmp(x->lps, y->lps, (size_t)x->n * sizeof(float)) == 0,
                 "%s: request %d seq %d: logprobs differ bitwise", what, i, k);
        CHECK_OR(false, memcmp(x->top, y->top, (size_t)x->n * sizeof x->top[0]) == 0,
                 "%s: request %d seq %d: top logprobs differ bitwise", what, i, k);
    }
    return true;
}

TEST(test_greedy_bos_matches_llama2c) {
    json_error_t jerr;
    json_t *ref = json_load_file(MODEL "/reference_bos_greedy200.json", 0, &jerr);
    CHECK(ref, "%s", jerr.text);
    json_t *ids = json_object_get(ref, "greedy_ids");
    CHECK(json_array_size(ids) == 200);
    vllm_engine_args a = base_args();
    a.max_model_len = 0; /* 512 from the config */
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.max_tokens = 200;
    int32_t bos = 1, len = 1;
    const int32_t *prompts[1] = {&bos};
    vllm_request_result *res;
    CHECK(vllm_engine_generate(e, 1, prompts, &len, &sp, NULL, &res) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(res[0].seqs[0].num_tokens == 200 && res[0].seqs[0].finish_reason == VLLM_FINISH_LENGTH);
    for (int32_t i = 0; i < 200; i++)
        CHECK(res[0].seqs[0].token_ids[i] == (int32_t)json_integer_value(json_array_get(ids, (size_t)i)),
              "token %d: got %d, llama2.c %lld", i, res[0].seqs[0].token_ids[i],
              json_integer_value(json_array_get(ids, (size_t)i)));
    vllm_request_results_free(res, 1);
    vllm_engine_free(e);
    json_decref(ref);
}

/* A proposer that knows the answer (the one-token-per-step run) and lies
 * one time in four, so drafts are accepted and rejected at every depth. */
typedef struct oracle {
    const req_result *truth;
    uint64_t calls;
} oracle;

static int32_t oracle_propose(void *ud, const spec_seq_view *q, int32_t max_drafts, int32_t *drafts) {
    oracle *o = ud;
    const seq_result *t = &o->truth[atoi(q->request_id)].seqs[q->index];
    int32_t done = q->num_tokens - q->num_prompt;
    for (int32_t j = 0; j < max_drafts; j++) {
        uint64_t h = (++o->calls * 0x9e3779b97f4a7c15ULL) >> 40;
        int32_t truth = done + j < t->n ? t->ids[done + j] : (int32_t)(h % 512);
        drafts[j] = h % 4 == 0 ? (truth + 1 + (int32_t)(h % 7)) % 512 : truth;
    }
    return max_drafts;
}

/* The 64 requests alone, then together in each configuration below, with
 * the KV cache in kv (a --kv-cache-dtype value). */
static void check_batch_invariance(const char *kv) {
    static req_spec specs[NREQ];
    static req_result alone[NREQ], batch[NREQ];
    make_specs(specs);
    int32_t all[NREQ];
    for (int32_t i = 0; i < NREQ; i++) all[i] = i;
    run_stats st;
    vllm_engine_args a = base_args();
    a.enable_prefix_caching = false;
    a.kv_cache_dtype = kv;
    for (int32_t i = 0; i < NREQ; i++)
        if (!run_all(&a, specs, &all[i], 1, alone, &st)) return;
    for (int32_t i = 0; i < NREQ; i++) { /* every prompt position once, for the token that is there */
        int32_t want = specs[i].sp.prompt_logprobs >= 0 ? specs[i].len - 1 : 0;
        CHECK(alone[i].num_plp == want, "request %d: %d prompt logprobs for a %d-token prompt", i, alone[i].num_plp,
              specs[i].len);
        for (int32_t t = 0; t < alone[i].num_plp; t++)
            CHECK(alone[i].plp_ids[t] == specs[i].prompt[t + 1] && alone[i].plp[t] <= 0.0f && alone[i].plp_rank[t] >= 1 &&
                      alone[i].plp_top[t][0] >= alone[i].plp_top[t][1] && alone[i].plp[t] <= alone[i].plp_top[t][0],
                  "request %d position %d: id %d (prompt %d) logprob %g rank %d", i, t + 1, alone[i].plp_ids[t],
                  specs[i].prompt[t + 1], alone[i].plp[t], alone[i].plp_rank[t]);
    }

    struct {
        const char *name;
        bool caching;
        int32_t threshold, budget, blocks;
        bool expect_preempt;
        int32_t spec_k;
    } cfgs[] = {
        {"batch, prefix cache on", true, 0, 0, 0, false, 0},
        {"batch, prefix cache off", false, 0, 0, 0, false, 0},
        {"threshold 1", true, 1, 0, 0, false, 0},
        {"threshold 7", true, 7, 0, 0, false, 0},
        {"threshold 64, budget 96", true, 64, 96, 0, false, 0},
        {"tiny KV pool (preemption)", true, 0, 0, 20, true, 0},
        {"tiny KV pool, no cache, budget 64", false, 0, 64, 18, true, 0},
        {"speculative k=3", true, 0, 0, 0, false, 3},
        {"speculative k=4, tiny KV pool", true, 0, 0, 20, true, 4},
        {"speculative k=2, threshold 7, budget 96", false, 7, 96, 0, false, 2},
    };
    oracle orc = {.truth = alone};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        a = base_args();
        a.kv_cache_dtype = kv;
        a.enable_prefix_caching = cfgs[c].caching;
        a.long_prefill_token_threshold = cfgs[c].threshold;
        a.max_num_batched_tokens = cfgs[c].budget;
        a.num_gpu_blocks_override = cfgs[c].blocks;
        spec_config sc = {.num_speculative_tokens = cfgs[c].spec_k, .proposer = {.propose = oracle_propose, .ud = &orc}};
        run_spec = cfgs[c].spec_k ? &sc : NULL;
        bool ran = run_all(&a, specs, all, NREQ, batch, &st);
        run_spec = NULL;
        if (!ran) return;
        if (cfgs[c].spec_k) CHECK(st.multi_token_outputs > 100, "%s: only %lld steps committed several tokens",
                                  cfgs[c].name, (long long)st.multi_token_outputs);
        for (int32_t i = 0; i < NREQ; i++)
            if (!same_result(&alone[i], &batch[i], specs[i].sp.n, cfgs[c].name, i)) return;
        CHECK(st.blocks_free == st.blocks_total, "%s: %d of %d blocks free at the end", cfgs[c].name,
              st.blocks_free, st.blocks_total);
        if (cfgs[c].expect_preempt)
            CHECK(st.preemptions >= 20, "%s: only %lld preemptions", cfgs[c].name,
                  (long long)st.preemptions);
        if (cfgs[c].caching) CHECK(st.hits > 0, "%s: shared prefixes should hit", cfgs[c].name);
        printf("# %s, %s KV: %lld steps, %lld preemptions, %lld/%lld prefix tokens hit, max %d tokens/step\n",
               cfgs[c].name, kv, (long long)st.steps, (long long)st.preemptions, (long long)st.hits,
               (long long)st.queries, st.max_tokens_step);
    }
}

TEST(test_batch_invariance) { check_batch_invariance("float32"); }
TEST(test_batch_invariance_kv_bfloat16) { check_batch_invariance("bfloat16"); }
TEST(test_batch_invariance_kv_float16) { check_batch_invariance("float16"); }
TEST(test_batch_invariance_kv_fp8_e4m3) { check_batch_invariance("fp8_e4m3"); }
TEST(test_batch_invariance_kv_fp8_e5m2) { check_batch_invariance("fp8_e5m2"); }

TEST(test_n_equals_separate_seeds) {
    req_spec specs[4];
    memset(specs, 0, sizeof specs);
    for (int32_t i = 0; i < 4; i++) {
        specs[i].len = 21; /* not a multiple of 16: the forked last block is copied on write */
        for (int32_t t = 0; t < 21; t++) specs[i].prompt[t] = 20 + t * 7;
        vllm_sampling_params_init(&specs[i].sp);
        specs[i].sp.temperature = 1.0f;
        specs[i].sp.max_tokens = 30;
        specs[i].sp.ignore_eos = true;
        specs[i].sp.has_seed = true;
        specs[i].sp.logprobs = 0;
    }
    specs[0].sp.n = 3;
    specs[0].sp.seed = 500;
    for (int32_t k = 1; k < 4; k++) specs[k].sp.seed = 500 + (uint64_t)(k - 1);
    static req_result res[4];
    run_stats st;
    vllm_engine_args a = base_args();
    int32_t all[4] = {0, 1, 2, 3};
    if (!run_all(&a, specs, all, 4, res, &st)) return;
    for (int32_t k = 0; k < 3; k++) {
        const seq_result *x = &res[0].seqs[k], *y = &res[k + 1].seqs[0];
        CHECK(x->n == 30 && y->n == 30);
        CHECK(memcmp(x->ids, y->ids, sizeof x->ids) == 0 && memcmp(x->lps, y->lps, sizeof x->lps) == 0,
              "n=3 sequence %d differs from a request seeded %d", k, 500 + k);
    }
    CHECK(memcmp(res[0].seqs[0].ids, res[0].seqs[1].ids, sizeof res[0].seqs[0].ids) != 0,
          "different seeds should give different samples");
}

TEST(test_prefix_cache_ten_blocks) {
    int32_t prefix[160], pa[170], pb[170];
    for (int32_t i = 0; i < 160; i++) prefix[i] = 3 + (i * 53) % 500;
    memcpy(pa, prefix, sizeof prefix);
    memcpy(pb, prefix, sizeof prefix);
    for (int32_t i = 160; i < 170; i++) {
        pa[i] = 100 + i;
        pb[i] = 200 + i;
    }
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.max_tokens = 20;
    sp.logprobs = 1;
    vllm_engine_args a = base_args();
    vllm_engine *cold, *warm;
    CHECK(vllm_engine_create(&a, &cold) == VLLM_OK && vllm_engine_create(&a, &warm) == VLLM_OK);
    const int32_t *pbp[1] = {pb}, *pap[1] = {pa};
    int32_t len = 170;
    vllm_request_result *rc_b, *rw_a, *rw_b;
    CHECK(vllm_engine_generate(cold, 1, pbp, &len, &sp, NULL, &rc_b) == VLLM_OK);
    CHECK(rc_b[0].num_cached_tokens == 0);
    CHECK(vllm_engine_generate(warm, 1, pap, &len, &sp, NULL, &rw_a) == VLLM_OK);
    /* B on the warm engine, stepped by hand to see the stats */
    CHECK(vllm_engine_add_request(warm, "b", pb, 170, &sp, NULL) == VLLM_OK);
    const vllm_step_output *so;
    CHECK(vllm_engine_step(warm, &so) == VLLM_OK);
    CHECK(so->stats.prefix_cache_queries == 170 && so->stats.prefix_cache_hits == 160,
          "queries %lld hits %lld", (long long)so->stats.prefix_cache_queries,
          (long long)so->stats.prefix_cache_hits);
    CHECK(so->stats.num_scheduled_tokens == 10, "computed %d tokens, expected the 10-token tail",
          so->stats.num_scheduled_tokens);
    CHECK(so->num_outputs == 1 && so->outputs[0].num_cached_tokens == 160);
    int32_t ids[32], n = 0;
    float lps[32];
    for (;;) {
        for (int32_t j = 0; j < so->num_outputs; j++)
            for (int32_t t = 0; t < so->outputs[j].num_new_tokens; t++) {
                lps[n] = so->outputs[j].new_logprobs[t].logprob;
                ids[n++] = so->outputs[j].new_token_ids[t];
            }
        if (!vllm_engine_has_unfinished(warm)) break;
        CHECK(vllm_engine_step(warm, &so) == VLLM_OK);
    }
    CHECK(n == 20 && memcmp(ids, rc_b[0].seqs[0].token_ids, sizeof(int32_t) * 20) == 0,
          "warm output differs from the cold run");
    CHECK(memcmp(lps, rc_b[0].seqs[0].logprobs, sizeof(float) * 20) == 0, "logprobs differ");
    /* another salt: no hits; the same salt twice: hits */
    vllm_request_opts salted = {.cache_salt = "tenant-1"};
    CHECK(vllm_engine_generate(warm, 1, pbp, &len, &sp, &salted, &rw_b) == VLLM_OK);
    CHECK(rw_b[0].num_cached_tokens == 0, "a salted request hit unsalted blocks");
    vllm_request_results_free(rw_b, 1);
    CHECK(vllm_engine_generate(warm, 1, pbp, &len, &sp, &salted, &rw_b) == VLLM_OK);
    CHECK(rw_b[0].num_cached_tokens == 160, "same salt: %d cached", rw_b[0].num_cached_tokens);
    CHECK(memcmp(rw_b[0].seqs[0].token_ids, rc_b[0].seqs[0].token_ids, sizeof(int32_t) * 20) == 0);
    vllm_request_results_free(rw_b, 1);
    vllm_request_opts other = {.cache_salt = "tenant-2"};
    CHECK(vllm_engine_generate(warm, 1, pbp, &len, &sp, &other, &rw_b) == VLLM_OK);
    CHECK(rw_b[0].num_cached_tokens == 0, "another salt must not hit");
    vllm_request_results_free(rw_b, 1);
    /* reset_prefix_cache forgets every cached block */
    vllm_engine_reset_prefix_cache(warm);
    CHECK(vllm_engine_generate(warm, 1, pbp, &len, &sp, &salted, &rw_b) == VLLM_OK);
    CHECK(rw_b[0].num_cached_tokens == 0, "a hit after reset_prefix_cache: %d", rw_b[0].num_cached_tokens);
    vllm_request_results_free(rw_b, 1);
    vllm_request_results_free(rc_b, 1);
    vllm_request_results_free(rw_a, 1);
    vllm_engine_free(cold);
    vllm_engine_free(warm);
}

TEST(test_priority_with_preemption) {
    static req_spec specs[12];
    static req_result res[12];
    for (int32_t i = 0; i < 12; i++) {
        req_spec *s = &specs[i];
        memset(s, 0, sizeof *s);
        s->len = 40;
        for (int32_t t = 0; t < 40; t++) s->prompt[t] = 3 + (i * 31 + t * 7) % 500;
        vllm_sampling_params_init(&s->sp);
        s->sp.temperature = 0;
        s->sp.max_tokens = 40;
        s->sp.ignore_eos = true;
        s->priority = i == 5 ? -1 : (i * 7) % 4; /* request 5 matters most */
    }
    vllm_engine_args a = base_args();
    a.scheduling_policy = VLLM_SCHEDULING_PRIORITY;
    a.num_gpu_blocks_override = 20; /* 320 tokens for 12 x 80 */
    a.max_num_seqs = 8;
    int32_t all[12];
    for (int32_t i = 0; i < 12; i++) all[i] = i;
    run_stats st;
    if (!run_all(&a, specs, all, 12, res, &st)) return;
    CHECK(st.preemptions > 0, "the pool is meant to force preemption");
    CHECK(res[5].preempted == 0, "the top-priority request was preempted");
    for (int32_t i = 0; i < 12; i++) {
        CHECK(res[i].seqs[0].n == 40);
        if (specs[i].priority == 3) CHECK(res[i].finished_at >= res[5].finished_at);
        /* preemptions hit only requests of lower priority than some running one */
        if (res[i].preempted) CHECK(specs[i].priority > -1);
    }
    /* under priority, a priority-0 request is admitted before any priority-3 one */
    for (int32_t i = 0; i < 12; i++)
        for (int32_t j = 0; j < 12; j++)
            if (specs[i].priority < specs[j].priority)
                CHECK(res[i].first_scheduled <= res[j].first_scheduled,
                      "request %d (priority %d) scheduled after %d (priority %d)", i,
                      specs[i].priority, j, specs[j].priority);
    printf("# priority: %lld steps, %lld preemptions\n", (long long)st.steps, (long long)st.preemptions);
}

TEST(test_abort_stop_events) {
    vllm_engine_args a = base_args();
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0.8f;
    sp.max_tokens = 50;
    sp.n = 2;
    sp.ignore_eos = true;
    int32_t p[5] = {1, 20, 30, 40, 50};
    CHECK(vllm_engine_add_request(e, "x", p, 5, &sp, NULL) == VLLM_OK);
    CHECK(vllm_engine_add_request(e, "x", p, 5, &sp, NULL) == VLLM_ERR_INVALID, "duplicate id");
    CHECK(vllm_engine_add_request(e, "y", p, 5, &sp, NULL) == VLLM_OK);
    const vllm_step_output *so;
    CHECK(vllm_engine_step(e, &so) == VLLM_OK);
    /* both prefilled and forked: x/0, x/1, y/0, y/1 with one token each */
    CHECK(so->num_outputs == 4, "got %d outputs", so->num_outputs);
    CHECK(so->outputs[0].num_events == 2 && so->outputs[0].events[0].type == VLLM_EVENT_QUEUED &&
          so->outputs[0].events[1].type == VLLM_EVENT_SCHEDULED &&
          so->outputs[0].events[0].timestamp <= so->outputs[0].events[1].timestamp &&
          so->outputs[0].events[1].timestamp <= so->timestamp);
    CHECK(so->stats.num_running == 4 && so->stats.num_scheduled_seqs == 2 &&
          so->stats.num_scheduled_tokens == 10);
    CHECK(vllm_engine_abort_request(e, "x") == VLLM_OK);
    CHECK(vllm_engine_abort_request(e, "x") == VLLM_ERR_NOT_FOUND);
    CHECK(vllm_engine_stop_sequence(e, "y", 1) == VLLM_OK);
    CHECK(vllm_engine_step(e, &so) == VLLM_OK);
    int32_t aborted = 0, stopped = 0, running = 0;
    for (int32_t j = 0; j < so->num_outputs; j++) {
        const vllm_seq_output *o = &so->outputs[j];
        if (!strcmp(o->request_id, "x")) aborted += o->finish_reason == VLLM_FINISH_ABORT;
        if (!strcmp(o->request_id, "y") && o->index == 1) stopped += o->finish_reason == VLLM_FINISH_STOP;
        if (!strcmp(o->request_id, "y") && o->index == 0) running += o->num_new_tokens == 1;
    }
    CHECK(aborted == 2 && stopped == 1 && running == 1);
    CHECK(vllm_engine_add_request(e, "x", p, 5, &sp, NULL) == VLLM_OK, "a finished id can be reused");
    CHECK(vllm_engine_abort_request(e, "x") == VLLM_OK && vllm_engine_abort_request(e, "y") == VLLM_OK);
    while (vllm_engine_has_unfinished(e)) CHECK(vllm_engine_step(e, &so) == VLLM_OK);
    CHECK(so->stats.num_blocks_free == so->stats.num_blocks_total);
    CHECK(vllm_engine_step(e, &so) == VLLM_OK && so->num_outputs == 0, "idle step is empty");
    vllm_engine_free(e);
}

/* Fake proposer and verifier: the proposer's k drafts are arbitrary ids
 * (once in a while one outside the vocabulary, which ends the drafts); the
 * verifier accepts a pseudo-random prefix of them and adds a token of its
 * own that differs from the first rejected draft, recording what it
 * committed per request (the prompt's first token names the request) and,
 * for the rejections, the sequence's tokens with its rejected drafts. */
#define FAKE_REQS 6
#define FAKE_PROBES 64
typedef struct fake_spec {
    uint64_t h;
    int32_t expect[FAKE_REQS][MAX_OUT];
    int32_t num_expect[FAKE_REQS];
    int32_t probe[FAKE_PROBES][128];
    int32_t probe_len[FAKE_PROBES], probe_committed[FAKE_PROBES];
    int32_t num_probes;
    int64_t drafts, accepted;
} fake_spec;

static uint64_t fake_next(fake_spec *f) {
    f->h = f->h * 6364136223846793005ULL + 1442695040888963407ULL;
    return f->h >> 33;
}

static int32_t fake_propose(void *ud, const spec_seq_view *q, int32_t max_drafts, int32_t *drafts) {
    fake_spec *f = ud;
    for (int32_t j = 0; j < max_drafts; j++) drafts[j] = 40 + (int32_t)(fake_next(f) % 400);
    if (fake_next(f) % 16 == 0) drafts[fake_next(f) % (uint64_t)max_drafts] = 100000;
    return max_drafts;
}

static vllm_status fake_verify(void *ud, sample_seq *seqs, int32_t n) {
    fake_spec *f = ud;
    for (int32_t i = 0; i < n; i++) {
        sample_seq *x = &seqs[i];
        int32_t a = (int32_t)(fake_next(f) % (uint64_t)(x->num_drafts + 1));
        const int32_t *drafts = x->tokens + x->num_tokens;
        for (int32_t j = 0; j < a; j++) x->out_tokens[j] = drafts[j];
        int32_t own = 40 + (int32_t)(fake_next(f) % 400);
        if (a < x->num_drafts && own == drafts[a]) own++;
        x->out_tokens[a] = own;
        x->num_out = a + 1;
        x->rc = VLLM_OK;
        f->drafts += x->num_drafts;
        f->accepted += a;
        int32_t r = x->tokens[0] - 10;
        for (int32_t j = 0; j <= a && r >= 0 && r < FAKE_REQS; j++)
            if (f->num_expect[r] < MAX_OUT) f->expect[r][f->num_expect[r]++] = x->out_tokens[j];
        int32_t len = x->num_tokens + x->num_drafts;
        if (a < x->num_drafts && f->num_probes < FAKE_PROBES && len <= 128) {
            /* the drafts as proposed, or the verifier's token in place of the first rejected one */
            bool own_token = f->num_probes % 2;
            memcpy(f->probe[f->num_probes], x->tokens, (size_t)len * sizeof *x->tokens);
            if (own_token) f->probe[f->num_probes][x->num_tokens + a] = own;
            f->probe_len[f->num_probes] = len;
            f->probe_committed[f->num_probes++] = x->num_tokens + a + own_token;
        }
    }
    return VLLM_OK;
}

TEST(test_spec_fake_proposer_and_verifier) {
    static fake_spec f;
    memset(&f, 0, sizeof f);
    f.h = 99;
    vllm_engine_args a = base_args();
    a.block_size = 4; /* drafts often fill whole blocks */
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    spec_config sc = {.num_speculative_tokens = 4,
                      .proposer = {.propose = fake_propose, .ud = &f},
                      .verify = fake_verify,
                      .verify_ud = &f};
    CHECK(engine_set_spec(e, &sc) == VLLM_OK, "%s", vllm_errmsg());
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    int32_t prompts[FAKE_REQS][24];
    for (int32_t r = 0; r < FAKE_REQS; r++) {
        for (int32_t t = 0; t < 10 + r * 2; t++) prompts[r][t] = t ? 50 + (r * 13 + t * 7) % 400 : 10 + r;
        sp.max_tokens = 20 + 4 * r;
        char id[8];
        snprintf(id, sizeof id, "f%d", r);
        CHECK(vllm_engine_add_request(e, id, prompts[r], 10 + r * 2, &sp, NULL) == VLLM_OK, "%s", vllm_errmsg());
    }
    CHECK(engine_set_spec(e, NULL) == VLLM_ERR_INVALID, "speculation changed under running requests");
    int32_t got[FAKE_REQS][MAX_OUT], num_got[FAKE_REQS] = {0};
    const vllm_step_output *so = NULL;
    while (vllm_engine_has_unfinished(e)) {
        CHECK(vllm_engine_step(e, &so) == VLLM_OK, "%s", vllm_errmsg());
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            int32_t r = o->request_id[1] - '0';
            for (int32_t t = 0; t < o->num_new_tokens && num_got[r] < MAX_OUT; t++)
                got[r][num_got[r]++] = o->new_token_ids[t];
        }
    }
    CHECK(f.accepted > 0 && f.accepted < f.drafts, "%lld of %lld drafts accepted", (long long)f.accepted,
          (long long)f.drafts);
    for (int32_t r = 0; r < FAKE_REQS; r++) {
        CHECK(num_got[r] == 20 + 4 * r, "request %d: %d tokens", r, num_got[r]);
        CHECK(f.num_expect[r] == num_got[r] && !memcmp(f.expect[r], got[r], (size_t)num_got[r] * sizeof(int32_t)),
              "request %d: committed tokens are not exactly the verifier's", r);
    }
    CHECK(so && so->stats.num_blocks_free == so->stats.num_blocks_total && so->stats.kv_cache_usage == 0.0f,
          "KV usage after every request finished: %d of %d blocks free", so ? so->stats.num_blocks_free : -1,
          so ? so->stats.num_blocks_total : -1);
    CHECK(block_pool_check(kv_cache_manager_pool(engine_kv_cache_manager(e))) == VLLM_OK, "%s", vllm_errmsg());
    /* the KV pool through the executor, as a KV connector reads it */
    executor *ex = engine_executor(e);
    size_t kvb = executor_kv_block_bytes(ex);
    float *kb = malloc(kvb), *vb = malloc(kvb);
    CHECK(kb && vb && kvb == 4 * 4 * 8 * sizeof(float), "%zu bytes: 4 KV heads x 4 slots x 8 dims", kvb);
    /* (a block read and written back in place: the cached blocks' K/V must
     * stay what their tokens say, the probes below check that) */
    CHECK(executor_num_layers(ex) == 5 && executor_read_kv(ex, 4, 1, kb, vb) == VLLM_OK &&
          executor_write_kv(ex, 4, 1, kb, vb) == VLLM_OK && executor_read_kv(ex, 5, 0, kb, vb) == VLLM_ERR_INVALID);
    free(kb);
    free(vb);
    /* every rejection: the sequence's tokens with its rejected drafts (or its
     * own token, then the drafts after it) as a prompt hits the cache for at
     * most its committed tokens' full blocks, and gets the logprobs a cold
     * engine gives it */
    CHECK(engine_set_spec(e, NULL) == VLLM_OK);
    a.enable_prefix_caching = false;
    vllm_engine *cold;
    CHECK(vllm_engine_create(&a, &cold) == VLLM_OK, "%s", vllm_errmsg());
    sp.max_tokens = 1;
    sp.logprobs = 0;
    int64_t hit = 0;
    CHECK(f.num_probes >= 20, "only %d rejections recorded", f.num_probes);
    for (int32_t i = 0; i < f.num_probes; i++) {
        const int32_t *pp[1] = {f.probe[i]};
        vllm_request_result *res, *ref;
        CHECK(vllm_engine_generate(e, 1, pp, &f.probe_len[i], &sp, NULL, &res) == VLLM_OK, "%s", vllm_errmsg());
        CHECK(vllm_engine_generate(cold, 1, pp, &f.probe_len[i], &sp, NULL, &ref) == VLLM_OK, "%s", vllm_errmsg());
        int32_t cached = res[0].num_cached_tokens, limit = f.probe_committed[i] / 4 * 4;
        bool same = res[0].seqs[0].token_ids[0] == ref[0].seqs[0].token_ids[0] &&
                    !memcmp(res[0].seqs[0].logprobs, ref[0].seqs[0].logprobs, sizeof(float));
        vllm_request_results_free(res, 1);
        vllm_request_results_free(ref, 1);
        CHECK(cached <= limit, "probe %d: %d tokens hit, but only %d were committed (%d in full blocks)", i,
              cached, f.probe_committed[i], limit);
        CHECK(same, "probe %d: a prefix-cache hit changed the logprobs", i);
        hit += cached;
    }
    CHECK(hit > 0, "the committed prefixes should hit the cache");
    vllm_engine_free(cold);
    vllm_engine_free(e);
}

/* --kv-cache-dtype: what each value stores, the blocks a fixed budget holds
 * (2x F32's for 16-bit types, 4x for FP8), the bytes per token, the KV
 * accessors in the pool's type; "auto" per model kind; unknown values refused
 * naming the accepted ones. stories260K: 5 layers, 4 KV heads of 8. */
TEST(test_kv_cache_dtype_engine) {
    const struct {
        const char *value, *storage;
        size_t bytes;
    } cases[] = {{"float32", "float32", 4}, {"auto", "bfloat16", 2}, {"bfloat16", "bfloat16", 2},
                 {"float16", "float16", 2}, {"fp8", "fp8_e4m3", 1},  {"fp8_e4m3", "fp8_e4m3", 1},
                 {"fp8_e5m2", "fp8_e5m2", 1}, {NULL, "bfloat16", 2}};
    const int64_t budget = 5120 * 4 * 100; /* 100 F32 blocks of 16 tokens */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vllm_engine_args a = base_args();
        a.kv_cache_dtype = cases[i].value;
        a.kv_cache_memory_bytes = budget;
        vllm_engine *e;
        CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s: %s", cases[i].value, vllm_errmsg());
        vllm_engine_info info;
        vllm_engine_get_info(e, &info);
        const char *label = cases[i].value ? cases[i].value : "auto";
        bool ok = !strcmp(info.kv_cache_dtype, label) && !strcmp(info.kv_cache_storage_dtype, cases[i].storage) &&
                  info.num_gpu_blocks == (int32_t)(100 * 4 / cases[i].bytes) &&
                  info.kv_cache_bytes_per_token == (int64_t)(2 * 5 * 4 * 8 * cases[i].bytes) &&
                  executor_kv_block_bytes(engine_executor(e)) == 4 * 16 * 8 * cases[i].bytes;
        /* a request's block read and written back through the executor */
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        sp.temperature = 0, sp.max_tokens = 3, sp.logprobs = 1;
        int32_t prompt[20], len = 20;
        for (int32_t j = 0; j < 20; j++) prompt[j] = 5 + 7 * j;
        const int32_t *pp[1] = {prompt};
        vllm_request_result *r1 = NULL, *r2 = NULL;
        size_t kvb = executor_kv_block_bytes(engine_executor(e));
        uint8_t *kb = malloc(kvb), *vb = malloc(kvb);
        bool io = vllm_engine_generate(e, 1, pp, &len, &sp, NULL, &r1) == VLLM_OK &&
                  executor_read_kv(engine_executor(e), 2, 0, kb, vb) == VLLM_OK &&
                  executor_write_kv(engine_executor(e), 2, 0, kb, vb) == VLLM_OK &&
                  vllm_engine_generate(e, 1, pp, &len, &sp, NULL, &r2) == VLLM_OK && r2[0].num_cached_tokens == 16 &&
                  !memcmp(r1[0].seqs[0].token_ids, r2[0].seqs[0].token_ids, 3 * sizeof(int32_t)) &&
                  !memcmp(r1[0].seqs[0].logprobs, r2[0].seqs[0].logprobs, 3 * sizeof(float));
        if (r1) vllm_request_results_free(r1, 1);
        if (r2) vllm_request_results_free(r2, 1);
        free(kb), free(vb);
        vllm_engine_free(e);
        CHECK(ok, "%s: cache_dtype %s, storage %s, %d blocks, %lld bytes per token", label, info.kv_cache_dtype,
              info.kv_cache_storage_dtype, info.num_gpu_blocks, (long long)info.kv_cache_bytes_per_token);
        CHECK(io, "%s: a block read and written back, then hit in the prefix cache, changed the output", label);
    }
    /* auto per model kind */
    model_config c = {.arch = MODEL_ARCH_LLAMA, .torch_dtype = DTYPE_F32};
    CHECK(engine_kv_cache_dtype_auto(&c, false) == KV_DTYPE_BF16, "F32 checkpoint: vLLM downcasts to bfloat16");
    c.torch_dtype = DTYPE_BF16;
    CHECK(engine_kv_cache_dtype_auto(&c, false) == KV_DTYPE_BF16);
    c.torch_dtype = DTYPE_F16;
    CHECK(engine_kv_cache_dtype_auto(&c, false) == KV_DTYPE_F16);
    c.torch_dtype = DTYPE_Q4_0;
    CHECK(engine_kv_cache_dtype_auto(&c, true) == KV_DTYPE_F16, "GGUF: llama.cpp's float16");
    c.arch = MODEL_ARCH_GEMMA3;
    CHECK(engine_kv_cache_dtype_auto(&c, true) == KV_DTYPE_BF16, "Gemma 3: never float16");
    c.torch_dtype = DTYPE_F16;
    CHECK(engine_kv_cache_dtype_auto(&c, false) == KV_DTYPE_BF16, "Gemma 3: never float16");
    /* unknown values */
    const char *bad[] = {"fp16", "half", "int8", "fp8_e4m3fn", "FP8", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        vllm_engine_args a = base_args();
        a.kv_cache_dtype = bad[i];
        vllm_engine *e = (vllm_engine *)1;
        CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && e == NULL, "'%s' accepted", bad[i]);
        CHECK(strstr(vllm_errmsg(), "kv_cache_dtype") && strstr(vllm_errmsg(), "'auto', 'bfloat16', 'float16', "
                                                                               "'float32', 'fp8', 'fp8_e4m3', "
                                                                               "'fp8_e5m2'"),
              "%s", vllm_errmsg());
    }
}

TEST(test_bad_input) {
    vllm_engine_args a = base_args();
    vllm_engine *e;
    a.num_gpu_blocks_override = 4; /* 64 tokens < max_model_len 256 */
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "max seq len"));
    a = base_args();
    a.max_model_len = 100000;
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "max_position"));
    a = base_args();
    a.model = "no/such/dir";
    CHECK(vllm_engine_create(&a, &e) != VLLM_OK && e == NULL);
    a = base_args();
    a.max_num_batched_tokens = 8; /* < max_num_seqs 64 */
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID, "budget below max_num_seqs");
    a = base_args();
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    int32_t p[300];
    for (int32_t i = 0; i < 300; i++) p[i] = 5;
    CHECK(vllm_engine_add_request(e, "a", p, 0, &sp, NULL) == VLLM_ERR_INVALID);
    CHECK(vllm_engine_add_request(e, "a", p, 257, &sp, NULL) == VLLM_ERR_INVALID &&
          strstr(vllm_errmsg(), "maximum model length"));
    p[3] = 512;
    CHECK(vllm_engine_add_request(e, "a", p, 5, &sp, NULL) == VLLM_ERR_INVALID &&
          strstr(vllm_errmsg(), "vocabulary"));
    p[3] = 5;
    sp.top_p = 0;
    CHECK(vllm_engine_add_request(e, "a", p, 5, &sp, NULL) == VLLM_ERR_INVALID &&
          strstr(vllm_errmsg(), "top_p"));
    sp.top_p = 1;
    sp.n = 65;
    CHECK(vllm_engine_add_request(e, "a", p, 5, &sp, NULL) == VLLM_ERR_INVALID &&
          strstr(vllm_errmsg(), "max_num_seqs"));
    CHECK(!vllm_engine_has_unfinished(e));
    /* generation_config: stories260K's has none of the sampling fields */
    vllm_engine_default_sampling_params(e, &sp);
    CHECK(sp.temperature == 1.0f && sp.max_tokens == 16);
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    CHECK(info.max_model_len == 256 && info.block_size == 16 && info.vocab_size == 512 &&
          info.bos_token_id == 1 && info.num_eos_token_ids == 2);
    vllm_engine_free(e);
}

int main(void) {
    RUN(test_greedy_bos_matches_llama2c);
    RUN(test_batch_invariance);
    RUN(test_batch_invariance_kv_bfloat16);
    RUN(test_batch_invariance_kv_float16);
    RUN(test_batch_invariance_kv_fp8_e4m3);
    RUN(test_batch_invariance_kv_fp8_e5m2);
    RUN(test_n_equals_separate_seeds);
    RUN(test_prefix_cache_ten_blocks);
    RUN(test_priority_with_preemption);
    RUN(test_abort_stop_events);
    RUN(test_spec_fake_proposer_and_verifier);
    RUN(test_kv_cache_dtype_engine);
    RUN(test_bad_input);
    return harness_done();
}

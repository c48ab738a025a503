/*
 * test_spec_ngram.c - speculative decoding with the n-gram proposer
 * (spec/ngram.h, --speculative-config).
 *
 *  - the proposer on hand-computed cases (longest match first, earliest
 *    occurrence among equals, drafts cut at the end of the sequence, min_n
 *    and max_n bounds), and against a brute-force statement of the same rule
 *    on random sequences over small alphabets;
 *  - --speculative-config parsing and the engine's checks: vLLM's defaults
 *    (prompt_lookup_min/_max default to each other, else 5), errors naming
 *    the key and the accepted values;
 *  - exactness on stories260K: 64 mixed requests (greedy with logprobs,
 *    seeded random n = 3, seeded with penalties) give, alone and together,
 *    with a roomy and a tiny KV pool (preemptions), the token ids and
 *    logprobs of decoding without speculation, bit for bit, and the KV pool
 *    empties; the same on SmolLM2-135M when scripts/fetch_models.sh gets it;
 *  - counters: on a prompt that repeats, the engine's drafts, draft tokens,
 *    accepted tokens and per-position acceptances equal what the proposer's
 *    rule and the non-speculative output give step by step;
 *    disable_by_batch_size; aborts mid-draft leave no block behind;
 *  - metrics: vllm:spec_decode_* families with vLLM's names and labels.
 */
/* checks: 8 */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cli/engine_args.h"
#include "engine/block_pool.h"
#include "engine/engine.h"
#include "harness.h"
#include "metrics/metrics.h"
#include "spec/ngram.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"
#define NREQ 64
#define MAX_OUT 64

/* ---- the proposer ------------------------------------------------------- */

static int32_t propose(int32_t min_n, int32_t max_n, const int32_t *t, int32_t n, int32_t k, int32_t *d) {
    ngram *g;
    if (ngram_create(min_n, max_n, &g) != VLLM_OK) return -1;
    int32_t got = ngram_propose(g, t, n, k, d);
    ngram_free(g);
    return got;
}

/* The rule as stated (ngram.h), the obvious way: for n from max_n down to
 * min_n, the first p with t[p..p+n) == t[N-n..N) and p + n < N. */
static int32_t brute_propose(int32_t min_n, int32_t max_n, const int32_t *t, int32_t N, int32_t k, int32_t *d) {
    for (int32_t n = max_n; n >= min_n; n--) {
        if (n >= N) continue;
        for (int32_t p = 0; p + n < N; p++) {
            if (memcmp(t + p, t + N - n, (size_t)n * sizeof *t)) continue;
            int32_t m = 0;
            for (int32_t j = p + n; j < N && m < k; j++) d[m++] = t[j];
            return m;
        }
    }
    return 0;
}

#define EXPECT(min_n, max_n, k, want, ...)                                                              \
    do {                                                                                              \
        static const int32_t toks[] = {__VA_ARGS__};                                                  \
        static const int32_t exp[] = want;                                                            \
        int32_t d[16], nexp = (int32_t)(sizeof exp / sizeof exp[0]) - 1;                              \
        int32_t got = propose(min_n, max_n, toks, (int32_t)(sizeof toks / sizeof toks[0]), k, d);     \
        CHECK(got == nexp && !memcmp(d, exp + 1, (size_t)nexp * sizeof(int32_t)),                     \
              "line %d: %d drafts (want %d), first %d", __LINE__, got, nexp, got > 0 ? d[0] : -1);    \
    } while (0)
#define W(...) {0, __VA_ARGS__} /* the wanted drafts after a dummy 0 */

TEST(test_ngram_hand_cases) {
    /* [2 3] ends the sequence and occurred at 1: what followed is 4 1 */
    EXPECT(2, 2, 2, W(4, 1), 1, 2, 3, 4, 1, 2, 3);
    /* [7 8] at 0 and 3: the earliest occurrence wins (vLLM), so 1, not 2 */
    EXPECT(2, 2, 1, W(1), 7, 8, 1, 7, 8, 2, 7, 8);
    /* longest first: [1 2] first occurs at 0 (-> 8), but [5 1 2] at 3 (-> 9 5) */
    EXPECT(2, 3, 2, W(9, 5), 1, 2, 8, 5, 1, 2, 9, 5, 1, 2);
    /* with max_n 2 the 3-gram is out of reach: [1 2] at 0 -> 8 5 */
    EXPECT(2, 2, 2, W(8, 5), 1, 2, 8, 5, 1, 2, 9, 5, 1, 2);
    /* the drafts stop at the end of the sequence: 3 of k = 5 */
    EXPECT(2, 2, 5, W(3, 1, 2), 1, 2, 3, 1, 2);
    /* overlapping occurrence: [1 1] at 0, followed by the last 1 only */
    EXPECT(2, 2, 3, W(1), 1, 1, 1);
    /* one token repeating: min_n 1 finds [2] at 1 */
    EXPECT(1, 1, 2, W(3, 2), 1, 2, 3, 2);
    /* no earlier [3 2]: nothing with min_n 2 */
    EXPECT(2, 4, 2, W(), 1, 2, 3, 2);
    /* fewer tokens than min_n, or a single token */
    EXPECT(3, 3, 2, W(), 4, 4);
    EXPECT(1, 1, 2, W(), 4);
    /* k 0 */
    EXPECT(1, 1, 0, W(), 4, 4, 4);
    /* max_n caps the match: [3 4 5] recurs whole, but with max_n 2 the
     * earliest [4 5] (at 1, -> 9) wins over the 3-gram's place */
    EXPECT(1, 2, 1, W(9), 3, 4, 5, 9, 0, 4, 5, 7, 3, 4, 5);
    EXPECT(1, 3, 1, W(9), 3, 4, 5, 9, 0, 4, 5, 7, 3, 4, 5);
    EXPECT(1, 3, 1, W(7), 0, 4, 5, 9, 3, 4, 5, 7, 3, 4, 5);
    ngram *g;
    CHECK(ngram_create(0, 3, &g) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "prompt_lookup_min"));
    CHECK(ngram_create(4, 3, &g) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "<= prompt_lookup_max"));
}

TEST(test_ngram_matches_brute_force) {
    uint64_t h = 7;
    int32_t t[300], d1[16], d2[16];
    int64_t nonempty = 0;
    for (int32_t it = 0; it < 20000; it++) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        int32_t alpha = 2 + (int32_t)((h >> 33) % 6), n = 1 + (int32_t)((h >> 40) % 300);
        int32_t min_n = 1 + (int32_t)((h >> 20) % 4), max_n = min_n + (int32_t)((h >> 24) % 5);
        int32_t k = 1 + (int32_t)((h >> 28) % 12);
        for (int32_t i = 0; i < n; i++) {
            h = h * 6364136223846793005ULL + 1442695040888963407ULL;
            t[i] = (int32_t)((h >> 33) % (uint64_t)alpha);
        }
        int32_t a = propose(min_n, max_n, t, n, k, d1), b = brute_propose(min_n, max_n, t, n, k, d2);
        CHECK(a == b && !memcmp(d1, d2, (size_t)(a > 0 ? a : 0) * sizeof *d1),
              "case %d: n %d alphabet %d min %d max %d k %d: %d drafts vs the rule's %d", it, n, alpha, min_n,
              max_n, k, a, b);
        nonempty += a > 0;
    }
    CHECK(nonempty > 10000, "only %lld of 20000 cases proposed anything", (long long)nonempty);
}

/* ---- configuration ------------------------------------------------------ */

static int parse_spec(const char *json, vllm_speculative_config *c) {
    memset(c, 0, sizeof *c); /* the messages (stderr) are checked in tests/test_spec_cli.sh */
    return engine_args_parse_speculative_config(c, json, "--speculative-config");
}

TEST(test_speculative_config) {
    vllm_speculative_config c;
    CHECK(parse_spec("{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":3}", &c) == 0 &&
          c.method == VLLM_SPEC_METHOD_NGRAM && c.num_speculative_tokens == 4 && c.prompt_lookup_max == 3 &&
          c.prompt_lookup_min == 0);
    CHECK(parse_spec("{\"model\":\"[ngram]\",\"num_speculative_tokens\":1,\"disable_by_batch_size\":8,"
                     "\"disable_logprobs\":true}", &c) == 0 &&
          c.method == VLLM_SPEC_METHOD_NGRAM && c.disable_by_batch_size == 8);
    /* vLLM's spelling: a model without a method is a draft model */
    CHECK(parse_spec("{\"model\":\"some/draft\",\"num_speculative_tokens\":2}", &c) == 0 &&
          c.method == VLLM_SPEC_METHOD_DRAFT_MODEL && !strcmp(c.model, "some/draft") && c.num_speculative_tokens == 2);
    static const char *const bad[] = {
        "{\"method\":\"eagle\",\"num_speculative_tokens\":2}",
        "{\"method\":\"draft_model\",\"num_speculative_tokens\":2}",
        "{\"method\":\"draft_model\",\"model\":\"x\",\"num_speculative_tokens\":2,\"prompt_lookup_min\":2}",
        "{\"method\":\"ngram\"}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":0}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":129}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":\"3\"}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":0}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":4,\"prompt_lookup_max\":2}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"disable_by_batch_size\":1}",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"lookahead\":2}",
        "[\"ngram\"]",
        "{\"method\":",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse_spec(bad[i], &c) == -1, "accepted %s", bad[i]);
    /* the engine's own checks and vLLM's defaults */
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    a.num_threads = 1;
    a.max_num_seqs = 4;
    a.speculative_config = (vllm_speculative_config){.method = VLLM_SPEC_METHOD_NGRAM, .num_speculative_tokens = 3};
    vllm_engine *e;
    vllm_engine_info info;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    vllm_engine_get_info(e, &info);
    vllm_engine_free(e);
    CHECK(info.speculative_config.prompt_lookup_min == 5 && info.speculative_config.prompt_lookup_max == 5);
    a.speculative_config.prompt_lookup_max = 3;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    vllm_engine_get_info(e, &info);
    vllm_engine_free(e);
    CHECK(info.speculative_config.prompt_lookup_min == 3 && info.speculative_config.num_speculative_tokens == 3);
    a.speculative_config.num_speculative_tokens = 0;
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "num_speculative_tokens"));
    a.speculative_config.num_speculative_tokens = 2;
    a.speculative_config.prompt_lookup_min = 4;
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "prompt_lookup_min=4"));
    a.speculative_config.prompt_lookup_min = 0;
    a.speculative_config.disable_by_batch_size = 1;
    CHECK(vllm_engine_create(&a, &e) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "disable_by_batch_size"));
}

/* ---- through the engine ------------------------------------------------- */

typedef struct req_spec {
    int32_t prompt[200];
    int32_t len;
    vllm_sampling_params sp;
} req_spec;

typedef struct seq_result {
    int32_t n;
    int32_t ids[MAX_OUT];
    float lps[MAX_OUT];
    float top[MAX_OUT][3];
    vllm_finish_reason finish;
} seq_result;

typedef struct req_result { seq_result seqs[3]; } req_result;

typedef struct run_stats {
    int64_t steps, preemptions, multi, drafts, draft_tokens, accepted;
    int64_t per_pos[VLLM_MAX_SPEC_TOKENS];
    int32_t blocks_total, blocks_free;
    bool pool_ok;
} run_stats;

/* Adds specs[which[0..count)] at once (ids are their indices), steps to the
 * end (aborting every request whose index is in abort_mask after step
 * abort_at), collects outputs and the spec counters. */
static bool run(const vllm_engine_args *args, const req_spec *specs, const int32_t *which, int32_t count,
                req_result *res, run_stats *st, uint64_t abort_mask, int64_t abort_at) {
    vllm_engine *e;
    CHECK_OR(false, vllm_engine_create(args, &e) == VLLM_OK, "%s", vllm_errmsg());
    memset(st, 0, sizeof *st);
    bool ok = true;
    for (int32_t i = 0; i < count && ok; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", which[i]);
        memset(&res[which[i]], 0, sizeof res[which[i]]);
        ok = vllm_engine_add_request(e, id, specs[which[i]].prompt, specs[which[i]].len, &specs[which[i]].sp,
                                     NULL) == VLLM_OK;
        CHECK_OR(false, ok, "add %s: %s", id, vllm_errmsg());
    }
    while (ok && vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        ok = vllm_engine_step(e, &so) == VLLM_OK;
        CHECK_OR(false, ok, "step: %s", vllm_errmsg());
        const vllm_scheduler_stats *s = &so->stats;
        st->steps++;
        st->preemptions += s->num_preemptions;
        st->drafts += s->spec_num_drafts;
        st->draft_tokens += s->spec_num_draft_tokens;
        st->accepted += s->spec_num_accepted_tokens;
        int64_t sum = 0;
        for (int32_t j = 0; j < s->num_spec_tokens; j++) {
            st->per_pos[j] += s->spec_num_accepted_tokens_per_pos[j];
            sum += s->spec_num_accepted_tokens_per_pos[j];
            CHECK_OR(false, j == 0 || s->spec_num_accepted_tokens_per_pos[j] <= s->spec_num_accepted_tokens_per_pos[j - 1]);
        }
        CHECK_OR(false, sum == s->spec_num_accepted_tokens && s->spec_num_accepted_tokens <= s->spec_num_draft_tokens,
                 "step %lld: per-position sum %lld, accepted %d, drafted %d", (long long)st->steps, (long long)sum,
                 s->spec_num_accepted_tokens, s->spec_num_draft_tokens);
        st->blocks_total = s->num_blocks_total;
        st->blocks_free = s->num_blocks_free;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            seq_result *q = &res[atoi(o->request_id)].seqs[o->index];
            st->multi += o->num_new_tokens > 1;
            for (int32_t t = 0; t < o->num_new_tokens; t++) {
                CHECK_OR(false, q->n < MAX_OUT, "too many tokens");
                q->ids[q->n] = o->new_token_ids[t];
                if (o->new_logprobs) {
                    q->lps[q->n] = o->new_logprobs[t].logprob;
                    for (int32_t m = 0; m < 3 && m < o->new_logprobs[t].num_top; m++)
                        q->top[q->n][m] = o->new_logprobs[t].top_logprobs[m];
                }
                q->n++;
            }
            if (o->finish_reason != VLLM_FINISH_NONE) q->finish = o->finish_reason;
        }
        for (int32_t i = 0; st->steps == abort_at && i < count; i++) {
            char id[16];
            snprintf(id, sizeof id, "%d", which[i]);
            if (abort_mask >> (which[i] % 64) & 1) vllm_engine_abort_request(e, id); /* NOT_FOUND if done */
        }
    }
    st->pool_ok = block_pool_check(kv_cache_manager_pool(engine_kv_cache_manager(e))) == VLLM_OK;
    vllm_engine_free(e);
    return ok;
}

static uint64_t rng = 4242;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 33);
}

/* Prompts that repeat a phrase (so the proposer has something to find),
 * over ids lo..hi; the sampling mix of test_engine.c's batch: greedy with
 * logprobs, seeded random n = 3, seeded random with penalties. */
static void make_specs(req_spec *specs, int32_t count, int32_t lo, int32_t hi, int32_t max_out) {
    for (int32_t i = 0; i < count; i++) {
        req_spec *s = &specs[i];
        memset(s, 0, sizeof *s);
        int32_t phrase[12], plen = 4 + (int32_t)(rnd() % 9), reps = 1 + (int32_t)(rnd() % 4);
        for (int32_t t = 0; t < plen; t++) phrase[t] = lo + (int32_t)(rnd() % (uint32_t)(hi - lo));
        s->prompt[s->len++] = 1;
        for (int32_t r = 0; r < reps; r++) {
            memcpy(s->prompt + s->len, phrase, (size_t)plen * sizeof *phrase);
            s->len += plen;
            for (int32_t t = (int32_t)(rnd() % 3); t > 0; t--) s->prompt[s->len++] = lo + (int32_t)(rnd() % 50);
        }
        memcpy(s->prompt + s->len, phrase, (size_t)(plen / 2) * sizeof *phrase); /* half a phrase: continue it */
        s->len += plen / 2;
        vllm_sampling_params_init(&s->sp);
        s->sp.max_tokens = 4 + (int32_t)(rnd() % (uint32_t)(max_out - 4));
        s->sp.ignore_eos = i % 4 != 1;
        if (i % 8 == 3) {
            s->sp.temperature = 0.9f;
            s->sp.top_p = 0.9f;
            s->sp.has_seed = true;
            s->sp.seed = 1000 + (uint64_t)i;
            s->sp.n = 3;
        } else if (i % 8 == 5) {
            s->sp.temperature = 1.3f;
            s->sp.top_k = 40;
            s->sp.repetition_penalty = 1.2f;
            s->sp.has_seed = true;
            s->sp.seed = 77 + (uint64_t)i;
        } else if (i % 8 == 7) {
            s->sp.temperature = 0.7f;
            s->sp.has_seed = true;
            s->sp.seed = 5 + (uint64_t)i;
            s->sp.logprobs = 2;
        } else {
            s->sp.temperature = 0.0f;
            s->sp.logprobs = 3;
        }
    }
}

static bool same_result(const req_result *a, const req_result *b, int32_t n, const char *what, int32_t i) {
    for (int32_t k = 0; k < n; k++) {
        const seq_result *x = &a->seqs[k], *y = &b->seqs[k];
        CHECK_OR(false, x->n == y->n && x->finish == y->finish, "%s: request %d seq %d: %d tokens (%d) vs %d (%d)",
                 what, i, k, x->n, x->finish, y->n, y->finish);
        CHECK_OR(false, !memcmp(x->ids, y->ids, (size_t)x->n * sizeof(int32_t)),
                 "%s: request %d seq %d: token ids differ", what, i, k);
        CHECK_OR(false, !memcmp(x->lps, y->lps, (size_t)x->n * sizeof(float)),
                 "%s: request %d seq %d: logprobs differ bitwise", what, i, k);
        CHECK_OR(false, !memcmp(x->top, y->top, (size_t)x->n * sizeof x->top[0]),
                 "%s: request %d seq %d: top logprobs differ bitwise", what, i, k);
    }
    return true;
}

static vllm_engine_args args_for(const char *model_dir, int32_t max_model_len, int32_t max_num_seqs) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = model_dir;
    a.num_threads = 2;
    a.max_model_len = max_model_len;
    a.max_num_seqs = max_num_seqs;
    return a;
}

static vllm_speculative_config ngram_cfg(int32_t k, int32_t min_n, int32_t max_n) {
    return (vllm_speculative_config){.method = VLLM_SPEC_METHOD_NGRAM,
                                     .num_speculative_tokens = k,
                                     .prompt_lookup_min = min_n,
                                     .prompt_lookup_max = max_n};
}

/* Every request alone without speculation (the reference), then alone and
 * all together with each speculative setting. */
static void check_exact(const char *model_dir, int32_t max_model_len, req_spec *specs, int32_t count,
                        const vllm_speculative_config *cfgs, const int32_t *blocks, int32_t num_cfgs,
                        bool expect_preempt_last) {
    static req_result ref[NREQ], got[NREQ];
    int32_t all[NREQ];
    run_stats st;
    for (int32_t i = 0; i < count; i++) all[i] = i;
    vllm_engine_args a = args_for(model_dir, max_model_len, count);
    a.enable_prefix_caching = false;
    for (int32_t i = 0; i < count; i++)
        if (!run(&a, specs, &all[i], 1, ref, &st, 0, 0)) return;
    for (int32_t c = 0; c < num_cfgs; c++) {
        char what[96];
        a = args_for(model_dir, max_model_len, count);
        a.speculative_config = cfgs[c];
        a.num_gpu_blocks_override = blocks[c];
        int64_t drafts = 0, accepted = 0, draft_tokens = 0;
        for (int32_t i = 0; i < count; i++) { /* alone */
            if (!run(&a, specs, &all[i], 1, got, &st, 0, 0)) return;
            snprintf(what, sizeof what, "k=%d n-gram %d..%d, alone", cfgs[c].num_speculative_tokens,
                     cfgs[c].prompt_lookup_min, cfgs[c].prompt_lookup_max);
            if (!same_result(&ref[i], &got[i], specs[i].sp.n, what, i)) return;
            CHECK(st.blocks_free == st.blocks_total && st.pool_ok, "%s: request %d left blocks behind", what, i);
            drafts += st.drafts;
            accepted += st.accepted;
            draft_tokens += st.draft_tokens;
        }
        printf("# %s: %s %lld drafts, %lld of %lld draft tokens accepted\n", model_dir, what, (long long)drafts,
               (long long)accepted, (long long)draft_tokens);
        CHECK(accepted > 0 && accepted < draft_tokens, "%s: %lld of %lld accepted", what, (long long)accepted,
              (long long)draft_tokens);
        if (!run(&a, specs, all, count, got, &st, 0, 0)) return; /* together */
        snprintf(what, sizeof what, "k=%d n-gram %d..%d, %d together%s", cfgs[c].num_speculative_tokens,
                 cfgs[c].prompt_lookup_min, cfgs[c].prompt_lookup_max, count, blocks[c] ? ", tiny KV pool" : "");
        for (int32_t i = 0; i < count; i++)
            if (!same_result(&ref[i], &got[i], specs[i].sp.n, what, i)) return;
        CHECK(st.blocks_free == st.blocks_total && st.pool_ok, "%s: %d of %d blocks free at the end", what,
              st.blocks_free, st.blocks_total);
        CHECK(st.accepted > 0 && st.multi > 0, "%s: no draft accepted", what);
        if (expect_preempt_last && c == num_cfgs - 1) CHECK(st.preemptions > 0, "%s: no preemption", what);
        printf("# %s: %s: %lld steps, %lld preemptions, %lld drafts, %lld/%lld accepted\n", model_dir, what,
               (long long)st.steps, (long long)st.preemptions, (long long)st.drafts, (long long)st.accepted,
               (long long)st.draft_tokens);
    }
}

TEST(test_exact_stories260k) {
    static req_spec specs[NREQ];
    rng = 4242;
    make_specs(specs, NREQ, 3, 512, 48);
    const vllm_speculative_config cfgs[] = {ngram_cfg(4, 1, 3), ngram_cfg(5, 2, 4)};
    const int32_t blocks[] = {0, 24}; /* 24 x 16 slots for 64 requests: preemption */
    check_exact(MODEL, 256, specs, NREQ, cfgs, blocks, 2, true);
}

TEST(test_exact_smollm2) {
    FILE *p = popen("scripts/fetch_models.sh smollm2 2>/dev/null", "r");
    char path[512] = "";
    if (p && !fgets(path, sizeof path, p)) path[0] = 0;
    int status = p ? pclose(p) : -1;
    if (status != 0 || !path[0]) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3) SKIP("SmolLM2 cannot be downloaded (fetch_models.sh exit 3)");
        CHECK(false, "scripts/fetch_models.sh smollm2 failed (status %d)", status);
    }
    path[strcspn(path, "\n")] = 0;
    static req_spec specs[16];
    rng = 99;
    make_specs(specs, 16, 200, 20000, 24);
    const vllm_speculative_config cfgs[] = {ngram_cfg(4, 1, 3)};
    const int32_t blocks[] = {0};
    check_exact(path, 512, specs, 16, cfgs, blocks, 1, false);
}

/* The counters of one greedy request on a prompt that repeats, against the
 * engine's protocol replayed by hand over the non-speculative output: after
 * the prefill, each step proposes (brute_propose, the rule as stated) up to
 * min(k, max_tokens - outputs - 1) drafts from prompt + outputs; the
 * accepted ones are the drafts' longest prefix that the reference
 * continues with; one more token is committed. */
TEST(test_counters_hand_replay) {
    static req_spec spec[1];
    req_spec *s = &spec[0];
    memset(s, 0, sizeof *s);
    static const int32_t phrase[] = {300, 301, 302, 303, 304, 305};
    s->prompt[s->len++] = 1;
    for (int32_t r = 0; r < 3; r++)
        for (int32_t t = 0; t < 6; t++) s->prompt[s->len++] = phrase[t];
    s->prompt[s->len++] = 300;
    s->prompt[s->len++] = 301;
    vllm_sampling_params_init(&s->sp);
    s->sp.temperature = 0;
    s->sp.ignore_eos = true;
    s->sp.max_tokens = 40;
    const int32_t K = 3, MIN_N = 1, MAX_N = 2, which = 0;
    static req_result ref[1], got[1];
    run_stats st;
    vllm_engine_args a = args_for(MODEL, 256, 4);
    if (!run(&a, spec, &which, 1, ref, &st, 0, 0)) return;
    CHECK(ref[0].seqs[0].n == 40);
    int32_t toks[256], n = s->len, out = 1, d[8];
    memcpy(toks, s->prompt, (size_t)n * sizeof *toks);
    memcpy(toks + n, ref[0].seqs[0].ids, 40 * sizeof *toks);
    n++;
    int64_t drafts = 0, draft_tokens = 0, accepted = 0, per_pos[3] = {0}, steps = 1;
    while (out < 40) {
        int32_t m = K < 40 - out - 1 ? K : 40 - out - 1;
        int32_t nd = m > 0 ? brute_propose(MIN_N, MAX_N, toks, n, m, d) : 0, acc = 0;
        if (nd > 0) {
            while (acc < nd && d[acc] == toks[n + acc]) acc++;
            drafts++;
            draft_tokens += nd;
            accepted += acc;
            for (int32_t j = 0; j < acc; j++) per_pos[j]++;
        }
        n += acc + 1;
        out += acc + 1;
        steps++;
    }
    a.speculative_config = ngram_cfg(K, MIN_N, MAX_N);
    if (!run(&a, spec, &which, 1, got, &st, 0, 0)) return;
    if (!same_result(&ref[0], &got[0], 1, "hand replay", 0)) return;
    printf("# replay: %lld steps, %lld drafts, %lld draft tokens, %lld accepted (%lld %lld %lld by position)\n",
           (long long)steps, (long long)drafts, (long long)draft_tokens, (long long)accepted,
           (long long)per_pos[0], (long long)per_pos[1], (long long)per_pos[2]);
    CHECK(drafts > 5 && accepted > 0 && accepted < draft_tokens, "the crafted prompt should draft and reject");
    CHECK(st.drafts == drafts && st.draft_tokens == draft_tokens && st.accepted == accepted,
          "engine: %lld drafts, %lld draft tokens, %lld accepted", (long long)st.drafts, (long long)st.draft_tokens,
          (long long)st.accepted);
    CHECK(st.per_pos[0] == per_pos[0] && st.per_pos[1] == per_pos[1] && st.per_pos[2] == per_pos[2],
          "engine per position: %lld %lld %lld", (long long)st.per_pos[0], (long long)st.per_pos[1],
          (long long)st.per_pos[2]);
    CHECK(st.steps == steps, "engine took %lld steps, the replay %lld", (long long)st.steps, (long long)steps);
}

/* disable_by_batch_size: no drafts while that many sequences run; aborts in
 * the middle of drafting leave no block behind, and the requests that were
 * not aborted give the tokens of a run without speculation. */
TEST(test_disable_and_abort) {
    static req_spec specs[16];
    static req_result ref[16], got[16];
    rng = 7;
    make_specs(specs, 16, 3, 512, 40);
    for (int32_t i = 0; i < 16; i++) { /* every request runs to the same length */
        specs[i].sp.max_tokens = 30;
        specs[i].sp.ignore_eos = true;
        specs[i].sp.n = 1;
    }
    int32_t all[16];
    for (int32_t i = 0; i < 16; i++) all[i] = i;
    run_stats st;
    vllm_engine_args a = args_for(MODEL, 256, 16);
    if (!run(&a, specs, all, 16, ref, &st, 0, 0)) return;
    a.speculative_config = ngram_cfg(4, 1, 3);
    a.speculative_config.disable_by_batch_size = 16;
    if (!run(&a, specs, all, 16, got, &st, 0, 0)) return;
    CHECK(st.drafts == 0, "16 running, disable_by_batch_size 16: %lld drafts", (long long)st.drafts);
    a.speculative_config.disable_by_batch_size = 17;
    if (!run(&a, specs, all, 16, got, &st, 0, 0)) return;
    CHECK(st.drafts > 0, "16 running, disable_by_batch_size 17: no drafts");
    for (int32_t i = 0; i < 16; i++)
        if (!same_result(&ref[i], &got[i], 1, "disable_by_batch_size 17", i)) return;
    a.speculative_config.disable_by_batch_size = 0;
    for (int64_t at = 2; at <= 8; at += 3) {
        a.num_gpu_blocks_override = at == 8 ? 20 : 0; /* the last round also preempts */
        if (!run(&a, specs, all, 16, got, &st, 0x5555, at)) return;
        CHECK(st.blocks_free == st.blocks_total && st.pool_ok, "abort after step %lld: %d of %d blocks free",
              (long long)at, st.blocks_free, st.blocks_total);
        CHECK(st.drafts > 0);
        for (int32_t i = 1; i < 16; i += 2)
            if (!same_result(&ref[i], &got[i], 1, "beside aborted requests", i)) return;
        for (int32_t i = 0; i < 16; i += 2) CHECK(got[i].seqs[0].finish == VLLM_FINISH_ABORT, "request %d", i);
    }
}

TEST(test_spec_metrics) {
    metrics_config mc;
    metrics_config_init(&mc);
    mc.model_name = "m";
    mc.log_stats = false;
    mc.num_speculative_tokens = 3;
    metrics *m;
    CHECK(metrics_create(&mc, &m) == VLLM_OK, "%s", vllm_errmsg());
    vllm_step_output out = {.timestamp = vllm_monotonic_time()};
    out.stats = (vllm_scheduler_stats){.num_spec_tokens = 3,
                                       .spec_num_drafts = 2,
                                       .spec_num_draft_tokens = 5,
                                       .spec_num_accepted_tokens = 3,
                                       .spec_num_accepted_tokens_per_pos = {2, 1, 0}};
    metrics_on_step(m, &out, out.timestamp);
    metrics_on_step(m, &out, out.timestamp);
    char *t;
    size_t len;
    CHECK(metrics_render(m, vllm_monotonic_time(), &t, &len) == VLLM_OK);
    static const char *const want[] = {
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 4.0",
        "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 10.0",
        "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 6.0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"0\"} 4.0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"1\"} 2.0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"2\"} 0.0",
    };
    bool all = true;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(t, want[i])) {
            printf("# missing: %s\n", want[i]);
            all = false;
        }
    free(t);
    CHECK(all, "the exposition lacks vLLM's spec_decode lines");
    /* the log line: 4 drafts, 10 draft tokens, 6 accepted (4, 2, 0 by position) */
    char path[] = "/tmp/test_spec_ngram_logXXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    metrics_log_stats(m, vllm_monotonic_time());
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char logged[2048] = "";
    ssize_t got = pread(fd, logged, sizeof logged - 1, 0);
    close(fd);
    unlink(path);
    metrics_free(m);
    logged[got > 0 ? got : 0] = 0;
    const char *line = strstr(logged, "SpecDecoding metrics: ");
    CHECK(line && strstr(line, "Mean acceptance length: 2.50, Accepted throughput: ") &&
              strstr(line, " tokens/s, Accepted: 6 tokens, Drafted: 10 tokens, Per-position acceptance rate: "
                           "1.000, 0.500, 0.000, Avg Draft acceptance rate: 60.0%\n"),
          "log: %s", logged);
    mc.num_speculative_tokens = 0;
    CHECK(metrics_create(&mc, &m) == VLLM_OK);
    CHECK(metrics_render(m, vllm_monotonic_time(), &t, &len) == VLLM_OK);
    bool none = !strstr(t, "spec_decode");
    free(t);
    metrics_free(m);
    CHECK(none, "spec_decode families without speculative decoding");
}

int main(void) {
    setenv("VLLM_LOGGING_LEVEL", "INFO", 1); /* test_spec_metrics reads an INFO line */
    RUN(test_ngram_hand_cases);
    RUN(test_ngram_matches_brute_force);
    RUN(test_speculative_config);
    RUN(test_exact_stories260k);
    RUN(test_exact_smollm2);
    RUN(test_counters_hand_replay);
    RUN(test_disable_and_abort);
    RUN(test_spec_metrics);
    return harness_done();
}

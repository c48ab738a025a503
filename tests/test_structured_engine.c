/*
 * test_structured_engine.c - structured outputs in the engine core, on the
 * real stories260K model (whose unconstrained text is nothing like the
 * constraints below, so an output that matches is the mask at work).
 *
 *  - choice: greedy and seeded random outputs decode to exactly one of the
 *    choices and finish with "stop";
 *  - every kind the compiler has (regex, grammar, json_object, json schema):
 *    outputs checked by independent code: PCRE2 for the regex, jansson for
 *    JSON, the choice list by string comparison;
 *  - batch invariance: constrained requests (greedy with logprobs, seeded,
 *    n = 3) give the same tokens and logprobs bit for bit alone, in a batch
 *    of unconstrained ones, with a KV pool so small that preemption by
 *    recompute happens (and did), and with n-gram speculative decoding
 *    (masks on every draft row, matchers rolled back); and the same with
 *    the masks filled after the forward (VLLMC_DEBUG_SYNC_MASKS=1) instead
 *    of on the helper thread beside it;
 *  - n = 3 seeded s equals three requests seeded s, s + 1, s + 2;
 *  - WAITING_FOR_FSM: while a grammar compiles (the cache's debug delay), an
 *    unconstrained request runs and the constrained one is counted waiting,
 *    unscheduled; then it runs;
 *  - a compile error finishes the request with ERROR and the compiler's
 *    message; the same spec again fails at add; a compile past
 *    structured_outputs_compile_timeout finishes with ERROR naming it;
 *    abort while waiting; min_tokens that hide the only allowed EOS end the
 *    sequence with "stop" instead of failing the step.
 */
/* checks: 10 */
/* tags: tsan */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "engine/grammar_cache.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"
#define MAX_OUT 160
#define MAX_SEQS 4

static tokenizer *tok;

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

typedef struct req {
    int32_t prompt[40];
    int32_t len;
    vllm_sampling_params sp;
    vllm_structured_outputs so;
} req;

typedef struct seq_out {
    int32_t n;
    int32_t ids[MAX_OUT];
    float lps[MAX_OUT];
    vllm_finish_reason finish;
    int32_t stop_token_id;
    char error[256];
} seq_out;

typedef struct req_out { seq_out seqs[MAX_SEQS]; int32_t preempted; } req_out;

typedef struct run_info { int64_t preemptions, multi_token; } run_info;

/* Adds reqs[which[0..count)] (ids are their indexes), steps to the end. */
static bool run(const vllm_engine_args *args, const req *reqs, const int32_t *which, int32_t count, req_out *out,
                run_info *info) {
    vllm_engine *e;
    CHECK_OR(false, vllm_engine_create(args, &e) == VLLM_OK, "%s", vllm_errmsg());
    if (info) memset(info, 0, sizeof *info);
    bool ok = true;
    /* Every constraint compiled before the first request is added, so that
     * no request waits in WAITING_FOR_FSM for a compile whose length is the
     * machine's: the schedule (preemptions included) depends only on the
     * requests. (The cache's entries outlive these references.) */
    grammar_cache *gc = engine_grammar_cache(e);
    for (int32_t i = 0; i < count && gc; i++) {
        const req *r = &reqs[which[i]];
        st_spec spec;
        grammar_cache_entry *g;
        if (r->so.kind == VLLM_STRUCTURED_NONE || grammar_cache_spec(&r->so, &spec) != VLLM_OK ||
            grammar_cache_get(gc, &spec, &g) != VLLM_OK)
            continue;
        grammar_cache_entry_wait(gc, g, clock_now() + 60.0);
        grammar_cache_entry_unref(gc, g);
    }
    for (int32_t i = 0; i < count && ok; i++) {
        const req *r = &reqs[which[i]];
        char id[16];
        snprintf(id, sizeof id, "%d", which[i]);
        vllm_request_opts o = {.structured_outputs = r->so};
        memset(&out[which[i]], 0, sizeof out[which[i]]);
        ok = vllm_engine_add_request(e, id, r->prompt, r->len, &r->sp, &o) == VLLM_OK;
        CHECK_OR(false, ok, "add %s: %s", id, vllm_errmsg());
    }
    while (ok && vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        ok = vllm_engine_step(e, &so) == VLLM_OK;
        CHECK_OR(false, ok, "step: %s", vllm_errmsg());
        if (info) info->preemptions += so->stats.num_preemptions;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            req_out *r = &out[atoi(o->request_id)];
            seq_out *q = &r->seqs[o->index];
            for (int32_t k = 0; k < o->num_events; k++) r->preempted += o->events[k].type == VLLM_EVENT_PREEMPTED;
            if (info) info->multi_token += o->num_new_tokens > 1;
            for (int32_t t = 0; t < o->num_new_tokens; t++) {
                CHECK_OR(false, q->n < MAX_OUT, "too many tokens");
                q->lps[q->n] = o->new_logprobs ? o->new_logprobs[t].logprob : 0;
                q->ids[q->n++] = o->new_token_ids[t];
            }
            if (o->finish_reason != VLLM_FINISH_NONE) {
                q->finish = o->finish_reason;
                q->stop_token_id = o->stop_token_id;
                if (o->error) snprintf(q->error, sizeof q->error, "%s", o->error);
            }
        }
    }
    vllm_engine_free(e);
    return ok;
}

/* The text of a sequence's output without the EOS that stopped it. */
static char *text_of(const seq_out *q) {
    int32_t n = q->n;
    if (n > 0 && q->finish == VLLM_FINISH_STOP && q->ids[n - 1] == q->stop_token_id) n--;
    char *s = NULL;
    size_t len = 0;
    if (tokenizer_decode(tok, q->ids, n, false, &s, &len) != VLLM_OK) return NULL;
    return s;
}

static const char *CHOICES = "[\"Once upon a time\", \"The big red dog\", \"Lily and Ben\", \"yes\"]";
static const char *const CHOICE_LIST[] = {"Once upon a time", "The big red dog", "Lily and Ben", "yes"};

static bool is_choice(const char *s) {
    for (size_t i = 0; i < sizeof CHOICE_LIST / sizeof *CHOICE_LIST; i++)
        if (!strcmp(s, CHOICE_LIST[i])) return true;
    return false;
}

static void make_prompt(req *r, uint32_t seed) {
    r->len = 0;
    r->prompt[r->len++] = 1;
    for (int32_t t = 0; t < 3 + (int32_t)(seed % 9); t++) r->prompt[r->len++] = 3 + (int32_t)((seed * 7919u + (uint32_t)t * 104729u) % 509);
}

static vllm_structured_outputs so_of(vllm_structured_kind k, const char *text) {
    return (vllm_structured_outputs){.kind = k, .text = text};
}

TEST(test_choice) {
    vllm_engine_args a = base_args();
    req reqs[12];
    int32_t which[12];
    req_out out[12];
    for (int32_t i = 0; i < 12; i++) {
        make_prompt(&reqs[i], (uint32_t)i);
        vllm_sampling_params_init(&reqs[i].sp);
        reqs[i].sp.max_tokens = 40;
        if (i % 2) { /* seeded random at temperature 1: garbage unconstrained */
            reqs[i].sp.has_seed = true;
            reqs[i].sp.seed = 100 + (uint64_t)i;
        } else {
            reqs[i].sp.temperature = 0;
        }
        reqs[i].so = so_of(VLLM_STRUCTURED_CHOICE, CHOICES);
        which[i] = i;
    }
    CHECK(run(&a, reqs, which, 12, out, NULL));
    for (int32_t i = 0; i < 12; i++) {
        char *s = text_of(&out[i].seqs[0]);
        bool ok = s && is_choice(s);
        CHECK(ok, "request %d: '%s' is not a choice", i, s ? s : "(null)");
        free(s);
        CHECK(out[i].seqs[0].finish == VLLM_FINISH_STOP, "request %d finished %d", i, out[i].seqs[0].finish);
    }
}

/* Whole-string PCRE2 match. */
static bool regex_full_match(const char *re, const char *s) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                     &err, &off, NULL);
    if (!code) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int rc = pcre2_match(code, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return rc >= 0;
}

static vllm_finish_reason one(vllm_engine *e, const char *id, const vllm_structured_outputs *so, int32_t min_tokens,
                              bool abort_first, char *err, size_t cap, seq_out *q);

/* The kinds beyond choice, where the compiler has them: compiled once to see. */
static bool kind_available(vllm_structured_kind k, const char *text) {
    vllm_engine_args a = base_args();
    vllm_engine *e;
    if (vllm_engine_create(&a, &e) != VLLM_OK) return false;
    char err[512];
    vllm_structured_outputs so = so_of(k, text);
    vllm_finish_reason fr = one(e, "probe", &so, 0, false, err, sizeof err, NULL);
    vllm_engine_free(e);
    return fr == VLLM_FINISH_STOP || fr == VLLM_FINISH_LENGTH;
}

/* Runs 8 requests, two per constraint of sos[0..3], seeded random. */
static bool run_kinds(const vllm_structured_outputs *sos, req_out *out, int32_t max_tokens) {
    vllm_engine_args a = base_args();
    req reqs[8];
    int32_t which[8];
    for (int32_t i = 0; i < 8; i++) {
        make_prompt(&reqs[i], 50 + (uint32_t)i);
        vllm_sampling_params_init(&reqs[i].sp);
        reqs[i].sp.max_tokens = max_tokens;
        reqs[i].sp.has_seed = true;
        reqs[i].sp.seed = 7 + (uint64_t)i;
        reqs[i].so = sos[i % 4];
        which[i] = i;
    }
    return run(&a, reqs, which, 8, out, NULL);
}

TEST(test_regex_and_grammar) {
    static const char *RE = "[0-9]{3}-[a-z]{2,4}( ok)?";
    static const char *RE2 = "(cat|dog)s? [A-Z][a-z]{0,5}!";
    static const char *GBNF = "root ::= \"(\" item (\",\" item){0,3} \")\"\nitem ::= [a-c]{1,3}\n";
    static const char *GBNF2 = "root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [1-9] [0-9]?\n";
    if (!kind_available(VLLM_STRUCTURED_REGEX, RE)) SKIP("the compiler has no regex yet (st-core)");
    vllm_structured_outputs sos[4] = {so_of(VLLM_STRUCTURED_REGEX, RE), so_of(VLLM_STRUCTURED_REGEX, RE2),
                                      so_of(VLLM_STRUCTURED_GRAMMAR, GBNF), so_of(VLLM_STRUCTURED_GRAMMAR, GBNF2)};
    /* the same languages as PCRE2 patterns (GBNF2: left-recursive sums) */
    static const char *const check[4] = {"[0-9]{3}-[a-z]{2,4}( ok)?", "(cat|dog)s? [A-Z][a-z]{0,5}!",
                                         "\\([a-c]{1,3}(,[a-c]{1,3}){0,3}\\)", "[1-9][0-9]?(\\+[1-9][0-9]?)*"};
    req_out out[8];
    CHECK(run_kinds(sos, out, 60));
    for (int32_t i = 0; i < 8; i++) {
        const seq_out *q = &out[i].seqs[0];
        char *s = text_of(q);
        /* GBNF2 is unbounded: it may run out of tokens, then its text is a prefix */
        bool ok = s && (q->finish == VLLM_FINISH_STOP ? regex_full_match(check[i % 4], s)
                                                       : i % 4 == 3 && q->finish == VLLM_FINISH_LENGTH);
        CHECK(ok, "request %d: finish %d, '%s' against %s", i, q->finish, s ? s : "(null)", check[i % 4]);
        free(s);
    }
}

/* "x", "yy" or "z" (strings: a number enum lets 1.000... run on) */
static bool is_enum_value(const json_t *v) {
    const char *s = json_string_value(v);
    return s && (!strcmp(s, "x") || !strcmp(s, "yy") || !strcmp(s, "z"));
}

TEST(test_json_kinds) {
    static const char *SCHEMA = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
                                "\"n\":{\"enum\":[\"x\",\"yy\",\"z\"]}},\"required\":[\"ok\",\"n\"],"
                                "\"additionalProperties\":false}";
    if (!kind_available(VLLM_STRUCTURED_JSON, SCHEMA)) SKIP("the compiler has no JSON schema translator yet (st-schema)");
    vllm_structured_outputs sos[4] = {so_of(VLLM_STRUCTURED_JSON, SCHEMA), so_of(VLLM_STRUCTURED_JSON, SCHEMA),
                                      so_of(VLLM_STRUCTURED_JSON_OBJECT, NULL), so_of(VLLM_STRUCTURED_JSON_OBJECT, NULL)};
    sos[0].whitespace_pattern = "[ ]?"; /* the tiny model loves whitespace: bounded here */
    sos[1].disable_any_whitespace = true;
    req_out out[8];
    CHECK(run_kinds(sos, out, 120));
    for (int32_t i = 0; i < 8; i++) {
        const seq_out *q = &out[i].seqs[0];
        char *s = text_of(q);
        json_error_t je;
        json_t *j = s ? json_loads(s, 0, &je) : NULL;
        bool ok;
        if (i % 4 < 2) /* bounded: must end */
            ok = q->finish == VLLM_FINISH_STOP && json_is_object(j) && json_object_size(j) == 2 &&
                 json_is_boolean(json_object_get(j, "ok")) && is_enum_value(json_object_get(j, "n")) &&
                 (i % 4 == 0 ? !strpbrk(s, "\t\n\r") && !strstr(s, "  ") : !strpbrk(s, " \t\n\r"));
        else /* any object: may run out of tokens */
            ok = q->finish == VLLM_FINISH_LENGTH || (q->finish == VLLM_FINISH_STOP && json_is_object(j));
        json_decref(j);
        CHECK(ok, "request %d: finish %d, '%s'", i, q->finish, s ? s : "(null)");
        free(s);
    }
}

static bool same_seq(const seq_out *x, const seq_out *y) {
    return x->n == y->n && x->finish == y->finish && !memcmp(x->ids, y->ids, (size_t)x->n * sizeof *x->ids) &&
           !memcmp(x->lps, y->lps, (size_t)x->n * sizeof *x->lps);
}

#define NB 32

/* 8 constrained requests among 24 unconstrained ones. */
static void make_batch(req *reqs) {
    for (int32_t i = 0; i < NB; i++) {
        req *r = &reqs[i];
        make_prompt(r, 1000 + (uint32_t)i * 13);
        vllm_sampling_params_init(&r->sp);
        r->sp.max_tokens = 24 + i % 17;
        r->so = (vllm_structured_outputs){0};
        if (i % 3 == 0) {
            r->sp.temperature = 0;
            r->sp.logprobs = 2;
        } else {
            r->sp.has_seed = true;
            r->sp.seed = 500 + (uint64_t)i;
            r->sp.temperature = 0.8f;
            r->sp.n = i % 5 == 2 ? 3 : 1;
        }
        if (i % 4 == 0) r->so = so_of(VLLM_STRUCTURED_CHOICE, CHOICES);
        else r->sp.ignore_eos = true;
    }
}

TEST(test_batch_invariance) {
    req reqs[NB];
    req_out alone[NB], together[NB], tiny[NB], spec[NB];
    make_batch(reqs);
    int32_t all[NB];
    for (int32_t i = 0; i < NB; i++) all[i] = i;
    vllm_engine_args a = base_args();
    for (int32_t i = 0; i < NB; i += 4) CHECK(run(&a, reqs, &i, 1, alone, NULL), "alone %d", i);
    CHECK(run(&a, reqs, all, NB, together, NULL));
    vllm_engine_args t = a;
    t.num_gpu_blocks_override = 17; /* 16 blocks hold one 256-token sequence */
    t.max_num_batched_tokens = 64;
    run_info ti;
    CHECK(run(&t, reqs, all, NB, tiny, &ti));
    CHECK(ti.preemptions > 0, "no preemption with a tiny pool");
    int32_t preempted_constrained = 0;
    for (int32_t i = 0; i < NB; i += 4) preempted_constrained += tiny[i].preempted > 0;
    CHECK(preempted_constrained > 0, "no constrained request was preempted");
    vllm_engine_args s = a;
    s.speculative_config = (vllm_speculative_config){.method = VLLM_SPEC_METHOD_NGRAM,
                                                     .num_speculative_tokens = 3,
                                                     .prompt_lookup_min = 1,
                                                     .prompt_lookup_max = 2};
    run_info si;
    CHECK(run(&s, reqs, all, NB, spec, &si));
    /* the same three runs with the masks filled after the forward instead
     * of beside it (the engine reads the switch when it makes its grammar
     * cache) */
    static req_out together_sync[NB], tiny_sync[NB], spec_sync[NB];
    setenv("VLLMC_DEBUG_SYNC_MASKS", "1", 1);
    bool ok = run(&a, reqs, all, NB, together_sync, NULL) && run(&t, reqs, all, NB, tiny_sync, NULL) &&
              run(&s, reqs, all, NB, spec_sync, NULL);
    unsetenv("VLLMC_DEBUG_SYNC_MASKS");
    CHECK(ok);
    for (int32_t i = 0; i < NB; i += 4) {
        for (int32_t k = 0; k < reqs[i].sp.n; k++) {
            CHECK(same_seq(&alone[i].seqs[k], &together[i].seqs[k]), "request %d seq %d: alone != batch", i, k);
            CHECK(same_seq(&alone[i].seqs[k], &tiny[i].seqs[k]), "request %d seq %d: alone != preempted", i, k);
            CHECK(same_seq(&alone[i].seqs[k], &spec[i].seqs[k]), "request %d seq %d: alone != speculative", i, k);
            CHECK(same_seq(&alone[i].seqs[k], &together_sync[i].seqs[k]) &&
                      same_seq(&alone[i].seqs[k], &tiny_sync[i].seqs[k]) &&
                      same_seq(&alone[i].seqs[k], &spec_sync[i].seqs[k]),
                  "request %d seq %d: masks filled after the forward != beside it", i, k);
        }
    }
}

TEST(test_spec_drafts_used) {
    /* the speculative run above must really have verified drafts for a
     * constrained request: a repetitive prompt and a choice that repeats it */
    static const char *CH = "[\"a a a a a a a a a a a a\", \"b b b b b b b b b b b b\"]";
    req r;
    int32_t ids[64];
    int32_t n = 0;
    char *p = "a a a a a a a a a a a a a a a a";
    int32_t *enc = NULL, m = 0;
    CHECK(tokenizer_encode(tok, p, strlen(p), true, &enc, &m) == VLLM_OK && m < 40);
    memcpy(r.prompt, enc, (size_t)m * sizeof *enc);
    r.len = m;
    free(enc);
    (void)ids;
    (void)n;
    vllm_sampling_params_init(&r.sp);
    r.sp.temperature = 0;
    r.sp.max_tokens = 40;
    r.so = so_of(VLLM_STRUCTURED_CHOICE, CH);
    vllm_engine_args a = base_args();
    a.speculative_config = (vllm_speculative_config){.method = VLLM_SPEC_METHOD_NGRAM,
                                                     .num_speculative_tokens = 4,
                                                     .prompt_lookup_min = 1,
                                                     .prompt_lookup_max = 3};
    req_out o, plain;
    run_info si;
    int32_t w = 0;
    CHECK(run(&a, &r, &w, 1, &o, &si));
    CHECK(si.multi_token > 0, "no step committed drafts");
    vllm_engine_args b = base_args();
    CHECK(run(&b, &r, &w, 1, &plain, NULL));
    CHECK(same_seq(&o.seqs[0], &plain.seqs[0]), "speculative != plain");
    char *s = text_of(&o.seqs[0]);
    bool ok = s && (!strcmp(s, "a a a a a a a a a a a a") || !strcmp(s, "b b b b b b b b b b b b"));
    CHECK(ok, "'%s'", s ? s : "(null)");
    free(s);
}

TEST(test_n_equals_seeds) {
    req reqs[4];
    req_out out[4];
    for (int32_t i = 0; i < 4; i++) {
        make_prompt(&reqs[i], 77);
        vllm_sampling_params_init(&reqs[i].sp);
        reqs[i].sp.max_tokens = 30;
        reqs[i].sp.temperature = 1.0f;
        reqs[i].sp.has_seed = true;
        reqs[i].sp.seed = 4242 + (uint64_t)(i ? i - 1 : 0);
        reqs[i].sp.logprobs = 1;
        reqs[i].so = so_of(VLLM_STRUCTURED_CHOICE, CHOICES);
    }
    reqs[0].sp.n = 3;
    vllm_engine_args a = base_args();
    int32_t all[4] = {0, 1, 2, 3};
    CHECK(run(&a, reqs, all, 4, out, NULL));
    for (int32_t k = 0; k < 3; k++) {
        CHECK(same_seq(&out[0].seqs[k], &out[1 + k].seqs[0]), "n=3 seq %d != seed %d alone", k, 4242 + k);
        char *s = text_of(&out[0].seqs[k]);
        bool ok = s && is_choice(s);
        CHECK(ok, "seq %d: '%s'", k, s ? s : "(null)");
        free(s);
    }
}

TEST(test_waiting_for_fsm) {
    setenv("VLLMC_DEBUG_COMPILE_DELAY_MS", "1000", 1);
    vllm_engine_args a = base_args();
    vllm_engine *e;
    bool made = vllm_engine_create(&a, &e) == VLLM_OK;
    CHECK(made, "%s", vllm_errmsg());
    req r;
    make_prompt(&r, 3);
    vllm_sampling_params_init(&r.sp);
    r.sp.temperature = 0;
    r.sp.max_tokens = 30;
    r.sp.ignore_eos = true;
    vllm_request_opts plain = {0}, con = {.structured_outputs = so_of(VLLM_STRUCTURED_CHOICE, CHOICES)};
    bool ok = vllm_engine_add_request(e, "con", r.prompt, r.len, &r.sp, &con) == VLLM_OK &&
              vllm_engine_add_request(e, "plain", r.prompt, r.len, &r.sp, &plain) == VLLM_OK;
    int32_t plain_tokens_before = -1, plain_tokens = 0, con_tokens = 0, steps = 0, waiting_seen = 0;
    bool con_queued = false, con_done = false;
    vllm_finish_reason con_finish = VLLM_FINISH_NONE;
    while (ok && vllm_engine_has_unfinished(e) && steps++ < 2000) {
        const vllm_step_output *so;
        ok = vllm_engine_step(e, &so) == VLLM_OK;
        if (!ok) break;
        if (!con_queued && so->stats.num_waiting >= 1) waiting_seen++;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            bool is_con = !strcmp(o->request_id, "con");
            if (is_con) {
                for (int32_t k = 0; k < o->num_events; k++)
                    if (o->events[k].type == VLLM_EVENT_QUEUED && !con_queued) {
                        con_queued = true;
                        plain_tokens_before = plain_tokens;
                    }
                con_tokens += o->num_new_tokens;
                if (o->finish_reason != VLLM_FINISH_NONE) {
                    con_done = true;
                    con_finish = o->finish_reason;
                }
            } else {
                plain_tokens += o->num_new_tokens;
            }
        }
    }
    vllm_engine_free(e);
    unsetenv("VLLMC_DEBUG_COMPILE_DELAY_MS");
    CHECK(ok, "step: %s", vllm_errmsg());
    /* the plain request finished all 30 tokens (a few ms) long before the 1 s compile */
    CHECK(plain_tokens_before == 30 && waiting_seen > 0 && con_done && con_finish == VLLM_FINISH_STOP && con_tokens > 0,
          "plain tokens before the constrained one was queued %d, waiting seen %d, done %d, finish %d, tokens %d",
          plain_tokens_before, waiting_seen, con_done, con_finish, con_tokens);
}

/* Runs one request to its end; returns its finish reason, error in err. */
static vllm_finish_reason one(vllm_engine *e, const char *id, const vllm_structured_outputs *so, int32_t min_tokens,
                              bool abort_first, char *err, size_t cap, seq_out *q) {
    req r;
    make_prompt(&r, 9);
    vllm_sampling_params_init(&r.sp);
    r.sp.temperature = 0;
    r.sp.max_tokens = 30;
    r.sp.min_tokens = min_tokens;
    vllm_request_opts o = {.structured_outputs = *so};
    err[0] = 0;
    if (vllm_engine_add_request(e, id, r.prompt, r.len, &r.sp, &o) != VLLM_OK) {
        snprintf(err, cap, "add: %s", vllm_errmsg());
        return VLLM_FINISH_NONE;
    }
    if (abort_first) vllm_engine_abort_request(e, id);
    vllm_finish_reason fr = VLLM_FINISH_NONE;
    if (q) memset(q, 0, sizeof *q);
    while (vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so2;
        if (vllm_engine_step(e, &so2) != VLLM_OK) {
            snprintf(err, cap, "step: %s", vllm_errmsg());
            return VLLM_FINISH_NONE;
        }
        for (int32_t j = 0; j < so2->num_outputs; j++) {
            const vllm_seq_output *x = &so2->outputs[j];
            for (int32_t t = 0; q && t < x->num_new_tokens && q->n < MAX_OUT; t++) q->ids[q->n++] = x->new_token_ids[t];
            if (x->finish_reason != VLLM_FINISH_NONE) {
                fr = x->finish_reason;
                if (q) q->finish = fr, q->stop_token_id = x->stop_token_id;
                if (x->error) snprintf(err, cap, "%s", x->error);
            }
        }
    }
    return fr;
}

TEST(test_compile_error) {
    vllm_engine_args a = base_args();
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    char err[512];
    vllm_structured_outputs bad = so_of(VLLM_STRUCTURED_CHOICE, "[\"a\", 3"); /* not JSON */
    vllm_finish_reason fr = one(e, "bad", &bad, 0, false, err, sizeof err, NULL);
    /* ERROR once the compile fails, or refused at add if it failed that fast */
    bool first = (fr == VLLM_FINISH_ERROR && err[0]) ||
                 (fr == VLLM_FINISH_NONE && strstr(err, "add: request 'bad': "));
    char first_err[512];
    snprintf(first_err, sizeof first_err, "%s", err);
    fr = one(e, "bad2", &bad, 0, false, err, sizeof err, NULL); /* known to fail: refused at add */
    bool second = fr == VLLM_FINISH_NONE && strstr(err, "add: request 'bad2': ");
    char second_err[512];
    snprintf(second_err, sizeof second_err, "%s", err);
    vllm_structured_outputs empty = so_of(VLLM_STRUCTURED_REGEX, "");
    fr = one(e, "empty", &empty, 0, false, err, sizeof err, NULL);
    bool third = fr == VLLM_FINISH_NONE && strstr(err, "empty");
    char third_err[512];
    snprintf(third_err, sizeof third_err, "%s", err);
    /* the engine is fine afterwards */
    vllm_structured_outputs good = so_of(VLLM_STRUCTURED_CHOICE, CHOICES);
    fr = one(e, "good", &good, 0, false, err, sizeof err, NULL);
    vllm_engine_free(e);
    CHECK(first && second && third && fr == VLLM_FINISH_STOP, "first '%s', second '%s', third '%s', good %d '%s'",
          first_err, second_err, third_err, fr, err);
}

TEST(test_compile_timeout_and_abort) {
    setenv("VLLMC_DEBUG_COMPILE_DELAY_MS", "1500", 1);
    vllm_engine_args a = base_args();
    a.structured_outputs_compile_timeout = 0.05;
    vllm_engine *e;
    bool made = vllm_engine_create(&a, &e) == VLLM_OK;
    CHECK(made, "%s", vllm_errmsg());
    char err[512], err2[512];
    vllm_structured_outputs s1 = so_of(VLLM_STRUCTURED_CHOICE, "[\"x1\"]"), s2 = so_of(VLLM_STRUCTURED_CHOICE, "[\"x2\"]");
    double t0 = vllm_monotonic_time();
    vllm_finish_reason fr = one(e, "slow", &s1, 0, false, err, sizeof err, NULL);
    double dt = vllm_monotonic_time() - t0;
    vllm_finish_reason fa = one(e, "gone", &s2, 0, true, err2, sizeof err2, NULL);
    vllm_engine_free(e);
    unsetenv("VLLMC_DEBUG_COMPILE_DELAY_MS");
    CHECK(fr == VLLM_FINISH_ERROR && strstr(err, "did not compile within 0.05 s") && dt < 1.0,
          "finish %d after %.3f s: '%s'", fr, dt, err);
    CHECK(fa == VLLM_FINISH_ABORT, "abort while waiting: finish %d '%s'", fa, err2);
}

TEST(test_min_tokens_past_the_end) {
    vllm_engine_args a = base_args();
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    char err[512];
    vllm_structured_outputs s = so_of(VLLM_STRUCTURED_CHOICE, "[\"yes\"]");
    seq_out q;
    vllm_finish_reason fr = one(e, "m", &s, 10, false, err, sizeof err, &q);
    vllm_engine_free(e);
    char *t = text_of(&q);
    bool ok = fr == VLLM_FINISH_STOP && t && !strcmp(t, "yes");
    CHECK(ok, "finish %d '%s' text '%s'", fr, err, t ? t : "(null)");
    free(t);
}

int main(void) {
    if (tokenizer_load(MODEL, &tok) != VLLM_OK) {
        fprintf(stderr, "%s\n", vllm_errmsg());
        return 1;
    }
    RUN(test_choice);
    RUN(test_regex_and_grammar);
    RUN(test_json_kinds);
    RUN(test_batch_invariance);
    RUN(test_spec_drafts_used);
    RUN(test_n_equals_seeds);
    RUN(test_waiting_for_fsm);
    RUN(test_compile_error);
    RUN(test_compile_timeout_and_abort);
    RUN(test_min_tokens_past_the_end);
    tokenizer_free(tok);
    return harness_done();
}

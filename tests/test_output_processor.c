/*
 * test_output_processor.c - the output processor (engine/output_processor.h)
 * on hand-made engine steps and the stories260K tokenizer, no model.
 *
 * Every expected value is worked out by hand from the rules (vLLM 0.11's
 * output_processor.py / detokenizer.py / logprobs.py, and the one
 * documented difference: tokens of a step after a stop string are
 * dropped). The tokenizer's pieces used: "▁was" 286, "▁a" 261, "▁the" 265,
 * "▁to" 267, "▁and" 269, "▁Lily" 317, "." 426, "<s>" 1, "</s>" 2 (EOS);
 * "▁" decodes to a space, and the prompt "Once upon a time" (1 403 407 261
 * 378) has already used up the decoder's one leading-space strip, so "▁was"
 * after it reads " was". decode([id]) alone strips it: "▁a" alone is "a".
 */
/* checks: 11 */
#include <stdlib.h>
#include <string.h>

#include "engine/output_processor.h"
#include "harness.h"

enum { WAS = 286, A = 261, THE = 265, TO = 267, AND = 269, LILY = 317, DOT = 426, BOS = 1, EOS = 2 };

static const int32_t prompt[] = {1, 403, 407, 261, 378};
static tokenizer *tok;

/* What the caller of the processor would accumulate for one sequence. */
typedef struct seq_rec {
    char text[512];
    size_t len;
    int32_t ids[64];
    int32_t num_ids;
    int32_t num_lps;                 /* logprob positions seen */
    int32_t num_deltas, num_finishes;
    vllm_finish_reason finish;
    char stop_str[32];
    int32_t stop_token_id;
} seq_rec;

typedef struct run {
    output_processor *op;
    seq_rec seq[4];
    int32_t num_stops, num_done;
    int32_t stop_index;              /* the last stops entry's sequence */
} run;

static void run_init(run *r) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 4; i++) r->seq[i].stop_token_id = -2;
    if (output_processor_create(tok, &r->op) != VLLM_OK) r->op = NULL;
}

static void collect(run *r, const output_result *res) {
    for (int32_t i = 0; i < res->num_deltas; i++) {
        const output_delta *d = &res->deltas[i];
        seq_rec *s = &r->seq[d->index];
        s->num_deltas++;
        if (s->len + d->text_len < sizeof s->text) {
            memcpy(s->text + s->len, d->text, d->text_len);
            s->len += d->text_len;
            s->text[s->len] = 0;
        }
        for (int32_t t = 0; t < d->num_tokens && s->num_ids < 64; t++) s->ids[s->num_ids++] = d->token_ids[t];
        if (d->logprobs) s->num_lps += d->num_tokens;
        if (d->finish_reason != VLLM_FINISH_NONE) {
            s->num_finishes++;
            s->finish = d->finish_reason;
            s->stop_token_id = d->stop_token_id;
            snprintf(s->stop_str, sizeof s->stop_str, "%s", d->stop_str ? d->stop_str : "");
        }
    }
    r->num_stops += res->num_stops;
    if (res->num_stops) r->stop_index = res->stops[res->num_stops - 1].index;
    r->num_done += res->num_done;
}

/* One engine output of request "r". */
static vllm_seq_output out(int32_t index, const int32_t *ids, int32_t n, vllm_finish_reason fr, int32_t stop_id) {
    return (vllm_seq_output){.request_id = "r", .index = index, .num_new_tokens = n, .new_token_ids = ids,
                             .finish_reason = fr, .stop_token_id = stop_id, .num_prompt_tokens = 5};
}

static vllm_status step(run *r, vllm_seq_output *outs, int32_t n) {
    vllm_step_output so = {.num_outputs = n, .outputs = outs};
    const output_result *res;
    vllm_status rc = output_processor_process(r->op, &so, &res);
    if (rc == VLLM_OK) collect(r, res);
    return rc;
}

static vllm_status add(run *r, const vllm_sampling_params *sp, const char *const *stop, int32_t num_stop,
                       bool include_stop, bool skip_special) {
    output_request q = {.request_id = "r", .prompt_ids = prompt, .num_prompt_ids = 5, .sp = sp, .stop = stop,
                        .num_stop = num_stop, .include_stop_str_in_output = include_stop,
                        .skip_special_tokens = skip_special, .detokenize = true};
    return output_processor_add_request(r->op, &q);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int32_t)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

static bool ids_are(const seq_rec *s, const int32_t *want, int32_t n) {
    return s->num_ids == n && !memcmp(s->ids, want, (size_t)n * sizeof *want);
}

TEST(test_multi_token_steps) {
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    CHECK(r.op && add(&r, &sp, NULL, 0, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output o1 = out(0, IDS(WAS, A, LILY), VLLM_FINISH_NONE, -1);
    CHECK(step(&r, &o1, 1) == VLLM_OK);
    CHECK(!strcmp(r.seq[0].text, " was a Lily") && r.seq[0].num_deltas == 1, "text '%s'", r.seq[0].text);
    vllm_seq_output o2 = out(0, IDS(TO, DOT), VLLM_FINISH_LENGTH, -1);
    CHECK(step(&r, &o2, 1) == VLLM_OK);
    CHECK(!strcmp(r.seq[0].text, " was a Lily to.") && ids_are(&r.seq[0], IDS(WAS, A, LILY, TO, DOT)), "text '%s'",
          r.seq[0].text);
    CHECK(r.seq[0].finish == VLLM_FINISH_LENGTH && r.seq[0].stop_token_id == -1 && !r.seq[0].stop_str[0], "finish");
    CHECK(r.num_done == 1 && r.num_stops == 0 && output_processor_num_requests(r.op) == 0, "done %d", r.num_done);
    /* outputs of a request no longer known are ignored */
    CHECK(step(&r, &o2, 1) == VLLM_OK && r.seq[0].num_deltas == 2, "%d deltas", r.seq[0].num_deltas);
    output_processor_free(r.op);
}

TEST(test_stop_string_mid_step) {
    /* one step commits " was the to and"; "the" completes with the 2nd
     * token: the output is " was " and the ids end at "▁the" (to, and
     * dropped, their logprobs too); the engine still runs it: stop it */
    const char *stops[] = {"zzz", "the"};
    for (int include = 0; include < 2; include++) {
        run r;
        run_init(&r);
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        sp.logprobs = 0;
        CHECK(r.op && add(&r, &sp, stops, 2, include, true) == VLLM_OK, "%s", vllm_errmsg());
        vllm_token_logprobs lps[4];
        const int32_t ids[] = {WAS, THE, TO, AND};
        for (int i = 0; i < 4; i++) lps[i] = (vllm_token_logprobs){.token_id = ids[i], .logprob = -1, .rank = 1};
        vllm_seq_output o = out(0, ids, 4, VLLM_FINISH_NONE, -1);
        o.new_logprobs = lps;
        CHECK(step(&r, &o, 1) == VLLM_OK);
        const char *want = include ? " was the" : " was ";
        CHECK(!strcmp(r.seq[0].text, want), "include %d: text '%s', want '%s'", include, r.seq[0].text, want);
        CHECK(ids_are(&r.seq[0], IDS(WAS, THE)) && r.seq[0].num_lps == 2, "ids %d, logprobs %d", r.seq[0].num_ids,
              r.seq[0].num_lps);
        CHECK(r.seq[0].finish == VLLM_FINISH_STOP && !strcmp(r.seq[0].stop_str, "the") &&
                  r.seq[0].stop_token_id == -1, "finish %d '%s'", r.seq[0].finish, r.seq[0].stop_str);
        CHECK(r.num_stops == 1 && r.stop_index == 0 && r.num_done == 0, "stops %d done %d", r.num_stops, r.num_done);
        /* the engine's next step still made a token before it heard of the stop: no delta, then done */
        vllm_seq_output late = out(0, IDS(DOT), VLLM_FINISH_STOP, -1);
        CHECK(step(&r, &late, 1) == VLLM_OK);
        CHECK(r.seq[0].num_deltas == 1 && r.seq[0].num_ids == 2 && r.num_done == 1, "deltas %d ids %d done %d",
              r.seq[0].num_deltas, r.seq[0].num_ids, r.num_done);
        output_processor_free(r.op);
    }
}

TEST(test_stop_string_and_stop_token_in_one_step) {
    /* the engine stopped on the stop token ".", but "the" ends the text
     * first: stop_reason is the string, "." is dropped, nothing to stop */
    const char *stops[] = {"the"};
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.stop_token_ids[0] = DOT;
    sp.num_stop_token_ids = 1;
    CHECK(r.op && add(&r, &sp, stops, 1, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output o = out(0, IDS(WAS, THE, DOT), VLLM_FINISH_STOP, DOT);
    CHECK(step(&r, &o, 1) == VLLM_OK);
    CHECK(!strcmp(r.seq[0].text, " was ") && ids_are(&r.seq[0], IDS(WAS, THE)), "text '%s'", r.seq[0].text);
    CHECK(r.seq[0].finish == VLLM_FINISH_STOP && !strcmp(r.seq[0].stop_str, "the") && r.seq[0].stop_token_id == -1);
    CHECK(r.num_stops == 0 && r.num_done == 1, "stops %d done %d", r.num_stops, r.num_done);
    output_processor_free(r.op);
}

TEST(test_stop_token_id) {
    /* "." is a stop token: it stays in the ids, its text only with
     * include_stop_str_in_output; stop_reason is its id */
    for (int include = 0; include < 2; include++) {
        run r;
        run_init(&r);
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        sp.stop_token_ids[0] = DOT;
        sp.num_stop_token_ids = 1;
        CHECK(r.op && add(&r, &sp, NULL, 0, include, true) == VLLM_OK, "%s", vllm_errmsg());
        vllm_seq_output o1 = out(0, IDS(WAS, A), VLLM_FINISH_NONE, -1);
        vllm_seq_output o2 = out(0, IDS(LILY, DOT), VLLM_FINISH_STOP, DOT);
        CHECK(step(&r, &o1, 1) == VLLM_OK && step(&r, &o2, 1) == VLLM_OK);
        const char *want = include ? " was a Lily." : " was a Lily";
        CHECK(!strcmp(r.seq[0].text, want), "include %d: text '%s', want '%s'", include, r.seq[0].text, want);
        CHECK(ids_are(&r.seq[0], IDS(WAS, A, LILY, DOT)), "%d ids", r.seq[0].num_ids);
        CHECK(r.seq[0].finish == VLLM_FINISH_STOP && r.seq[0].stop_token_id == DOT && !r.seq[0].stop_str[0],
              "finish %d stop %d", r.seq[0].finish, r.seq[0].stop_token_id);
        CHECK(r.num_done == 1 && r.num_stops == 0);
        output_processor_free(r.op);
    }
}

TEST(test_eos) {
    /* the tokenizer's EOS: id kept, no text, stop_reason none; a second EOS
     * id (generation_config.json's eos_token_id list has <s>) reports its id,
     * as vLLM puts those in stop_token_ids */
    struct {
        int32_t id;
        bool include, skip;
        const char *text;
        int32_t stop_reason;
    } cases[] = {
        {EOS, false, true, " was", -1},
        {EOS, true, true, " was", -1},       /* its text is there, but skip_special_tokens drops it */
        {EOS, true, false, " was</s>", -1},  /* kept special tokens: its text */
        {EOS, false, false, " was", -1},
        {BOS, false, true, " was", BOS},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        run r;
        run_init(&r);
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        CHECK(r.op && add(&r, &sp, NULL, 0, cases[c].include, cases[c].skip) == VLLM_OK, "%s", vllm_errmsg());
        vllm_seq_output o = out(0, (int32_t[]){WAS, cases[c].id}, 2, VLLM_FINISH_STOP, cases[c].id);
        CHECK(step(&r, &o, 1) == VLLM_OK);
        CHECK(!strcmp(r.seq[0].text, cases[c].text), "case %zu: text '%s', want '%s'", c, r.seq[0].text,
              cases[c].text);
        CHECK(ids_are(&r.seq[0], (int32_t[]){WAS, cases[c].id}, 2), "case %zu: ids", c);
        CHECK(r.seq[0].finish == VLLM_FINISH_STOP && r.seq[0].stop_token_id == cases[c].stop_reason,
              "case %zu: stop_reason %d", c, r.seq[0].stop_token_id);
        output_processor_free(r.op);
    }
    /* ignore_eos: the engine only stops on EOS when it is a stop_token_ids entry; then it reports it */
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.ignore_eos = true;
    sp.stop_token_ids[0] = EOS;
    sp.num_stop_token_ids = 1;
    CHECK(r.op && add(&r, &sp, NULL, 0, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output o = out(0, IDS(WAS, EOS), VLLM_FINISH_STOP, EOS);
    CHECK(step(&r, &o, 1) == VLLM_OK && r.seq[0].stop_token_id == EOS, "stop_reason %d", r.seq[0].stop_token_id);
    output_processor_free(r.op);
}

TEST(test_min_tokens) {
    /* min_tokens 3, stop "was": the first "was" (token 1) cannot stop; the
     * one in token 4 does. One token per step or all four in one step: the
     * same output. */
    const char *stops[] = {"was"};
    for (int one_step = 0; one_step < 2; one_step++) {
        run r;
        run_init(&r);
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        sp.min_tokens = 3;
        CHECK(r.op && add(&r, &sp, stops, 1, false, true) == VLLM_OK, "%s", vllm_errmsg());
        const int32_t ids[] = {WAS, A, THE, WAS, TO};
        if (one_step) {
            vllm_seq_output o = out(0, ids, 5, VLLM_FINISH_NONE, -1);
            CHECK(step(&r, &o, 1) == VLLM_OK);
        } else {
            for (int i = 0; i < 5 && !r.seq[0].num_finishes; i++) {
                vllm_seq_output o = out(0, ids + i, 1, VLLM_FINISH_NONE, -1);
                CHECK(step(&r, &o, 1) == VLLM_OK);
            }
        }
        CHECK(!strcmp(r.seq[0].text, " was a the "), "one step %d: text '%s'", one_step, r.seq[0].text);
        CHECK(ids_are(&r.seq[0], IDS(WAS, A, THE, WAS)) && r.seq[0].finish == VLLM_FINISH_STOP &&
                  !strcmp(r.seq[0].stop_str, "was"), "one step %d: %d ids", one_step, r.seq[0].num_ids);
        CHECK(r.num_stops == 1, "stops %d", r.num_stops);
        output_processor_free(r.op);
    }
}

TEST(test_n2) {
    /* two sequences of one request: deltas by index; the request is done
     * only when the engine has finished both */
    const char *stops[] = {"Lily"};
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.n = 2;
    CHECK(r.op && add(&r, &sp, stops, 1, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output s1[] = {out(0, IDS(WAS, LILY), VLLM_FINISH_NONE, -1), out(1, IDS(TO), VLLM_FINISH_NONE, -1)};
    CHECK(step(&r, s1, 2) == VLLM_OK);
    CHECK(!strcmp(r.seq[0].text, " was ") && r.seq[0].finish == VLLM_FINISH_STOP && r.num_stops == 1 &&
              r.stop_index == 0, "seq 0 '%s'", r.seq[0].text);
    CHECK(!strcmp(r.seq[1].text, " to") && r.seq[1].num_finishes == 0, "seq 1 '%s'", r.seq[1].text);
    vllm_seq_output s2[] = {out(0, NULL, 0, VLLM_FINISH_STOP, -1), out(1, IDS(AND), VLLM_FINISH_NONE, -1)};
    CHECK(step(&r, s2, 2) == VLLM_OK && r.num_done == 0 && r.seq[0].num_deltas == 1, "done %d", r.num_done);
    vllm_seq_output s3[] = {out(1, IDS(A), VLLM_FINISH_LENGTH, -1)};
    CHECK(step(&r, s3, 1) == VLLM_OK);
    CHECK(!strcmp(r.seq[1].text, " to and a") && ids_are(&r.seq[1], IDS(TO, AND, A)) &&
              r.seq[1].finish == VLLM_FINISH_LENGTH, "seq 1 '%s'", r.seq[1].text);
    CHECK(r.num_done == 1 && output_processor_num_requests(r.op) == 0, "done %d", r.num_done);
    output_processor_free(r.op);
}

TEST(test_logprobs_order) {
    /* logprobs 2. Token 1: "▁a" sampled at rank 3, not in the top 2 -> [a, the, was] (N + 1).
     * Token 2: "▁the" sampled, rank 1 -> [the, was] (N): the sampled entry
     * first, the top-N without it after, ranks by position. Texts are
     * decode([id]) alone: "a", "the", "was". */
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.logprobs = 2;
    CHECK(r.op && add(&r, &sp, NULL, 0, false, true) == VLLM_OK, "%s", vllm_errmsg());
    const int32_t top1[] = {THE, WAS}, top2[] = {THE, WAS};
    const float lp1[] = {-0.5f, -1.0f}, lp2[] = {-0.25f, -2.0f};
    vllm_token_logprobs lps[] = {
        {.token_id = A, .logprob = -3.0f, .rank = 3, .num_top = 2, .top_ids = top1, .top_logprobs = lp1},
        {.token_id = THE, .logprob = -0.25f, .rank = 1, .num_top = 2, .top_ids = top2, .top_logprobs = lp2},
    };
    vllm_seq_output o = out(0, IDS(A, THE), VLLM_FINISH_NONE, -1);
    o.new_logprobs = lps;
    vllm_step_output so = {.num_outputs = 1, .outputs = &o};
    const output_result *res;
    CHECK(output_processor_process(r.op, &so, &res) == VLLM_OK && res->num_deltas == 1);
    const output_delta *d = &res->deltas[0];
    CHECK(d->logprobs && d->num_tokens == 2, "no logprobs");
    const output_token_logprobs *p = &d->logprobs[0];
    CHECK(p->num_entries == 3, "%d entries", p->num_entries);
    CHECK(p->entries[0].token_id == A && p->entries[0].rank == 3 && p->entries[0].logprob == -3.0f &&
              !strcmp(p->entries[0].text, "a"), "entry 0: %d rank %d '%s'", p->entries[0].token_id,
          p->entries[0].rank, p->entries[0].text);
    CHECK(p->entries[1].token_id == THE && p->entries[1].rank == 1 && p->entries[1].logprob == -0.5f &&
              !strcmp(p->entries[1].text, "the"), "entry 1");
    CHECK(p->entries[2].token_id == WAS && p->entries[2].rank == 2 && !strcmp(p->entries[2].text, "was") &&
              p->entries[2].text_len == 3, "entry 2");
    p = &d->logprobs[1];
    CHECK(p->num_entries == 2 && p->entries[0].token_id == THE && p->entries[0].rank == 1 &&
              p->entries[1].token_id == WAS && p->entries[1].rank == 2 && p->entries[1].logprob == -2.0f,
          "token 2: %d entries", p->num_entries);
    CHECK(!strcmp(output_processor_token_text(r.op, DOT, NULL), "."), "token text");
    output_processor_free(r.op);
}

TEST(test_abort) {
    /* stop "the end": " was the" holds "the" back (it may start the stop
     * string); an abort releases it, with finish abort and no stop_reason */
    const char *stops[] = {"the end"};
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    CHECK(r.op && add(&r, &sp, stops, 1, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output o1 = out(0, IDS(WAS, THE), VLLM_FINISH_NONE, -1);
    CHECK(step(&r, &o1, 1) == VLLM_OK && !strcmp(r.seq[0].text, " was "), "held: '%s'", r.seq[0].text);
    vllm_seq_output o2 = out(0, NULL, 0, VLLM_FINISH_ABORT, -1);
    CHECK(step(&r, &o2, 1) == VLLM_OK);
    CHECK(!strcmp(r.seq[0].text, " was the") && r.seq[0].finish == VLLM_FINISH_ABORT &&
              r.seq[0].stop_token_id == -1 && !r.seq[0].stop_str[0] && r.num_done == 1, "'%s'", r.seq[0].text);
    output_processor_free(r.op);
    /* abort_all: every sequence without a final delta gets an ABORT one */
    run_init(&r);
    sp.n = 2;
    CHECK(r.op && add(&r, &sp, NULL, 0, false, true) == VLLM_OK, "%s", vllm_errmsg());
    vllm_seq_output o3 = out(1, IDS(WAS), VLLM_FINISH_LENGTH, -1);
    CHECK(step(&r, &o3, 1) == VLLM_OK);
    const output_result *res;
    CHECK(output_processor_abort_all(r.op, &res) == VLLM_OK);
    collect(&r, res);
    CHECK(res->num_deltas == 1 && res->deltas[0].index == 0 && res->deltas[0].output_index == -1 &&
              r.seq[0].finish == VLLM_FINISH_ABORT && r.seq[1].finish == VLLM_FINISH_LENGTH && r.num_done == 1,
          "%d deltas", res->num_deltas);
    CHECK(output_processor_num_requests(r.op) == 0);
    output_processor_free(r.op);
}

TEST(test_detokenize_off_and_bad_requests) {
    run r;
    run_init(&r);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.logprobs = 0;
    const char *stops[] = {"x"}, *empty[] = {""};
    output_request q = {.request_id = "r", .prompt_ids = prompt, .num_prompt_ids = 5, .sp = &sp,
                        .skip_special_tokens = true, .detokenize = false};
    q.stop = stops;
    q.num_stop = 1;
    CHECK(r.op && output_processor_add_request(r.op, &q) == VLLM_ERR_INVALID, "stop strings without text");
    q.stop = NULL;
    q.num_stop = 0;
    CHECK(output_processor_add_request(r.op, &q) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(output_processor_add_request(r.op, &q) == VLLM_ERR_INVALID, "duplicate id accepted");
    vllm_token_logprobs lp = {.token_id = WAS, .logprob = -1, .rank = 1};
    vllm_seq_output o = out(0, IDS(WAS), VLLM_FINISH_LENGTH, -1);
    o.new_logprobs = &lp;
    vllm_step_output so = {.num_outputs = 1, .outputs = &o};
    const output_result *res;
    CHECK(output_processor_process(r.op, &so, &res) == VLLM_OK && res->num_deltas == 1);
    CHECK(res->deltas[0].text_len == 0 && !strcmp(res->deltas[0].text, "") && res->deltas[0].num_tokens == 1 &&
              res->deltas[0].logprobs[0].entries[0].text == NULL, "detokenize off");
    q.detokenize = true;
    q.stop = empty;
    q.num_stop = 1;
    CHECK(output_processor_add_request(r.op, &q) == VLLM_ERR_INVALID, "empty stop string accepted");
    CHECK(output_processor_num_requests(r.op) == 0);
    output_processor_free(r.op);
}

TEST(test_finish_reason_names) {
    CHECK(!strcmp(vllm_finish_reason_str(VLLM_FINISH_STOP), "stop") &&
          !strcmp(vllm_finish_reason_str(VLLM_FINISH_LENGTH), "length") &&
          !strcmp(vllm_finish_reason_str(VLLM_FINISH_ABORT), "abort") &&
          vllm_finish_reason_str(VLLM_FINISH_NONE) == NULL);
}

int main(void) {
    if (tokenizer_load("models/stories260K", &tok) != VLLM_OK) {
        printf("FAIL test_output_processor: %s\n", vllm_errmsg());
        return 1;
    }
    RUN(test_multi_token_steps);
    RUN(test_stop_string_mid_step);
    RUN(test_stop_string_and_stop_token_in_one_step);
    RUN(test_stop_token_id);
    RUN(test_eos);
    RUN(test_min_tokens);
    RUN(test_n2);
    RUN(test_logprobs_order);
    RUN(test_abort);
    RUN(test_detokenize_off_and_bad_requests);
    RUN(test_finish_reason_names);
    tokenizer_free(tok);
    return harness_done();
}

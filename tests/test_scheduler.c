/* test_scheduler.c - the scheduler's rules, one scenario at a time:
 * chunked prefill within the token budget, long_prefill_token_threshold,
 * running before waiting, preemption victims (FCFS: last; priority: max
 * (priority, arrival)), priority admission order, n > 1 forks with shared
 * blocks and copy-on-write, prefix-cache hits and salts, aborts, stop rules,
 * batches in flight (pipeline parallel: in_flight sequences skipped and never
 * preempted, the batch cap, updates of an earlier schedule's copy). */
/* checks: 11 */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "harness.h"

#define BS 4

typedef struct fixture {
    kv_cache_manager *kv;
    scheduler *s;
    request *reqs[32];
    int32_t num_reqs;
    double now;
} fixture;

static bool fx_init(fixture *f, int32_t num_blocks, bool caching, int32_t max_seqs,
                    int32_t budget, int32_t threshold, vllm_scheduling_policy policy) {
    memset(f, 0, sizeof *f);
    CHECK_OR(false, kv_cache_manager_create(num_blocks, BS, caching, &f->kv) == VLLM_OK);
    scheduler_config c = {.max_num_seqs = max_seqs,
                          .max_num_batched_tokens = budget,
                          .long_prefill_token_threshold = threshold,
                          .policy = policy,
                          .max_model_len = 64,
                          .eos_ids = {2},
                          .num_eos = 1};
    CHECK_OR(false, scheduler_create(&c, f->kv, &f->s) == VLLM_OK, "%s", vllm_errmsg());
    return true;
}

static void fx_done(fixture *f) {
    for (int32_t i = 0; i < f->num_reqs; i++) request_free(f->reqs[i]);
    scheduler_free(f->s);
    kv_cache_manager_free(f->kv);
}

/* Adds a request whose prompt is tokens base, base+1, ... (mod 100, never EOS 2). */
static request *fx_add(fixture *f, int32_t prompt_len, int32_t base, int32_t max_tokens, int32_t n,
                       int32_t priority, const char *salt) {
    int32_t prompt[64];
    for (int32_t i = 0; i < prompt_len; i++) prompt[i] = 10 + (base + i) % 90;
    vllm_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt_logprobs = -1;
    sp.n = n;
    sp.max_tokens = max_tokens;
    sp.has_seed = true;
    vllm_request_opts o = {.priority = priority, .arrival_time = f->now, .cache_salt = salt};
    char id[16];
    snprintf(id, sizeof id, "r%d", f->num_reqs);
    request *r;
    if (request_create(id, prompt, prompt_len, &sp, &o, 64, BS, 1, 0, (uint64_t)f->num_reqs, &r) != VLLM_OK)
        return NULL;
    f->reqs[f->num_reqs++] = r;
    scheduler_add_request(f->s, r, f->now);
    return r;
}

/* One step: every sample is token tok. */
static const scheduler_output *fx_step(fixture *f, int32_t tok) {
    f->now += 1;
    const scheduler_output *o = scheduler_schedule(f->s, f->now);
    int32_t sampled[64], counts[64];
    for (int32_t i = 0; i < 64; i++) sampled[i] = tok;
    for (int32_t i = 0; i < o->num_seqs; i++) counts[i] = o->seqs[i].num_out;
    CHECK_OR(o, scheduler_update(f->s, sampled, counts, f->now) == VLLM_OK);
    for (seq *q = scheduler_take_news(f->s), *next; q; q = next) {
        next = q->news_next;
        seq_clear_news(q);
    }
    return o;
}

static const scheduled_seq *entry_of(const scheduler_output *o, const seq *q) {
    for (int32_t i = 0; i < o->num_seqs; i++)
        if (o->seqs[i].seq == q) return &o->seqs[i];
    return NULL;
}

TEST(test_chunked_prefill_within_budget) {
    fixture f;
    if (!fx_init(&f, 64, false, 4, 16, 0, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 40, 0, 3, 1, 0, NULL);
    const scheduler_output *o = fx_step(&f, 50);
    CHECK(o->num_seqs == 1 && o->seqs[0].num_new_tokens == 16 && o->seqs[0].num_scored == 0);
    CHECK(o->num_out == 0 && a->seqs[0].num_tokens == 40, "a partial prefill samples nothing");
    o = fx_step(&f, 50);
    CHECK(o->seqs[0].num_computed == 16 && o->seqs[0].num_new_tokens == 16);
    o = fx_step(&f, 50);
    CHECK(o->seqs[0].num_new_tokens == 8 && o->seqs[0].num_scored == 1 && o->seqs[0].num_samples == 1);
    CHECK(a->seqs[0].num_tokens == 41 && a->seqs[0].num_computed_tokens == 40);
    o = fx_step(&f, 51);
    CHECK(o->num_tokens == 1 && a->seqs[0].num_tokens == 42, "then one token per decode step");
    fx_step(&f, 52);
    CHECK(a->seqs[0].status == SEQ_STATUS_FINISHED && a->seqs[0].finish_reason == VLLM_FINISH_LENGTH);
    CHECK(scheduler_pop_finished(f.s) == a && block_pool_num_free(kv_cache_manager_pool(f.kv)) == 64);
    fx_done(&f);
}

TEST(test_threshold_and_running_first) {
    fixture f;
    if (!fx_init(&f, 64, false, 4, 10, 7, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 20, 0, 10, 1, 0, NULL);
    request *b = fx_add(&f, 20, 30, 10, 1, 0, NULL);
    const scheduler_output *o = fx_step(&f, 50);
    /* a: 7 (threshold), b: the 3 left in the budget */
    CHECK(o->num_seqs == 2 && entry_of(o, &a->seqs[0])->num_new_tokens == 7 &&
          entry_of(o, &b->seqs[0])->num_new_tokens == 3, "got %d seqs", o->num_seqs);
    o = fx_step(&f, 50);
    CHECK(o->seqs[0].seq == &a->seqs[0] && o->seqs[0].num_new_tokens == 7);
    CHECK(o->seqs[1].seq == &b->seqs[0] && o->seqs[1].num_new_tokens == 3);
    /* a finishes its prompt (6 left) before b gets more */
    o = fx_step(&f, 50);
    CHECK(entry_of(o, &a->seqs[0])->num_new_tokens == 6 && entry_of(o, &a->seqs[0])->num_samples == 1);
    CHECK(entry_of(o, &b->seqs[0])->num_new_tokens == 4);
    /* a decodes 1 first, a newcomer c waits behind running b */
    request *c = fx_add(&f, 12, 60, 4, 1, 0, NULL);
    o = fx_step(&f, 50);
    CHECK(o->seqs[0].seq == &a->seqs[0] && o->seqs[0].num_new_tokens == 1);
    CHECK(o->seqs[1].seq == &b->seqs[0] && o->seqs[1].num_new_tokens == 7);
    CHECK(o->seqs[2].seq == &c->seqs[0] && o->seqs[2].num_new_tokens == 2, "c gets the rest");
    fx_done(&f);
}

TEST(test_fcfs_preempts_last_running) {
    fixture f;
    /* 6 blocks of 4: a and b each take 3 with 12-token prompts */
    if (!fx_init(&f, 6, true, 4, 64, 0, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 11, 0, 3, 1, 0, NULL);
    request *b = fx_add(&f, 11, 40, 8, 1, 0, NULL);
    const scheduler_output *o = fx_step(&f, 50); /* both prefill: 3 blocks each, pool full */
    CHECK(o->num_seqs == 2 && block_pool_num_free(kv_cache_manager_pool(f.kv)) == 0);
    request *c = fx_add(&f, 3, 80, 2, 1, 0, NULL);
    /* a decodes token 12 into its 3rd block; the next token needs a 4th: b (last) goes */
    o = fx_step(&f, 51);
    CHECK(o->num_preemptions == 0 && o->num_seqs == 2, "12 tokens fit in 3 blocks");
    o = fx_step(&f, 52);
    CHECK(o->num_preemptions == 1, "got %d", o->num_preemptions);
    CHECK(b->seqs[0].status == SEQ_STATUS_PREEMPTED && b->seqs[0].num_blocks == 0);
    CHECK(entry_of(o, &b->seqs[0]) == NULL && entry_of(o, &c->seqs[0]) == NULL,
          "no waiting admission in a step that preempted");
    const list_node *w = scheduler_waiting(f.s);
    CHECK(list_entry(w->next, seq, node) == &b->seqs[0], "preempted goes to the waiting front");
    CHECK(list_entry(w->next->next, seq, node) == &c->seqs[0]);
    CHECK(entry_of(o, &a->seqs[0]) && entry_of(o, &a->seqs[0])->num_computed == 12);
    /* b's freed blocks stay cached, its last block first in line for eviction
     * (a took it); readmitted, b hits the other two */
    CHECK(a->seqs[0].status == SEQ_STATUS_FINISHED, "a wrote its 3rd and last token");
    o = fx_step(&f, 54);
    const scheduled_seq *e = entry_of(o, &b->seqs[0]);
    CHECK(e && e->num_computed == 8 && e->num_new_tokens == 13 - 8,
          "recompute resumes after the 2 cached blocks (computed %d)", e ? e->num_computed : -1);
    CHECK(b->seqs[0].num_cached_tokens == 0, "num_cached_tokens is set at the first schedule");
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 55);
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 6 && block_pool_check(kv_cache_manager_pool(f.kv)) == VLLM_OK);
    fx_done(&f);
}

TEST(test_priority_preempts_max_priority_then_arrival) {
    fixture f;
    if (!fx_init(&f, 9, false, 8, 64, 0, VLLM_SCHEDULING_PRIORITY)) return;
    request *hi = fx_add(&f, 11, 0, 20, 1, 0, NULL);
    f.now = 1;
    request *lo_old = fx_add(&f, 7, 20, 20, 1, 5, NULL);
    f.now = 2;
    request *lo_new = fx_add(&f, 7, 40, 20, 1, 5, NULL);
    f.now = 3;
    request *mid = fx_add(&f, 3, 60, 20, 1, 1, NULL);
    const scheduler_output *o = fx_step(&f, 50); /* 3 + 2 + 2 + 1 = 8 of 9 blocks */
    CHECK(o->num_seqs == 4 && block_pool_num_free(kv_cache_manager_pool(f.kv)) == 1);
    /* the victim is the max (priority, arrival): lo_new, though mid is last */
    int32_t steps = 0;
    while (lo_new->seqs[0].status == SEQ_STATUS_RUNNING && steps++ < 20) {
        o = fx_step(&f, 51);
        CHECK(lo_old->seqs[0].status == SEQ_STATUS_RUNNING && mid->seqs[0].status == SEQ_STATUS_RUNNING,
              "wrong victim");
    }
    CHECK(lo_new->seqs[0].status == SEQ_STATUS_PREEMPTED && o->num_preemptions >= 1);
    steps = 0;
    while (lo_old->seqs[0].status == SEQ_STATUS_RUNNING && steps++ < 20) {
        o = fx_step(&f, 51);
        CHECK(mid->seqs[0].status == SEQ_STATUS_RUNNING && hi->seqs[0].status == SEQ_STATUS_RUNNING,
              "lo_old goes before mid and hi");
    }
    CHECK(lo_old->seqs[0].status == SEQ_STATUS_PREEMPTED);
    /* waiting is sorted: lo_old (arrived first) before lo_new */
    const list_node *w = scheduler_waiting(f.s);
    CHECK(list_entry(w->next, seq, node) == &lo_old->seqs[0]);
    CHECK(list_entry(w->next->next, seq, node) == &lo_new->seqs[0]);
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 52);
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 9);
    fx_done(&f);
}

TEST(test_priority_admission_order) {
    fixture f;
    if (!fx_init(&f, 32, false, 1, 16, 0, VLLM_SCHEDULING_PRIORITY)) return;
    request *r3 = fx_add(&f, 4, 0, 1, 1, 3, NULL);
    request *r1 = fx_add(&f, 4, 10, 1, 1, 1, NULL);
    request *r2 = fx_add(&f, 4, 20, 1, 1, 2, NULL);
    request *r1b = fx_add(&f, 4, 30, 1, 1, 1, NULL);
    request *order[4] = {r1, r1b, r2, r3};
    for (int32_t i = 0; i < 4; i++) {
        const scheduler_output *o = fx_step(&f, 50);
        CHECK(o->num_seqs == 1 && o->seqs[0].seq == &order[i]->seqs[0], "step %d scheduled %s", i,
              o->seqs[0].seq->req->id);
    }
    fx_done(&f);
}

TEST(test_fork_shares_blocks_and_copies_on_write) {
    fixture f;
    if (!fx_init(&f, 32, true, 4, 64, 0, VLLM_SCHEDULING_FCFS)) return;
    request *r = fx_add(&f, 6, 0, 5, 3, 0, NULL); /* blocks: [4 full][2 of 4] */
    request *other = fx_add(&f, 3, 50, 5, 2, 0, NULL);
    f.now += 1;
    const scheduler_output *o = scheduler_schedule(f.s, f.now);
    CHECK(o->num_seqs == 1 && o->seqs[0].num_samples == 3,
          "seq 0 holds 3 seats; n=2 does not fit in the 4th");
    int32_t sampled[3] = {60, 61, 62}, counts[1] = {3};
    CHECK(scheduler_update(f.s, sampled, counts, f.now) == VLLM_OK);
    CHECK(r->forked && scheduler_num_running(f.s) == 3);
    for (int32_t k = 0; k < 3; k++) {
        const seq *q = &r->seqs[k];
        CHECK(q->status == SEQ_STATUS_RUNNING && q->num_tokens == 7 && q->tokens[6] == 60 + k);
        CHECK(q->num_blocks == 2 && q->block_ids[0] == r->seqs[0].block_ids[0] &&
              q->block_ids[1] == r->seqs[0].block_ids[1]);
    }
    int32_t shared_last = r->seqs[0].block_ids[1];
    CHECK(block_pool_ref_count(kv_cache_manager_pool(f.kv), r->seqs[0].block_ids[0]) == 3);
    CHECK(block_pool_ref_count(kv_cache_manager_pool(f.kv), shared_last) == 3);
    /* each writes position 6 into the shared partial block: two copy, the last writes in place */
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 3 && o->num_copies == 2, "got %d copies", o->num_copies);
    CHECK(o->copies[0].src == shared_last && o->copies[1].src == shared_last);
    CHECK(r->seqs[0].block_ids[1] != shared_last && r->seqs[1].block_ids[1] != shared_last);
    CHECK(r->seqs[2].block_ids[1] == shared_last && block_pool_ref_count(kv_cache_manager_pool(f.kv), shared_last) == 1);
    CHECK(block_pool_ref_count(kv_cache_manager_pool(f.kv), r->seqs[0].block_ids[0]) == 3, "full block stays shared");
    int32_t s2[3] = {70, 71, 72}, c2[3] = {1, 1, 1};
    CHECK(scheduler_update(f.s, s2, c2, f.now) == VLLM_OK);
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 80);
    CHECK(other->seqs[1].status == SEQ_STATUS_FINISHED);
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 32 && block_pool_check(kv_cache_manager_pool(f.kv)) == VLLM_OK);
    fx_done(&f);
}

TEST(test_prefix_cache_hits_and_salt) {
    fixture f;
    if (!fx_init(&f, 64, true, 4, 256, 0, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 45, 0, 2, 1, 0, NULL);
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 5);
    /* same first 44 tokens (11 blocks), different tail */
    request *b = fx_add(&f, 44, 0, 2, 1, 0, NULL);
    b->seqs[0].tokens[43] = 7; /* the 11th block differs: 10 blocks = 40 tokens hit */
    const scheduler_output *o = fx_step(&f, 5);
    CHECK(o->prefix_cache_queries == 44 && o->prefix_cache_hits == 40, "queries %lld hits %lld",
          (long long)o->prefix_cache_queries, (long long)o->prefix_cache_hits);
    CHECK(o->num_tokens == 4 && b->seqs[0].num_cached_tokens == 40, "only the tail is computed");
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 5);
    /* a full-prompt match (44 = 11 blocks, all cached by a) still computes
     * the last token: 43 tokens hit, 1 computed, into a copy of block 10 */
    request *c = fx_add(&f, 44, 0, 1, 1, 0, NULL);
    int32_t cached10 = -1;
    o = scheduler_schedule(f.s, f.now);
    CHECK(o->prefix_cache_hits == 43 && o->num_tokens == 1, "hits capped below num_tokens: %lld, %d computed",
          (long long)o->prefix_cache_hits, o->num_tokens);
    CHECK(o->num_copies == 1 && o->copies[0].dst == c->seqs[0].block_ids[10], "the hit last block is copied");
    cached10 = o->num_copies == 1 ? o->copies[0].src : -1;
    CHECK(cached10 != c->seqs[0].block_ids[10] && block_pool_ref_count(kv_cache_manager_pool(f.kv), cached10) == 0,
          "the cached block stays unreferenced in the cache");
    int32_t s5[4] = {5, 5, 5, 5}, c5[4] = {1, 1, 1, 1};
    CHECK(scheduler_update(f.s, s5, c5, f.now) == VLLM_OK);
    for (seq *q = scheduler_take_news(f.s), *next; q; q = next) {
        next = q->news_next;
        seq_clear_news(q);
    }
    CHECK(c->seqs[0].num_cached_tokens == 43);
    request *d = fx_add(&f, 45, 0, 1, 1, 0, "salt");
    o = fx_step(&f, 5);
    CHECK(o->prefix_cache_hits == 0 && o->num_tokens == 45, "a salted request misses");
    request *e = fx_add(&f, 45, 0, 1, 1, 0, "salt");
    o = fx_step(&f, 5);
    CHECK(o->prefix_cache_hits == 44, "the same salt hits: %lld", (long long)o->prefix_cache_hits);
    (void)a; (void)c; (void)d; (void)e;
    fx_done(&f);
}

/* A burst of requests with one shared prompt computes it once: the first
 * runs alone (the others would compute the blocks it is computing), then the
 * others hit every block and compute their last token only. */
TEST(test_shared_prompt_burst) {
    fixture f;
    if (!fx_init(&f, 64, true, 8, 256, 0, VLLM_SCHEDULING_FCFS)) return;
    request *r[4];
    for (int32_t i = 0; i < 4; i++) r[i] = fx_add(&f, 16, 0, 2, 1, 0, NULL);
    request *other = fx_add(&f, 16, 50, 2, 1, 0, NULL);
    const scheduler_output *o = fx_step(&f, 5);
    CHECK(o->num_seqs == 1 && o->seqs[0].seq == &r[0]->seqs[0] && o->num_tokens == 16,
          "step 1: %d seqs, %d tokens", o->num_seqs, o->num_tokens);
    CHECK(scheduler_num_waiting(f.s) == 4, "FCFS: the request behind waits too");
    o = fx_step(&f, 5);
    /* r0 decodes 1; r1..r3 hit 4 blocks (15 tokens) and compute 1; other computes 16 */
    CHECK(o->num_seqs == 5 && o->num_tokens == 1 + 3 * 1 + 16, "step 2: %d seqs, %d tokens", o->num_seqs,
          o->num_tokens);
    CHECK(o->prefix_cache_queries == 4 * 16 && o->prefix_cache_hits == 3 * 15, "queries %lld hits %lld",
          (long long)o->prefix_cache_queries, (long long)o->prefix_cache_hits);
    CHECK(o->num_copies == 3, "each copies the hit last block before writing: %d", o->num_copies);
    for (int32_t i = 1; i < 4; i++) {
        CHECK(r[i]->seqs[0].num_cached_tokens == 15);
        CHECK(r[i]->seqs[0].block_ids[0] == r[0]->seqs[0].block_ids[0], "full blocks are shared");
        CHECK(r[i]->seqs[0].block_ids[3] != r[0]->seqs[0].block_ids[3], "the last one is a copy");
    }
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 5);
    CHECK(other->seqs[0].status == SEQ_STATUS_FINISHED);
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 64 && block_pool_check(kv_cache_manager_pool(f.kv)) == VLLM_OK);
    fx_done(&f);
}

TEST(test_abort_and_stop_rules) {
    fixture f;
    if (!fx_init(&f, 16, true, 4, 64, 0, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 6, 0, 10, 2, 0, NULL);
    request *b = fx_add(&f, 6, 10, 10, 1, 0, NULL);
    fx_step(&f, 50);
    request *w = fx_add(&f, 6, 20, 10, 1, 0, NULL);
    scheduler_abort_request(f.s, a);
    scheduler_abort_request(f.s, w);
    CHECK(a->seqs[0].finish_reason == VLLM_FINISH_ABORT && a->seqs[1].finish_reason == VLLM_FINISH_ABORT);
    CHECK(w->seqs[0].status == SEQ_STATUS_FINISHED && scheduler_num_waiting(f.s) == 0);
    CHECK(scheduler_pop_finished(f.s) == a && scheduler_pop_finished(f.s) == w);
    /* EOS (2) stops b, kept in the output */
    fx_step(&f, 2);
    CHECK(b->seqs[0].finish_reason == VLLM_FINISH_STOP && b->seqs[0].stop_token_id == 2);
    CHECK(b->seqs[0].tokens[b->seqs[0].num_tokens - 1] == 2);
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 16);

    /* seq_check_stop directly: min_tokens, ignore_eos, stop ids, length */
    vllm_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt_logprobs = -1;
    sp.max_tokens = 5;
    sp.min_tokens = 2;
    sp.num_stop_token_ids = 1;
    sp.stop_token_ids[0] = 9;
    int32_t prompt[3] = {1, 1, 1}, eos[2] = {2, 3}, stop;
    request *r;
    CHECK(request_create("x", prompt, 3, &sp, NULL, 8, BS, 1, 0, 99, &r) == VLLM_OK);
    seq *q = &r->seqs[0];
    seq_append_token(q, 2);
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_NONE, "below min_tokens");
    seq_append_token(q, 3);
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_STOP && stop == 3, "second eos id");
    r->params.ignore_eos = true;
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_NONE && stop == -1);
    seq_append_token(q, 9);
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_STOP && stop == 9, "stop token id");
    seq_append_token(q, 4);
    seq_append_token(q, 9);
    /* vLLM's check_stop (vllm/v1/core/sched/utils.py): stop tokens before length */
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_STOP && stop == 9,
          "a stop id at the last allowed token stops");
    q->tokens[q->num_tokens - 1] = 4;
    CHECK(seq_check_stop(q, 8, eos, 2, &stop) == VLLM_FINISH_LENGTH && stop == -1, "max_tokens");
    request_free(r);
    sp.max_tokens = -1;
    CHECK(request_create("y", prompt, 3, &sp, NULL, 6, BS, 1, 0, 100, &r) == VLLM_OK);
    CHECK(r->max_tokens == 3, "-1 = up to max_model_len");
    seq_append_token(&r->seqs[0], 4);
    seq_append_token(&r->seqs[0], 4);
    CHECK(seq_check_stop(&r->seqs[0], 6, eos, 2, &stop) == VLLM_FINISH_NONE);
    seq_append_token(&r->seqs[0], 4);
    CHECK(seq_check_stop(&r->seqs[0], 6, eos, 2, &stop) == VLLM_FINISH_LENGTH);
    request_free(r);
    fx_done(&f);
}

/* A schedule's copy, as the engine keeps one per batch in flight; its
 * sequences marked in flight. */
typedef struct flight_copy {
    scheduler_output o;
    scheduled_seq seqs[8];
} flight_copy;

static void take_flight(flight_copy *c, const scheduler_output *o) {
    c->o = *o;
    memcpy(c->seqs, o->seqs, (size_t)o->num_seqs * sizeof *o->seqs);
    c->o.seqs = c->seqs;
    for (int32_t i = 0; i < o->num_seqs; i++) c->seqs[i].seq->in_flight = true;
}

static vllm_status land_flight(fixture *f, flight_copy *c, int32_t tok) {
    int32_t sampled[8], counts[8];
    for (int32_t i = 0; i < c->o.num_seqs; i++) {
        c->seqs[i].seq->in_flight = false;
        sampled[i] = tok;
        counts[i] = c->seqs[i].num_out;
    }
    return scheduler_update_output(f->s, &c->o, sampled, counts, f->now);
}

TEST(test_in_flight_batches) {
    fixture f;
    flight_copy fa, fb;
    /* 6 blocks of 4: a and b take 3 each with 11-token prompts */
    if (!fx_init(&f, 6, false, 4, 64, 0, VLLM_SCHEDULING_FCFS)) return;
    request *a = fx_add(&f, 11, 0, 8, 1, 0, NULL);
    request *b = fx_add(&f, 11, 40, 8, 1, 0, NULL);
    scheduler_set_batch_cap(f.s, 1);
    const scheduler_output *o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 1 && o->seqs[0].seq == &a->seqs[0], "the cap: one entry, got %d", o->num_seqs);
    take_flight(&fa, o);
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 1 && o->seqs[0].seq == &b->seqs[0], "a is in flight: b's batch");
    take_flight(&fb, o);
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 0, "both in flight: nothing to schedule");
    CHECK(land_flight(&f, &fa, 50) == VLLM_OK && a->seqs[0].num_tokens == 12 && a->seqs[0].num_computed_tokens == 11);
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 1 && o->seqs[0].seq == &a->seqs[0] && o->seqs[0].num_new_tokens == 1, "a decodes");
    take_flight(&fa, o);
    CHECK(land_flight(&f, &fb, 51) == VLLM_OK && b->seqs[0].num_tokens == 12);
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 1 && o->seqs[0].seq == &b->seqs[0], "b decodes (12 tokens fit its 3 blocks)");
    take_flight(&fb, o);
    CHECK(land_flight(&f, &fa, 52) == VLLM_OK && a->seqs[0].num_tokens == 13);
    /* a needs a 4th block and the pool is full: FCFS would preempt b (the
     * last running), but b is in flight, so a preempts itself */
    scheduler_set_batch_cap(f.s, 0);
    o = scheduler_schedule(f.s, ++f.now);
    CHECK(o->num_seqs == 0 && o->num_preemptions == 1 && a->seqs[0].status == SEQ_STATUS_PREEMPTED &&
          b->seqs[0].status == SEQ_STATUS_RUNNING, "preempted %d, a %d b %d", o->num_preemptions,
          a->seqs[0].status, b->seqs[0].status);
    CHECK(land_flight(&f, &fb, 53) == VLLM_OK && b->seqs[0].num_tokens == 13);
    while (scheduler_has_unfinished(f.s)) fx_step(&f, 55);
    CHECK(a->seqs[0].num_tokens == 19 && b->seqs[0].num_tokens == 19, "both run to max_tokens 8");
    CHECK(block_pool_num_free(kv_cache_manager_pool(f.kv)) == 6);
    fx_done(&f);
}

TEST(test_config_checks) {
    kv_cache_manager *kv;
    CHECK(kv_cache_manager_create(4, BS, true, &kv) == VLLM_OK);
    scheduler *s;
    scheduler_config c = {.max_num_seqs = 8, .max_num_batched_tokens = 4, .max_model_len = 16};
    CHECK(scheduler_create(&c, kv, &s) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "max_num_seqs"));
    kv_cache_manager_free(kv);
}

int main(void) {
    RUN(test_chunked_prefill_within_budget);
    RUN(test_threshold_and_running_first);
    RUN(test_fcfs_preempts_last_running);
    RUN(test_priority_preempts_max_priority_then_arrival);
    RUN(test_priority_admission_order);
    RUN(test_fork_shares_blocks_and_copies_on_write);
    RUN(test_prefix_cache_hits_and_salt);
    RUN(test_shared_prompt_burst);
    RUN(test_abort_and_stop_rules);
    RUN(test_in_flight_batches);
    RUN(test_config_checks);
    return harness_done();
}

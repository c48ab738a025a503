/*
 * test_scheduler_sim.c - randomized simulation of the engine core with a
 * fake model, thousands of steps per configuration.
 *
 * The fake model keeps one 64-bit "K/V" per slot: the hash of the token
 * prefix ending at that position. Each step it applies the copy-on-write
 * copies, writes the new tokens' slots, then reads every context position of
 * every scheduled sequence back through its block table and checks it holds
 * that sequence's own prefix hash. A wrong prefix-cache hit, a missed
 * copy-on-write, a block owned twice or freed too early all show up as a
 * wrong slot. Tokens are sampled from the hash read at the last position and
 * the sequence's seed, so outputs depend only on a sequence's own history.
 *
 * Workload: random arrivals (prompts built from a few shared prefixes so the
 * prefix cache hits), lengths, max_tokens, n in {1,2,3}, priorities, salts,
 * EOS and stop tokens, aborts and front-end stops, tiny pools; with spec_k,
 * speculative drafts: after each step every decoding sequence gets up to
 * spec_k drafts, each the token the fake model will really produce there
 * (its generator peeked) or a random one, and the next step scores them
 * all and accepts drafts while they equal what the fake model samples, as
 * the real verifier does. A rejected draft's K/V left in a block, cached or
 * read back as the sequence's own, shows up as a wrong slot; some rejections
 * come back as new prompts (the sequence with its rejected drafts, or with
 * its own token and the drafts after it), so a block cached under tokens
 * its K/V do not hold is found by the next one to hit it.
 * Checked every step: token budget and seat cap; chunk threshold; entries
 * well formed; every block's ref_cnt equals the number of block tables
 * naming it, and a block named twice is a shared prefix (same logical index,
 * same tokens) or a fork's shared block; no written slot is in a shared
 * block; the pool's own invariants. At the end: all requests finished, free
 * blocks == total. Under FCFS, first scheduling follows arrival order.
 */
/* checks: 7 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "harness.h"

#define BS 4
#define VOCAB 12
#define MAX_MODEL_LEN 96
#define MAX_REQS 4096
#define MAX_PROBES 4

typedef struct sim_cfg {
    const char *name;
    vllm_scheduling_policy policy;
    bool caching;
    int32_t num_blocks, max_num_seqs, max_num_batched_tokens, threshold;
    int32_t steps;
    uint64_t seed;
    int32_t arrival_div;            /* 1..3 arrivals with probability 1/arrival_div per step */
    int32_t spec_k;                 /* drafts per decoding sequence per step (0: none) */
} sim_cfg;

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int32_t rnd_int(int32_t lo, int32_t hi) { return lo + (int32_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

/* ph[p] = hash of the prefix tokens[0..p], for p < n */
static void prefix_hashes(const int32_t *tokens, int32_t n, uint64_t *ph) {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t i = 0; i < n; i++) ph[i] = h = mix(h, (uint64_t)tokens[i] + 1);
}

typedef struct sim {
    sim_cfg cfg;
    kv_cache_manager *kv;
    scheduler *s;
    uint64_t *slots;                /* fake KV per slot */
    request *live[MAX_REQS];
    int32_t num_live;
    int32_t first_sched_step[MAX_REQS]; /* by serial */
    int32_t finish_step[MAX_REQS];
    int32_t num_added, num_finished;
    int32_t *refs;                  /* per block, recomputed each step */
    const seq **owner;              /* a first owner per block */
    int32_t *owner_idx;
    int64_t preemptions, hits, tokens_computed, drafts, accepted;
    int32_t probes[MAX_PROBES][MAX_MODEL_LEN]; /* prompts of rejections, added after the step */
    int32_t probe_len[MAX_PROBES];
    bool probe_salted[MAX_PROBES];
    int32_t num_probes, total_probes;
    int32_t max_tokens_step, max_seqs_step;
} sim;

static const int32_t prefixes[3][40] = {
    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 4, 5, 6, 7},
    {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {5, 9, 2, 7, 1, 8, 3, 6, 4, 10, 11, 5, 9, 2, 7, 1, 8, 3, 6, 4, 10, 11, 5, 9, 2, 7, 1, 8, 3, 6, 4, 10, 11, 5, 9, 2, 7, 1, 8, 3},
};

/* Adds a request for prompt with random sampling settings; salt NULL, or
 * "salt" half the time. */
static bool add_request(sim *m, int32_t step, const int32_t *prompt, int32_t np, const char *salt) {
    vllm_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt_logprobs = -1;
    sp.n = rnd() % 4 == 0 ? rnd_int(2, 3) : 1;
    sp.max_tokens = rnd() % 8 == 0 ? -1 : rnd_int(1, 40);
    sp.min_tokens = rnd() % 4 == 0 ? rnd_int(0, 5) : 0;
    sp.ignore_eos = rnd() % 2;
    if (rnd() % 3 == 0) {
        sp.num_stop_token_ids = 1;
        sp.stop_token_ids[0] = rnd_int(1, VOCAB - 1);
    }
    sp.has_seed = true;
    sp.seed = rnd();
    vllm_request_opts opts = {.priority = rnd_int(0, 3), .arrival_time = step, .cache_salt = salt};
    char id[32];
    snprintf(id, sizeof id, "r%d", m->num_added);
    request *r;
    CHECK_OR(false, request_create(id, prompt, np, &sp, &opts, MAX_MODEL_LEN, BS, 1, 7,
                                   (uint64_t)m->num_added, &r) == VLLM_OK);
    m->first_sched_step[m->num_added] = -1;
    m->finish_step[m->num_added] = -1;
    m->num_added++;
    m->live[m->num_live++] = r;
    scheduler_add_request(m->s, r, step);
    return true;
}

static bool add_random_request(sim *m, int32_t step) {
    int32_t prompt[MAX_MODEL_LEN];
    int32_t np = 0, which = rnd_int(0, 3);
    if (which < 3) {
        int32_t plen = rnd_int(0, 40);
        memcpy(prompt, prefixes[which], (size_t)plen * sizeof *prompt);
        np = plen;
    }
    int32_t tail = rnd_int(1, rnd() % 4 == 0 ? 50 : 12);
    for (int32_t i = 0; i < tail && np < MAX_MODEL_LEN; i++) prompt[np++] = rnd_int(1, VOCAB - 1);
    return add_request(m, step, prompt, np, rnd() % 5 == 0 ? "salt" : NULL);
}

static int32_t fake_sample(seq *q, uint64_t ctx) {
    return (int32_t)(mix(ctx, sampler_rng_next(&q->rng)) % VOCAB);
}

/* Up to spec_k drafts for every decoding sequence (the engine's rules:
 * forked, only its last token uncomputed, room under max_tokens and
 * max_model_len for every draft plus one): each one the token the fake
 * model will sample there (a peek at the generator), or half the time a
 * random one. */
static void propose_drafts(sim *m) {
    uint64_t ph[MAX_MODEL_LEN + 1];
    for (const list_node *n = scheduler_running(m->s)->next; n != scheduler_running(m->s); n = n->next) {
        seq *q = list_entry(n, seq, node);
        if (!q->req->forked || q->num_computed_tokens != q->num_tokens - 1) continue;
        int32_t k = rnd_int(0, m->cfg.spec_k);
        int32_t room_out = q->req->max_tokens - seq_num_output_tokens(q) - 1;
        int32_t room_len = MAX_MODEL_LEN - q->num_tokens - 1;
        if (k > room_out) k = room_out;
        if (k > room_len) k = room_len;
        if (k <= 0 || seq_reserve(q, q->num_tokens + k) != VLLM_OK) continue;
        sampler_rng peek = q->rng;
        for (int32_t j = 0; j < k; j++) {
            prefix_hashes(q->tokens, q->num_tokens + j, ph);
            int32_t truth = (int32_t)(mix(ph[q->num_tokens + j - 1], sampler_rng_next(&peek)) % VOCAB);
            q->tokens[q->num_tokens + j] = rnd() % 2 ? truth : rnd_int(0, VOCAB - 1);
        }
        q->num_drafts = k;
    }
}

static int64_t slot_of(const seq *q, int32_t pos) {
    return (int64_t)q->block_ids[pos / BS] * BS + pos % BS;
}

/* Every block's ref_cnt equals the tables naming it; shared blocks are legit. */
static bool check_ownership(sim *m) {
    int32_t nb = m->cfg.num_blocks;
    for (int32_t b = 0; b < nb; b++) {
        m->refs[b] = 0;
        m->owner[b] = NULL;
    }
    int32_t used = 0;
    for (int32_t i = 0; i < m->num_live; i++) {
        request *r = m->live[i];
        for (int32_t k = 0; k < r->n; k++) {
            const seq *q = &r->seqs[k];
            if (q->status != SEQ_STATUS_RUNNING)
                CHECK_OR(false, q->num_blocks == 0, "%s/%d status %d holds %d blocks", r->id, k,
                         q->status, q->num_blocks);
            CHECK_OR(false, q->status != SEQ_STATUS_RUNNING || q->num_blocks * BS >= q->num_computed_tokens,
                     "%s/%d: %d blocks for %d computed tokens", r->id, k, q->num_blocks,
                     q->num_computed_tokens);
            for (int32_t j = 0; j < q->num_blocks; j++) {
                int32_t b = q->block_ids[j];
                CHECK_OR(false, b >= 0 && b < nb, "bad block id %d", b);
                if (m->refs[b]++ == 0) {
                    used++;
                    m->owner[b] = q;
                    m->owner_idx[b] = j;
                    continue;
                }
                const seq *o = m->owner[b];
                CHECK_OR(false, m->owner_idx[b] == j,
                         "block %d at logical %d of %s/%d and %d of %s/%d", b, j, r->id, k,
                         m->owner_idx[b], o->req->id, o->index);
                /* the tokens both have computed in this block agree */
                int32_t end = q->num_computed_tokens < o->num_computed_tokens
                                  ? q->num_computed_tokens
                                  : o->num_computed_tokens;
                for (int32_t p = j * BS; p < (j + 1) * BS && p < end; p++)
                    CHECK_OR(false, q->tokens[p] == o->tokens[p],
                             "block %d shared by %s/%d and %s/%d with different tokens", b, r->id,
                             k, o->req->id, o->index);
                bool full = (j + 1) * BS <= end;
                CHECK_OR(false, full || o->req == q->req,
                         "partial block %d shared across requests %s and %s", b, r->id, o->req->id);
            }
        }
    }
    for (int32_t b = 0; b < nb; b++)
        CHECK_OR(false, m->refs[b] == block_pool_ref_count(kv_cache_manager_pool(m->kv), b),
                 "block %d: ref_cnt %d, named by %d tables", b, block_pool_ref_count(kv_cache_manager_pool(m->kv), b),
                 m->refs[b]);
    CHECK_OR(false, block_pool_num_free(kv_cache_manager_pool(m->kv)) == nb - used, "free %d, used %d of %d",
             block_pool_num_free(kv_cache_manager_pool(m->kv)), used, nb);
    CHECK_OR(false, block_pool_check(kv_cache_manager_pool(m->kv)) == VLLM_OK, "%s", vllm_errmsg());
    return true;
}

static bool run_step(sim *m, int32_t step) {
    const scheduler_output *o = scheduler_schedule(m->s, step);
    const sim_cfg *c = &m->cfg;
    m->preemptions += o->num_preemptions;
    m->hits += o->prefix_cache_hits;
    CHECK_OR(false, o->num_tokens <= c->max_num_batched_tokens, "step %d: %d tokens > budget %d",
             step, o->num_tokens, c->max_num_batched_tokens);
    CHECK_OR(false, o->num_seqs <= c->max_num_seqs);
    int32_t seats = 0, nrun = 0;
    for (const list_node *n = scheduler_running(m->s)->next; n != scheduler_running(m->s);
         n = n->next) {
        const seq *q = list_entry(n, seq, node);
        CHECK_OR(false, q->status == SEQ_STATUS_RUNNING);
        seats += seq_num_seats(q);
        nrun++;
    }
    CHECK_OR(false, seats <= c->max_num_seqs, "step %d: %d seats > %d", step, seats,
             c->max_num_seqs);
    CHECK_OR(false, nrun == scheduler_num_running(m->s));
    if (o->num_tokens > m->max_tokens_step) m->max_tokens_step = o->num_tokens;
    if (o->num_seqs > m->max_seqs_step) m->max_seqs_step = o->num_seqs;
    m->tokens_computed += o->num_tokens;
    int32_t sum = 0, samples = 0;
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        const seq *q = e->seq;
        CHECK_OR(false, q->status == SEQ_STATUS_RUNNING);
        CHECK_OR(false, e->num_new_tokens >= 1 && e->num_computed == q->num_computed_tokens);
        int32_t end = e->num_computed + e->num_new_tokens;
        CHECK_OR(false, (e->num_drafts == q->num_drafts && end == q->num_tokens + q->num_drafts) ||
                            (e->num_drafts == 0 && end < q->num_tokens),
                 "%s/%d: fed up to %d of %d tokens + %d drafts", q->req->id, q->index, end, q->num_tokens,
                 q->num_drafts);
        CHECK_OR(false, c->threshold == 0 || e->num_new_tokens <= c->threshold, "chunk %d > %d",
                 e->num_new_tokens, c->threshold);
        bool last = end >= q->num_tokens;
        CHECK_OR(false, e->num_scored == (last ? e->num_drafts + 1 : 0));
        CHECK_OR(false, e->num_samples == (last ? seq_num_seats(q) : 0));
        CHECK_OR(false, e->num_drafts == 0 || (e->num_samples == 1 && q->req->forked), "drafts on a fork");
        CHECK_OR(false, e->out_offset == samples);
        CHECK_OR(false, (end + BS - 1) / BS <= q->num_blocks);
        for (int32_t j = 0; j < i; j++) CHECK_OR(false, o->seqs[j].seq != q, "scheduled twice");
        sum += e->num_new_tokens;
        samples += e->num_out;
        m->drafts += e->num_drafts;
    }
    CHECK_OR(false, sum == o->num_tokens && samples == o->num_out);
    if (!check_ownership(m)) return false;

    /* the fake forward */
    for (int32_t i = 0; i < o->num_copies; i++) {
        block_copy bc = o->copies[i];
        CHECK_OR(false, block_pool_ref_count(kv_cache_manager_pool(m->kv), bc.dst) == 1, "copy into shared block");
        memcpy(&m->slots[(size_t)bc.dst * BS], &m->slots[(size_t)bc.src * BS],
               BS * sizeof *m->slots);
    }
    uint64_t ph[MAX_MODEL_LEN + 1];
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        const seq *q = e->seq;
        prefix_hashes(q->tokens, q->num_tokens + q->num_drafts, ph);
        for (int32_t p = e->num_computed; p < e->num_computed + e->num_new_tokens; p++) {
            int32_t b = q->block_ids[p / BS];
            CHECK_OR(false, block_pool_ref_count(kv_cache_manager_pool(m->kv), b) == 1,
                     "%s/%d writes position %d into shared block %d", q->req->id, q->index, p, b);
            m->slots[slot_of(q, p)] = ph[p];
        }
    }
    static int32_t committed[1024], num_committed[256];
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        seq *q = e->seq;
        int32_t end = e->num_computed + e->num_new_tokens;
        prefix_hashes(q->tokens, end, ph);
        for (int32_t p = 0; p < end; p++)
            CHECK_OR(false, m->slots[slot_of(q, p)] == ph[p],
                     "step %d: %s/%d reads wrong K/V at position %d (block %d)", step, q->req->id,
                     q->index, p, q->block_ids[p / BS]);
        num_committed[i] = 0;
        if (e->num_scored == 0) continue;
        if (e->num_samples > 1) { /* a fork: one token per sequence from the one row */
            uint64_t ctx = m->slots[slot_of(q, end - 1)];
            for (int32_t k = 0; k < e->num_samples; k++)
                committed[e->out_offset + k] = fake_sample(scheduler_entry_seq(e, k), ctx);
            num_committed[i] = e->num_samples;
            continue;
        }
        /* rows: the last committed token, then each draft; accept while equal */
        for (int32_t j = 0; j <= e->num_drafts; j++) {
            int32_t p = q->num_tokens - 1 + j, t = fake_sample(q, m->slots[slot_of(q, p)]);
            committed[e->out_offset + j] = t;
            num_committed[i] = j + 1;
            if (j == e->num_drafts) break;
            if (t != q->tokens[q->num_tokens + j]) {
                /* a probe for later: the sequence with its rejected drafts, or
                 * with its own token in place of the first rejected one and the
                 * drafts after it */
                if (m->num_probes < MAX_PROBES && m->total_probes < 300 && rnd() % 8 == 0) {
                    m->total_probes++;
                    int32_t len = q->num_tokens + e->num_drafts, *pr = m->probes[m->num_probes];
                    memcpy(pr, q->tokens, (size_t)len * sizeof *pr);
                    if (rnd() % 2) pr[q->num_tokens + j] = t;
                    m->probe_len[m->num_probes] = len;
                    m->probe_salted[m->num_probes++] = q->req->salt != NULL;
                }
                break;
            }
            m->accepted++;
        }
    }
    CHECK_OR(false, scheduler_update(m->s, committed, num_committed, step) == VLLM_OK, "%s", vllm_errmsg());
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const seq *q = o->seqs[i].seq;
        CHECK_OR(false, q->num_drafts == 0, "drafts survive their step");
        CHECK_OR(false, q->status != SEQ_STATUS_RUNNING || q->num_computed_tokens < q->num_tokens,
                 "%s/%d: %d computed of %d tokens", q->req->id, q->index, q->num_computed_tokens, q->num_tokens);
        CHECK_OR(false, q->status != SEQ_STATUS_RUNNING || q->num_blocks <= (q->num_tokens + BS - 1) / BS,
                 "%s/%d keeps %d blocks for %d tokens: a rejected draft's block", q->req->id, q->index,
                 q->num_blocks, q->num_tokens);
    }
    if (c->spec_k > 0) propose_drafts(m);
    for (int32_t i = 0; i < m->num_probes && m->num_added < MAX_REQS; i++)
        if (!add_request(m, step, m->probes[i], m->probe_len[i], m->probe_salted[i] ? "salt" : NULL)) return false;
    m->num_probes = 0;

    for (seq *q = scheduler_take_news(m->s), *next; q; q = next) {
        next = q->news_next;
        for (int32_t k = 0; k < q->num_events; k++)
            if (q->events[k].type == VLLM_EVENT_SCHEDULED &&
                m->first_sched_step[q->req->serial] < 0)
                m->first_sched_step[q->req->serial] = step;
        seq_clear_news(q);
    }
    for (request *r; (r = scheduler_pop_finished(m->s));) {
        for (int32_t k = 0; k < r->n; k++) {
            const seq *q = &r->seqs[k];
            CHECK_OR(false, q->status == SEQ_STATUS_FINISHED && q->num_blocks == 0);
            CHECK_OR(false, q->finish_reason != VLLM_FINISH_NONE);
            if (q->finish_reason == VLLM_FINISH_LENGTH)
                CHECK_OR(false, seq_num_output_tokens(q) == r->max_tokens ||
                                    q->num_tokens >= MAX_MODEL_LEN);
            if (q->finish_reason == VLLM_FINISH_STOP && q->stop_token_id >= 0)
                CHECK_OR(false, q->tokens[q->num_tokens - 1] == q->stop_token_id &&
                                    seq_num_output_tokens(q) >= r->params.min_tokens);
        }
        m->finish_step[r->serial] = step;
        int32_t i = 0;
        while (m->live[i] != r) i++;
        m->live[i] = m->live[--m->num_live];
        request_free(r);
        m->num_finished++;
    }
    return true;
}

static void run_sim(const sim_cfg *cfg) {
    sim m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    rng_state = cfg->seed;
    CHECK(kv_cache_manager_create(cfg->num_blocks, BS, cfg->caching, &m.kv) == VLLM_OK);
    scheduler_config sc = {.max_num_seqs = cfg->max_num_seqs,
                           .max_num_batched_tokens = cfg->max_num_batched_tokens,
                           .long_prefill_token_threshold = cfg->threshold,
                           .policy = cfg->policy,
                           .max_model_len = MAX_MODEL_LEN,
                           .eos_ids = {0},
                           .num_eos = 1};
    CHECK(scheduler_create(&sc, m.kv, &m.s) == VLLM_OK, "%s", vllm_errmsg());
    m.slots = calloc((size_t)cfg->num_blocks * BS, sizeof *m.slots);
    m.refs = calloc((size_t)cfg->num_blocks, sizeof *m.refs);
    m.owner = calloc((size_t)cfg->num_blocks, sizeof *m.owner);
    m.owner_idx = calloc((size_t)cfg->num_blocks, sizeof *m.owner_idx);
    bool ok = true;
    int32_t step = 0;
    for (; step < cfg->steps && ok; step++) {
        int32_t arrivals = rnd() % (uint64_t)cfg->arrival_div == 0 ? rnd_int(1, 3) : 0;
        for (int32_t a = 0; a < arrivals && m.num_added < MAX_REQS && ok; a++)
            ok = add_random_request(&m, step);
        if (ok && m.num_live > 0 && rnd() % 40 == 0) /* a client goes away */
            scheduler_abort_request(m.s, m.live[rnd() % (uint64_t)m.num_live]);
        if (ok && m.num_live > 0 && rnd() % 40 == 0) { /* the front end saw a stop string */
            request *r = m.live[rnd() % (uint64_t)m.num_live];
            seq *q = &r->seqs[rnd() % (uint64_t)r->n];
            if (q->status == SEQ_STATUS_RUNNING && seq_num_output_tokens(q) > 0)
                scheduler_finish_seq(m.s, q, VLLM_FINISH_STOP);
        }
        ok = ok && run_step(&m, step);
    }
    /* drain: no more arrivals; everything must finish */
    int32_t drain_limit = step + 20000;
    while (ok && m.num_live > 0 && step < drain_limit) ok = run_step(&m, step++);
    if (getenv("SIM_DEBUG") && m.num_live > 0) {
        for (int32_t k = 0; k < 3; k++) {
            const scheduler_output *o = scheduler_schedule(m.s, step);
            printf("# step: %d seqs %d tokens %d preempt\n", o->num_seqs, o->num_tokens, o->num_preemptions);
            for (const list_node *n = scheduler_running(m.s)->next; n != scheduler_running(m.s); n = n->next) {
                const seq *q = list_entry(n, seq, node);
                printf("#  run %s/%d prio %d tokens %d computed %d blocks %d\n", q->req->id, q->index, q->req->priority, q->num_tokens, q->num_computed_tokens, q->num_blocks);
            }
            int32_t w = 0;
            for (const list_node *n = scheduler_waiting(m.s)->next; n != scheduler_waiting(m.s) && w < 5; n = n->next, w++) {
                const seq *q = list_entry(n, seq, node);
                printf("#  wait %s/%d prio %d tokens %d seats %d\n", q->req->id, q->index, q->req->priority, q->num_tokens, seq_num_seats(q));
            }
            static int32_t z[1024], nz[256];
            scheduler_update(m.s, z, nz, step);
        }
    }
    if (ok) {
        CHECK(m.num_live == 0, "%s: %d requests still unfinished after %d steps", cfg->name,
              m.num_live, step);
        CHECK(!scheduler_has_unfinished(m.s));
        CHECK(block_pool_num_free(kv_cache_manager_pool(m.kv)) == cfg->num_blocks, "%s: %d of %d blocks free at end",
              cfg->name, block_pool_num_free(kv_cache_manager_pool(m.kv)), cfg->num_blocks);
        CHECK(block_pool_check(kv_cache_manager_pool(m.kv)) == VLLM_OK, "%s", vllm_errmsg());
        if (cfg->policy == VLLM_SCHEDULING_FCFS)
            for (int32_t i = 1; i < m.num_added; i++)
                CHECK(m.first_sched_step[i] < 0 || m.first_sched_step[i - 1] < 0 ||
                          m.first_sched_step[i] >= m.first_sched_step[i - 1],
                      "%s: request %d first scheduled at step %d before request %d at %d",
                      cfg->name, i, m.first_sched_step[i], i - 1, m.first_sched_step[i - 1]);
        CHECK(m.preemptions > 0, "%s: the pool is meant to be tight enough to preempt", cfg->name);
        if (cfg->caching) CHECK(m.hits > 0, "%s: shared prefixes should hit the cache", cfg->name);
        if (cfg->spec_k) CHECK(m.accepted > 0 && m.accepted < m.drafts, "%s: %lld of %lld drafts accepted",
                               cfg->name, (long long)m.accepted, (long long)m.drafts);
        printf("# %s: %d steps, %d requests, %lld preemptions, %lld hit tokens, %lld computed, "
               "%lld of %lld drafts accepted\n",
               cfg->name, step, m.num_added, (long long)m.preemptions, (long long)m.hits,
               (long long)m.tokens_computed, (long long)m.accepted, (long long)m.drafts);
    }
    for (int32_t i = 0; i < m.num_live; i++) request_free(m.live[i]);
    scheduler_free(m.s);
    kv_cache_manager_free(m.kv);
    free(m.slots);
    free(m.refs);
    free(m.owner);
    free(m.owner_idx);
}

TEST(test_sim_fcfs_caching) {
    run_sim(&(sim_cfg){"fcfs+cache", VLLM_SCHEDULING_FCFS, true, 40, 8, 32, 0, 4000, 1, 3, 0});
}
TEST(test_sim_fcfs_no_caching_threshold) {
    run_sim(&(sim_cfg){"fcfs+threshold7", VLLM_SCHEDULING_FCFS, false, 30, 6, 16, 7, 4000, 2, 8, 0});
}
TEST(test_sim_priority_caching) {
    run_sim(&(sim_cfg){"priority+cache", VLLM_SCHEDULING_PRIORITY, true, 32, 8, 24, 0, 4000, 3, 4, 0});
}
TEST(test_sim_priority_threshold1_tiny) {
    run_sim(&(sim_cfg){"priority+threshold1", VLLM_SCHEDULING_PRIORITY, true, 26, 4, 8, 1, 3000, 4, 30, 0});
}
TEST(test_sim_big_budget) {
    run_sim(&(sim_cfg){"fcfs+big", VLLM_SCHEDULING_FCFS, true, 64, 16, 256, 0, 3000, 5, 2, 0});
}
TEST(test_sim_spec_fcfs_caching) {
    run_sim(&(sim_cfg){"spec4+fcfs+cache", VLLM_SCHEDULING_FCFS, true, 40, 8, 32, 0, 4000, 6, 3, 4});
}
TEST(test_sim_spec_priority_threshold) {
    run_sim(&(sim_cfg){"spec3+priority+threshold5", VLLM_SCHEDULING_PRIORITY, true, 30, 6, 16, 5, 4000, 7, 4, 3});
}

int main(void) {
    RUN(test_sim_fcfs_caching);
    RUN(test_sim_fcfs_no_caching_threshold);
    RUN(test_sim_priority_caching);
    RUN(test_sim_priority_threshold1_tiny);
    RUN(test_sim_big_budget);
    RUN(test_sim_spec_fcfs_caching);
    RUN(test_sim_spec_priority_threshold);
    return harness_done();
}

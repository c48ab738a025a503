/* test_kv_cache_manager.c - block hashes chain (parent, tokens, extra keys),
 * allocate_slots fails without side effects, cached chains survive
 * duplicate computation, hits are capped below the prompt length, draft
 * tokens' blocks are never cached and are trimmed after a rejection; with a
 * sliding-window group beside a full one: blocks before the window go back
 * to the pool as the prompt advances, usage returns to zero, prefix hits
 * need the window's blocks (and only those), a miss there shortens the hit,
 * copy-on-write and forks cover every group. */
/* checks: 5 */
#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache_manager.h"
#include "harness.h"

#define BS 4

static request *make_groups(const char *id, const int32_t *prompt, int32_t n, const char *salt, int32_t groups) {
    vllm_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt_logprobs = -1;
    sp.n = 1;
    sp.max_tokens = 8;
    vllm_request_opts o = {.cache_salt = salt};
    request *r = NULL;
    request_create(id, prompt, n, &sp, &o, 64, BS, groups, 0, 0, &r);
    return r;
}

static request *make(const char *id, const int32_t *prompt, int32_t n, const char *salt) {
    return make_groups(id, prompt, n, salt, 1);
}

static bool eq(block_hash a, block_hash b) { return a.lo == b.lo && a.hi == b.hi; }

TEST(test_hash_chain) {
    int32_t t1[BS] = {1, 2, 3, 4}, t2[BS] = {1, 2, 3, 5};
    block_hash h0 = kv_cache_manager_hash_block(NULL, t1, BS, 0, NULL);
    CHECK(eq(h0, kv_cache_manager_hash_block(NULL, t1, BS, 0, NULL)), "deterministic");
    CHECK(!eq(h0, kv_cache_manager_hash_block(NULL, t2, BS, 0, NULL)), "tokens matter");
    CHECK(!eq(h0, kv_cache_manager_hash_block(NULL, t1, BS, 1, NULL)), "LoRA id matters");
    block_pool_salt *s = block_pool_salt_create("x", 1);
    CHECK(!eq(h0, kv_cache_manager_hash_block(NULL, t1, BS, 0, s)), "salt matters");
    block_pool_salt_unref(s);
    block_hash h1 = kv_cache_manager_hash_block(&h0, t1, BS, 0, NULL);
    block_hash g0 = kv_cache_manager_hash_block(NULL, t2, BS, 0, NULL);
    CHECK(!eq(h1, kv_cache_manager_hash_block(&g0, t1, BS, 0, NULL)), "parent matters");
}

/* Runs q's prompt through as if computed in one step. */
static bool prefill(kv_cache_manager *m, seq *q) {
    int32_t nc = 0;
    block_copy copies[4];
    int32_t nh = kv_cache_manager_find_longest_cache_hit(m, q);
    CHECK_OR(false, kv_cache_manager_allocate_slots(m, q, q->num_tokens - nh * BS, nh, copies, &nc) == VLLM_OK);
    q->num_computed_tokens = q->num_tokens;
    return true;
}

TEST(test_duplicate_chains_and_hits) {
    kv_cache_manager *m;
    CHECK(kv_cache_manager_create(32, BS, true, &m) == VLLM_OK);
    int32_t p[13];
    for (int32_t i = 0; i < 13; i++) p[i] = 100 + i;
    request *a = make("a", p, 13, NULL), *b = make("b", p, 13, NULL);
    /* a and b compute the same 3 full blocks in the same step, b one block behind */
    CHECK(prefill(m, &a->seqs[0]) && prefill(m, &b->seqs[0]));
    b->seqs[0].num_computed_tokens = 4; /* b's first block done ... */
    kv_cache_manager_cache_blocks(m, &b->seqs[0]);
    kv_cache_manager_cache_blocks(m, &a->seqs[0]); /* a caches all 3 (its block 0 a duplicate) */
    b->seqs[0].num_computed_tokens = 13;
    kv_cache_manager_cache_blocks(m, &b->seqs[0]);
    /* a third request finds the whole 12-token prefix, whichever physical blocks hold it */
    request *c = make("c", p, 13, NULL);
    int32_t hits[8];
    int32_t nh = kv_cache_manager_find_longest_cache_hit(m, &c->seqs[0]);
    CHECK(nh == 3, "got %d hit blocks", nh);
    CHECK(kv_cache_manager_hit_tokens(m, &c->seqs[0], 3) == 12);
    /* a prompt of exactly 12 tokens hits all 3 blocks, but only 11 tokens:
     * its last token is computed, into a copy of the third block */
    request *d = make("d", p, 12, NULL);
    CHECK(kv_cache_manager_find_longest_cache_hit(m, &d->seqs[0]) == 3);
    memcpy(hits, d->seqs[0].block_ids, 3 * sizeof *hits); /* the lookup leaves the hits in d's table */
    CHECK(kv_cache_manager_hit_tokens(m, &d->seqs[0], 3) == 11 && kv_cache_manager_hit_tokens(m, &d->seqs[0], 2) == 8);
    {
        int32_t free_d = block_pool_num_free(kv_cache_manager_pool(m)), ndc = 0;
        block_copy dc[2];
        CHECK(kv_cache_manager_allocate_slots(m, &d->seqs[0], 1, 3, dc, &ndc) == VLLM_OK);
        CHECK(ndc == 1 && dc[0].src == hits[2] && dc[0].dst == d->seqs[0].block_ids[2]);
        CHECK(d->seqs[0].num_blocks == 3 && d->seqs[0].block_ids[0] == hits[0] && d->seqs[0].block_ids[1] == hits[1]);
        CHECK(block_pool_ref_count(kv_cache_manager_pool(m), hits[2]) == 1, "hits[2] back to its earlier holder only");
        CHECK(block_pool_num_free(kv_cache_manager_pool(m)) == free_d - 1, "one new block (the copy)");
        kv_cache_manager_free_blocks(m, &d->seqs[0]);
        CHECK(block_pool_num_free(kv_cache_manager_pool(m)) == free_d);
    }
    request *e = make("e", p, 13, "tenant");
    CHECK(kv_cache_manager_find_longest_cache_hit(m, &e->seqs[0]) == 0, "salted: no hit");

    /* allocate_slots: all-or-nothing */
    int32_t free0 = block_pool_num_free(kv_cache_manager_pool(m)), nc = 0;
    block_copy copies[2];
    request *big = make("big", p, 13, NULL);
    big->seqs[0].num_tokens = 13;
    CHECK(kv_cache_manager_allocate_slots(m, &big->seqs[0], 4 * 100, 0, copies, &nc) == VLLM_ERR_FULL);
    CHECK(block_pool_num_free(kv_cache_manager_pool(m)) == free0 && big->seqs[0].num_blocks == 0);
    kv_cache_manager_free_blocks(m, &a->seqs[0]);
    kv_cache_manager_free_blocks(m, &b->seqs[0]);
    CHECK(block_pool_num_free(kv_cache_manager_pool(m)) == 32 && block_pool_check(kv_cache_manager_pool(m)) == VLLM_OK);
    request_free(a); request_free(b); request_free(c); request_free(d); request_free(e);
    request_free(big);
    kv_cache_manager_free(m);
}

/* A sequence with 8 committed tokens (7 computed) and 5 drafts: slots for
 * positions 7..12 (4 blocks); even with every fed position computed, only
 * the 2 blocks of committed tokens are cached; after the drafts are all
 * rejected and one token committed (9 tokens), the 4th block goes back. */
TEST(test_draft_blocks_never_cached_and_trimmed) {
    kv_cache_manager *m;
    CHECK(kv_cache_manager_create(16, BS, true, &m) == VLLM_OK);
    const block_pool *pool = kv_cache_manager_pool(m);
    int32_t p[8] = {11, 12, 13, 14, 15, 16, 17, 18}, copies_n = 0;
    request *r = make("r", p, 6, NULL);
    seq *q = &r->seqs[0];
    block_copy copies[2];
    CHECK(kv_cache_manager_allocate_slots(m, q, 6, 0, copies, &copies_n) == VLLM_OK);
    q->num_computed_tokens = 6;
    CHECK(seq_append_token(q, 17) == VLLM_OK && seq_append_token(q, 18) == VLLM_OK && q->num_tokens == 8);
    q->num_computed_tokens = 7;
    CHECK(seq_reserve(q, 8 + 5) == VLLM_OK);
    for (int32_t j = 0; j < 5; j++) q->tokens[8 + j] = 90 + j;
    q->num_drafts = 5;
    CHECK(kv_cache_manager_allocate_slots(m, q, 1 + 5, 0, copies, &copies_n) == VLLM_OK);
    CHECK(q->num_blocks == 4 && copies_n == 0, "positions 0..12 take 4 blocks, got %d", q->num_blocks);
    q->num_computed_tokens = 13; /* every fed position, drafts included */
    kv_cache_manager_cache_blocks(m, q);
    CHECK(block_pool_is_cached(pool, q->block_ids[0]) && block_pool_is_cached(pool, q->block_ids[1]));
    CHECK(!block_pool_is_cached(pool, q->block_ids[2]) && !block_pool_is_cached(pool, q->block_ids[3]),
          "a block of draft tokens was offered to the prefix cache");
    int32_t free_before = block_pool_num_free(pool), fourth = q->block_ids[3];
    CHECK(seq_append_token(q, 77) == VLLM_OK); /* all 5 rejected, one token of the target's */
    q->num_computed_tokens = 8;
    q->num_drafts = 0;
    kv_cache_manager_trim(m, q, (q->num_tokens + BS - 1) / BS);
    CHECK(q->num_blocks == 3 && block_pool_num_free(pool) == free_before + 1 && block_pool_ref_count(pool, fourth) == 0,
          "the block of rejected drafts only was not released");
    kv_cache_manager_cache_blocks(m, q);
    CHECK(!block_pool_is_cached(pool, q->block_ids[2]), "block 2 holds 1 committed token: not full");
    /* a new prompt equal to the committed tokens plus the rejected drafts hits only the committed blocks */
    int32_t probe[13] = {11, 12, 13, 14, 15, 16, 17, 18, 90, 91, 92, 93, 94};
    request *x = make("x", probe, 13, NULL);
    CHECK(kv_cache_manager_find_longest_cache_hit(m, &x->seqs[0]) == 2);
    kv_cache_manager_free_blocks(m, q);
    CHECK(block_pool_num_free(pool) == 16 && block_pool_check(pool) == VLLM_OK);
    request_free(r);
    request_free(x);
    kv_cache_manager_free(m);
}

/* Group 0 full attention, group 1 a sliding window of W = 6 tokens, blocks
 * of 4. A 21-token prompt prefilled 4 tokens a step: before the step from
 * position s, the sliding group releases its blocks wholly before s - 5. */
#define W 6

/* Computes q's next num_new tokens as a step would: allocate, compute, cache. */
static bool step(kv_cache_manager *m, seq *q, int32_t num_new, int32_t num_hits) {
    block_copy copies[4];
    int32_t nc = 0;
    CHECK_OR(false, kv_cache_manager_allocate_slots(m, q, num_new, num_hits, copies, &nc) == VLLM_OK, "%s",
             vllm_errmsg());
    q->num_computed_tokens += kv_cache_manager_hit_tokens(m, q, num_hits) + num_new;
    kv_cache_manager_cache_blocks(m, q);
    return true;
}

TEST(test_sliding_window_release_and_usage) {
    const int32_t windows[2] = {0, W};
    kv_cache_manager *m;
    CHECK(kv_cache_manager_create_groups(64, BS, true, windows, 2, &m) == VLLM_OK);
    const block_pool *pool = kv_cache_manager_pool(m);
    int32_t p[21];
    for (int32_t i = 0; i < 21; i++) p[i] = 200 + i;
    request *a = make_groups("a", p, 21, NULL, 2);
    seq *q = &a->seqs[0];
    for (int32_t start = 0; start < 21; start += 4) {
        int32_t n = 21 - start < 4 ? 21 - start : 4;
        CHECK(step(m, q, n, 0));
        int32_t first = start - W + 1 > 0 ? (start - W + 1) / BS : 0, blocks = (start + n + BS - 1) / BS;
        const int32_t *sliding = seq_block_table(q, 1);
        for (int32_t i = 0; i < blocks; i++)
            CHECK((sliding[i] < 0) == (i < first), "start %d: sliding block %d is %d", start, i, sliding[i]);
        CHECK(kv_cache_manager_num_held_blocks(m, q, 0) == blocks && kv_cache_manager_num_held_blocks(m, q, 1) ==
              blocks - first, "start %d: held %d + %d", start, kv_cache_manager_num_held_blocks(m, q, 0),
              kv_cache_manager_num_held_blocks(m, q, 1));
        CHECK(block_pool_num_free(pool) == 64 - blocks - (blocks - first), "start %d: %d free", start,
              block_pool_num_free(pool));
    }
    /* 6 full blocks, sliding blocks 3..5 (position 20 reads 15..20): 9 of the 12 */
    CHECK(block_pool_num_free(pool) == 64 - 9 && block_pool_check(pool) == VLLM_OK);
    kv_cache_manager_free_blocks(m, q);
    CHECK(block_pool_num_free(pool) == 64 && block_pool_usage(pool) == 0 && block_pool_check(pool) == VLLM_OK,
          "usage back to zero: %d free", block_pool_num_free(pool));
    request_free(a);
    kv_cache_manager_free(m);
}

TEST(test_sliding_window_prefix_hits) {
    const int32_t windows[2] = {0, W};
    kv_cache_manager *m;
    CHECK(kv_cache_manager_create_groups(64, BS, true, windows, 2, &m) == VLLM_OK);
    const block_pool *pool = kv_cache_manager_pool(m);
    int32_t p[22];
    for (int32_t i = 0; i < 22; i++) p[i] = 300 + i;
    request *a = make_groups("a", p, 21, NULL, 2);
    for (int32_t start = 0; start < 21; start += 4) CHECK(step(m, &a->seqs[0], 21 - start < 4 ? 21 - start : 4, 0));
    /* A's sliding blocks 0..2 went back mid-prompt, still cached; the rest when it finishes */
    kv_cache_manager_free_blocks(m, &a->seqs[0]);

    /* b shares A's 20 first tokens: 5 full blocks, and the sliding window of
     * position 20 (15..19: blocks 3 and 4); blocks 0..2 of the sliding group are not needed */
    p[20] = 999, p[21] = 998;
    request *b = make_groups("b", p, 22, NULL, 2);
    seq *qb = &b->seqs[0];
    CHECK(kv_cache_manager_find_longest_cache_hit(m, qb) == 5);
    const int32_t *s = seq_block_table(qb, 1);
    CHECK(s[0] == -1 && s[1] == -1 && s[2] == -1 && s[3] >= 0 && s[4] >= 0, "sliding hits %d %d %d %d %d", s[0], s[1],
          s[2], s[3], s[4]);
    CHECK(step(m, qb, 2, 5) && qb->num_computed_tokens == 22);
    for (int32_t i = 0; i < 5; i++) CHECK(block_pool_is_cached(pool, seq_block_table(qb, 0)[i]));
    kv_cache_manager_free_blocks(m, qb);

    /* a prompt of exactly A's first 20 tokens hits all 5 blocks, computes its
     * last token into a copy of block 4 in each group */
    request *c = make_groups("c", p, 20, NULL, 2);
    seq *qc = &c->seqs[0];
    CHECK(kv_cache_manager_find_longest_cache_hit(m, qc) == 5);
    int32_t src0 = seq_block_table(qc, 0)[4], src1 = seq_block_table(qc, 1)[4], nc = 0;
    block_copy copies[4];
    CHECK(kv_cache_manager_allocate_slots(m, qc, 1, 5, copies, &nc) == VLLM_OK);
    CHECK(nc == 2 && copies[0].src == src0 && copies[1].src == src1 && copies[0].dst == seq_block_table(qc, 0)[4] &&
          copies[1].dst == seq_block_table(qc, 1)[4], "%d copies", nc);
    /* a fork shares both tables, released entries included */
    request *f = make_groups("f", p, 20, NULL, 2);
    kv_cache_manager_fork(m, qc, &f->seqs[0]);
    for (int32_t g = 0; g < 2; g++)
        for (int32_t i = 0; i < qc->num_blocks; i++) {
            int32_t id = seq_block_table(qc, g)[i];
            CHECK(seq_block_table(&f->seqs[0], g)[i] == id && (id < 0 || block_pool_ref_count(pool, id) == 2),
                  "group %d block %d", g, i);
        }
    kv_cache_manager_free_blocks(m, &f->seqs[0]);
    kv_cache_manager_free_blocks(m, qc);

    /* Eviction: the pool's free queue holds, oldest first after the unused
     * blocks, A's sliding 0..2 (released mid-prompt), then full and sliding
     * blocks of A, B, C. A filler taking every never-cached block and three
     * more evicts sliding 0..2 only: B's 20 tokens still hit. */
    {
        int32_t p12b[16];
        memcpy(p12b, p, 12 * sizeof *p12b);
        p12b[12] = 1, p12b[13] = 2, p12b[14] = 3, p12b[15] = 4;
        request *e0 = make_groups("e0", p12b, 16, NULL, 2);
        CHECK(kv_cache_manager_find_longest_cache_hit(m, &e0->seqs[0]) == 3, "before the eviction: 3 blocks");
        request_free(e0);
    }
    int32_t uncached = 0;
    for (int32_t id = 0; id < 64; id++) uncached += block_pool_ref_count(pool, id) == 0 && !block_pool_is_cached(pool, id);
    int32_t filler_ids[64];
    CHECK(block_pool_alloc((block_pool *)pool, uncached + 3, filler_ids) == VLLM_OK);
    request *d = make_groups("d", p, 22, NULL, 2);
    CHECK(kv_cache_manager_find_longest_cache_hit(m, &d->seqs[0]) == 5, "window blocks 3, 4 survive");
    /* ... but a prompt sharing only 12 tokens needs sliding blocks 1 and 2 for position 12: evicted, so
     * no hit at all, although the full group has its 3 blocks */
    int32_t p12[16];
    memcpy(p12, p, 12 * sizeof *p12);
    p12[12] = 1, p12[13] = 2, p12[14] = 3, p12[15] = 4;
    request *e = make_groups("e", p12, 16, NULL, 2);
    CHECK(kv_cache_manager_find_longest_cache_hit(m, &e->seqs[0]) == 0, "a sliding miss shortens the hit");
    for (int32_t i = 0; i < uncached + 3; i++) block_pool_release((block_pool *)pool, filler_ids[i]);
    CHECK(block_pool_num_free(pool) == 64 && block_pool_check(pool) == VLLM_OK);
    request_free(a), request_free(b), request_free(c), request_free(d), request_free(e), request_free(f);
    kv_cache_manager_free(m);
}

int main(void) {
    RUN(test_hash_chain);
    RUN(test_duplicate_chains_and_hits);
    RUN(test_draft_blocks_never_cached_and_trimmed);
    RUN(test_sliding_window_release_and_usage);
    RUN(test_sliding_window_prefix_hits);
    return harness_done();
}

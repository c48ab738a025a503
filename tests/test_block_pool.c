/* test_block_pool.c - free queue order, ref counts, LRU eviction of cached
 * blocks, and exact prefix-cache matching (a forged hash collision, a stale
 * parent, a different salt must all miss). */
/* checks: 4 */
#include <stdlib.h>
#include <string.h>

#include "engine/block_pool.h"
#include "harness.h"

#define BS 4

static block_pool_key key(block_hash h, int32_t parent, uint64_t pgen, const int32_t *tokens,
                          const block_pool_salt *salt) {
    return (block_pool_key){.hash = h, .parent = parent, .parent_gen = pgen, .tokens = tokens,
                            .salt = salt};
}

TEST(test_alloc_from_head_free_to_tail) {
    block_pool *p;
    CHECK(block_pool_create(4, BS, true, &p) == VLLM_OK);
    int32_t ids[4];
    CHECK(block_pool_alloc(p, 2, ids) == VLLM_OK);
    CHECK(ids[0] == 0 && ids[1] == 1, "got %d %d", ids[0], ids[1]);
    CHECK(block_pool_num_free(p) == 2);
    CHECK(block_pool_alloc(p, 3, ids + 2) == VLLM_ERR_FULL, "over-allocation must fail");
    CHECK(block_pool_num_free(p) == 2, "a failed alloc changes nothing");
    /* block 1 holds cached content, block 0 does not */
    int32_t toks[BS] = {1, 2, 3, 4};
    block_pool_key k = key((block_hash){7, 9}, -1, 0, toks, NULL);
    CHECK(block_pool_cache(p, 1, &k));
    block_pool_release(p, 1); /* cached: to the tail */
    block_pool_release(p, 0); /* nothing cached: to the head */
    CHECK(block_pool_check(p) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(block_pool_usage(p) == 0.0f);
    /* order now: 0 (head), 2, 3, 1 (tail): the cached block is evicted last */
    CHECK(block_pool_alloc(p, 3, ids) == VLLM_OK);
    CHECK(ids[0] == 0 && ids[1] == 2 && ids[2] == 3, "got %d %d %d", ids[0], ids[1], ids[2]);
    CHECK(block_pool_lookup(p, &k) == 1, "block 1 still cached while free");
    uint64_t g = block_pool_generation(p, 1);
    CHECK(block_pool_alloc(p, 1, ids + 3) == VLLM_OK && ids[3] == 1);
    CHECK(block_pool_lookup(p, &k) == -1, "reuse evicts the cached content");
    CHECK(block_pool_generation(p, 1) == g + 1, "reuse bumps the generation");
    CHECK(block_pool_check(p) == VLLM_OK, "%s", vllm_errmsg());
    block_pool_free(p);
}

TEST(test_touch_and_ref_counts) {
    block_pool *p;
    CHECK(block_pool_create(3, BS, true, &p) == VLLM_OK);
    int32_t id;
    CHECK(block_pool_alloc(p, 1, &id) == VLLM_OK);
    int32_t toks[BS] = {5, 6, 7, 8};
    block_pool_key k = key((block_hash){1, 2}, -1, 0, toks, NULL);
    CHECK(block_pool_cache(p, id, &k));
    block_pool_release(p, id);
    CHECK(block_pool_num_free(p) == 3 && block_pool_ref_count(p, id) == 0);
    /* a hit on a free cached block takes it out of the free queue */
    CHECK(block_pool_lookup(p, &k) == id);
    block_pool_touch(p, id);
    block_pool_touch(p, id);
    CHECK(block_pool_ref_count(p, id) == 2 && block_pool_num_free(p) == 2);
    CHECK(block_pool_check(p) == VLLM_OK, "%s", vllm_errmsg());
    block_pool_release(p, id);
    CHECK(block_pool_num_free(p) == 2, "still referenced once");
    block_pool_release(p, id);
    CHECK(block_pool_num_free(p) == 3);
    CHECK(block_pool_check(p) == VLLM_OK, "%s", vllm_errmsg());
    block_pool_free(p);
}

TEST(test_lookup_is_exact) {
    block_pool *p;
    CHECK(block_pool_create(8, BS, true, &p) == VLLM_OK);
    int32_t ids[2];
    CHECK(block_pool_alloc(p, 2, ids) == VLLM_OK);
    int32_t a[BS] = {1, 2, 3, 4}, b[BS] = {5, 6, 7, 8}, c[BS] = {5, 6, 7, 9};
    block_hash h = {42, 43};
    block_pool_key k0 = key(h, -1, 0, a, NULL);
    CHECK(block_pool_cache(p, ids[0], &k0));
    uint64_t g0 = block_pool_generation(p, ids[0]);
    block_pool_key k1 = key((block_hash){44, 45}, ids[0], g0, b, NULL);
    CHECK(block_pool_cache(p, ids[1], &k1));
    CHECK(block_pool_lookup(p, &k1) == ids[1]);
    /* a forged collision: same 128-bit hash and parent, other tokens */
    block_pool_key forged = key((block_hash){44, 45}, ids[0], g0, c, NULL);
    CHECK(block_pool_lookup(p, &forged) == -1, "colliding hash with other tokens must miss");
    /* same tokens and hash under another parent */
    block_pool_key other_parent = key((block_hash){44, 45}, 5, 0, b, NULL);
    CHECK(block_pool_lookup(p, &other_parent) == -1);
    /* a duplicate of k0 is not inserted twice */
    int32_t dup;
    CHECK(block_pool_alloc(p, 1, &dup) == VLLM_OK);
    CHECK(!block_pool_cache(p, dup, &k0), "identical entry exists");
    /* salts: different salts never match each other or no salt */
    block_pool_salt *s1 = block_pool_salt_create("tenant-a", 8);
    block_pool_salt *s1b = block_pool_salt_create("tenant-a", 8);
    block_pool_salt *s2 = block_pool_salt_create("tenant-b", 8);
    block_pool_key ks = key(h, -1, 0, a, s1);
    CHECK(block_pool_lookup(p, &ks) == -1, "salted lookup must not hit unsalted block");
    CHECK(block_pool_cache(p, dup, &ks));
    block_pool_salt_unref(s1); /* the block keeps its own reference */
    block_pool_key ks1b = key(h, -1, 0, a, s1b), ks2 = key(h, -1, 0, a, s2);
    CHECK(block_pool_lookup(p, &ks1b) == dup, "equal salt content matches");
    CHECK(block_pool_lookup(p, &ks2) == -1, "other salt misses");
    /* the parent is evicted and reused: its children become unreachable */
    block_pool_release(p, ids[1]);
    block_pool_release(p, ids[0]);
    int32_t more[7]; /* queue: 3..7 uncached, then 1 and 0 (released in that order) */
    CHECK(block_pool_alloc(p, 7, more) == VLLM_OK && more[5] == ids[1] && more[6] == ids[0]);
    CHECK(block_pool_generation(p, ids[0]) != g0, "parent reused");
    CHECK(block_pool_lookup(p, &k1) == -1, "stale parent generation must miss");
    CHECK(block_pool_check(p) == VLLM_OK, "%s", vllm_errmsg());
    block_pool_reset_cache(p);
    CHECK(block_pool_lookup(p, &ks1b) == -1 && block_pool_check(p) == VLLM_OK);
    block_pool_salt_unref(s1b);
    block_pool_salt_unref(s2);
    block_pool_free(p);
}

TEST(test_caching_off) {
    block_pool *p;
    CHECK(block_pool_create(2, BS, false, &p) == VLLM_OK);
    int32_t id, toks[BS] = {0};
    CHECK(block_pool_alloc(p, 1, &id) == VLLM_OK);
    block_pool_key k = key((block_hash){1, 1}, -1, 0, toks, NULL);
    CHECK(!block_pool_cache(p, id, &k) && block_pool_lookup(p, &k) == -1);
    block_pool_free(p);
    CHECK(block_pool_create(0, BS, false, &p) == VLLM_ERR_INVALID && p == NULL);
    block_pool_free(NULL);
}

int main(void) {
    RUN(test_alloc_from_head_free_to_tail);
    RUN(test_touch_and_ref_counts);
    RUN(test_lookup_is_exact);
    RUN(test_caching_off);
    return harness_done();
}

/*
 * block_pool.h - the physical KV blocks: reference counts, the free queue and
 * the prefix-cache map (vLLM's BlockPool, SQLite's pcache1).
 *
 * Every block is either in use (ref_cnt > 0, named by one or more block
 * tables) or free (ref_cnt == 0, in free_block_queue). The free queue is an
 * intrusive doubly linked list over the block array: allocation pops the head,
 * a freed block goes to the tail, so the queue doubles as the LRU order for
 * prefix-cache eviction. A freed block keeps its cached content (hash, tokens)
 * and loses it only when it is popped for reuse. One deviation from vLLM: a
 * freed block that holds nothing cached goes to the head, not the tail, so
 * blocks with reusable content are evicted last.
 *
 * Prefix cache (cached_block_hash_to_block): a full block is cached under a
 * key = (chained 128-bit hash, KV cache group, parent block id and
 * generation, its tokens, extra keys). The map is a bucket array indexed by the hash with chains
 * threaded through the blocks, so it never allocates.
 *
 * Why a collision can never serve wrong KV: a lookup matches a block only if
 * its tokens and extra keys are equal to the query's *and* its parent (the
 * physical block that preceded it when its K/V were computed) is the very
 * block the lookup matched one position earlier, in the same generation (the
 * generation is bumped every time a block is reused). By induction from the
 * first block (no parent, tokens equal), a matched block's K/V were computed
 * on exactly the query's token prefix. The hash only picks the bucket and
 * rejects quickly; correctness does not rest on it. The price: a block whose
 * parent was evicted becomes unreachable (as in vLLM, where the chain walk
 * stops at the first miss), and two requests that computed the same prefix in
 * the same step keep one canonical chain.
 *
 * Not thread-safe: the engine core owns it.
 */
#ifndef VLLM_ENGINE_BLOCK_POOL_H
#define VLLM_ENGINE_BLOCK_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

/* A chained block hash: XXH3-128 of (parent hash, token ids, extra keys). */
typedef struct block_hash {
    uint64_t lo, hi;
} block_hash;

/* A cache salt (vLLM's cache_salt), shared by a request and the blocks it
 * caches; refcounted so a cached block can outlive its request. */
typedef struct block_pool_salt block_pool_salt;
/* NULL on allocation failure. The result holds one reference. */
block_pool_salt *block_pool_salt_create(const char *bytes, size_t len);
block_pool_salt *block_pool_salt_ref(block_pool_salt *s);
void block_pool_salt_unref(block_pool_salt *s); /* NULL is a no-op */
const char *block_pool_salt_bytes(const block_pool_salt *s, size_t *len);

/* What a cached block must match. Extra keys (salt, LoRA id) belong to the
 * first block of a chain only: later blocks inherit them through parent.
 * group: the KV cache group whose layers' K/V the block holds (several
 * groups share the pool and may cache the same tokens). */
typedef struct block_pool_key {
    block_hash hash;
    int32_t group;
    int32_t parent;                  /* block id of the previous block (or, for a sliding
                                        group, the same block of the anchor group;
                                        kv_cache_manager.h); -1 for the first */
    uint64_t parent_gen;             /* block_pool_generation(parent) */
    const int32_t *tokens;           /* (block_size) */
    const block_pool_salt *salt;     /* NULL = none */
    int32_t lora_id;                 /* 0 = none */
} block_pool_key;

typedef struct block_pool block_pool;

/* num_blocks >= 1, block_size >= 1. Caller frees with block_pool_free. */
vllm_status block_pool_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                              block_pool **out);
void block_pool_free(block_pool *p);

int32_t block_pool_num_blocks(const block_pool *p);
/* Blocks with ref_cnt 0 (cached or not): what block_pool_alloc can hand out. */
int32_t block_pool_num_free(const block_pool *p);
/* Used / total (vllm:kv_cache_usage_perc). */
float block_pool_usage(const block_pool *p);
int32_t block_pool_ref_count(const block_pool *p, int32_t id);
/* Bumped every time the block is handed out again. */
uint64_t block_pool_generation(const block_pool *p, int32_t id);
bool block_pool_is_cached(const block_pool *p, int32_t id);

/* Pops n blocks from the head of the free queue (evicting whatever they held
 * cached), ref_cnt 1 each, ids into ids[0..n). VLLM_ERR_FULL and no change if
 * fewer than n are free. */
vllm_status block_pool_alloc(block_pool *p, int32_t n, int32_t *ids);
/* Takes one more reference (a prefix-cache hit or a fork); a free block
 * leaves the free queue. */
void block_pool_touch(block_pool *p, int32_t id);
/* Drops a reference; at zero the block goes to the free queue (tail if it
 * holds cached content, head otherwise). Release a block table back to front
 * so a prefix's tail is evicted before its head. */
void block_pool_release(block_pool *p, int32_t id);

/* The cached block matching k exactly (see above), or -1. */
int32_t block_pool_lookup(const block_pool *p, const block_pool_key *k);
/* Records block id (full, its K/V computed) under k. No-op, returning false,
 * if caching is off, the block is already cached, or an identical entry
 * exists (the block stays a private duplicate). */
bool block_pool_cache(block_pool *p, int32_t id, const block_pool_key *k);
/* Forgets every cached entry (vLLM's reset_prefix_cache). */
void block_pool_reset_cache(block_pool *p);
/* Forgets the cached entries of chains that start with LoRA id lora_id (an
 * unloaded adapter's blocks): the first blocks with that id, then every
 * cached block whose parent was forgotten here, transitively. The blocks
 * keep their references; free ones go to the head of the free queue (reused
 * first). Returns how many entries were forgotten. */
int32_t block_pool_drop_lora(block_pool *p, int32_t lora_id);

/* Checks the pool's invariants (free queue == ref 0 blocks, each once; map
 * chains consistent). VLLM_OK or an error naming the first violation. For tests. */
vllm_status block_pool_check(const block_pool *p);

#endif

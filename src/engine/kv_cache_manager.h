/*
 * kv_cache_manager.h - block tables over the block pool (vLLM's
 * KVCacheManager): prefix-cache lookup, slot allocation with copy-on-write,
 * caching of computed blocks, forks for n > 1, and freeing.
 *
 * A sequence's block table maps logical block i (tokens [i*bs, (i+1)*bs)) to
 * a physical block. Blocks are allocated as tokens are scheduled; a table is
 * only ever appended to, except that copy-on-write swaps the last entry.
 *
 * Prefix caching: the hash of full block i chains the hash of block i-1 with
 * block i's token ids (and, for block 0, the extra keys: LoRA id, cache salt):
 *     h_i = XXH3_128(h_{i-1} || tokens[i*bs .. (i+1)*bs) || [lora_id, salt] if i == 0)
 * Blocks are offered to the cache only after their K/V are computed (after
 * the step's forward), so a hit never reads K/V that are still being written.
 * A lookup also matches the parent block, so hits are exact (block_pool.h).
 * At most num_tokens - 1 tokens hit: the last prompt token is always computed
 * because its logits are needed. Unlike vLLM (which then gives up the whole
 * last block), a prompt that ends on a block boundary may hit its last block
 * too: the sequence takes it with num_tokens - 1 tokens computed, and since
 * recomputing the last token writes into that cached block, allocate_slots
 * copies it first (copy-on-write). 64 requests sharing a 128-token prompt
 * then compute 1 token each instead of 16.
 *
 * Copy-on-write: only a fork shares a partially filled block. When a sequence
 * is about to write into a last block whose ref_cnt > 1, allocate_slots gives
 * it a fresh block and returns the (src, dst) pair, which the step batch
 * carries to the executor (copied before the forward).
 *
 * Draft tokens (speculative decoding) get slots like any scheduled token,
 * but a block is offered to the prefix cache only once every token in it is
 * committed *and* computed (cache_blocks looks at min(num_computed_tokens,
 * num_tokens)): a rejected draft's K/V are never cached. After a step's
 * verification the scheduler trims blocks that held only rejected drafts.
 */
#ifndef VLLM_ENGINE_KV_CACHE_MANAGER_H
#define VLLM_ENGINE_KV_CACHE_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "engine/request.h"

typedef struct block_copy {
    int32_t src, dst;
} block_copy;

typedef struct kv_cache_manager kv_cache_manager;

vllm_status kv_cache_manager_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                    kv_cache_manager **out);
void kv_cache_manager_free(kv_cache_manager *m);

int32_t kv_cache_manager_block_size(const kv_cache_manager *m);
bool kv_cache_manager_caching_enabled(const kv_cache_manager *m);
/* The pool, read-only: statistics (block_pool_num_free, block_pool_usage),
 * and tests (block_pool_check, ref counts). */
const block_pool *kv_cache_manager_pool(const kv_cache_manager *m);
/* Drops every cached prefix block (vLLM's reset_prefix_cache). */
void kv_cache_manager_reset_prefix_cache(kv_cache_manager *m);

/* The chained hash of a full block; parent is NULL for block 0, which also
 * takes the extra keys. Exposed for tests. */
block_hash kv_cache_manager_hash_block(const block_hash *parent, const int32_t *tokens,
                                       int32_t block_size, int32_t lora_id,
                                       const block_pool_salt *salt);

/* For a sequence with no blocks: the longest run of cached full blocks that
 * matches its tokens from the start (all of them at most). Writes their ids
 * to hits (capacity q->max_blocks) and returns how many. Takes no references
 * (allocate_slots does) and counts nothing (the scheduler counts a lookup
 * when it admits the sequence); returns 0 when prefix caching is off. */
int32_t kv_cache_manager_find_longest_cache_hit(kv_cache_manager *m, seq *q, int32_t *hits);

/* Tokens that num_hits hit blocks spare q: num_hits * block_size, capped at
 * q->num_tokens - 1 (the last token is always computed for its logits). */
int32_t kv_cache_manager_hit_tokens(const kv_cache_manager *m, const seq *q, int32_t num_hits);

/* The chained hash of q's full block i (computed and kept on q if new).
 * False if block i is not full of known tokens. */
bool kv_cache_manager_block_hash(const kv_cache_manager *m, seq *q, int32_t i, block_hash *out);

/* Gives q the blocks for num_new_tokens more tokens after its computed ones
 * and the kv_cache_manager_hit_tokens(num_hits) tokens of the num_hits cache
 * hits (hit blocks first, then new blocks). When the first new token lands
 * in a partially filled block that is shared, or in a hit block (which the
 * cache holds), that block is copied on write: the pair is appended to
 * copies[*num_copies]. On VLLM_ERR_FULL nothing changed. The caller then
 * advances q->num_computed_tokens past the hit tokens. */
vllm_status kv_cache_manager_allocate_slots(kv_cache_manager *m, seq *q, int32_t num_new_tokens,
                                            const int32_t *hits, int32_t num_hits,
                                            block_copy *copies, int32_t *num_copies);

/* Offers q's newly full blocks of committed, computed tokens to the prefix
 * cache. */
void kv_cache_manager_cache_blocks(kv_cache_manager *m, seq *q);

/* Releases q's blocks past the first num_blocks (last first): the blocks
 * that held only rejected drafts. */
void kv_cache_manager_trim(kv_cache_manager *m, seq *q, int32_t num_blocks);

/* child takes parent's block table, every block's ref_cnt raised. */
void kv_cache_manager_fork(kv_cache_manager *m, const seq *parent, seq *child);

/* Releases all of q's blocks (last block first) and empties its table. */
void kv_cache_manager_free_blocks(kv_cache_manager *m, seq *q);

#endif

/*
 * kv_cache_manager.h - block tables over the block pool (vLLM's
 * KVCacheManager with its hybrid coordinator): prefix-cache lookup, slot
 * allocation with copy-on-write, release of sliding-window blocks, caching
 * of computed blocks, forks for n > 1, and freeing.
 *
 * A sequence has one block table per KV cache group (model/kv_layout.h; one
 * group unless the model has sliding-window layers), all the same length;
 * each maps logical block i (tokens [i*bs, (i+1)*bs)) to a physical block of
 * the one shared pool. Blocks are allocated as tokens are scheduled, the
 * same number in every group; a table is only ever appended to, except that
 * copy-on-write swaps the last entry and a sliding group releases entries
 * at its front.
 *
 * Sliding-window groups (vLLM's SlidingWindowManager): a layer with window W
 * reads positions p - W + 1 .. p for a token at p. Before allocating for a
 * step whose first new token is at position `start`, allocate_slots releases
 * the group's blocks that lie wholly before start - W + 1: no token from
 * here on can read them (start only grows, except after a preemption, which
 * frees everything). Their table entries become -1; the step batch carries
 * them as they are and the runner never reads before a token's window. A
 * long prompt then holds about W / bs + 1 blocks per sliding group instead
 * of one per block_size tokens.
 *
 * Prefix caching: the hash of full block i chains the hash of block i-1 with
 * block i's token ids (and, for block 0, the extra keys: LoRA id, cache salt):
 *     h_i = XXH3_128(h_{i-1} || tokens[i*bs .. (i+1)*bs) || [lora_id, salt] if i == 0)
 * Blocks are offered to the cache only after their K/V are computed (after
 * the step's forward), so a hit never reads K/V that are still being written.
 * A lookup also matches the parent block, so hits are exact (block_pool.h).
 *
 * Prefix caching with sliding groups. A hit of n blocks needs, in a full
 * group, blocks 0..n-1 (found from the left, each chained to the one before:
 * the exactness argument of block_pool.h); in a sliding group only the
 * blocks in the window of the first token to compute (hit_tokens(n)), since
 * the earlier ones were released anyway. Those cannot chain to their
 * predecessors, which may be evicted, so a sliding group's block i is keyed
 * instead by the canonical cached block i of the anchor group (the first
 * full-attention group): that block matched exactly the query's tokens
 * 0 .. (i+1)*bs, so the sliding block's K/V, computed on the same prefix,
 * are the query's too. find_longest_cache_hit walks the full groups from the
 * left to n, then checks the sliding groups' window blocks from the right;
 * a miss at block i lowers n to i and checks again (the window moves left
 * with it), as vLLM's coordinator trims the full hit to what the sliding
 * groups can serve. A model with only sliding layers (no anchor) chains its
 * group like a full one. Released sliding blocks stay cached in the pool's
 * LRU until evicted; a finished sequence releases its window blocks last,
 * so they are evicted last.
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

#define KV_CACHE_MAX_GROUPS 16

/* One full-attention group. */
vllm_status kv_cache_manager_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                    kv_cache_manager **out);
/* num_groups groups (1..KV_CACHE_MAX_GROUPS), group g attending through a
 * sliding window of windows[g] tokens, or to everything if 0. Sequences
 * given to the manager must have been created with num_groups tables. */
vllm_status kv_cache_manager_create_groups(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                           const int32_t *windows, int32_t num_groups, kv_cache_manager **out);
void kv_cache_manager_free(kv_cache_manager *m);

int32_t kv_cache_manager_block_size(const kv_cache_manager *m);
int32_t kv_cache_manager_num_groups(const kv_cache_manager *m);
bool kv_cache_manager_caching_enabled(const kv_cache_manager *m);
/* The pool, read-only: statistics (block_pool_num_free, block_pool_usage),
 * and tests (block_pool_check, ref counts). */
const block_pool *kv_cache_manager_pool(const kv_cache_manager *m);
/* Drops every cached prefix block (vLLM's reset_prefix_cache). */
void kv_cache_manager_reset_prefix_cache(kv_cache_manager *m);
/* Drops the cached blocks of an unloaded LoRA adapter (block_pool_drop_lora);
 * returns how many. */
int32_t kv_cache_manager_drop_lora(kv_cache_manager *m, int32_t lora_id);

/* The chained hash of a full block; parent is NULL for block 0, which also
 * takes the extra keys. Exposed for tests. */
block_hash kv_cache_manager_hash_block(const block_hash *parent, const int32_t *tokens,
                                       int32_t block_size, int32_t lora_id,
                                       const block_pool_salt *salt);

/* For a sequence with no blocks: the longest run of cached full blocks that
 * matches its tokens from the start (all of them at most), in every group
 * (a sliding group: the blocks in the window; see the top). Writes their ids
 * into q's own tables at [0, n) (-1 for a sliding group's blocks before its
 * window) and returns n. Takes no references (allocate_slots does) and
 * counts nothing (the scheduler counts a lookup when it admits the
 * sequence); returns 0 when prefix caching is off. */
int32_t kv_cache_manager_find_longest_cache_hit(kv_cache_manager *m, seq *q);

/* Tokens that num_hits hit blocks spare q: num_hits * block_size, capped at
 * q->num_tokens - 1 (the last token is always computed for its logits). */
int32_t kv_cache_manager_hit_tokens(const kv_cache_manager *m, const seq *q, int32_t num_hits);

/* The chained hash of q's full block i (computed and kept on q if new).
 * False if block i is not full of known tokens. */
bool kv_cache_manager_block_hash(const kv_cache_manager *m, seq *q, int32_t i, block_hash *out);

/* Gives q the blocks for num_new_tokens more tokens after its computed ones
 * and the kv_cache_manager_hit_tokens(num_hits) tokens of the num_hits cache
 * hits that find_longest_cache_hit left in q's tables (hit blocks first, then
 * new blocks), in every group; first releases sliding groups' blocks before
 * the window of the first new token. When the first new token lands in a
 * partially filled block that is shared, or in a hit block (which the cache
 * holds), that block is copied on write in each group: the pairs are
 * appended to copies[*num_copies] (room for one per group). On
 * VLLM_ERR_FULL nothing changed but those releases. The caller then advances
 * q->num_computed_tokens past the hit tokens. */
vllm_status kv_cache_manager_allocate_slots(kv_cache_manager *m, seq *q, int32_t num_new_tokens, int32_t num_hits,
                                            block_copy *copies, int32_t *num_copies);

/* Offers q's newly full blocks of committed, computed tokens to the prefix
 * cache. */
void kv_cache_manager_cache_blocks(kv_cache_manager *m, seq *q);

/* Releases q's blocks past the first num_blocks (last first): the blocks
 * that held only rejected drafts. */
void kv_cache_manager_trim(kv_cache_manager *m, seq *q, int32_t num_blocks);

/* child takes parent's block table, every block's ref_cnt raised. */
void kv_cache_manager_fork(kv_cache_manager *m, const seq *parent, seq *child);

/* Releases all of q's blocks (a full group's last block first, a sliding
 * group's first block first) and empties its tables. */
void kv_cache_manager_free_blocks(kv_cache_manager *m, seq *q);

/* Slots in q's held blocks (all groups) that hold no computed token. */
int64_t kv_cache_manager_empty_slots(const kv_cache_manager *m, const seq *q);

/* Blocks q holds in group g (its table's entries that are not released). */
int32_t kv_cache_manager_num_held_blocks(const kv_cache_manager *m, const seq *q, int32_t g);

#endif

/*
 * kv_cache_manager.c - block tables, prefix-cache lookups, copy-on-write.
 * See kv_cache_manager.h for the design; block_pool.c holds the pool itself.
 */
#include "engine/kv_cache_manager.h"

#include <stdlib.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/error.h"

/* Seed of every chain; fixed so hashes are stable across processes (a KV
 * connector can name blocks by hash). Correctness does not depend on it. */
#define KV_HASH_SEED 0x766c6c6d2e63ULL /* "vllm.c" */

struct kv_cache_manager {
    block_pool *pool;
    int32_t block_size;
    bool enable_caching;
};

vllm_status kv_cache_manager_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                    kv_cache_manager **out) {
    *out = NULL;
    kv_cache_manager *m = calloc(1, sizeof *m);
    if (!m) return vllm_error(VLLM_ERR_NOMEM, "kv cache manager: out of memory");
    vllm_status rc = block_pool_create(num_blocks, block_size, enable_caching, &m->pool);
    if (rc != VLLM_OK) {
        free(m);
        return rc;
    }
    m->block_size = block_size;
    m->enable_caching = enable_caching;
    *out = m;
    return VLLM_OK;
}

void kv_cache_manager_free(kv_cache_manager *m) {
    if (!m) return;
    block_pool_free(m->pool);
    free(m);
}

int32_t kv_cache_manager_block_size(const kv_cache_manager *m) { return m->block_size; }
bool kv_cache_manager_caching_enabled(const kv_cache_manager *m) { return m->enable_caching; }
const block_pool *kv_cache_manager_pool(const kv_cache_manager *m) { return m->pool; }
void kv_cache_manager_reset_prefix_cache(kv_cache_manager *m) { block_pool_reset_cache(m->pool); }

block_hash kv_cache_manager_hash_block(const block_hash *parent, const int32_t *tokens,
                                       int32_t block_size, int32_t lora_id,
                                       const block_pool_salt *salt) {
    XXH3_state_t st;
    XXH3_128bits_reset_withSeed(&st, KV_HASH_SEED);
    block_hash none = {0, 0};
    const block_hash *ph = parent ? parent : &none;
    XXH3_128bits_update(&st, &ph->lo, sizeof ph->lo);
    XXH3_128bits_update(&st, &ph->hi, sizeof ph->hi);
    XXH3_128bits_update(&st, tokens, (size_t)block_size * sizeof *tokens);
    if (!parent) {
        XXH3_128bits_update(&st, &lora_id, sizeof lora_id);
        if (salt) {
            size_t len;
            const char *bytes = block_pool_salt_bytes(salt, &len);
            XXH3_128bits_update(&st, bytes, len);
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (block_hash){h.low64, h.high64};
}

/* Hashes q's full token blocks up to block n (exclusive). */
static void ensure_hashes(const kv_cache_manager *m, seq *q, int32_t n) {
    int32_t bs = m->block_size;
    for (int32_t i = q->num_block_hashes; i < n; i++)
        q->block_hashes[i] = kv_cache_manager_hash_block(
            i ? &q->block_hashes[i - 1] : NULL, q->tokens + (size_t)i * (size_t)bs, bs,
            q->req->lora_id, q->req->salt);
    if (n > q->num_block_hashes) q->num_block_hashes = n;
}

static block_pool_key key_of(const kv_cache_manager *m, const seq *q, int32_t i, int32_t parent,
                             uint64_t parent_gen) {
    return (block_pool_key){
        .hash = q->block_hashes[i],
        .parent = parent,
        .parent_gen = parent_gen,
        .tokens = q->tokens + (size_t)i * (size_t)m->block_size,
        .salt = i == 0 ? q->req->salt : NULL,
        .lora_id = i == 0 ? q->req->lora_id : 0,
    };
}

int32_t kv_cache_manager_hit_tokens(const kv_cache_manager *m, const seq *q, int32_t num_hits) {
    int32_t t = num_hits * m->block_size;
    return num_hits > 0 && t > q->num_tokens - 1 ? q->num_tokens - 1 : t;
}

bool kv_cache_manager_block_hash(const kv_cache_manager *m, seq *q, int32_t i, block_hash *out) {
    if (i < 0 || i >= q->num_tokens / m->block_size) return false;
    ensure_hashes(m, q, i + 1);
    *out = q->block_hashes[i];
    return true;
}

int32_t kv_cache_manager_find_longest_cache_hit(kv_cache_manager *m, seq *q, int32_t *hits) {
    if (!m->enable_caching) return 0;
    int32_t max_hit = q->num_tokens / m->block_size;
    ensure_hashes(m, q, max_hit);
    int32_t n = 0, parent = -1;
    uint64_t pgen = 0;
    while (n < max_hit) {
        block_pool_key k = key_of(m, q, n, parent, pgen);
        int32_t id = block_pool_lookup(m->pool, &k);
        if (id < 0) break;
        hits[n++] = id;
        parent = id;
        pgen = block_pool_generation(m->pool, id);
    }
    return n;
}

vllm_status kv_cache_manager_allocate_slots(kv_cache_manager *m, seq *q, int32_t num_new_tokens,
                                            const int32_t *hits, int32_t num_hits,
                                            block_copy *copies, int32_t *num_copies) {
    int32_t bs = m->block_size;
    /* first new token's position */
    int32_t start = q->num_computed_tokens + kv_cache_manager_hit_tokens(m, q, num_hits);
    int32_t total = start + num_new_tokens;
    int32_t have = q->num_blocks + num_hits;
    int32_t need = (total + bs - 1) / bs - have;
    if (need < 0) need = 0;
    /* the first new token lands in an existing, partially filled block that
     * is shared, or in a hit block (the last token of a prompt that hit all
     * its blocks): either way others read it, so we write into a copy */
    int32_t cow_idx = start / bs;
    bool cow = false;
    if (num_new_tokens > 0 && start % bs != 0) {
        if (cow_idx >= q->num_blocks && cow_idx - q->num_blocks < num_hits) cow = true;
        else if (cow_idx < q->num_blocks) cow = block_pool_ref_count(m->pool, q->block_ids[cow_idx]) > 1;
    }
    int32_t evictable = 0;
    for (int32_t i = 0; i < num_hits; i++)
        if (block_pool_ref_count(m->pool, hits[i]) == 0) evictable++;
    if (need + (cow ? 1 : 0) > block_pool_num_free(m->pool) - evictable)
        return vllm_error(VLLM_ERR_FULL, "kv cache: %d blocks needed, %d free",
                          need + (cow ? 1 : 0), block_pool_num_free(m->pool) - evictable);
    /* seq_reserve sizes the table for every committed and draft token, and
     * nothing schedules past them: a table too short is a bug that would
     * write past its end */
    if (have + need > q->max_blocks) abort();

    for (int32_t i = 0; i < num_hits; i++) {
        block_pool_touch(m->pool, hits[i]);
        q->block_ids[q->num_blocks++] = hits[i];
    }
    if (num_hits > 0) {
        q->num_cached_blocks = q->num_blocks;
        q->cache_parent = hits[num_hits - 1];
        q->cache_parent_gen = block_pool_generation(m->pool, q->cache_parent);
    }
    if (cow) {
        int32_t dst;
        block_pool_alloc(m->pool, 1, &dst);
        copies[(*num_copies)++] = (block_copy){q->block_ids[cow_idx], dst};
        block_pool_release(m->pool, q->block_ids[cow_idx]);
        q->block_ids[cow_idx] = dst;
    }
    if (need > 0) {
        block_pool_alloc(m->pool, need, q->block_ids + q->num_blocks);
        q->num_blocks += need;
    }
    return VLLM_OK;
}

void kv_cache_manager_cache_blocks(kv_cache_manager *m, seq *q) {
    if (!m->enable_caching) return;
    int32_t known = q->num_computed_tokens < q->num_tokens ? q->num_computed_tokens : q->num_tokens;
    int32_t full = known / m->block_size;
    if (full > q->num_blocks) full = q->num_blocks;
    if (full <= q->num_cached_blocks) return;
    ensure_hashes(m, q, full);
    for (int32_t i = q->num_cached_blocks; i < full; i++) {
        int32_t parent = i ? q->cache_parent : -1;
        uint64_t pgen = i ? q->cache_parent_gen : 0;
        block_pool_key k = key_of(m, q, i, parent, pgen);
        /* The canonical block for this content: an identical cached one if
         * there is one (our block stays a private duplicate), else ours.
         * Later blocks chain to it: their K/V depend only on the content. */
        int32_t canon = block_pool_lookup(m->pool, &k);
        if (canon < 0) {
            canon = q->block_ids[i];
            block_pool_cache(m->pool, canon, &k);
        }
        q->cache_parent = canon;
        q->cache_parent_gen = block_pool_generation(m->pool, canon);
    }
    q->num_cached_blocks = full;
}

void kv_cache_manager_fork(kv_cache_manager *m, const seq *parent, seq *child) {
    for (int32_t i = 0; i < parent->num_blocks; i++) {
        block_pool_touch(m->pool, parent->block_ids[i]);
        child->block_ids[i] = parent->block_ids[i];
    }
    child->num_blocks = parent->num_blocks;
    int32_t nh = parent->num_block_hashes;
    /* the child's tokens equal the parent's up to the prompt; later hashes may differ */
    int32_t same = parent->req->num_prompt_tokens / m->block_size;
    if (nh > same) nh = same;
    for (int32_t i = 0; i < nh; i++) child->block_hashes[i] = parent->block_hashes[i];
    child->num_block_hashes = nh;
    child->num_cached_blocks = parent->num_cached_blocks;
    child->cache_parent = parent->cache_parent;
    child->cache_parent_gen = parent->cache_parent_gen;
}

void kv_cache_manager_trim(kv_cache_manager *m, seq *q, int32_t num_blocks) {
    if (num_blocks < 0) num_blocks = 0;
    for (int32_t i = q->num_blocks - 1; i >= num_blocks; i--) block_pool_release(m->pool, q->block_ids[i]);
    if (q->num_blocks > num_blocks) q->num_blocks = num_blocks;
}

void kv_cache_manager_free_blocks(kv_cache_manager *m, seq *q) {
    for (int32_t i = q->num_blocks - 1; i >= 0; i--) block_pool_release(m->pool, q->block_ids[i]);
    q->num_blocks = 0;
    q->num_cached_blocks = 0;
    q->cache_parent = -1;
    q->cache_parent_gen = 0;
}

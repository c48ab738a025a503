/*
 * kv_cache_manager.c - block tables, prefix-cache lookups, copy-on-write,
 * sliding-window release. See kv_cache_manager.h for the design;
 * block_pool.c holds the pool itself.
 */
#include "engine/kv_cache_manager.h"

#include <stdlib.h>
#include <string.h>
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
    int32_t num_groups;
    int32_t window[KV_CACHE_MAX_GROUPS]; /* sliding window in tokens, 0 = full attention */
    int32_t anchor;                      /* the first full-attention group, -1 if none */
};

vllm_status kv_cache_manager_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                    kv_cache_manager **out) {
    int32_t full = 0;
    return kv_cache_manager_create_groups(num_blocks, block_size, enable_caching, &full, 1, out);
}

vllm_status kv_cache_manager_create_groups(int32_t num_blocks, int32_t block_size, bool enable_caching,
                                           const int32_t *windows, int32_t num_groups, kv_cache_manager **out) {
    *out = NULL;
    if (num_groups < 1 || num_groups > KV_CACHE_MAX_GROUPS)
        return vllm_error(VLLM_ERR_INVALID, "kv cache manager: %d KV cache groups (1..%d)", num_groups,
                          KV_CACHE_MAX_GROUPS);
    kv_cache_manager *m = calloc(1, sizeof *m);
    if (!m) return vllm_error(VLLM_ERR_NOMEM, "kv cache manager: out of memory");
    vllm_status rc = block_pool_create(num_blocks, block_size, enable_caching, &m->pool);
    if (rc != VLLM_OK) {
        free(m);
        return rc;
    }
    m->block_size = block_size;
    m->enable_caching = enable_caching;
    m->num_groups = num_groups;
    m->anchor = -1;
    for (int32_t g = 0; g < num_groups; g++) {
        m->window[g] = windows[g] > 0 ? windows[g] : 0;
        if (!m->window[g] && m->anchor < 0) m->anchor = g;
    }
    *out = m;
    return VLLM_OK;
}

void kv_cache_manager_free(kv_cache_manager *m) {
    if (!m) return;
    block_pool_free(m->pool);
    free(m);
}

int32_t kv_cache_manager_block_size(const kv_cache_manager *m) { return m->block_size; }
int32_t kv_cache_manager_num_groups(const kv_cache_manager *m) { return m->num_groups; }
bool kv_cache_manager_caching_enabled(const kv_cache_manager *m) { return m->enable_caching; }
const block_pool *kv_cache_manager_pool(const kv_cache_manager *m) { return m->pool; }
void kv_cache_manager_reset_prefix_cache(kv_cache_manager *m) { block_pool_reset_cache(m->pool); }
int32_t kv_cache_manager_drop_lora(kv_cache_manager *m, int32_t lora_id) {
    return block_pool_drop_lora(m->pool, lora_id);
}

/* A sliding group whose cache keys hang on the anchor group's blocks. */
static bool anchored(const kv_cache_manager *m, int32_t g) { return m->window[g] > 0 && m->anchor >= 0; }

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

/* The key of q's block i in group g; parent: the previous block of the
 * chain, or for an anchored group the anchor group's block i. */
static block_pool_key key_of(const kv_cache_manager *m, const seq *q, int32_t g, int32_t i, int32_t parent,
                             uint64_t parent_gen) {
    return (block_pool_key){
        .hash = q->block_hashes[i],
        .group = g,
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

/* First block a sliding group g still needs when the next token to compute
 * is at position `next`: the block of position next - window + 1. */
static int32_t window_first_block(const kv_cache_manager *m, int32_t g, int32_t next) {
    int32_t first = next - m->window[g] + 1;
    return m->window[g] > 0 && first > 0 ? first / m->block_size : 0;
}

bool kv_cache_manager_block_hash(const kv_cache_manager *m, seq *q, int32_t i, block_hash *out) {
    if (i < 0 || i >= q->num_tokens / m->block_size) return false;
    ensure_hashes(m, q, i + 1);
    *out = q->block_hashes[i];
    return true;
}

int32_t kv_cache_manager_find_longest_cache_hit(kv_cache_manager *m, seq *q) {
    if (!m->enable_caching) return 0;
    int32_t n = q->num_tokens / m->block_size;
    ensure_hashes(m, q, n);
    /* chained groups (full attention, or sliding without an anchor): from the left */
    for (int32_t g = 0; g < m->num_groups; g++) {
        if (anchored(m, g)) continue;
        int32_t *table = seq_block_table(q, g), i = 0, parent = -1;
        uint64_t pgen = 0;
        for (; i < n; i++) {
            block_pool_key k = key_of(m, q, g, i, parent, pgen);
            int32_t id = block_pool_lookup(m->pool, &k);
            if (id < 0) break;
            table[i] = id;
            parent = id;
            pgen = block_pool_generation(m->pool, id);
        }
        n = i;
    }
    /* anchored groups: the blocks in the window of the first token to compute,
     * from the right; a miss at block i leaves at most i blocks hit */
    const int32_t *anchor = m->anchor >= 0 ? seq_block_table(q, m->anchor) : NULL;
    for (int32_t cand = n; cand > 0;) {
        int32_t next = kv_cache_manager_hit_tokens(m, q, cand), miss = -1;
        for (int32_t i = cand - 1; i >= 0 && miss < 0; i--) {
            bool needed = false;
            for (int32_t g = 0; g < m->num_groups && miss < 0; g++) {
                if (!anchored(m, g) || i < window_first_block(m, g, next)) continue;
                needed = true;
                block_pool_key k = key_of(m, q, g, i, anchor[i], block_pool_generation(m->pool, anchor[i]));
                int32_t id = block_pool_lookup(m->pool, &k);
                if (id < 0) miss = i;
                else seq_block_table(q, g)[i] = id;
            }
            if (!needed) break;
        }
        if (miss < 0) break;
        n = cand = miss;
    }
    for (int32_t g = 0; g < m->num_groups; g++)
        if (anchored(m, g))
            for (int32_t i = 0, lo = window_first_block(m, g, kv_cache_manager_hit_tokens(m, q, n)); i < lo; i++)
                seq_block_table(q, g)[i] = -1;
    return n;
}

/* Releases group g's blocks of q before table entry `upto` (sliding window:
 * no token from here on reads them), first to last so the window's own
 * blocks stay longest in the prefix cache. */
static void release_skipped(kv_cache_manager *m, seq *q, int32_t g, int32_t upto) {
    seq_kv_group *gs = &q->kv_groups[g];
    int32_t *table = seq_block_table(q, g);
    if (upto > q->num_blocks) upto = q->num_blocks;
    for (int32_t i = gs->num_skipped; i < upto; i++)
        if (table[i] >= 0) {
            block_pool_release(m->pool, table[i]);
            table[i] = -1;
        }
    if (upto > gs->num_skipped) gs->num_skipped = upto;
}

vllm_status kv_cache_manager_allocate_slots(kv_cache_manager *m, seq *q, int32_t num_new_tokens, int32_t num_hits,
                                            block_copy *copies, int32_t *num_copies) {
    int32_t bs = m->block_size, G = m->num_groups;
    /* first new token's position */
    int32_t start = q->num_computed_tokens + kv_cache_manager_hit_tokens(m, q, num_hits);
    int32_t total = start + num_new_tokens;
    int32_t have = q->num_blocks + num_hits;
    int32_t need = (total + bs - 1) / bs - have;
    if (need < 0) need = 0;
    /* sliding groups first give back what no token from `start` on can read */
    for (int32_t g = 0; g < G; g++)
        if (m->window[g] > 0) {
            int32_t lo = window_first_block(m, g, start);
            if (num_hits > 0 && q->num_blocks == 0) q->kv_groups[g].num_skipped = lo; /* entries -1 already */
            release_skipped(m, q, g, lo);
        }
    /* the first new token lands in an existing, partially filled block that
     * is shared, or in a hit block (the last token of a prompt that hit all
     * its blocks): either way others read it, so we write into a copy (in
     * every group) */
    int32_t cow_idx = start / bs, num_cow = 0;
    bool cow = false;
    if (num_new_tokens > 0 && start % bs != 0) {
        if (cow_idx >= q->num_blocks && cow_idx - q->num_blocks < num_hits) cow = true;
        else if (cow_idx < q->num_blocks)
            for (int32_t g = 0; g < G; g++) num_cow += block_pool_ref_count(m->pool, seq_block_table(q, g)[cow_idx]) > 1;
    }
    if (cow) num_cow = G;
    int32_t evictable = 0;
    for (int32_t g = 0; g < G; g++)
        for (int32_t i = q->num_blocks; i < q->num_blocks + num_hits; i++) {
            int32_t id = seq_block_table(q, g)[i];
            if (id >= 0 && block_pool_ref_count(m->pool, id) == 0) evictable++;
        }
    int32_t want = G * need + num_cow, avail = block_pool_num_free(m->pool) - evictable;
    if (want > avail) return vllm_error(VLLM_ERR_FULL, "kv cache: %d blocks needed, %d free", want, avail);
    /* seq_reserve sizes the tables for every committed and draft token, and
     * nothing schedules past them: a table too short is a bug that would
     * write past its end */
    if (have + need > q->max_blocks) abort();

    for (int32_t g = 0; g < G; g++)
        for (int32_t i = q->num_blocks; i < q->num_blocks + num_hits; i++) {
            int32_t id = seq_block_table(q, g)[i];
            if (id >= 0) block_pool_touch(m->pool, id);
        }
    q->num_blocks += num_hits;
    if (num_hits > 0) {
        q->num_cached_blocks = q->num_blocks;
        for (int32_t g = 0; g < G; g++) {
            int32_t last = seq_block_table(q, g)[q->num_blocks - 1];
            q->kv_groups[g].cache_parent = last;
            q->kv_groups[g].cache_parent_gen = block_pool_generation(m->pool, last);
        }
    }
    for (int32_t g = 0; g < G && num_cow; g++) {
        int32_t *src = &seq_block_table(q, g)[cow_idx], dst;
        if (!cow && block_pool_ref_count(m->pool, *src) <= 1) continue;
        block_pool_alloc(m->pool, 1, &dst);
        copies[(*num_copies)++] = (block_copy){*src, dst};
        block_pool_release(m->pool, *src);
        *src = dst;
    }
    if (need > 0) {
        for (int32_t g = 0; g < G; g++) block_pool_alloc(m->pool, need, seq_block_table(q, g) + q->num_blocks);
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
        /* chained groups: the canonical block for this content is an
         * identical cached one if there is one (our block stays a private
         * duplicate), else ours; later blocks chain to it, their K/V
         * depending only on the content */
        for (int32_t g = 0; g < m->num_groups; g++) {
            seq_kv_group *gs = &q->kv_groups[g];
            int32_t id = seq_block_table(q, g)[i];
            if (anchored(m, g) || gs->cache_parent == -2) continue;
            if (id < 0) { /* released uncached: no chain past it */
                gs->cache_parent = -2;
                continue;
            }
            block_pool_key k = key_of(m, q, g, i, i ? gs->cache_parent : -1, i ? gs->cache_parent_gen : 0);
            int32_t canon = block_pool_lookup(m->pool, &k);
            if (canon < 0) {
                canon = id;
                block_pool_cache(m->pool, canon, &k);
            }
            gs->cache_parent = canon;
            gs->cache_parent_gen = block_pool_generation(m->pool, canon);
        }
        /* anchored groups: keyed by the anchor's canonical block i, which
         * stands for the whole prefix up to the end of block i */
        if (m->anchor < 0 || q->kv_groups[m->anchor].cache_parent < 0) continue;
        int32_t anc = q->kv_groups[m->anchor].cache_parent;
        uint64_t anc_gen = q->kv_groups[m->anchor].cache_parent_gen;
        for (int32_t g = 0; g < m->num_groups; g++) {
            int32_t id = seq_block_table(q, g)[i];
            if (!anchored(m, g) || id < 0) continue;
            block_pool_key k = key_of(m, q, g, i, anc, anc_gen);
            if (block_pool_lookup(m->pool, &k) < 0) block_pool_cache(m->pool, id, &k);
        }
    }
    q->num_cached_blocks = full;
}

void kv_cache_manager_fork(kv_cache_manager *m, const seq *parent, seq *child) {
    for (int32_t g = 0; g < m->num_groups; g++) {
        const int32_t *from = seq_block_table(parent, g);
        int32_t *to = seq_block_table(child, g);
        for (int32_t i = 0; i < parent->num_blocks; i++) {
            if (from[i] >= 0) block_pool_touch(m->pool, from[i]);
            to[i] = from[i];
        }
        child->kv_groups[g] = parent->kv_groups[g];
    }
    child->num_blocks = parent->num_blocks;
    int32_t nh = parent->num_block_hashes;
    /* the child's tokens equal the parent's up to the prompt; later hashes may differ */
    int32_t same = parent->req->num_prompt_tokens / m->block_size;
    if (nh > same) nh = same;
    for (int32_t i = 0; i < nh; i++) child->block_hashes[i] = parent->block_hashes[i];
    child->num_block_hashes = nh;
    child->num_cached_blocks = parent->num_cached_blocks;
}

void kv_cache_manager_trim(kv_cache_manager *m, seq *q, int32_t num_blocks) {
    if (num_blocks < 0) num_blocks = 0;
    for (int32_t g = 0; g < m->num_groups; g++) {
        int32_t *table = seq_block_table(q, g);
        for (int32_t i = q->num_blocks - 1; i >= num_blocks; i--)
            if (table[i] >= 0) block_pool_release(m->pool, table[i]);
        if (q->kv_groups[g].num_skipped > num_blocks) q->kv_groups[g].num_skipped = num_blocks;
    }
    if (q->num_blocks > num_blocks) q->num_blocks = num_blocks;
}

void kv_cache_manager_free_blocks(kv_cache_manager *m, seq *q) {
    for (int32_t g = 0; g < m->num_groups; g++) {
        int32_t *table = seq_block_table(q, g);
        if (anchored(m, g)) /* the window's blocks are the ones a hit needs: freed last, evicted last */
            release_skipped(m, q, g, q->num_blocks);
        else
            for (int32_t i = q->num_blocks - 1; i >= 0; i--)
                if (table[i] >= 0) block_pool_release(m->pool, table[i]);
        q->kv_groups[g] = (seq_kv_group){.cache_parent = -1};
    }
    q->num_blocks = 0;
    q->num_cached_blocks = 0;
}

int64_t kv_cache_manager_empty_slots(const kv_cache_manager *m, const seq *q) {
    int64_t empty = 0;
    for (int32_t g = 0; g < m->num_groups; g++) {
        int64_t first = (int64_t)q->kv_groups[g].num_skipped * m->block_size;
        int64_t slots = (int64_t)q->num_blocks * m->block_size - first, held = q->num_computed_tokens - first;
        if (slots > held) empty += slots - (held > 0 ? held : 0);
    }
    return empty;
}

int32_t kv_cache_manager_num_held_blocks(const kv_cache_manager *m, const seq *q, int32_t g) {
    return q->num_blocks - q->kv_groups[g].num_skipped;
}

/*
 * block_pool.c - KV block reference counts, free queue (LRU) and prefix-cache
 * map. The design and the collision argument are in block_pool.h.
 *
 * Layout: one array of block records; the free queue links blocks by index
 * with a sentinel at index num_blocks; the map is a power-of-two bucket array
 * whose chains run through block.hash_next. Cached tokens live in one flat
 * (num_blocks, block_size) array. Everything is allocated at create time.
 */
#include "engine/block_pool.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct block_pool_salt {
    int32_t refs;
    size_t len;
    char bytes[];
};

block_pool_salt *block_pool_salt_create(const char *bytes, size_t len) {
    block_pool_salt *s = malloc(sizeof *s + len + 1);
    if (!s) return NULL;
    s->refs = 1;
    s->len = len;
    if (len) memcpy(s->bytes, bytes, len);
    s->bytes[len] = 0;
    return s;
}

block_pool_salt *block_pool_salt_ref(block_pool_salt *s) {
    if (s) s->refs++;
    return s;
}

void block_pool_salt_unref(block_pool_salt *s) {
    if (s && --s->refs == 0) free(s);
}

const char *block_pool_salt_bytes(const block_pool_salt *s, size_t *len) {
    *len = s->len;
    return s->bytes;
}

static bool salt_equal(const block_pool_salt *a, const block_pool_salt *b) {
    if (a == b) return true;
    if (!a || !b) return false;
    return a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

typedef struct pool_block {
    int32_t ref_cnt;
    int32_t prev, next;              /* free queue links; -1 when not queued */
    int32_t hash_next;               /* bucket chain; -1 ends it */
    bool cached;
    uint64_t gen;                    /* bumped on every reuse */
    /* the cache key, valid while cached */
    block_hash hash;
    int32_t group;
    int32_t parent;
    uint64_t parent_gen;
    int32_t lora_id;
    block_pool_salt *salt;           /* one reference while cached */
} pool_block;

struct block_pool {
    int32_t num_blocks, block_size;
    bool enable_caching;
    int32_t num_free;
    pool_block *blocks;              /* (num_blocks + 1): the last is the queue sentinel */
    int32_t *tokens;                 /* (num_blocks, block_size) cached tokens; NULL if caching off */
    int32_t *buckets;                /* (num_buckets) first block of each chain, -1 empty */
    uint64_t bucket_mask;
};

vllm_status block_pool_create(int32_t num_blocks, int32_t block_size, bool enable_caching,
                              block_pool **out) {
    *out = NULL;
    if (num_blocks < 1 || block_size < 1)
        return vllm_error(VLLM_ERR_INVALID, "block pool: num_blocks %d and block_size %d must be >= 1",
                          num_blocks, block_size);
    block_pool *p = calloc(1, sizeof *p);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "block pool: out of memory");
    p->num_blocks = num_blocks;
    p->block_size = block_size;
    p->enable_caching = enable_caching;
    p->blocks = calloc((size_t)num_blocks + 1, sizeof *p->blocks);
    size_t nb = 1;
    while (nb < (size_t)num_blocks) nb <<= 1;
    if (enable_caching) {
        p->tokens = malloc((size_t)num_blocks * (size_t)block_size * sizeof *p->tokens);
        p->buckets = malloc(nb * sizeof *p->buckets);
    }
    if (!p->blocks || (enable_caching && (!p->tokens || !p->buckets))) {
        block_pool_free(p);
        return vllm_error(VLLM_ERR_NOMEM, "block pool: out of memory for %d blocks", num_blocks);
    }
    p->bucket_mask = nb - 1;
    if (p->buckets)
        for (size_t i = 0; i < nb; i++) p->buckets[i] = -1;
    /* free queue 0, 1, ..., n-1 between the sentinel's links */
    int32_t sent = num_blocks;
    for (int32_t i = 0; i < num_blocks; i++) {
        p->blocks[i].prev = i == 0 ? sent : i - 1;
        p->blocks[i].next = i == num_blocks - 1 ? sent : i + 1;
        p->blocks[i].hash_next = -1;
    }
    p->blocks[sent].next = 0;
    p->blocks[sent].prev = num_blocks - 1;
    p->num_free = num_blocks;
    *out = p;
    return VLLM_OK;
}

void block_pool_free(block_pool *p) {
    if (!p) return;
    if (p->blocks)
        for (int32_t i = 0; i < p->num_blocks; i++)
            if (p->blocks[i].cached) block_pool_salt_unref(p->blocks[i].salt);
    free(p->blocks);
    free(p->tokens);
    free(p->buckets);
    free(p);
}

int32_t block_pool_num_blocks(const block_pool *p) { return p->num_blocks; }
int32_t block_pool_num_free(const block_pool *p) { return p->num_free; }
float block_pool_usage(const block_pool *p) {
    return (float)(p->num_blocks - p->num_free) / (float)p->num_blocks;
}
int32_t block_pool_ref_count(const block_pool *p, int32_t id) { return p->blocks[id].ref_cnt; }
uint64_t block_pool_generation(const block_pool *p, int32_t id) { return p->blocks[id].gen; }
bool block_pool_is_cached(const block_pool *p, int32_t id) { return p->blocks[id].cached; }

static void queue_unlink(block_pool *p, int32_t id) {
    pool_block *b = &p->blocks[id];
    p->blocks[b->prev].next = b->next;
    p->blocks[b->next].prev = b->prev;
    b->prev = b->next = -1;
    p->num_free--;
}

/* Links id in before pos (pos = sentinel appends). */
static void queue_insert_before(block_pool *p, int32_t pos, int32_t id) {
    pool_block *b = &p->blocks[id];
    b->prev = p->blocks[pos].prev;
    b->next = pos;
    p->blocks[b->prev].next = id;
    p->blocks[pos].prev = id;
    p->num_free++;
}

/* The bucket of (hash, group): groups caching the same tokens spread out. */
static int32_t *bucket_of(const block_pool *p, block_hash h, int32_t group) {
    return &p->buckets[(h.lo ^ (uint64_t)group * 0x9e3779b97f4a7c15ULL) & p->bucket_mask];
}

static void uncache(block_pool *p, int32_t id) {
    pool_block *b = &p->blocks[id];
    int32_t *link = bucket_of(p, b->hash, b->group);
    while (*link != id) link = &p->blocks[*link].hash_next;
    *link = b->hash_next;
    b->hash_next = -1;
    b->cached = false;
    block_pool_salt_unref(b->salt);
    b->salt = NULL;
}

vllm_status block_pool_alloc(block_pool *p, int32_t n, int32_t *ids) {
    if (n > p->num_free)
        return vllm_error(VLLM_ERR_FULL, "block pool: %d blocks wanted, %d free", n, p->num_free);
    int32_t sent = p->num_blocks;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = p->blocks[sent].next;
        queue_unlink(p, id);
        pool_block *b = &p->blocks[id];
        if (b->cached) uncache(p, id);
        b->gen++;
        b->ref_cnt = 1;
        ids[i] = id;
    }
    return VLLM_OK;
}

void block_pool_touch(block_pool *p, int32_t id) {
    pool_block *b = &p->blocks[id];
    if (b->ref_cnt++ == 0) queue_unlink(p, id);
}

void block_pool_release(block_pool *p, int32_t id) {
    pool_block *b = &p->blocks[id];
    if (--b->ref_cnt > 0) return;
    int32_t sent = p->num_blocks;
    queue_insert_before(p, b->cached ? sent : p->blocks[sent].next, id);
}

static bool key_matches(const block_pool *p, int32_t id, const block_pool_key *k) {
    const pool_block *b = &p->blocks[id];
    return b->hash.lo == k->hash.lo && b->hash.hi == k->hash.hi && b->group == k->group && b->parent == k->parent &&
           b->parent_gen == k->parent_gen && b->lora_id == k->lora_id &&
           salt_equal(b->salt, k->salt) &&
           memcmp(&p->tokens[(size_t)id * (size_t)p->block_size], k->tokens,
                  (size_t)p->block_size * sizeof *k->tokens) == 0;
}

int32_t block_pool_lookup(const block_pool *p, const block_pool_key *k) {
    if (!p->enable_caching) return -1;
    for (int32_t id = *bucket_of(p, k->hash, k->group); id >= 0; id = p->blocks[id].hash_next)
        if (key_matches(p, id, k)) return id;
    return -1;
}

bool block_pool_cache(block_pool *p, int32_t id, const block_pool_key *k) {
    pool_block *b = &p->blocks[id];
    if (!p->enable_caching || b->cached || block_pool_lookup(p, k) >= 0) return false;
    b->cached = true;
    b->hash = k->hash;
    b->group = k->group;
    b->parent = k->parent;
    b->parent_gen = k->parent_gen;
    b->lora_id = k->lora_id;
    b->salt = block_pool_salt_ref((block_pool_salt *)k->salt);
    memcpy(&p->tokens[(size_t)id * (size_t)p->block_size], k->tokens,
           (size_t)p->block_size * sizeof *k->tokens);
    int32_t *head = bucket_of(p, k->hash, k->group);
    b->hash_next = *head;
    *head = id;
    return true;
}

/* Moves free block id to the head of the free queue. */
static void queue_to_head(block_pool *p, int32_t id) {
    if (p->blocks[id].ref_cnt != 0 || p->blocks[id].prev < 0) return;
    queue_unlink(p, id);
    queue_insert_before(p, p->blocks[p->num_blocks].next, id);
}

int32_t block_pool_drop_lora(block_pool *p, int32_t lora_id) {
    int32_t dropped = 0;
    if (lora_id == 0) return 0;
    for (int32_t id = 0; id < p->num_blocks; id++)
        if (p->blocks[id].cached && p->blocks[id].parent < 0 && p->blocks[id].lora_id == lora_id) {
            uncache(p, id);
            queue_to_head(p, id);
            dropped++;
        }
    /* descendants: a cached block whose parent (same generation) is no longer cached */
    for (bool changed = dropped > 0; changed;) {
        changed = false;
        for (int32_t id = 0; id < p->num_blocks; id++) {
            pool_block *b = &p->blocks[id];
            if (!b->cached || b->parent < 0) continue;
            const pool_block *par = &p->blocks[b->parent];
            if (!par->cached && par->gen == b->parent_gen) {
                uncache(p, id);
                queue_to_head(p, id);
                dropped++;
                changed = true;
            }
        }
    }
    return dropped;
}

void block_pool_reset_cache(block_pool *p) {
    for (int32_t id = 0; id < p->num_blocks; id++)
        if (p->blocks[id].cached) uncache(p, id);
}

vllm_status block_pool_check(const block_pool *p) {
    int32_t sent = p->num_blocks, count = 0, prev = sent;
    for (int32_t id = p->blocks[sent].next; id != sent; id = p->blocks[id].next) {
        if (id < 0 || id >= p->num_blocks)
            return vllm_error(VLLM_ERR_INVALID, "free queue: bad link %d", id);
        if (p->blocks[id].prev != prev)
            return vllm_error(VLLM_ERR_INVALID, "free queue: block %d prev %d, expected %d", id,
                              p->blocks[id].prev, prev);
        if (p->blocks[id].ref_cnt != 0)
            return vllm_error(VLLM_ERR_INVALID, "free queue: block %d has ref_cnt %d", id,
                              p->blocks[id].ref_cnt);
        if (++count > p->num_blocks)
            return vllm_error(VLLM_ERR_INVALID, "free queue: cycle");
        prev = id;
    }
    if (count != p->num_free)
        return vllm_error(VLLM_ERR_INVALID, "free queue holds %d blocks, num_free says %d", count,
                          p->num_free);
    int32_t zero = 0, cached = 0;
    for (int32_t id = 0; id < p->num_blocks; id++) {
        const pool_block *b = &p->blocks[id];
        if (b->ref_cnt < 0)
            return vllm_error(VLLM_ERR_INVALID, "block %d has ref_cnt %d", id, b->ref_cnt);
        if (b->ref_cnt == 0) zero++;
        if ((b->ref_cnt == 0) != (b->prev >= 0))
            return vllm_error(VLLM_ERR_INVALID, "block %d: ref_cnt %d but %s the free queue", id,
                              b->ref_cnt, b->prev >= 0 ? "in" : "not in");
        if (b->cached) {
            cached++;
            int32_t j = *bucket_of(p, b->hash, b->group);
            while (j >= 0 && j != id) j = p->blocks[j].hash_next;
            if (j != id)
                return vllm_error(VLLM_ERR_INVALID, "cached block %d missing from its bucket", id);
        }
    }
    if (zero != p->num_free)
        return vllm_error(VLLM_ERR_INVALID, "%d blocks have ref_cnt 0, num_free says %d", zero,
                          p->num_free);
    if (p->buckets) {
        int32_t chained = 0;
        for (uint64_t bkt = 0; bkt <= p->bucket_mask; bkt++)
            for (int32_t id = p->buckets[bkt]; id >= 0; id = p->blocks[id].hash_next) {
                if (!p->blocks[id].cached || bucket_of(p, p->blocks[id].hash, p->blocks[id].group) != &p->buckets[bkt])
                    return vllm_error(VLLM_ERR_INVALID, "bucket %llu holds block %d wrongly",
                                      (unsigned long long)bkt, id);
                if (++chained > cached)
                    return vllm_error(VLLM_ERR_INVALID, "bucket chains longer than cached count");
            }
        if (chained != cached)
            return vllm_error(VLLM_ERR_INVALID, "%d cached blocks but %d in the map", cached, chained);
    }
    return VLLM_OK;
}

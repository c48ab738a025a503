/*
 * map.h - the one string-keyed hash map of the tree: intrusive, chained.
 *
 * Request ids -> requests (the engine core's and the output processor's
 * registries). An element embeds a map_node and is recovered with
 * map_entry(), as list.h's lists; the key is the element's own string,
 * borrowed for as long as the element is in the map:
 *
 *     typedef struct request { map_node by_id; char *id; ... } request;
 *     map requests; map_init(&requests);
 *     if ((rc = map_insert(&requests, &r->by_id, r->id)) != VLLM_OK) ...
 *     map_node *n = map_find(&requests, "cmpl-1");
 *     request *r = n ? map_entry(n, request, by_id) : NULL;
 *     map_remove(&requests, &r->by_id);
 *     map_deinit(&requests);           // frees the buckets, not the elements
 *
 * Buckets are a power of two and double when the map holds as many elements
 * as buckets (insert is the only call that allocates; it fails with
 * VLLM_ERR_NOMEM and no change). Keys are hashed with XXH3-64 once, at
 * insert. A key may be inserted once; map_insert does not check for
 * duplicates (look it up first). Not thread-safe.
 */
#ifndef VLLM_BASE_MAP_H
#define VLLM_BASE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct map_node {
    struct map_node *next;           /* chain in its bucket */
    const char *key;                 /* borrowed from the element */
    uint64_t hash;
} map_node;

typedef struct map {
    /* private */
    map_node **buckets;
    size_t num_buckets, size;
} map;

#define map_entry(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

void map_init(map *m);
void map_deinit(map *m);
static inline size_t map_size(const map *m) { return m->size; }

vllm_status map_insert(map *m, map_node *node, const char *key);
map_node *map_find(const map *m, const char *key);
/* node must be in m. */
void map_remove(map *m, map_node *node);

/* Iteration in no particular order; the current node may be removed:
 *     for (map_node *n = map_first(m), *next; n; n = next) { next = map_next(m, n); ... } */
map_node *map_first(const map *m);
map_node *map_next(const map *m, const map_node *node);

#endif

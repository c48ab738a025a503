/*
 * map.c - the intrusive string-keyed hash map (see map.h).
 */
#include "base/map.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"

void map_init(map *m) { memset(m, 0, sizeof *m); }

void map_deinit(map *m) {
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

static uint64_t key_hash(const char *key) { return XXH3_64bits(key, strlen(key)); }

static size_t bucket_of(const map *m, uint64_t hash) { return (size_t)hash & (m->num_buckets - 1); }

vllm_status map_insert(map *m, map_node *node, const char *key) {
    if (m->size + 1 > m->num_buckets) {
        size_t nb = m->num_buckets ? m->num_buckets * 2 : 64;
        map_node **b = calloc(nb, sizeof *b);
        if (!b) return vllm_error(VLLM_ERR_NOMEM, "out of memory growing a map to %zu buckets", nb);
        for (size_t i = 0; i < m->num_buckets; i++)
            for (map_node *x = m->buckets[i], *next; x; x = next) {
                next = x->next;
                size_t k = (size_t)x->hash & (nb - 1);
                x->next = b[k];
                b[k] = x;
            }
        free(m->buckets);
        m->buckets = b;
        m->num_buckets = nb;
    }
    node->key = key;
    node->hash = key_hash(key);
    map_node **head = &m->buckets[bucket_of(m, node->hash)];
    node->next = *head;
    *head = node;
    m->size++;
    return VLLM_OK;
}

map_node *map_find(const map *m, const char *key) {
    if (!m->size) return NULL;
    uint64_t h = key_hash(key);
    for (map_node *n = m->buckets[bucket_of(m, h)]; n; n = n->next)
        if (n->hash == h && !strcmp(n->key, key)) return n;
    return NULL;
}

void map_remove(map *m, map_node *node) {
    map_node **link = &m->buckets[bucket_of(m, node->hash)];
    while (*link && *link != node) link = &(*link)->next;
    if (!*link) return;
    *link = node->next;
    node->next = NULL;
    m->size--;
}

static map_node *first_from(const map *m, size_t bucket) {
    for (size_t i = bucket; i < m->num_buckets; i++)
        if (m->buckets[i]) return m->buckets[i];
    return NULL;
}

map_node *map_first(const map *m) { return m->size ? first_from(m, 0) : NULL; }

map_node *map_next(const map *m, const map_node *node) {
    if (node->next) return node->next;
    return first_from(m, bucket_of(m, node->hash) + 1);
}

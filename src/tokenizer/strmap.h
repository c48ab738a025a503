/*
 * strmap.h - a byte-string -> int32 hash map for vocabularies (128K-150K keys).
 *
 * Open addressing with linear probing over a power-of-two slot array; each
 * slot holds an entry index + 1 (0 = empty). Keys are copied into one byte
 * pool, so a vocabulary is three allocations, not one per token. Keys may
 * contain any bytes, NUL included. Not thread-safe for writers; any number of
 * readers once built. strmap_init/strmap_deinit; deinit of a zeroed map is a
 * no-op.
 */
#ifndef VLLM_TOKENIZER_STRMAP_H
#define VLLM_TOKENIZER_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct strmap_entry {
    uint64_t hash;
    uint32_t off, len; /* key bytes at pool + off */
    int32_t value;
} strmap_entry;

typedef struct strmap {
    uint32_t *slots; /* mask + 1 slots */
    uint32_t mask;
    strmap_entry *entries;
    uint32_t n, cap;
    char *pool;
    size_t pool_len, pool_cap;
} strmap;

vllm_status strmap_init(strmap *m, uint32_t expected);
void strmap_deinit(strmap *m);
/* The value stored for key, or -1. */
int32_t strmap_get(const strmap *m, const char *key, size_t len);
/* Inserts key -> value, or overwrites the value of an existing key. */
vllm_status strmap_put(strmap *m, const char *key, size_t len, int32_t value);

#endif

/* strmap.c - see strmap.h. Hash: XXH3-64 (libxxhash). */
#include "tokenizer/strmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

vllm_status strmap_init(strmap *m, uint32_t expected) {
    memset(m, 0, sizeof *m);
    uint32_t nslots = pow2_at_least((uint64_t)expected * 2);
    m->slots = calloc(nslots, sizeof *m->slots);
    m->cap = expected > 16 ? expected : 16;
    m->entries = malloc(m->cap * sizeof *m->entries);
    m->pool_cap = (size_t)m->cap * 8;
    m->pool = malloc(m->pool_cap);
    if (!m->slots || !m->entries || !m->pool) {
        strmap_deinit(m);
        return vllm_error(VLLM_ERR_NOMEM, "strmap: out of memory for %u keys", expected);
    }
    m->mask = nslots - 1;
    return VLLM_OK;
}

void strmap_deinit(strmap *m) {
    free(m->slots);
    free(m->entries);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static uint32_t *find_slot(const strmap *m, const char *key, size_t len, uint64_t h) {
    uint32_t i = (uint32_t)h & m->mask;
    for (;;) {
        uint32_t *s = &m->slots[i];
        if (*s == 0) return s;
        const strmap_entry *e = &m->entries[*s - 1];
        if (e->hash == h && e->len == len && memcmp(m->pool + e->off, key, len) == 0) return s;
        i = (i + 1) & m->mask;
    }
}

int32_t strmap_get(const strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint32_t *s = find_slot(m, key, len, XXH3_64bits(key, len));
    return *s ? m->entries[*s - 1].value : -1;
}

static vllm_status grow_slots(strmap *m) {
    uint32_t nslots = (m->mask + 1) * 2;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return vllm_error(VLLM_ERR_NOMEM, "strmap: out of memory growing to %u slots", nslots);
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = (uint32_t)m->entries[e].hash & (nslots - 1);
        while (slots[i]) i = (i + 1) & (nslots - 1);
        slots[i] = e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = nslots - 1;
    return VLLM_OK;
}

vllm_status strmap_put(strmap *m, const char *key, size_t len, int32_t value) {
    if (len > UINT32_MAX) return vllm_error(VLLM_ERR_INVALID, "strmap: key of %zu bytes", len);
    uint64_t h = XXH3_64bits(key, len);
    uint32_t *s = find_slot(m, key, len, h);
    if (*s) {
        m->entries[*s - 1].value = value;
        return VLLM_OK;
    }
    if ((uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1) {
        vllm_status rc = grow_slots(m);
        if (rc) return rc;
        s = find_slot(m, key, len, h);
    }
    if (m->n == m->cap) {
        uint32_t cap = m->cap * 2;
        strmap_entry *e = realloc(m->entries, cap * sizeof *e);
        if (!e) return vllm_error(VLLM_ERR_NOMEM, "strmap: out of memory for %u keys", cap);
        m->entries = e;
        m->cap = cap;
    }
    if (m->pool_len + len > m->pool_cap || m->pool_len + len > UINT32_MAX) {
        size_t cap = m->pool_cap * 2 + len;
        if (cap > UINT32_MAX) cap = UINT32_MAX;
        if (m->pool_len + len > cap)
            return vllm_error(VLLM_ERR_INVALID, "strmap: key pool over 4 GiB");
        char *p = realloc(m->pool, cap);
        if (!p) return vllm_error(VLLM_ERR_NOMEM, "strmap: out of memory for key pool");
        m->pool = p;
        m->pool_cap = cap;
    }
    if (len) memcpy(m->pool + m->pool_len, key, len);
    m->entries[m->n] = (strmap_entry){.hash = h, .off = (uint32_t)m->pool_len, .len = (uint32_t)len,
                                      .value = value};
    m->pool_len += len;
    *s = ++m->n;
    return VLLM_OK;
}

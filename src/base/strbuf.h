/*
 * strbuf.h - a growable, always NUL-terminated byte buffer (buf.h's growth
 * for text): the tokenizer's and template engine's per-call scratch.
 * Zero-initialise; free(b.s) when done. Out of memory is an error value,
 * never an abort.
 */
#ifndef VLLM_BASE_STRBUF_H
#define VLLM_BASE_STRBUF_H

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

static inline vllm_status sb_reserve(strbuf *b, size_t extra) {
    return buf_grow((void **)&b->s, &b->cap, b->len + extra + 1, 1);
}

static inline vllm_status sb_add(strbuf *b, const char *s, size_t n) {
    vllm_status rc = sb_reserve(b, n);
    if (rc) return rc;
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return VLLM_OK;
}

static inline vllm_status sb_set(strbuf *b, const char *s, size_t n) {
    b->len = 0;
    return sb_add(b, s, n);
}

/* out = s[0..n) with every non-overlapping pat (left to right) replaced by
 * rep, like JavaScript's replaceAll with a string pattern. */
static inline vllm_status sb_replace_all(strbuf *out, const char *s, size_t n, const char *pat, size_t pl,
                                  const char *rep, size_t rl) {
    out->len = 0;
    vllm_status rc = sb_reserve(out, n);
    if (rc) return rc;
    size_t i = 0;
    while (i < n) {
        if (pl && i + pl <= n && memcmp(s + i, pat, pl) == 0) {
            if ((rc = sb_add(out, rep, rl))) return rc;
            i += pl;
        } else {
            if ((rc = sb_add(out, s + i, 1))) return rc;
            i++;
        }
    }
    return sb_add(out, "", 0);
}

#endif

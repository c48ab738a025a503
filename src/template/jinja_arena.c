/*
 * jinja_arena.c - the bump allocator behind templates and renders, and the
 * growable byte buffer built on it.
 *
 * Chunks come from malloc and are only released together. A render arena has
 * a byte limit: once reached, every allocation fails and the interpreter
 * unwinds with a "memory limit" error, which bounds what a hostile
 * conversation (or a template that doubles a string in a loop) can take.
 * Buffers grow by doubling inside the arena, so the abandoned copies cost at
 * most as much again as the final one.
 */
#include "template/jinja_internal.h"

#include <stdlib.h>
#include <string.h>

struct jinja_arena_chunk {
    jinja_arena_chunk *next;
    size_t cap, used;
    max_align_t data[];
};

enum { ARENA_CHUNK_MIN = 64 * 1024 };

void *jinja_arena_alloc(jinja_arena *a, size_t n) {
    const size_t align = sizeof(max_align_t);
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + align - 1) & ~(align - 1);
    jinja_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_MIN ? n : ARENA_CHUNK_MIN;
        if (a->limit && a->total + cap > a->limit) {
            if (a->total + n > a->limit) { /* not even an exact-size chunk fits */
                a->over_limit = true;
                return NULL;
            }
            cap = n;
        }
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

char *jinja_arena_strndup(jinja_arena *a, const char *s, size_t n) {
    char *p = jinja_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jinja_arena_free(jinja_arena *a) {
    jinja_arena_chunk *c = a->head;
    while (c) {
        jinja_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

void jinja_buf_init(jinja_buf *b, jinja_arena *a, size_t max) {
    b->arena = a;
    b->p = NULL;
    b->len = b->cap = 0;
    b->max = max;
    b->failed = false;
}

bool jinja_buf_append(jinja_buf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (n > b->max || b->len > b->max - n) {
        b->failed = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = jinja_arena_alloc(b->arena, cap);
        if (!p) {
            b->failed = true;
            return false;
        }
        if (b->len) memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool jinja_buf_appendc(jinja_buf *b, char c) { return jinja_buf_append(b, &c, 1); }

/*
 * bpe.c - BPE merges over a pre-token. See bpe.h for the design; the loop
 * mirrors transformers.js BPE.bpe(): priority = (merge rank, position of the
 * left symbol's first character), stale heap entries skipped on pop.
 */
#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/utf8.h"

typedef struct bpe_heap_item {
    uint32_t rank;
    int32_t left, right; /* node indices (left = position of its first char) */
    int32_t sl, sr;      /* their symbols when pushed: a mismatch means stale */
} bpe_heap_item;

vllm_status bpe_ids_push(bpe_ids *iv, int32_t id) {
    if (iv->n == iv->cap) {
        size_t cap = iv->cap ? iv->cap * 2 : 64;
        int32_t *v = realloc(iv->v, cap * sizeof *v);
        if (!v) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for %zu ids", cap);
        iv->v = v;
        iv->cap = cap;
    }
    iv->v[iv->n++] = id;
    return VLLM_OK;
}

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

vllm_status bpe_init_merges(bpe *b, size_t n_merges) {
    uint64_t n = 16;
    while (n < (uint64_t)n_merges * 2) n <<= 1;
    if (n > UINT32_MAX) return vllm_error(VLLM_ERR_INVALID, "tokenizer.json: %zu merges", n_merges);
    b->pair_key = calloc(n, sizeof *b->pair_key);
    b->pair_rank = malloc(n * sizeof *b->pair_rank);
    b->pair_result = malloc(n * sizeof *b->pair_result);
    if (!b->pair_key || !b->pair_rank || !b->pair_result)
        return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n_merges);
    b->pair_mask = (uint32_t)(n - 1);
    return VLLM_OK;
}

/* The symbol of a string, adding a synthetic one if it is not a token. */
static vllm_status sym_of(bpe *b, const char *s, size_t len, int32_t *out) {
    int32_t id = strmap_get(&b->syms, s, len);
    if (id < 0) {
        id = b->n_syms++;
        vllm_status rc = strmap_put(&b->syms, s, len, id);
        if (rc) return rc;
    }
    *out = id;
    return VLLM_OK;
}

vllm_status bpe_add_merge(bpe *b, const char *l, size_t ll, const char *r, size_t rl,
                          uint32_t rank) {
    int32_t sl, sr, res;
    vllm_status rc;
    char stackbuf[256], *cat = ll + rl <= sizeof stackbuf ? stackbuf : malloc(ll + rl);
    if (!cat) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(cat, l, ll);
    memcpy(cat + ll, r, rl);
    if ((rc = sym_of(b, l, ll, &sl)) || (rc = sym_of(b, r, rl, &sr)) ||
        (rc = sym_of(b, cat, ll + rl, &res)))
        goto done;
    uint64_t key = ((uint64_t)(uint32_t)sl << 32 | (uint32_t)sr) + 1;
    uint32_t i = (uint32_t)pair_hash(key) & b->pair_mask;
    while (b->pair_key[i] && b->pair_key[i] != key) i = (i + 1) & b->pair_mask;
    if (b->pair_key[i] == key) goto done; /* duplicate merge: the first (lowest) rank wins */
    b->pair_key[i] = key;
    b->pair_rank[i] = rank;
    b->pair_result[i] = res;
done:
    if (cat != stackbuf) free(cat);
    return rc;
}

void bpe_deinit(bpe *b) {
    strmap_deinit(&b->syms);
    free(b->pair_key);
    free(b->pair_rank);
    free(b->pair_result);
    memset(b, 0, sizeof *b);
}

/* Rank and result of merging (l, r), or false. */
static bool pair_lookup(const bpe *b, int32_t l, int32_t r, uint32_t *rank, int32_t *res) {
    if (l < 0 || r < 0 || !b->pair_key) return false;
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    uint32_t i = (uint32_t)pair_hash(key) & b->pair_mask;
    while (b->pair_key[i]) {
        if (b->pair_key[i] == key) {
            *rank = b->pair_rank[i];
            *res = b->pair_result[i];
            return true;
        }
        i = (i + 1) & b->pair_mask;
    }
    return false;
}

static bool heap_less(const bpe_heap_item *a, const bpe_heap_item *c) {
    return a->rank != c->rank ? a->rank < c->rank : a->left < c->left;
}

static void heap_push(bpe_scratch *s, bpe_heap_item it) {
    size_t i = s->heap_len++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = it;
}

static bpe_heap_item heap_pop(bpe_scratch *s) {
    bpe_heap_item top = s->heap[0], last = s->heap[--s->heap_len];
    size_t i = 0, n = s->heap_len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void push_pair(const bpe *b, bpe_scratch *s, int32_t left) {
    int32_t right = s->next[left];
    uint32_t rank;
    int32_t res;
    if (right < 0 || !pair_lookup(b, s->sym[left], s->sym[right], &rank, &res)) return;
    heap_push(s, (bpe_heap_item){rank, left, right, s->sym[left], s->sym[right]});
}

static vllm_status scratch_reserve(bpe_scratch *s, size_t n) {
    if (n > s->cap) {
        size_t cap = n < 64 ? 64 : n;
        int32_t *sym = realloc(s->sym, cap * sizeof *sym);
        if (sym) s->sym = sym;
        int32_t *prev = realloc(s->prev, cap * sizeof *prev);
        if (prev) s->prev = prev;
        int32_t *next = realloc(s->next, cap * sizeof *next);
        if (next) s->next = next;
        uint32_t *start = realloc(s->start, cap * sizeof *start);
        if (start) s->start = start;
        uint32_t *end = realloc(s->end, cap * sizeof *end);
        if (end) s->end = end;
        if (!sym || !prev || !next || !start || !end)
            return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for a %zu-char word", n);
        s->cap = cap;
    }
    /* each merge pushes at most two pairs: n - 1 initial + 2 (n - 1) */
    if (3 * n > s->heap_cap) {
        size_t cap = 3 * n < 192 ? 192 : 3 * n;
        bpe_heap_item *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for a %zu-char word", n);
        s->heap = h;
        s->heap_cap = cap;
    }
    return VLLM_OK;
}

/* Emits a final symbol: its id, or byte fallback, or unk. */
static vllm_status emit_symbol(const bpe *b, int32_t sym, const char *str, size_t len,
                               bpe_ids *out) {
    if (sym >= 0 && sym < b->n_real) return bpe_ids_push(out, sym);
    if (b->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < len; i++) all = all && b->byte_id[(uint8_t)str[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < len; i++) {
                vllm_status rc = bpe_ids_push(out, b->byte_id[(uint8_t)str[i]]);
                if (rc) return rc;
            }
            return VLLM_OK;
        }
    }
    if (b->unk_id < 0)
        return vllm_error(VLLM_ERR_INVALID,
                          "tokenizer: '%.*s' is not in the vocabulary and the model has no unk_token",
                          (int)(len > 40 ? 40 : len), str);
    return bpe_ids_push(out, b->unk_id);
}

vllm_status bpe_encode_word(const bpe *b, bpe_scratch *s, const char *word, size_t len,
                            bpe_ids *out) {
    if (len == 0) return VLLM_OK;
    if (b->ignore_merges) {
        int32_t id = strmap_get(&b->syms, word, len);
        if (id >= 0 && id < b->n_real) return bpe_ids_push(out, id);
    }
    vllm_status rc = scratch_reserve(s, len); /* chars <= bytes */
    if (rc) return rc;
    int32_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = (size_t)utf8_len((uint8_t)word[i]);
        if (cl > len - i) cl = len - i;
        s->sym[n] = strmap_get(&b->syms, word + i, cl);
        s->start[n] = (uint32_t)i;
        s->end[n] = (uint32_t)(i + cl);
        s->prev[n] = n - 1;
        s->next[n] = n + 1;
        n++;
        i += cl;
    }
    s->next[n - 1] = -1;
    s->heap_len = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(b, s, i);
    while (s->heap_len) {
        bpe_heap_item it = heap_pop(s);
        int32_t l = it.left, r = it.right;
        /* stale: l or r merged away or changed since the push */
        if (s->next[l] != r || s->sym[l] != it.sl || s->sym[r] != it.sr || s->prev[r] != l) continue;
        uint32_t rank;
        int32_t res;
        pair_lookup(b, it.sl, it.sr, &rank, &res);
        s->sym[l] = res;
        s->end[l] = s->end[r];
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        s->prev[r] = -2; /* dead */
        s->next[r] = -2;
        if (s->prev[l] >= 0) push_pair(b, s, s->prev[l]);
        push_pair(b, s, l);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        rc = emit_symbol(b, s->sym[i], word + s->start[i], s->end[i] - s->start[i], out);
        if (rc) return rc;
    }
    return VLLM_OK;
}

void bpe_scratch_deinit(bpe_scratch *s) {
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->start);
    free(s->end);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

/*
 * matcher.c - compiled grammars and matchers: an Earley parser over bytes,
 * and the token mask as a walk of the vocabulary's trie against it.
 *
 * State. An Earley set per byte of the output so far, all kept (set k =
 * items[set_start[k] .. set_start[k + 1])): completion needs the older sets
 * anyway, and keeping them makes rollback a truncation. Item = (position in
 * g->syms, origin set). After token j the matcher had tok_sets[j] sets.
 *
 * Pushing a byte: scan the top set's items whose next symbol is a byte set
 * holding the byte, then close the new set (predict, complete). Nullable
 * rules use Aycock and Horspool's fix: predicting a nullable N also moves
 * the predicting item over N, so a completion whose origin is the set being
 * built never has to look back at it. Left recursion costs nothing (a rule
 * is predicted once per set); right recursion costs a chain of completions.
 * Every production is productive (gbnf.c), so a non-empty set means the
 * bytes so far are a prefix of some sentence.
 *
 * The mask (st_matcher_fill_mask): a preorder walk of the token trie, with
 * the parser's set stack following the walk's path: a node at depth d
 * truncates the stack back to the current state + d - 1 bytes, checks its
 * byte against the parent set's allowed bytes (the union of its terminals,
 * kept per set), and pushes it only when the node has children. A rejected
 * byte skips the whole subtree. So a mask costs one byte push per inner
 * trie node whose prefix the grammar accepts, and nothing for leaves.
 *
 * EOS ids are allowed exactly when the grammar can end; accepting one
 * terminates the matcher (it is kept as a token, so rollback undoes it).
 */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "structured/st_internal.h"

typedef struct st_item {
    uint32_t pos, origin;
} st_item;

typedef struct hslot {
    uint64_t key;
    uint32_t stamp;
} hslot;

struct st_matcher {
    st_grammar *g;
    st_item *items;
    size_t n_items, cap_items;
    uint32_t *set_start;      /* n_sets + 1 entries */
    st_bset *allowed;         /* per set: the bytes its terminals accept */
    size_t n_sets, cap_sets, cap_allowed;
    uint32_t *tok_sets;       /* sets after each accepted token */
    int32_t *tok_ids;
    size_t n_toks, cap_toks, cap_tok_ids;
    /* scratch of the set being built */
    hslot *hash;
    size_t hash_cap;
    uint32_t stamp;
    uint32_t *pred_stamp;     /* per rule: the stamp of the set that predicted it */
    vllm_status oom;          /* a failed allocation inside fill_mask / accept */
};

/* ---- grammars -------------------------------------------------------------------- */

vllm_status st_compile_gbnf(const char *gbnf, size_t len, const st_vocab *v, st_grammar **out) {
    *out = NULL;
    st_grammar *g = calloc(1, sizeof *g);
    if (!g) return vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
    vllm_status rc = st_gbnf_parse(gbnf, len, g);
    if (rc) {
        free(g);
        return rc;
    }
    atomic_init(&g->refs, 1);
    g->v = v;
    *out = g;
    return VLLM_OK;
}

st_grammar *st_grammar_ref(st_grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void st_grammar_unref(st_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    st_grammar_deinit(g);
    free(g);
}

/* ---- the Earley sets ------------------------------------------------------------- */

static inline uint64_t item_key(uint32_t pos, uint32_t origin) { return ((uint64_t)pos << 32) | origin; }

static inline size_t hash_of(uint64_t k, size_t cap) {
    k *= 0x9e3779b97f4a7c15ull;
    return (size_t)(k >> 32) & (cap - 1);
}

/* Starts a new set at the top: a fresh dedup generation. */
static void set_begin(st_matcher *m) {
    if (++m->stamp == 0) { /* wrapped: clear the stamps */
        for (size_t k = 0; k < m->hash_cap; k++) m->hash[k].stamp = 0;
        for (uint32_t r = 0; r < m->g->n_rules; r++) m->pred_stamp[r] = 0;
        m->stamp = 1;
    }
}

static bool hash_grow(st_matcher *m, size_t set_from) {
    size_t cap = m->hash_cap * 2;
    hslot *h = calloc(cap, sizeof *h);
    if (!h) return false;
    for (size_t j = set_from; j < m->n_items; j++) {
        uint64_t key = item_key(m->items[j].pos, m->items[j].origin);
        size_t k = hash_of(key, cap);
        while (h[k].stamp == m->stamp) k = (k + 1) & (cap - 1);
        h[k] = (hslot){key, m->stamp};
    }
    free(m->hash);
    m->hash = h;
    m->hash_cap = cap;
    return true;
}

/* Adds (pos, origin) to the set being built (which starts at set_from)
 * unless it is there. false on out of memory. */
static bool add_item(st_matcher *m, size_t set_from, uint32_t pos, uint32_t origin) {
    if ((m->n_items - set_from + 1) * 2 > m->hash_cap && !hash_grow(m, set_from)) return false;
    uint64_t key = item_key(pos, origin);
    size_t k = hash_of(key, m->hash_cap);
    while (m->hash[k].stamp == m->stamp) {
        if (m->hash[k].key == key) return true;
        k = (k + 1) & (m->hash_cap - 1);
    }
    if (m->n_items + 1 > m->cap_items &&
        buf_grow((void **)&m->items, &m->cap_items, m->n_items + 1, sizeof *m->items) != VLLM_OK)
        return false;
    m->hash[k] = (hslot){key, m->stamp};
    m->items[m->n_items++] = (st_item){pos, origin};
    return true;
}

/* Predicts, completes and scans nothing: closes the set `cur` being built
 * from items[set_from ..]. */
static bool closure(st_matcher *m, uint32_t cur, size_t set_from) {
    const st_grammar *g = m->g;
    for (size_t j = set_from; j < m->n_items; j++) {
        st_item it = m->items[j];
        uint32_t s = g->syms[it.pos];
        uint32_t kind = ST_SYM_KIND(s), id = ST_SYM_ID(s);
        if (kind == ST_SYM_NT) {
            if (m->pred_stamp[id] != m->stamp) {
                m->pred_stamp[id] = m->stamp;
                for (uint32_t p = g->prod_off[id]; p < g->prod_off[id + 1]; p++)
                    if (!add_item(m, set_from, g->prods[p], cur)) return false;
            }
            if (g->nullable[id] && !add_item(m, set_from, it.pos + 1, it.origin)) return false;
        } else if (kind == ST_SYM_END && it.origin != cur) {
            uint32_t want = ST_SYM(ST_SYM_NT, id);
            for (uint32_t q = m->set_start[it.origin]; q < m->set_start[it.origin + 1]; q++) {
                st_item o = m->items[q];
                if (g->syms[o.pos] == want && !add_item(m, set_from, o.pos + 1, o.origin)) return false;
            }
        }
    }
    return true;
}

static bool sets_reserve(st_matcher *m, size_t n_sets) {
    return buf_grow((void **)&m->set_start, &m->cap_sets, n_sets + 1, sizeof *m->set_start) == VLLM_OK &&
           buf_grow((void **)&m->allowed, &m->cap_allowed, n_sets + 1, sizeof *m->allowed) == VLLM_OK;
}

/* The set just closed becomes the top: its end and allowed bytes. */
static void set_end(st_matcher *m) {
    size_t k = m->n_sets++;
    m->set_start[m->n_sets] = (uint32_t)m->n_items;
    st_bset a = {{0}};
    const st_grammar *g = m->g;
    for (uint32_t j = m->set_start[k]; j < m->n_items; j++) {
        uint32_t s = g->syms[m->items[j].pos];
        if (ST_SYM_KIND(s) == ST_SYM_T) {
            const st_bset *t = &g->terms[ST_SYM_ID(s)];
            a.w[0] |= t->w[0], a.w[1] |= t->w[1], a.w[2] |= t->w[2], a.w[3] |= t->w[3];
        }
    }
    m->allowed[k] = a;
}

static void truncate_sets(st_matcher *m, size_t n_sets) {
    m->n_sets = n_sets;
    m->n_items = m->set_start[n_sets];
}

/* Pushes byte b: false (state unchanged) if the grammar rejects it here or
 * memory ran out (m->oom set). */
static bool push_byte(st_matcher *m, unsigned b) {
    size_t top = m->n_sets - 1;
    if (!st_bset_has(&m->allowed[top], b)) return false;
    if (!sets_reserve(m, m->n_sets + 1)) goto oom;
    set_begin(m);
    size_t from = m->n_items;
    const st_grammar *g = m->g;
    for (uint32_t j = m->set_start[top]; j < m->set_start[top + 1]; j++) {
        st_item it = m->items[j];
        uint32_t s = g->syms[it.pos];
        if (ST_SYM_KIND(s) == ST_SYM_T && st_bset_has(&g->terms[ST_SYM_ID(s)], b) &&
            !add_item(m, from, it.pos + 1, it.origin))
            goto oom;
    }
    if (!closure(m, (uint32_t)m->n_sets, from)) goto oom;
    set_end(m);
    return true;
oom:
    m->n_items = m->set_start[m->n_sets];
    m->oom = vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    return false;
}

static bool top_can_end(const st_matcher *m) {
    const st_grammar *g = m->g;
    uint32_t want = ST_SYM(ST_SYM_END, g->root);
    size_t top = m->n_sets - 1;
    for (uint32_t j = m->set_start[top]; j < m->set_start[top + 1]; j++)
        if (m->items[j].origin == 0 && g->syms[m->items[j].pos] == want) return true;
    return false;
}

/* ---- matchers ---------------------------------------------------------------------- */

static vllm_status scratch_init(st_matcher *m) {
    m->hash_cap = 256;
    m->hash = calloc(m->hash_cap, sizeof *m->hash);
    m->pred_stamp = calloc(m->g->n_rules + 1, sizeof *m->pred_stamp);
    if (!m->hash || !m->pred_stamp) return vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    return VLLM_OK;
}

void st_matcher_free(st_matcher *m) {
    if (!m) return;
    st_grammar_unref(m->g);
    free(m->items);
    free(m->set_start);
    free(m->allowed);
    free(m->tok_sets);
    free(m->tok_ids);
    free(m->hash);
    free(m->pred_stamp);
    free(m);
}

vllm_status st_matcher_new(st_grammar *g, st_matcher **out) {
    *out = NULL;
    st_matcher *m = calloc(1, sizeof *m);
    if (!m) return vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    m->g = st_grammar_ref(g);
    vllm_status rc = scratch_init(m);
    if (!rc && !sets_reserve(m, 64)) rc = vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    if (rc) {
        st_matcher_free(m);
        return rc;
    }
    /* set 0: root predicted */
    m->set_start[0] = 0;
    set_begin(m);
    m->pred_stamp[g->root] = m->stamp;
    bool ok = true;
    for (uint32_t p = g->prod_off[g->root]; p < g->prod_off[g->root + 1] && ok; p++)
        ok = add_item(m, 0, g->prods[p], 0);
    if (!ok || !closure(m, 0, 0)) {
        st_matcher_free(m);
        return vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    }
    set_end(m);
    *out = m;
    return VLLM_OK;
}

vllm_status st_matcher_fork(const st_matcher *m, st_matcher **out) {
    *out = NULL;
    st_matcher *f = calloc(1, sizeof *f);
    if (!f) return vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    f->g = st_grammar_ref(m->g);
    vllm_status rc = scratch_init(f);
    if (!rc && (!sets_reserve(f, m->n_sets) ||
                buf_grow((void **)&f->items, &f->cap_items, m->n_items + 1, sizeof *f->items) ||
                buf_grow((void **)&f->tok_sets, &f->cap_toks, m->n_toks + 1, sizeof *f->tok_sets) ||
                buf_grow((void **)&f->tok_ids, &f->cap_tok_ids, m->n_toks + 1, sizeof *f->tok_ids)))
        rc = vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
    if (rc) {
        st_matcher_free(f);
        return rc;
    }
    memcpy(f->items, m->items, m->n_items * sizeof *m->items);
    memcpy(f->set_start, m->set_start, (m->n_sets + 1) * sizeof *m->set_start);
    memcpy(f->allowed, m->allowed, m->n_sets * sizeof *m->allowed);
    if (m->n_toks) {
        memcpy(f->tok_sets, m->tok_sets, m->n_toks * sizeof *m->tok_sets);
        memcpy(f->tok_ids, m->tok_ids, m->n_toks * sizeof *m->tok_ids);
    }
    f->n_items = m->n_items;
    f->n_sets = m->n_sets;
    f->n_toks = m->n_toks;
    *out = f;
    return VLLM_OK;
}

bool st_matcher_is_terminated(const st_matcher *m) {
    return m->n_toks > 0 && m->g->v->kind[m->tok_ids[m->n_toks - 1]] == ST_TOK_EOS;
}

bool st_matcher_can_end(const st_matcher *m) { return top_can_end(m); }

static void set_eos_bits(const st_matcher *m, uint32_t *mask) {
    const st_vocab *v = m->g->v;
    for (int32_t k = 0; k < v->n_eos; k++) mask[v->eos[k] >> 5] |= 1u << (v->eos[k] & 31);
}

void st_matcher_fill_mask(st_matcher *m, uint32_t *mask) {
    const st_vocab *v = m->g->v;
    memset(mask, 0, (size_t)st_mask_words(v) * sizeof *mask);
    if (st_matcher_is_terminated(m)) {
        set_eos_bits(m, mask);
        return;
    }
    size_t base = m->n_sets;
    if (!sets_reserve(m, base + v->max_depth + 1)) {
        m->oom = vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
        return;  /* nothing allowed: the request fails on the empty mask */
    }
    const uint8_t *nbyte = v->node_byte;
    const uint32_t *ndepth = v->node_depth, *nend = v->node_end, *ntok = v->node_tok;
    for (uint32_t i = 0; i < (uint32_t)v->n_nodes;) {
        size_t want = base + ndepth[i] - 1;
        if (m->n_sets != want) truncate_sets(m, want);
        unsigned b = nbyte[i];
        if (!st_bset_has(&m->allowed[want - 1], b)) {
            i = nend[i];
            continue;
        }
        for (uint32_t k = ntok[i]; k < ntok[i + 1]; k++) {
            int32_t id = v->toks[k];
            mask[id >> 5] |= 1u << (id & 31);
        }
        if (nend[i] > i + 1) {
            if (!push_byte(m, b) || st_bset_empty(&m->allowed[m->n_sets - 1])) {
                i = nend[i];
                continue;
            }
        }
        i++;
    }
    truncate_sets(m, base);
    if (top_can_end(m)) set_eos_bits(m, mask);
}

static bool push_token(st_matcher *m, int32_t id) {
    if (buf_grow((void **)&m->tok_sets, &m->cap_toks, m->n_toks + 1, sizeof *m->tok_sets) ||
        buf_grow((void **)&m->tok_ids, &m->cap_tok_ids, m->n_toks + 1, sizeof *m->tok_ids)) {
        m->oom = VLLM_ERR_NOMEM;
        return false;
    }
    m->tok_sets[m->n_toks] = (uint32_t)m->n_sets;
    m->tok_ids[m->n_toks++] = id;
    return true;
}

bool st_matcher_accept_token(st_matcher *m, int32_t id) {
    const st_vocab *v = m->g->v;
    if (id < 0 || id >= v->n_ids || v->kind[id] == ST_TOK_EXCLUDED) return false;
    bool terminated = st_matcher_is_terminated(m);
    if (v->kind[id] == ST_TOK_EOS) return (terminated || top_can_end(m)) && push_token(m, id);
    if (terminated) return false;
    size_t base = m->n_sets;
    for (uint32_t k = v->off[id]; k < v->off[id + 1]; k++)
        if (!push_byte(m, v->bytes[k])) {
            truncate_sets(m, base);
            return false;
        }
    if (!push_token(m, id)) {
        truncate_sets(m, base);
        return false;
    }
    return true;
}

vllm_status st_matcher_rollback(st_matcher *m, int32_t k) {
    if (k < 0 || (size_t)k > m->n_toks)
        return vllm_error(VLLM_ERR_INVALID, "structured matcher: cannot roll back %d tokens (%zu accepted)", k,
                          m->n_toks);
    m->n_toks -= (size_t)k;
    truncate_sets(m, m->n_toks ? m->tok_sets[m->n_toks - 1] : 1);
    return VLLM_OK;
}

int32_t st_matcher_max_rollback(const st_matcher *m) { return (int32_t)m->n_toks; }

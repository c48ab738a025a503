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
 * is predicted once per set); right recursion costs a chain of completions
 * (gbnf.c turns tail recursion into left-recursive loops).
 * Every production is productive (gbnf.c), so a non-empty set means the
 * bytes so far are a prefix of some sentence.
 *
 * The reference mask (st_matcher_fill_mask_direct): a preorder walk of the
 * token trie, with the parser's set stack following the walk's path: a node
 * at depth d truncates the stack back to the state + d - 1 bytes, checks
 * its byte against the parent set's allowed bytes (the union of its
 * terminals, kept per set) and pushes it only when the node has children;
 * a rejected byte skips the whole subtree, leaves cost no push.
 *
 * The mask (st_matcher_fill_mask) splits the work like XGrammar's
 * context-independent tokens, with Earley sets as the stack. A state's
 * local key is its top set and the sets its items start in ("level 1"),
 * origins relabelled by their order; origins further back become ST_OUT.
 * Walking the trie on a copy of just those sets, a push that would complete
 * an ST_OUT item cannot (the context is missing: ctx_hit), so the local
 * sets are subsets of the real ones: a token they accept is accepted in
 * every context with that key, a token they reject with no ctx_hit on its
 * path is rejected in every context, and only the rest (trie ranges below
 * a ctx_hit, st_unc) depends on the real stack. So per grammar (shared by
 * its matchers, under a mutex, bounded by ST_CACHE_MAX_BYTES) each key is
 * walked once; a mask is then a copy of its accepted bits plus a real walk
 * of its uncertain ranges. The key's first walk is the cost that remains:
 * loop bytes (walk_local) make a string's ASCII characters free, also
 * inside a counted repetition (maxLength: sets equal but for the count,
 * g->shape, while the count left exceeds the token's bytes left), its
 * multi-byte characters still cost a push per byte. A long repetition's
 * positions far from its end share one key (g->canon). And every set a
 * local walk pushes is interned by its items, each origin named by the
 * interned state of the set it starts in (hash-consing the path): equal
 * states parse every continuation alike, so pushing byte b on a state is
 * done once per walk (walk_state.trans) and the children met again are
 * virtual (state id, allowed bytes) until a push needs their items; a
 * literal in progress, an unanchored pattern or a bounded count then costs
 * a push per (state, byte), not per trie node.
 *
 * EOS ids are allowed exactly when the grammar can end; accepting one
 * terminates the matcher (it is kept as a token, so rollback undoes it).
 */
#include <pthread.h>
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
    bool ctx_hit;             /* a local walk's push completed an item from before the state */
    uint64_t *key;            /* scratch: the top set's local key */
    size_t cap_key;
};

/* An origin before the local state (mask cache): completing such an item
 * needs the sets the local state does not have. */
#define ST_OUT 0xffffffffu

/* What the mask of a local state is, whatever lies below it (see the top). */
typedef struct st_local {
    struct st_local *next;
    uint64_t hash;
    uint64_t *key;            /* sorted ST_KEY entries (local_key) */
    uint32_t key_len;
    uint32_t *acc;            /* mask words: tokens accepted in any context */
    struct st_unc *unc;       /* trie ranges that depend on the context, in preorder */
    uint32_t n_unc;
} st_local;

/* Trie nodes [from, to) to walk against the real stack, below the path of
 * depth `depth` (the first bytes of token `tok`). */
typedef struct st_unc {
    uint32_t from, to, depth;
    int32_t tok;
} st_unc;

struct st_mask_cache {
    pthread_mutex_t lock;
    st_local **buckets;
    size_t n_buckets, count, bytes;
};

/* Per grammar: 64 MiB holds ~4,000 local states of a 128k vocabulary (16 KiB
 * of accepted bits each); past it new states are walked and dropped. */
#define ST_CACHE_MAX_BYTES ((size_t)64 << 20)

/* ---- grammars -------------------------------------------------------------------- */

/* Three maps of the grammar's positions, for counted repetitions (gbnf.c:
 * x EXIT x EXIT ... x END, x not nullable; each x takes a byte at least;
 * also a run x x .. x of ST_RUN_MIN or more inside a production, the
 * required part of x{m,n}):
 *   rep_left - how many x's may still come (UINT32_MAX outside them);
 *   shape    - every position after the first x as the first such position
 *              of its parity: sets equal by shape differ only in their
 *              counts, which the local walk's loops track (walk_local);
 *   canon    - the key of the mask cache: the shape where more than
 *              max_depth + 1 x's may still come (a token has at most
 *              max_depth bytes, so none can tell those positions apart and
 *              a string with maxLength 32767 is one cached state), else the
 *              position itself. */
#define ST_RUN_MIN 8
static vllm_status rep_positions(st_grammar *g) {
    size_t n = (size_t)g->n_syms + 1;
    g->canon = malloc(n * sizeof *g->canon);
    g->shape = malloc(n * sizeof *g->shape);
    g->rep_left = malloc(n * sizeof *g->rep_left);
    if (!g->canon || !g->shape || !g->rep_left) return vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t p = 0; p < g->n_syms; p++) g->canon[p] = g->shape[p] = p, g->rep_left[p] = UINT32_MAX;
    uint32_t margin = g->v->max_depth + 2;
    for (uint32_t p0 = 0; p0 < g->n_syms;) {
        uint32_t x = g->syms[p0], end = p0;
        while (ST_SYM_KIND(g->syms[end]) != ST_SYM_END) end++;
        bool rep = end - p0 >= 3 && ST_SYM_KIND(x) != ST_SYM_EXIT &&
                   !(ST_SYM_KIND(x) == ST_SYM_NT && g->nullable[ST_SYM_ID(x)]);
        for (uint32_t j = 0; rep && p0 + j < end; j++)
            rep = j % 2 ? ST_SYM_KIND(g->syms[p0 + j]) == ST_SYM_EXIT : g->syms[p0 + j] == x;
        uint32_t n_x = (end - p0 + 1) / 2; /* the x's of the production */
        for (uint32_t j = 0; rep && p0 + j <= end; j++) {
            uint32_t done = (j + 1) / 2; /* before the x at j = 2c: c; at the EXIT j = 2c + 1: c + 1 */
            g->rep_left[p0 + j] = n_x - done;
            if (j < 2 || p0 + j == end) continue;
            g->shape[p0 + j] = p0 + 2 + (j & 1);
            if (n_x - done > margin) g->canon[p0 + j] = p0 + 2 + (j & 1);
        }
        /* runs of one symbol in other productions (x{m,n}'s m required x's:
         * minLength) are counted the same way: before the j-th x of a run of
         * m, m - j x's are left; after its first x, one shape. Short runs
         * (a literal's "aaa", hex{3}) are left alone: a set's count is its
         * items' least, which would hold back the loops of the rest. */
        for (uint32_t a = p0; !rep && a < end;) {
            uint32_t y = g->syms[a], b = a + 1;
            bool ok = ST_SYM_KIND(y) == ST_SYM_T || (ST_SYM_KIND(y) == ST_SYM_NT && !g->nullable[ST_SYM_ID(y)]);
            while (b < end && g->syms[b] == y) b++;
            uint32_t m = b - a;
            for (uint32_t j = 0; ok && m >= ST_RUN_MIN && j < m; j++) {
                g->rep_left[a + j] = m - j;
                if (!j) continue;
                g->shape[a + j] = a + 1;
                if (m - j > margin) g->canon[a + j] = a + 1;
            }
            a = b;
        }
        p0 = end + 1;
    }
    return VLLM_OK;
}

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
    vllm_status rrc = rep_positions(g);
    g->cache = calloc(1, sizeof *g->cache);
    if (g->cache) {
        g->cache->n_buckets = 256;
        g->cache->buckets = calloc(g->cache->n_buckets, sizeof *g->cache->buckets);
    }
    if (rrc || !g->cache || !g->cache->buckets || pthread_mutex_init(&g->cache->lock, NULL)) {
        if (g->cache) free(g->cache->buckets);
        free(g->cache);
        free(g->canon);
        free(g->shape);
        free(g->rep_left);
        st_grammar_deinit(g);
        free(g);
        return vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
    }
    *out = g;
    return VLLM_OK;
}

static void local_free(st_local *e) {
    if (!e) return;
    free(e->key);
    free(e->acc);
    free(e->unc);
    free(e);
}

st_grammar *st_grammar_ref(st_grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void st_grammar_unref(st_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (size_t b = 0; b < g->cache->n_buckets; b++)
        for (st_local *e = g->cache->buckets[b], *next; e; e = next) {
            next = e->next;
            local_free(e);
        }
    pthread_mutex_destroy(&g->cache->lock);
    free(g->cache->buckets);
    free(g->cache);
    free(g->canon);
    free(g->shape);
    free(g->rep_left);
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
        } else if (kind != ST_SYM_T && it.origin != cur) { /* END or EXIT: complete the rule */
            if (kind == ST_SYM_EXIT && !add_item(m, set_from, it.pos + 1, it.origin)) return false;
            if (it.origin == ST_OUT) {
                m->ctx_hit = true;
                continue;
            }
            uint32_t want = ST_SYM(ST_SYM_NT, id);
            for (uint32_t q = m->set_start[it.origin]; q < m->set_start[it.origin + 1]; q++) {
                st_item o = m->items[q];
                if (g->syms[o.pos] == want && !add_item(m, set_from, o.pos + 1, o.origin)) return false;
            }
        } else if (kind == ST_SYM_EXIT && !add_item(m, set_from, it.pos + 1, it.origin)) {
            return false; /* an EXIT of an empty prefix: Aycock-Horspool made the completion */
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
    uint32_t end = ST_SYM(ST_SYM_END, g->root), exit = ST_SYM(ST_SYM_EXIT, g->root);
    size_t top = m->n_sets - 1;
    for (uint32_t j = m->set_start[top]; j < m->set_start[top + 1]; j++)
        if (m->items[j].origin == 0 && (g->syms[m->items[j].pos] == end || g->syms[m->items[j].pos] == exit))
            return true;
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
    free(m->key);
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

/* Walks the trie nodes [from, to) against m's stack, whose sets
 * [0, base) are the state (the nodes' parents up to depth d - 1 pushed
 * above base); sets the accepted tokens' bits in mask. */
static void walk(st_matcher *m, size_t base, uint32_t from, uint32_t to, uint32_t *mask) {
    const st_vocab *v = m->g->v;
    const uint8_t *nbyte = v->node_byte;
    const uint32_t *ndepth = v->node_depth, *nend = v->node_end, *ntok = v->node_tok;
    for (uint32_t i = from; i < to;) {
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
        if (nend[i] > i + 1 && (!push_byte(m, b) || st_bset_empty(&m->allowed[m->n_sets - 1]))) {
            i = nend[i];
            continue;
        }
        i++;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts a[0..n): sets have tens of items, where insertion beats qsort's calls. */
static void sort_u64(uint64_t *a, size_t n) {
    if (n > 48) {
        qsort(a, n, sizeof *a, cmp_u64);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        uint64_t x = a[i];
        size_t j = i;
        for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* The items of set k that can still do something (not at an END), as
 * sorted keys pos << 32 | origin, the set's own origin as UINT32_MAX. */
static uint32_t live_items(const st_matcher *m, size_t k, uint64_t *out) {
    uint32_t n = 0;
    for (uint32_t j = m->set_start[k]; j < m->set_start[k + 1]; j++) {
        st_item it = m->items[j];
        if (ST_SYM_KIND(m->g->syms[it.pos]) == ST_SYM_END) continue;
        out[n++] = ((uint64_t)m->g->shape[it.pos] << 32) | (it.origin == k ? UINT32_MAX : it.origin);
    }
    sort_u64(out, n);
    return n;
}

typedef struct local_walk {
    st_matcher *lm;
    st_local *e;
    size_t base;          /* sets [0, base) hold the local state; base - 1 is its top */
    uint8_t *ctx;         /* ctx[d]: a push on the path to depth d skipped a completion */
    uint32_t *sdepth;     /* sdepth[d]: the stack size whose top stands for the path to depth d */
    uint64_t *sig;        /* per set: live_hash */
    uint32_t *rem;        /* per set: set_rep_left */
    uint32_t *shift;      /* shift[d]: loop bytes on the path to depth d since its set was pushed */
    uint64_t *scratch;
    size_t cap_scratch;
    struct loop_entry *loops;  /* per state met: its loop bytes */
    size_t n_loops, cap_loops;
    uint32_t gen;              /* loops' generation: bumped when the table moves */
    struct loop_entry **lep;   /* per set: its loop entry, valid while lep_gen[set] == gen */
    uint32_t *lep_gen;
    /* self-contained sets met, interned, with their byte transitions (see push_memo) */
    struct walk_state *states;
    size_t n_states, cap_states;
    uint64_t *st_keys;         /* every interned state's sorted items, back to back */
    size_t n_st_keys, cap_st_keys;
    uint32_t *st_tab;          /* open addressing: state id + 1, 0 empty */
    size_t cap_tab;
    int32_t *sid;              /* per set: its interned state, -1 when it is not self-contained */
} local_walk;

/* An interned set of a local walk: its items sorted, each origin a local
 * level set (index < base, fixed for the walk), a set before the local
 * state (ST_OUT), the set itself (ST_OWN) or ST_REF | the interned state of
 * an earlier set on the path. By induction equal ids mean equal sets down
 * every origin chain, so a push of byte b gives the same child wherever the
 * state sits: it is pushed once (trans[b]) and the child is reused, its
 * items put on the stack (walk_materialize, each ST_REF resolved to the set
 * of that state on the current path) only when a push needs them.
 * Items at an END are left out (and with them the origins they name): once
 * a set is closed they do nothing more (a completion looks in its origin
 * set for items before the rule, a scan for items before a byte set), so
 * two sets that differ only in what just completed, such as a string's
 * character reached from two different states, are one state. The count a
 * set still allows (rem) is part of the identity, so the loop guards of
 * walk_local see the same value for every set of a state. */
typedef struct walk_state {
    uint64_t hash, sig;
    uint32_t off, n, rem;
    st_bset allowed;
    uint32_t *trans;           /* 256 entries: 0 not pushed yet, 1 the child is not self-contained,
                                  else child id + 2, bit 31 its push skipped a completion (ctx) */
} walk_state;

#define ST_OWN 0xfffffffeu
#define ST_REF 0x80000000u  /* | state id: an origin in the set of that state (below, on the path) */
#define ST_WALK_MAX_STATES 65536
#define ST_WALK_MAX_KEYS ((size_t)1 << 22)

/* A state's bytes: state[b] 0 not tried, 1 pushing b gives the state
 * again, 2 it does not; ctx[b] that push skipped a completion. */
typedef struct loop_entry {
    uint64_t hash;
    uint8_t used, full;      /* full: every allowed byte tried, safe is known */
    uint8_t u8;              /* u8_loops tried: u8lead is known */
    uint8_t state[256], ctx[256];
    st_bset safe;            /* the loop bytes whose push skipped no completion */
    st_bset u8lead;          /* u8_loops */
} loop_entry;

/* Set k's live items as an order-free hash (its own origin as UINT32_MAX). */
static uint64_t live_hash(const st_matcher *m, size_t k) {
    uint64_t h = 0;
    for (uint32_t j = m->set_start[k]; j < m->set_start[k + 1]; j++) {
        st_item it = m->items[j];
        if (ST_SYM_KIND(m->g->syms[it.pos]) == ST_SYM_END) continue;
        uint64_t x = ((uint64_t)m->g->shape[it.pos] << 32) | (it.origin == k ? UINT32_MAX : it.origin);
        x *= 0x9e3779b97f4a7c15ull;
        h += x ^ (x >> 29);
    }
    return h;
}

/* The fewest x's any counted repetition of set k's items still allows. */
static uint32_t set_rep_left(const st_matcher *m, size_t k) {
    uint32_t r = UINT32_MAX;
    for (uint32_t j = m->set_start[k]; j < m->set_start[k + 1]; j++)
        if (m->g->rep_left[m->items[j].pos] < r) r = m->g->rep_left[m->items[j].pos];
    return r;
}

/* Are sets a and b the same state (equal live items, each its own origin
 * for itself, positions by g->canon: a counted repetition's positions far
 * from its end are one state for any token)? */
static bool same_live(local_walk *w, size_t a, size_t b) {
    st_matcher *lm = w->lm;
    size_t na = lm->set_start[a + 1] - lm->set_start[a], nb = lm->set_start[b + 1] - lm->set_start[b];
    if (buf_grow((void **)&w->scratch, &w->cap_scratch, na + nb + 2, sizeof *w->scratch)) return false;
    uint32_t la = live_items(lm, a, w->scratch), lb = live_items(lm, b, w->scratch + la);
    return la == lb && !memcmp(w->scratch, w->scratch + la, la * sizeof *w->scratch);
}

/* The loop table of the state with live hash h (made on first use); NULL
 * when out of memory. */
static loop_entry *loops_of(local_walk *w, uint64_t h) {
    if ((w->n_loops + 1) * 2 > w->cap_loops) {
        size_t cap = w->cap_loops ? w->cap_loops * 2 : 64;
        loop_entry *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t k = 0; k < w->cap_loops; k++) {
            if (!w->loops[k].used) continue;
            size_t q = (size_t)(w->loops[k].hash * 0x9e3779b97f4a7c15ull >> 40) & (cap - 1);
            while (t[q].used) q = (q + 1) & (cap - 1);
            t[q] = w->loops[k];
        }
        free(w->loops);
        w->loops = t;
        w->cap_loops = cap;
        w->gen++;
    }
    size_t q = (size_t)(h * 0x9e3779b97f4a7c15ull >> 40) & (w->cap_loops - 1);
    while (w->loops[q].used && w->loops[q].hash != h) q = (q + 1) & (w->cap_loops - 1);
    if (!w->loops[q].used) {
        w->loops[q].used = 1;
        w->loops[q].hash = h;
        w->n_loops++;
    }
    return &w->loops[q];
}

static bool walk_ensure(local_walk *w, size_t q);

/* Tries every allowed byte of set `par - 1` (the top once truncated to
 * par) not tried yet; then le->safe holds its loop bytes without ctx. */
static const st_bset *loop_safe(local_walk *w, loop_entry *le, uint32_t par) {
    st_matcher *lm = w->lm;
    if (le->full) return &le->safe;
    if (!walk_ensure(w, par - 1)) return NULL;
    st_bset a = lm->allowed[par - 1];
    /* bytes the same terminal items take make the same kernel, so the same
     * set: one push per such group (a string's ASCII is one or two) */
    const st_grammar *g = lm->g;
    uint32_t tj[64], n_t = 0, n_rep = 0;
    bool group = true;
    for (uint32_t j = lm->set_start[par - 1]; j < lm->set_start[par] && group; j++)
        if (ST_SYM_KIND(g->syms[lm->items[j].pos]) == ST_SYM_T) {
            if (n_t == 64) group = false;
            else tj[n_t++] = ST_SYM_ID(g->syms[lm->items[j].pos]);
        }
    uint64_t rep_sig[256];
    uint8_t rep_b[256];
    for (unsigned b = 0; b < 256; b++) {
        if (!st_bset_has(&a, b) || le->state[b]) continue;
        uint64_t sig = 0;
        uint32_t r = 0;
        for (uint32_t k = 0; group && k < n_t; k++)
            if (st_bset_has(&g->terms[tj[k]], b)) sig |= 1ull << k;
        while (group && r < n_rep && rep_sig[r] != sig) r++;
        if (group && r < n_rep) {
            le->state[b] = le->state[rep_b[r]];
            le->ctx[b] = le->ctx[rep_b[r]];
            continue;
        }
        if (lm->n_sets != par) truncate_sets(lm, par);
        lm->ctx_hit = false;
        if (!push_byte(lm, b)) return NULL; /* out of memory: no shortcut */
        bool loops = live_hash(lm, par) == w->sig[par - 1] && same_live(w, par - 1, par);
        le->state[b] = loops ? 1 : 2;
        le->ctx[b] = lm->ctx_hit;
        if (group) rep_sig[n_rep] = sig, rep_b[n_rep++] = (uint8_t)b;
    }
    truncate_sets(lm, par);
    for (unsigned b = 0; b < 256; b++)
        if (le->state[b] == 1 && !le->ctx[b]) st_bset_add(&le->safe, b);
    le->full = 1;
    return &le->safe;
}

/* Below u8_loops: pushes every valid continuation of UTF-8 state q on set
 * t (the top), bytes that the same terminal items accept going to the same
 * UTF-8 state pushed once; at a character boundary the set must equal set
 * p again. false when a valid byte is rejected, a set differs, the budget
 * of pushes runs out or memory does. With leads (at a boundary, q = 0) the
 * lead bytes are judged one by one: those whose every character passes go
 * to *leads, and the answer is true. */
static bool u8_explore(local_walk *w, size_t p, size_t t, uint8_t q, int *budget, st_bset *leads) {
    st_matcher *lm = w->lm;
    const st_grammar *g = lm->g;
    uint32_t tj[64], n_t = 0;
    for (uint32_t j = lm->set_start[t]; j < lm->set_start[t + 1]; j++)
        if (ST_SYM_KIND(g->syms[lm->items[j].pos]) == ST_SYM_T) {
            if (n_t == 64) return leads != NULL;
            tj[n_t++] = ST_SYM_ID(g->syms[lm->items[j].pos]);
        }
    uint64_t rep_sig[128];
    uint8_t rep_q[128];
    bool rep_ok[128];
    uint32_t n_rep = 0;
    for (unsigned b = 0x80; b < 0x100; b++) {
        uint8_t nq = st_u8_next(q, b);
        if (nq == ST_U8_BAD) continue;
        uint64_t sig = 0;
        for (uint32_t k = 0; k < n_t; k++)
            if (st_bset_has(&g->terms[tj[k]], b)) sig |= 1ull << k;
        bool ok = sig != 0; /* else a valid byte the state rejects */
        if (ok) {
            uint32_t r = 0;
            while (r < n_rep && !(rep_sig[r] == sig && rep_q[r] == nq)) r++;
            if (r < n_rep) { /* the same kernel, the same UTF-8 state: the same result */
                ok = rep_ok[r];
            } else {
                ok = --*budget >= 0;
                if (ok) {
                    truncate_sets(lm, t + 1);
                    ok = push_byte(lm, b) && (nq ? u8_explore(w, p, t + 1, nq, budget, NULL) : same_live(w, p, t + 1));
                    truncate_sets(lm, t + 1);
                }
                rep_sig[n_rep] = sig, rep_q[n_rep] = nq, rep_ok[n_rep++] = ok;
            }
        }
        if (!leads && !ok) return false;
        if (leads && ok) st_bset_add(leads, b);
    }
    return true;
}

/* The lead bytes of the UTF-8 characters that all take set par - 1 (its
 * loop entry le) back to itself, every byte on the way allowed. Then
 * (walk_local) a trie subtree whose tokens are valid UTF-8, whose lead bytes
 * are among these and whose ASCII bytes are safe loop bytes is accepted
 * whole: a string's non-ASCII tokens (a quarter of Llama 3's vocabulary)
 * cost no visit, also where a few characters are left out ([^\s] leaves
 * out U+00A0, U+2000..). Inside a counted repetition "itself" is equal by
 * shape, as for loop bytes: the caller takes the subtree only while more
 * x's are left than it has bytes (each character is an x of a byte at
 * least). Known once per state; NULL when memory runs out. */
static const st_bset *u8_loops(local_walk *w, loop_entry *le, uint32_t par) {
    if (le->u8) return &le->u8lead;
    le->u8 = 1;
    if (!walk_ensure(w, par - 1)) return NULL;
    truncate_sets(w->lm, par);
    int budget = 256;
    u8_explore(w, par - 1, par - 1, 0, &budget, &le->u8lead);
    truncate_sets(w->lm, par);
    return &le->u8lead;
}

/* The interned state of set k (live_hash sig, set_rep_left rem), made on
 * first sight; -1 when k is not self-contained or the table is full. */
static int32_t walk_intern(local_walk *w, size_t k, uint64_t sig, uint32_t rem) {
    st_matcher *lm = w->lm;
    size_t n = lm->set_start[k + 1] - lm->set_start[k];
    if (w->n_states >= ST_WALK_MAX_STATES || w->n_st_keys + n > ST_WALK_MAX_KEYS) return -1;
    if (buf_grow((void **)&w->st_keys, &w->cap_st_keys, w->n_st_keys + n + 1, sizeof *w->st_keys)) return -1;
    uint64_t *key = w->st_keys + w->n_st_keys;
    size_t n_all = n;
    n = 0;
    for (size_t j = 0; j < n_all; j++) {
        st_item it = lm->items[lm->set_start[k] + j];
        if (ST_SYM_KIND(lm->g->syms[it.pos]) == ST_SYM_END) continue; /* completed: nothing left to do once closed */
        uint32_t o = it.origin;
        if (o == k) o = ST_OWN;
        else if (o != ST_OUT && o >= w->base) {
            if (w->sid[o] < 0) return -1;
            o = ST_REF | (uint32_t)w->sid[o];
        }
        key[n++] = ((uint64_t)it.pos << 32) | o;
    }
    sort_u64(key, n);
    uint64_t h = 0xcbf29ce484222325ull ^ rem;
    for (size_t j = 0; j < n; j++) h = (h ^ key[j]) * 0x100000001b3ull;
    h ^= h >> 29;
    if ((w->n_states + 1) * 2 > w->cap_tab) {
        size_t cap = w->cap_tab ? w->cap_tab * 2 : 256;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t q = 0; q < w->n_states; q++) {
            size_t x = (size_t)(w->states[q].hash * 0x9e3779b97f4a7c15ull >> 32) & (cap - 1);
            while (t[x]) x = (x + 1) & (cap - 1);
            t[x] = (uint32_t)q + 1;
        }
        free(w->st_tab);
        w->st_tab = t;
        w->cap_tab = cap;
    }
    size_t x = (size_t)(h * 0x9e3779b97f4a7c15ull >> 32) & (w->cap_tab - 1);
    for (; w->st_tab[x]; x = (x + 1) & (w->cap_tab - 1)) {
        walk_state *o = &w->states[w->st_tab[x] - 1];
        if (o->hash == h && o->n == n && o->rem == rem && !memcmp(w->st_keys + o->off, key, n * sizeof *key))
            return (int32_t)(w->st_tab[x] - 1);
    }
    if (buf_grow((void **)&w->states, &w->cap_states, w->n_states + 1, sizeof *w->states)) return -1;
    w->states[w->n_states] = (walk_state){.hash = h, .sig = sig, .off = (uint32_t)w->n_st_keys, .n = (uint32_t)n,
                                          .rem = rem, .allowed = lm->allowed[k]};
    w->n_st_keys += n;
    w->st_tab[x] = (uint32_t)w->n_states + 1;
    return (int32_t)w->n_states++;
}

/* Puts state id as set `at` (the stack truncated to at first). */
static bool walk_materialize(local_walk *w, int32_t id, size_t at) {
    st_matcher *lm = w->lm;
    const walk_state *s = &w->states[id];
    truncate_sets(lm, at);
    if (!sets_reserve(lm, at + 1) ||
        buf_grow((void **)&lm->items, &lm->cap_items, lm->n_items + s->n, sizeof *lm->items))
        return false;
    const uint64_t *key = w->st_keys + s->off;
    uint32_t last_ref = UINT32_MAX, last_at = 0;
    for (uint32_t j = 0; j < s->n; j++) {
        uint32_t o = (uint32_t)key[j];
        if (o == ST_OWN) o = (uint32_t)at;
        else if (o != ST_OUT && (o & ST_REF)) { /* the set of that state on this path */
            if (o != last_ref) {
                size_t q = at;
                while (q > w->base && w->sid[q - 1] != (int32_t)(o & ~ST_REF)) q--;
                if (q == w->base) { /* not on the path (cannot happen): push instead */
                    truncate_sets(lm, at);
                    return false;
                }
                last_ref = o, last_at = (uint32_t)q - 1;
            }
            o = last_at;
        }
        lm->items[lm->n_items++] = (st_item){(uint32_t)(key[j] >> 32), o};
    }
    lm->n_sets = at + 1;
    lm->set_start[at + 1] = (uint32_t)lm->n_items;
    lm->allowed[at] = s->allowed;
    return true;
}

/* Makes the walk's sets up to index q real in lm: the path's sets above
 * lm's top are virtual (known by their interned state only, sid) until a
 * push or a comparison needs their items. false when out of memory. */
static bool walk_ensure(local_walk *w, size_t q) {
    for (size_t j = w->lm->n_sets; j <= q; j++)
        if (w->sid[j] < 0 || !walk_materialize(w, w->sid[j], j)) return false;
    return true;
}

/* Pushes byte b on the real set par - 1 (the stack truncated to par) and
 * records the transition when the parent is interned; sets sig, rem and sid
 * of the new top. false when out of memory. */
static bool push_miss(local_walk *w, uint32_t par, unsigned b, uint32_t tr) {
    st_matcher *lm = w->lm;
    int32_t pid = w->sid[par - 1];
    if (lm->n_sets != par) truncate_sets(lm, par);
    lm->ctx_hit = false;
    if (!push_byte(lm, b)) return false;
    w->sig[par] = live_hash(lm, par);
    w->rem[par] = set_rep_left(lm, par);
    int32_t cid = tr == 1 ? -1 : walk_intern(w, par, w->sig[par], w->rem[par]);
    w->sid[par] = cid;
    if (pid >= 0 && tr == 0) {
        walk_state *ps = &w->states[pid];
        if (!ps->trans) ps->trans = calloc(256, sizeof *ps->trans);
        if (ps->trans) ps->trans[b] = cid >= 0 ? ((uint32_t)cid + 2) | ((uint32_t)lm->ctx_hit << 31) : 1;
    }
    return true;
}

/* The local walk: the whole trie against the local state. The local sets
 * are subsets of the real ones (a completion into a set before the state is
 * skipped, ctx_hit), so what they accept is accepted in any context; what
 * they reject is rejected too unless a push on its path skipped a
 * completion: then the node goes to e->unc for the real walk.
 * Loops: when pushing byte b on a set X gives a set equal to X (same live
 * items, each its own origin for itself), b is a loop byte of X's state,
 * and below any set of that state a b costs no push (the parent's set
 * stands for the child): a path of a string's characters is walked
 * without pushing. Loop bytes are found per state (live hash, checked
 * exactly) the first time they are pushed.
 * Equal means equal by g->shape: inside a counted repetition (maxLength)
 * the child has one x fewer to go. X stands for a child that took `shift`
 * loop bytes since X only while X's fewest x's to go (rem) exceed shift
 * plus the bytes left in the node's subtree (node_maxd - depth): no token
 * of the subtree can then reach the end of the repetition from either,
 * so both parse its bytes alike (each x takes a byte at least). */
static void walk_local(local_walk *w) {
    st_matcher *lm = w->lm;
    st_local *e = w->e;
    const st_vocab *v = lm->g->v;
    const uint8_t *nbyte = v->node_byte;
    const uint32_t *ndepth = v->node_depth, *nend = v->node_end, *ntok = v->node_tok;
    const uint16_t *nmaxd = v->node_maxd;
    uint8_t *ctx = w->ctx;
    uint32_t *sdepth = w->sdepth, *shift = w->shift, *rem = w->rem;
    uint64_t *sig = w->sig;  /* per set index: live hash */
    ctx[0] = 0;
    sdepth[0] = (uint32_t)w->base;
    shift[0] = 0;
    sig[w->base - 1] = live_hash(lm, w->base - 1);
    rem[w->base - 1] = set_rep_left(lm, w->base - 1);
    w->sid[w->base - 1] = walk_intern(w, w->base - 1, sig[w->base - 1], rem[w->base - 1]);
    for (uint32_t i = 0; i < (uint32_t)v->n_nodes;) {
        uint32_t d = ndepth[i], par = sdepth[d - 1];
        unsigned b = nbyte[i];
        if (!st_bset_has(&lm->allowed[par - 1], b)) {
            if (ctx[d - 1]) e->unc[e->n_unc++] = (st_unc){i, nend[i], d - 1, v->toks[ntok[i]]};
            i = nend[i];
            continue;
        }
        loop_entry *le = NULL;
        if (nend[i] > i + 1) {
            le = w->lep_gen[par - 1] == w->gen ? w->lep[par - 1] : NULL;
            if (!le && (le = loops_of(w, sig[par - 1]))) w->lep[par - 1] = le, w->lep_gen[par - 1] = w->gen;
            /* a subtree of loop bytes only, none reaching a bound: all its tokens */
            uint64_t left = (uint64_t)shift[d - 1] + 1 + (nmaxd[i] - d);
            const st_bset *safe, *u = &v->cls[v->node_cls[i]];
            if (le && le->state[b] == 1 && (rem[par - 1] == UINT32_MAX || rem[par - 1] > left) &&
                (safe = loop_safe(w, le, par)) && !(u->w[0] & ~safe->w[0]) && !(u->w[1] & ~safe->w[1]) &&
                !(u->w[2] & ~safe->w[2]) && !(u->w[3] & ~safe->w[3])) {
                for (uint32_t k = ntok[i]; k < ntok[nend[i]]; k++) {
                    int32_t id = v->toks[k];
                    e->acc[id >> 5] |= 1u << (id & 31);
                }
                i = nend[i];
                continue;
            }
            /* the same with the subtree's non-ASCII bytes valid UTF-8 that the state loops through */
            const st_bset *lead;
            if (le && ((u->w[2] | u->w[3]) != 0) && (v->node_u8[i] & 1) &&
                (rem[par - 1] == UINT32_MAX || rem[par - 1] > left) &&
                (safe = loop_safe(w, le, par)) && !(u->w[0] & ~safe->w[0]) && !(u->w[1] & ~safe->w[1]) &&
                (lead = u8_loops(w, le, par)) && !(u->w[3] & ~lead->w[3])) {
                for (uint32_t k = ntok[i]; k < ntok[nend[i]]; k++) {
                    int32_t id = v->toks[k];
                    e->acc[id >> 5] |= 1u << (id & 31);
                }
                i = nend[i];
                continue;
            }
        }
        for (uint32_t k = ntok[i]; k < ntok[i + 1]; k++) {
            int32_t id = v->toks[k];
            e->acc[id >> 5] |= 1u << (id & 31);
        }
        if (nend[i] > i + 1) {
            if (le && le->state[b] == 1) { /* the parent's set may stand for this node too */
                uint64_t left = (uint64_t)shift[d - 1] + 1 + (nmaxd[i] - d);
                if (rem[par - 1] == UINT32_MAX || rem[par - 1] > left) {
                    sdepth[d] = par;
                    shift[d] = shift[d - 1] + 1;
                    ctx[d] = ctx[d - 1] | le->ctx[b];
                    i++;
                    continue;
                }
                if (shift[d - 1]) { /* not past a loop (the bytes left only shrink below one): the real walk decides */
                    e->unc[e->n_unc++] = (st_unc){i, nend[i], d - 1, v->toks[ntok[i]]};
                    i = nend[i];
                    continue;
                }
            }
            int32_t pid = w->sid[par - 1];
            uint32_t tr = pid >= 0 && w->states[pid].trans ? w->states[pid].trans[b] : 0;
            if (tr >= 2) { /* pushed from this state before: the child is that state, virtual for now */
                int32_t cid = (int32_t)((tr & 0x7fffffffu) - 2);
                if (lm->n_sets > par) truncate_sets(lm, par);
                lm->allowed[par] = w->states[cid].allowed;
                sig[par] = w->states[cid].sig;
                rem[par] = w->states[cid].rem;
                w->sid[par] = cid;
                lm->ctx_hit = tr >> 31;
            } else {
                if (!walk_ensure(w, par - 1) || !push_miss(w, par, b, tr)) { /* out of memory: the real walk decides */
                    e->unc[e->n_unc++] = (st_unc){i + 1, nend[i], d, v->toks[ntok[i]]};
                    i = nend[i];
                    continue;
                }
            }
            ctx[d] = ctx[d - 1] | lm->ctx_hit;
            sdepth[d] = par + 1;
            shift[d] = 0;
            w->lep_gen[par] = 0;
            if (le && !le->state[b]) {
                bool ctx_hit = lm->ctx_hit;
                bool loops = sig[par] == sig[par - 1] && walk_ensure(w, par) && same_live(w, par - 1, par);
                le->state[b] = loops ? 1 : 2;
                le->ctx[b] = ctx_hit;
            }
        }
        i++;
    }
}

/* The reference mask: the whole trie against the real stack. */
void st_matcher_fill_mask_direct(st_matcher *m, uint32_t *mask) {
    const st_vocab *v = m->g->v;
    memset(mask, 0, (size_t)st_mask_words(v) * sizeof *mask);
    if (st_matcher_is_terminated(m)) {
        set_eos_bits(m, mask);
        return;
    }
    size_t base = m->n_sets;
    if (!sets_reserve(m, base + v->max_depth + 1)) {
        m->oom = vllm_error(VLLM_ERR_NOMEM, "structured matcher: out of memory");
        return; /* nothing allowed: the request fails on the empty mask */
    }
    walk(m, base, 0, (uint32_t)v->n_nodes, mask);
    truncate_sets(m, base);
    if (top_can_end(m)) set_eos_bits(m, mask);
}

/* A key entry: section 0 is the top set, section k the k-th set (by
 * position) that the top set's items start in; label 0 = the top set, k =
 * that k-th set, ST_LABEL_OUT = a set further back. */
#define ST_KEY(section, pos, label) (((uint64_t)(section) << 48) | ((uint64_t)(pos) << 8) | (uint64_t)(label))
#define ST_KEY_SECTION(k) ((uint32_t)((k) >> 48))
#define ST_KEY_POS(k) ((uint32_t)(((k) >> 8) & 0xffffffffu))
#define ST_KEY_LABEL(k) ((uint32_t)((k) & 0xff))
#define ST_LABEL_OUT 0xffu
#define ST_MAX_LEVEL1 254

/* The top set's local key into m->key (sorted, unique); its length, or
 * UINT32_MAX when out of memory. The key holds the top set and the sets its
 * items start in (level 1), with every origin relabelled by its place among
 * them: equal keys parse every byte string alike until a completion reaches
 * a set further back, wherever the state sits in the text. */
static uint32_t local_key(st_matcher *m, uint64_t *hash) {
    size_t top = m->n_sets - 1;
    uint32_t lv[ST_MAX_LEVEL1], n_lv = 0;
    size_t n = m->set_start[top + 1] - m->set_start[top];
    for (uint32_t j = m->set_start[top]; j < m->set_start[top + 1]; j++) {
        uint32_t o = m->items[j].origin, k = 0;
        if (o == top) continue;
        while (k < n_lv && lv[k] != o) k++;
        if (k == n_lv && n_lv < ST_MAX_LEVEL1) lv[n_lv++] = o;
    }
    for (uint32_t a = 1; a < n_lv; a++) /* ascending positions */
        for (uint32_t b = a; b > 0 && lv[b - 1] > lv[b]; b--) {
            uint32_t t = lv[b];
            lv[b] = lv[b - 1];
            lv[b - 1] = t;
        }
    for (uint32_t k = 0; k < n_lv; k++) n += m->set_start[lv[k] + 1] - m->set_start[lv[k]];
    if (buf_grow((void **)&m->key, &m->cap_key, n + 1, sizeof *m->key)) return UINT32_MAX;
    size_t u = 0;
    for (uint32_t sec = 0; sec <= n_lv; sec++) {
        uint32_t set = sec ? lv[sec - 1] : (uint32_t)top;
        for (uint32_t j = m->set_start[set]; j < m->set_start[set + 1]; j++) {
            uint32_t o = m->items[j].origin, label = ST_LABEL_OUT;
            if (o == top) label = 0;
            else
                for (uint32_t k = 0; k < n_lv; k++)
                    if (lv[k] == o) label = k + 1;
            m->key[u++] = ST_KEY(sec, m->g->canon[m->items[j].pos], label);
        }
    }
    qsort(m->key, u, sizeof *m->key, cmp_u64);
    size_t w = 0;
    for (size_t j = 0; j < u; j++)
        if (!w || m->key[w - 1] != m->key[j]) m->key[w++] = m->key[j];
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t j = 0; j < w; j++) h = (h ^ m->key[j]) * 0x100000001b3ull;
    *hash = h ^ (h >> 31);
    return (uint32_t)w;
}

/* Builds the local state of key[0..n): sets 0 .. L-1 are the level-1 sets
 * (section k -> set k - 1), set L the top set (section 0); an origin
 * further back becomes ST_OUT. Then the whole trie. */
static st_local *local_build(const st_grammar *g, const uint64_t *key, uint32_t n, uint64_t hash) {
    const st_vocab *v = g->v;
    st_local *e = calloc(1, sizeof *e);
    st_matcher *lm = calloc(1, sizeof *lm);
    uint8_t *ctx = NULL;  /* ctx[d]: a push on the path to depth d skipped a completion */
    if (!e || !lm) goto fail;
    e->hash = hash;
    e->key_len = n;
    e->key = malloc(((size_t)n + 1) * sizeof *e->key);
    e->acc = calloc((size_t)st_mask_words(v), sizeof *e->acc);
    /* at most one range per trie node; shrunk after */
    e->unc = malloc(((size_t)v->n_nodes + 1) * sizeof *e->unc);
    ctx = malloc((size_t)v->max_depth + 2);
    if (!e->key || !e->acc || !e->unc || !ctx) goto fail;
    memcpy(e->key, key, (size_t)n * sizeof *key);
    uint32_t L = 0;
    for (uint32_t j = 0; j < n; j++)
        if (ST_KEY_SECTION(key[j]) > L) L = ST_KEY_SECTION(key[j]);
    lm->g = (st_grammar *)g;
    if (scratch_init(lm) || !sets_reserve(lm, L + v->max_depth + 2) ||
        buf_grow((void **)&lm->items, &lm->cap_items, (size_t)n + 1, sizeof *lm->items))
        goto fail;
    /* sections 1..L, then 0; the key is sorted by section */
    uint32_t first_top = 0;
    while (first_top < n && ST_KEY_SECTION(key[first_top]) == 0) first_top++;
    for (uint32_t set = 0; set <= L; set++) {
        lm->set_start[set] = (uint32_t)lm->n_items;
        uint32_t sec = set == L ? 0 : set + 1;
        for (uint32_t j = sec ? first_top : 0; j < n && ST_KEY_SECTION(key[j]) <= sec; j++) {
            if (ST_KEY_SECTION(key[j]) != sec) continue;
            uint32_t label = ST_KEY_LABEL(key[j]);
            uint32_t origin = label == 0 ? L : label == ST_LABEL_OUT ? ST_OUT : label - 1;
            lm->items[lm->n_items++] = (st_item){ST_KEY_POS(key[j]), origin};
        }
        lm->n_sets = set;
        set_begin(lm);
        set_end(lm);
    }
    local_walk w = {.lm = lm, .e = e, .base = L + 1, .ctx = ctx};
    w.sdepth = malloc(((size_t)v->max_depth + 2) * sizeof *w.sdepth);
    w.shift = malloc(((size_t)v->max_depth + 2) * sizeof *w.shift);
    w.sig = malloc(((size_t)L + v->max_depth + 3) * sizeof *w.sig);
    w.rem = malloc(((size_t)L + v->max_depth + 3) * sizeof *w.rem);
    w.lep = malloc(((size_t)L + v->max_depth + 3) * sizeof *w.lep);
    w.lep_gen = calloc((size_t)L + v->max_depth + 3, sizeof *w.lep_gen);
    w.sid = malloc(((size_t)L + v->max_depth + 3) * sizeof *w.sid);
    w.gen = 1;
    if (!w.sdepth || !w.shift || !w.sig || !w.rem || !w.lep || !w.lep_gen || !w.sid) {
        free(w.sid);
        free(w.lep);
        free(w.lep_gen);
        free(w.sdepth);
        free(w.shift);
        free(w.sig);
        free(w.rem);
        goto fail;
    }
    walk_local(&w);
    free(w.lep);
    free(w.lep_gen);
    free(w.sdepth);
    free(w.shift);
    free(w.sig);
    free(w.rem);
    free(w.scratch);
    free(w.loops);
    free(w.sid);
    for (size_t k = 0; k < w.n_states; k++) free(w.states[k].trans);
    free(w.states);
    free(w.st_keys);
    free(w.st_tab);
    st_unc *u = realloc(e->unc, ((size_t)e->n_unc + 1) * sizeof *u);
    if (u) e->unc = u;
    free(ctx);
    lm->g = NULL;
    st_matcher_free(lm);
    return e;
fail:
    free(ctx);
    if (lm) lm->g = NULL;
    st_matcher_free(lm);
    local_free(e);
    return NULL;
}

static size_t local_bytes(const st_vocab *v, const st_local *e) {
    return sizeof *e + (size_t)e->key_len * 8 + (size_t)st_mask_words(v) * 4 + (size_t)e->n_unc * sizeof *e->unc;
}

/* The cached local state of m's top set, built on first use. NULL when
 * memory runs out; *owned set when the entry did not fit the cache (the
 * caller frees it). */
static st_local *local_get(st_matcher *m, bool *owned) {
    st_grammar *g = m->g;
    struct st_mask_cache *c = g->cache;
    uint64_t hash;
    *owned = false;
    uint32_t n = local_key(m, &hash);
    if (n == UINT32_MAX) return NULL;
    pthread_mutex_lock(&c->lock);
    st_local *e = c->buckets[hash & (c->n_buckets - 1)];
    while (e && !(e->hash == hash && e->key_len == n && !memcmp(e->key, m->key, (size_t)n * sizeof *m->key))) e = e->next;
    pthread_mutex_unlock(&c->lock);
    if (e) return e;
    st_local *made = local_build(g, m->key, n, hash);
    if (!made) return NULL;
    pthread_mutex_lock(&c->lock);
    e = c->buckets[hash & (c->n_buckets - 1)]; /* another thread may have made it meanwhile */
    while (e && !(e->hash == hash && e->key_len == n && !memcmp(e->key, m->key, (size_t)n * sizeof *m->key))) e = e->next;
    if (!e && c->bytes + local_bytes(g->v, made) <= ST_CACHE_MAX_BYTES) {
        if (c->count + 1 > c->n_buckets) { /* grow: rehash the chains */
            size_t nb = c->n_buckets * 2;
            st_local **b = calloc(nb, sizeof *b);
            if (b) {
                for (size_t k = 0; k < c->n_buckets; k++)
                    for (st_local *x = c->buckets[k], *next; x; x = next) {
                        next = x->next;
                        x->next = b[x->hash & (nb - 1)];
                        b[x->hash & (nb - 1)] = x;
                    }
                free(c->buckets);
                c->buckets = b;
                c->n_buckets = nb;
            }
        }
        made->next = c->buckets[hash & (c->n_buckets - 1)];
        c->buckets[hash & (c->n_buckets - 1)] = made;
        c->count++;
        c->bytes += local_bytes(g->v, made);
        e = made;
        made = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (made) { /* someone else's entry won, or the cache is full */
        if (e) {
            local_free(made);
            return e;
        }
        *owned = true;
        return made;
    }
    return e;
}

/* The mask: the local state's cached tokens, then the context-dependent
 * subtrees walked against the real stack. */
void st_matcher_fill_mask(st_matcher *m, uint32_t *mask) {
    const st_vocab *v = m->g->v;
    if (st_matcher_is_terminated(m)) {
        memset(mask, 0, (size_t)st_mask_words(v) * sizeof *mask);
        set_eos_bits(m, mask);
        return;
    }
    bool owned;
    st_local *e = local_get(m, &owned);
    size_t base = m->n_sets;
    if (!e || !sets_reserve(m, base + v->max_depth + 1)) {
        if (owned) local_free(e);
        st_matcher_fill_mask_direct(m, mask);
        return;
    }
    memcpy(mask, e->acc, (size_t)st_mask_words(v) * sizeof *mask);
    const uint8_t *path = NULL;
    uint32_t path_len = 0;
    for (uint32_t k = 0; k < e->n_unc; k++) {
        const st_unc *u = &e->unc[k];
        uint32_t d = u->depth;
        const uint8_t *p = v->bytes + v->off[u->tok];
        uint32_t l = 0;
        while (l < path_len && l < d && p[l] == path[l]) l++;
        truncate_sets(m, base + l);
        bool ok = true;
        for (; l < d && ok; l++) ok = push_byte(m, p[l]);
        path = p;
        path_len = ok ? d : l - 1;
        if (ok) walk(m, base, u->from, u->to, mask);
    }
    truncate_sets(m, base);
    if (owned) local_free(e);
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

/*
 * vocab.c - a tokenizer's vocabulary as the matcher needs it: each id's
 * bytes (tokenizer_token_bytes), which ids are never allowed (special
 * tokens, holes, tokens with no bytes), the EOS ids, and a byte trie of the
 * rest so that a mask walks every shared prefix once.
 *
 * The trie is stored flat in preorder (st_internal.h): built from the ids
 * sorted by their bytes, where each token adds the nodes for its bytes past
 * the longest common prefix with the token before it. A walk that finds a
 * byte the grammar rejects jumps to node_end[i], skipping the whole subtree.
 * Llama 3's 128k tokens give about 0.4M nodes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "structured/st_internal.h"

void st_vocab_free(st_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->kind);
    free(v->eos);
    free(v->node_byte);
    free(v->node_depth);
    free(v->node_end);
    free(v->node_tok);
    free(v->node_maxd);
    free(v->node_u8);
    free(v->node_cls);
    free(v->cls);
    free(v->toks);
    free(v);
}

int32_t st_vocab_size(const st_vocab *v) { return v->n_ids; }
int32_t st_mask_words(const st_vocab *v) { return (v->n_ids + 31) / 32; }

static const st_vocab *sort_vocab; /* qsort has no context argument; set under sort_lock */

static int cmp_tokens(const void *a, const void *b) {
    const st_vocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* node_cls: the bytes of each node's subtree (its own and every one below)
 * as an index into cls, the distinct such sets (a few thousand). */
static vllm_status subtree_classes(st_vocab *v) {
    uint32_t n = (uint32_t)v->n_nodes;
    st_bset *u = malloc(((size_t)n + 1) * sizeof *u);
    v->node_cls = malloc(((size_t)n + 1) * sizeof *v->node_cls);
    size_t cap = 1024;
    uint32_t *slot = calloc(cap, sizeof *slot); /* class index + 1 */
    if (!u || !v->node_cls || !slot) {
        free(u);
        free(slot);
        return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    }
    vllm_status rc = VLLM_OK;
    size_t cap_cls = 0;
    for (uint32_t i = n; i-- > 0 && !rc;) {
        st_bset a = {{0}};
        st_bset_add(&a, v->node_byte[i]);
        for (uint32_t j = i + 1; j < v->node_end[i]; j = v->node_end[j])
            for (int k = 0; k < 4; k++) a.w[k] |= u[j].w[k];
        u[i] = a;
        if ((size_t)(v->n_cls + 1) * 2 > cap) { /* grow the interning table */
            size_t nc = cap * 2;
            uint32_t *ns = calloc(nc, sizeof *ns);
            if (!ns) {
                rc = vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
                break;
            }
            for (size_t q = 0; q < cap; q++) {
                if (!slot[q]) continue;
                const st_bset *c = &v->cls[slot[q] - 1];
                size_t h = (size_t)((c->w[0] ^ c->w[1] * 31 ^ c->w[2] * 131 ^ c->w[3] * 1031) * 0x9e3779b97f4a7c15ull >> 20) & (nc - 1);
                while (ns[h]) h = (h + 1) & (nc - 1);
                ns[h] = slot[q];
            }
            free(slot);
            slot = ns;
            cap = nc;
        }
        size_t h = (size_t)((a.w[0] ^ a.w[1] * 31 ^ a.w[2] * 131 ^ a.w[3] * 1031) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
        while (slot[h] && memcmp(&v->cls[slot[h] - 1], &a, sizeof a)) h = (h + 1) & (cap - 1);
        if (!slot[h]) {
            if ((rc = buf_grow((void **)&v->cls, &cap_cls, (size_t)v->n_cls + 1, sizeof *v->cls))) break;
            v->cls[v->n_cls++] = a;
            slot[h] = (uint32_t)v->n_cls;
        }
        v->node_cls[i] = slot[h] - 1;
    }
    free(u);
    free(slot);
    return rc;
}

static vllm_status build_trie(st_vocab *v) {
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_ids; i++) n += v->kind[i] == ST_TOK_NORMAL;
    v->toks = malloc(((size_t)n + 1) * sizeof *v->toks);
    if (!v->toks) return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    n = 0;
    for (int32_t i = 0; i < v->n_ids; i++)
        if (v->kind[i] == ST_TOK_NORMAL) v->toks[n++] = i;
    pthread_mutex_lock(&sort_lock);
    sort_vocab = v;
    qsort(v->toks, (size_t)n, sizeof *v->toks, cmp_tokens);
    pthread_mutex_unlock(&sort_lock);

    /* nodes: at most the total byte count */
    size_t cap = v->off[v->n_ids] + 1;
    v->node_byte = malloc(cap);
    v->node_depth = malloc(cap * sizeof *v->node_depth);
    v->node_end = malloc(cap * sizeof *v->node_end);
    v->node_tok = malloc((cap + 1) * sizeof *v->node_tok);
    uint32_t *open = malloc((size_t)(v->max_depth + 1) * sizeof *open); /* open[d]: the node at depth d */
    if (!v->node_byte || !v->node_depth || !v->node_end || !v->node_tok || !open) {
        free(open);
        return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    }
    uint32_t nodes = 0, depth_open = 0; /* open[1..depth_open] are the current path */
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    /* node_tok[i] counts the tokens ending at node i first, then becomes the
     * prefix sum; sorted tokens end at nondecreasing nodes */
    for (int32_t k = 0; k < n; k++) {
        int32_t id = v->toks[k];
        const uint8_t *s = v->bytes + v->off[id];
        uint32_t len = v->off[id + 1] - v->off[id], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        while (depth_open > lcp) v->node_end[open[depth_open--]] = nodes; /* close deeper nodes */
        for (uint32_t d = lcp; d < len; d++) {
            v->node_byte[nodes] = s[d];
            v->node_depth[nodes] = d + 1;
            v->node_tok[nodes] = 0;
            open[++depth_open] = nodes++;
        }
        v->node_tok[nodes - 1]++; /* equal bytes to the token before: the same node */
        prev = s;
        prev_len = len;
    }
    while (depth_open > 0) v->node_end[open[depth_open--]] = nodes;
    uint32_t sum = 0;
    for (uint32_t i = 0; i < nodes; i++) {
        uint32_t c = v->node_tok[i];
        v->node_tok[i] = sum;
        sum += c;
    }
    v->node_tok[nodes] = sum;
    free(open);
    v->n_nodes = (int32_t)nodes;
    v->node_maxd = malloc(((size_t)nodes + 1) * sizeof *v->node_maxd);
    if (!v->node_maxd) return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    for (uint32_t i = nodes; i-- > 0;) { /* children first: a subtree is [i, node_end[i]) */
        uint32_t m = v->node_depth[i];
        for (uint32_t j = i + 1; j < v->node_end[i]; j = v->node_end[j])
            if (v->node_maxd[j] > m) m = v->node_maxd[j];
        v->node_maxd[i] = (uint16_t)(m > 65535 ? 65535 : m);
    }
    /* node_u8: children first; bit q holds when node i's byte is valid in
     * UTF-8 state q and every child holds the bit of the state after it */
    v->node_u8 = malloc((size_t)nodes + 1);
    if (!v->node_u8) return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    for (uint32_t i = nodes; i-- > 0;) {
        uint8_t bits = 0;
        for (uint8_t q = 0; q < ST_U8_STATES; q++) {
            uint8_t nq = st_u8_next(q, v->node_byte[i]);
            bool ok = nq != ST_U8_BAD;
            for (uint32_t j = i + 1; ok && j < v->node_end[i]; j = v->node_end[j]) ok = (v->node_u8[j] >> nq) & 1;
            bits |= (uint8_t)(ok << q);
        }
        v->node_u8[i] = bits;
    }
    return subtree_classes(v);
}

vllm_status st_vocab_new(const tokenizer *t, const int32_t *eos_ids, int32_t n_eos, st_vocab **out) {
    *out = NULL;
    st_vocab *v = calloc(1, sizeof *v);
    if (!v) return vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
    vllm_status rc = VLLM_OK;
    strbuf all = {0}, one = {0};
    v->n_ids = tokenizer_vocab_size(t);
    v->off = malloc(((size_t)v->n_ids + 1) * sizeof *v->off);
    v->kind = calloc((size_t)v->n_ids + 1, 1);
    if (!v->off || !v->kind) {
        rc = vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < v->n_ids; i++) {
        v->off[i] = (uint32_t)all.len;
        one.len = 0;
        if (tokenizer_is_special(t, i) || tokenizer_token_bytes(t, i, &one) != VLLM_OK || one.len == 0) {
            v->kind[i] = ST_TOK_EXCLUDED;
            continue;
        }
        if ((rc = sb_add(&all, one.s, one.len))) goto fail;
        if (one.len > v->max_depth) v->max_depth = (uint32_t)one.len;
    }
    v->off[v->n_ids] = (uint32_t)all.len;
    v->bytes = (uint8_t *)all.s;
    all.s = NULL;
    if (!v->bytes && !(v->bytes = malloc(1))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
        goto fail;
    }
    int32_t def_eos = tokenizer_eos_id(t);
    if (!eos_ids || n_eos <= 0) {
        eos_ids = &def_eos;
        n_eos = def_eos >= 0 ? 1 : 0;
    }
    v->eos = malloc(((size_t)n_eos + 1) * sizeof *v->eos);
    if (!v->eos) {
        rc = vllm_error(VLLM_ERR_NOMEM, "structured vocab: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < n_eos; i++) {
        if (eos_ids[i] < 0 || eos_ids[i] >= v->n_ids) {
            rc = vllm_error(VLLM_ERR_INVALID, "structured vocab: EOS id %d outside the vocabulary (%d ids)",
                            eos_ids[i], v->n_ids);
            goto fail;
        }
        v->eos[v->n_eos++] = eos_ids[i];
        v->kind[eos_ids[i]] = ST_TOK_EOS;
    }
    if ((rc = build_trie(v))) goto fail;
    free(one.s);
    *out = v;
    return VLLM_OK;
fail:
    free(all.s);
    free(one.s);
    st_vocab_free(v);
    return rc;
}

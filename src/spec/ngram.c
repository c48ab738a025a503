/*
 * ngram.c - n-gram prompt lookup (see ngram.h).
 *
 * Reversing the tokens turns "which earlier substrings equal the sequence's
 * last n tokens" into "where does a prefix of the reversed sequence recur",
 * which the KMP failure function answers in one left-to-right pass: at each
 * reversed position i, len is the longest prefix of the reversed tokens that
 * ends at i (a match of the last len tokens starting at original position
 * num_tokens - 1 - i, with at least one token after it, since i >= 1). The
 * largest len wins, ties going to the largest i (the earliest original
 * position), as vLLM does. Matches are capped at max_n: when len reaches
 * max_n it falls back to the longest border of that prefix, so the failure
 * table is needed (and kept) only for the first max_n prefixes.
 *
 * Rejected: a suffix automaton or hash index kept per sequence (O(1)
 * amortised per token, but state per sequence across preemption and
 * aborts); the linear scan costs less than one decode step's attention over
 * the same tokens.
 */
#include "spec/ngram.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct ngram {
    int32_t min_n, max_n;
    int32_t *lps;                    /* (max_n) failure table of the reversed tokens' first max_n prefixes */
};

vllm_status ngram_create(int32_t min_n, int32_t max_n, ngram **out) {
    *out = NULL;
    if (min_n < 1) return vllm_error(VLLM_ERR_INVALID, "prompt_lookup_min=%d must be > 0", min_n);
    if (max_n < 1) return vllm_error(VLLM_ERR_INVALID, "prompt_lookup_max=%d must be > 0", max_n);
    if (min_n > max_n)
        return vllm_error(VLLM_ERR_INVALID, "prompt_lookup_min=%d must be <= prompt_lookup_max=%d", min_n, max_n);
    ngram *g = calloc(1, sizeof *g);
    int32_t *lps = calloc((size_t)max_n, sizeof *lps);
    if (!g || !lps) {
        free(g);
        free(lps);
        return vllm_error(VLLM_ERR_NOMEM, "n-gram proposer: out of memory");
    }
    g->min_n = min_n;
    g->max_n = max_n;
    g->lps = lps;
    *out = g;
    return VLLM_OK;
}

void ngram_free(ngram *g) {
    if (!g) return;
    free(g->lps);
    free(g);
}

int32_t ngram_propose(ngram *g, const int32_t *tokens, int32_t num_tokens, int32_t k, int32_t *drafts) {
    const int32_t n = num_tokens, max_n = g->max_n;
    if (n < g->min_n || k <= 0) return 0;
#define REV(i) tokens[n - 1 - (i)]
    int32_t *lps = g->lps;
    memset(lps, 0, (size_t)max_n * sizeof *lps); /* a position that never matches has border 0 */
    int32_t best = 0, best_i = 0, len = 0;
    for (int32_t i = 1; i < n;) {
        if (REV(len) == REV(i)) {
            len++;
            if (len >= best) {
                best = len;
                best_i = i;
            }
            if (i < max_n) lps[i] = len;
            if (len == max_n) len = lps[max_n - 1];
            i++;
        } else if (len != 0) {
            len = lps[len - 1];
        } else {
            i++;
        }
    }
#undef REV
    if (best < g->min_n) return 0;
    int32_t start = n - 1 - best_i + best; /* the token after the match */
    int32_t m = n - start < k ? n - start : k;
    for (int32_t j = 0; j < m; j++) drafts[j] = tokens[start + j];
    return m;
}

static int32_t propose_cb(void *ud, const spec_seq_view *q, int32_t max_drafts, int32_t *drafts) {
    return ngram_propose(ud, q->tokens, q->num_tokens, max_drafts, drafts);
}

spec_proposer ngram_as_proposer(ngram *g) { return (spec_proposer){.propose = propose_cb, .ud = g}; }

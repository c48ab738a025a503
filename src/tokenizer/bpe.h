/*
 * bpe.h - the BPE model of tokenizer.json: vocabulary, merge ranks, and the
 * merge loop applied to one pre-token ("word").
 *
 * Symbols are token strings. The map `syms` holds every string the model can
 * meet: vocab and added tokens with their real ids (an added token overrides a
 * vocab entry with the same string, as transformers.js's tokens_to_ids does),
 * and, with synthetic ids >= n_real, the parts and results of merges whose
 * strings are not tokens. Merge ranks live in a hash table keyed by the
 * (left, right) symbol pair, so a merge step is one probe, never a scan.
 *
 * bpe_encode_word follows transformers.js BPE.bpe()/encode(): split the word
 * into code points, repeatedly merge the adjacent pair of lowest rank (ties:
 * leftmost), via a binary heap with lazy invalidation over a linked list
 * (O(n log n) per word). ignore_merges takes a word that is itself a token
 * whole. A final symbol that is not a token becomes its UTF-8 bytes as <0xNN>
 * tokens with byte_fallback (if all 256 exist), else the unk token.
 */
#ifndef VLLM_TOKENIZER_BPE_H
#define VLLM_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/strmap.h"
#include "vllm/status.h"

typedef struct bpe {
    strmap syms;      /* token string -> symbol id */
    int32_t n_real;   /* ids < n_real are real token ids (vocab size) */
    int32_t n_syms;   /* real + synthetic */
    uint64_t *pair_key; /* (left << 32 | right) + 1, 0 = empty; pair_mask + 1 slots */
    uint32_t *pair_rank;
    int32_t *pair_result;
    uint32_t pair_mask;
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;        /* -1 if none */
    int32_t byte_id[256];  /* id of "<0xNN>", -1 if missing */
} bpe;

/* Per-call working memory for bpe_encode_word; grows, never shrinks.
 * Zero-initialise, release with bpe_scratch_deinit. */
typedef struct bpe_scratch {
    int32_t *sym, *prev, *next;
    uint32_t *start, *end; /* byte range of each node in the word */
    struct bpe_heap_item *heap;
    size_t cap, heap_cap, heap_len;
} bpe_scratch;

/* A growable int32 array (encode output). */
typedef struct bpe_ids {
    int32_t *v;
    size_t n, cap;
} bpe_ids;
vllm_status bpe_ids_push(bpe_ids *iv, int32_t id);

/* Builds the merge table from parallel arrays of pair strings; called once
 * `syms` holds every token. rank = index in the list. */
vllm_status bpe_add_merge(bpe *b, const char *l, size_t ll, const char *r, size_t rl,
                          uint32_t rank);
vllm_status bpe_init_merges(bpe *b, size_t n_merges);
void bpe_deinit(bpe *b);

/* Appends the ids of word[0..len) (valid UTF-8) to out. */
vllm_status bpe_encode_word(const bpe *b, bpe_scratch *s, const char *word, size_t len,
                            bpe_ids *out);
void bpe_scratch_deinit(bpe_scratch *s);

#endif

/*
 * st_internal.h - what the files of src/structured/ share: the vocabulary's
 * layout (vocab.c), the compiled grammar (gbnf.c builds it, matcher.c runs
 * it) and the byte sets the grammar's terminals are.
 *
 * The grammar is a context-free grammar over bytes. A production is a run of
 * symbols in one flat array (g->syms), closed by an END symbol naming its
 * left-hand side, so an Earley item is just (position in syms, origin set):
 *
 *     syms:  ... [NT ws] [T 3] [NT value] [END object] [T 7] [END ws] ...
 *                 ^ a production of `object` starts here
 *
 * A symbol is a uint32_t: the kind in the top two bits (ST_SYM_NT, ST_SYM_T,
 * ST_SYM_END, ST_SYM_EXIT), the rule or terminal index below. An EXIT
 * (id = its production's rule) is an optional end inside a production: the
 * item both completes its rule and moves on. A bounded repetition
 * x{m,n} is one production x..x EXIT x EXIT .. x END, so the parser
 * counts with its position in it: one item per count instead of a chain
 * of n nested rules (X{0,32767} would make a completion chain as long as
 * the text so far at every byte). A terminal is a set of
 * bytes (st_bset, 256 bits); the UTF-8 of a character class is spelled out
 * as productions of byte sets, so the parser never sees code points.
 * Every production left after compile is productive (derives some string),
 * so a non-empty Earley set means the bytes so far are a prefix of a
 * sentence: the mask code relies on this.
 */
#ifndef VLLM_STRUCTURED_ST_INTERNAL_H
#define VLLM_STRUCTURED_ST_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "structured/structured.h"

/* ---- byte sets ----------------------------------------------------------- */

typedef struct st_bset {
    uint64_t w[4];
} st_bset;

static inline bool st_bset_has(const st_bset *s, unsigned b) { return (s->w[b >> 6] >> (b & 63)) & 1; }
static inline void st_bset_add(st_bset *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }
static inline void st_bset_add_range(st_bset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) st_bset_add(s, b);
}
static inline bool st_bset_empty(const st_bset *s) { return !(s->w[0] | s->w[1] | s->w[2] | s->w[3]); }

/* ---- vocabulary ------------------------------------------------------------ */

/* The trie of the allowed tokens' bytes in preorder (the root, the empty
 * prefix, is not stored): node i extends its parent by node_byte[i], sits at
 * depth node_depth[i] (1 = first byte), its subtree is [i, node_end[i]), and
 * the tokens whose bytes end exactly there are toks[node_tok[i] ..
 * node_tok[i + 1]) (several ids may share bytes). Special tokens, holes and
 * tokens with no bytes are not in the trie. */
struct st_vocab {
    int32_t n_ids;
    uint8_t *bytes;       /* every id's bytes, back to back */
    uint32_t *off;        /* id i = bytes[off[i] .. off[i + 1]) */
    uint8_t *kind;        /* ST_TOK_* per id */
    int32_t *eos;         /* the end-of-sequence ids */
    int32_t n_eos;
    int32_t n_nodes;
    uint8_t *node_byte;
    uint32_t *node_depth;
    uint32_t *node_end;
    uint32_t *node_tok;   /* n_nodes + 1 entries */
    uint16_t *node_maxd;  /* the deepest depth in node i's subtree (its longest token's length) */
    uint8_t *node_u8;     /* bit q: from UTF-8 state q before node i, every token of its subtree is
                             valid UTF-8 so far (st_u8_next's states; bit 0: at a character boundary) */
    uint32_t *node_cls;   /* the bytes of node i's subtree (its own and below): cls[node_cls[i]] */
    st_bset *cls;
    uint32_t n_cls;
    int32_t *toks;
    uint32_t max_depth;   /* the longest token's length */
};

enum { ST_TOK_NORMAL = 0, ST_TOK_EXCLUDED = 1, ST_TOK_EOS = 2 };

/* UTF-8 as a DFA over bytes (RFC 3629: no overlongs, no surrogates, at
 * most U+10FFFF): 0 at a character boundary, 1-3 continuation bytes to go
 * (80-BF), 4 after E0 (A0-BF next), 5 after ED (80-9F), 6 after F0
 * (90-BF), 7 after F4 (80-8F); ST_U8_BAD for a byte that cannot come. */
#define ST_U8_STATES 8
#define ST_U8_BAD 0xff
static inline uint8_t st_u8_next(uint8_t q, unsigned b) {
    switch (q) {
    case 0:
        if (b < 0x80) return 0;
        if (b >= 0xc2 && b <= 0xdf) return 1;
        if (b == 0xe0) return 4;
        if (b == 0xed) return 5;
        if (b >= 0xe1 && b <= 0xef) return 2;
        if (b == 0xf0) return 6;
        if (b >= 0xf1 && b <= 0xf3) return 3;
        if (b == 0xf4) return 7;
        return ST_U8_BAD;
    case 1: case 2: case 3: return b >= 0x80 && b <= 0xbf ? (uint8_t)(q - 1) : ST_U8_BAD;
    case 4: return b >= 0xa0 && b <= 0xbf ? 1 : ST_U8_BAD;
    case 5: return b >= 0x80 && b <= 0x9f ? 1 : ST_U8_BAD;
    case 6: return b >= 0x90 && b <= 0xbf ? 2 : ST_U8_BAD;
    default: return b >= 0x80 && b <= 0x8f ? 2 : ST_U8_BAD;
    }
}

/* ---- grammar ----------------------------------------------------------------- */

#define ST_SYM_NT 0u
#define ST_SYM_T 1u
#define ST_SYM_END 2u
#define ST_SYM_EXIT 3u  /* the production may end here (its rule completes) and also go on */
#define ST_SYM_KIND(s) ((s) >> 30)
#define ST_SYM_ID(s) ((s) & 0x3fffffffu)
#define ST_SYM(kind, id) (((uint32_t)(kind) << 30) | (uint32_t)(id))

struct st_grammar {
    atomic_int refs;
    const st_vocab *v;
    uint32_t *syms;       /* every production, END-terminated */
    uint32_t n_syms;
    uint32_t *prods;      /* rule r's productions start at syms[prods[prod_off[r] ..]] */
    uint32_t *prod_off;   /* n_rules + 1 */
    uint8_t *nullable;    /* per rule */
    st_bset *terms;       /* terminal t's bytes */
    uint32_t n_terms;
    uint32_t n_rules;
    uint32_t root;
    uint32_t *canon;      /* per position: the position the mask cache keys it by (matcher.c) */
    uint32_t *shape;      /* per position: a counted repetition's positions by parity (matcher.c) */
    uint32_t *rep_left;   /* per position: the x's a counted repetition still allows; UINT32_MAX elsewhere */
    struct st_mask_cache *cache;  /* matcher.c: the masks of local states, shared by every matcher */
};

/* Parses GBNF text into g (everything but refs and v). On error the message
 * names the line and column. */
vllm_status st_gbnf_parse(const char *text, size_t len, st_grammar *g);
/* Frees what st_gbnf_parse allocated in g (not g itself). */
void st_grammar_deinit(st_grammar *g);

/* The mask by walking the whole trie against the parser's real stack,
 * without the local-state cache: the reference st_matcher_fill_mask is
 * tested against (matcher.c). */
void st_matcher_fill_mask_direct(st_matcher *m, uint32_t *mask);

/* Appends the UTF-8 encoding of code point c to out[]; returns its length. */
int st_utf8_encode(uint32_t c, uint8_t out[4]);

/* Appends s[0..n) to out as a GBNF "literal" (escaped, with the quotes). */
vllm_status st_gbnf_append_literal(strbuf *out, const char *s, size_t n);

#endif

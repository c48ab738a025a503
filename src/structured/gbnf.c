/*
 * gbnf.c - the GBNF parser: text (structured.h's dialect) -> a context-free
 * grammar over bytes (st_internal.h), ready for the Earley matcher.
 *
 * Recursive descent over the text with one builder: named rules are looked
 * up (and created on first use, so rules may come in any order), groups and
 * repetitions become anonymous rules:
 *
 *     X*      R ::= "" | R X        (left recursion: cheap in Earley)
 *     X+      R ::= X | R X
 *     X?      R ::= "" | X
 *     X{m,n}  X ... X (m times) O, O ::= "" | X EXIT X EXIT ... X (n-m X's;
 *             EXIT: the production may end there, st_internal.h)
 *     X{m,}   X ... X (m times) X*
 *
 * Text is UTF-8 code points; a character class is a set of code point
 * ranges, lowered to bytes by splitting each range where the UTF-8 byte
 * pattern changes (the classic algorithm of RE2 and regex-automata): ASCII
 * becomes one byte-set terminal, longer characters productions of byte-set
 * terminals. Surrogates are never characters. Byte sets are interned, so a
 * grammar has a few dozen terminals at most in practice.
 *
 * XGrammar's printed EBNF is read too: `{m, -1}` is {m,}, and a lookahead
 * assertion `(= ...)` is parsed and dropped: it only tells XGrammar what
 * the grammar around a rule already requires to follow it, so the language
 * stays the same (the matcher sees the context itself).
 *
 * Where a rule ends: at a line whose first item is `name ::=` or at the end
 * of the text; so continuation lines (indented, starting with `|`, or not)
 * all belong to the rule before. Errors name the line and column.
 *
 * After the parse: every used rule must be defined, `root` must exist,
 * nullable rules are found (the matcher needs them for Aycock-Horspool
 * prediction) and unproductive productions (that derive no string, e.g.
 * through an empty class) are dropped, so that every item the matcher makes
 * can still finish.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "structured/st_internal.h"

#define GB_MAX_SYMS (1u << 24)  /* a bigger grammar is refused, not an OOM */
#define GB_MAX_DEPTH 500         /* nested groups */
#define GB_MAX_REPEAT 100000     /* {m,n} bounds */

typedef struct gb_rule {
    const char *name;        /* into the text; NULL for anonymous rules */
    size_t name_len;
    size_t use_pos;          /* first use, for "undefined rule" */
    bool defined;
} gb_rule;

typedef struct gb_prod {
    uint32_t rule, start, len;
} gb_prod;

typedef struct symv {
    uint32_t *a;
    size_t n, cap;
} symv;

typedef struct gb {
    const char *s;
    size_t n, i;
    gb_rule *rules;
    size_t n_rules, cap_rules;
    gb_prod *prods;
    size_t n_prods, cap_prods;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    st_bset *terms;
    size_t n_terms, cap_terms;
    uint32_t *term_hash;     /* open addressing over terms, index + 1 */
    size_t hash_cap;
    int depth;
    int64_t any_rule;        /* the rule for `.`, -1 until used */
} gb;

/* ---- errors ---------------------------------------------------------------- */

static vllm_status gb_err(const gb *b, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static vllm_status gb_err(const gb *b, size_t pos, const char *fmt, ...) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos && k < b->n; k++) {
        if (b->s[k] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)b->s[k] & 0xc0) != 0x80) {
            col++;
        }
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vllm_error(VLLM_ERR_INVALID, "grammar: line %zu column %zu: %s", line, col, msg);
}

/* ---- builder ----------------------------------------------------------------- */

static vllm_status symv_push(symv *v, uint32_t s) {
    if (v->n + 1 > GB_MAX_SYMS) return vllm_error(VLLM_ERR_INVALID, "grammar: more than %u symbols", GB_MAX_SYMS);
    vllm_status rc = buf_grow((void **)&v->a, &v->cap, v->n + 1, sizeof *v->a);
    if (rc) return rc;
    v->a[v->n++] = s;
    return VLLM_OK;
}

static vllm_status gb_new_rule(gb *b, const char *name, size_t name_len, size_t pos, uint32_t *out) {
    vllm_status rc = buf_grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules);
    if (rc) return rc;
    b->rules[b->n_rules] = (gb_rule){name, name_len, pos, name == NULL};
    *out = (uint32_t)b->n_rules++;
    return VLLM_OK;
}

static vllm_status gb_named_rule(gb *b, const char *name, size_t name_len, size_t pos, uint32_t *out) {
    for (size_t r = 0; r < b->n_rules; r++)
        if (b->rules[r].name && b->rules[r].name_len == name_len && !memcmp(b->rules[r].name, name, name_len)) {
            *out = (uint32_t)r;
            return VLLM_OK;
        }
    return gb_new_rule(b, name, name_len, pos, out);
}

static vllm_status gb_add_prod(gb *b, uint32_t rule, const uint32_t *syms, size_t n) {
    if (b->n_pool + n > GB_MAX_SYMS)
        return vllm_error(VLLM_ERR_INVALID, "grammar: more than %u symbols after expansion", GB_MAX_SYMS);
    vllm_status rc = buf_grow((void **)&b->pool, &b->cap_pool, b->n_pool + n + 1, sizeof *b->pool);
    if (!rc) rc = buf_grow((void **)&b->prods, &b->cap_prods, b->n_prods + 1, sizeof *b->prods);
    if (rc) return rc;
    if (n) memcpy(b->pool + b->n_pool, syms, n * sizeof *syms);
    b->prods[b->n_prods++] = (gb_prod){rule, (uint32_t)b->n_pool, (uint32_t)n};
    b->n_pool += n;
    return VLLM_OK;
}

static uint64_t bset_hash(const st_bset *s) {
    uint64_t h = s->w[0] * 0x9e3779b97f4a7c15ull;
    h ^= s->w[1] + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
    h ^= s->w[2] * 0xc2b2ae3d27d4eb4full + (h << 6) + (h >> 2);
    h ^= s->w[3] * 0x165667b19e3779f9ull + (h << 6) + (h >> 2);
    return h ^ (h >> 29);
}

/* The terminal symbol for byte set s (interned). */
static vllm_status gb_term(gb *b, const st_bset *s, uint32_t *out) {
    vllm_status rc;
    if ((b->n_terms + 1) * 2 > b->hash_cap) {
        size_t cap = b->hash_cap ? b->hash_cap * 2 : 64;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) return vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
        for (size_t t = 0; t < b->n_terms; t++) {
            size_t k = bset_hash(&b->terms[t]) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = (uint32_t)t + 1;
        }
        free(b->term_hash);
        b->term_hash = h;
        b->hash_cap = cap;
    }
    size_t k = bset_hash(s) & (b->hash_cap - 1);
    for (; b->term_hash[k]; k = (k + 1) & (b->hash_cap - 1))
        if (!memcmp(&b->terms[b->term_hash[k] - 1], s, sizeof *s)) {
            *out = ST_SYM(ST_SYM_T, b->term_hash[k] - 1);
            return VLLM_OK;
        }
    if ((rc = buf_grow((void **)&b->terms, &b->cap_terms, b->n_terms + 1, sizeof *b->terms))) return rc;
    b->terms[b->n_terms] = *s;
    b->term_hash[k] = (uint32_t)b->n_terms + 1;
    *out = ST_SYM(ST_SYM_T, b->n_terms++);
    return VLLM_OK;
}

static vllm_status gb_byte(gb *b, unsigned c, uint32_t *out) {
    st_bset s = {{0}};
    st_bset_add(&s, c);
    return gb_term(b, &s, out);
}

/* ---- UTF-8 ------------------------------------------------------------------- */

int st_utf8_encode(uint32_t c, uint8_t o[4]) {
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xc0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xe0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (uint8_t)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (uint8_t)(0xf0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (uint8_t)(0x80 | (c & 0x3f));
    return 4;
}

/* Decodes one UTF-8 character of s[*i..n); -1 if invalid (overlong,
 * surrogate, truncated, > U+10FFFF). */
static int32_t utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[*i];
    int len;
    uint32_t cp, min;
    if (c < 0x80) {
        (*i)++;
        return (int32_t)c;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return -1;
    }
    if (*i + (size_t)len > n) return -1;
    for (int k = 1; k < len; k++) {
        if ((u[*i + k] & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (u[*i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *i += (size_t)len;
    return (int32_t)cp;
}

/* ---- character classes ---------------------------------------------------------- */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct rangev {
    cp_range *a;
    size_t n, cap;
} rangev;

static vllm_status rangev_push(rangev *v, uint32_t lo, uint32_t hi) {
    vllm_status rc = buf_grow((void **)&v->a, &v->cap, v->n + 1, sizeof *v->a);
    if (rc) return rc;
    v->a[v->n++] = (cp_range){lo, hi};
    return VLLM_OK;
}

static int cmp_range(const void *x, const void *y) {
    const cp_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Sorts and merges v; negates it over the characters if neg; removes the
 * surrogates. */
static vllm_status ranges_normalize(rangev *v, bool neg) {
    if (v->n) qsort(v->a, v->n, sizeof *v->a, cmp_range);
    size_t m = 0;
    for (size_t k = 0; k < v->n; k++) {
        if (m && v->a[k].lo <= v->a[m - 1].hi + 1) {
            if (v->a[k].hi > v->a[m - 1].hi) v->a[m - 1].hi = v->a[k].hi;
        } else {
            v->a[m++] = v->a[k];
        }
    }
    v->n = m;
    rangev out = {0};
    vllm_status rc = VLLM_OK;
    if (neg) {
        uint32_t next = 0;
        for (size_t k = 0; k < v->n && !rc; k++) {
            if (v->a[k].lo > next) rc = rangev_push(&out, next, v->a[k].lo - 1);
            next = v->a[k].hi + 1;
        }
        if (!rc && next <= 0x10ffff) rc = rangev_push(&out, next, 0x10ffff);
    } else {
        for (size_t k = 0; k < v->n && !rc; k++) rc = rangev_push(&out, v->a[k].lo, v->a[k].hi);
    }
    /* cut the surrogates out */
    rangev fin = {0};
    for (size_t k = 0; k < out.n && !rc; k++) {
        cp_range r = out.a[k];
        if (r.hi < 0xd800 || r.lo > 0xdfff) {
            rc = rangev_push(&fin, r.lo, r.hi);
        } else {
            if (r.lo < 0xd800) rc = rangev_push(&fin, r.lo, 0xd7ff);
            if (!rc && r.hi > 0xdfff) rc = rangev_push(&fin, 0xe000, r.hi);
        }
    }
    free(out.a);
    free(v->a);
    *v = fin;
    return rc;
}

/* Adds to rule r the productions of byte-set terminals that spell the
 * UTF-8 characters [lo, hi] (all of one encoded length, no surrogates). */
static vllm_status utf8_range_prods(gb *b, uint32_t r, uint32_t lo, uint32_t hi) {
    static const uint32_t len_max[] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
    for (int k = 0; k < 3; k++)
        if (lo <= len_max[k] && hi > len_max[k]) {
            vllm_status rc = utf8_range_prods(b, r, lo, len_max[k]);
            return rc ? rc : utf8_range_prods(b, r, len_max[k] + 1, hi);
        }
    uint8_t a[4], z[4];
    int n = st_utf8_encode(lo, a);
    st_utf8_encode(hi, z);
    for (int k = 1; k < n; k++) {
        uint32_t m = (1u << (6 * k)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                vllm_status rc = utf8_range_prods(b, r, lo, lo | m);
                return rc ? rc : utf8_range_prods(b, r, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                vllm_status rc = utf8_range_prods(b, r, lo, (hi & ~m) - 1);
                return rc ? rc : utf8_range_prods(b, r, hi & ~m, hi);
            }
        }
    }
    uint32_t syms[4];
    for (int k = 0; k < n; k++) {
        st_bset s = {{0}};
        st_bset_add_range(&s, a[k], z[k]);
        vllm_status rc = gb_term(b, &s, &syms[k]);
        if (rc) return rc;
    }
    return gb_add_prod(b, r, syms, (size_t)n);
}

/* The symbol for a normalized set of character ranges: one terminal when
 * they are all ASCII, else an anonymous rule. */
static vllm_status class_symbol(gb *b, const rangev *v, uint32_t *out) {
    st_bset ascii = {{0}};
    bool wide = false;
    for (size_t k = 0; k < v->n; k++) {
        if (v->a[k].lo < 0x80) st_bset_add_range(&ascii, v->a[k].lo, v->a[k].hi < 0x80 ? v->a[k].hi : 0x7f);
        if (v->a[k].hi >= 0x80) wide = true;
    }
    if (!wide) return gb_term(b, &ascii, out);
    uint32_t r = 0, t;
    vllm_status rc = gb_new_rule(b, NULL, 0, b->i, &r);
    if (!rc && !st_bset_empty(&ascii) && !(rc = gb_term(b, &ascii, &t))) rc = gb_add_prod(b, r, &t, 1);
    for (size_t k = 0; k < v->n && !rc; k++) {
        uint32_t lo = v->a[k].lo < 0x80 ? 0x80 : v->a[k].lo;
        if (v->a[k].hi >= lo) rc = utf8_range_prods(b, r, lo, v->a[k].hi);
    }
    *out = ST_SYM(ST_SYM_NT, r);
    return rc;
}

/* ---- lexing ---------------------------------------------------------------------- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* Skips blanks, newlines and comments. */
static void skip_space(gb *b) {
    while (b->i < b->n) {
        char c = b->s[b->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            b->i++;
        } else if (c == '#') {
            while (b->i < b->n && b->s[b->i] != '\n') b->i++;
        } else {
            break;
        }
    }
}

/* Blanks only (before a postfix operator). */
static void skip_blanks(gb *b) {
    while (b->i < b->n && (b->s[b->i] == ' ' || b->s[b->i] == '\t')) b->i++;
}

/* At `name ::=` (the start of the next rule), or at the end of the text. */
static bool at_rule_start(const gb *b) {
    size_t k = b->i;
    if (k >= b->n) return true;
    while (k < b->n && is_name_char(b->s[k])) k++;
    if (k == b->i) return false;
    while (k < b->n && (b->s[k] == ' ' || b->s[k] == '\t')) k++;
    return k + 3 <= b->n && !memcmp(b->s + k, "::=", 3);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (an escape or a UTF-8 character). */
static vllm_status read_char(gb *b, bool in_class, uint32_t *out) {
    size_t start = b->i;
    if (b->s[b->i] != '\\') {
        int32_t c = utf8_next(b->s, b->n, &b->i);
        if (c < 0) return gb_err(b, start, "invalid UTF-8");
        *out = (uint32_t)c;
        return VLLM_OK;
    }
    if (b->i + 1 >= b->n) return gb_err(b, start, "escape at the end of the text");
    char e = b->s[b->i + 1];
    b->i += 2;
    int digits = 0;
    switch (e) {
    case 'n': *out = '\n'; return VLLM_OK;
    case '0': *out = 0; return VLLM_OK;
    case 'r': *out = '\r'; return VLLM_OK;
    case 't': *out = '\t'; return VLLM_OK;
    case '\\': case '"': case '\'': case '[': case ']': case '/':
        *out = (uint32_t)e;
        return VLLM_OK;
    case '-': case '^':
        if (!in_class) break;
        *out = (uint32_t)e;
        return VLLM_OK;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: break;
    }
    if (!digits && e > 0x20 && e < 0x7f && !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') ||
                                             (e >= '0' && e <= '9'))) {
        *out = (uint32_t)e; /* an escaped punctuation character is itself (\? \. \( ...) */
        return VLLM_OK;
    }
    if (!digits) {
        if ((unsigned char)e < 0x20 || (unsigned char)e >= 0x7f) return gb_err(b, start, "bad escape");
        return gb_err(b, start, "bad escape '\\%c'", e);
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = b->i < b->n ? hexval(b->s[b->i]) : -1;
        if (h < 0) return gb_err(b, start, "bad escape '\\%c': expected %d hex digits", e, digits);
        v = v * 16 + (uint32_t)h;
        b->i++;
    }
    if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return gb_err(b, start, "bad escape: U+%04X is not a character", v);
    *out = v;
    return VLLM_OK;
}

/* ---- parser ----------------------------------------------------------------------- */

static vllm_status parse_alts(gb *b, uint32_t lhs);

/* "literal": its bytes' terminals appended to seq. */
static vllm_status parse_literal(gb *b, symv *seq) {
    size_t start = b->i++;
    while (1) {
        if (b->i >= b->n || b->s[b->i] == '\n') return gb_err(b, start, "unterminated literal");
        if (b->s[b->i] == '"') break;
        uint32_t c, t;
        vllm_status rc = read_char(b, false, &c);
        if (rc) return rc;
        uint8_t u[4];
        int n = st_utf8_encode(c, u);
        for (int k = 0; k < n; k++)
            if ((rc = gb_byte(b, u[k], &t)) || (rc = symv_push(seq, t))) return rc;
    }
    b->i++;
    return VLLM_OK;
}

static vllm_status parse_class(gb *b, uint32_t *out) {
    size_t start = b->i++;
    bool neg = b->i < b->n && b->s[b->i] == '^';
    if (neg) b->i++;
    rangev v = {0};
    vllm_status rc = VLLM_OK;
    while (!rc) {
        if (b->i >= b->n || b->s[b->i] == '\n') {
            rc = gb_err(b, start, "unterminated character class");
            break;
        }
        if (b->s[b->i] == ']') break;
        size_t at = b->i;
        uint32_t lo, hi;
        if ((rc = read_char(b, true, &lo))) break;
        hi = lo;
        if (b->i + 1 < b->n && b->s[b->i] == '-' && b->s[b->i + 1] != ']' && b->s[b->i + 1] != '\n') {
            b->i++;
            if ((rc = read_char(b, true, &hi))) break;
            if (hi < lo) {
                rc = gb_err(b, at, "character range out of order (U+%04X > U+%04X)", lo, hi);
                break;
            }
        }
        rc = rangev_push(&v, lo, hi);
    }
    if (!rc) {
        b->i++;
        if (!(rc = ranges_normalize(&v, neg))) rc = class_symbol(b, &v, out);
    }
    free(v.a);
    return rc;
}

static vllm_status parse_uint(gb *b, uint32_t *out) {
    size_t start = b->i;
    uint64_t v = 0;
    while (b->i < b->n && b->s[b->i] >= '0' && b->s[b->i] <= '9') {
        v = v * 10 + (uint64_t)(b->s[b->i++] - '0');
        if (v > GB_MAX_REPEAT) return gb_err(b, start, "repetition bound above %d", GB_MAX_REPEAT);
    }
    if (b->i == start) return gb_err(b, start, "expected a number in the repetition");
    *out = (uint32_t)v;
    return VLLM_OK;
}

/* Appends to seq: x repeated min..max times (max UINT32_MAX = unbounded).
 * The bounded tail is one production with an optional end (EXIT) before
 * each further x, so the parser's position in it is the count. */
static vllm_status repeat(gb *b, symv *seq, uint32_t x, uint32_t min, uint32_t max) {
    vllm_status rc = VLLM_OK;
    for (uint32_t k = 0; k < min && !rc; k++) rc = symv_push(seq, x);
    if (rc || max == min) return rc;
    uint32_t r, s[2];
    if ((rc = gb_new_rule(b, NULL, 0, b->i, &r)) || (rc = gb_add_prod(b, r, NULL, 0))) return rc;
    if (max == UINT32_MAX) { /* R ::= "" | R x */
        s[0] = ST_SYM(ST_SYM_NT, r), s[1] = x;
        if ((rc = gb_add_prod(b, r, s, 2))) return rc;
        return symv_push(seq, ST_SYM(ST_SYM_NT, r));
    }
    /* R ::= "" | x EXIT x EXIT ... x   (max - min x's) */
    size_t n = 2 * (size_t)(max - min) - 1;
    uint32_t *p = malloc(n * sizeof *p);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
    for (size_t k = 0; k < n; k++) p[k] = k % 2 ? ST_SYM(ST_SYM_EXIT, r) : x;
    rc = gb_add_prod(b, r, p, n);
    free(p);
    return rc ? rc : symv_push(seq, ST_SYM(ST_SYM_NT, r));
}

/* One item and its postfix operators, appended to seq. */
static vllm_status parse_item(gb *b, symv *seq) {
    size_t start = b->i, first = seq->n;
    char c = b->s[b->i];
    vllm_status rc;
    uint32_t sym;
    if (c == '"') {
        if ((rc = parse_literal(b, seq))) return rc;
    } else if (c == '[') {
        if ((rc = parse_class(b, &sym)) || (rc = symv_push(seq, sym))) return rc;
    } else if (c == '.') {
        b->i++;
        if (b->any_rule < 0) {
            rangev v = {0};
            if (!(rc = rangev_push(&v, 0, 0x10ffff)) && !(rc = ranges_normalize(&v, false)))
                rc = class_symbol(b, &v, &sym);
            free(v.a);
            if (rc) return rc;
            b->any_rule = sym;
        }
        if ((rc = symv_push(seq, (uint32_t)b->any_rule))) return rc;
    } else if (c == '(') {
        if (++b->depth > GB_MAX_DEPTH) return gb_err(b, start, "groups nested deeper than %d", GB_MAX_DEPTH);
        b->i++;
        uint32_t r;
        if (b->i < b->n && b->s[b->i] == '=') { /* XGrammar's lookahead assertion (= ...): parsed, then dropped */
            b->i++;
            if ((rc = gb_new_rule(b, NULL, 0, start, &r)) || (rc = parse_alts(b, r))) return rc;
            skip_space(b);
            if (b->i >= b->n || b->s[b->i] != ')')
                return gb_err(b, start, "unbalanced parentheses: '(' is never closed");
            b->i++;
            b->depth--;
            return VLLM_OK;
        }
        if ((rc = gb_new_rule(b, NULL, 0, start, &r)) || (rc = parse_alts(b, r))) return rc;
        skip_space(b);
        if (b->i >= b->n || b->s[b->i] != ')') return gb_err(b, start, "unbalanced parentheses: '(' is never closed");
        b->i++;
        b->depth--;
        if ((rc = symv_push(seq, ST_SYM(ST_SYM_NT, r)))) return rc;
    } else if (is_name_char(c)) {
        while (b->i < b->n && is_name_char(b->s[b->i])) b->i++;
        uint32_t r;
        if ((rc = gb_named_rule(b, b->s + start, b->i - start, start, &r))) return rc;
        if ((rc = symv_push(seq, ST_SYM(ST_SYM_NT, r)))) return rc;
    } else if (c == ')') {
        return gb_err(b, start, "unbalanced parentheses: ')' without '('");
    } else if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) {
        return gb_err(b, start, "unexpected character (byte 0x%02x)", (unsigned char)c);
    } else {
        return gb_err(b, start, "unexpected character '%c'", c);
    }
    while (1) {
        size_t save = b->i;
        skip_blanks(b);
        if (b->i >= b->n || !strchr("*+?{", b->s[b->i])) {
            b->i = save;
            return VLLM_OK;
        }
        char op = b->s[b->i];
        size_t op_pos = b->i++;
        uint32_t x;
        if (seq->n - first == 1) {
            x = seq->a[first];
        } else { /* a literal of several bytes (or none): one rule */
            uint32_t r;
            if ((rc = gb_new_rule(b, NULL, 0, start, &r)) ||
                (rc = gb_add_prod(b, r, seq->a ? seq->a + first : NULL, seq->n - first)))
                return rc;
            x = ST_SYM(ST_SYM_NT, r);
        }
        seq->n = first;
        uint32_t min = 0, max = UINT32_MAX;
        if (op == '+') min = 1;
        else if (op == '?') max = 1;
        else if (op == '{') {
            skip_blanks(b);
            if ((rc = parse_uint(b, &min))) return rc;
            skip_blanks(b);
            max = min;
            if (b->i < b->n && b->s[b->i] == ',') {
                b->i++;
                skip_blanks(b);
                if (b->i < b->n && b->s[b->i] == '}') max = UINT32_MAX;
                else if (b->i + 1 < b->n && b->s[b->i] == '-' && b->s[b->i + 1] == '1') /* XGrammar's {m, -1} */
                    max = UINT32_MAX, b->i += 2;
                else if ((rc = parse_uint(b, &max))) return rc;
                skip_blanks(b);
            }
            if (b->i >= b->n || b->s[b->i] != '}') return gb_err(b, op_pos, "repetition: expected '}'");
            b->i++;
            if (max < min) return gb_err(b, op_pos, "repetition {%u,%u}: the maximum is below the minimum", min, max);
        }
        if ((rc = repeat(b, seq, x, min, max))) return rc;
    }
}

/* alternatives of lhs, up to ')' or the end of the rule */
static vllm_status parse_alts(gb *b, uint32_t lhs) {
    symv seq = {0};
    vllm_status rc = VLLM_OK;
    while (!rc) {
        seq.n = 0;
        while (!rc) {
            skip_space(b);
            if (at_rule_start(b) || b->s[b->i] == '|' || b->s[b->i] == ')') break;
            rc = parse_item(b, &seq);
        }
        if (!rc) rc = gb_add_prod(b, lhs, seq.a, seq.n);
        if (rc || b->i >= b->n || b->s[b->i] != '|') break;
        b->i++;
    }
    free(seq.a);
    return rc;
}

static vllm_status parse_rules(gb *b) {
    vllm_status rc;
    skip_space(b);
    if (b->i >= b->n) return vllm_error(VLLM_ERR_INVALID, "grammar: empty grammar (no rules)");
    while (b->i < b->n) {
        size_t start = b->i;
        while (b->i < b->n && is_name_char(b->s[b->i])) b->i++;
        if (b->i == start) {
            if (b->s[b->i] == ')') return gb_err(b, start, "unbalanced parentheses: ')' without '('");
            return gb_err(b, start, "expected a rule name");
        }
        uint32_t r;
        int name_len = (int)(b->i - start);
        if ((rc = gb_named_rule(b, b->s + start, b->i - start, start, &r))) return rc;
        skip_blanks(b);
        if (b->i + 3 > b->n || memcmp(b->s + b->i, "::=", 3))
            return gb_err(b, b->i, "expected '::=' after the rule name '%.*s'", name_len, b->s + start);
        if (b->rules[r].defined) return gb_err(b, start, "rule '%.*s' is defined twice", name_len, b->s + start);
        b->rules[r].defined = true;
        b->i += 3;
        if ((rc = parse_alts(b, r))) return rc;
        skip_space(b);
        if (b->i < b->n && b->s[b->i] == ')') return gb_err(b, b->i, "unbalanced parentheses: ')' without '('");
    }
    return VLLM_OK;
}

/* ---- the grammar ------------------------------------------------------------------- */

void st_grammar_deinit(st_grammar *g) {
    free(g->syms);
    free(g->prods);
    free(g->prod_off);
    free(g->nullable);
    free(g->terms);
    g->syms = g->prods = g->prod_off = NULL;
    g->nullable = NULL;
    g->terms = NULL;
}

/* A production that is a single group, A ::= ( x | y ) | z, takes the
 * group's productions, A ::= x | y | z (XGrammar prints every rule and
 * alternative that way): the same language, and the tail recursion below
 * becomes direct. A few passes for nested groups. */
static vllm_status inline_groups(gb *b) {
    vllm_status rc = VLLM_OK;
    for (int pass = 0; pass < 4 && !rc; pass++) {
        size_t nr = b->n_rules, np = b->n_prods;
        uint32_t *count = calloc(nr + 1, sizeof *count), *first = calloc(nr + 1, sizeof *first);
        uint32_t *list = malloc((np + 1) * sizeof *list);
        bool changed = false;
        if (!count || !first || !list) rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
        if (!rc) {
            for (size_t p = 0; p < np; p++) count[b->prods[p].rule]++;
            for (size_t r = 0, sum = 0; r < nr; r++) first[r] = (uint32_t)sum, sum += count[r], count[r] = 0;
            for (size_t p = 0; p < np; p++) list[first[b->prods[p].rule] + count[b->prods[p].rule]++] = (uint32_t)p;
        }
        for (size_t p = 0; p < np && !rc; p++) {
            gb_prod pr = b->prods[p];
            uint32_t x = pr.len == 1 ? b->pool[pr.start] : 0, g = ST_SYM_ID(x);
            if (pr.len != 1 || ST_SYM_KIND(x) != ST_SYM_NT || g == pr.rule || b->rules[g].name) continue;
            bool self_only = true; /* not when g ::= g (a wrapper loop) */
            for (uint32_t k = 0; k < count[g] && self_only; k++) {
                const gb_prod *q = &b->prods[list[first[g] + k]];
                if (q->rule == UINT32_MAX || (q->len == 1 && b->pool[q->start] == x)) self_only = false;
            }
            if (!self_only) continue;
            b->prods[p].rule = UINT32_MAX;
            changed = true;
            for (uint32_t k = 0; k < count[g] && !rc; k++) {
                gb_prod q = b->prods[list[first[g] + k]];
                uint32_t *tmp = malloc(((size_t)q.len + 1) * sizeof *tmp);
                if (!tmp) {
                    rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
                    break;
                }
                if (q.len) memcpy(tmp, b->pool + q.start, q.len * sizeof *tmp);
                rc = gb_add_prod(b, pr.rule, tmp, q.len);
                free(tmp);
            }
        }
        size_t w = 0;
        for (size_t p = 0; p < b->n_prods; p++)
            if (b->prods[p].rule != UINT32_MAX) b->prods[w++] = b->prods[p];
        b->n_prods = w;
        free(count);
        free(first);
        free(list);
        if (!changed) break;
    }
    return rc;
}

/* Right recursion made left: a rule whose productions are either
 * `alpha A` (A only at the end) or `beta` (no A at all), with at least one
 * of each, derives (alpha1 | ...)* (beta1 | ...); it becomes
 *     A ::= L beta1 | L beta2 ...     L ::= "" | L alpha1 | L alpha2 ...
 * Earley parses the left-recursive loop in constant work per item, where
 * `s ::= [a-z] s | "\""` would chain one completion per character, and the
 * mask cache sees a loop that returns to the same state. */
static vllm_status unroll_tail_recursion(gb *b) {
    size_t n_rules = b->n_rules, n_prods = b->n_prods;
    uint32_t *count = calloc(n_rules + 1, sizeof *count), *first = calloc(n_rules + 1, sizeof *first);
    uint32_t *list = malloc((n_prods + 1) * sizeof *list);
    vllm_status rc = VLLM_OK;
    if (!count || !first || !list) rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
    if (!rc) { /* each rule's productions, so the pass is linear */
        for (size_t p = 0; p < n_prods; p++) count[b->prods[p].rule]++;
        for (size_t r = 0, sum = 0; r < n_rules; r++) first[r] = (uint32_t)sum, sum += count[r], count[r] = 0;
        for (size_t p = 0; p < n_prods; p++) list[first[b->prods[p].rule] + count[b->prods[p].rule]++] = (uint32_t)p;
    }
    for (size_t a = 0; a < n_rules && !rc; a++) {
        uint32_t self = ST_SYM(ST_SYM_NT, a);
        size_t tails = 0, exits = 0;
        bool ok = true;
        for (uint32_t j = 0; j < count[a] && ok; j++) {
            const gb_prod *pr = &b->prods[list[first[a] + j]];
            size_t uses = 0;
            for (uint32_t k = 0; k < pr->len; k++) {
                uses += b->pool[pr->start + k] == self;
                if (ST_SYM_KIND(b->pool[pr->start + k]) == ST_SYM_EXIT) ok = false; /* ends of its own */
            }
            if (uses == 0) exits++;
            else if (uses == 1 && pr->len > 1 && b->pool[pr->start + pr->len - 1] == self) tails++;
            else ok = false;
        }
        if (!ok || !tails || !exits) continue;
        uint32_t l;
        if ((rc = gb_new_rule(b, NULL, 0, 0, &l)) || (rc = gb_add_prod(b, l, NULL, 0))) break;
        for (uint32_t j = 0; j < count[a] && !rc; j++) {
            size_t p = list[first[a] + j];
            gb_prod pr = b->prods[p];
            uint32_t *tmp = malloc(((size_t)pr.len + 1) * sizeof *tmp);
            if (!tmp) {
                rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
                break;
            }
            tmp[0] = ST_SYM(ST_SYM_NT, l);
            bool tail = pr.len > 1 && b->pool[pr.start + pr.len - 1] == self;
            memcpy(tmp + 1, b->pool + pr.start, (tail ? pr.len - 1 : pr.len) * sizeof *tmp);
            rc = gb_add_prod(b, tail ? l : (uint32_t)a, tmp, tail ? pr.len : pr.len + 1);
            free(tmp);
            b->prods[p].rule = UINT32_MAX; /* replaced */
        }
    }
    free(count);
    free(first);
    free(list);
    /* drop the replaced productions */
    size_t w = 0;
    for (size_t p = 0; p < b->n_prods; p++)
        if (b->prods[p].rule != UINT32_MAX) b->prods[w++] = b->prods[p];
    b->n_prods = w;
    return rc;
}

/* nullable and productive rules (fixpoints), then the flat grammar of the
 * productive productions */
static vllm_status finish(gb *b, st_grammar *g) {
    size_t nr = b->n_rules;
    uint8_t *nullable = calloc(nr + 1, 1), *productive = calloc(nr + 1, 1);
    uint32_t *count = calloc(nr + 1, sizeof *count);
    vllm_status rc = VLLM_OK;
    if (!nullable || !productive || !count) {
        rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t p = 0; p < b->n_prods; p++) {
            const gb_prod *pr = &b->prods[p];
            bool nul = true, prod = true, exited = false;
            for (uint32_t k = 0; k < pr->len; k++) {
                uint32_t s = b->pool[pr->start + k];
                if (ST_SYM_KIND(s) == ST_SYM_EXIT) {
                    exited = exited || nul; /* derives "" up to an end: nullable */
                } else if (ST_SYM_KIND(s) == ST_SYM_T) {
                    nul = false;
                    if (st_bset_empty(&b->terms[ST_SYM_ID(s)])) prod = false;
                } else {
                    nul = nul && nullable[ST_SYM_ID(s)];
                    prod = prod && productive[ST_SYM_ID(s)];
                }
            }
            nul = nul || exited;
            if (nul && !nullable[pr->rule]) nullable[pr->rule] = 1, changed = true;
            if (prod && !productive[pr->rule]) productive[pr->rule] = 1, changed = true;
        }
    }
    size_t n_syms = 0, n_keep = 0;
    uint8_t *keep = calloc(b->n_prods + 1, 1);
    if (!keep) {
        rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (size_t p = 0; p < b->n_prods; p++) {
        const gb_prod *pr = &b->prods[p];
        bool ok = true;
        for (uint32_t k = 0; k < pr->len && ok; k++) {
            uint32_t s = b->pool[pr->start + k];
            if (ST_SYM_KIND(s) == ST_SYM_EXIT) continue;
            ok = ST_SYM_KIND(s) == ST_SYM_T ? !st_bset_empty(&b->terms[ST_SYM_ID(s)]) : productive[ST_SYM_ID(s)];
        }
        if (ok) {
            keep[p] = 1;
            n_keep++;
            n_syms += pr->len + 1;
            count[pr->rule]++;
        }
    }
    g->n_rules = (uint32_t)nr;
    g->n_syms = (uint32_t)n_syms;
    g->syms = malloc((n_syms + 1) * sizeof *g->syms);
    g->prods = malloc((n_keep + 1) * sizeof *g->prods);
    g->prod_off = malloc((nr + 1) * sizeof *g->prod_off);
    g->nullable = nullable;
    nullable = NULL;
    g->n_terms = (uint32_t)b->n_terms;
    g->terms = malloc((b->n_terms + 1) * sizeof *g->terms);
    if (!g->syms || !g->prods || !g->prod_off || !g->terms) {
        free(keep);
        rc = vllm_error(VLLM_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    if (b->n_terms) memcpy(g->terms, b->terms, b->n_terms * sizeof *g->terms);
    uint32_t sum = 0;
    for (size_t r = 0; r < nr; r++) {
        g->prod_off[r] = sum;
        sum += count[r];
        count[r] = g->prod_off[r];
    }
    g->prod_off[nr] = sum;
    size_t at = 0;
    for (size_t p = 0; p < b->n_prods; p++) {
        if (!keep[p]) continue;
        const gb_prod *pr = &b->prods[p];
        g->prods[count[pr->rule]++] = (uint32_t)at;
        memcpy(g->syms + at, b->pool + pr->start, pr->len * sizeof *g->syms);
        for (uint32_t k = 0; k < pr->len; k++) /* an EXIT ends the production's rule (after inlining too) */
            if (ST_SYM_KIND(g->syms[at + k]) == ST_SYM_EXIT) g->syms[at + k] = ST_SYM(ST_SYM_EXIT, pr->rule);
        at += pr->len;
        g->syms[at++] = ST_SYM(ST_SYM_END, pr->rule);
    }
    free(keep);
    if (!productive[g->root])
        rc = vllm_error(VLLM_ERR_INVALID, "grammar: the rule 'root' matches no text (every alternative needs "
                                          "an empty character class or a rule that matches nothing)");
done:
    free(nullable);
    free(productive);
    free(count);
    return rc;
}

vllm_status st_gbnf_parse(const char *text, size_t len, st_grammar *g) {
    gb b = {.s = text ? text : "", .n = text ? len : 0, .any_rule = -1};
    vllm_status rc = parse_rules(&b);
    if (!rc) {
        bool have_root = false;
        for (size_t r = 0; r < b.n_rules && !rc; r++) {
            if (!b.rules[r].defined)
                rc = gb_err(&b, b.rules[r].use_pos, "undefined rule '%.*s'", (int)b.rules[r].name_len,
                            b.rules[r].name);
            else if (b.rules[r].name && b.rules[r].name_len == 4 && !memcmp(b.rules[r].name, "root", 4))
                have_root = true, g->root = (uint32_t)r;
        }
        if (!rc && !have_root) rc = vllm_error(VLLM_ERR_INVALID, "grammar: no rule named 'root' (the start rule)");
    }
    if (!rc) rc = inline_groups(&b);
    if (!rc) rc = unroll_tail_recursion(&b);
    if (!rc) rc = finish(&b, g);
    if (rc) st_grammar_deinit(g);
    free(b.rules);
    free(b.prods);
    free(b.pool);
    free(b.terms);
    free(b.term_hash);
    return rc;
}

vllm_status st_gbnf_append_literal(strbuf *out, const char *s, size_t n) {
    vllm_status rc = sb_add(out, "\"", 1);
    size_t i = 0;
    while (!rc && i < n) {
        size_t at = i;
        int32_t c = utf8_next(s, n, &i);
        char tmp[16];
        if (c < 0) return vllm_error(VLLM_ERR_INVALID, "text is not valid UTF-8 at byte %zu", at);
        if (c == '"' || c == '\\') {
            tmp[0] = '\\', tmp[1] = (char)c;
            rc = sb_add(out, tmp, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof tmp, "\\x%02X", (unsigned)c);
            rc = sb_add(out, tmp, 4);
        } else {
            rc = sb_add(out, s + at, i - at);
        }
    }
    return rc ? rc : sb_add(out, "\"", 1);
}

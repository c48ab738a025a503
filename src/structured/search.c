/*
 * search.c - st_regex_search_trim: a JSON-Schema `pattern` (a search, not a
 * whole-string match) reduced to the shortest regex with the same search
 * language, before schema.c widens its unanchored ends with [\s\S]*.
 *
 * A search for R matches the strings of S R S (S = [\s\S]*). Where an end is
 * unanchored, whatever R may or may not add at that end is absorbed by S:
 *
 *     S A B? S  =  S A S         (any nullable tail: x?, x*, x{0,n}, (..|))
 *     S A x+ S  =  S A x S       (x{m,n}: x{m})
 *     S A (B|C) S  =  S A (B'|C') S   with B', C' trimmed the same way
 *
 * and symmetrically at the front. Why it matters: the parser keeps one
 * Earley item per place where the pattern could have ended, so the trailing
 * S of `(https?://([-\w\.]+)+(:\d+)?(/...)?)` carried an item for every
 * character of the URL so far, every token a new, larger state (25-70 ms
 * per mask); trimmed to `https?://[-\w\.]` the match ends once. A pattern
 * that trims to nothing (`a*`) matches every string (*empty set): the
 * caller writes one S, not S S, which is as ambiguous.
 *
 * The text is split into atoms (a character, an escape, a class, a group)
 * with their quantifiers, exactly as regex.c reads them. Anything this
 * scanner does not understand (lookarounds, backreferences, anchors inside,
 * unbalanced brackets) leaves the regex as it is: regex.c then accepts or
 * reports it as before.
 *
 * A run's search, S X{m} S (st_regex_search_run): the front S leaves one
 * item per place in the current run of X where the m characters could have
 * started (a searched [a-zA-Z0-9_-]{162} kept up to 162 items alive over a
 * long string: 90-230 ms masks). The strings containing X^m are exactly
 * (X{0,m-1} Y)* X^m S, Y = not X: take the first maximal run of length >= m;
 * everything before it is runs shorter than m, each ended by a Y. Written so,
 * a run is matched from its first character and the set stays small. m = 1
 * is the common case: `.+` or `[0-9]+` searched, trimmed to one character,
 * kept an item per character matched so far; Y* X S keeps one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "structured/schema_internal.h"
#include "structured/st_internal.h"

#define SR_MAX_DEPTH 64

typedef struct sr_atom {
    size_t s, e;       /* the atom's text [s, e) */
    size_t qe;         /* its quantifier is [e, qe) */
    uint32_t qmin, qmax; /* 1, 1 without a quantifier; qmax UINT32_MAX unbounded */
    size_t in_s, in_e; /* a plain group: its inside; else in_s == in_e == 0 */
} sr_atom;

static bool sr_hex(const char *s, size_t n, size_t i, int digits) {
    if (i + (size_t)digits > n) return false;
    for (int k = 0; k < digits; k++) {
        char c = s[i + (size_t)k];
        if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'))) return false;
    }
    return true;
}

static size_t sr_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
}

/* The end of the escape whose backslash is at i; 0 for a backreference
 * (not trimmed around). */
static size_t sr_escape_end(const char *s, size_t n, size_t i) {
    if (i + 1 >= n) return 0;
    char e = s[i + 1];
    size_t j = i + 2;
    if ((e >= '1' && e <= '9') || e == 'k') return 0;
    if (e == 'x') return sr_hex(s, n, j, 2) ? j + 2 : j;
    if (e == 'c') return j < n ? j + 1 : j;
    if (e == 'u') {
        if (j < n && s[j] == '{') {
            const char *q = memchr(s + j, '}', n - j);
            return q ? (size_t)(q - s) + 1 : 0;
        }
        if (!sr_hex(s, n, j, 4)) return j;
        size_t k = j + 4;
        /* a surrogate pair written as two escapes is one character */
        if ((s[j] | 0x20) == 'd' && strchr("89abAB", s[j + 1]) && k + 6 <= n && s[k] == '\\' && s[k + 1] == 'u' &&
            sr_hex(s, n, k + 2, 4) && (s[k + 2] | 0x20) == 'd' && strchr("cdefCDEF", s[k + 3]))
            return k + 6;
        return k;
    }
    return i + 1 + sr_utf8_len((unsigned char)e);
}

/* The end of the class whose '[' is at i (regex.c's reading: the first
 * unescaped ']' after an optional '^' closes it); 0 if it never closes. */
static size_t sr_class_end(const char *s, size_t n, size_t i) {
    size_t j = i + 1;
    if (j < n && s[j] == '^') j++;
    while (j < n && s[j] != ']') j += s[j] == '\\' ? 2 : 1;
    return j < n ? j + 1 : 0;
}

/* A quantifier at i: its end (i when there is none) and bounds. */
static size_t sr_quant(const char *s, size_t n, size_t i, uint32_t *mn, uint32_t *mx) {
    *mn = *mx = 1;
    if (i >= n) return i;
    size_t j = i;
    if (s[i] == '*' || s[i] == '+' || s[i] == '?') {
        *mn = s[i] == '+';
        *mx = s[i] == '?' ? 1 : UINT32_MAX;
        j = i + 1;
    } else if (s[i] == '{') {
        size_t k = i + 1, d0 = k;
        uint64_t a = 0, b;
        while (k < n && s[k] >= '0' && s[k] <= '9' && a <= 100000) a = a * 10 + (uint64_t)(s[k++] - '0');
        if (k == d0 || k >= n) return i;
        b = a;
        if (s[k] == ',') {
            size_t d1 = ++k;
            b = 0;
            while (k < n && s[k] >= '0' && s[k] <= '9' && b <= 100000) b = b * 10 + (uint64_t)(s[k++] - '0');
            if (k == d1) b = UINT32_MAX;
        }
        if (k >= n || s[k] != '}' || a > 100000 || (b != UINT32_MAX && (b > 100000 || b < a))) return i;
        *mn = (uint32_t)a, *mx = (uint32_t)b;
        j = k + 1;
    } else {
        return i;
    }
    if (j < n && s[j] == '?') j++; /* lazy: the same language */
    return j;
}

/* The atoms of the sequence s[0..n) (no top-level '|'); false when the
 * scanner does not understand it. */
static bool sr_atoms(const char *s, size_t n, sr_atom **out, size_t *n_out, size_t *cap) {
    *n_out = 0;
    for (size_t i = 0; i < n;) {
        sr_atom a = {.s = i};
        char c = s[i];
        uint32_t qa, qb;
        if (c == '^' || c == '$' || c == '|' || c == ')' || c == '*' || c == '+' || c == '?') return false;
        if (c == '{' && sr_quant(s, n, i, &qa, &qb) > i) return false; /* nothing to repeat: regex.c's error */
        if (c == '(') {
            size_t j = i + 1, in = i + 1;
            int depth = 1;
            if (j < n && s[j] == '?') {
                if (j + 1 < n && s[j + 1] == ':') in = j + 2;
                else if (j + 1 < n && (s[j + 1] == '<' || s[j + 1] == 'P') && j + 2 < n && s[j + 2] != '=' &&
                         s[j + 2] != '!') {
                    const char *q = memchr(s + j, '>', n - j);
                    if (!q) return false;
                    in = (size_t)(q - s) + 1;
                } else {
                    return false; /* lookarounds and the rest: left alone */
                }
            }
            for (j = in; j < n && depth;) {
                if (s[j] == '\\') {
                    size_t k = sr_escape_end(s, n, j);
                    if (!k) return false;
                    j = k;
                } else if (s[j] == '[') {
                    size_t k = sr_class_end(s, n, j);
                    if (!k) return false;
                    j = k;
                } else {
                    depth += s[j] == '(' ? 1 : s[j] == ')' ? -1 : 0;
                    j++;
                }
            }
            if (depth) return false;
            a.e = j, a.in_s = in, a.in_e = j - 1;
        } else if (c == '[') {
            if (!(a.e = sr_class_end(s, n, i))) return false;
        } else if (c == '\\') {
            if (!(a.e = sr_escape_end(s, n, i))) return false;
        } else {
            a.e = i + sr_utf8_len((unsigned char)c);
        }
        if (a.e > n) return false;
        a.qe = sr_quant(s, n, a.e, &a.qmin, &a.qmax);
        if (buf_grow((void **)out, cap, *n_out + 1, sizeof **out)) return false;
        (*out)[(*n_out)++] = a;
        i = a.qe;
    }
    return true;
}

static vllm_status sr_alt(const char *s, size_t n, bool front, bool back, int depth, strbuf *out, bool *empty);

/* One end's atom, *a, at an unanchored end: dropped (true) when it may
 * match nothing; else its quantifier cut to its minimum (the least it
 * must match) and, a plain group taken once, its inside trimmed into
 * *rep. *stop when the atoms beyond it stay. */
static vllm_status sr_end_atom(const char *s, sr_atom *a, bool front, bool back, int depth, strbuf *rep,
                               bool *drop, bool *stop) {
    *drop = *stop = false;
    free(rep->s);
    *rep = (strbuf){0}; /* non-NULL after: the atom is replaced */
    if (a->qmin == 0) {
        *drop = true;
        return VLLM_OK;
    }
    *stop = true;
    a->qmax = a->qmin;
    if (a->qmin != 1 || a->in_e <= a->in_s) return VLLM_OK;
    bool empty = false;
    vllm_status rc = sr_alt(s + a->in_s, a->in_e - a->in_s, front, back, depth + 1, rep, &empty);
    if (rc) return rc;
    if (empty) {
        free(rep->s);
        *rep = (strbuf){0};
        *drop = true, *stop = false;
    }
    return VLLM_OK;
}

static vllm_status sr_put_atom(const char *s, const sr_atom *a, const strbuf *rep, strbuf *out) {
    vllm_status rc;
    if (rep && rep->s) {
        if ((rc = sb_add(out, "(?:", 3)) || (rc = sb_add(out, rep->s, rep->len)) || (rc = sb_add(out, ")", 1)))
            return rc;
    } else if ((rc = sb_add(out, s + a->s, a->e - a->s))) {
        return rc;
    }
    if (a->qmin == 1 && a->qmax == 1) return VLLM_OK;
    if (a->qmax == a->qmin) { /* also a cut {m,n} */
        char q[16];
        int k = snprintf(q, sizeof q, "{%u}", a->qmin);
        return sb_add(out, q, (size_t)k);
    }
    return sb_add(out, s + a->e, a->qe - a->e);
}

/* The sequence s[0..n), trimmed at the unanchored ends, appended to out;
 * *empty when nothing is left (it may match the empty string). */
static vllm_status sr_seq(const char *s, size_t n, bool front, bool back, int depth, strbuf *out, bool *empty) {
    sr_atom *at = NULL;
    size_t n_at = 0, cap = 0;
    *empty = false;
    if (depth > SR_MAX_DEPTH || !sr_atoms(s, n, &at, &n_at, &cap)) {
        free(at);
        return sb_add(out, s, n);
    }
    strbuf rep_lo = {0}, rep_hi = {0};
    size_t lo = 0, hi = n_at;
    bool drop, stop, hi_rep = false, lo_rep = false;
    vllm_status rc = VLLM_OK;
    while (back && hi > lo && !rc) {
        bool both = front && hi - lo == 1; /* the last atom is also the first */
        rc = sr_end_atom(s, &at[hi - 1], both, true, depth, &rep_hi, &drop, &stop);
        if (rc) break;
        if (drop) {
            hi--;
            continue;
        }
        hi_rep = rep_hi.s != NULL;
        if (both) front = false;
        if (stop) break;
    }
    while (front && lo < hi && !rc) {
        rc = sr_end_atom(s, &at[lo], true, false, depth, &rep_lo, &drop, &stop);
        if (rc) break;
        if (drop) {
            lo++;
            continue;
        }
        lo_rep = rep_lo.s != NULL;
        if (stop) break;
    }
    if (!rc && lo == hi) *empty = true;
    for (size_t k = lo; k < hi && !rc; k++)
        rc = sr_put_atom(s, &at[k], k == hi - 1 && hi_rep ? &rep_hi : k == lo && lo_rep ? &rep_lo : NULL, out);
    free(rep_lo.s);
    free(rep_hi.s);
    free(at);
    return rc;
}

/* The alternation s[0..n), each alternative trimmed; *empty when one of
 * them is left empty (then the whole is nullable and out is meaningless). */
static vllm_status sr_alt(const char *s, size_t n, bool front, bool back, int depth, strbuf *out, bool *empty) {
    *empty = false;
    vllm_status rc = VLLM_OK;
    int par = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n && !rc; i++) {
        if (i < n) {
            if (s[i] == '\\') {
                size_t k = sr_escape_end(s, n, i);
                i = (k ? k : i + 2) - 1;
                continue;
            }
            if (s[i] == '[') {
                size_t k = sr_class_end(s, n, i);
                if (!k) return sb_add(out, s, n);
                i = k - 1;
                continue;
            }
            par += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
            if (s[i] != '|' || par) continue;
        }
        if (start && (rc = sb_add(out, "|", 1))) break;
        bool e = false;
        rc = sr_seq(s + start, i - start, front, back, depth, out, &e);
        if (e) *empty = true;
        start = i + 1;
    }
    return rc;
}

vllm_status st_regex_search_trim(const char *re, size_t n, bool front, bool back, strbuf *out, bool *empty) {
    *empty = false;
    if (!front && !back) return sb_add(out, re, n);
    return sr_seq(re, n, front, back, 0, out, empty);
}

/* The complement of the class atom a[0..n) as a class, or false: [..] <-> [^..],
 * \d \w \s <-> \D \W \S, . -> the line terminators, an ASCII letter or
 * digit c -> [^c]. */
static bool sr_complement(const char *a, size_t n, strbuf *out) {
    if (n == 2 && a[0] == '\\') {
        const char *from = "dwsDWS", *to = "DWSdws";
        const char *k = memchr(from, a[1], 6);
        if (!k) return false;
        char e[2] = {'\\', to[k - from]};
        return sb_add(out, e, 2) == VLLM_OK;
    }
    if (n == 1 && a[0] == '.') { /* ECMA: . is all but the line terminators */
        const char *t = "[\\n\\r\\u2028\\u2029]";
        return sb_add(out, t, strlen(t)) == VLLM_OK;
    }
    if (n == 1) {
        char c = a[0];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
        char e[4] = {'[', '^', c, ']'};
        return sb_add(out, e, 4) == VLLM_OK;
    }
    if (n < 3 || a[0] != '[' || a[n - 1] != ']') return false;
    bool neg = a[1] == '^';
    if (neg && n < 4) return false; /* [^] */
    /* [^^x] -> [\^x]: a body starting with ^ would negate again */
    const char *open = !neg ? "[^" : a[2] == '^' ? "[\\" : "[";
    return sb_add(out, open, strlen(open)) == VLLM_OK && sb_add(out, a + 1 + neg, n - 1 - neg) == VLLM_OK;
}

vllm_status st_regex_search_run(const char *core, size_t n, strbuf *out, bool *done) {
    *done = false;
    sr_atom *at = NULL;
    size_t n_at = 0, cap = 0;
    bool run = sr_atoms(core, n, &at, &n_at, &cap) && n_at == 1 && at[0].qe == n && at[0].in_s == at[0].in_e &&
               at[0].qmin == at[0].qmax && at[0].qmin >= 1 && at[0].qmin != UINT32_MAX;
    sr_atom a = run ? at[0] : (sr_atom){0};
    free(at);
    strbuf y = {0};
    if (!run || !sr_complement(core + a.s, a.e - a.s, &y)) {
        free(y.s);
        return VLLM_OK;
    }
    /* (?:(?:X{0,m-1}Y)*X{m}[\s\S]*) */
    char head[40], tail[40];
    snprintf(head, sizeof head, "{0,%u}", a.qmin - 1);
    snprintf(tail, sizeof tail, "{%u}[\\s\\S]*)", a.qmin);
    size_t len0 = out->len;
    vllm_status rc = sb_add(out, "(?:(?:", 6);
    if (!rc && a.qmin > 1) rc = sb_add(out, core + a.s, a.e - a.s); /* m = 1: Y* X S */
    if (!rc && a.qmin > 1) rc = sb_add(out, head, strlen(head));
    if (!rc) rc = sb_add(out, y.s, y.len);
    if (!rc) rc = sb_add(out, ")*", 2);
    if (!rc) rc = sb_add(out, core + a.s, a.e - a.s);
    if (!rc) rc = sb_add(out, tail, strlen(tail));
    free(y.s);
    if (rc) out->len = len0;
    else *done = true;
    return rc;
}

/*
 * regex.c - st_regex_to_gbnf: a regular expression (ECMA-262, as JSON
 * Schema's `pattern` and vLLM's `regex` use it) as one GBNF rule.
 *
 * Recursive descent that writes GBNF as it goes: an alternation becomes
 * ( a | b ), a character becomes a "literal", every class (\d, [^a-z], .)
 * becomes a positive GBNF class of code point ranges (negation and the
 * escapes are resolved here, so the GBNF stays simple), quantifiers are
 * copied (lazy forms match the same language, so `?` after a quantifier is
 * dropped). The match is of the whole string: ^ at the start and $ at the
 * end are accepted and dropped; anywhere else they are an error, as are
 * lookarounds, backreferences, word boundaries and \p{..} classes; each
 * error names the construct and its byte offset.
 *
 * ECMA details kept: `.` excludes the line terminators \n \r U+2028 U+2029;
 * \s is ECMA's white space and line terminators; \w is [A-Za-z0-9_]; [] is
 * the empty class and [^] any character; a `{` that does not start a valid
 * quantifier is a literal (Annex B).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "structured/st_internal.h"

#define RX_MAX_DEPTH 500

typedef struct rx {
    const char *s;
    size_t n, i;
    strbuf *out;
    int depth;
    char group_q;  /* the group just parsed is one atom quantified by this ('*' or '+'), else 0 */
    int seq_atoms; /* what the last rx_seq parsed: its atoms, */
    char seq_q;    /* and its last atom's quantifier ('*', '+', '?', '{' or 0) */
} rx;

typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

typedef struct rx_class {
    rx_range *a;
    size_t n, cap;
} rx_class;

static vllm_status rx_err(const rx *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static vllm_status rx_err(const rx *r, size_t at, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vllm_error(VLLM_ERR_INVALID, "regex: %s at offset %zu", msg, at);
}

static vllm_status cls_add(rx_class *c, uint32_t lo, uint32_t hi) {
    vllm_status rc = buf_grow((void **)&c->a, &c->cap, c->n + 1, sizeof *c->a);
    if (rc) return rc;
    c->a[c->n++] = (rx_range){lo, hi};
    return VLLM_OK;
}

static int cmp_rx_range(const void *x, const void *y) {
    const rx_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* sorts and merges; complements over [0, 0x10FFFF] when neg */
static vllm_status cls_normalize(rx_class *c, bool neg) {
    if (c->n) qsort(c->a, c->n, sizeof *c->a, cmp_rx_range);
    size_t m = 0;
    for (size_t k = 0; k < c->n; k++) {
        if (m && c->a[k].lo <= c->a[m - 1].hi + 1) {
            if (c->a[k].hi > c->a[m - 1].hi) c->a[m - 1].hi = c->a[k].hi;
        } else {
            c->a[m++] = c->a[k];
        }
    }
    c->n = m;
    if (!neg) return VLLM_OK;
    rx_class o = {0};
    uint32_t next = 0;
    vllm_status rc = VLLM_OK;
    for (size_t k = 0; k < c->n && !rc; k++) {
        if (c->a[k].lo > next) rc = cls_add(&o, next, c->a[k].lo - 1);
        next = c->a[k].hi + 1;
    }
    if (!rc && next <= 0x10ffff) rc = cls_add(&o, next, 0x10ffff);
    free(c->a);
    *c = o;
    return rc;
}

/* the ranges of \d \w \s (negated: \D \W \S) */
static vllm_status cls_escape(rx_class *c, char e) {
    static const rx_range digit[] = {{'0', '9'}};
    static const rx_range word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const rx_range space[] = {{'\t', '\r'}, {' ', ' '},       {0xa0, 0xa0},     {0x1680, 0x1680},
                                     {0x2000, 0x200a}, {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f},
                                     {0x3000, 0x3000}, {0xfeff, 0xfeff}};
    const rx_range *r;
    size_t n;
    switch (e | 0x20) {
    case 'd': r = digit, n = 1; break;
    case 'w': r = word, n = 4; break;
    default: r = space, n = sizeof space / sizeof *space; break;
    }
    rx_class t = {0};
    vllm_status rc = VLLM_OK;
    for (size_t k = 0; k < n && !rc; k++) rc = cls_add(&t, r[k].lo, r[k].hi);
    if (!rc && e >= 'A' && e <= 'Z') rc = cls_normalize(&t, true);
    for (size_t k = 0; k < t.n && !rc; k++) rc = cls_add(c, t.a[k].lo, t.a[k].hi);
    free(t.a);
    return rc;
}

static void put_cp(strbuf *out, uint32_t c, vllm_status *rc) {
    char tmp[16];
    int n;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        tmp[0] = (char)c;
        n = 1;
    } else if (c <= 0xffff) {
        n = snprintf(tmp, sizeof tmp, "\\u%04X", c);
    } else {
        n = snprintf(tmp, sizeof tmp, "\\U%08X", c);
    }
    if (!*rc) *rc = sb_add(out, tmp, (size_t)n);
}

/* writes a normalized class as a GBNF class (surrogates dropped) */
static vllm_status emit_class(rx *r, const rx_class *c) {
    vllm_status rc = sb_add(r->out, "[", 1);
    for (size_t k = 0; k < c->n && !rc; k++) {
        uint32_t lo = c->a[k].lo, hi = c->a[k].hi;
        /* the surrogates are no characters: split around them */
        uint32_t parts[2][2] = {{lo, hi}, {1, 0}};
        if (lo <= 0xdfff && hi >= 0xd800) {
            parts[0][0] = lo, parts[0][1] = lo < 0xd800 ? 0xd7ff : 0;
            if (lo >= 0xd800) parts[0][0] = 1, parts[0][1] = 0;
            parts[1][0] = 0xe000, parts[1][1] = hi;
            if (hi <= 0xdfff) parts[1][0] = 1, parts[1][1] = 0;
        }
        for (int p = 0; p < 2; p++) {
            if (parts[p][0] > parts[p][1]) continue;
            put_cp(r->out, parts[p][0], &rc);
            if (parts[p][1] != parts[p][0]) {
                if (!rc) rc = sb_add(r->out, "-", 1);
                put_cp(r->out, parts[p][1], &rc);
            }
        }
    }
    return rc ? rc : sb_add(r->out, "]", 1);
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* one UTF-8 character of the pattern */
static vllm_status rx_utf8(rx *r, uint32_t *out) {
    const unsigned char *u = (const unsigned char *)r->s;
    size_t at = r->i;
    unsigned c = u[r->i];
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || at + (size_t)len > r->n) return rx_err(r, at, "invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; k++) {
        if ((u[at + k] & 0xc0) != 0x80) return rx_err(r, at, "invalid UTF-8");
        cp = (cp << 6) | (u[at + k] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return rx_err(r, at, "invalid UTF-8");
    r->i += (size_t)len;
    *out = cp;
    return VLLM_OK;
}

static vllm_status rx_hex(rx *r, size_t at, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = r->i < r->n ? hexv(r->s[r->i]) : -1;
        if (h < 0) return rx_err(r, at, "bad escape: expected %d hex digits", digits);
        v = v * 16 + (uint32_t)h;
        r->i++;
    }
    *out = v;
    return VLLM_OK;
}

/* An escape after the backslash at r->i - 1. Either a character (*cp, *is_class
 * false) or a class added to c (*is_class true). */
static vllm_status rx_escape(rx *r, bool in_class, rx_class *c, uint32_t *cp, bool *is_class) {
    size_t at = r->i - 1;
    *is_class = false;
    if (r->i >= r->n) return rx_err(r, at, "trailing backslash");
    char e = r->s[r->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *is_class = true;
        return cls_escape(c, e);
    case 'n': *cp = '\n'; return VLLM_OK;
    case 'r': *cp = '\r'; return VLLM_OK;
    case 't': *cp = '\t'; return VLLM_OK;
    case 'v': *cp = '\v'; return VLLM_OK;
    case 'f': *cp = '\f'; return VLLM_OK;
    case '0':
        if (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            return rx_err(r, at, "octal escapes are not supported");
        *cp = 0;
        return VLLM_OK;
    case 'b':
        if (in_class) {
            *cp = 8;
            return VLLM_OK;
        }
        return rx_err(r, at, "word boundary assertion \\b is not supported");
    case 'B': return rx_err(r, at, "word boundary assertion \\B is not supported");
    case 'k': return rx_err(r, at, "backreference \\k<...> is not supported");
    case 'p': case 'P': return rx_err(r, at, "Unicode property class \\%c{...} is not supported", e);
    case 'c':
        if (r->i < r->n && ((r->s[r->i] | 0x20) >= 'a' && (r->s[r->i] | 0x20) <= 'z')) {
            *cp = (uint32_t)(r->s[r->i++] & 0x1f);
            return VLLM_OK;
        }
        return rx_err(r, at, "bad control escape \\c");
    case 'x': return rx_hex(r, at, 2, cp);
    case 'u':
        if (r->i < r->n && r->s[r->i] == '{') {
            r->i++;
            uint32_t v = 0;
            int nd = 0;
            while (r->i < r->n && hexv(r->s[r->i]) >= 0 && nd < 7) v = v * 16 + (uint32_t)hexv(r->s[r->i++]), nd++;
            if (!nd || r->i >= r->n || r->s[r->i] != '}' || v > 0x10ffff) return rx_err(r, at, "bad escape \\u{...}");
            r->i++;
            *cp = v;
        } else {
            vllm_status rc = rx_hex(r, at, 4, cp);
            if (rc) return rc;
            /* a surrogate pair written as two escapes */
            if (*cp >= 0xd800 && *cp <= 0xdbff && r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
                size_t save = r->i;
                uint32_t lo = 0;
                r->i += 2;
                if (!rx_hex(r, at, 4, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
                    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
                    return VLLM_OK;
                }
                r->i = save;
            }
        }
        if (*cp >= 0xd800 && *cp <= 0xdfff) return rx_err(r, at, "lone surrogate \\u%04X", *cp);
        return VLLM_OK;
    default:
        if (e >= '1' && e <= '9') return rx_err(r, at, "backreference \\%c is not supported", e);
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_err(r, at, "unknown escape \\%c", e);
        r->i--;
        return rx_utf8(r, cp); /* an escaped punctuation or other character is itself */
    }
}

static vllm_status rx_class_body(rx *r, rx_class *c, bool *neg) {
    size_t at = r->i++; /* '[' */
    *neg = r->i < r->n && r->s[r->i] == '^';
    if (*neg) r->i++;
    vllm_status rc = VLLM_OK;
    while (!rc) {
        if (r->i >= r->n) return rx_err(r, at, "unterminated character class");
        if (r->s[r->i] == ']') {
            r->i++;
            return VLLM_OK;
        }
        uint32_t lo, hi;
        bool lo_cls = false, hi_cls = false;
        if (r->s[r->i] == '\\') {
            r->i++;
            if ((rc = rx_escape(r, true, c, &lo, &lo_cls))) return rc;
        } else if ((rc = rx_utf8(r, &lo))) {
            return rc;
        }
        if (!lo_cls && r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            size_t dash = r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                if ((rc = rx_escape(r, true, c, &hi, &hi_cls))) return rc;
            } else if ((rc = rx_utf8(r, &hi))) {
                return rc;
            }
            if (hi_cls) { /* [a-\d]: the '-' is a character */
                if ((rc = cls_add(c, lo, lo)) || (rc = cls_add(c, '-', '-'))) return rc;
                continue;
            }
            if (hi < lo) return rx_err(r, dash, "character range out of order");
            rc = cls_add(c, lo, hi);
        } else if (!lo_cls) {
            rc = cls_add(c, lo, lo);
        }
    }
    return rc;
}

/* At a valid {m}, {m,} or {m,n}? Reads it if so. */
static bool rx_braces(rx *r, uint32_t *min, uint32_t *max) {
    size_t k = r->i + 1;
    uint64_t a = 0, b;
    size_t d0 = k;
    while (k < r->n && r->s[k] >= '0' && r->s[k] <= '9' && a <= 100000) a = a * 10 + (uint64_t)(r->s[k++] - '0');
    if (k == d0 || k >= r->n) return false;
    b = a;
    if (r->s[k] == ',') {
        k++;
        size_t d1 = k;
        b = 0;
        while (k < r->n && r->s[k] >= '0' && r->s[k] <= '9' && b <= 100000) b = b * 10 + (uint64_t)(r->s[k++] - '0');
        if (k == d1) b = UINT32_MAX;
    }
    if (k >= r->n || r->s[k] != '}') return false;
    *min = (uint32_t)(a > 100000 ? 100001 : a);
    *max = b == UINT32_MAX ? UINT32_MAX : (uint32_t)(b > 100000 ? 100001 : b);
    r->i = k + 1;
    return true;
}

static vllm_status rx_alt(rx *r);

static vllm_status rx_seq(rx *r) {
    vllm_status rc = VLLM_OK;
    bool any = false;
    int atoms = 0;
    char last_q = 0;
    while (!rc && r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        size_t at = r->i;
        char c = r->s[r->i];
        if (c == '^') {
            if (r->depth || any) return rx_err(r, at, "'^' anywhere but at the start is not supported");
            r->i++;
            continue;
        }
        if (c == '$') {
            if (r->depth || (r->i + 1 < r->n && r->s[r->i + 1] != '|'))
                return rx_err(r, at, "'$' anywhere but at the end is not supported");
            r->i++;
            continue;
        }
        if (c == '*' || c == '+' || c == '?') return rx_err(r, at, "nothing to repeat before '%c'", c);
        if (c == '{') {
            uint32_t a, b;
            size_t save = r->i;
            if (rx_braces(r, &a, &b)) return rx_err(r, save, "nothing to repeat before '{'");
        }
        if (any && (rc = sb_add(r->out, " ", 1))) return rc;
        any = true;
        atoms++;
        last_q = 0;
        char inner_q = 0; /* a group's: (x+)+ and the like */
        rx_class cls = {0};
        bool neg = false, is_cls = false;
        uint32_t cp = 0;
        if (c == '(') {
            if (++r->depth > RX_MAX_DEPTH) return rx_err(r, at, "groups nested deeper than %d", RX_MAX_DEPTH);
            r->i++;
            if (r->i < r->n && r->s[r->i] == '?') {
                const char *p = r->s + r->i, *end = r->s + r->n;
                if (p + 1 < end && p[1] == ':') {
                    r->i += 2;
                } else if (p + 1 < end && (p[1] == '=' || p[1] == '!')) {
                    return rx_err(r, at, "lookahead (?%c is not supported", p[1]);
                } else if (p + 2 < end && p[1] == '<' && (p[2] == '=' || p[2] == '!')) {
                    return rx_err(r, at, "lookbehind (?<%c is not supported", p[2]);
                } else if (p + 1 < end && (p[1] == '<' || (p[1] == 'P' && p + 2 < end && p[2] == '<'))) {
                    const char *q = memchr(p, '>', (size_t)(end - p));
                    if (!q) return rx_err(r, at, "unterminated group name");
                    r->i = (size_t)(q - r->s) + 1;
                } else {
                    return rx_err(r, at, "unsupported group (?%c", p + 1 < end ? p[1] : ' ');
                }
            }
            if ((rc = sb_add(r->out, "(", 1)) || (rc = rx_alt(r))) return rc;
            if (r->i >= r->n || r->s[r->i] != ')') return rx_err(r, at, "unbalanced parentheses: '(' is never closed");
            r->i++;
            r->depth--;
            inner_q = r->group_q;
            if ((rc = sb_add(r->out, ")", 1))) return rc;
        } else if (c == '[') {
            if ((rc = rx_class_body(r, &cls, &neg))) {
                free(cls.a);
                return rc;
            }
            is_cls = true;
        } else if (c == '.') {
            r->i++;
            if ((rc = cls_add(&cls, '\n', '\n')) || (rc = cls_add(&cls, '\r', '\r')) ||
                (rc = cls_add(&cls, 0x2028, 0x2029))) {
                free(cls.a);
                return rc;
            }
            neg = is_cls = true;
        } else if (c == '\\') {
            r->i++;
            if ((rc = rx_escape(r, false, &cls, &cp, &is_cls))) {
                free(cls.a);
                return rc;
            }
        } else if (c == ']' || c == '}' || c == '{') {
            r->i++;
            cp = (uint32_t)c;
        } else if ((rc = rx_utf8(r, &cp))) {
            return rc;
        }
        if (c != '(') {
            if (is_cls) {
                if (!(rc = cls_normalize(&cls, neg))) rc = emit_class(r, &cls);
            } else {
                uint8_t u[4];
                int n = st_utf8_encode(cp, u);
                rc = st_gbnf_append_literal(r->out, (const char *)u, (size_t)n);
            }
            free(cls.a);
            if (rc) return rc;
        }
        /* quantifiers */
        if (r->i < r->n) {
            char q = r->s[r->i];
            uint32_t a, b;
            size_t qat = r->i;
            char tmp[48];
            if (q == '*' || q == '+' || q == '?') {
                r->i++;
                tmp[0] = q, tmp[1] = 0;
            } else if (q == '{' && rx_braces(r, &a, &b)) {
                if (a > 100000 || (b != UINT32_MAX && b > 100000))
                    return rx_err(r, qat, "repetition bound above 100000");
                if (b < a) return rx_err(r, qat, "repetition {%u,%u}: the maximum is below the minimum", a, b);
                if (b == UINT32_MAX) snprintf(tmp, sizeof tmp, "{%u,}", a);
                else if (a == b) snprintf(tmp, sizeof tmp, "{%u}", a);
                else snprintf(tmp, sizeof tmp, "{%u,%u}", a, b);
            } else {
                continue;
            }
            if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
            if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?'))
                return rx_err(r, r->i, "nothing to repeat before '%c'", r->s[r->i]);
            last_q = q == '{' ? '{' : q;
            /* (x+)+ is x+, (x*)+ (x+)* (x*)* are x*: the same language, without
             * the ambiguity that gives the parser an item per way to split the
             * run (every token a new, growing state) */
            size_t L = r->out->len;
            if (inner_q && (q == '*' || q == '+') && L >= 2 && r->out->s[L - 2] == inner_q && r->out->s[L - 1] == ')') {
                r->out->s[L - 2] = ')';
                r->out->len = L - 1;
                r->out->s[L - 1] = 0;
                tmp[0] = inner_q == '*' || q == '*' ? '*' : '+';
                tmp[1] = 0;
                last_q = tmp[0];
            }
            if ((rc = sb_add(r->out, tmp, strlen(tmp)))) return rc;
        }
    }
    if (!rc && !any) rc = sb_add(r->out, "\"\"", 2);
    r->seq_atoms = atoms;
    r->seq_q = last_q;
    return rc;
}

static vllm_status rx_alt(rx *r) {
    vllm_status rc = rx_seq(r);
    bool one = true;
    char q = r->seq_q;
    int atoms = r->seq_atoms;
    while (!rc && r->i < r->n && r->s[r->i] == '|') {
        one = false;
        r->i++;
        if (!(rc = sb_add(r->out, " | ", 3))) rc = rx_seq(r);
    }
    r->group_q = one && atoms == 1 && (q == '*' || q == '+') ? q : 0;
    return rc;
}

vllm_status st_regex_to_gbnf(const char *re, size_t len, const char *root, strbuf *out) {
    rx r = {.s = re ? re : "", .n = re ? len : 0, .out = out};
    size_t mark = out->len;
    vllm_status rc = sb_add(out, root, strlen(root));
    if (!rc) rc = sb_add(out, " ::= ", 5);
    if (!rc) rc = rx_alt(&r);
    if (!rc && r.i < r.n) rc = rx_err(&r, r.i, "unbalanced parentheses: ')' without '('");
    if (!rc) rc = sb_add(out, "\n", 1);
    if (rc) {
        out->len = mark;
        if (out->s) out->s[mark] = 0;
    }
    return rc;
}

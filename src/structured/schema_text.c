/*
 * schema_text.c - a regex's grammar as the text of a JSON string
 * (st_gbnf_json_string, for schema.c's `pattern`).
 *
 * JSON Schema's pattern applies to the decoded string, but the grammar
 * constrains the JSON text, where `"` is written \", `\` is \\ and control
 * characters are escapes. So every terminal of the regex's GBNF is rewritten
 * to the JSON spelling of what it matches: a literal character by
 * character, a class as the class of its characters JSON writes raw plus one
 * alternative per character that needs an escape. One spelling per
 * character, the one Python's json.dumps(ensure_ascii=False) writes (\n, \t,
 * \b, \f, \r, \u00XX for other controls, either hex case), so a pattern
 * never admits an escape whose character it rejects (no "\u0041" for [^A]).
 *
 * The lexer knows only the terminals (literals, classes, `.`) and comments;
 * everything else (names, ::=, | ( ) * + ? {m,n}) is copied unchanged.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "structured/schema_internal.h"

#define CP_MAX 0x10FFFFu

typedef struct range { uint32_t lo, hi; } range;

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* one UTF-8 code point or escape at s[*i] (inside a literal or class) */
static int read_cp(const char *s, size_t len, size_t *i, uint32_t *cp) {
    unsigned char ch = (unsigned char)s[*i];
    if (ch == '\\') {
        if (*i + 1 >= len) return -1;
        char e = s[*i + 1];
        *i += 2;
        int nd = 0;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        default: *cp = (unsigned char)e; return 0;
        }
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = *i < len ? hexval(s[*i]) : -1;
            if (h < 0) return -1;
            v = v * 16 + (uint32_t)h;
            (*i)++;
        }
        *cp = v;
        return 0;
    }
    int n = ch < 0x80 ? 1 : ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : 4;
    if (*i + (size_t)n > len) return -1;
    uint32_t v = n == 1 ? ch : n == 2 ? ch & 0x1Fu : n == 3 ? ch & 0x0Fu : ch & 0x07u;
    for (int k = 1; k < n; k++) v = (v << 6) | ((unsigned char)s[*i + (size_t)k] & 0x3Fu);
    *i += (size_t)n;
    *cp = v;
    return 0;
}

static vllm_status put_cp_class(strbuf *b, uint32_t cp) {
    if (cp >= 0x20 && cp < 0x7f && !strchr("]\\^-\"[", (int)cp)) {
        char ch = (char)cp;
        return sb_add(b, &ch, 1);
    }
    char t[16];
    if (cp < 0x10000) snprintf(t, sizeof t, "\\u%04X", cp);
    else snprintf(t, sizeof t, "\\U%08X", cp);
    return sb_add(b, t, strlen(t));
}

/* the JSON escape of a character that needs one, as a GBNF expression */
static vllm_status put_escape(strbuf *b, uint32_t cp) {
    const char *e = NULL;
    switch (cp) {
    case '"': e = "\"\\\\\\\"\""; break;   /* "\\\"" */
    case '\\': e = "\"\\\\\\\\\""; break;  /* "\\\\" */
    case '\n': e = "\"\\\\n\""; break;
    case '\r': e = "\"\\\\r\""; break;
    case '\t': e = "\"\\\\t\""; break;
    case '\b': e = "\"\\\\b\""; break;
    case '\f': e = "\"\\\\f\""; break;
    }
    if (e) return sb_add(b, e, strlen(e));
    char t[64];
    unsigned lo = cp & 15;
    if (lo < 10) snprintf(t, sizeof t, "\"\\\\u00%u%u\"", cp >> 4, lo);
    else snprintf(t, sizeof t, "\"\\\\u00%u\" [%c%c]", cp >> 4, 'a' + lo - 10, 'A' + lo - 10);
    return sb_add(b, t, strlen(t));
}

static bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

/* a literal's characters */
static vllm_status put_literal(strbuf *b, const uint32_t *cps, size_t n) {
    vllm_status rc = sb_add(b, "(", 1);
    bool open = false;  /* inside a "..." run of raw characters */
    for (size_t i = 0; i < n && !rc; i++) {
        if (needs_escape(cps[i])) {
            if (open) { rc = sb_add(b, "\" ", 2); open = false; }
            if (!rc) rc = put_escape(b, cps[i]);
            if (!rc) rc = sb_add(b, " ", 1);
            continue;
        }
        if (!open) { rc = sb_add(b, "\"", 1); open = true; }
        uint32_t cp = cps[i];
        char t[16];
        if (cp < 0x7f) { t[0] = (char)cp; t[1] = 0; }
        else if (cp == 0x7f) snprintf(t, sizeof t, "\\u007F");
        else if (cp < 0x10000) snprintf(t, sizeof t, "\\u%04X", cp);
        else snprintf(t, sizeof t, "\\U%08X", cp);
        if (!rc) rc = sb_add(b, t, strlen(t));
    }
    if (open && !rc) rc = sb_add(b, "\" ", 2);
    if (!n && !rc) rc = sb_add(b, "\"\"", 2);
    if (!rc) rc = sb_add(b, ")", 1);
    return rc;
}

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* the class of ranges r[0..n) (sorted, merged, not negated) */
static vllm_status put_class(strbuf *b, const range *r, size_t n) {
    /* raw part: r minus controls, " and \ */
    strbuf raw = {0};
    vllm_status rc = VLLM_OK;
    size_t nraw = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint32_t lo = r[i].lo < 0x20 ? 0x20 : r[i].lo, hi = r[i].hi;
        if (lo > hi) continue;
        /* split around '"' (0x22) and '\\' (0x5C) */
        uint32_t cuts[2] = {'"', '\\'};
        uint32_t a = lo;
        for (int k = 0; k < 2 && !rc; k++) {
            if (cuts[k] < a || cuts[k] > hi) continue;
            if (a < cuts[k]) {
                rc = put_cp_class(&raw, a);
                if (!rc && cuts[k] - 1 > a) { rc = sb_add(&raw, "-", 1); if (!rc) rc = put_cp_class(&raw, cuts[k] - 1); }
                nraw++;
            }
            a = cuts[k] + 1;
        }
        if (a <= hi && !rc) {
            rc = put_cp_class(&raw, a);
            if (!rc && hi > a) { rc = sb_add(&raw, "-", 1); if (!rc) rc = put_cp_class(&raw, hi); }
            nraw++;
        }
    }
    /* escaped part */
    bool all_ctl = false;
    for (size_t i = 0; i < n; i++) if (r[i].lo == 0 && r[i].hi >= 0x1F) all_ctl = true;
    bool first = true;
    if (!rc) rc = sb_add(b, "(", 1);
    if (nraw && !rc) {
        rc = sb_add(b, "[", 1);
        if (!rc) rc = sb_add(b, raw.s, raw.len);
        if (!rc) rc = sb_add(b, "]", 1);
        first = false;
    }
    if (all_ctl && !rc) {
        const char *e = "\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]";
        if (!first) rc = sb_add(b, " | ", 3);
        if (!rc) rc = sb_add(b, e, strlen(e));
        first = false;
    }
    for (size_t i = 0; i < n && !rc; i++)
        for (uint32_t cp = r[i].lo; cp <= r[i].hi && cp <= '\\'; cp++) {
            if (!needs_escape(cp) || (cp < 0x20 && all_ctl)) continue;
            if (!first) rc = sb_add(b, " | ", 3);
            first = false;
            if (!rc) rc = put_escape(b, cp);
            if (rc) break;
        }
    if (!rc) rc = sb_add(b, ")", 1);
    free(raw.s);
    if (!rc && first) return vllm_error(VLLM_ERR_UNSUPPORTED, "pattern: a character class matches nothing a JSON string can hold");
    return rc;
}

vllm_status st_gbnf_json_string(const char *s, size_t len, strbuf *out) {
    vllm_status rc = VLLM_OK;
    uint32_t *cps = NULL;
    range *rs = NULL;
    size_t cap_cps = 0, cap_rs = 0;
    size_t i = 0;
    while (i < len && !rc) {
        char ch = s[i];
        if (ch == '#') {
            while (i < len && s[i] != '\n') i++;
            continue;
        }
        if (ch == '"') {
            size_t n = 0;
            i++;
            while (i < len && s[i] != '"') {
                uint32_t cp;
                if (read_cp(s, len, &i, &cp)) { rc = vllm_error(VLLM_ERR_FORMAT, "pattern: a malformed literal in the regex's grammar"); break; }
                if (n == cap_cps) {
                    cap_cps = cap_cps ? 2 * cap_cps : 64;
                    uint32_t *nc = realloc(cps, cap_cps * sizeof *nc);
                    if (!nc) { rc = vllm_error(VLLM_ERR_NOMEM, "pattern: out of memory"); break; }
                    cps = nc;
                }
                cps[n++] = cp;
            }
            if (rc) break;
            if (i >= len) { rc = vllm_error(VLLM_ERR_FORMAT, "pattern: an unterminated literal in the regex's grammar"); break; }
            i++;
            rc = put_literal(out, cps, n);
            continue;
        }
        if (ch == '[' || ch == '.') {
            size_t n = 0;
            bool neg = false;
            if (ch == '.') {
                i++;
                neg = true;  /* the complement of nothing */
            } else {
                i++;
                if (i < len && s[i] == '^') { neg = true; i++; }
                while (i < len && s[i] != ']') {
                    uint32_t a, z;
                    if (read_cp(s, len, &i, &a)) { rc = vllm_error(VLLM_ERR_FORMAT, "pattern: a malformed class in the regex's grammar"); break; }
                    z = a;
                    if (i + 1 < len && s[i] == '-' && s[i + 1] != ']') {
                        i++;
                        if (read_cp(s, len, &i, &z)) { rc = vllm_error(VLLM_ERR_FORMAT, "pattern: a malformed class in the regex's grammar"); break; }
                    }
                    if (n == cap_rs) {
                        cap_rs = cap_rs ? 2 * cap_rs : 32;
                        range *nr = realloc(rs, cap_rs * sizeof *nr);
                        if (!nr) { rc = vllm_error(VLLM_ERR_NOMEM, "pattern: out of memory"); break; }
                        rs = nr;
                    }
                    rs[n++] = (range){a < z ? a : z, a < z ? z : a};
                }
                if (rc) break;
                if (i >= len) { rc = vllm_error(VLLM_ERR_FORMAT, "pattern: an unterminated class in the regex's grammar"); break; }
                i++;
            }
            /* sort and merge, then complement if negated */
            if (n) qsort(rs, n, sizeof *rs, cmp_range); /* [] has no ranges: rs is NULL */
            size_t m = 0;
            for (size_t k = 0; k < n; k++) {
                if (m && rs[k].lo <= rs[m - 1].hi + 1) { if (rs[k].hi > rs[m - 1].hi) rs[m - 1].hi = rs[k].hi; }
                else rs[m++] = rs[k];
            }
            if (neg) {
                range *cr = malloc((m + 1) * sizeof *cr);
                if (!cr) { rc = vllm_error(VLLM_ERR_NOMEM, "pattern: out of memory"); break; }
                size_t q = 0;
                uint32_t next = 0;
                for (size_t k = 0; k < m; k++) {
                    if (rs[k].lo > next) cr[q++] = (range){next, rs[k].lo - 1};
                    next = rs[k].hi + 1;
                }
                if (next <= CP_MAX) cr[q++] = (range){next, CP_MAX};
                rc = put_class(out, cr, q);
                free(cr);
            } else {
                rc = put_class(out, rs, m);
            }
            continue;
        }
        rc = sb_add(out, &ch, 1);
        i++;
    }
    free(cps);
    free(rs);
    return rc;
}

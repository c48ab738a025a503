/*
 * pattern_len.c - a JSON-Schema `pattern` together with minLength /
 * maxLength, as one pattern (st_pattern_with_length, for schema.c).
 *
 * The grammar of a pattern cannot count characters by itself, so the two
 * are combined only where the lengths can be read off the regex exactly:
 *
 *   - every match the pattern can make already has a length inside the
 *     bounds (^[0-9]{16}$ with minLength 15; ^[0-9]+$ with minLength 1):
 *     the bounds are implied and the pattern stands alone;
 *   - the pattern is anchored at both ends and all of it is fixed-length but
 *     one single-character atom under a quantifier (^[a-z0-9_.]+$,
 *     ^mystring-[a-zA-Z0-9]+$): that quantifier takes the bounds, minus the
 *     fixed part (^mystring-[a-zA-Z0-9]{1,15}$ for maxLength 24);
 *   - an unanchored pattern whose shortest match is maxLength long ([0-9]{10}
 *     with maxLength 10): the match must be the whole string, so it is
 *     anchored, then read as above.
 *
 * Lengths are code points: an atom (a literal character, an escape such as
 * \d or \u00e9, a class, `.`) matches one; groups and alternatives are
 * measured (shortest, longest), not rewritten. Anything else (lookarounds,
 * backreferences, \b, ^ or $ inside, a top-level alternative, two variable
 * parts) answers "cannot", and schema.c refuses the schema as before.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "structured/schema_internal.h"

static vllm_status sb_puts(strbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

#define PL_INF INT64_MAX

typedef struct pl_item {
    size_t at, atom_end, end;  /* the atom re[at, atom_end), its quantifier up to end */
    int64_t mn, mx;            /* lengths of the quantified item, mx PL_INF: unbounded */
    bool single;               /* the atom is one character */
    int64_t qlo, qhi;          /* the quantifier's counts (1, 1 without one) */
} pl_item;

static int64_t sat_add(int64_t a, int64_t b) { return a == PL_INF || b == PL_INF || a > PL_INF - b ? PL_INF : a + b; }
static int64_t sat_mul(int64_t a, int64_t b) {
    if (a == 0 || b == 0) return 0;
    if (a == PL_INF || b == PL_INF || a > PL_INF / b) return PL_INF;
    return a * b;
}

/* the end of the escape at re[i] == '\\' (one character's escape), or 0 when it is not one character */
static size_t esc_end(const char *re, size_t n, size_t i) {
    if (i + 1 >= n) return 0;
    char e = re[i + 1];
    if (strchr("bBk123456789", e)) return 0;  /* boundaries, backreferences */
    if (e == 'u') {
        if (i + 2 < n && re[i + 2] == '{') return 0;
        return i + 6 <= n ? i + 6 : 0;
    }
    if (e == 'x') return i + 4 <= n ? i + 4 : 0;
    if (e == 'c') return i + 3 <= n ? i + 3 : 0;
    if (e == 'p' || e == 'P') return 0;
    if (e == '0') return i + 2;
    if ((unsigned char)e >= 0x80) {  /* an escaped multibyte character */
        size_t j = i + 2;
        while (j < n && ((unsigned char)re[j] & 0xC0) == 0x80) j++;
        return j;
    }
    return i + 2;
}

static bool seq_len(const char *re, size_t a, size_t b, int64_t *mn, int64_t *mx, int depth);

/* one item at re[i] (i < b): fills it; false when the construct is not understood */
static bool item_at(const char *re, size_t i, size_t b, pl_item *it, int depth) {
    it->at = i;
    it->single = false;
    int64_t amn = 1, amx = 1;
    unsigned char ch = (unsigned char)re[i];
    size_t j;
    if (ch == '\\') {
        j = esc_end(re, b, i);
        if (!j) return false;
        it->single = true;
    } else if (ch == '[') {
        j = i + 1;
        if (j < b && re[j] == '^') j++;
        while (j < b && re[j] != ']') {
            if (re[j] == '\\') j++;
            j++;
        }
        if (j >= b) return false;
        j++;
        it->single = true;
    } else if (ch == '(') {
        size_t k = i + 1;
        if (k < b && re[k] == '?') {
            if (k + 1 < b && re[k + 1] == ':') k += 2;
            else return false;  /* lookarounds, named groups */
        }
        int d = 1;
        bool cls = false;
        for (j = k; j < b && d; j++) {
            if (re[j] == '\\') { j++; continue; }
            if (cls) { if (re[j] == ']') cls = false; continue; }
            if (re[j] == '[') cls = true;
            else if (re[j] == '(') d++;
            else if (re[j] == ')') d--;
        }
        if (d) return false;
        /* j is past ')'; alternatives inside: shortest and longest */
        size_t start = k;
        int dd = 0;
        bool c2 = false;
        amn = PL_INF;
        amx = 0;
        for (size_t q = k; q <= j - 1; q++) {
            bool end = q == j - 1;
            if (!end) {
                if (re[q] == '\\') { q++; continue; }
                if (c2) { if (re[q] == ']') c2 = false; continue; }
                if (re[q] == '[') { c2 = true; continue; }
                if (re[q] == '(') { dd++; continue; }
                if (re[q] == ')') { dd--; continue; }
                if (re[q] != '|' || dd) continue;
            }
            int64_t smn, smx;
            if (!seq_len(re, start, q, &smn, &smx, depth + 1)) return false;
            if (smn < amn) amn = smn;
            if (smx > amx) amx = smx;
            start = q + 1;
        }
    } else if (ch == '^' || ch == '$' || ch == ')' || ch == '|' || ch == '*' || ch == '+' || ch == '?' || ch == '{' ||
               ch == ']' || ch == '}') {
        return false;
    } else {
        j = i + 1;
        while (j < b && ((unsigned char)re[j] & 0xC0) == 0x80) j++;  /* one UTF-8 character */
        it->single = true;
    }
    it->atom_end = j;
    it->qlo = it->qhi = 1;
    if (j < b && (re[j] == '*' || re[j] == '+' || re[j] == '?')) {
        it->qlo = re[j] == '+';
        it->qhi = re[j] == '?' ? 1 : PL_INF;
        j++;
    } else if (j < b && re[j] == '{') {
        long lo = -1, hi = -1;
        int used = 0;
        char tail;
        if (sscanf(re + j, "{%ld,%ld%c%n", &lo, &hi, &tail, &used) == 3 && tail == '}') {
        } else if (sscanf(re + j, "{%ld,%c%n", &lo, &tail, &used) == 2 && tail == '}') {
            hi = -2;
        } else if (sscanf(re + j, "{%ld%c%n", &lo, &tail, &used) == 2 && tail == '}') {
            hi = lo;
        } else {
            return false;  /* a literal '{' (Annex B): not measured */
        }
        if (lo < 0 || (hi != -2 && hi < lo) || j + (size_t)used > b) return false;
        for (int q = 1; q < used - 1; q++)
            if (re[j + q] == ' ' || re[j + q] == '+' || re[j + q] == '-') return false;  /* sscanf's leniency */
        it->qlo = lo;
        it->qhi = hi == -2 ? PL_INF : hi;
        j += (size_t)used;
    }
    if (j < b && re[j] == '?' && (it->qlo != 1 || it->qhi != 1 || re[j - 1] == '?' || re[j - 1] == '*' || re[j - 1] == '+'))
        j++;  /* lazy */
    if (j < b && (re[j] == '*' || re[j] == '+' || re[j] == '?' || re[j] == '{')) return false;
    it->end = j;
    it->mn = sat_mul(amn, it->qlo);
    it->mx = sat_mul(amx, it->qhi);
    return true;
}

/* the shortest and longest match of the sequence re[a, b) (no top-level '|') */
static bool seq_len(const char *re, size_t a, size_t b, int64_t *mn, int64_t *mx, int depth) {
    if (depth > 50) return false;
    *mn = *mx = 0;
    for (size_t i = a; i < b;) {
        pl_item it;
        if (!item_at(re, i, b, &it, depth)) return false;
        *mn = sat_add(*mn, it.mn);
        *mx = sat_add(*mx, it.mx);
        i = it.end;
    }
    return true;
}

static bool top_alternation(const char *re, size_t n) {
    int d = 0;
    bool cls = false;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\') { i++; continue; }
        if (cls) { if (re[i] == ']') cls = false; continue; }
        if (re[i] == '[') cls = true;
        else if (re[i] == '(') d++;
        else if (re[i] == ')') d--;
        else if (re[i] == '|' && d == 0) return true;
    }
    return false;
}

vllm_status st_pattern_with_length(const char *re, int64_t mn, int64_t mx, strbuf *out, bool *never) {
    size_t n = strlen(re);
    *never = false;
    if (mx < 0) mx = PL_INF;
    if (top_alternation(re, n)) return VLLM_ERR_UNSUPPORTED;
    bool anc_s = n && re[0] == '^', anc_e = false;
    if (n > (size_t)anc_s && re[n - 1] == '$') {
        size_t bs = 0;
        while (bs + 2 <= n && re[n - 2 - bs] == '\\') bs++;
        anc_e = bs % 2 == 0;
    }
    size_t a = anc_s, b = n - anc_e;
    int64_t pmn, pmx;
    if (!seq_len(re, a, b, &pmn, &pmx, 0)) return VLLM_ERR_UNSUPPORTED;
    if (!anc_s || !anc_e) {
        if (pmn > mx) { *never = true; return VLLM_OK; }
        if (pmn == mx) {
            anc_s = anc_e = true;  /* the match is the whole string */
        } else {
            /* any string containing a match: lengths pmn.. */
            if (pmn >= mn && mx == PL_INF) return sb_add(out, re, n);
            return VLLM_ERR_UNSUPPORTED;
        }
    }
    if (pmn > mx || pmx < mn) { *never = true; return VLLM_OK; }
    if (pmn >= mn && pmx <= mx) {  /* implied */
        vllm_status rc = sb_puts(out, "^(?:");
        if (!rc) rc = sb_add(out, re + a, b - a);
        return rc ? rc : sb_puts(out, ")$");
    }
    /* one single-character item that varies, everything else fixed */
    pl_item var = {0};
    int n_var = 0;
    int64_t fixed = 0;
    for (size_t i = a; i < b;) {
        pl_item it;
        if (!item_at(re, i, b, &it, 0)) return VLLM_ERR_UNSUPPORTED;
        if (it.mn != it.mx) {
            if (!it.single || n_var++) return VLLM_ERR_UNSUPPORTED;
            var = it;
        } else {
            fixed = sat_add(fixed, it.mn);
        }
        i = it.end;
    }
    if (!n_var || fixed == PL_INF) return VLLM_ERR_UNSUPPORTED;
    int64_t lo = mn - fixed > var.qlo ? mn - fixed : var.qlo;
    int64_t hi = mx == PL_INF ? var.qhi : mx - fixed < var.qhi ? mx - fixed : var.qhi;
    if (hi < lo || hi < 0) { *never = true; return VLLM_OK; }
    char q[64];
    if (hi == PL_INF) snprintf(q, sizeof q, "{%lld,}", (long long)lo);
    else snprintf(q, sizeof q, "{%lld,%lld}", (long long)lo, (long long)hi);
    vllm_status rc = sb_puts(out, "^");
    if (!rc) rc = sb_add(out, re + a, var.atom_end - a);
    if (!rc) rc = sb_puts(out, q);
    if (!rc) rc = sb_add(out, re + var.end, b - var.end);
    return rc ? rc : sb_puts(out, "$");
}

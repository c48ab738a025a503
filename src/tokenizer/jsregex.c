/*
 * jsregex.c - tokenizer.json regexes, run as transformers.js runs them.
 *
 * transformers.js compiles tokenizer.json patterns as JavaScript regexes with
 * the u flag, after rewriting a few constructs JS lacks ((?i:...) groups,
 * possessive quantifiers). We apply the same rewrites and then translate the
 * JS semantics that PCRE2 does not share: JS \s is WhiteSpace+LineTerminator
 * (includes U+FEFF, excludes U+0085, unlike PCRE2's Unicode \s), JS \d and
 * \w are ASCII-only even with u, '.' excludes \r, U+2028 and U+2029 too, and
 * \uXXXX is written \x{XXXX}. The result is compiled in UTF mode without
 * PCRE2_UCP, so \p{L}/\p{N} use Unicode properties and everything else is
 * spelled out; '$' means end of input (PCRE2_DOLLAR_ENDONLY). Matching is
 * JIT-compiled when PCRE2 supports it. (Rejected: PCRE2_UCP with the raw
 * pattern: Llama 3 and Qwen3 tokenize text containing U+FEFF differently from
 * transformers.js; the tests show it.)
 *
 * Known limit: Debian's PCRE2 10.42 knows Unicode 14, while Node 20's ICU may
 * be newer, so a letter or digit assigned after Unicode 14 can split
 * differently from transformers.js (and utf8proc's NFC tables are Unicode 15).
 */
#include "tokenizer/jsregex.h"

#include <stdio.h>

#include "base/strbuf.h"
#include "tokenizer/utf8.h"

bool jsregex_is_space(uint32_t cp) {
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* JS \s as the body of a PCRE2 character class. */
#define JS_SPACE_CLASS "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

/* transformers.js PROBLEMATIC_REGEX_MAP: rewrites applied before compiling. */
static const char *const js_rewrites[][2] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"},
    {"(?i:[sdmt]|ll|ve|re)", "(?:[sS]|[dD]|[mM]|[tT]|[lL][lL]|[vV][eE]|[rR][eE])"},
    {"[^\\r\\n\\p{L}\\p{N}]?+", "[^\\r\\n\\p{L}\\p{N}]?"},
    {"[^\\s\\p{L}\\p{N}]++", "[^\\s\\p{L}\\p{N}]+"},
};

/* Translates a tokenizer.json (JavaScript-flavoured) regex for PCRE2; see the
 * file comment. *out is malloc'ed. */
static vllm_status js_regex_to_pcre2(const char *src, size_t n, const char *field, strbuf *out) {
    strbuf a = {0}, b = {0};
    vllm_status rc = VLLM_OK;
    /* transformers.js: pattern.replace(/\\([#&~])/g, '$1') */
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\\' && i + 1 < n && strchr("#&~", src[i + 1]) && src[i + 1]) continue;
        if ((rc = sb_add(&a, src + i, 1))) goto done;
    }
    if ((rc = sb_add(&a, "", 0))) goto done;
    for (size_t k = 0; k < sizeof js_rewrites / sizeof js_rewrites[0]; k++) {
        if ((rc = sb_replace_all(&b, a.s, a.len, js_rewrites[k][0], strlen(js_rewrites[k][0]),
                                 js_rewrites[k][1], strlen(js_rewrites[k][1]))))
            goto done;
        strbuf t = a;
        a = b;
        b = t;
    }
    out->len = 0;
    bool in_class = false;
    for (size_t i = 0; i < a.len; i++) {
        char c = a.s[i];
        if (c == '\\' && i + 1 < a.len) {
            char e = a.s[++i];
            const char *rep = NULL;
            switch (e) {
            case 's': rep = in_class ? JS_SPACE_CLASS : "[" JS_SPACE_CLASS "]"; break;
            case 'd': rep = in_class ? "0-9" : "[0-9]"; break;
            case 'w': rep = in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]"; break;
            case 'S': rep = in_class ? NULL : "[^" JS_SPACE_CLASS "]"; break;
            case 'D': rep = in_class ? NULL : "[^0-9]"; break;
            case 'W': rep = in_class ? NULL : "[^A-Za-z0-9_]"; break;
            default: break;
            }
            if ((e == 'S' || e == 'D' || e == 'W') && in_class) {
                rc = vllm_error(VLLM_ERR_UNSUPPORTED, "%s: \\%c inside a character class", field, e);
                goto done;
            }
            if (rep) {
                if ((rc = sb_add(out, rep, strlen(rep)))) goto done;
            } else if (e == 'u') {
                /* \uXXXX or \u{X...} -> \x{...} */
                size_t j = i + 1, k;
                if (j < a.len && a.s[j] == '{') {
                    for (k = j + 1; k < a.len && a.s[k] != '}'; k++) {}
                    if ((rc = sb_add(out, "\\x", 2)) || (rc = sb_add(out, a.s + j, k + 1 - j))) goto done;
                    i = k;
                } else {
                    if (j + 4 > a.len) {
                        rc = vllm_error(VLLM_ERR_FORMAT, "%s: bad \\u escape", field);
                        goto done;
                    }
                    if ((rc = sb_add(out, "\\x{", 3)) || (rc = sb_add(out, a.s + j, 4)) ||
                        (rc = sb_add(out, "}", 1)))
                        goto done;
                    i = j + 3;
                }
            } else if (e == 'p' || e == 'P') {
                size_t k = i + 1;
                if (k < a.len && a.s[k] == '{')
                    while (k < a.len && a.s[k] != '}') k++;
                else
                    k = i;
                if ((rc = sb_add(out, a.s + i - 1, k + 2 - i))) goto done;
                i = k;
            } else {
                if ((rc = sb_add(out, a.s + i - 1, 2))) goto done;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            if ((rc = sb_add(out, "[", 1))) goto done;
            if (i + 1 < a.len && a.s[i + 1] == '^') {
                if ((rc = sb_add(out, "^", 1))) goto done;
                i++;
            }
            continue;
        }
        if (in_class && c == ']') in_class = false;
        if (!in_class && c == '.') {
            if ((rc = sb_add(out, "[^\\n\\r\\x{2028}\\x{2029}]", 22))) goto done;
            continue;
        }
        if ((rc = sb_add(out, &c, 1))) goto done;
    }
    rc = sb_add(out, "", 0);
done:
    free(a.s);
    free(b.s);
    return rc;
}

vllm_status jsregex_compile(const char *js, size_t n, bool literal, const char *field,
                                 pcre2_code **out) {
    strbuf pat = {0};
    vllm_status rc = VLLM_OK;
    uint32_t opts = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C;
    if (literal) {
        opts |= PCRE2_LITERAL;
        rc = sb_set(&pat, js, n);
    } else {
        rc = js_regex_to_pcre2(js, n, field, &pat);
    }
    if (rc) goto done;
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat.s, pat.len, opts, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: regex does not compile at offset %zu: %s", field,
                        (size_t)erroff, (char *)msg);
        goto done;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    *out = re;
done:
    free(pat.s);
    return rc;
}


/*
 * jinja_lex.c - template source to tokens, as @huggingface/jinja does it.
 *
 * The reference first rewrites the whole source text with four regular
 * expressions (drop one trailing newline; lstrip_blocks: /^[ \t]*({[#%-])/gm;
 * trim_blocks: /([#%-]})\n/g; remove {% generation %} / {% endgeneration %}
 * tags) and only then tokenizes. The rewrite sees string literals too, so we
 * do the same passes, literally, rather than Jinja's token-aware trimming.
 * Each pass carries a parallel array of original line numbers so errors can
 * point at the line the user wrote.
 *
 * Tokenizing then follows the reference's loop: text runs until "{{", "{%" or
 * "{#"; inside a tag, whitespace is skipped, "{%-"/"-%}" (and {{- -}}, {#- -#})
 * strip whitespace next to the tag, a "+"/"-" after an operator is unary (and
 * merges with a following number), "}}" inside a dict literal closes the dict.
 */
#include "base/error.h"
#include "template/jinja_internal.h"

#include <string.h>

typedef struct text {
    char *s;
    int *line;
    size_t n;
} text;

static vllm_status text_alloc(jinja_arena *a, size_t n, text *t) {
    t->s = jinja_arena_alloc(a, n + 1);
    t->line = jinja_arena_alloc(a, (n + 1) * sizeof(int));
    t->n = 0;
    if (!t->s || !t->line) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    return VLLM_OK;
}

static void text_put(text *t, const text *from, size_t i) {
    t->s[t->n] = from->s[i];
    t->line[t->n] = from->line[i];
    t->n++;
}

static bool is_line_terminator_before(const text *t, size_t i) {
    if (i == 0) return true;
    char c = t->s[i - 1];
    if (c == '\n' || c == '\r') return true;
    /* U+2028, U+2029 are E2 80 A8 / E2 80 A9 */
    return i >= 3 && (unsigned char)t->s[i - 3] == 0xe2 && (unsigned char)t->s[i - 2] == 0x80 &&
           ((unsigned char)c == 0xa8 || (unsigned char)c == 0xa9);
}

/* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
static vllm_status pass_lstrip(jinja_arena *a, const text *in, text *out) {
    vllm_status rc = text_alloc(a, in->n, out);
    if (rc) return rc;
    for (size_t i = 0; i < in->n;) {
        if (is_line_terminator_before(in, i)) {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t')) j++;
            if (j + 1 < in->n && in->s[j] == '{' && strchr("#%-", in->s[j + 1]) && in->s[j + 1])
                i = j;
        }
        text_put(out, in, i++);
    }
    return VLLM_OK;
}

/* trim_blocks: /([#%-]})\n/g -> "$1" */
static vllm_status pass_trim(jinja_arena *a, const text *in, text *out) {
    vllm_status rc = text_alloc(a, in->n, out);
    if (rc) return rc;
    for (size_t i = 0; i < in->n;) {
        char c = in->s[i];
        if ((c == '#' || c == '%' || c == '-') && i + 2 < in->n && in->s[i + 1] == '}' &&
            in->s[i + 2] == '\n') {
            text_put(out, in, i);
            text_put(out, in, i + 1);
            i += 3;
            continue;
        }
        text_put(out, in, i++);
    }
    return VLLM_OK;
}

static size_t skip_js_space(const text *t, size_t i) {
    size_t k;
    while (i < t->n && (k = jinja_js_space_at(t->s, t->n, i)) > 0) i += k;
    return i;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs ->
 *   (lstrip ? "" : before) + (rstrip ? "" : after) */
static vllm_status pass_generation(jinja_arena *a, const text *in, text *out) {
    vllm_status rc = text_alloc(a, in->n, out);
    if (rc) return rc;
    for (size_t i = 0; i < in->n;) {
        size_t ws_end = skip_js_space(in, i), k = ws_end;
        bool matched = false, lstrip = false, rstrip = false;
        size_t tag_end = 0, after_end = 0;
        if (k + 1 < in->n && in->s[k] == '{' && in->s[k + 1] == '%') {
            k += 2;
            if (k < in->n && in->s[k] == '-') lstrip = true, k++;
            k = skip_js_space(in, k);
            if (in->n - k >= 3 && !memcmp(in->s + k, "end", 3) &&
                !(in->n - k >= 10 && !memcmp(in->s + k, "generation", 10)))
                k += 3;
            if (in->n - k >= 10 && !memcmp(in->s + k, "generation", 10)) {
                k = skip_js_space(in, k + 10);
                if (k < in->n && in->s[k] == '-') rstrip = true, k++;
                if (k + 1 < in->n && in->s[k] == '%' && in->s[k + 1] == '}') {
                    tag_end = k + 2;
                    after_end = skip_js_space(in, tag_end);
                    matched = true;
                }
            }
        }
        if (!matched) {
            /* a failed attempt from inside this whitespace run fails the same way */
            size_t stop = ws_end > i ? ws_end : i + 1;
            while (i < stop) text_put(out, in, i++);
            continue;
        }
        if (!lstrip)
            for (size_t j = i; j < ws_end; j++) text_put(out, in, j);
        if (!rstrip)
            for (size_t j = tag_end; j < after_end; j++) text_put(out, in, j);
        i = after_end;
    }
    return VLLM_OK;
}

/* ---- tokenizer ------------------------------------------------------------ */

typedef struct lexer {
    jinja_arena *arena;
    const text *t;
    size_t pos;
    jinja_token *tok;
    size_t n, cap;
} lexer;

static int line_at(const lexer *L, size_t pos) {
    if (pos < L->t->n) return L->t->line[pos];
    return L->t->n ? L->t->line[L->t->n - 1] : 1;
}

static vllm_status push(lexer *L, jinja_token_type type, const char *s, size_t len, int line) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jinja_token *t = jinja_arena_alloc(L->arena, cap * sizeof *t);
        if (!t) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
        if (L->n) memcpy(t, L->tok, L->n * sizeof *t);
        L->tok = t;
        L->cap = cap;
    }
    L->tok[L->n++] = (jinja_token){type, s, len, line};
    return VLLM_OK;
}

static jinja_token_type last_type(const lexer *L) {
    return L->n ? L->tok[L->n - 1].type : (jinja_token_type)-1;
}

/* {%- / {{- / {#-: trimEnd the preceding text token, dropping it if empty. */
static void strip_trailing(lexer *L) {
    if (!L->n || L->tok[L->n - 1].type != JT_TEXT) return;
    jinja_token *t = &L->tok[L->n - 1];
    size_t end = t->len;
    for (;;) {
        /* walk back one code point */
        size_t start = end;
        if (!start) break;
        start--;
        while (start > 0 && ((unsigned char)t->s[start] & 0xc0) == 0x80) start--;
        if (!jinja_js_space_at(t->s, end, start)) break;
        end = start;
    }
    t->len = end;
    if (!end) L->n--;
}

static vllm_status eof_error(const lexer *L) {
    return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: unexpected end of template inside a tag",
                      line_at(L, L->pos));
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
}

/* Consumes a run of chars satisfying pred; like the reference, reaching the
 * end of the source inside a tag is an error. */
static vllm_status consume_while(lexer *L, bool (*pred)(char)) {
    const text *t = L->t;
    while (L->pos < t->n && pred(t->s[L->pos])) {
        L->pos++;
        if (L->pos >= t->n) return eof_error(L);
    }
    return VLLM_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads \xHH or \uHHHH (hex digits at t->s[pos], `digits` of them). */
static bool read_hex(const text *t, size_t pos, int digits, uint32_t *v) {
    if (pos + (size_t)digits > t->n) return false;
    *v = 0;
    for (int i = 0; i < digits; i++) {
        int h = hexval(t->s[pos + i]);
        if (h < 0) return false;
        *v = *v * 16 + (uint32_t)h;
    }
    return true;
}

static vllm_status lex_string(lexer *L) {
    const text *t = L->t;
    char quote = t->s[L->pos];
    int line = line_at(L, L->pos);
    L->pos++;
    /* the decoded value is never longer than the source */
    size_t start = L->pos;
    while (start < t->n && t->s[start] != quote) start += t->s[start] == '\\' ? 2 : 1;
    size_t cap = (start < t->n ? start : t->n) - L->pos + 4;
    char *out = jinja_arena_alloc(L->arena, cap);
    if (!out) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    size_t n = 0;
    while (L->pos < t->n && t->s[L->pos] != quote) {
        char c = t->s[L->pos];
        if (c != '\\') {
            out[n++] = c;
            if (++L->pos >= t->n) return eof_error(L);
            continue;
        }
        L->pos++;
        if (L->pos >= t->n) return eof_error(L);
        char e = t->s[L->pos++];
        uint32_t cp;
        switch (e) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case '\'': out[n++] = '\''; break;
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case 'x':
        case 'u': {
            int digits = e == 'x' ? 2 : 4;
            if (!read_hex(t, L->pos, digits, &cp))
                return vllm_error(VLLM_ERR_FORMAT,
                                  "chat template line %d: invalid hexadecimal escape sequence \\%c",
                                  line, e);
            L->pos += (size_t)digits;
            if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair spelled \uD83D\uDE00 */
                uint32_t lo;
                if (L->pos + 2 <= t->n && t->s[L->pos] == '\\' && t->s[L->pos + 1] == 'u' &&
                    read_hex(t, L->pos + 2, 4, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    L->pos += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else {
                    return vllm_error(VLLM_ERR_UNSUPPORTED,
                                      "chat template line %d: lone surrogate escape \\u%04X in a string",
                                      line, (unsigned)cp);
                }
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                return vllm_error(VLLM_ERR_UNSUPPORTED,
                                  "chat template line %d: lone surrogate escape \\u%04X in a string",
                                  line, (unsigned)cp);
            }
            n += jinja_utf8_encode(cp, out + n);
            break;
        }
        default:
            return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: unexpected escaped character '%c'",
                              line, e);
        }
        if (L->pos >= t->n) return eof_error(L);
    }
    if (L->pos >= t->n) return eof_error(L);
    L->pos++; /* closing quote */
    out[n] = 0;
    return push(L, JT_STRING, out, n, line);
}

typedef struct fixed_token {
    const char *s;
    jinja_token_type type;
} fixed_token;

/* Order matters: a longer operator precedes its prefix. */
static const fixed_token fixed_tokens[] = {
    {"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
    {"(", JT_LPAREN}, {")", JT_RPAREN}, {"{", JT_LBRACE}, {"}", JT_RBRACE},
    {"[", JT_LBRACKET}, {"]", JT_RBRACKET}, {",", JT_COMMA}, {".", JT_DOT}, {":", JT_COLON},
    {"|", JT_PIPE}, {"<=", JT_COMPARISON}, {">=", JT_COMPARISON}, {"==", JT_COMPARISON},
    {"!=", JT_COMPARISON}, {"<", JT_COMPARISON}, {">", JT_COMPARISON}, {"+", JT_ADDITIVE},
    {"-", JT_ADDITIVE}, {"~", JT_ADDITIVE}, {"**", JT_POW}, {"*", JT_MULTIPLICATIVE},
    {"//", JT_MULTIPLICATIVE}, {"/", JT_MULTIPLICATIVE}, {"%", JT_MULTIPLICATIVE}, {"=", JT_EQUALS},
};

static bool starts(const text *t, size_t pos, const char *s) {
    size_t n = strlen(s);
    return pos + n <= t->n && !memcmp(t->s + pos, s, n);
}

static vllm_status tokenize(lexer *L) {
    const text *t = L->t;
    int curly_depth = 0;
    vllm_status rc;
    while (L->pos < t->n) {
        jinja_token_type last = last_type(L);
        if ((int)last == -1 || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
            size_t start = L->pos;
            while (L->pos < t->n && !(t->s[L->pos] == '{' && L->pos + 1 < t->n &&
                                      strchr("%{#", t->s[L->pos + 1]) && t->s[L->pos + 1]))
                L->pos++;
            if (L->pos > start) {
                if ((rc = push(L, JT_TEXT, t->s + start, L->pos - start, line_at(L, start)))) return rc;
                continue;
            }
        }

        if (starts(t, L->pos, "{#")) {
            int line = line_at(L, L->pos);
            L->pos += 2;
            bool strip_before = L->pos < t->n && t->s[L->pos] == '-';
            if (strip_before) L->pos++;
            size_t start = L->pos;
            while (!(starts(t, L->pos, "#}"))) {
                if (L->pos + 2 >= t->n)
                    return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: comment is never closed with #}",
                                      line);
                L->pos++;
            }
            size_t len = L->pos - start;
            bool strip_after = len > 0 && t->s[start + len - 1] == '-';
            if (strip_before) strip_trailing(L);
            if ((rc = push(L, JT_COMMENT, t->s + start, len, line))) return rc;
            L->pos += 2;
            if (strip_after) L->pos = skip_js_space(t, L->pos);
            continue;
        }
        if (starts(t, L->pos, "{%-")) {
            strip_trailing(L);
            if ((rc = push(L, JT_OPEN_STMT, "{%", 2, line_at(L, L->pos)))) return rc;
            L->pos += 3;
            continue;
        }
        if (starts(t, L->pos, "{{-")) {
            strip_trailing(L);
            if ((rc = push(L, JT_OPEN_EXPR, "{{", 2, line_at(L, L->pos)))) return rc;
            curly_depth = 0;
            L->pos += 3;
            continue;
        }

        /* whitespace inside a tag */
        while (L->pos < t->n) {
            size_t k = jinja_js_space_at(t->s, t->n, L->pos);
            if (!k) break;
            L->pos += k;
            if (L->pos >= t->n) return eof_error(L);
        }
        if (L->pos >= t->n) break;

        if (starts(t, L->pos, "-%}")) {
            if ((rc = push(L, JT_CLOSE_STMT, "%}", 2, line_at(L, L->pos)))) return rc;
            L->pos = skip_js_space(t, L->pos + 3);
            continue;
        }
        if (starts(t, L->pos, "-}}")) {
            if ((rc = push(L, JT_CLOSE_EXPR, "}}", 2, line_at(L, L->pos)))) return rc;
            L->pos = skip_js_space(t, L->pos + 3);
            continue;
        }

        char c = t->s[L->pos];
        int line = line_at(L, L->pos);
        if (c == '-' || c == '+') {
            last = last_type(L);
            if ((int)last == -1 || last == JT_TEXT)
                return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: unexpected character '%c'", line, c);
            if (!(last == JT_IDENT || last == JT_NUMBER || last == JT_STRING || last == JT_RPAREN ||
                  last == JT_RBRACKET)) {
                size_t start = L->pos++;
                if ((rc = consume_while(L, is_digit))) return rc;
                if (L->pos > start + 1 && L->pos + 1 < t->n && t->s[L->pos] == '.' &&
                    is_digit(t->s[L->pos + 1])) {
                    L->pos++;
                    if ((rc = consume_while(L, is_digit))) return rc;
                }
                if (L->pos > start + 1) rc = push(L, JT_NUMBER, t->s + start, L->pos - start, line);
                else rc = push(L, JT_UNARY, t->s + start, 1, line);
                if (rc) return rc;
                continue;
            }
        }

        bool matched = false;
        for (size_t i = 0; i < sizeof fixed_tokens / sizeof *fixed_tokens; i++) {
            const fixed_token *f = &fixed_tokens[i];
            if (f->type == JT_CLOSE_EXPR && curly_depth > 0) continue;
            if (!starts(t, L->pos, f->s)) continue;
            size_t len = strlen(f->s);
            if ((rc = push(L, f->type, f->s, len, line))) return rc;
            if (f->type == JT_OPEN_EXPR) curly_depth = 0;
            else if (f->type == JT_LBRACE) curly_depth++;
            else if (f->type == JT_RBRACE) curly_depth--;
            L->pos += len;
            matched = true;
            break;
        }
        if (matched) continue;

        if (c == '\'' || c == '"') {
            if ((rc = lex_string(L))) return rc;
            continue;
        }
        if (is_digit(c)) {
            size_t start = L->pos;
            if ((rc = consume_while(L, is_digit))) return rc;
            if (last_type(L) != JT_DOT && L->pos + 1 < t->n && t->s[L->pos] == '.' &&
                is_digit(t->s[L->pos + 1])) {
                L->pos++;
                if ((rc = consume_while(L, is_digit))) return rc;
            }
            if ((rc = push(L, JT_NUMBER, t->s + start, L->pos - start, line))) return rc;
            continue;
        }
        if (is_word(c)) {
            size_t start = L->pos;
            if ((rc = consume_while(L, is_word))) return rc;
            if ((rc = push(L, JT_IDENT, t->s + start, L->pos - start, line))) return rc;
            continue;
        }
        uint32_t cp;
        jinja_utf8_decode(t->s, t->n, L->pos, &cp);
        char shown[8] = {0};
        jinja_utf8_encode(cp, shown);
        return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: unexpected character '%s'", line, shown);
    }
    return VLLM_OK;
}

static bool utf8_valid(const char *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = jinja_utf8_decode(s, n, i, &cp);
        /* the decoder yields U+FFFD with length 1 for malformed bytes; reject
         * overlongs (caught by lead-byte ranges except E0/F0), surrogates, > U+10FFFF */
        bool ok = k > 1 && !(cp >= 0xd800 && cp < 0xe000) && cp <= 0x10ffff &&
                  !(k == 3 && cp < 0x800) && !(k == 4 && cp < 0x10000);
        if (!ok) {
            *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

vllm_status jinja_lex_tokenize(jinja_arena *a, const char *src, size_t len, jinja_token **tokens,
                               size_t *n_tokens) {
    size_t bad;
    if (!utf8_valid(src, len, &bad)) {
        int line = 1;
        for (size_t i = 0; i < bad; i++) line += src[i] == '\n';
        return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: invalid UTF-8", line);
    }
    if (len > (size_t)1 << 30) return vllm_error(VLLM_ERR_INVALID, "chat template: source too large");
    vllm_status rc;
    text t0, t1, t2, t3;
    if ((rc = text_alloc(a, len, &t0))) return rc;
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        t0.s[i] = src[i];
        t0.line[i] = line;
        if (src[i] == '\n') line++;
    }
    t0.n = len;
    if (t0.n && t0.s[t0.n - 1] == '\n') t0.n--;
    if ((rc = pass_lstrip(a, &t0, &t1)) || (rc = pass_trim(a, &t1, &t2)) ||
        (rc = pass_generation(a, &t2, &t3)))
        return rc;
    t3.s[t3.n] = 0;

    lexer L = {.arena = a, .t = &t3};
    if ((rc = tokenize(&L))) return rc;
    *tokens = L.tok;
    *n_tokens = L.n;
    return VLLM_OK;
}

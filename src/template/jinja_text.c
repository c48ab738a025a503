/*
 * jinja_text.c - the few JavaScript text rules the reference renderer's output
 * depends on, implemented on UTF-8: what counts as whitespace (String.trim,
 * /\s/), string length in UTF-16 units, and Number.prototype.toString.
 *
 * Inputs are valid UTF-8 (templates are checked when lexed, jansson checks
 * JSON strings); the decoder still never reads past n and maps a malformed
 * byte to U+FFFD so that no input can make it misbehave.
 */
#include "template/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t jinja_utf8_decode(const char *str, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[i];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c < 0xe0) {
        len = 2, v = c & 0x1f;
    } else if (c >= 0xe0 && c < 0xf0) {
        len = 3, v = c & 0x0f;
    } else if (c >= 0xf0 && c < 0xf5) {
        len = 4, v = c & 0x07;
    } else {
        *cp = 0xfffd;
        return 1;
    }
    if (i + len > n) {
        *cp = 0xfffd;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        v = (v << 6) | (s[i + k] & 0x3f);
    }
    *cp = v;
    return len;
}

size_t jinja_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    } else if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    } else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

bool jinja_js_is_space(uint32_t cp) {
    switch (cp) {
    case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0x20:
    case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f:
    case 0x3000: case 0xfeff:
        return true;
    }
    return cp >= 0x2000 && cp <= 0x200a;
}

size_t jinja_js_space_at(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return (c == ' ' || (c >= 0x09 && c <= 0x0d)) ? 1 : 0;
    uint32_t cp;
    size_t len = jinja_utf8_decode(s, n, i, &cp);
    return jinja_js_is_space(cp) ? len : 0;
}

size_t jinja_utf16_length(const char *s, size_t n) {
    size_t units = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            units++, i++;
            continue;
        }
        uint32_t cp;
        i += jinja_utf8_decode(s, n, i, &cp);
        units += cp >= 0x10000 ? 2 : 1;
    }
    return units;
}

/*
 * ECMAScript Number::toString(x): the shortest decimal digits that read back
 * as x, printed plainly when the decimal exponent is in [-6, 21) and as
 * d.ddde+N otherwise. The shortest digits come from trying %.{p}e for
 * p = 1..17 (printf rounds correctly, so the first p that round-trips is the
 * closest shortest representation).
 */
void jinja_js_number(double x, char *out) {
    if (isnan(x)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        strcpy(out, "0");
        return;
    }
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int k = 0;
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') neg = true, q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[k++] = *q;
    int e = atoi(q + 1);
    while (k > 1 && digits[k - 1] == '0') k--; /* %.{p}e may pad when p was clamped */
    digits[k] = 0;
    int n = e + 1; /* position of the decimal point relative to the digits */
    char *o = out;
    if (neg) *o++ = '-';
    if (k <= n && n <= 21) {
        memcpy(o, digits, (size_t)k), o += k;
        for (int i = 0; i < n - k; i++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n), o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(k - n)), o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -n; i++) *o++ = '0';
        memcpy(o, digits, (size_t)k), o += k;
    } else {
        *o++ = digits[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(k - 1)), o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = 0;
}

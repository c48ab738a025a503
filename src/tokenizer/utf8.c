/*
 * utf8.c - the WHATWG UTF-8 decoder (Encoding Standard, "UTF-8 decoder") as a
 * state machine, and small helpers for valid UTF-8. See utf8.h for why.
 */
#include "tokenizer/utf8.h"

void utf8_decoder_init(utf8_decoder *d) {
    d->cp = 0;
    d->needed = d->seen = 0;
    d->lower = 0x80;
    d->upper = 0xBF;
}

/* Decodes one byte with no sequence in progress. */
static int push_lead(utf8_decoder *d, uint8_t b, uint32_t *out) {
    if (b < 0x80) {
        out[0] = b;
        return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        d->needed = 1;
        d->cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) d->lower = 0xA0;
        if (b == 0xED) d->upper = 0x9F;
        d->needed = 2;
        d->cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) d->lower = 0x90;
        if (b == 0xF4) d->upper = 0x8F;
        d->needed = 3;
        d->cp = b & 0x07;
    } else {
        out[0] = UTF8_REPLACEMENT;
        return 1;
    }
    return 0;
}

int utf8_decoder_push(utf8_decoder *d, uint8_t b, uint32_t out[2]) {
    if (d->needed == 0) return push_lead(d, b, out);
    if (b < d->lower || b > d->upper) {
        utf8_decoder_init(d);
        out[0] = UTF8_REPLACEMENT;
        return 1 + push_lead(d, b, out + 1);
    }
    d->lower = 0x80;
    d->upper = 0xBF;
    d->cp = (d->cp << 6) | (b & 0x3F);
    if (++d->seen < d->needed) return 0;
    out[0] = d->cp;
    utf8_decoder_init(d);
    return 1;
}

bool utf8_decoder_finish(utf8_decoder *d, uint32_t *cp) {
    bool cut = d->needed != 0;
    utf8_decoder_init(d);
    if (cut) *cp = UTF8_REPLACEMENT;
    return cut;
}

int utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t utf8_get(const char *s) {
    const uint8_t *u = (const uint8_t *)s;
    switch (utf8_len(u[0])) {
    case 1: return u[0];
    case 2: return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    case 3: return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    default:
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
               ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    }
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint8_t b = u[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else return i;
        if (n - i <= (size_t)need) return i;
        if (u[i + 1] < lo || u[i + 1] > hi) return i;
        for (int k = 2; k <= need; k++)
            if ((u[i + k] & 0xC0) != 0x80) return i;
        i += (size_t)need + 1;
    }
    return n;
}

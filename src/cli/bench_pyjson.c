/*
 * bench_pyjson.c - JSON text exactly as Python's json.dumps(v,
 * ensure_ascii=False) writes it: ", " and ": " separators, the object's own
 * key order, strings with only " \\ and control characters escaped (\\n \\r
 * \\t \\b \\f, else \\u00xx), floats as repr() (shortest round-trip digits,
 * fixed notation for exponents -4..15: 0.0001, 1e-05, 1e+16, 100.0). How
 * MaskBench (JSONSchemaBench) turns its instances into the text it
 * tokenizes; checked against Python on every MaskBench instance.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_pyjson.h"

/* Python's repr(float) for finite v */
static void float_repr(double v, char *out, size_t cap) {
    char buf[64], digits[32];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    int nd = 0;
    const char *q = buf;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char res[96];
    size_t o = 0;
    if (neg) res[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            res[o++] = '0';
            res[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) res[o++] = '0';
            for (int i = 0; i < nd; i++) res[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) res[o++] = i < nd ? digits[i] : '0';
            res[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) res[o++] = digits[i];
            else
                res[o++] = '0';
        }
        res[o] = 0;
        snprintf(out, cap, "%s", res);
        return;
    }
    res[o++] = digits[0];
    if (nd > 1) {
        res[o++] = '.';
        for (int i = 1; i < nd; i++) res[o++] = digits[i];
    }
    res[o] = 0;
    snprintf(out, cap, "%se%c%02d", res, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

vllm_status bench_pyjson_dumps(json_t *v, strbuf *b) {
    vllm_status rc = VLLM_OK;
    char t[64];
    switch (json_typeof(v)) {
    case JSON_NULL: return sb_add(b, "null", 4);
    case JSON_TRUE: return sb_add(b, "true", 4);
    case JSON_FALSE: return sb_add(b, "false", 5);
    case JSON_INTEGER:
        snprintf(t, sizeof t, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return sb_add(b, t, strlen(t));
    case JSON_REAL: {
        double d = json_real_value(v);
        if (isinf(d)) return sb_add(b, d > 0 ? "Infinity" : "-Infinity", d > 0 ? 8 : 9);
        float_repr(d, t, sizeof t);
        return sb_add(b, t, strlen(t));
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        rc = sb_add(b, "\"", 1);
        for (size_t i = 0; i < n && !rc; i++) {
            unsigned char ch = (unsigned char)s[i];
            const char *e = NULL;
            switch (ch) {
            case '"': e = "\\\""; break;
            case '\\': e = "\\\\"; break;
            case '\n': e = "\\n"; break;
            case '\r': e = "\\r"; break;
            case '\t': e = "\\t"; break;
            case '\b': e = "\\b"; break;
            case '\f': e = "\\f"; break;
            }
            if (e) rc = sb_add(b, e, 2);
            else if (ch < 0x20) {
                snprintf(t, sizeof t, "\\u%04x", ch);
                rc = sb_add(b, t, 6);
            } else rc = sb_add(b, (const char *)&ch, 1);
        }
        return rc ? rc : sb_add(b, "\"", 1);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        rc = sb_add(b, "[", 1);
        json_array_foreach(v, i, e) {
            if (i && !rc) rc = sb_add(b, ", ", 2);
            if (!rc) rc = bench_pyjson_dumps(e, b);
        }
        return rc ? rc : sb_add(b, "]", 1);
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        bool first = true;
        rc = sb_add(b, "{", 1);
        json_object_foreach(v, k, e) {
            if (!first && !rc) rc = sb_add(b, ", ", 2);
            first = false;
            json_t *ks = json_string(k);
            if (!rc) rc = ks ? bench_pyjson_dumps(ks, b) : VLLM_ERR_NOMEM;
            json_decref(ks);
            if (!rc) rc = sb_add(b, ": ", 2);
            if (!rc) rc = bench_pyjson_dumps(e, b);
        }
        return rc ? rc : sb_add(b, "}", 1);
    }
    }
    return rc;
}


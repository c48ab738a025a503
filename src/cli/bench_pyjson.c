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

#include "base/pyrepr.h"
#include "cli/bench_pyjson.h"

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
        pyrepr_float(d, t, sizeof t);
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


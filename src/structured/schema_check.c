/*
 * schema_check.c - is one concrete JSON value valid under a schema?
 * (st_schema_check, for schema.c).
 *
 * schema.c compiles a schema to a grammar; where the schema pins its
 * instances to a list of values (enum / const, also inside allOf or every
 * branch of anyOf / oneOf), the grammar is just those values that are valid
 * under the *whole* schema, so every other keyword, however hard to write
 * as a grammar (not, oneOf with overlapping branches, patternProperties,
 * propertyNames, if/then/else, contains, uniqueItems, ...), only has to be
 * evaluated on known values. That is what this file does: a validator of
 * the JSON Schema 2020-12 validation vocabulary (and the older drafts'
 * spellings: items as an array with additionalItems, dependencies) over
 * jansson values.
 *
 * The answer must be exact, because under `not` a wrong "no" becomes a
 * wrong "yes": 1 valid, 0 invalid, -1 cannot tell, with *why naming the
 * keyword. Cannot tell: a format the spec defines (we do not check them
 * here), unevaluatedProperties / unevaluatedItems other than true,
 * $dynamicRef / $recursiveRef, $ref with siblings in a draft 4-7 document
 * (those drafts ignore the siblings), a $ref that is not a local JSON
 * pointer, a pattern PCRE2 cannot compile, a pattern with \d \w \s \b
 * (ASCII in PCRE2, Unicode in Python's re and ECMA-262 with /u) matched
 * against non-ASCII text, multipleOf whose quotient is too close to an
 * integer for a double to decide, nesting deeper than CHECK_MAX_DEPTH and
 * more subschemas visited than the caller's budget (bounded time on any
 * input: schema.c gives one budget to a whole compile).
 *
 * Numbers compare by value (1 == 1.0, as the spec says; an integer and a
 * double only when the double is that integer exactly). "integer" is a
 * number with no fractional part, except in draft 3/4 documents, where a
 * value written with a fraction (1.0) is a number, not an integer (Python
 * jsonschema's reading of those drafts). Strings count code points.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "structured/schema_internal.h"

#define CHECK_MAX_DEPTH 64

typedef struct ck {
    json_t *doc;
    const char *id;
    int ver;              /* 4 (also 3), 6, 7, 2019, 2020 (the default) from the document's $schema */
    long budget;          /* schemas left to visit: anyOf over $refs can branch exponentially */
    const char *why;
} ck;

static int check(ck *k, json_t *s, json_t *v, int depth);

static int cant(ck *k, const char *why) {
    if (!k->why) k->why = why;
    return -1;
}

/* ---- values ------------------------------------------------------------------ */

/* numbers by value; everything else structurally */
static bool jeq(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
        if (json_is_real(a) && json_is_real(b)) return json_real_value(a) == json_real_value(b);
        json_t *i = json_is_integer(a) ? a : b, *r = json_is_integer(a) ? b : a;
        double d = json_real_value(r);
        if (d != floor(d) || fabs(d) >= 9.2e18) return false;
        return (json_int_t)d == json_integer_value(i);
    }
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        size_t n = json_array_size(a);
        if (n != json_array_size(b)) return false;
        for (size_t i = 0; i < n; i++)
            if (!jeq(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *key;
        json_t *x;
        json_object_foreach(a, key, x) {
            json_t *y = json_object_get(b, key);
            if (!y || !jeq(x, y)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static double num(json_t *v) { return json_number_value(v); }

static bool is_int_value(json_t *v) {
    if (json_is_integer(v)) return true;
    double d = json_real_value(v);
    return json_is_real(v) && isfinite(d) && d == floor(d);
}

/* 1, 0, or -1: draft 3/4 read 1.0 as a number but not an integer, and the
 * grammar writes an integral value both ways (schema.c gen_value) */
static int type_ok(ck *k, const char *t, json_t *v) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) {
        if (!json_is_number(v) || !is_int_value(v)) return 0;
        return k->ver <= 4 ? cant(k, "type integer in draft 4 (1 and 1.0 differ)") : 1;
    }
    return false;
}

static size_t cp_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* a search for pattern re in s: 1, 0, -1 */
static int re_search(ck *k, const char *re, const char *s, size_t n) {
    bool ascii = true;
    for (size_t i = 0; i < n; i++) ascii &= (unsigned char)s[i] < 0x80;
    if (!ascii)
        for (const char *p = re; *p; p++) {
            if (*p != '\\' || !p[1]) continue;
            if (strchr("dDwWsSbB", p[1])) return cant(k, "pattern (a Unicode class on non-ASCII text)");
            p++;
        }
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    if (!code) return cant(k, "pattern (PCRE2 cannot compile it)");
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int r = md ? pcre2_match(code, (PCRE2_SPTR)s, n, 0, 0, md, NULL) : -1000;
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    if (r >= 0) return 1;
    if (r == PCRE2_ERROR_NOMATCH) return 0;
    return cant(k, "pattern (PCRE2 match failed)");
}

/* the schema a local "#..." reference names, or NULL */
static json_t *resolve(ck *k, const char *ref) {
    size_t idl = k->id ? strlen(k->id) : 0;
    if (idl && !strncmp(ref, k->id, idl) && (ref[idl] == '#' || !ref[idl])) ref += idl;
    if (!*ref) return k->doc;
    if (*ref != '#') return NULL;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    int why;
    return st_json_pointer(k->doc, p, &why);
}

/* ---- keywords -------------------------------------------------------------- */

/* formats the spec defines: we do not check them here */
static const char *const spec_formats[] = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
    "json-pointer", "relative-json-pointer", "regex", NULL,
};

/* fold a sub-result into the running one: 0 wins, then -1 */
#define FOLD(acc, r) do { int r_ = (r); if (r_ == 0) return 0; if (r_ < 0) acc = -1; } while (0)

static int check_object(ck *k, json_t *s, json_t *v, int depth) {
    int acc = 1;
    json_t *props = json_object_get(s, "properties"), *pp = json_object_get(s, "patternProperties");
    json_t *addl = json_object_get(s, "additionalProperties");
    json_t *x;
    const char *key;
    json_t *val;
    if ((x = json_object_get(s, "required")) && json_is_array(x)) {
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) if (json_is_string(e) && !json_object_get(v, json_string_value(e))) return 0;
    }
    if ((x = json_object_get(s, "minProperties")) && json_is_number(x) && (double)json_object_size(v) < num(x)) return 0;
    if ((x = json_object_get(s, "maxProperties")) && json_is_number(x) && (double)json_object_size(v) > num(x)) return 0;
    json_object_foreach(v, key, val) {
        bool matched = false;
        json_t *ps = json_is_object(props) ? json_object_get(props, key) : NULL;
        if (ps) { matched = true; FOLD(acc, check(k, ps, val, depth + 1)); }
        if (json_is_object(pp)) {
            const char *re;
            json_t *rs;
            json_object_foreach(pp, re, rs) {
                int m = re_search(k, re, key, strlen(key));
                if (m < 0) { acc = -1; matched = true; continue; }  /* unknown: additionalProperties undecided too */
                if (m) { matched = true; FOLD(acc, check(k, rs, val, depth + 1)); }
            }
        }
        if (!matched && addl) FOLD(acc, check(k, addl, val, depth + 1));
        if ((x = json_object_get(s, "propertyNames"))) {
            json_t *name = json_string(key);
            int r = check(k, x, name, depth + 1);
            json_decref(name);
            FOLD(acc, r);
        }
    }
    /* dependencies: each present key's required keys or schema */
    static const char *const dep_kw[] = {"dependentRequired", "dependentSchemas", "dependencies"};
    for (int q = 0; q < 3; q++) {
        json_t *d = json_object_get(s, dep_kw[q]);
        if (!json_is_object(d)) continue;
        json_object_foreach(d, key, val) {
            if (!json_object_get(v, key)) continue;
            if (json_is_array(val)) {
                size_t i;
                json_t *e;
                json_array_foreach(val, i, e) if (json_is_string(e) && !json_object_get(v, json_string_value(e))) return 0;
            } else {
                FOLD(acc, check(k, val, v, depth + 1));
            }
        }
    }
    if ((x = json_object_get(s, "unevaluatedProperties")) && !json_is_true(x) &&
        !(json_is_object(x) && !json_object_size(x)))
        return cant(k, "unevaluatedProperties");
    return acc;
}

static int check_array(ck *k, json_t *s, json_t *v, int depth) {
    int acc = 1;
    json_t *x;
    size_t n = json_array_size(v), i;
    if ((x = json_object_get(s, "minItems")) && json_is_number(x) && (double)n < num(x)) return 0;
    if ((x = json_object_get(s, "maxItems")) && json_is_number(x) && (double)n > num(x)) return 0;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *pre = NULL, *rest = NULL;
    if (json_is_array(items)) { pre = items; rest = json_object_get(s, "additionalItems"); }
    else { pre = json_is_array(prefix) ? prefix : NULL; rest = items; }
    size_t np = pre ? json_array_size(pre) : 0;
    for (i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (i < np) FOLD(acc, check(k, json_array_get(pre, i), e, depth + 1));
        else if (rest) FOLD(acc, check(k, rest, e, depth + 1));
    }
    if ((x = json_object_get(s, "contains"))) {
        json_t *mn = json_object_get(s, "minContains"), *mx = json_object_get(s, "maxContains");
        double lo = json_is_number(mn) ? num(mn) : 1, hi = json_is_number(mx) ? num(mx) : INFINITY;
        size_t yes = 0, unknown = 0;
        for (i = 0; i < n; i++) {
            int r = check(k, x, json_array_get(v, i), depth + 1);
            if (r > 0) yes++;
            else if (r < 0) unknown++;
        }
        if ((double)(yes + unknown) < lo || (double)yes > hi) return 0;
        if (unknown && !((double)yes >= lo && (double)(yes + unknown) <= hi)) acc = -1;
    }
    if (json_is_true(json_object_get(s, "uniqueItems")))
        for (i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (jeq(json_array_get(v, i), json_array_get(v, j))) return 0;
    if ((x = json_object_get(s, "unevaluatedItems")) && !json_is_true(x) && !(json_is_object(x) && !json_object_size(x)))
        return cant(k, "unevaluatedItems");
    return acc;
}

static int check_string(ck *k, json_t *s, json_t *v) {
    json_t *x;
    const char *str = json_string_value(v);
    size_t len = json_string_length(v), n = cp_len(str, len);
    if ((x = json_object_get(s, "minLength")) && json_is_number(x) && (double)n < num(x)) return 0;
    if ((x = json_object_get(s, "maxLength")) && json_is_number(x) && (double)n > num(x)) return 0;
    int acc = 1;
    if ((x = json_object_get(s, "pattern")) && json_is_string(x)) FOLD(acc, re_search(k, json_string_value(x), str, len));
    if ((x = json_object_get(s, "format")) && json_is_string(x)) {
        for (const char *const *f = spec_formats; *f; f++)
            if (!strcmp(*f, json_string_value(x))) return cant(k, "format");
    }
    return acc;
}

static int check_number(ck *k, json_t *s, json_t *v) {
    json_t *x;
    double d = num(v);
    /* bounds: exact for integers against integers, doubles otherwise */
    static const struct { const char *kw; int cmp; } b[] = {
        {"minimum", 1}, {"maximum", 2}, {"exclusiveMinimum", 3}, {"exclusiveMaximum", 4},
    };
    for (int i = 0; i < 4; i++) {
        x = json_object_get(s, b[i].kw);
        if (!x) continue;
        if (json_is_boolean(x)) continue;  /* draft 4's flags, read below */
        if (!json_is_number(x)) continue;
        int c;  /* sign of v - bound */
        if (json_is_integer(v) && json_is_integer(x)) {
            json_int_t a = json_integer_value(v), y = json_integer_value(x);
            c = a < y ? -1 : a > y;
        } else {
            double y = num(x);
            c = d < y ? -1 : d > y;
        }
        int cmp = b[i].cmp;
        /* draft 4: exclusiveMinimum: true makes minimum strict */
        if (cmp == 1 && json_is_true(json_object_get(s, "exclusiveMinimum"))) cmp = 3;
        if (cmp == 2 && json_is_true(json_object_get(s, "exclusiveMaximum"))) cmp = 4;
        if ((cmp == 1 && c < 0) || (cmp == 2 && c > 0) || (cmp == 3 && c <= 0) || (cmp == 4 && c >= 0)) return 0;
    }
    if ((x = json_object_get(s, "multipleOf")) && json_is_number(x) && num(x) > 0) {
        if (json_is_integer(v) && json_is_integer(x)) return json_integer_value(v) % json_integer_value(x) == 0;
        double q = d / num(x);
        if (!isfinite(q) || fabs(q) >= 9007199254740992.0) return cant(k, "multipleOf");
        double r = round(q);
        if (q == r) return 1;
        if (fabs(q - r) <= 1e-9 * fmax(1.0, fabs(q))) return cant(k, "multipleOf");
        return 0;
    }
    return 1;
}

static int check(ck *k, json_t *s, json_t *v, int depth) {
    if (depth > CHECK_MAX_DEPTH) return cant(k, "schemas nested too deep");
    if (--k->budget < 0) return cant(k, "too many subschemas to visit");
    if (json_is_boolean(s)) return json_is_true(s);
    if (!json_is_object(s)) return cant(k, "a schema that is not an object");
    int acc = 1;
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        if (!json_is_string(x)) return cant(k, "$ref");
        if (k->ver <= 7) {
            const char *key;
            json_t *val;
            json_object_foreach(s, key, val)
                if (strcmp(key, "$ref") && strcmp(key, "$schema") && strcmp(key, "$id") && strcmp(key, "id") &&
                    strcmp(key, "definitions") && strcmp(key, "$defs") && strcmp(key, "title") &&
                    strcmp(key, "description") && strcmp(key, "$comment"))
                    return cant(k, "$ref with siblings (ignored by draft 4-7)");
        }
        json_t *t = resolve(k, json_string_value(x));
        if (!t) return cant(k, "$ref (not a local JSON pointer)");
        FOLD(acc, check(k, t, v, depth + 1));
    }
    if (json_object_get(s, "$dynamicRef") || json_object_get(s, "$recursiveRef")) return cant(k, "$dynamicRef");
    /* keywords one draft has and another ignores: only where the document's draft has them */
    if (k->ver <= 4 && (json_object_get(s, "const") || json_object_get(s, "contains") || json_object_get(s, "propertyNames")))
        return cant(k, "a keyword draft 4 does not have");
    if (k->ver <= 6 && json_object_get(s, "if")) return cant(k, "if (draft 7 and later)");
    if (k->ver >= 2019 && json_object_get(s, "dependencies")) return cant(k, "dependencies (before 2019-09)");
    if (k->ver <= 7 && (json_object_get(s, "dependentRequired") || json_object_get(s, "dependentSchemas")))
        return cant(k, "dependentRequired (2019-09 and later)");
    if (k->ver <= 2019 && json_object_get(s, "prefixItems")) return cant(k, "prefixItems (2020-12)");
    if (k->ver >= 2020 && json_is_array(json_object_get(s, "items"))) return cant(k, "items as an array (before 2020-12)");
    if (json_object_get(s, "nullable") && !json_is_false(json_object_get(s, "nullable"))) return cant(k, "nullable (OpenAPI)");
    if ((x = json_object_get(s, "type"))) {
        int ok = 0;
        if (json_is_string(x)) ok = type_ok(k, json_string_value(x), v);
        else if (json_is_array(x)) {
            size_t i;
            json_t *e;
            json_array_foreach(x, i, e) {
                int r = json_is_string(e) ? type_ok(k, json_string_value(e), v) : cant(k, "type");
                if (r > 0) { ok = 1; break; }
                if (r < 0) ok = -1;
            }
        } else return cant(k, "type");
        FOLD(acc, ok);
    }
    if ((x = json_object_get(s, "const")) && !jeq(x, v)) return 0;
    if ((x = json_object_get(s, "enum")) && json_is_array(x)) {
        bool in = false;
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) in |= jeq(e, v);
        if (!in) return 0;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT: FOLD(acc, check_object(k, s, v, depth)); break;
    case JSON_ARRAY: FOLD(acc, check_array(k, s, v, depth)); break;
    case JSON_STRING: FOLD(acc, check_string(k, s, v)); break;
    case JSON_INTEGER: case JSON_REAL: FOLD(acc, check_number(k, s, v)); break;
    default: break;
    }
    if ((x = json_object_get(s, "allOf")) && json_is_array(x)) {
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) FOLD(acc, check(k, e, v, depth + 1));
    }
    if ((x = json_object_get(s, "anyOf")) && json_is_array(x)) {
        int any = 0;
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) {
            int r = check(k, e, v, depth + 1);
            if (r > 0) { any = 1; break; }
            if (r < 0) any = -1;
        }
        FOLD(acc, any);
    }
    if ((x = json_object_get(s, "oneOf")) && json_is_array(x)) {
        int yes = 0, unknown = 0;
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) {
            int r = check(k, e, v, depth + 1);
            yes += r > 0;
            unknown += r < 0;
        }
        if (yes > 1 || yes + unknown == 0) return 0;
        if (unknown) acc = -1;
    }
    if ((x = json_object_get(s, "not"))) {
        int r = check(k, x, v, depth + 1);
        FOLD(acc, r < 0 ? -1 : !r);
    }
    if ((x = json_object_get(s, "if"))) {
        int r = check(k, x, v, depth + 1);
        json_t *branch = r > 0 ? json_object_get(s, "then") : r == 0 ? json_object_get(s, "else") : NULL;
        if (r < 0) {
            if (json_object_get(s, "then") || json_object_get(s, "else")) acc = cant(k, "if");
        } else if (branch) {
            FOLD(acc, check(k, branch, v, depth + 1));
        }
    }
    return acc;
}

int st_schema_check(json_t *doc, const char *id, json_t *s, json_t *v, long *budget, const char **why) {
    ck k = {.doc = doc, .id = id, .ver = 2020, .budget = *budget};
    json_t *sv = json_is_object(doc) ? json_object_get(doc, "$schema") : NULL;
    if (json_is_string(sv)) {
        const char *d = json_string_value(sv);
        if (strstr(d, "draft-04") || strstr(d, "draft-03")) k.ver = 4;
        else if (strstr(d, "draft-06")) k.ver = 6;
        else if (strstr(d, "draft-07")) k.ver = 7;
        else if (strstr(d, "2019-09")) k.ver = 2019;
    }
    int r = check(&k, s, v, 0);
    *budget = k.budget > 0 ? k.budget : 0;
    if (why) *why = r < 0 ? (k.why ? k.why : "?") : NULL;
    return r;
}

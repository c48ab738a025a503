/*
 * jinja_value.c - the runtime values of the template interpreter and the
 * JavaScript conversions the reference applies to them.
 *
 * @huggingface/jinja wraps JavaScript values in RuntimeValue classes. What a
 * template prints therefore follows JavaScript: numbers print as
 * Number.prototype.toString (1e21, 0.1, "1.0" for a float that is integral),
 * booleans print "true"/"false", lists and dicts print as JSON, `+` on a
 * string calls String() on the other operand, `==` is JavaScript's loose
 * equality on the wrapped values, dicts keep JavaScript's key order (array
 * index keys first), tojson is JSON.stringify plus Python-style separators.
 * Each of those rules is one function here, named after what it imitates.
 *
 * Recursive walks (JSON output, comparisons of nested values, JSON input) go
 * through jinja_enter so a deeply nested value cannot overflow the stack.
 */
#include "template/jinja_casemap.h"
#include "template/jinja_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

jv jv_undefined_value = {.type = JV_UNDEFINED};
jv jv_null_value = {.type = JV_NULL};
jv jv_true_value = {.type = JV_BOOL, .u.b = true};
jv jv_false_value = {.type = JV_BOOL, .u.b = false};

const char *jv_type_name(const jv *v) {
    switch (v->type) {
    case JV_UNDEFINED: return "UndefinedValue";
    case JV_NULL: return "NullValue";
    case JV_BOOL: return "BooleanValue";
    case JV_INT: return "IntegerValue";
    case JV_FLOAT: return "FloatValue";
    case JV_STRING: return "StringValue";
    case JV_ARRAY: return "ArrayValue";
    case JV_TUPLE: return "TupleValue";
    case JV_OBJECT: return "ObjectValue";
    case JV_KWARGS: return "KeywordArgumentsValue";
    case JV_NAMESPACE: return "NamespaceValue";
    case JV_FUNCTION: return "FunctionValue";
    }
    return "?";
}

/* ---- construction --------------------------------------------------------- */

static jv *jv_alloc(jinja_render *R, jv_type type, int line) {
    jv *v = jinja_arena_alloc(&R->arena, sizeof *v);
    if (!v) {
        jinja_fail_alloc(R, line);
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

jv *jv_string_ref(jinja_render *R, const char *s, size_t len, int line) {
    jv *v = jv_alloc(R, JV_STRING, line);
    if (!v) return NULL;
    v->u.str.s = s ? s : "";
    v->u.str.len = len;
    return v;
}

jv *jv_string(jinja_render *R, const char *s, size_t len, int line) {
    char *p = jinja_arena_strndup(&R->arena, s, len);
    if (!p) {
        jinja_fail_alloc(R, line);
        return NULL;
    }
    return jv_string_ref(R, p, len, line);
}

jv *jv_number(jinja_render *R, double x, bool is_int, int line) {
    jv *v = jv_alloc(R, is_int ? JV_INT : JV_FLOAT, line);
    if (v) v->u.num = x;
    return v;
}

jv *jv_array(jinja_render *R, jv_type type, size_t n, int line) {
    jv *v = jv_alloc(R, type, line);
    if (!v) return NULL;
    if (n) {
        if (n > SIZE_MAX / sizeof(jv *) || !(v->u.arr.v = jinja_arena_alloc(&R->arena, n * sizeof(jv *)))) {
            jinja_fail_alloc(R, line);
            return NULL;
        }
        for (size_t i = 0; i < n; i++) v->u.arr.v[i] = JV_UNDEF;
    }
    v->u.arr.n = n;
    return v;
}

jv *jv_function(jinja_render *R, jv_fn_kind kind, int line) {
    jv *v = jv_alloc(R, JV_FUNCTION, line);
    if (v) v->u.fn.kind = kind;
    return v;
}

jv *jv_object(jinja_render *R, jv_type type, size_t cap, int line) {
    jv *v = jv_alloc(R, type, line);
    if (!v) return NULL;
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv_entry) ||
            !(v->u.obj.e = jinja_arena_alloc(&R->arena, cap * sizeof(jv_entry)))) {
            jinja_fail_alloc(R, line);
            return NULL;
        }
    }
    v->u.obj.cap = cap;
    return v;
}

jv *jv_object_get(const jv *obj, const char *key, size_t klen) {
    for (size_t i = 0; i < obj->u.obj.n; i++) {
        const jv_entry *e = &obj->u.obj.e[i];
        if (e->klen == klen && !memcmp(e->key, key, klen)) return e->val;
    }
    return NULL;
}

/* Map.set: replaces in place or appends (insertion order). The key is borrowed. */
bool jv_object_set(jinja_render *R, jv *obj, const char *key, size_t klen, jv *val, int line) {
    for (size_t i = 0; i < obj->u.obj.n; i++) {
        jv_entry *e = &obj->u.obj.e[i];
        if (e->klen == klen && !memcmp(e->key, key, klen)) {
            e->val = val;
            return true;
        }
    }
    if (obj->u.obj.n == obj->u.obj.cap) {
        size_t cap = obj->u.obj.cap ? obj->u.obj.cap * 2 : 4;
        jv_entry *e = jinja_arena_alloc(&R->arena, cap * sizeof *e);
        if (!e) return jinja_fail_alloc(R, line);
        if (obj->u.obj.n) memcpy(e, obj->u.obj.e, obj->u.obj.n * sizeof *e);
        obj->u.obj.e = e;
        obj->u.obj.cap = cap;
    }
    obj->u.obj.e[obj->u.obj.n++] = (jv_entry){key, klen, val};
    return true;
}

/* RuntimeValue.__bool__ */
bool jv_truthy(const jv *v) {
    switch (v->type) {
    case JV_UNDEFINED:
    case JV_NULL: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT:
    case JV_FLOAT: return v->u.num != 0 && !isnan(v->u.num);
    case JV_STRING: return v->u.str.len > 0;
    case JV_ARRAY:
    case JV_TUPLE: return v->u.arr.n > 0;
    case JV_OBJECT:
    case JV_KWARGS: return v->u.obj.n > 0;
    case JV_NAMESPACE:
    case JV_FUNCTION: return true; /* !!Map, !!function */
    }
    return false;
}

bool jv_is_string(const jv *v, const char *s) {
    return v->type == JV_STRING && v->u.str.len == strlen(s) && !memcmp(v->u.str.s, s, v->u.str.len);
}

/* ---- JSON input ----------------------------------------------------------- */

/* A canonical array index ("0", "17", < 2^32 - 1): JavaScript enumerates
 * such keys first, in numeric order. */
static bool array_index_key(const char *k, size_t n, uint32_t *idx) {
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return false;
        v = v * 10 + (uint64_t)(k[i] - '0');
    }
    if (v >= 4294967295u) return false;
    *idx = (uint32_t)v;
    return true;
}

static jv *from_json(jinja_render *R, const json_t *j) {
    if (!jinja_enter(R, 0)) return NULL;
    jv *v = NULL;
    switch (json_typeof(j)) {
    case JSON_NULL: v = JV_NULLV; break;
    case JSON_TRUE: v = JV_BOOLV(true); break;
    case JSON_FALSE: v = JV_BOOLV(false); break;
    case JSON_INTEGER: v = jv_number(R, (double)json_integer_value(j), true, 0); break;
    case JSON_REAL: {
        double x = json_real_value(j);
        v = jv_number(R, x, isfinite(x) && x == floor(x), 0); /* Number.isInteger */
        break;
    }
    case JSON_STRING: v = jv_string(R, json_string_value(j), json_string_length(j), 0); break;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (!(v = jv_array(R, JV_ARRAY, n, 0))) break;
        for (size_t i = 0; i < n; i++)
            if (!(v->u.arr.v[i] = from_json(R, json_array_get(j, i)))) {
                v = NULL;
                break;
            }
        break;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j), k = 0;
        if (!(v = jv_object(R, JV_OBJECT, n, 0))) break;
        const char *key;
        json_t *val;
        /* pass 1: array-index keys, sorted numerically by insertion into place */
        json_object_foreach((json_t *)j, key, val) {
            size_t klen = strlen(key); /* jansson keys from JSON text have no NUL */
            uint32_t idx;
            if (!array_index_key(key, klen, &idx)) continue;
            jv *x = from_json(R, val);
            if (!x) return NULL;
            size_t pos = k;
            while (pos > 0) {
                uint32_t other;
                array_index_key(v->u.obj.e[pos - 1].key, v->u.obj.e[pos - 1].klen, &other);
                if (other < idx) break;
                v->u.obj.e[pos] = v->u.obj.e[pos - 1];
                pos--;
            }
            char *kc = jinja_arena_strndup(&R->arena, key, klen);
            if (!kc) return jinja_fail_alloc(R, 0), NULL;
            v->u.obj.e[pos] = (jv_entry){kc, klen, x};
            v->u.obj.n = ++k;
        }
        /* pass 2: the other keys in insertion order */
        json_object_foreach((json_t *)j, key, val) {
            size_t klen = strlen(key);
            uint32_t idx;
            if (array_index_key(key, klen, &idx)) continue;
            jv *x = from_json(R, val);
            char *kc = x ? jinja_arena_strndup(&R->arena, key, klen) : NULL;
            if (!x) return NULL;
            if (!kc) return jinja_fail_alloc(R, 0), NULL;
            v->u.obj.e[k++] = (jv_entry){kc, klen, x};
            v->u.obj.n = k;
        }
        break;
    }
    }
    jinja_leave(R);
    return v;
}

jv *jv_from_json(jinja_render *R, const json_t *j) { return from_json(R, j); }

/* ---- strings out ---------------------------------------------------------- */

static bool put(jinja_render *R, jinja_buf *out, const char *s, size_t n, int line) {
    if (!jinja_buf_append(out, s, n)) return jinja_fail_alloc(R, line);
    return true;
}

static bool puts_(jinja_render *R, jinja_buf *out, const char *s, int line) {
    return put(R, out, s, strlen(s), line);
}

static bool put_number(jinja_render *R, jinja_buf *out, double x, int line) {
    char buf[40];
    jinja_js_number(x, buf);
    return puts_(R, out, buf, line);
}

/* FloatValue.toString: "-0.0", integral values as toFixed(1), else JS. */
static bool put_float(jinja_render *R, jinja_buf *out, double x, int line) {
    if (x == 0 && signbit(x)) return puts_(R, out, "-0.0", line);
    if (isfinite(x) && x == floor(x)) {
        if (fabs(x) >= 1e21) return put_number(R, out, x, line);
        char buf[400];
        snprintf(buf, sizeof buf, "%.1f", x);
        return puts_(R, out, buf, line);
    }
    return put_number(R, out, x, line);
}

bool jv_write_string(jinja_render *R, const jv *v, jinja_buf *out, int line) {
    switch (v->type) {
    case JV_UNDEFINED: return puts_(R, out, "undefined", line);
    case JV_NULL: return puts_(R, out, "null", line);
    case JV_BOOL: return puts_(R, out, v->u.b ? "true" : "false", line);
    case JV_INT: return put_number(R, out, v->u.num, line);
    case JV_FLOAT: return put_float(R, out, v->u.num, line);
    case JV_STRING: return put(R, out, v->u.str.s, v->u.str.len, line);
    case JV_ARRAY:
    case JV_OBJECT:
    case JV_NAMESPACE: {
        jv_json_opts o = {0};
        return jv_write_json(R, v, &o, 0, out, line);
    }
    case JV_TUPLE:
    case JV_KWARGS: return jinja_fail(R, line, "cannot convert %s to a string (Cannot convert to JSON)", jv_type_name(v));
    case JV_FUNCTION: return jinja_fail(R, line, "cannot print a function");
    }
    return false;
}

bool jv_write_js(jinja_render *R, const jv *v, jinja_buf *out, int line) {
    switch (v->type) {
    case JV_INT:
    case JV_FLOAT: return put_number(R, out, v->u.num, line);
    case JV_ARRAY:
    case JV_TUPLE:
        if (!jinja_enter(R, line)) return false;
        for (size_t i = 0; i < v->u.arr.n; i++)
            if ((i && !put(R, out, ",", 1, line)) || !jv_write_string(R, v->u.arr.v[i], out, line)) return false;
        jinja_leave(R);
        return true;
    case JV_OBJECT:
    case JV_KWARGS:
    case JV_NAMESPACE: return puts_(R, out, "[object Map]", line);
    case JV_UNDEFINED:
    case JV_NULL: return jinja_fail(R, line, "cannot convert %s to a string", jv_type_name(v));
    default: return jv_write_string(R, v, out, line);
    }
}

bool jv_write_join(jinja_render *R, const jv *arr, const char *sep, size_t sep_len, jinja_buf *out, int line) {
    for (size_t i = 0; i < arr->u.arr.n; i++) {
        const jv *x = arr->u.arr.v[i];
        if (i && !put(R, out, sep, sep_len, line)) return false;
        if (x->type == JV_NULL || x->type == JV_UNDEFINED) continue;
        if (!jv_write_js(R, x, out, line)) return false;
    }
    return true;
}

/* JSON.stringify(string), then optionally \uXXXX for every UTF-16 unit >= 0x7f. */
static bool put_json_string(jinja_render *R, jinja_buf *out, const char *s, size_t n, bool ascii, int line) {
    static const char hex[] = "0123456789abcdef";
    if (!put(R, out, "\"", 1, line)) return false;
    size_t run = 0; /* start of bytes copied verbatim */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        size_t elen = 0, clen = 1;
        if (c < 0x20 || c == '"' || c == '\\') {
            switch (c) {
            case '"': memcpy(esc, "\\\"", 2), elen = 2; break;
            case '\\': memcpy(esc, "\\\\", 2), elen = 2; break;
            case '\b': memcpy(esc, "\\b", 2), elen = 2; break;
            case '\f': memcpy(esc, "\\f", 2), elen = 2; break;
            case '\n': memcpy(esc, "\\n", 2), elen = 2; break;
            case '\r': memcpy(esc, "\\r", 2), elen = 2; break;
            case '\t': memcpy(esc, "\\t", 2), elen = 2; break;
            default:
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
                elen = 6;
            }
        } else if (ascii && c >= 0x7f) {
            uint32_t cp;
            clen = jinja_utf8_decode(s, n, i, &cp);
            uint32_t units[2] = {cp, 0};
            int nu = 1;
            if (cp >= 0x10000) {
                units[0] = 0xd800 + ((cp - 0x10000) >> 10);
                units[1] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
                nu = 2;
            }
            for (int k = 0; k < nu; k++) {
                esc[elen++] = '\\', esc[elen++] = 'u';
                for (int sh = 12; sh >= 0; sh -= 4) esc[elen++] = hex[(units[k] >> sh) & 15];
            }
        } else {
            i++;
            continue;
        }
        if (i > run && !put(R, out, s + run, i - run, line)) return false;
        if (!put(R, out, esc, elen, line)) return false;
        i += clen;
        run = i;
    }
    if (n > run && !put(R, out, s + run, n - run, line)) return false;
    return put(R, out, "\"", 1, line);
}

static bool put_padding(jinja_render *R, jinja_buf *out, int indent, int depth, int line) {
    if (!put(R, out, "\n", 1, line)) return false;
    for (long i = 0; i < (long)indent * depth; i++)
        if (!put(R, out, " ", 1, line)) return false;
    return true;
}

bool jv_write_json(jinja_render *R, const jv *v, const jv_json_opts *o, int depth, jinja_buf *out, int line) {
    const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    size_t isep_len = o->item_sep ? o->item_sep_len : strlen(isep);
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    size_t ksep_len = o->key_sep ? o->key_sep_len : 2;
    switch (v->type) {
    case JV_NULL: return puts_(R, out, "null", line);
    case JV_UNDEFINED: return puts_(R, out, o->undefined_is_null ? "null" : "undefined", line);
    case JV_BOOL: return puts_(R, out, v->u.b ? "true" : "false", line);
    case JV_INT:
    case JV_FLOAT:
        if (!isfinite(v->u.num)) return puts_(R, out, "null", line);
        return put_number(R, out, v->u.num, line);
    case JV_STRING: return put_json_string(R, out, v->u.str.s, v->u.str.len, o->ensure_ascii, line);
    case JV_ARRAY: {
        if (!jinja_enter(R, line) || !put(R, out, "[", 1, line)) return false;
        for (size_t i = 0; i < v->u.arr.n; i++) {
            if (i && !put(R, out, isep, isep_len, line)) return false;
            if (o->indent && !put_padding(R, out, o->indent, depth + 1, line)) return false;
            if (!jv_write_json(R, v->u.arr.v[i], o, depth + 1, out, line)) return false;
        }
        if (o->indent && v->u.arr.n && !put_padding(R, out, o->indent, depth, line)) return false;
        jinja_leave(R);
        return put(R, out, "]", 1, line);
    }
    case JV_OBJECT:
    case JV_NAMESPACE: {
        if (!jinja_enter(R, line) || !put(R, out, "{", 1, line)) return false;
        for (size_t i = 0; i < v->u.obj.n; i++) {
            const jv_entry *e = &v->u.obj.e[i];
            if (i && !put(R, out, isep, isep_len, line)) return false;
            if (o->indent && !put_padding(R, out, o->indent, depth + 1, line)) return false;
            if (!put_json_string(R, out, e->key, e->klen, o->ensure_ascii, line) ||
                !put(R, out, ksep, ksep_len, line) || !jv_write_json(R, e->val, o, depth + 1, out, line))
                return false;
        }
        if (o->indent && v->u.obj.n && !put_padding(R, out, o->indent, depth, line)) return false;
        jinja_leave(R);
        return put(R, out, "}", 1, line);
    }
    case JV_TUPLE:
    case JV_KWARGS:
    case JV_FUNCTION: return jinja_fail(R, line, "cannot convert %s to JSON", jv_type_name(v));
    }
    return false;
}

/* ---- equality and ordering ------------------------------------------------ */

typedef enum js_type { JS_UNDEF, JS_NULL, JS_BOOL, JS_NUMBER, JS_STRING, JS_OBJECT } js_type;

static js_type js_typeof(const jv *v) {
    switch (v->type) {
    case JV_UNDEFINED: return JS_UNDEF;
    case JV_NULL: return JS_NULL;
    case JV_BOOL: return JS_BOOL;
    case JV_INT:
    case JV_FLOAT: return JS_NUMBER;
    case JV_STRING: return JS_STRING;
    default: return JS_OBJECT;
    }
}

/* Does [p, end) spell a StrDecimalLiteral (sign, digits, point, exponent)? */
static bool decimal_literal(const char *p, const char *end) {
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (end - p == 8 && !memcmp(p, "Infinity", 8)) return true;
    size_t digits = 0;
    while (p < end && *p >= '0' && *p <= '9') p++, digits++;
    if (p < end && *p == '.') {
        p++;
        while (p < end && *p >= '0' && *p <= '9') p++, digits++;
    }
    if (!digits) return false;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        size_t ed = 0;
        while (p < end && *p >= '0' && *p <= '9') p++, ed++;
        if (!ed) return false;
    }
    return p == end;
}

/* Number(string): whitespace-trimmed; "" -> 0; 0x/0o/0b integers; decimal; else NaN. */
static double js_string_to_number(const char *s, size_t n) {
    size_t a = 0, b = n, k;
    while (a < b && (k = jinja_js_space_at(s, n, a))) a += k;
    while (b > a) {
        size_t start = b - 1;
        while (start > a && ((unsigned char)s[start] & 0xc0) == 0x80) start--;
        if (!jinja_js_space_at(s, b, start)) break;
        b = start;
    }
    if (a == b) return 0;
    char buf[128];
    if (b - a >= sizeof buf) return NAN;
    memcpy(buf, s + a, b - a);
    buf[b - a] = 0;
    if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X' || buf[1] == 'o' || buf[1] == 'O' || buf[1] == 'b' ||
                          buf[1] == 'B')) {
        int base = (buf[1] | 32) == 'x' ? 16 : (buf[1] | 32) == 'o' ? 8 : 2;
        if (!buf[2]) return NAN;
        double v = 0;
        for (const char *p = buf + 2; *p; p++) {
            int d = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 32) >= 'a' && (*p | 32) <= 'f' ? (*p | 32) - 'a' + 10 : 99;
            if (d >= base) return NAN;
            v = v * base + d;
        }
        return v;
    }
    if (!decimal_literal(buf, buf + (b - a))) return NAN;
    char *p = buf;
    bool neg = false;
    if (*p == '+' || *p == '-') neg = *p == '-', p++;
    if (!strcmp(p, "Infinity")) return neg ? -INFINITY : INFINITY;
    return strtod(buf, NULL);
}

/* ToPrimitive for == : arrays join, Maps are "[object Map]". */
static const jv *to_primitive(jinja_render *R, const jv *v, int line) {
    if (v->type == JV_FUNCTION) {
        jinja_fail(R, line, "cannot compare a function with ==");
        return NULL;
    }
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    if (!jv_write_js(R, v, &b, line)) return NULL;
    return jv_string_ref(R, b.p, b.len, line);
}

bool jv_loose_equal(jinja_render *R, const jv *a, const jv *b, bool *eq, int line) {
    for (int guard = 0; guard < 4; guard++) {
        js_type ta = js_typeof(a), tb = js_typeof(b);
        if (ta == tb) {
            *eq = jv_strict_equal(a, b);
            return true;
        }
        if ((ta == JS_NULL || ta == JS_UNDEF) && (tb == JS_NULL || tb == JS_UNDEF)) {
            *eq = true;
            return true;
        }
        if (ta == JS_NUMBER && tb == JS_STRING) {
            *eq = a->u.num == js_string_to_number(b->u.str.s, b->u.str.len);
            return true;
        }
        if (ta == JS_STRING && tb == JS_NUMBER) {
            *eq = b->u.num == js_string_to_number(a->u.str.s, a->u.str.len);
            return true;
        }
        if (ta == JS_BOOL) {
            if (!(a = jv_number(R, a->u.b ? 1 : 0, true, line))) return false;
            continue;
        }
        if (tb == JS_BOOL) {
            if (!(b = jv_number(R, b->u.b ? 1 : 0, true, line))) return false;
            continue;
        }
        if (ta == JS_OBJECT && (tb == JS_NUMBER || tb == JS_STRING)) {
            if (!(a = to_primitive(R, a, line))) return false;
            continue;
        }
        if (tb == JS_OBJECT && (ta == JS_NUMBER || ta == JS_STRING)) {
            if (!(b = to_primitive(R, b, line))) return false;
            continue;
        }
        *eq = false;
        return true;
    }
    *eq = false;
    return true;
}

bool jv_strict_equal(const jv *a, const jv *b) {
    js_type ta = js_typeof(a), tb = js_typeof(b);
    if (ta != tb) return false;
    switch (ta) {
    case JS_UNDEF:
    case JS_NULL: return true;
    case JS_BOOL: return a->u.b == b->u.b;
    case JS_NUMBER: return a->u.num == b->u.num;
    case JS_STRING: return a->u.str.len == b->u.str.len && !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    case JS_OBJECT: return a == b;
    }
    return false;
}

/* Compares two UTF-8 strings in UTF-16 code unit order (JavaScript's < on strings). */
static int utf16_compare(const char *a, size_t an, const char *b, size_t bn) {
    size_t i = 0, j = 0;
    while (i < an && j < bn) {
        uint32_t ca, cb;
        size_t la = jinja_utf8_decode(a, an, i, &ca), lb = jinja_utf8_decode(b, bn, j, &cb);
        if (ca != cb) {
            /* supplementary code points sort as their high surrogate */
            uint32_t ka = ca >= 0x10000 ? 0xd800 + ((ca - 0x10000) >> 10) : ca;
            uint32_t kb = cb >= 0x10000 ? 0xd800 + ((cb - 0x10000) >> 10) : cb;
            if (ka != kb) return ka < kb ? -1 : 1;
            return ca < cb ? -1 : 1; /* same high surrogate: low surrogates follow code point order */
        }
        i += la, j += lb;
    }
    if (i < an) return 1;
    if (j < bn) return -1;
    return 0;
}

static bool numeric_like(const jv *v) { return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL; }
static double numeric_value(const jv *v) { return v->type == JV_BOOL ? (v->u.b ? 1 : 0) : v->u.num; }

bool jv_compare(jinja_render *R, const jv *a, const jv *b, bool case_sensitive, int *cmp, int line) {
    if (a->type == JV_NULL && b->type == JV_NULL) return *cmp = 0, true;
    if (a->type == JV_NULL || b->type == JV_NULL)
        return jinja_fail(R, line, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    if (a->type == JV_UNDEFINED && b->type == JV_UNDEFINED) return *cmp = 0, true;
    if (a->type == JV_UNDEFINED || b->type == JV_UNDEFINED)
        return jinja_fail(R, line, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    if (numeric_like(a) && numeric_like(b)) {
        double x = numeric_value(a), y = numeric_value(b);
        *cmp = x < y ? -1 : x > y ? 1 : 0;
        return true;
    }
    if (a->type != b->type)
        return jinja_fail(R, line, "cannot compare different types: %s and %s", jv_type_name(a), jv_type_name(b));
    if (a->type != JV_STRING) return jinja_fail(R, line, "cannot compare type %s", jv_type_name(a));
    if (case_sensitive) {
        *cmp = utf16_compare(a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len);
        return true;
    }
    jv *la = jv_lower(R, a, line), *lb = la ? jv_lower(R, b, line) : NULL;
    if (!lb) return false;
    *cmp = utf16_compare(la->u.str.s, la->u.str.len, lb->u.str.s, lb->u.str.len);
    return true;
}

/* ---- case mapping --------------------------------------------------------- */

/* Maps cp with (ranges, specials); returns the UTF-8 length written to out (<= 12 bytes). */
static size_t case_map(uint32_t cp, const jinja_case_range *ranges, size_t n_ranges,
                       const jinja_case_special *special, size_t n_special, char *out) {
    size_t lo = 0, hi = n_special;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (special[mid].cp == cp) {
            size_t len = strlen(special[mid].utf8);
            memcpy(out, special[mid].utf8, len);
            return len;
        }
        if (special[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    lo = 0, hi = n_ranges;
    while (lo < hi) { /* last range with .lo <= cp */
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].lo <= cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) {
        const jinja_case_range *r = &ranges[lo - 1];
        if (cp <= r->hi && (cp - r->lo) % r->stride == 0) cp = (uint32_t)((int64_t)cp + r->delta);
    }
    return jinja_utf8_encode(cp, out);
}

#define N_OF(a) (sizeof(a) / sizeof *(a))

static size_t upper_cp(uint32_t cp, char *out) {
    return case_map(cp, jinja_upper_ranges, N_OF(jinja_upper_ranges), jinja_upper_special,
                    N_OF(jinja_upper_special), out);
}

static size_t lower_cp(uint32_t cp, char *out) {
    return case_map(cp, jinja_lower_ranges, N_OF(jinja_lower_ranges), jinja_lower_special,
                    N_OF(jinja_lower_special), out);
}

/* Cased (approximately: has a case mapping) and case-ignorable (combining
 * marks and the common apostrophes) for the Final_Sigma rule. */
static bool is_cased(uint32_t cp) {
    char a[16], b[16], c[8];
    size_t n = jinja_utf8_encode(cp, c);
    size_t nu = upper_cp(cp, a), nl = lower_cp(cp, b);
    return nu != n || nl != n || memcmp(a, c, n) || memcmp(b, c, n);
}

static bool is_case_ignorable(uint32_t cp) {
    return (cp >= 0x300 && cp <= 0x36f) || cp == '\'' || cp == 0x2019 || cp == 0xb7 || cp == 0x2e || cp == 0x3a;
}

/* Is there a cased letter before byte i (skipping case-ignorables)? */
static bool cased_before(const char *s, size_t i) {
    while (i > 0) {
        size_t start = i - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80) start--;
        uint32_t cp;
        jinja_utf8_decode(s, i, start, &cp);
        if (!is_case_ignorable(cp)) return is_cased(cp);
        i = start;
    }
    return false;
}

static bool cased_after(const char *s, size_t n, size_t i) {
    while (i < n) {
        uint32_t cp;
        i += jinja_utf8_decode(s, n, i, &cp);
        if (!is_case_ignorable(cp)) return is_cased(cp);
    }
    return false;
}

static jv *map_case(jinja_render *R, const jv *s, bool upper, int line) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.len;
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x80) {
            char o = upper ? (c >= 'a' && c <= 'z' ? (char)(c - 32) : (char)c)
                           : (c >= 'A' && c <= 'Z' ? (char)(c + 32) : (char)c);
            if (!jinja_buf_appendc(&b, o)) return jinja_fail_alloc(R, line), NULL;
            i++;
            continue;
        }
        uint32_t cp;
        size_t len = jinja_utf8_decode(p, n, i, &cp);
        char out[16];
        size_t olen;
        if (!upper && cp == 0x3a3 && cased_before(p, i) && !cased_after(p, n, i + len))
            olen = jinja_utf8_encode(0x3c2, out); /* final sigma */
        else
            olen = upper ? upper_cp(cp, out) : lower_cp(cp, out);
        if (!jinja_buf_append(&b, out, olen)) return jinja_fail_alloc(R, line), NULL;
        i += len;
    }
    return jv_string_ref(R, b.p, b.len, line);
}

jv *jv_upper(jinja_render *R, const jv *s, int line) { return map_case(R, s, true, line); }
jv *jv_lower(jinja_render *R, const jv *s, int line) { return map_case(R, s, false, line); }

/* charAt(0).toUpperCase() + slice(1): only a BMP first character changes. */
jv *jv_capitalize(jinja_render *R, const jv *s, int line) {
    if (!s->u.str.len) return (jv *)s;
    uint32_t cp;
    size_t len = jinja_utf8_decode(s->u.str.s, s->u.str.len, 0, &cp);
    if (cp >= 0x10000) return (jv *)s;
    char out[16];
    size_t olen = upper_cp(cp, out);
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    if (!jinja_buf_append(&b, out, olen) || !jinja_buf_append(&b, s->u.str.s + len, s->u.str.len - len))
        return jinja_fail_alloc(R, line), NULL;
    return jv_string_ref(R, b.p, b.len, line);
}

static bool ascii_word(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* value.replace(/\b\w/g, c => c.toUpperCase()): ASCII word starts only. */
jv *jv_title(jinja_render *R, const jv *s, int line) {
    char *p = jinja_arena_strndup(&R->arena, s->u.str.s, s->u.str.len);
    if (!p) return jinja_fail_alloc(R, line), NULL;
    for (size_t i = 0; i < s->u.str.len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (ascii_word(c) && (i == 0 || !ascii_word((unsigned char)p[i - 1])) && c >= 'a' && c <= 'z')
            p[i] = (char)(c - 32);
    }
    return jv_string_ref(R, p, s->u.str.len, line);
}

jv *jv_trim(jinja_render *R, const jv *s, bool start, bool end, int line) {
    const char *p = s->u.str.s;
    size_t a = 0, b = s->u.str.len, k;
    if (start)
        while (a < b && (k = jinja_js_space_at(p, b, a))) a += k;
    if (end)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            if (!jinja_js_space_at(p, b, st)) break;
            b = st;
        }
    if (a == 0 && b == s->u.str.len) return (jv *)s;
    return jv_string_ref(R, p + a, b - a, line);
}

double jv_parse_int(const char *s, size_t n) {
    size_t i = 0, k;
    while (i < n && (k = jinja_js_space_at(s, n, i))) i += k;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i] == '-', i++;
    size_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return NAN;
    char buf[400];
    size_t len = i - start < sizeof buf - 1 ? i - start : sizeof buf - 1;
    memcpy(buf, s + start, len);
    buf[len] = 0;
    double v = strtod(buf, NULL);
    if (i - start >= sizeof buf - 1) v = INFINITY;
    return neg ? -v : v;
}

double jv_parse_float(const char *s, size_t n) {
    size_t i = 0, k;
    while (i < n && (k = jinja_js_space_at(s, n, i))) i += k;
    /* the longest prefix that is a StrDecimalLiteral */
    size_t start = i;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (n - i >= 8 && !memcmp(s + i, "Infinity", 8)) return s[start] == '-' ? -INFINITY : INFINITY;
    size_t digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
    if (i < n && s[i] == '.') {
        size_t j = i + 1, frac = 0;
        while (j < n && s[j] >= '0' && s[j] <= '9') j++, frac++;
        if (digits || frac) i = j, digits += frac;
    }
    if (!digits) return NAN;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        size_t ed = j;
        while (j < n && s[j] >= '0' && s[j] <= '9') j++;
        if (j > ed) i = j;
    }
    char buf[512];
    if (i - start >= sizeof buf) { /* absurdly long: strtod on an arena-free copy is not worth it */
        return NAN;
    }
    memcpy(buf, s + start, i - start);
    buf[i - start] = 0;
    return strtod(buf, NULL);
}

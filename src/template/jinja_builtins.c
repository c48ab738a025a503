/*
 * jinja_builtins.c - everything a template can call by name: filters
 * (x|trim), tests (x is string), string and dict methods (s.split(","),
 * d.items()), and the globals raise_exception, range, namespace and
 * strftime_now.
 *
 * The reference (@huggingface/jinja) defines these per operand type, so the
 * same name can exist for one type and be an error for another ("x"|first is
 * an error, [1]|first is not); the dispatch below keeps that shape: first by
 * name for the type-independent ones (safe, tojson, default, join, int,
 * float), then by operand type. Behaviour follows the reference's JavaScript:
 * strip/lstrip/rstrip ignore their argument and trim all whitespace, int
 * floors, upper/lower use full Unicode case mapping (jinja_casemap.h), sort
 * is stable and case-insensitive by default, tojson separators and indent as
 * Python's json.dumps. Anything the reference lacks (rsplit, find, format,
 * escape, tests with arguments) is an error naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"

static bool nomem(jinja_render *R, int line) { return jinja_fail_alloc(R, line); }

/* JavaScript truthiness of the wrapped value: RuntimeValue.__bool__ (jv_truthy)
 * for scalars, but arrays, tuples and objects are always true, even empty. */
static bool js_truthy(const jv *v) {
    switch (v->type) {
    case JV_UNDEFINED:
    case JV_NULL:
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
    case JV_STRING: return jv_truthy(v);
    default: return true;
    }
}

static jv *str_lit(jinja_render *R, const char *s, int line) { return jv_string_ref(R, s, strlen(s), line); }
/* Stable merge sort with a fallible comparator (JavaScript's sort is stable). */
typedef bool (*cmp_fn)(jinja_render *R, const jv *a, const jv *b, void *ctx, int *out);

static bool merge_sort(jinja_render *R, jv **v, size_t n, cmp_fn cmp, void *ctx, int line) {
    if (n < 2) return true;
    jv **tmp = jinja_arena_alloc(&R->arena, n * sizeof *tmp);
    if (!tmp) return nomem(R, line);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (!cmp(R, v[j], v[i], ctx, &c)) return false;
                tmp[k++] = c < 0 ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
    return true;
}

/* kwargs.get(name) or NULL */
static jv *kwarg(const jv *kwargs, const char *name) {
    return kwargs ? jv_object_get(kwargs, name, strlen(name)) : NULL;
}

/* ---- strings -------------------------------------------------------------- */

static bool str_starts(const jv *s, const jv *p) {
    return p->u.str.len <= s->u.str.len && !memcmp(s->u.str.s, p->u.str.s, p->u.str.len);
}

static bool str_ends(const jv *s, const jv *p) {
    return p->u.str.len <= s->u.str.len &&
           !memcmp(s->u.str.s + s->u.str.len - p->u.str.len, p->u.str.s, p->u.str.len);
}

/* The reference's replace(str, old, new, count): count < 0 or none = all; an
 * empty `old` matches between code points (regex (?=) with the u flag). */
static jv *str_replace(jinja_render *R, const jv *s, const jv *old, const jv *nw, const jv *count, int line) {
    double remaining = INFINITY;
    if (count->type == JV_INT) {
        if (count->u.num == 0) return (jv *)s;
        if (count->u.num > 0) remaining = count->u.num;
    }
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, i = 0;
    if (old->u.str.len == 0) {
        for (;;) {
            if (remaining > 0) {
                if (!jinja_buf_append(&b, nw->u.str.s, nw->u.str.len)) return nomem(R, line), NULL;
                remaining--;
            }
            if (i >= n) break;
            uint32_t cp;
            size_t k = jinja_utf8_decode(p, n, i, &cp);
            if (!jinja_buf_append(&b, p + i, k)) return nomem(R, line), NULL;
            i += k;
        }
    } else {
        size_t at;
        while (remaining > 0 && jinja_bytes_find(p, n, old->u.str.s, old->u.str.len, i, &at)) {
            if (!jinja_buf_append(&b, p + i, at - i) || !jinja_buf_append(&b, nw->u.str.s, nw->u.str.len))
                return nomem(R, line), NULL;
            i = at + old->u.str.len;
            remaining--;
        }
        if (!jinja_buf_append(&b, p + i, n - i)) return nomem(R, line), NULL;
    }
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

/* str.split(sep=None, maxsplit=-1) as the reference implements it. */
static jv *str_split(jinja_render *R, const jv *s, jv **args, size_t n, int line) {
    const jv *sep = n > 0 ? args[0] : JV_NULLV;
    if (sep->type != JV_STRING && sep->type != JV_NULL)
        return jinja_fail(R, line, "split(): sep argument must be a string or none"), NULL;
    const jv *maxsplit = n > 1 ? args[1] : NULL;
    double max = -1;
    if (maxsplit) {
        if (maxsplit->type != JV_INT) return jinja_fail(R, line, "split(): maxsplit argument must be an integer"), NULL;
        max = maxsplit->u.num;
    }
    jv_list parts = {0};
    const char *p = s->u.str.s;
    size_t len = s->u.str.len;
    if (sep->type == JV_NULL) {
        size_t i = 0, k;
        while (i < len && (k = jinja_js_space_at(p, len, i))) i += k; /* trimStart */
        while (i < len) {
            size_t start = i;
            while (i < len && !jinja_js_space_at(p, len, i)) {
                uint32_t cp;
                i += jinja_utf8_decode(p, len, i, &cp);
            }
            jv *part;
            if (max != -1 && (double)parts.n >= max) {
                part = jv_string_ref(R, p + start, len - start, line);
                if (!part || !jv_list_push(R, &parts, part, line)) return NULL;
                break;
            }
            if (!(part = jv_string_ref(R, p + start, i - start, line)) || !jv_list_push(R, &parts, part, line))
                return NULL;
            while (i < len && (k = jinja_js_space_at(p, len, i))) i += k;
        }
        return jv_list_array(R, &parts, line);
    }
    if (sep->u.str.len == 0) return jinja_fail(R, line, "split(): empty separator"), NULL;
    size_t i = 0, at;
    for (;;) {
        bool found = jinja_bytes_find(p, len, sep->u.str.s, sep->u.str.len, i, &at);
        size_t end = found ? at : len;
        jv *part = jv_string_ref(R, p + i, end - i, line);
        if (!part || !jv_list_push(R, &parts, part, line)) return NULL;
        if (!found) break;
        i = at + sep->u.str.len;
    }
    if (max != -1 && (double)parts.n > max) {
        /* result.push(result.splice(maxsplit).join(sep)) */
        double startd = max < 0 ? fmax((double)parts.n + max, 0) : max;
        size_t start = (size_t)startd;
        /* the joined tail is the original text from the start of part `start` */
        size_t off = (size_t)(parts.v[start]->u.str.s - p);
        jv *tail = jv_string_ref(R, p + off, len - off, line);
        if (!tail) return NULL;
        parts.n = start;
        if (!jv_list_push(R, &parts, tail, line)) return NULL;
    }
    return jv_list_array(R, &parts, line);
}

/* ---- properties and methods by type ---------------------------------------- */

static const char *const string_methods[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                             "startswith", "endswith", "split", "replace", NULL};
static const char *const object_methods[] = {"get", "items", "keys", "values", "dictsort", NULL};

static jv *method(jinja_render *R, jv *self, const char *name, size_t len, int line) {
    jv *f = jv_function(R, JF_METHOD, line);
    if (!f) return NULL;
    f->u.fn.self = self;
    f->u.fn.name = jinja_arena_strndup(&R->arena, name, len);
    if (!f->u.fn.name) return nomem(R, line), NULL;
    return f;
}

/* obj.builtins.get(name): properties and methods by type. */
jv *jinja_builtin_property(jinja_render *R, jv *obj, const char *name, size_t len, int line) {
    if (obj->type == JV_STRING) {
        if (len == 6 && !memcmp(name, "length", 6))
            return jv_number(R, (double)jinja_utf16_length(obj->u.str.s, obj->u.str.len), true, line);
        if (jinja_is_one_of(name, len, string_methods)) return method(R, obj, name, len, line);
    } else if (jv_is_array(obj)) {
        if (len == 6 && !memcmp(name, "length", 6)) return jv_number(R, (double)obj->u.arr.n, true, line);
    } else if (jv_is_object(obj)) {
        if (jinja_is_one_of(name, len, object_methods)) return method(R, obj, name, len, line);
    }
    return JV_UNDEF;
}

/* ---- tests ---------------------------------------------------------------- */

bool jinja_builtin_test(jinja_render *R, const char *name, const jv *a, const jv *b, bool *res, int line) {
#define IS(s) (!strcmp(name, s))
    if (IS("boolean")) *res = a->type == JV_BOOL;
    else if (IS("callable")) *res = a->type == JV_FUNCTION;
    else if (IS("odd") || IS("even")) {
        if (a->type != JV_INT) return jinja_fail(R, line, "test '%s' needs an integer, got %s", name, jv_type_name(a));
        bool odd = fmod(a->u.num, 2) != 0;
        *res = IS("odd") ? odd : !odd;
    } else if (IS("false")) *res = a->type == JV_BOOL && !a->u.b;
    else if (IS("true")) *res = a->type == JV_BOOL && a->u.b;
    else if (IS("none")) *res = a->type == JV_NULL;
    else if (IS("string")) *res = a->type == JV_STRING;
    else if (IS("number")) *res = jv_is_number(a);
    else if (IS("integer")) *res = a->type == JV_INT;
    else if (IS("iterable")) *res = a->type == JV_ARRAY || a->type == JV_STRING;
    else if (IS("mapping")) *res = jv_is_object(a);
    else if (IS("sequence")) *res = jv_is_array(a) || jv_is_object(a) || a->type == JV_STRING;
    else if (IS("lower") || IS("upper")) {
        *res = false;
        if (a->type == JV_STRING) {
            jv *m = IS("lower") ? jv_lower(R, a, line) : jv_upper(R, a, line);
            if (!m) return false;
            *res = jv_strict_equal(a, m);
        }
    } else if (IS("defined")) *res = a->type != JV_UNDEFINED;
    else if (IS("undefined")) *res = a->type == JV_UNDEFINED;
    else if (IS("equalto") || IS("eq")) {
        if (!b) return jinja_fail(R, line, "test '%s' needs a value to compare with", name);
        *res = jv_strict_equal(a, b);
    } else return jinja_fail(R, line, "unknown test '%s'", name);
#undef IS
    return true;
}

/* ---- filters -------------------------------------------------------------- */

static bool json_opts_from_kwargs(jinja_render *R, const jv *kw, jv_json_opts *o, int line) {
    memset(o, 0, sizeof *o);
    o->undefined_is_null = true;
    const jv *indent = kwarg(kw, "indent"), *ascii = kwarg(kw, "ensure_ascii"), *sort = kwarg(kw, "sort_keys"),
             *seps = kwarg(kw, "separators");
    if (indent && indent->type != JV_NULL) {
        if (indent->type != JV_INT) return jinja_fail(R, line, "tojson: indent must be an integer");
        if (indent->u.num < 0) return jinja_fail(R, line, "tojson: indent must not be negative");
        if (indent->u.num > 1000000) return jinja_fail(R, line, "tojson: indent is too large");
        o->indent = (int)indent->u.num;
    }
    if (ascii) {
        if (ascii->type != JV_BOOL) return jinja_fail(R, line, "tojson: ensure_ascii must be a boolean");
        o->ensure_ascii = ascii->u.b;
    }
    if (sort) {
        if (sort->type != JV_BOOL) return jinja_fail(R, line, "tojson: sort_keys must be a boolean");
        o->sort_keys = sort->u.b;
    }
    if (seps && seps->type != JV_NULL) {
        if (!jv_is_array(seps) || seps->u.arr.n != 2 || seps->u.arr.v[0]->type != JV_STRING ||
            seps->u.arr.v[1]->type != JV_STRING)
            return jinja_fail(R, line, "tojson: separators must be a pair of strings");
        o->item_sep = seps->u.arr.v[0]->u.str.s, o->item_sep_len = seps->u.arr.v[0]->u.str.len;
        o->key_sep = seps->u.arr.v[1]->u.str.s, o->key_sep_len = seps->u.arr.v[1]->u.str.len;
    }
    return true;
}

static jv *to_json_value(jinja_render *R, const jv *v, const jv_json_opts *o, int line) {
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    if (!jv_write_json(R, v, o, 0, &b, line)) return NULL;
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

/* getAttributeValue: "a.b.0" through dicts/namespaces and list indices. */
static jv *attribute_path(jv *item, const char *path, size_t n) {
    size_t i = 0;
    jv *v = item;
    for (;;) {
        size_t j = i;
        while (j < n && path[j] != '.') j++;
        if (jv_is_container(v)) {
            jv *x = jv_object_get(v, path + i, j - i);
            v = x ? x : JV_UNDEF;
        } else if (jv_is_array(v)) {
            /* parseInt(part, 10): leading digits */
            size_t k = i;
            double idx = 0;
            while (k < j && path[k] >= '0' && path[k] <= '9') idx = idx * 10 + (path[k++] - '0');
            if (k == i || idx >= (double)v->u.arr.n) return JV_UNDEF;
            v = v->u.arr.v[(size_t)idx];
        } else {
            return JV_UNDEF;
        }
        if (j >= n) return v;
        i = j + 1;
    }
}

typedef struct sort_ctx {
    bool case_sensitive, reverse;
    const jv *attribute; /* STRING, INT or NULL */
    bool by_value;       /* dictsort */
} sort_ctx;

static jv *sort_key(jinja_render *R, jv *item, const sort_ctx *c, int line) {
    if (c->attribute->type == JV_NULL) return item;
    if (c->attribute->type == JV_STRING) return attribute_path(item, c->attribute->u.str.s, c->attribute->u.str.len);
    char buf[40];
    jinja_js_number(c->attribute->u.num, buf);
    (void)R, (void)line;
    return attribute_path(item, buf, strlen(buf));
}

static bool cmp_sort(jinja_render *R, const jv *a, const jv *b, void *ctx, int *out) {
    sort_ctx *c = ctx;
    jv *ka = sort_key(R, (jv *)a, c, 0), *kb = sort_key(R, (jv *)b, c, 0);
    if (!jv_compare(R, ka, kb, c->case_sensitive, out, 0)) return false;
    if (c->reverse) *out = -*out;
    return true;
}

static bool cmp_dictsort(jinja_render *R, const jv *a, const jv *b, void *ctx, int *out) {
    sort_ctx *c = ctx;
    int k = c->by_value ? 1 : 0;
    if (!jv_compare(R, a->u.arr.v[k], b->u.arr.v[k], c->case_sensitive, out, 0)) return false;
    if (c->reverse) *out = -*out;
    return true;
}

static jv *copy_array(jinja_render *R, const jv *a, int line) {
    jv *out = jv_array(R, JV_ARRAY, a->u.arr.n, line);
    if (!out) return NULL;
    for (size_t i = 0; i < a->u.arr.n; i++) out->u.arr.v[i] = a->u.arr.v[i];
    return out;
}

static jv *sort_array(jinja_render *R, const jv *a, sort_ctx *c, int line) {
    jv *out = copy_array(R, a, line);
    if (!out || !merge_sort(R, out->u.arr.v, out->u.arr.n, cmp_sort, c, line)) return NULL;
    return out;
}

static jv *object_items(jinja_render *R, const jv *o, int line) {
    jv *out = jv_array(R, JV_ARRAY, o->u.obj.n, line);
    if (!out) return NULL;
    for (size_t i = 0; i < o->u.obj.n; i++) {
        jv *pair = jv_array(R, JV_ARRAY, 2, line);
        if (!pair || !(pair->u.arr.v[0] = jv_string_ref(R, o->u.obj.e[i].key, o->u.obj.e[i].klen, line))) return NULL;
        pair->u.arr.v[1] = o->u.obj.e[i].val;
        out->u.arr.v[i] = pair;
    }
    return out;
}

static jv *indent_lines(jinja_render *R, const jv *s, double width, bool first, bool blank, int line) {
    if (width < 0) return jinja_fail(R, line, "indent: width must not be negative"), NULL;
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, i = 0, lineno = 0;
    for (;;) {
        size_t j = i;
        while (j < n && p[j] != '\n') j++;
        bool empty = j == i;
        if (!((!first && lineno == 0) || (!blank && empty)))
            for (double k = 0; k < width; k++)
                if (!jinja_buf_appendc(&b, ' ')) return nomem(R, line), NULL;
        if (!jinja_buf_append(&b, p + i, j - i)) return nomem(R, line), NULL;
        if (j >= n) break;
        if (!jinja_buf_appendc(&b, '\n')) return nomem(R, line), NULL;
        i = j + 1;
        lineno++;
    }
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

static jv *call_object_method(jinja_render *R, jv *self, const char *name, jv **args, size_t n, int line);
static jv *call_string_method(jinja_render *R, jv *self, const char *name, jv **args, size_t n, int line);

static jv *filter_by_name(jinja_render *R, jv *v, const char *name, jinja_env *env, int line) {
#define IS(s) (!strcmp(name, s))
    (void)env;
    if (IS("safe")) return v;
    if (IS("tojson")) {
        jv_json_opts o = {.undefined_is_null = true};
        return to_json_value(R, v, &o, line);
    }
    if (jv_is_array(v)) {
        size_t n = v->u.arr.n;
        if (IS("list")) return v;
        if (IS("first") || IS("last")) {
            if (!n) return jinja_fail(R, line, "filter '%s' on an empty list", name), NULL;
            return v->u.arr.v[IS("first") ? 0 : n - 1];
        }
        if (IS("length")) return jv_number(R, (double)n, true, line);
        if (IS("reverse")) {
            jv *out = jv_array(R, JV_ARRAY, n, line);
            if (!out) return NULL;
            for (size_t i = 0; i < n; i++) out->u.arr.v[i] = v->u.arr.v[n - 1 - i];
            return out;
        }
        if (IS("sort")) {
            sort_ctx c = {.attribute = JV_NULLV};
            return sort_array(R, v, &c, line);
        }
        if (IS("join")) {
            jinja_buf b;
            jinja_buf_init(&b, &R->arena, R->max_output);
            if (!jv_write_join(R, v, "", 0, &b, line)) return NULL;
            return jv_string_ref(R, b.p ? b.p : "", b.len, line);
        }
        if (IS("string")) {
            jv_json_opts o = {0};
            return to_json_value(R, v, &o, line);
        }
        if (IS("unique")) {
            jv_list out = {0};
            for (size_t i = 0; i < n; i++) {
                jv *x = v->u.arr.v[i];
                bool seen = false;
                for (size_t k = 0; k < out.n && !seen; k++)
                    seen = jv_strict_equal(out.v[k], x) ||
                           (jv_is_number(x) && jv_is_number(out.v[k]) && isnan(x->u.num) && isnan(out.v[k]->u.num));
                if (!seen && !jv_list_push(R, &out, x, line)) return NULL;
            }
            return jv_list_array(R, &out, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a list", name), NULL;
    }
    if (v->type == JV_STRING) {
        if (IS("length")) return jv_number(R, (double)jinja_utf16_length(v->u.str.s, v->u.str.len), true, line);
        if (IS("upper")) return jv_upper(R, v, line);
        if (IS("lower")) return jv_lower(R, v, line);
        if (IS("title")) return jv_title(R, v, line);
        if (IS("capitalize")) return jv_capitalize(R, v, line);
        if (IS("trim")) return jv_trim(R, v, true, true, line);
        if (IS("indent")) return indent_lines(R, v, 4, false, false, line);
        if (IS("join") || IS("string")) return v;
        if (IS("int")) {
            double x = jv_parse_int(v->u.str.s, v->u.str.len);
            return jv_number(R, isnan(x) ? 0 : x, true, line);
        }
        if (IS("float")) {
            double x = jv_parse_float(v->u.str.s, v->u.str.len);
            return jv_number(R, isnan(x) ? 0 : x, false, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a string", name), NULL;
    }
    if (jv_is_number(v)) {
        if (IS("abs")) return jv_number(R, fabs(v->u.num), v->type == JV_INT, line);
        if (IS("int")) return jv_number(R, floor(v->u.num), true, line);
        if (IS("float")) return jv_number(R, v->u.num, false, line);
        if (IS("string")) {
            jinja_buf b;
            jinja_buf_init(&b, &R->arena, R->max_output);
            if (!jv_write_string(R, v, &b, line)) return NULL;
            return jv_string_ref(R, b.p, b.len, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a number", name), NULL;
    }
    if (jv_is_object(v)) {
        if (IS("items")) return object_items(R, v, line);
        if (IS("length")) return jv_number(R, (double)v->u.obj.n, true, line);
        if (jinja_is_one_of(name, strlen(name), object_methods)) return call_object_method(R, v, name, NULL, 0, line);
        return jinja_fail(R, line, "unknown filter '%s' for a dict", name), NULL;
    }
    if (v->type == JV_BOOL) {
        if (IS("bool")) return v;
        if (IS("int")) return jv_number(R, v->u.b ? 1 : 0, true, line);
        if (IS("float")) return jv_number(R, v->u.b ? 1 : 0, false, line);
        if (IS("string")) return str_lit(R, v->u.b ? "true" : "false", line);
        return jinja_fail(R, line, "unknown filter '%s' for a boolean", name), NULL;
    }
    return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
#undef IS
}

static jv *filter_select(jinja_render *R, jv *v, const jinja_node *call, bool select, jinja_env *env, int line) {
    const char *name = select ? "selectattr" : "rejectattr";
    for (size_t i = 0; i < v->u.arr.n; i++)
        if (!jv_is_container(v->u.arr.v[i]))
            return jinja_fail(R, line, "'%s' can only be applied to a list of dicts", name), NULL;
    for (size_t i = 0; i < call->n; i++)
        if (call->list[i]->kind != JN_STR)
            return jinja_fail(R, line, "the arguments of '%s' must be string literals", name), NULL;
    jv *args[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < call->n && i < 3; i++)
        if (!(args[i] = jinja_eval_expr(R, call->list[i], env))) return NULL;
    if (!args[0]) return jinja_fail(R, line, "'%s' needs an attribute name", name), NULL;
    jv_list out = {0};
    for (size_t i = 0; i < v->u.arr.n; i++) {
        jv *item = v->u.arr.v[i];
        jv *a = jv_object_get(item, args[0]->u.str.s, args[0]->u.str.len);
        bool res = false;
        if (a) {
            if (args[1]) {
                char test[64];
                snprintf(test, sizeof test, "%.*s", (int)args[1]->u.str.len, args[1]->u.str.s);
                if (!jinja_builtin_test(R, test, a, args[2], &res, line)) return NULL;
            } else {
                res = jv_truthy(a);
            }
        }
        if ((select ? res : !res) && !jv_list_push(R, &out, item, line)) return NULL;
    }
    return jv_list_array(R, &out, line);
}

static jv *filter_with_args(jinja_render *R, jv *v, const jinja_node *call, jinja_env *env, int line) {
    if (call->a->kind != JN_IDENT) return jinja_fail(R, line, "unsupported filter expression"), NULL;
    const char *name = call->a->str;
#define IS(s) (!strcmp(name, s))
    jv_list pos = {0};
    jv *kw = NULL;
    /* selectattr/rejectattr evaluate their (literal) arguments themselves */
    if (!(jv_is_array(v) && (IS("selectattr") || IS("rejectattr"))) &&
        !jinja_eval_arguments(R, call->list, call->n, env, &pos, &kw, line))
        return NULL;
    jv *a0 = pos.n > 0 ? pos.v[0] : NULL, *a1 = pos.n > 1 ? pos.v[1] : NULL, *a2 = pos.n > 2 ? pos.v[2] : NULL;
    if (IS("tojson")) {
        jv_json_opts o;
        if (!json_opts_from_kwargs(R, kw, &o, line)) return NULL;
        return to_json_value(R, v, &o, line);
    }
    if (IS("join")) {
        jv *sep = a0 ? a0 : kwarg(kw, "separator");
        if (!sep) sep = str_lit(R, "", line);
        if (!sep) return NULL;
        if (v->type != JV_STRING && !jv_is_array(v))
            return jinja_fail(R, line, "cannot apply filter 'join' to %s", jv_type_name(v)), NULL;
        if (sep->type != JV_STRING) return jinja_fail(R, line, "join: separator must be a string"), NULL;
        jinja_buf b;
        jinja_buf_init(&b, &R->arena, R->max_output);
        if (v->type == JV_STRING) {
            const char *p = v->u.str.s;
            size_t n = v->u.str.len;
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t k = jinja_utf8_decode(p, n, i, &cp);
                if ((i && !jinja_buf_append(&b, sep->u.str.s, sep->u.str.len)) || !jinja_buf_append(&b, p + i, k))
                    return nomem(R, line), NULL;
                i += k;
            }
        } else if (!jv_write_join(R, v, sep->u.str.s, sep->u.str.len, &b, line)) {
            return NULL;
        }
        return jv_string_ref(R, b.p ? b.p : "", b.len, line);
    }
    if (IS("int") || IS("float")) {
        bool want_int = IS("int");
        jv *def = a0 ? a0 : kwarg(kw, "default");
        if (!def && !(def = jv_number(R, 0, want_int, line))) return NULL;
        if (v->type == JV_STRING) {
            double x = want_int ? jv_parse_int(v->u.str.s, v->u.str.len) : jv_parse_float(v->u.str.s, v->u.str.len);
            return isnan(x) ? def : jv_number(R, x, want_int, line);
        }
        if (jv_is_number(v)) return v;
        if (v->type == JV_BOOL) return jv_number(R, v->u.b ? 1 : 0, want_int, line);
        return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
    }
    if (IS("default")) {
        jv *def = a0, *boolean = a1 ? a1 : kwarg(kw, "boolean");
        if (!def && !(def = str_lit(R, "", line))) return NULL;
        if (boolean && boolean->type != JV_BOOL)
            return jinja_fail(R, line, "default: boolean flag must be a boolean"), NULL;
        if (v->type == JV_UNDEFINED || (boolean && boolean->u.b && !jv_truthy(v))) return def;
        return v;
    }
    if (jv_is_array(v)) {
        if (IS("sort")) {
            jv *reverse = a0 ? a0 : kwarg(kw, "reverse"), *cs = a1 ? a1 : kwarg(kw, "case_sensitive"),
               *attr = a2 ? a2 : kwarg(kw, "attribute");
            if (reverse && reverse->type != JV_BOOL) return jinja_fail(R, line, "sort: reverse must be a boolean"), NULL;
            if (cs && cs->type != JV_BOOL) return jinja_fail(R, line, "sort: case_sensitive must be a boolean"), NULL;
            if (attr && attr->type != JV_STRING && attr->type != JV_INT && attr->type != JV_NULL)
                return jinja_fail(R, line, "sort: attribute must be a string, an integer or none"), NULL;
            sort_ctx c = {.reverse = reverse && reverse->u.b, .case_sensitive = cs && cs->u.b,
                          .attribute = attr ? attr : JV_NULLV};
            return sort_array(R, v, &c, line);
        }
        if (IS("selectattr") || IS("rejectattr")) return filter_select(R, v, call, IS("selectattr"), env, line);
        if (IS("map")) {
            jv *attr = kwarg(kw, "attribute");
            if (!attr) return jinja_fail(R, line, "map: only map(attribute=...) is supported"), NULL;
            if (attr->type != JV_STRING) return jinja_fail(R, line, "map: attribute must be a string"), NULL;
            jv *def = kwarg(kw, "default");
            jv *out = jv_array(R, JV_ARRAY, v->u.arr.n, line);
            if (!out) return NULL;
            for (size_t i = 0; i < v->u.arr.n; i++) {
                jv *item = v->u.arr.v[i];
                if (!jv_is_container(item))
                    return jinja_fail(R, line, "map: items must be dicts, got %s", jv_type_name(item)), NULL;
                jv *x = attribute_path(item, attr->u.str.s, attr->u.str.len);
                out->u.arr.v[i] = x->type == JV_UNDEFINED && def ? def : x;
            }
            return out;
        }
        return jinja_fail(R, line, "unknown filter '%s' for a list", name), NULL;
    }
    if (v->type == JV_STRING) {
        if (IS("indent")) {
            jv *width = a0 ? a0 : kwarg(kw, "width"), *first = a1 ? a1 : kwarg(kw, "first"),
               *blank = a2 ? a2 : kwarg(kw, "blank");
            if (width && width->type != JV_INT) return jinja_fail(R, line, "indent: width must be an integer"), NULL;
            return indent_lines(R, v, width ? width->u.num : 4, first && js_truthy(first), blank && js_truthy(blank),
                                line);
        }
        if (IS("replace")) {
            jv *kwv = kw ? kw : jv_object(R, JV_KWARGS, 0, line);
            if (!kwv || !jv_list_push(R, &pos, kwv, line)) return NULL;
            return call_string_method(R, v, "replace", pos.v, pos.n, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a string", name), NULL;
    }
    if (jv_is_object(v)) {
        if (jinja_is_one_of(name, strlen(name), object_methods)) {
            if (kw && kw->u.obj.n && !jv_list_push(R, &pos, kw, line)) return NULL;
            return call_object_method(R, v, name, pos.v, pos.n, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a dict", name), NULL;
    }
    return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
#undef IS
}

jv *jinja_builtin_filter(jinja_render *R, jv *operand, const jinja_node *filter, jinja_env *env, int line) {
    if (filter->kind == JN_IDENT) return filter_by_name(R, operand, filter->str, env, line);
    if (filter->kind == JN_CALL) return filter_with_args(R, operand, filter, env, line);
    return jinja_fail(R, line, "unsupported filter expression"), NULL;
}

/* ---- functions ------------------------------------------------------------ */

static const char *const months_short[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const months_long[] = {"January", "February", "March",     "April",   "May",      "June",
                                          "July",    "August",   "September", "October", "November", "December"};

/* The reference's strftime: %Y %m %d %b %B %H %M %% in local time; anything
 * else is left as written. */
static jv *strftime_now(jinja_render *R, const jv *fmt, int line) {
    time_t t = (time_t)R->now;
    struct tm tm;
    if (!localtime_r(&t, &tm)) return jinja_fail(R, line, "strftime_now: cannot read the clock"), NULL;
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    const char *p = fmt->u.str.s;
    size_t n = fmt->u.str.len;
    for (size_t i = 0; i < n; i++) {
        char tmp[32];
        const char *s = NULL;
        if (p[i] == '%' && i + 1 < n) {
            switch (p[i + 1]) {
            case 'Y': snprintf(tmp, sizeof tmp, "%d", tm.tm_year + 1900), s = tmp; break;
            case 'm': snprintf(tmp, sizeof tmp, "%02d", tm.tm_mon + 1), s = tmp; break;
            case 'd': snprintf(tmp, sizeof tmp, "%02d", tm.tm_mday), s = tmp; break;
            case 'b': s = months_short[tm.tm_mon]; break;
            case 'B': s = months_long[tm.tm_mon]; break;
            case 'H': snprintf(tmp, sizeof tmp, "%02d", tm.tm_hour), s = tmp; break;
            case 'M': snprintf(tmp, sizeof tmp, "%02d", tm.tm_min), s = tmp; break;
            case '%': s = "%"; break;
            }
        }
        if (s) {
            if (!jinja_buf_append(&b, s, strlen(s))) return nomem(R, line), NULL;
            i++;
        } else if (!jinja_buf_appendc(&b, p[i])) {
            return nomem(R, line), NULL;
        }
    }
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

static jv *fn_range(jinja_render *R, jv **args, size_t n, int line) {
    if (n == 0 || n > 3) return jinja_fail(R, line, "range() takes 1 to 3 arguments"), NULL;
    for (size_t i = 0; i < n; i++)
        if (!jv_is_number(args[i]))
            return jinja_fail(R, line, "range() arguments must be numbers, got %s", jv_type_name(args[i])), NULL;
    double start = 0, stop, step = 1;
    if (n == 1) stop = args[0]->u.num;
    else start = args[0]->u.num, stop = args[1]->u.num;
    if (n == 3) step = args[2]->u.num;
    if (step == 0) return jinja_fail(R, line, "range() step must not be zero"), NULL;
    jv_list out = {0};
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        jv *x = jv_number(R, i, i == floor(i) && isfinite(i), line);
        if (!x || !jv_list_push(R, &out, x, line)) return NULL;
    }
    return jv_list_array(R, &out, line);
}

static bool namespace_entry(jinja_render *R, jv *ns, jv *pair, int line) {
    jv *k = NULL, *v = NULL;
    if (jv_is_array(pair) && pair->u.arr.n == 2) {
        k = pair->u.arr.v[0], v = pair->u.arr.v[1];
    } else if (pair->type == JV_STRING && jinja_utf16_length(pair->u.str.s, pair->u.str.len) == 2) {
        uint32_t cp;
        size_t a = jinja_utf8_decode(pair->u.str.s, pair->u.str.len, 0, &cp);
        if (a < pair->u.str.len) {
            k = jv_string_ref(R, pair->u.str.s, a, line);
            v = jv_string_ref(R, pair->u.str.s + a, pair->u.str.len - a, line);
            if (!k || !v) return false;
        }
    }
    if (!k) return jinja_fail(R, line, "namespace() expected a dict or an iterable of (key, value) pairs");
    if (k->type != JV_STRING) return jinja_fail(R, line, "namespace() keys must be strings");
    return jv_object_set(R, ns, k->u.str.s, k->u.str.len, v, line);
}

static jv *fn_namespace(jinja_render *R, jv **args, size_t n, int line) {
    jv *kw = n > 0 && args[n - 1]->type == JV_KWARGS ? args[--n] : NULL;
    if (n > 1) return jinja_fail(R, line, "namespace() takes at most 1 positional argument, got %zu", n), NULL;
    jv *ns = jv_object(R, JV_NAMESPACE, 4, line);
    if (!ns) return NULL;
    if (n == 1) {
        jv *src = args[0];
        if (jv_is_object(src)) {
            for (size_t i = 0; i < src->u.obj.n; i++) {
                const jv_entry *e = &src->u.obj.e[i];
                if (!jv_object_set(R, ns, e->key, e->klen, e->val, line)) return NULL;
            }
        } else if (jv_is_array(src)) {
            for (size_t i = 0; i < src->u.arr.n; i++)
                if (!namespace_entry(R, ns, src->u.arr.v[i], line)) return NULL;
        } else {
            return jinja_fail(R, line, "namespace(): '%s' object is not iterable", jv_type_name(src)), NULL;
        }
    }
    if (kw)
        for (size_t i = 0; i < kw->u.obj.n; i++)
            if (!jv_object_set(R, ns, kw->u.obj.e[i].key, kw->u.obj.e[i].klen, kw->u.obj.e[i].val, line)) return NULL;
    return ns;
}

static jv *call_string_method(jinja_render *R, jv *self, const char *name, jv **args, size_t n, int line) {
#define IS(s) (!strcmp(name, s))
    if (IS("upper")) return jv_upper(R, self, line);
    if (IS("lower")) return jv_lower(R, self, line);
    if (IS("strip")) return jv_trim(R, self, true, true, line);
    if (IS("lstrip")) return jv_trim(R, self, true, false, line);
    if (IS("rstrip")) return jv_trim(R, self, false, true, line);
    if (IS("title")) return jv_title(R, self, line);
    if (IS("capitalize")) return jv_capitalize(R, self, line);
    if (IS("startswith") || IS("endswith")) {
        bool ends = IS("endswith");
        if (n == 0) return jinja_fail(R, line, "%s() requires an argument", name), NULL;
        jv *p = args[0];
        if (p->type == JV_STRING) return JV_BOOLV(ends ? str_ends(self, p) : str_starts(self, p));
        if (jv_is_array(p)) {
            for (size_t i = 0; i < p->u.arr.n; i++) {
                jv *x = p->u.arr.v[i];
                if (x->type != JV_STRING) return jinja_fail(R, line, "%s(): tuple elements must be strings", name), NULL;
                if (ends ? str_ends(self, x) : str_starts(self, x)) return JV_BOOLV(true);
            }
            return JV_BOOLV(false);
        }
        return jinja_fail(R, line, "%s(): argument must be a string or a tuple of strings", name), NULL;
    }
    if (IS("split")) return str_split(R, self, args, n, line);
    if (IS("replace")) {
        if (n < 2) return jinja_fail(R, line, "replace() requires at least two arguments"), NULL;
        if (args[0]->type != JV_STRING || args[1]->type != JV_STRING)
            return jinja_fail(R, line, "replace(): arguments must be strings"), NULL;
        jv *count = JV_NULLV;
        if (n > 2) {
            if (args[2]->type == JV_KWARGS) {
                jv *c = kwarg(args[2], "count");
                count = c ? c : JV_NULLV;
            } else {
                count = args[2];
            }
        }
        if (count->type != JV_INT && count->type != JV_NULL)
            return jinja_fail(R, line, "replace(): count must be an integer or none"), NULL;
        return str_replace(R, self, args[0], args[1], count, line);
    }
#undef IS
    return jinja_fail(R, line, "unknown string method '%s'", name), NULL;
}

static jv *call_object_method(jinja_render *R, jv *self, const char *name, jv **args, size_t n, int line) {
#define IS(s) (!strcmp(name, s))
    if (IS("get")) {
        if (n == 0 || args[0]->type != JV_STRING)
            return jinja_fail(R, line, "get(): the key must be a string, got %s", n ? jv_type_name(args[0]) : "nothing"),
                   NULL;
        jv *v = jv_object_get(self, args[0]->u.str.s, args[0]->u.str.len);
        if (v) return v;
        return n > 1 ? args[1] : JV_NULLV;
    }
    if (IS("items")) return object_items(R, self, line);
    if (IS("keys") || IS("values")) {
        jv *out = jv_array(R, JV_ARRAY, self->u.obj.n, line);
        if (!out) return NULL;
        for (size_t i = 0; i < self->u.obj.n; i++) {
            const jv_entry *e = &self->u.obj.e[i];
            if (IS("values")) out->u.arr.v[i] = e->val;
            else if (!(out->u.arr.v[i] = jv_string_ref(R, e->key, e->klen, line))) return NULL;
        }
        return out;
    }
    if (IS("dictsort")) {
        jv *kw = NULL;
        jv_list pos = {0};
        for (size_t i = 0; i < n; i++) {
            if (args[i]->type == JV_KWARGS) kw = args[i];
            else if (!jv_list_push(R, &pos, args[i], line)) return NULL;
        }
        jv *cs = pos.n > 0 ? pos.v[0] : kwarg(kw, "case_sensitive"), *by = pos.n > 1 ? pos.v[1] : kwarg(kw, "by"),
           *reverse = pos.n > 2 ? pos.v[2] : kwarg(kw, "reverse");
        if (cs && cs->type != JV_BOOL) return jinja_fail(R, line, "dictsort: case_sensitive must be a boolean"), NULL;
        if (by && !jv_is_string(by, "key") && !jv_is_string(by, "value"))
            return jinja_fail(R, line, "dictsort: by must be 'key' or 'value'"), NULL;
        if (reverse && reverse->type != JV_BOOL) return jinja_fail(R, line, "dictsort: reverse must be a boolean"), NULL;
        jv *items = object_items(R, self, line);
        if (!items) return NULL;
        sort_ctx c = {.case_sensitive = cs && cs->u.b, .reverse = reverse && reverse->u.b,
                      .by_value = by && jv_is_string(by, "value")};
        if (!merge_sort(R, items->u.arr.v, items->u.arr.n, cmp_dictsort, &c, line)) return NULL;
        return items;
    }
#undef IS
    return jinja_fail(R, line, "unknown dict method '%s'", name), NULL;
}

jv *jinja_builtin_method(jinja_render *R, jv *self, const char *name, jv **args, size_t n, int line) {
    if (self->type == JV_STRING) return call_string_method(R, self, name, args, n, line);
    return call_object_method(R, self, name, args, n, line);
}

jv *jinja_builtin_function(jinja_render *R, jv_fn_kind kind, jv **args, size_t n, int line) {
    switch (kind) {
    case JF_RAISE_EXCEPTION: {
        /* new Error(message): the message is String(value), "" when absent */
        jinja_buf b;
        jinja_buf_init(&b, &R->arena, 4096);
        if (n > 0 && args[0]->type != JV_UNDEFINED) {
            if (args[0]->type == JV_NULL) jinja_buf_append(&b, "null", 4);
            else if (!jv_write_js(R, args[0], &b, line)) return NULL;
        }
        jinja_fail(R, line, "raise_exception: %.*s", (int)b.len, b.p ? b.p : "");
        return NULL;
    }
    case JF_RANGE: return fn_range(R, args, n, line);
    case JF_STRFTIME_NOW:
        if (n == 0 || args[0]->type != JV_STRING) return jinja_fail(R, line, "strftime_now() needs a format string"), NULL;
        return strftime_now(R, args[0], line);
    case JF_NAMESPACE: return fn_namespace(R, args, n, line);
    default: return jinja_fail(R, line, "not a built-in function"), NULL;
    }
}

/*
 * jinja_eval.c - the tree-walking interpreter: statements write to a buffer,
 * expressions produce values (jinja_value.c).
 *
 * Semantics follow @huggingface/jinja's Interpreter, including the parts that
 * differ from Python Jinja, because the reference output is what a client of
 * transformers.js gets:
 *   - scopes: a for loop opens one scope for all its iterations; if does not;
 *     a macro body's scope is a child of the *caller's* scope; `set` always
 *     writes to the current scope;
 *   - `{% break %}`/`{% continue %}` drop the output of the unfinished
 *     iteration, and an iteration ended by continue does not count as one (a
 *     loop whose iterations all `continue` renders its else block);
 *   - filters and methods exist per operand type (`"x"|first` is an error);
 *   - `x.y` on undefined/none is undefined, not an error.
 * Every rule was read from the reference's runtime.ts; tests compare against
 * the reference itself.
 *
 * Control flow is a return code (OK, ERROR, BREAK, CONTINUE) threaded through
 * exec_*; the first error is recorded in the render (jinja_fail) and unwinds.
 * Recursion (expressions, statements, macro calls) is counted against
 * max_depth; memory against the arena limit; output against max_output.
 */
#include "base/error.h"
#include "template/jinja_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct jvar {
    const char *name;
    size_t len;
    jv *val;
} jvar;

struct jinja_env {
    jinja_env *parent;
    jvar *v;
    size_t n, cap;
};

typedef enum xres { X_OK, X_ERROR, X_BREAK, X_CONTINUE } xres;

/* ---- errors --------------------------------------------------------------- */

bool jinja_fail(jinja_render *R, int line, const char *fmt, ...) {
    if (R->rc != VLLM_OK) return false;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    R->rc = VLLM_ERR_INVALID;
    if (line > 0) vllm_error(R->rc, "chat template line %d: %s", line, msg);
    else vllm_error(R->rc, "chat template: %s", msg);
    return false;
}

bool jinja_fail_alloc(jinja_render *R, int line) {
    if (R->rc != VLLM_OK) return false;
    if (R->arena.over_limit)
        return jinja_fail(R, line, "rendering exceeds the memory limit (%zu bytes)", R->arena.limit);
    if (R->arena.total < R->arena.limit || !R->arena.limit) {
        /* a buffer refused by its own cap, or malloc failure */
        jinja_fail(R, line, "rendered text exceeds the output limit (%zu bytes) or memory ran out", R->max_output);
        return false;
    }
    return jinja_fail(R, line, "out of memory");
}

bool jinja_enter(jinja_render *R, int line) {
    if (++R->depth > R->max_depth) {
        R->depth--;
        return jinja_fail(R, line, "nesting or recursion deeper than %d levels", R->max_depth);
    }
    return true;
}

static bool nomem(jinja_render *R, int line) { return jinja_fail_alloc(R, line); }

/* ---- scopes --------------------------------------------------------------- */

static jinja_env *env_new(jinja_render *R, jinja_env *parent, int line) {
    jinja_env *e = jinja_arena_alloc(&R->arena, sizeof *e);
    if (!e) return nomem(R, line), NULL;
    memset(e, 0, sizeof *e);
    e->parent = parent;
    return e;
}

static bool env_set(jinja_render *R, jinja_env *e, const char *name, size_t len, jv *val, int line) {
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i].len == len && !memcmp(e->v[i].name, name, len)) {
            e->v[i].val = val;
            return true;
        }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        jvar *v = jinja_arena_alloc(&R->arena, cap * sizeof *v);
        if (!v) return nomem(R, line);
        if (e->n) memcpy(v, e->v, e->n * sizeof *v);
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (jvar){name, len, val};
    return true;
}

static jv *env_own(const jinja_env *e, const char *name, size_t len) {
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i].len == len && !memcmp(e->v[i].name, name, len)) return e->v[i].val;
    return NULL;
}

static jv namespace_fn = {.type = JV_FUNCTION, .u.fn = {.kind = JF_NAMESPACE, .name = "namespace"}};

/* Every reference scope starts with its own `namespace`, so that name resolves
 * in the innermost scope; all others walk outwards. */
static jv *env_lookup(const jinja_env *e, const char *name, size_t len) {
    if (len == 9 && !memcmp(name, "namespace", 9)) {
        jv *v = env_own(e, name, len);
        return v ? v : &namespace_fn;
    }
    for (; e; e = e->parent) {
        jv *v = env_own(e, name, len);
        if (v) return v;
    }
    return NULL;
}

/* ---- small helpers -------------------------------------------------------- */

static bool is_array(const jv *v) { return v->type == JV_ARRAY || v->type == JV_TUPLE; }
static bool is_object(const jv *v) { return v->type == JV_OBJECT || v->type == JV_KWARGS; }
static bool is_container(const jv *v) { return is_object(v) || v->type == JV_NAMESPACE; }
static bool is_number(const jv *v) { return v->type == JV_INT || v->type == JV_FLOAT; }

/* JavaScript truthiness of the wrapped value (objects are always true). */
static bool js_truthy(const jv *v) {
    switch (v->type) {
    case JV_UNDEFINED:
    case JV_NULL: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT:
    case JV_FLOAT: return v->u.num != 0 && !isnan(v->u.num);
    case JV_STRING: return v->u.str.len > 0;
    default: return true;
    }
}

static jv *str_lit(jinja_render *R, const char *s, int line) { return jv_string_ref(R, s, strlen(s), line); }

/* A list of values being collected (arguments, loop items). */
typedef struct vlist {
    jv **v;
    size_t n, cap;
} vlist;

static bool vlist_push(jinja_render *R, vlist *l, jv *x, int line) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv **v = jinja_arena_alloc(&R->arena, cap * sizeof *v);
        if (!v) return nomem(R, line);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

static jv *vlist_array(jinja_render *R, const vlist *l, int line) {
    jv *a = jv_array(R, JV_ARRAY, 0, line);
    if (!a) return NULL;
    a->u.arr.v = l->v, a->u.arr.n = l->n;
    return a;
}

static jv *number(jinja_render *R, double x, bool is_int, int line) { return jv_number(R, x, is_int, line); }

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

/* ---- forward declarations ------------------------------------------------- */

static jv *eval(jinja_render *R, const jinja_node *nd, jinja_env *env);
static xres exec_block(jinja_render *R, jinja_node *const *list, size_t n, jinja_env *env, jinja_buf *out);
static jv *call_function(jinja_render *R, jv *fn, jv **args, size_t n, jinja_env *env, int line);
static jv *apply_filter(jinja_render *R, jv *operand, const jinja_node *filter, jinja_env *env, int line);
static bool run_test(jinja_render *R, const char *name, const jv *a, const jv *b, bool *res, int line);

/* Renders a block into a fresh string value; break/continue cannot leave it. */
static jv *render_block_value(jinja_render *R, jinja_node *const *list, size_t n, jinja_env *env, int line) {
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    xres r = exec_block(R, list, n, env, &b);
    if (r == X_ERROR) return NULL;
    if (r != X_OK) {
        jinja_fail(R, line, "{%% %s %%} outside of a for loop", r == X_BREAK ? "break" : "continue");
        return NULL;
    }
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

/* ---- arguments ------------------------------------------------------------ */

/* Evaluates call arguments: positional ones (with *spread) first, then keyword
 * ones (with **spread) into a KWARGS object (NULL when there are none). */
static bool eval_arguments(jinja_render *R, jinja_node *const *args, size_t n, jinja_env *env, vlist *pos,
                           jv **kwargs, int line) {
    *kwargs = NULL;
    for (size_t i = 0; i < n; i++) {
        const jinja_node *a = args[i];
        if (a->kind == JN_KWARG || a->kind == JN_KWSPREAD) continue;
        if (a->kind == JN_SPREAD) {
            jv *v = eval(R, a->a, env);
            if (!v) return false;
            if (!is_array(v)) return jinja_fail(R, a->line, "cannot unpack non-iterable type %s", jv_type_name(v));
            for (size_t k = 0; k < v->u.arr.n; k++)
                if (!vlist_push(R, pos, v->u.arr.v[k], line)) return false;
            continue;
        }
        jv *v = eval(R, a, env);
        if (!v || !vlist_push(R, pos, v, line)) return false;
    }
    for (size_t i = 0; i < n; i++) {
        const jinja_node *a = args[i];
        if (a->kind != JN_KWARG && a->kind != JN_KWSPREAD) continue;
        if (!*kwargs && !(*kwargs = jv_object(R, JV_KWARGS, 4, line))) return false;
        if (a->kind == JN_KWARG) {
            jv *v = eval(R, a->a, env);
            if (!v) return false;
            if (jv_object_get(*kwargs, a->str, a->len))
                return jinja_fail(R, a->line, "got multiple values for keyword argument '%s'", a->str);
            if (!jv_object_set(R, *kwargs, a->str, a->len, v, line)) return false;
        } else {
            jv *v = eval(R, a->a, env);
            if (!v) return false;
            if (!is_object(v)) return jinja_fail(R, a->line, "argument after ** must be a mapping, not %s", jv_type_name(v));
            for (size_t k = 0; k < v->u.obj.n; k++) {
                const jv_entry *e = &v->u.obj.e[k];
                if (jv_object_get(*kwargs, e->key, e->klen))
                    return jinja_fail(R, a->line, "got multiple values for keyword argument '%.*s'", (int)e->klen, e->key);
                if (!jv_object_set(R, *kwargs, e->key, e->klen, e->val, line)) return false;
            }
        }
    }
    return true;
}

/* kwargs.get(name) or NULL */
static jv *kwarg(const jv *kwargs, const char *name) {
    return kwargs ? jv_object_get(kwargs, name, strlen(name)) : NULL;
}

/* ---- strings -------------------------------------------------------------- */

static jv *concat(jinja_render *R, const jv *a, const jv *b, int line) {
    jinja_buf buf;
    jinja_buf_init(&buf, &R->arena, R->max_output);
    if (!jv_write_js(R, a, &buf, line) || !jv_write_js(R, b, &buf, line)) return NULL;
    return jv_string_ref(R, buf.p ? buf.p : "", buf.len, line);
}

static bool bytes_find(const char *h, size_t hn, const char *nd, size_t nn, size_t from, size_t *at) {
    if (nn == 0) {
        *at = from;
        return from <= hn;
    }
    for (size_t i = from; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) {
            *at = i;
            return true;
        }
    return false;
}

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
        while (remaining > 0 && bytes_find(p, n, old->u.str.s, old->u.str.len, i, &at)) {
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
    vlist parts = {0};
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
                if (!part || !vlist_push(R, &parts, part, line)) return NULL;
                break;
            }
            if (!(part = jv_string_ref(R, p + start, i - start, line)) || !vlist_push(R, &parts, part, line))
                return NULL;
            while (i < len && (k = jinja_js_space_at(p, len, i))) i += k;
        }
        return vlist_array(R, &parts, line);
    }
    if (sep->u.str.len == 0) return jinja_fail(R, line, "split(): empty separator"), NULL;
    size_t i = 0, at;
    for (;;) {
        bool found = bytes_find(p, len, sep->u.str.s, sep->u.str.len, i, &at);
        size_t end = found ? at : len;
        jv *part = jv_string_ref(R, p + i, end - i, line);
        if (!part || !vlist_push(R, &parts, part, line)) return NULL;
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
        if (!vlist_push(R, &parts, tail, line)) return NULL;
    }
    return vlist_array(R, &parts, line);
}

/* Byte offset of UTF-16 index i in s, or false when out of range / mid-pair. */
static bool utf16_index(jinja_render *R, const jv *s, double idx, jv **out, int line) {
    double units = (double)jinja_utf16_length(s->u.str.s, s->u.str.len);
    if (idx < 0) idx += units;
    if (idx < 0 || idx >= units) {
        *out = JV_UNDEF;
        return true;
    }
    size_t u = 0, i = 0, n = s->u.str.len;
    while (i < n) {
        uint32_t cp;
        size_t k = jinja_utf8_decode(s->u.str.s, n, i, &cp);
        size_t w = cp >= 0x10000 ? 2 : 1;
        if ((double)u == idx) {
            if (w == 2) break; /* half of a surrogate pair */
            *out = jv_string_ref(R, s->u.str.s + i, k, line);
            return *out != NULL;
        }
        if ((double)(u + 1) == idx && w == 2) break;
        u += w, i += k;
    }
    return jinja_fail(R, line, "indexing a string inside a surrogate pair (character outside the BMP) is not supported");
}

/* ---- member access -------------------------------------------------------- */

static bool is_one_of(const char *s, size_t n, const char *const *names) {
    for (; *names; names++)
        if (strlen(*names) == n && !memcmp(*names, s, n)) return true;
    return false;
}

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
static jv *builtin(jinja_render *R, jv *obj, const char *name, size_t len, int line) {
    if (obj->type == JV_STRING) {
        if (len == 6 && !memcmp(name, "length", 6))
            return number(R, (double)jinja_utf16_length(obj->u.str.s, obj->u.str.len), true, line);
        if (is_one_of(name, len, string_methods)) return method(R, obj, name, len, line);
    } else if (is_array(obj)) {
        if (len == 6 && !memcmp(name, "length", 6)) return number(R, (double)obj->u.arr.n, true, line);
    } else if (is_object(obj)) {
        if (is_one_of(name, len, object_methods)) return method(R, obj, name, len, line);
    }
    return JV_UNDEF;
}

/* Python-style slice of n items with the reference's clamping rules; calls
 * take(i) for each selected index. */
static bool slice_indices(jinja_render *R, double n, const jv *start, const jv *stop, const jv *step,
                          size_t **idx, size_t *count, int line) {
    double st = step->type == JV_INT ? step->u.num : 1;
    int dir = st > 0 ? 1 : st < 0 ? -1 : 0;
    double a, b;
    if (dir >= 0) {
        a = start->type == JV_INT ? start->u.num : 0;
        a = a < 0 ? fmax(n + a, 0) : fmin(a, n);
        b = stop->type == JV_INT ? stop->u.num : n;
        b = b < 0 ? fmax(n + b, 0) : fmin(b, n);
    } else {
        a = start->type == JV_INT ? start->u.num : n - 1;
        a = a < 0 ? fmax(n + a, -1) : fmin(a, n - 1);
        b = stop->type == JV_INT ? stop->u.num : -1;
        b = b < -1 ? fmax(n + b, -1) : fmin(b, n - 1);
    }
    *count = 0;
    if (dir == 0) return true;
    double m = dir > 0 ? ceil((b - a) / st) : ceil((a - b) / -st);
    if (!(m > 0)) return true;
    *idx = jinja_arena_alloc(&R->arena, (size_t)m * sizeof **idx);
    if (!*idx) return nomem(R, line);
    for (double i = a; dir * i < dir * b; i += st) (*idx)[(*count)++] = (size_t)i;
    return true;
}

static jv *eval_slice(jinja_render *R, jv *obj, const jinja_node *sl, jinja_env *env) {
    int line = sl->line;
    if (!is_array(obj) && obj->type != JV_STRING)
        return jinja_fail(R, line, "slice object must be a list or a string, got %s", jv_type_name(obj)), NULL;
    jv *parts[3];
    const jinja_node *nodes[3] = {sl->a, sl->b, sl->c};
    static const char *names[3] = {"start", "stop", "step"};
    for (int i = 0; i < 3; i++) {
        parts[i] = nodes[i] ? eval(R, nodes[i], env) : JV_UNDEF;
        if (!parts[i]) return NULL;
        if (parts[i]->type != JV_INT && parts[i]->type != JV_UNDEFINED)
            return jinja_fail(R, line, "slice %s must be an integer or omitted, got %s", names[i],
                              jv_type_name(parts[i])), NULL;
    }
    size_t *idx = NULL, count = 0;
    if (is_array(obj)) {
        if (!slice_indices(R, (double)obj->u.arr.n, parts[0], parts[1], parts[2], &idx, &count, line)) return NULL;
        jv *out = jv_array(R, JV_ARRAY, count, line);
        if (!out) return NULL;
        for (size_t i = 0; i < count; i++) out->u.arr.v[i] = obj->u.arr.v[idx[i]];
        return out;
    }
    /* strings slice by code point */
    const char *p = obj->u.str.s;
    size_t n = obj->u.str.len, ncp = 0;
    size_t *off = jinja_arena_alloc(&R->arena, (n + 1) * sizeof *off);
    if (!off) return nomem(R, line), NULL;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        off[ncp++] = i;
        i += jinja_utf8_decode(p, n, i, &cp);
    }
    off[ncp] = n;
    if (!slice_indices(R, (double)ncp, parts[0], parts[1], parts[2], &idx, &count, line)) return NULL;
    jinja_buf b;
    jinja_buf_init(&b, &R->arena, R->max_output);
    for (size_t i = 0; i < count; i++)
        if (!jinja_buf_append(&b, p + off[idx[i]], off[idx[i] + 1] - off[idx[i]])) return nomem(R, line), NULL;
    return jv_string_ref(R, b.p ? b.p : "", b.len, line);
}

static jv *eval_member(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    jv *obj = eval(R, nd->a, env), *prop;
    if (!obj) return NULL;
    int line = nd->line;
    if (nd->flag) {
        if (nd->b->kind == JN_SLICE) return eval_slice(R, obj, nd->b, env);
        if (!(prop = eval(R, nd->b, env))) return NULL;
    } else if (nd->b->kind == JN_INT) {
        if (!(prop = number(R, nd->b->num, true, line))) return NULL;
    } else {
        if (!(prop = jv_string_ref(R, nd->b->str, nd->b->len, line))) return NULL;
    }
    if (is_container(obj)) {
        if (prop->type != JV_STRING)
            return jinja_fail(R, line, "cannot access a property of %s with %s (keys are strings)", jv_type_name(obj),
                              jv_type_name(prop)), NULL;
        jv *v = jv_object_get(obj, prop->u.str.s, prop->u.str.len);
        if (v) return v;
        if (obj->type == JV_NAMESPACE) return JV_UNDEF;
        return builtin(R, obj, prop->u.str.s, prop->u.str.len, line);
    }
    if (is_array(obj) || obj->type == JV_STRING) {
        if (prop->type == JV_INT) {
            if (obj->type == JV_STRING) {
                jv *ch;
                return utf16_index(R, obj, prop->u.num, &ch, line) ? ch : NULL;
            }
            double i = prop->u.num, n = (double)obj->u.arr.n;
            if (i < 0) i += n;
            if (i < 0 || i >= n) return JV_UNDEF;
            return obj->u.arr.v[(size_t)i];
        }
        if (prop->type == JV_STRING) return builtin(R, obj, prop->u.str.s, prop->u.str.len, line);
        return jinja_fail(R, line, "cannot index %s with %s", jv_type_name(obj), jv_type_name(prop)), NULL;
    }
    if (prop->type != JV_STRING)
        return jinja_fail(R, line, "cannot index %s with %s", jv_type_name(obj), jv_type_name(prop)), NULL;
    return JV_UNDEF;
}

/* ---- operators ------------------------------------------------------------ */

static jv *eval_binary(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    int line = nd->line;
    jv *l = eval(R, nd->a, env), *r;
    if (!l) return NULL;
    if (nd->op == JOP_AND) return jv_truthy(l) ? eval(R, nd->b, env) : l;
    if (nd->op == JOP_OR) return jv_truthy(l) ? l : eval(R, nd->b, env);
    if (!(r = eval(R, nd->b, env))) return NULL;
    const char *op = jinja_op_str(nd->op);
    if (nd->op == JOP_EQ || nd->op == JOP_NE) {
        bool eq;
        if (!jv_loose_equal(R, l, r, &eq, line)) return NULL;
        return JV_BOOLV(nd->op == JOP_EQ ? eq : !eq);
    }
    if (l->type == JV_UNDEFINED || r->type == JV_UNDEFINED) {
        if (r->type == JV_UNDEFINED && (nd->op == JOP_IN || nd->op == JOP_NOT_IN))
            return JV_BOOLV(nd->op == JOP_NOT_IN);
        return jinja_fail(R, line, "cannot apply \"%s\" to an undefined value (%s %s %s)", op, jv_type_name(l), op,
                          jv_type_name(r)), NULL;
    }
    if (l->type == JV_NULL || r->type == JV_NULL)
        return jinja_fail(R, line, "cannot apply \"%s\" to none (%s %s %s)", op, jv_type_name(l), op,
                          jv_type_name(r)), NULL;
    if (nd->op == JOP_CONCAT) return concat(R, l, r, line);
    bool lnum = is_number(l), rnum = is_number(r);
    if (nd->op == JOP_POW && (lnum || l->type == JV_BOOL) && (rnum || r->type == JV_BOOL)) {
        double a = l->type == JV_BOOL ? l->u.b : l->u.num, b = r->type == JV_BOOL ? r->u.b : r->u.num;
        if (a == 0 && b < 0) return jinja_fail(R, line, "0.0 cannot be raised to a negative power"), NULL;
        double x = (fabs(a) == 1 && isinf(b)) ? NAN : pow(a, b);
        if (!isfinite(x)) return jinja_fail(R, line, "exponentiation result is not a finite real number"), NULL;
        return number(R, x, !(l->type == JV_FLOAT || r->type == JV_FLOAT || b < 0), line);
    }
    if (lnum && rnum) {
        double a = l->u.num, b = r->u.num;
        bool is_int = l->type == JV_INT && r->type == JV_INT;
        switch (nd->op) {
        case JOP_ADD: return number(R, a + b, is_int, line);
        case JOP_SUB: return number(R, a - b, is_int, line);
        case JOP_MUL: return number(R, a * b, is_int, line);
        case JOP_DIV: return number(R, a / b, false, line);
        case JOP_FLOORDIV: return number(R, floor(a / b), is_int, line);
        case JOP_MOD: return number(R, fmod(a, b), is_int, line);
        case JOP_LT: return JV_BOOLV(a < b);
        case JOP_GT: return JV_BOOLV(a > b);
        case JOP_GE: return JV_BOOLV(a >= b);
        case JOP_LE: return JV_BOOLV(a <= b);
        default: break;
        }
    } else if (is_array(l) && is_array(r)) {
        if (nd->op == JOP_ADD) {
            jv *out = jv_array(R, JV_ARRAY, l->u.arr.n + r->u.arr.n, line);
            if (!out) return NULL;
            for (size_t i = 0; i < l->u.arr.n; i++) out->u.arr.v[i] = l->u.arr.v[i];
            for (size_t i = 0; i < r->u.arr.n; i++) out->u.arr.v[l->u.arr.n + i] = r->u.arr.v[i];
            return out;
        }
    } else if (is_array(r)) {
        if (nd->op == JOP_IN || nd->op == JOP_NOT_IN) {
            bool member = false;
            for (size_t i = 0; i < r->u.arr.n && !member; i++) member = jv_strict_equal(r->u.arr.v[i], l);
            return JV_BOOLV(nd->op == JOP_IN ? member : !member);
        }
    }
    if ((l->type == JV_STRING || r->type == JV_STRING) && nd->op == JOP_ADD) return concat(R, l, r, line);
    if (l->type == JV_STRING && r->type == JV_STRING && (nd->op == JOP_IN || nd->op == JOP_NOT_IN)) {
        size_t at;
        bool found = bytes_find(r->u.str.s, r->u.str.len, l->u.str.s, l->u.str.len, 0, &at);
        return JV_BOOLV(nd->op == JOP_IN ? found : !found);
    }
    if (l->type == JV_STRING && is_object(r) && (nd->op == JOP_IN || nd->op == JOP_NOT_IN)) {
        bool has = jv_object_get(r, l->u.str.s, l->u.str.len) != NULL;
        return JV_BOOLV(nd->op == JOP_IN ? has : !has);
    }
    return jinja_fail(R, line, "unsupported operator \"%s\" between %s and %s", op, jv_type_name(l), jv_type_name(r)),
           NULL;
}

static jv *eval_unary(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    jv *v = eval(R, nd->a, env);
    if (!v) return NULL;
    if (nd->op == JOP_NOT) return JV_BOOLV(!jv_truthy(v));
    double sign = nd->op == JOP_NEG ? -1 : 1;
    if (is_number(v)) return number(R, sign * v->u.num, v->type == JV_INT, nd->line);
    if (v->type == JV_BOOL) return number(R, sign * (v->u.b ? 1 : 0), true, nd->line);
    return jinja_fail(R, nd->line, "unary \"%s\" needs a number, got %s", jinja_op_str(nd->op), jv_type_name(v)), NULL;
}

/* ---- tests ---------------------------------------------------------------- */

static bool run_test(jinja_render *R, const char *name, const jv *a, const jv *b, bool *res, int line) {
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
    else if (IS("number")) *res = is_number(a);
    else if (IS("integer")) *res = a->type == JV_INT;
    else if (IS("iterable")) *res = a->type == JV_ARRAY || a->type == JV_STRING;
    else if (IS("mapping")) *res = is_object(a);
    else if (IS("sequence")) *res = is_array(a) || is_object(a) || a->type == JV_STRING;
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
        if (sort->u.b)
            return jinja_fail(R, line, "tojson(sort_keys=true) is not supported (the reference sorts by locale)");
    }
    if (seps && seps->type != JV_NULL) {
        if (!is_array(seps) || seps->u.arr.n != 2 || seps->u.arr.v[0]->type != JV_STRING ||
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
        if (is_container(v)) {
            jv *x = jv_object_get(v, path + i, j - i);
            v = x ? x : JV_UNDEF;
        } else if (is_array(v)) {
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

static jv *filter_by_name(jinja_render *R, jv *v, const char *name, jinja_env *env, int line) {
#define IS(s) (!strcmp(name, s))
    (void)env;
    if (IS("safe")) return v;
    if (IS("tojson")) {
        jv_json_opts o = {.undefined_is_null = true};
        return to_json_value(R, v, &o, line);
    }
    if (is_array(v)) {
        size_t n = v->u.arr.n;
        if (IS("list")) return v;
        if (IS("first") || IS("last")) {
            if (!n) return jinja_fail(R, line, "filter '%s' on an empty list", name), NULL;
            return v->u.arr.v[IS("first") ? 0 : n - 1];
        }
        if (IS("length")) return number(R, (double)n, true, line);
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
            vlist out = {0};
            for (size_t i = 0; i < n; i++) {
                jv *x = v->u.arr.v[i];
                bool seen = false;
                for (size_t k = 0; k < out.n && !seen; k++)
                    seen = jv_strict_equal(out.v[k], x) ||
                           (is_number(x) && is_number(out.v[k]) && isnan(x->u.num) && isnan(out.v[k]->u.num));
                if (!seen && !vlist_push(R, &out, x, line)) return NULL;
            }
            return vlist_array(R, &out, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a list", name), NULL;
    }
    if (v->type == JV_STRING) {
        if (IS("length")) return number(R, (double)jinja_utf16_length(v->u.str.s, v->u.str.len), true, line);
        if (IS("upper")) return jv_upper(R, v, line);
        if (IS("lower")) return jv_lower(R, v, line);
        if (IS("title")) return jv_title(R, v, line);
        if (IS("capitalize")) return jv_capitalize(R, v, line);
        if (IS("trim")) return jv_trim(R, v, true, true, line);
        if (IS("indent")) return indent_lines(R, v, 4, false, false, line);
        if (IS("join") || IS("string")) return v;
        if (IS("int")) {
            double x = jv_parse_int(v->u.str.s, v->u.str.len);
            return number(R, isnan(x) ? 0 : x, true, line);
        }
        if (IS("float")) {
            double x = jv_parse_float(v->u.str.s, v->u.str.len);
            return number(R, isnan(x) ? 0 : x, false, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a string", name), NULL;
    }
    if (is_number(v)) {
        if (IS("abs")) return number(R, fabs(v->u.num), v->type == JV_INT, line);
        if (IS("int")) return number(R, floor(v->u.num), true, line);
        if (IS("float")) return number(R, v->u.num, false, line);
        if (IS("string")) {
            jinja_buf b;
            jinja_buf_init(&b, &R->arena, R->max_output);
            if (!jv_write_string(R, v, &b, line)) return NULL;
            return jv_string_ref(R, b.p, b.len, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a number", name), NULL;
    }
    if (is_object(v)) {
        if (IS("items")) return object_items(R, v, line);
        if (IS("length")) return number(R, (double)v->u.obj.n, true, line);
        if (is_one_of(name, strlen(name), object_methods)) return call_object_method(R, v, name, NULL, 0, line);
        return jinja_fail(R, line, "unknown filter '%s' for a dict", name), NULL;
    }
    if (v->type == JV_BOOL) {
        if (IS("bool")) return v;
        if (IS("int")) return number(R, v->u.b ? 1 : 0, true, line);
        if (IS("float")) return number(R, v->u.b ? 1 : 0, false, line);
        if (IS("string")) return str_lit(R, v->u.b ? "true" : "false", line);
        return jinja_fail(R, line, "unknown filter '%s' for a boolean", name), NULL;
    }
    return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
#undef IS
}

static jv *filter_select(jinja_render *R, jv *v, const jinja_node *call, bool select, jinja_env *env, int line) {
    const char *name = select ? "selectattr" : "rejectattr";
    for (size_t i = 0; i < v->u.arr.n; i++)
        if (!is_container(v->u.arr.v[i])) return jinja_fail(R, line, "'%s' can only be applied to a list of dicts", name), NULL;
    for (size_t i = 0; i < call->n; i++)
        if (call->list[i]->kind != JN_STR)
            return jinja_fail(R, line, "the arguments of '%s' must be string literals", name), NULL;
    jv *args[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < call->n && i < 3; i++)
        if (!(args[i] = eval(R, call->list[i], env))) return NULL;
    if (!args[0]) return jinja_fail(R, line, "'%s' needs an attribute name", name), NULL;
    vlist out = {0};
    for (size_t i = 0; i < v->u.arr.n; i++) {
        jv *item = v->u.arr.v[i];
        jv *a = jv_object_get(item, args[0]->u.str.s, args[0]->u.str.len);
        bool res = false;
        if (a) {
            if (args[1]) {
                char test[64];
                snprintf(test, sizeof test, "%.*s", (int)args[1]->u.str.len, args[1]->u.str.s);
                if (!run_test(R, test, a, args[2], &res, line)) return NULL;
            } else {
                res = jv_truthy(a);
            }
        }
        if ((select ? res : !res) && !vlist_push(R, &out, item, line)) return NULL;
    }
    return vlist_array(R, &out, line);
}

static jv *filter_with_args(jinja_render *R, jv *v, const jinja_node *call, jinja_env *env, int line) {
    if (call->a->kind != JN_IDENT) return jinja_fail(R, line, "unsupported filter expression"), NULL;
    const char *name = call->a->str;
#define IS(s) (!strcmp(name, s))
    vlist pos = {0};
    jv *kw = NULL;
    /* selectattr/rejectattr evaluate their (literal) arguments themselves */
    if (!(is_array(v) && (IS("selectattr") || IS("rejectattr"))) &&
        !eval_arguments(R, call->list, call->n, env, &pos, &kw, line))
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
        if (v->type != JV_STRING && !is_array(v))
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
        if (!def && !(def = number(R, 0, want_int, line))) return NULL;
        if (v->type == JV_STRING) {
            double x = want_int ? jv_parse_int(v->u.str.s, v->u.str.len) : jv_parse_float(v->u.str.s, v->u.str.len);
            return isnan(x) ? def : number(R, x, want_int, line);
        }
        if (is_number(v)) return v;
        if (v->type == JV_BOOL) return number(R, v->u.b ? 1 : 0, want_int, line);
        return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
    }
    if (IS("default")) {
        jv *def = a0, *boolean = a1 ? a1 : kwarg(kw, "boolean");
        if (!def && !(def = str_lit(R, "", line))) return NULL;
        if (boolean && boolean->type != JV_BOOL) return jinja_fail(R, line, "default: boolean flag must be a boolean"), NULL;
        if (v->type == JV_UNDEFINED || (boolean && boolean->u.b && !jv_truthy(v))) return def;
        return v;
    }
    if (is_array(v)) {
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
                if (!is_container(item)) return jinja_fail(R, line, "map: items must be dicts, got %s", jv_type_name(item)), NULL;
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
            jv *m = method(R, v, "replace", 7, line);
            if (!m) return NULL;
            jv *kwv = kw ? kw : jv_object(R, JV_KWARGS, 0, line);
            if (!kwv || !vlist_push(R, &pos, kwv, line)) return NULL;
            return call_function(R, m, pos.v, pos.n, env, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a string", name), NULL;
    }
    if (is_object(v)) {
        if (is_one_of(name, strlen(name), object_methods)) {
            if (kw && kw->u.obj.n && !vlist_push(R, &pos, kw, line)) return NULL;
            return call_object_method(R, v, name, pos.v, pos.n, line);
        }
        return jinja_fail(R, line, "unknown filter '%s' for a dict", name), NULL;
    }
    return jinja_fail(R, line, "cannot apply filter '%s' to %s", name, jv_type_name(v)), NULL;
#undef IS
}

static jv *apply_filter(jinja_render *R, jv *operand, const jinja_node *filter, jinja_env *env, int line) {
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
        if (!is_number(args[i])) return jinja_fail(R, line, "range() arguments must be numbers, got %s", jv_type_name(args[i])), NULL;
    double start = 0, stop, step = 1;
    if (n == 1) stop = args[0]->u.num;
    else start = args[0]->u.num, stop = args[1]->u.num;
    if (n == 3) step = args[2]->u.num;
    if (step == 0) return jinja_fail(R, line, "range() step must not be zero"), NULL;
    vlist out = {0};
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        jv *x = number(R, i, i == floor(i) && isfinite(i), line);
        if (!x || !vlist_push(R, &out, x, line)) return NULL;
    }
    return vlist_array(R, &out, line);
}

static bool namespace_entry(jinja_render *R, jv *ns, jv *pair, int line) {
    jv *k = NULL, *v = NULL;
    if (is_array(pair) && pair->u.arr.n == 2) {
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
        if (is_object(src)) {
            for (size_t i = 0; i < src->u.obj.n; i++)
                if (!jv_object_set(R, ns, src->u.obj.e[i].key, src->u.obj.e[i].klen, src->u.obj.e[i].val, line)) return NULL;
        } else if (is_array(src)) {
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

/* Binds macro (or caller) parameters in scope as the reference does: every
 * parameter first (positional, then by keyword, else undefined), then the
 * defaults of the unbound ones, evaluated in the new scope. */
static bool bind_arguments(jinja_render *R, const char *display, jinja_node *const *params, size_t np, int special,
                           jv **args, size_t n, jinja_env *scope, int line) {
    jv *kw = n > 0 && args[n - 1]->type == JV_KWARGS ? args[--n] : NULL;
    size_t nkw = kw ? kw->u.obj.n : 0;
    bool *used = jinja_arena_alloc(&R->arena, (nkw + 1) * sizeof *used);
    size_t *pending = jinja_arena_alloc(&R->arena, (np + 1) * sizeof *pending), npending = 0;
    if (!used || !pending) return nomem(R, line);
    memset(used, 0, (nkw + 1) * sizeof *used);
    for (size_t i = 0; i < np; i++) {
        const jinja_node *p = params[i];
        jv *v = i < n ? args[i] : NULL;
        for (size_t k = 0; !v && k < nkw; k++)
            if (!used[k] && kw->u.obj.e[k].klen == p->len && !memcmp(kw->u.obj.e[k].key, p->str, p->len)) {
                v = kw->u.obj.e[k].val;
                used[k] = true;
            }
        if (!v && p->kind == JN_KWARG) pending[npending++] = i;
        if (!env_set(R, scope, p->str, p->len, v ? v : JV_UNDEF, line)) return false;
    }
    size_t unused = 0, first_unused = 0;
    for (size_t k = nkw; k-- > 0;)
        if (!used[k]) unused++, first_unused = k;
    if (special & JINJA_USES_KWARGS) {
        jv *rest = jv_object(R, JV_OBJECT, unused, line);
        if (!rest) return false;
        for (size_t k = 0; k < nkw; k++)
            if (!used[k] && !jv_object_set(R, rest, kw->u.obj.e[k].key, kw->u.obj.e[k].klen, kw->u.obj.e[k].val, line))
                return false;
        if (!env_set(R, scope, "kwargs", 6, rest, line)) return false;
    } else if (unused) {
        return jinja_fail(R, line, "macro %s takes no keyword argument '%.*s'", display,
                          (int)kw->u.obj.e[first_unused].klen, kw->u.obj.e[first_unused].key);
    }
    if (special & JINJA_USES_VARARGS) {
        jv *rest = jv_array(R, JV_ARRAY, n > np ? n - np : 0, line);
        if (!rest) return false;
        for (size_t i = np; i < n; i++) rest->u.arr.v[i - np] = args[i];
        if (!env_set(R, scope, "varargs", 7, rest, line)) return false;
    } else if (n > np) {
        return jinja_fail(R, line, "macro %s takes not more than %zu argument(s)", display, np);
    }
    for (size_t j = 0; j < npending; j++) {
        const jinja_node *p = params[pending[j]];
        jv *d = eval(R, p->a, scope);
        if (!d || !env_set(R, scope, p->str, p->len, d, line)) return false;
    }
    return true;
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
        if (is_array(p)) {
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
        vlist pos = {0};
        for (size_t i = 0; i < n; i++) {
            if (args[i]->type == JV_KWARGS) kw = args[i];
            else if (!vlist_push(R, &pos, args[i], line)) return NULL;
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

static jv *call_function(jinja_render *R, jv *fn, jv **args, size_t n, jinja_env *env, int line) {
    if (!jinja_enter(R, line)) return NULL;
    jv *result = NULL;
    switch (fn->u.fn.kind) {
    case JF_RAISE_EXCEPTION: {
        jinja_buf b;
        jinja_buf_init(&b, &R->arena, 4096);
        if (n > 0 && args[0]->type != JV_UNDEFINED) {
            if (args[0]->type == JV_NULL) jinja_buf_append(&b, "null", 4);
            else if (!jv_write_js(R, args[0], &b, line)) break;
        }
        jinja_fail(R, line, "raise_exception: %.*s", (int)b.len, b.p ? b.p : "");
        break;
    }
    case JF_RANGE: result = fn_range(R, args, n, line); break;
    case JF_STRFTIME_NOW:
        if (n == 0 || args[0]->type != JV_STRING) {
            jinja_fail(R, line, "strftime_now() needs a format string");
            break;
        }
        result = strftime_now(R, args[0], line);
        break;
    case JF_NAMESPACE: result = fn_namespace(R, args, n, line); break;
    case JF_MACRO: {
        const jinja_node *m = fn->u.fn.node;
        char display[80];
        snprintf(display, sizeof display, "'%s'", m->str);
        jinja_env *scope = env_new(R, env, line);
        if (!scope || !bind_arguments(R, display, m->list, m->n, m->flag, args, n, scope, line)) break;
        result = render_block_value(R, m->list2, m->n2, scope, line);
        break;
    }
    case JF_CALLER: {
        const jinja_node *c = fn->u.fn.node;
        jinja_env *scope = env_new(R, fn->u.fn.env, line);
        if (!scope || !bind_arguments(R, "None", c->list, c->n, c->flag, args, n, scope, line)) break;
        result = render_block_value(R, c->list2, c->n2, scope, line);
        break;
    }
    case JF_METHOD:
        if (fn->u.fn.self->type == JV_STRING) result = call_string_method(R, fn->u.fn.self, fn->u.fn.name, args, n, line);
        else result = call_object_method(R, fn->u.fn.self, fn->u.fn.name, args, n, line);
        break;
    }
    jinja_leave(R);
    return result;
}

/* What the callee of a failed call was, for the message. */
static void describe_callee(const jinja_node *callee, const jv *fn, char *buf, size_t size) {
    if (callee->kind == JN_IDENT)
        snprintf(buf, size, "'%s' is %s, not a function", callee->str,
                 fn->type == JV_UNDEFINED ? "undefined" : jv_type_name(fn));
    else if (callee->kind == JN_MEMBER && !callee->flag && callee->b->kind == JN_IDENT)
        snprintf(buf, size, "'%s' is not a method here (got %s): unsupported method or attribute", callee->b->str,
                 jv_type_name(fn));
    else
        snprintf(buf, size, "cannot call %s", jv_type_name(fn));
}

static jv *eval_call(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    vlist pos = {0};
    jv *kw;
    if (!eval_arguments(R, nd->list, nd->n, env, &pos, &kw, nd->line)) return NULL;
    if (kw && kw->u.obj.n && !vlist_push(R, &pos, kw, nd->line)) return NULL;
    jv *fn = eval(R, nd->a, env);
    if (!fn) return NULL;
    if (fn->type != JV_FUNCTION) {
        char what[200];
        describe_callee(nd->a, fn, what, sizeof what);
        return jinja_fail(R, nd->line, "%s", what), NULL;
    }
    return call_function(R, fn, pos.v, pos.n, env, nd->line);
}

/* ---- expressions ---------------------------------------------------------- */

static jv *eval_inner(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    int line = nd->line;
    switch (nd->kind) {
    case JN_INT: return number(R, nd->num, true, line);
    case JN_FLOAT: return number(R, nd->num, false, line);
    case JN_STR: return jv_string_ref(R, nd->str, nd->len, line);
    case JN_ARRAY:
    case JN_TUPLE: {
        jv *a = jv_array(R, nd->kind == JN_ARRAY ? JV_ARRAY : JV_TUPLE, nd->n, line);
        if (!a) return NULL;
        for (size_t i = 0; i < nd->n; i++)
            if (!(a->u.arr.v[i] = eval(R, nd->list[i], env))) return NULL;
        return a;
    }
    case JN_OBJECT: {
        jv *o = jv_object(R, JV_OBJECT, nd->n, line);
        if (!o) return NULL;
        for (size_t i = 0; i < nd->n; i++) {
            jv *k = eval(R, nd->list[i], env);
            if (!k) return NULL;
            if (k->type != JV_STRING) return jinja_fail(R, line, "dict keys must be strings, got %s", jv_type_name(k)), NULL;
            jv *v = eval(R, nd->list2[i], env);
            if (!v || !jv_object_set(R, o, k->u.str.s, k->u.str.len, v, line)) return NULL;
        }
        return o;
    }
    case JN_IDENT: {
        jv *v = env_lookup(env, nd->str, nd->len);
        return v ? v : JV_UNDEF;
    }
    case JN_MEMBER: return eval_member(R, nd, env);
    case JN_CALL: return eval_call(R, nd, env);
    case JN_UNARY: return eval_unary(R, nd, env);
    case JN_BINARY: return eval_binary(R, nd, env);
    case JN_FILTER: {
        jv *v = eval(R, nd->a, env);
        return v ? apply_filter(R, v, nd->b, env, line) : NULL;
    }
    case JN_TEST: {
        jv *v = eval(R, nd->a, env);
        bool res;
        if (!v || !run_test(R, nd->str, v, NULL, &res, line)) return NULL;
        return JV_BOOLV(nd->flag ? !res : res);
    }
    case JN_SELECT: {
        jv *c = eval(R, nd->b, env);
        if (!c) return NULL;
        return jv_truthy(c) ? eval(R, nd->a, env) : JV_UNDEF;
    }
    case JN_TERNARY: {
        jv *c = eval(R, nd->a, env);
        if (!c) return NULL;
        return eval(R, jv_truthy(c) ? nd->b : nd->c, env);
    }
    case JN_SLICE: return jinja_fail(R, line, "a slice is only allowed inside []"), NULL;
    case JN_KWARG:
    case JN_SPREAD:
    case JN_KWSPREAD: return jinja_fail(R, line, "keyword arguments and unpacking are only allowed in calls"), NULL;
    default: return jinja_fail(R, line, "a statement cannot be used as a value"), NULL;
    }
}

static jv *eval(jinja_render *R, const jinja_node *nd, jinja_env *env) {
    if (!jinja_enter(R, nd->line)) return NULL;
    jv *v = eval_inner(R, nd, env);
    jinja_leave(R);
    return v;
}

/* ---- statements ----------------------------------------------------------- */

static bool assign(jinja_render *R, const jinja_node *target, jv *value, jinja_env *env, int line) {
    if (target->kind == JN_IDENT) return env_set(R, env, target->str, target->len, value, line);
    if (target->kind == JN_TUPLE) {
        if (!is_array(value)) return jinja_fail(R, line, "cannot unpack non-iterable type %s in set", jv_type_name(value));
        if (value->u.arr.n != target->n)
            return jinja_fail(R, line, "too %s items to unpack in set", target->n > value->u.arr.n ? "few" : "many");
        for (size_t i = 0; i < target->n; i++) {
            const jinja_node *t = target->list[i];
            if (t->kind != JN_IDENT) return jinja_fail(R, line, "can only unpack into names in set");
            if (!env_set(R, env, t->str, t->len, value->u.arr.v[i], line)) return false;
        }
        return true;
    }
    if (target->kind == JN_MEMBER) {
        jv *obj = eval(R, target->a, env);
        if (!obj) return false;
        if (obj->type != JV_NAMESPACE)
            return jinja_fail(R, line, "cannot assign an attribute of %s (only of a namespace())", jv_type_name(obj));
        if (target->b->kind != JN_IDENT) return jinja_fail(R, line, "cannot assign to a member with a non-identifier property");
        return jv_object_set(R, obj, target->b->str, target->b->len, value, line);
    }
    return jinja_fail(R, line, "invalid target of set");
}

static bool set_loop_vars(jinja_render *R, const jinja_node *target, jv *item, jinja_env *scope, int line) {
    if (target->kind == JN_IDENT) return env_set(R, scope, target->str, target->len, item, line);
    for (size_t j = 0; j < target->n; j++) {
        if (target->list[j]->kind != JN_IDENT)
            return jinja_fail(R, line, "cannot unpack into a non-identifier");
        if (!env_set(R, scope, target->list[j]->str, target->list[j]->len, item->u.arr.v[j], line)) return false;
    }
    return true;
}

static xres exec_for(jinja_render *R, const jinja_node *nd, jinja_env *env, jinja_buf *out) {
    int line = nd->line;
    jinja_env *scope = env_new(R, env, line);
    if (!scope) return X_ERROR;
    const jinja_node *test = NULL;
    jv *iter;
    if (nd->b->kind == JN_SELECT) {
        iter = eval(R, nd->b->a, scope);
        test = nd->b->b;
    } else {
        iter = eval(R, nd->b, scope);
    }
    if (!iter) return X_ERROR;
    if (is_object(iter)) {
        jv *keys = jv_array(R, JV_ARRAY, iter->u.obj.n, line);
        if (!keys) return X_ERROR;
        for (size_t i = 0; i < iter->u.obj.n; i++)
            if (!(keys->u.arr.v[i] = jv_string_ref(R, iter->u.obj.e[i].key, iter->u.obj.e[i].klen, line))) return X_ERROR;
        iter = keys;
    } else if (!is_array(iter)) {
        jinja_fail(R, line, "cannot loop over %s (expected a list or a dict)", jv_type_name(iter));
        return X_ERROR;
    }
    /* pass 1: unpacking checks and the inline `if` filter */
    vlist items = {0};
    for (size_t i = 0; i < iter->u.arr.n; i++) {
        jv *cur = iter->u.arr.v[i];
        if (nd->a->kind == JN_TUPLE) {
            if (cur->type != JV_ARRAY) {
                jinja_fail(R, line, "cannot unpack non-iterable type %s", jv_type_name(cur));
                return X_ERROR;
            }
            if (cur->u.arr.n != nd->a->n) {
                jinja_fail(R, line, "too %s items to unpack", nd->a->n > cur->u.arr.n ? "few" : "many");
                return X_ERROR;
            }
        }
        if (test) {
            jinja_env *ls = env_new(R, scope, line);
            if (!ls || !set_loop_vars(R, nd->a, cur, ls, line)) return X_ERROR;
            jv *t = eval(R, test, ls);
            if (!t) return X_ERROR;
            if (!jv_truthy(t)) continue;
        }
        if (!vlist_push(R, &items, cur, line)) return X_ERROR;
    }
    /* pass 2: the body, with `loop` */
    bool no_iteration = true;
    size_t n = items.n;
    for (size_t i = 0; i < n; i++) {
        jv *loop = jv_object(R, JV_OBJECT, 9, line);
        if (!loop) return X_ERROR;
        struct {
            const char *k;
            jv *v;
        } f[9] = {
            {"index", number(R, (double)i + 1, true, line)},
            {"index0", number(R, (double)i, true, line)},
            {"revindex", number(R, (double)(n - i), true, line)},
            {"revindex0", number(R, (double)(n - i - 1), true, line)},
            {"first", JV_BOOLV(i == 0)},
            {"last", JV_BOOLV(i == n - 1)},
            {"length", number(R, (double)n, true, line)},
            {"previtem", i > 0 ? items.v[i - 1] : JV_UNDEF},
            {"nextitem", i + 1 < n ? items.v[i + 1] : JV_UNDEF},
        };
        for (int k = 0; k < 9; k++)
            if (!f[k].v || !jv_object_set(R, loop, f[k].k, strlen(f[k].k), f[k].v, line)) return X_ERROR;
        if (!env_set(R, scope, "loop", 4, loop, line) || !set_loop_vars(R, nd->a, items.v[i], scope, line))
            return X_ERROR;
        size_t mark = out->len;
        xres r = exec_block(R, nd->list, nd->n, scope, out);
        if (r == X_ERROR) return X_ERROR;
        if (r == X_BREAK || r == X_CONTINUE) {
            out->len = mark; /* the reference drops the unfinished iteration's text */
            if (out->p) out->p[mark] = 0;
            if (r == X_BREAK) break;
            continue;
        }
        no_iteration = false;
    }
    if (no_iteration) return exec_block(R, nd->list2, nd->n2, scope, out);
    return X_OK;
}

static xres exec_stmt(jinja_render *R, const jinja_node *nd, jinja_env *env, jinja_buf *out) {
    int line = nd->line;
    switch (nd->kind) {
    case JN_STR:
        if (!jinja_buf_append(out, nd->str, nd->len)) return nomem(R, line), X_ERROR;
        return X_OK;
    case JN_IF: {
        jv *t = eval(R, nd->a, env);
        if (!t) return X_ERROR;
        return jv_truthy(t) ? exec_block(R, nd->list, nd->n, env, out) : exec_block(R, nd->list2, nd->n2, env, out);
    }
    case JN_FOR: return exec_for(R, nd, env, out);
    case JN_SET: {
        jv *v;
        if (nd->b) {
            v = eval(R, nd->b, env);
        } else {
            jinja_buf b;
            jinja_buf_init(&b, &R->arena, R->max_output);
            xres r = exec_block(R, nd->list, nd->n, env, &b);
            if (r != X_OK) return r;
            v = jv_string_ref(R, b.p ? b.p : "", b.len, line);
        }
        if (!v || !assign(R, nd->a, v, env, line)) return X_ERROR;
        return X_OK;
    }
    case JN_MACRO: {
        jv *f = jv_function(R, JF_MACRO, line);
        if (!f) return X_ERROR;
        f->u.fn.name = nd->str;
        f->u.fn.node = nd;
        return env_set(R, env, nd->str, nd->len, f, line) ? X_OK : X_ERROR;
    }
    case JN_CALL_BLOCK: {
        const jinja_node *call = nd->a;
        jv *caller = jv_function(R, JF_CALLER, line);
        if (!caller) return X_ERROR;
        caller->u.fn.name = "caller";
        caller->u.fn.node = nd;
        caller->u.fn.env = env;
        vlist pos = {0};
        jv *kw;
        if (!eval_arguments(R, call->list, call->n, env, &pos, &kw, line)) return X_ERROR;
        if (!kw && !(kw = jv_object(R, JV_KWARGS, 0, line))) return X_ERROR;
        if (!vlist_push(R, &pos, kw, line)) return X_ERROR;
        jv *fn = eval(R, call->a, env);
        if (!fn) return X_ERROR;
        if (fn->type != JV_FUNCTION) {
            char what[200];
            describe_callee(call->a, fn, what, sizeof what);
            jinja_fail(R, line, "%s", what);
            return X_ERROR;
        }
        jinja_env *inner = env_new(R, env, line);
        if (!inner || !env_set(R, inner, "caller", 6, caller, line)) return X_ERROR;
        jv *v = call_function(R, fn, pos.v, pos.n, inner, line);
        if (!v) return X_ERROR;
        if (v->type != JV_NULL && v->type != JV_UNDEFINED && !jv_write_string(R, v, out, line)) return X_ERROR;
        return X_OK;
    }
    case JN_FILTER_BLOCK: {
        jinja_buf b;
        jinja_buf_init(&b, &R->arena, R->max_output);
        xres r = exec_block(R, nd->list, nd->n, env, &b);
        if (r != X_OK) return r;
        jv *s = jv_string_ref(R, b.p ? b.p : "", b.len, line);
        jv *v = s ? apply_filter(R, s, nd->a, env, line) : NULL;
        if (!v) return X_ERROR;
        if (v->type != JV_NULL && v->type != JV_UNDEFINED && !jv_write_string(R, v, out, line)) return X_ERROR;
        return X_OK;
    }
    case JN_BREAK: return X_BREAK;
    case JN_CONTINUE: return X_CONTINUE;
    default: {
        jv *v = eval(R, nd, env);
        if (!v) return X_ERROR;
        if (v->type != JV_NULL && v->type != JV_UNDEFINED && !jv_write_string(R, v, out, line)) return X_ERROR;
        return X_OK;
    }
    }
}

static xres exec_block(jinja_render *R, jinja_node *const *list, size_t n, jinja_env *env, jinja_buf *out) {
    for (size_t i = 0; i < n; i++) {
        if (!jinja_enter(R, list[i]->line)) return X_ERROR;
        xres r = exec_stmt(R, list[i], env, out);
        jinja_leave(R);
        if (r != X_OK) {
            if (r == X_BREAK || r == X_CONTINUE) R->loop_line = list[i]->line;
            return r;
        }
    }
    return X_OK;
}

/* ---- entry ---------------------------------------------------------------- */

static const char *const reserved_globals[] = {"false", "true", "none", "True", "False", "None", "raise_exception",
                                               "range", "strftime_now", "namespace", NULL};

vllm_status jinja_eval_program(jinja_render *R, jinja_node *const *body, size_t n, const json_t *context,
                               jinja_buf *out) {
    jinja_env *g = env_new(R, NULL, 0);
    if (!g) return R->rc;
    static jv fn_raise = {.type = JV_FUNCTION, .u.fn = {.kind = JF_RAISE_EXCEPTION, .name = "raise_exception"}};
    static jv fn_range_v = {.type = JV_FUNCTION, .u.fn = {.kind = JF_RANGE, .name = "range"}};
    static jv fn_strftime = {.type = JV_FUNCTION, .u.fn = {.kind = JF_STRFTIME_NOW, .name = "strftime_now"}};
    struct {
        const char *k;
        jv *v;
    } globals[] = {
        {"false", JV_BOOLV(false)}, {"true", JV_BOOLV(true)}, {"none", JV_NULLV},
        {"raise_exception", &fn_raise}, {"range", &fn_range_v}, {"strftime_now", &fn_strftime},
        {"True", JV_BOOLV(true)}, {"False", JV_BOOLV(false)}, {"None", JV_NULLV},
    };
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        if (!env_set(R, g, globals[i].k, strlen(globals[i].k), globals[i].v, 0)) return R->rc;
    if (context) {
        if (!json_is_object(context)) {
            jinja_fail(R, 0, "the render context must be a JSON object");
            return R->rc;
        }
        /* keys in JavaScript order, as Object.entries would give them */
        jv *ctx = jv_from_json(R, context);
        if (!ctx) return R->rc;
        for (size_t i = 0; i < ctx->u.obj.n; i++) {
            const jv_entry *e = &ctx->u.obj.e[i];
            if (is_one_of(e->key, e->klen, reserved_globals)) {
                jinja_fail(R, 0, "context variable '%.*s' is already declared (a built-in name)", (int)e->klen, e->key);
                return R->rc;
            }
            if (!env_set(R, g, e->key, e->klen, e->val, 0)) return R->rc;
        }
    }
    xres r = exec_block(R, body, n, g, out);
    if (r == X_BREAK || r == X_CONTINUE)
        jinja_fail(R, R->loop_line, "{%% %s %%} outside of a for loop", r == X_BREAK ? "break" : "continue");
    return R->rc;
}

/* ---- content-format detection --------------------------------------------- */

static bool is_content_access(const jinja_node *nd) {
    if (!nd || nd->kind != JN_MEMBER) return false;
    const jinja_node *p = nd->b;
    return (!nd->flag && p->kind == JN_IDENT && !strcmp(p->str, "content")) ||
           (nd->flag && p->kind == JN_STR && p->len == 7 && !memcmp(p->str, "content", 7));
}

static bool loops_over_content(const jinja_node *nd) {
    if (!nd) return false;
    if (nd->kind == JN_FOR) {
        const jinja_node *it = nd->b->kind == JN_SELECT ? nd->b->a : nd->b;
        while (it->kind == JN_FILTER) it = it->a; /* message['content'] | selectattr(...) */
        if (is_content_access(it)) return true;
    }
    if (loops_over_content(nd->a) || loops_over_content(nd->b) || loops_over_content(nd->c)) return true;
    for (size_t i = 0; i < nd->n; i++)
        if (loops_over_content(nd->list[i])) return true;
    for (size_t i = 0; i < nd->n2; i++)
        if (loops_over_content(nd->list2[i])) return true;
    return false;
}

bool jinja_eval_iterates_content(jinja_node *const *body, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (loops_over_content(body[i])) return true;
    return false;
}

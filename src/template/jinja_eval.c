/*
 * jinja_eval.c - the tree-walking interpreter: statements write to a buffer,
 * expressions produce values (jinja_value.c); filters, tests, methods and
 * global functions are in jinja_builtins.c.
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
    if (R->arena.malloc_failed) {
        jinja_fail(R, line, "out of memory");
        R->rc = VLLM_ERR_NOMEM;
        return false;
    }
    if (R->arena.over_limit)
        return jinja_fail(R, line, "rendering exceeds the memory limit (%zu bytes)", R->arena.limit);
    /* otherwise a buffer refused to grow past its cap */
    return jinja_fail(R, line, "rendered text exceeds the output limit (%zu bytes)", R->max_output);
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

/* ---- forward declarations ------------------------------------------------- */

static jv *eval(jinja_render *R, const jinja_node *nd, jinja_env *env);
static xres exec_block(jinja_render *R, jinja_node *const *list, size_t n, jinja_env *env, jinja_buf *out);
static jv *call_function(jinja_render *R, jv *fn, jv **args, size_t n, jinja_env *env, int line);

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
bool jinja_eval_arguments(jinja_render *R, jinja_node *const *args, size_t n, jinja_env *env, jv_list *pos,
                           jv **kwargs, int line) {
    *kwargs = NULL;
    for (size_t i = 0; i < n; i++) {
        const jinja_node *a = args[i];
        if (a->kind == JN_KWARG || a->kind == JN_KWSPREAD) continue;
        if (a->kind == JN_SPREAD) {
            jv *v = eval(R, a->a, env);
            if (!v) return false;
            if (!jv_is_array(v)) return jinja_fail(R, a->line, "cannot unpack non-iterable type %s", jv_type_name(v));
            for (size_t k = 0; k < v->u.arr.n; k++)
                if (!jv_list_push(R, pos, v->u.arr.v[k], line)) return false;
            continue;
        }
        jv *v = eval(R, a, env);
        if (!v || !jv_list_push(R, pos, v, line)) return false;
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
            if (!jv_is_object(v))
                return jinja_fail(R, a->line, "argument after ** must be a mapping, not %s", jv_type_name(v));
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

/* ---- strings -------------------------------------------------------------- */

static jv *concat(jinja_render *R, const jv *a, const jv *b, int line) {
    jinja_buf buf;
    jinja_buf_init(&buf, &R->arena, R->max_output);
    if (!jv_write_js(R, a, &buf, line) || !jv_write_js(R, b, &buf, line)) return NULL;
    return jv_string_ref(R, buf.p ? buf.p : "", buf.len, line);
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
    for (double i = a; dir * i < dir * b && (double)*count < m; i += st) (*idx)[(*count)++] = (size_t)i;
    return true;
}

static jv *eval_slice(jinja_render *R, jv *obj, const jinja_node *sl, jinja_env *env) {
    int line = sl->line;
    if (!jv_is_array(obj) && obj->type != JV_STRING)
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
    if (jv_is_array(obj)) {
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
        if (!(prop = jv_number(R, nd->b->num, true, line))) return NULL;
    } else {
        if (!(prop = jv_string_ref(R, nd->b->str, nd->b->len, line))) return NULL;
    }
    if (jv_is_container(obj)) {
        if (prop->type != JV_STRING)
            return jinja_fail(R, line, "cannot access a property of %s with %s (keys are strings)", jv_type_name(obj),
                              jv_type_name(prop)), NULL;
        jv *v = jv_object_get(obj, prop->u.str.s, prop->u.str.len);
        if (v) return v;
        if (obj->type == JV_NAMESPACE) return JV_UNDEF;
        return jinja_builtin_property(R, obj, prop->u.str.s, prop->u.str.len, line);
    }
    if (jv_is_array(obj) || obj->type == JV_STRING) {
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
        if (prop->type == JV_STRING) return jinja_builtin_property(R, obj, prop->u.str.s, prop->u.str.len, line);
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
    bool lnum = jv_is_number(l), rnum = jv_is_number(r);
    if (nd->op == JOP_POW && (lnum || l->type == JV_BOOL) && (rnum || r->type == JV_BOOL)) {
        double a = l->type == JV_BOOL ? l->u.b : l->u.num, b = r->type == JV_BOOL ? r->u.b : r->u.num;
        if (a == 0 && b < 0) return jinja_fail(R, line, "0.0 cannot be raised to a negative power"), NULL;
        double x = (fabs(a) == 1 && isinf(b)) ? NAN : pow(a, b);
        if (!isfinite(x)) return jinja_fail(R, line, "exponentiation result is not a finite real number"), NULL;
        return jv_number(R, x, !(l->type == JV_FLOAT || r->type == JV_FLOAT || b < 0), line);
    }
    if (lnum && rnum) {
        double a = l->u.num, b = r->u.num;
        bool is_int = l->type == JV_INT && r->type == JV_INT;
        switch (nd->op) {
        case JOP_ADD: return jv_number(R, a + b, is_int, line);
        case JOP_SUB: return jv_number(R, a - b, is_int, line);
        case JOP_MUL: return jv_number(R, a * b, is_int, line);
        case JOP_DIV: return jv_number(R, a / b, false, line);
        case JOP_FLOORDIV: return jv_number(R, floor(a / b), is_int, line);
        case JOP_MOD: return jv_number(R, fmod(a, b), is_int, line);
        case JOP_LT: return JV_BOOLV(a < b);
        case JOP_GT: return JV_BOOLV(a > b);
        case JOP_GE: return JV_BOOLV(a >= b);
        case JOP_LE: return JV_BOOLV(a <= b);
        default: break;
        }
    } else if (jv_is_array(l) && jv_is_array(r)) {
        if (nd->op == JOP_ADD) {
            jv *out = jv_array(R, JV_ARRAY, l->u.arr.n + r->u.arr.n, line);
            if (!out) return NULL;
            for (size_t i = 0; i < l->u.arr.n; i++) out->u.arr.v[i] = l->u.arr.v[i];
            for (size_t i = 0; i < r->u.arr.n; i++) out->u.arr.v[l->u.arr.n + i] = r->u.arr.v[i];
            return out;
        }
    } else if (jv_is_array(r)) {
        if (nd->op == JOP_IN || nd->op == JOP_NOT_IN) {
            bool member = false;
            for (size_t i = 0; i < r->u.arr.n && !member; i++) member = jv_strict_equal(r->u.arr.v[i], l);
            return JV_BOOLV(nd->op == JOP_IN ? member : !member);
        }
    }
    if ((l->type == JV_STRING || r->type == JV_STRING) && nd->op == JOP_ADD) return concat(R, l, r, line);
    if (l->type == JV_STRING && r->type == JV_STRING && (nd->op == JOP_IN || nd->op == JOP_NOT_IN)) {
        size_t at;
        bool found = jinja_bytes_find(r->u.str.s, r->u.str.len, l->u.str.s, l->u.str.len, 0, &at);
        return JV_BOOLV(nd->op == JOP_IN ? found : !found);
    }
    if (l->type == JV_STRING && jv_is_object(r) && (nd->op == JOP_IN || nd->op == JOP_NOT_IN)) {
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
    if (jv_is_number(v)) return jv_number(R, sign * v->u.num, v->type == JV_INT, nd->line);
    if (v->type == JV_BOOL) return jv_number(R, sign * (v->u.b ? 1 : 0), true, nd->line);
    return jinja_fail(R, nd->line, "unary \"%s\" needs a number, got %s", jinja_op_str(nd->op), jv_type_name(v)), NULL;
}

/* ---- calls ---------------------------------------------------------------- */

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

static jv *call_function(jinja_render *R, jv *fn, jv **args, size_t n, jinja_env *env, int line) {
    if (!jinja_enter(R, line)) return NULL;
    jv *result = NULL;
    switch (fn->u.fn.kind) {
    case JF_RAISE_EXCEPTION:
    case JF_RANGE:
    case JF_STRFTIME_NOW:
    case JF_NAMESPACE: result = jinja_builtin_function(R, fn->u.fn.kind, args, n, line); break;
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
    case JF_METHOD: result = jinja_builtin_method(R, fn->u.fn.self, fn->u.fn.name, args, n, line); break;
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
    jv_list pos = {0};
    jv *kw;
    if (!jinja_eval_arguments(R, nd->list, nd->n, env, &pos, &kw, nd->line)) return NULL;
    if (kw && kw->u.obj.n && !jv_list_push(R, &pos, kw, nd->line)) return NULL;
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
    case JN_INT: return jv_number(R, nd->num, true, line);
    case JN_FLOAT: return jv_number(R, nd->num, false, line);
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
            if (k->type != JV_STRING)
                return jinja_fail(R, line, "dict keys must be strings, got %s", jv_type_name(k)), NULL;
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
        return v ? jinja_builtin_filter(R, v, nd->b, env, line) : NULL;
    }
    case JN_TEST: {
        jv *v = eval(R, nd->a, env);
        bool res;
        if (!v || !jinja_builtin_test(R, nd->str, v, NULL, &res, line)) return NULL;
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

jv *jinja_eval_expr(jinja_render *R, const jinja_node *nd, jinja_env *env) { return eval(R, nd, env); }

/* ---- statements ----------------------------------------------------------- */

static bool assign(jinja_render *R, const jinja_node *target, jv *value, jinja_env *env, int line) {
    if (target->kind == JN_IDENT) return env_set(R, env, target->str, target->len, value, line);
    if (target->kind == JN_TUPLE) {
        if (!jv_is_array(value))
            return jinja_fail(R, line, "cannot unpack non-iterable type %s in set", jv_type_name(value));
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
        if (target->b->kind != JN_IDENT)
            return jinja_fail(R, line, "cannot assign to a member with a non-identifier property");
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
    if (jv_is_object(iter)) {
        jv *keys = jv_array(R, JV_ARRAY, iter->u.obj.n, line);
        if (!keys) return X_ERROR;
        for (size_t i = 0; i < iter->u.obj.n; i++)
            if (!(keys->u.arr.v[i] = jv_string_ref(R, iter->u.obj.e[i].key, iter->u.obj.e[i].klen, line))) return X_ERROR;
        iter = keys;
    } else if (!jv_is_array(iter)) {
        jinja_fail(R, line, "cannot loop over %s (expected a list or a dict)", jv_type_name(iter));
        return X_ERROR;
    }
    /* pass 1: unpacking checks and the inline `if` filter */
    jv_list items = {0};
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
        if (!jv_list_push(R, &items, cur, line)) return X_ERROR;
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
            {"index", jv_number(R, (double)i + 1, true, line)},
            {"index0", jv_number(R, (double)i, true, line)},
            {"revindex", jv_number(R, (double)(n - i), true, line)},
            {"revindex0", jv_number(R, (double)(n - i - 1), true, line)},
            {"first", JV_BOOLV(i == 0)},
            {"last", JV_BOOLV(i == n - 1)},
            {"length", jv_number(R, (double)n, true, line)},
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
        jv_list pos = {0};
        jv *kw;
        if (!jinja_eval_arguments(R, call->list, call->n, env, &pos, &kw, line)) return X_ERROR;
        if (!kw && !(kw = jv_object(R, JV_KWARGS, 0, line))) return X_ERROR;
        if (!jv_list_push(R, &pos, kw, line)) return X_ERROR;
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
        jv *v = s ? jinja_builtin_filter(R, s, nd->a, env, line) : NULL;
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
            if (jinja_is_one_of(e->key, e->klen, reserved_globals)) {
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

/*
 * schema.c - JSON Schema to GBNF (st_schema_to_gbnf).
 *
 * One pass over the schema (jansson) writes one GBNF rule per schema node
 * that needs one; the shared pieces (whitespace, strings, numbers, any JSON
 * value) are written once at the end, under `<root>_ws`, `<root>_str`, ...
 * The translation is *sound*: every text the grammar accepts is valid under
 * the schema (JSON Schema 2020-12 semantics, which for the keywords below
 * also decide the older drafts: where draft 4-7 ignore something that
 * 2019+ apply, such as $ref's siblings, we apply it, the stricter reading).
 * Where a keyword cannot be enforced exactly the translation is an error
 * naming the keyword and its JSON path ("properties.tags: uniqueItems is not
 * supported"), never a silent over-approximation. Where it narrows (accepts
 * only some of the valid encodings) it says so below; narrowing costs valid
 * instances, never admits invalid ones.
 *
 * Choices, as XGrammar and llguidance make them (and where we differ):
 *   - Whitespace: what a JSON pretty-printer writes between two tokens: at
 *     most one line break ("\n" or "\r\n") then at most ST_SCHEMA_MAX_WS
 *     spaces or tabs (indentation 10 levels deep), so compact JSON,
 *     json.dumps's ", " / ": " and indented JSON all pass, and a model that
 *     likes whitespace gets one newline and its indentation per gap, never a
 *     run of blank lines (XGrammar's default [ \n\r\t]* lets a small model
 *     loop on newlines until max_tokens; its max_whitespace_cnt bounds the
 *     count, not the runs of newlines). None with disable_any_whitespace;
 *     whitespace_pattern's regex otherwise (e.g. "[ \n\r\t]*" for
 *     XGrammar's). No whitespace before or after the top-level value.
 *   - Property order: the schema's `properties` order; each required one
 *     must come, each optional one may; keys that `required` names without a
 *     `properties` entry follow, then additional properties (when
 *     additionalProperties allows them; default true as the spec says, like
 *     llguidance; XGrammar's strict mode defaults to false). An additional
 *     key never spells a known property's name (it would escape its schema).
 *   - No `type`: every type the other keywords allow (the spec's meaning):
 *     {"properties": {...}} also accepts a string or a number.
 *   - Strings: JSON escapes; no raw control characters; \u escapes of
 *     surrogates only as a high-low pair (one code point, as Python decodes
 *     it), so minLength/maxLength count code points exactly.
 *   - Integers: "-"? ("0" | [1-9][0-9]*), never "-0"; minimum / maximum /
 *     exclusive* as exact digit-range grammars (bounds clamped to int64,
 *     which narrows); multipleOf k as the k-state remainder automaton over
 *     the digits (k <= ST_SCHEMA_MAX_MOD), with bounds only when they just
 *     forbid the sign (minimum 0 or 1).
 *   - Numbers: with bounds no exponent is allowed; integer bounds are exact
 *     (the integer part as a digit range, the fraction as any / zero /
 *     non-zero); a fractional bound is rounded inwards (minimum 0.5 as 1),
 *     which narrows. multipleOf 10^-p as "at most p significant fraction
 *     digits" (no exponent); an integer multipleOf as an integer multiple
 *     written without fraction or exponent; anything else is an error.
 *   - enum / const: the values in Python's json.dumps(ensure_ascii=False)
 *     form (1 also as 1.0, objects in their own key order, flexible
 *     whitespace inside); values that the sibling keywords reject dropped.
 *   - anyOf: the alternatives, each merged with the sibling keywords. oneOf:
 *     the same when its branches are provably disjoint (their types, their
 *     const/enum values, or a property both require with disjoint values or
 *     forbidden on one side); branches that only require keys exactly (branch
 *     i, and for every other branch a key of its that is missing); otherwise
 *     an error, as llguidance does. (XGrammar falls back to anyOf, which
 *     accepts instances matching two branches: MaskBench's invalid ones.)
 *   - not: rewritten to its positive form where one exists exactly (a type
 *     list; one bound, with its type: not-minimum is a number below it; one
 *     required key: that property forbidden on objects; null/boolean
 *     values; not-not; not-anyOf as all of the negations) and merged with
 *     the siblings; anything else is an error.
 *   - patternProperties with one pattern matching none of the listed names:
 *     the extra keys are the pattern's (its regex as JSON text), with its
 *     schema; keys outside the pattern are not generated (a narrowing).
 *   - allOf and $ref with siblings: merged into one schema (types
 *     intersected, properties merged key by key with each side's
 *     additionalProperties standing in for keys it lacks, bounds tightened,
 *     enums intersected); what does not merge is an error.
 *   - $ref: local JSON pointers ("#", "#/$defs/a", "#/definitions/a",
 *     anything under "#/", with the root's $id as an optional prefix);
 *     recursion through rules.
 *   - format: date, time, date-time (RFC 3339, upper-case T and Z), uuid,
 *     email (a dot-atom local part @ a domain), uri (scheme "://" host path
 *     query fragment in RFC 3986's characters), ipv4 (no leading zeros) as
 *     grammars. The other formats JSON Schema defines are errors; formats
 *     outside the spec are annotations (ignored), as validators treat them.
 *   - pattern: st_regex_to_gbnf's grammar, unanchored sides widened with
 *     [\s\S]*, then every terminal rewritten to the JSON text of the
 *     characters it matches (" as \", control characters as their escapes).
 *     The regex dialect is ECMA-262 (Python's re in jsonschema differs for
 *     Unicode \d \w \s; ours are the ASCII ones).
 *   - Keywords outside JSON Schema's vocabularies are annotations, as the
 *     spec says (x-..., OpenAPI's example, javaType, ...); title,
 *     description, default, examples, $comment, $schema, $id, readOnly,
 *     deprecated, contentMediaType ... likewise. OpenAPI's nullable: true
 *     adds null to the types.
 *
 * Bounds: the schema text is at most ST_SCHEMA_MAX_BYTES, the grammar at
 * most ST_SCHEMA_MAX_GRAMMAR, the merge and $ref depth bounded, so a hostile
 * schema costs bounded time and memory and fails with a message.
 */
#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/error.h"
#include "base/pyrepr.h"
#include "structured/schema_internal.h"
#include "structured/structured.h"

#define ST_SCHEMA_MAX_BYTES (1u << 20)        /* schema text */
#define ST_SCHEMA_MAX_GRAMMAR (16u << 20)     /* GBNF text we write */
#define ST_FLAT_KEY_BYTES 16384               /* additional keys: the flat form's prefix bytes at most (gen_other_key) */
#define ST_SCHEMA_MAX_WS 20                   /* whitespace characters between tokens */
#define ST_SCHEMA_MAX_MOD 1000                /* largest integer multipleOf */
#define ST_SCHEMA_MAX_DEPTH 200               /* nesting of schemas (C stack) */
#define ST_SCHEMA_MAX_MERGE 32                /* $ref inlined by merges, nested */
#define ST_SCHEMA_MAX_BRANCHES 256            /* anyOf x anyOf products */
#define ST_SCHEMA_MAX_COUNT 64                /* minProperties / maxProperties counted in rules */
#define ST_SCHEMA_PIN_BUDGET 300000           /* subschemas visited checking pinned values, per compile */

/* type bits */
enum {
    T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64,
    T_ALL = 127,
};

/* the shared rules, written once at the end when used */
enum {
    S_WS = 1 << 0, S_STR = 1 << 1, S_CHAR = 1 << 2, S_NUM = 1 << 3, S_INT = 1 << 4,
    S_VAL = 1 << 5, S_OBJ = 1 << 6, S_ARR = 1 << 7, S_HEX = 1 << 8, S_KCHAR = 1 << 9,
    S_DIGITS = 1 << 10,
};

typedef struct rname { char s[96]; } rname;  /* a rule name; s[0] == 0: matches nothing */

typedef struct sc_ref { char *ptr; rname rule; } sc_ref;

typedef struct sc {
    const char *root;     /* rule-name prefix (and the start rule) */
    strbuf *out;          /* the grammar */
    json_t *doc;          /* the whole schema document */
    const char *id;       /* the root's $id, a $ref prefix we accept */
    const st_spec *opts;
    unsigned need;        /* S_* */
    int next;             /* rule counter */
    const char *ws;       /* "<root>_ws " or "" */
    rname wsname;
    sc_ref *refs;
    int n_refs, cap_refs;
    strbuf path;          /* JSON path of the schema being translated, for errors */
    int depth, merge_depth;
    int disjoint_depth;   /* provably_disjoint's anyOf distribution, nested */
    long disjoint_steps;  /* and its branches tried in all (bounded time) */
    long pin_budget;      /* subschemas enum_filtered may still visit in this compile */
    unsigned fmt_done;    /* formats whose rules are written */
} sc;

/* ---- small helpers ---------------------------------------------------------- */

static const char *sc_path(const sc *c) { return c->path.len ? c->path.s : "(root)"; }

static vllm_status sc_err(sc *c, vllm_status rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static vllm_status sc_err(sc *c, vllm_status rc, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *p = sc_path(c);
    size_t n = strlen(p);
    if (n > 200)  /* a deep path: its two ends */
        return vllm_error(rc, "%.80s...%s: %s", p, p + n - 100, msg);
    return vllm_error(rc, "%s: %s", p, msg);
}

static vllm_status sc_unsupported(sc *c, const char *kw) {
    return sc_err(c, VLLM_ERR_UNSUPPORTED, "%s is not supported", kw);
}

/* path push/pop: returns the old length */
static size_t path_push(sc *c, const char *key) {
    size_t old = c->path.len;
    if (c->path.len) sb_add(&c->path, ".", 1);
    sb_add(&c->path, key, strlen(key));
    return old;
}
static size_t path_push_i(sc *c, const char *key, size_t i) {
    char b[160];
    snprintf(b, sizeof b, "%s.%zu", key, i);
    return path_push(c, b);
}
static void path_pop(sc *c, size_t old) {
    c->path.len = old;
    if (c->path.s) c->path.s[old] = 0;
}

static vllm_status sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static vllm_status sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return vllm_error(VLLM_ERR_INVALID, "schema: formatting failed");
    vllm_status rc = sb_reserve(b, (size_t)n);
    if (rc) return rc;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return VLLM_OK;
}
static vllm_status sb_puts(strbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

/* names are at most 48 + a few characters (st_schema_to_gbnf bounds root) */
static void rn_printf(rname *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rn_printf(rname *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->s, sizeof r->s, fmt, ap);
    va_end(ap);
}
static void rn_new(sc *c, rname *r) { rn_printf(r, "%s_%d", c->root, c->next++); }
static void rn_shared(sc *c, rname *r, unsigned which, const char *suffix) {
    c->need |= which;
    rn_printf(r, "%s_%s", c->root, suffix);
}

/* appends `name ::= body` to the grammar, checking its size bound */
static vllm_status sc_rule(sc *c, const rname *name, const strbuf *body) {
    if (c->out->len + body->len > ST_SCHEMA_MAX_GRAMMAR)
        return sc_err(c, VLLM_ERR_UNSUPPORTED, "the grammar would exceed %u bytes", ST_SCHEMA_MAX_GRAMMAR);
    vllm_status rc = sb_printf(c->out, "%s ::= ", name->s);
    if (!rc) rc = sb_add(c->out, body->s ? body->s : "", body->len);
    if (!rc) rc = sb_add(c->out, "\n", 1);
    return rc;
}

/* A GBNF literal of raw UTF-8 bytes: " and \ escaped, control bytes as \xHH. */
static vllm_status gb_lit(strbuf *b, const char *s, size_t n) {
    vllm_status rc = sb_add(b, "\"", 1);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            rc = sb_add(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            rc = sb_printf(b, "\\u%04X", ch);
        } else {
            rc = sb_add(b, (const char *)&ch, 1);
        }
    }
    if (!rc) rc = sb_add(b, "\"", 1);
    return rc;
}

/* Python json.dumps(ensure_ascii=False) of a string's body (no quotes). */
static vllm_status json_canon(strbuf *b, const char *s, size_t n) {
    vllm_status rc = VLLM_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': rc = sb_add(b, "\\\"", 2); break;
        case '\\': rc = sb_add(b, "\\\\", 2); break;
        case '\n': rc = sb_add(b, "\\n", 2); break;
        case '\r': rc = sb_add(b, "\\r", 2); break;
        case '\t': rc = sb_add(b, "\\t", 2); break;
        case '\b': rc = sb_add(b, "\\b", 2); break;
        case '\f': rc = sb_add(b, "\\f", 2); break;
        default:
            if (ch < 0x20) rc = sb_printf(b, "\\u%04x", ch);
            else rc = sb_add(b, (const char *)&ch, 1);
        }
    }
    return rc;
}

/* the GBNF literal of the JSON string s */
static vllm_status gb_json_string(strbuf *b, const char *s, size_t n) {
    strbuf t = {0};
    vllm_status rc = sb_add(&t, "\"", 1);
    if (!rc) rc = json_canon(&t, s, n);
    if (!rc) rc = sb_add(&t, "\"", 1);
    if (!rc) rc = gb_lit(b, t.s, t.len);
    free(t.s);
    return rc;
}

/* A code point inside a GBNF class. */
static vllm_status gb_class_cp(strbuf *b, uint32_t cp) {
    if (cp >= 0x20 && cp < 0x7f && !strchr("]\\^-\"[", (int)cp)) {
        char ch = (char)cp;
        return sb_add(b, &ch, 1);
    }
    if (cp < 0x10000) return sb_printf(b, "\\u%04X", cp);  /* not \\xHH: XGrammar reads \\x greedily */
    return sb_printf(b, "\\U%08X", cp);
}

/* ---- keyword tables ------------------------------------------------------------ */

/* keywords that never change validity */
static const char *const kw_annotations[] = {
    "$schema", "$id", "id", "$comment", "$anchor", "$vocabulary", "$defs", "definitions",
    "title", "description", "default", "examples", "example", "deprecated", "readOnly",
    "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$dynamicAnchor",
    "$recursiveAnchor", NULL,
};
/* keywords we translate */
static const char *const kw_supported[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "anyOf", "oneOf", "allOf", "$ref", "nullable", "minProperties",
    "maxProperties", "uniqueItems", "unevaluatedProperties", "unevaluatedItems", "patternProperties",
    "dependentSchemas", "dependentRequired", "dependencies", NULL,
};
/* JSON Schema keywords we do not translate (an error when they constrain) */
static const char *const kw_unsupported[] = {
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "propertyNames",
    "$dynamicRef", "$recursiveRef", "disallow", "extends", "divisibleBy", NULL,
};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* Does the keyword k (with value v) constrain instances (beyond annotations)? */
static bool kw_constrains(const char *k, json_t *v) {
    if (in_list(kw_annotations, k)) return false;
    if (!in_list(kw_supported, k) && !in_list(kw_unsupported, k)) return false;  /* unknown: annotation */
    if (!strcmp(k, "uniqueItems") && json_is_false(v)) return false;
    if (!strcmp(k, "nullable") && json_is_false(v)) return false;
    if (!strcmp(k, "then") || !strcmp(k, "else")) return false;  /* only with "if" */
    return true;
}

/* ---- $ref ------------------------------------------------------------------------ */

json_t *st_json_pointer(json_t *node, const char *p, int *why) {
    *why = 0;
    while (node && *p == '/') {
        p++;
        char tok[512];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && *p == '0') { ch = '~'; p++; }
            else if (ch == '~' && *p == '1') { ch = '/'; p++; }
            else if (ch == '%' && isxdigit((unsigned char)p[0]) && isxdigit((unsigned char)p[1])) {
                char hx[3] = {p[0], p[1], 0};
                ch = (char)strtol(hx, NULL, 16);
                p += 2;
            }
            if (n + 1 >= sizeof tok) {
                *why = 1;
                return NULL;
            }
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(node)) {
            node = json_object_get(node, tok);
        } else if (json_is_array(node)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            node = n && !*end ? json_array_get(node, i) : NULL;
        } else {
            node = NULL;
        }
    }
    return node;
}

/* The schema a local reference points to, or NULL (error set). *ptr_out: the
 * normalized pointer ("#/..."), owned by the caller. */
static json_t *ref_resolve(sc *c, const char *ref, char **ptr_out, vllm_status *rc) {
    const char *r = ref;
    size_t idl = c->id ? strlen(c->id) : 0;
    if (idl && !strncmp(r, c->id, idl)) {
        r += idl;
        if (*r != '#' && *r) r = ref;
    }
    if (*r != '#') {
        *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "$ref \"%s\" is not a local reference (only \"#...\" is supported)", ref);
        return NULL;
    }
    const char *p = r + 1;
    if (*p && *p != '/') {
        /* "#name": an $anchor (or a draft-4..7 id "#name") somewhere in the document */
        *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "$ref \"%s\": anchors are not supported (use a JSON pointer)", ref);
        return NULL;
    }
    int why = 0;
    json_t *node = st_json_pointer(c->doc, p, &why);
    if (!node) {
        *rc = why ? sc_err(c, VLLM_ERR_UNSUPPORTED, "$ref \"%.80s...\": a pointer token is too long", ref)
                  : sc_err(c, VLLM_ERR_NOT_FOUND, "$ref \"%s\" points to nothing", ref);
        return NULL;
    }
    if (!json_is_object(node) && !json_is_boolean(node)) {
        *rc = sc_err(c, VLLM_ERR_FORMAT, "$ref \"%s\" points to something that is not a schema", ref);
        return NULL;
    }
    *ptr_out = strdup(r);
    if (!*ptr_out) *rc = vllm_error(VLLM_ERR_NOMEM, "schema: out of memory");
    return *ptr_out ? node : NULL;
}

/* ---- merging (allOf, $ref with siblings) ------------------------------------------ */

static unsigned type_mask(sc *c, json_t *s, vllm_status *rc);

static unsigned type_bit(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "number")) return T_NUM | T_INT;
    if (!strcmp(t, "integer")) return T_INT;
    return 0;
}

/* The types s allows by "type" and "nullable" (T_ALL without "type"). */
static unsigned type_mask(sc *c, json_t *s, vllm_status *rc) {
    if (!json_is_object(s)) return json_is_false(s) ? 0 : T_ALL;
    json_t *t = json_object_get(s, "type");
    unsigned m = 0;
    if (!t) {
        m = T_ALL;
    } else if (json_is_string(t)) {
        m = type_bit(json_string_value(t));
        if (!m) *rc = sc_err(c, VLLM_ERR_INVALID, "type \"%s\" is not a JSON Schema type", json_string_value(t));
    } else if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            unsigned b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
            if (!b) {
                *rc = sc_err(c, VLLM_ERR_INVALID, "type.%zu is not a JSON Schema type name", i);
                return 0;
            }
            m |= b;
        }
    } else {
        *rc = sc_err(c, VLLM_ERR_INVALID, "type must be a string or an array of strings");
    }
    if (t && json_is_true(json_object_get(s, "nullable"))) m |= T_NULL;
    return m;
}

static json_t *type_json(unsigned m) {
    json_t *a = json_array();
    if (m & T_NULL) json_array_append_new(a, json_string("null"));
    if (m & T_BOOL) json_array_append_new(a, json_string("boolean"));
    if (m & T_OBJ) json_array_append_new(a, json_string("object"));
    if (m & T_ARR) json_array_append_new(a, json_string("array"));
    if (m & T_STR) json_array_append_new(a, json_string("string"));
    if (m & T_NUM) json_array_append_new(a, json_string("number"));
    else if (m & T_INT) json_array_append_new(a, json_string("integer"));
    return a;
}

/* Draft 4's boolean exclusiveMinimum/Maximum become 2019's numbers, in place
 * of a copy s (owned by the caller). */
static void normalize_bounds(json_t *s) {
    json_t *em = json_object_get(s, "exclusiveMinimum"), *mn = json_object_get(s, "minimum");
    if (json_is_boolean(em)) {
        if (json_is_true(em) && json_is_number(mn)) {
            json_object_set(s, "exclusiveMinimum", mn);
            json_object_del(s, "minimum");
        } else {
            json_object_del(s, "exclusiveMinimum");
        }
    }
    json_t *eM = json_object_get(s, "exclusiveMaximum"), *mx = json_object_get(s, "maximum");
    if (json_is_boolean(eM)) {
        if (json_is_true(eM) && json_is_number(mx)) {
            json_object_set(s, "exclusiveMaximum", mx);
            json_object_del(s, "maximum");
        } else {
            json_object_del(s, "exclusiveMaximum");
        }
    }
}

static json_t *flatten(sc *c, json_t *s, vllm_status *rc);
static json_t *merge2(sc *c, json_t *a, json_t *b, vllm_status *rc);
static json_t *type_json(unsigned m);

/* a schema that is false: {"not": {}} is unsupported, so a private marker */
static json_t *schema_false(void) { return json_false(); }

static bool is_true_schema(json_t *s) { return json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0); }

/* Merges keyword k of a and b into out (both present). */
static vllm_status merge_kw(sc *c, const char *k, json_t *va, json_t *vb, json_t *a, json_t *b, json_t *out) {
    vllm_status rc = VLLM_OK;
    if (json_equal(va, vb)) {
        json_object_set(out, k, va);
        return VLLM_OK;
    }
    if (!strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "minProperties") ||
        !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum")) {
        if (!json_is_number(va) || !json_is_number(vb)) return sc_err(c, VLLM_ERR_INVALID, "%s must be a number", k);
        json_object_set(out, k, json_number_value(va) >= json_number_value(vb) ? va : vb);
        return VLLM_OK;
    }
    if (!strcmp(k, "maxLength") || !strcmp(k, "maxItems") || !strcmp(k, "maxProperties") ||
        !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum")) {
        if (!json_is_number(va) || !json_is_number(vb)) return sc_err(c, VLLM_ERR_INVALID, "%s must be a number", k);
        json_object_set(out, k, json_number_value(va) <= json_number_value(vb) ? va : vb);
        return VLLM_OK;
    }
    if (!strcmp(k, "required")) {
        json_t *u = json_deep_copy(va);
        size_t i;
        json_t *e;
        json_array_foreach(vb, i, e) {
            size_t j;
            json_t *f;
            bool have = false;
            json_array_foreach(u, j, f) if (json_equal(e, f)) have = true;
            if (!have) json_array_append(u, e);
        }
        json_object_set_new(out, k, u);
        return VLLM_OK;
    }
    if (!strcmp(k, "enum") || !strcmp(k, "const")) {
        return VLLM_OK;  /* handled with both together below */
    }
    if (!strcmp(k, "items") && !json_is_array(va) && !json_is_array(vb)) {
        json_t *m = merge2(c, va, vb, &rc);
        if (!m) return rc;
        json_object_set_new(out, k, m);
        return VLLM_OK;
    }
    if (!strcmp(k, "additionalProperties")) {
        return VLLM_OK;  /* with properties below */
    }
    if (!strcmp(k, "properties")) return VLLM_OK;  /* below */
    if (!strcmp(k, "type") || !strcmp(k, "nullable")) return VLLM_OK;  /* below */
    if (!strcmp(k, "anyOf") && json_is_array(va) && json_is_array(vb)) {
        /* (a1 | a2) & (b1 | b2) = a1&b1 | a1&b2 | a2&b1 | a2&b2 */
        if (json_array_size(va) * json_array_size(vb) > ST_SCHEMA_MAX_BRANCHES)
            return sc_err(c, VLLM_ERR_UNSUPPORTED, "allOf: two anyOf with more than %d combinations", ST_SCHEMA_MAX_BRANCHES);
        json_t *prod = json_array();
        size_t i, j;
        json_t *x, *y;
        json_array_foreach(va, i, x) json_array_foreach(vb, j, y) {
            json_t *m = merge2(c, x, y, &rc);
            if (!m) { json_decref(prod); return rc; }
            json_array_append_new(prod, m);
        }
        json_object_set_new(out, k, prod);
        return VLLM_OK;
    }
    if (!strcmp(k, "multipleOf") && json_is_integer(va) && json_is_integer(vb)) {
        json_int_t x = json_integer_value(va), y = json_integer_value(vb), g = x, h = y;
        while (h) { json_int_t t = g % h; g = h; h = t; }
        if (g > 0 && x / g <= INT64_MAX / (y ? y : 1)) {
            json_object_set_new(out, k, json_integer(x / g * y));
            return VLLM_OK;
        }
    }
    (void)a; (void)b;
    return sc_err(c, VLLM_ERR_UNSUPPORTED, "allOf: two different \"%s\" cannot be merged", k);
}

/* flatten, then a bare {"$ref"} replaced by its target (flattened), so that
 * a merge sees the keywords: a merged schema never keeps a $ref */
static json_t *flatten_inline(sc *c, json_t *s, vllm_status *rc) {
    json_t *f = flatten(c, s, rc);
    for (int k = 0; f && json_is_object(f) && json_object_get(f, "$ref"); k++) {
        json_t *ref = json_object_get(f, "$ref");
        char *ptr = NULL;
        json_t *t = NULL;
        if (k >= ST_SCHEMA_MAX_MERGE) *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "$ref chains longer than %d", ST_SCHEMA_MAX_MERGE);
        else if (!json_is_string(ref)) *rc = sc_err(c, VLLM_ERR_INVALID, "$ref must be a string");
        else t = ref_resolve(c, json_string_value(ref), &ptr, rc);
        free(ptr);
        json_decref(f);
        f = t ? flatten(c, t, rc) : NULL;
    }
    return f;
}

/* The schema both a and b describe (new reference), or NULL with *rc set. */
static json_t *merge2(sc *c, json_t *a0, json_t *b0, vllm_status *rc) {
    if (++c->merge_depth > ST_SCHEMA_MAX_MERGE) {
        c->merge_depth--;
        *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "allOf / $ref merges nest deeper than %d (a recursive $ref inside allOf?)",
                     ST_SCHEMA_MAX_MERGE);
        return NULL;
    }
    json_t *out = NULL, *a = NULL, *b = NULL;
    a = flatten_inline(c, a0, rc);
    if (!a) goto done;
    b = flatten_inline(c, b0, rc);
    if (!b) goto done;
    if (json_is_false(a) || json_is_false(b)) { out = schema_false(); goto done; }
    if (is_true_schema(a)) { out = json_incref(b); goto done; }
    if (is_true_schema(b)) { out = json_incref(a); goto done; }
    out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) {
        json_t *w = json_object_get(b, k);
        if (!w || !kw_constrains(k, v)) { json_object_set(out, k, v); continue; }  /* annotations: a's */
        if ((*rc = merge_kw(c, k, v, w, a, b, out))) goto fail;
    }
    json_object_foreach(b, k, v) {
        if (!json_object_get(a, k)) json_object_set(out, k, v);
    }
    /* arrays: position-wise keywords merge only as two `items` schemas */
    {
        static const char *const ak[] = {"items", "prefixItems", "additionalItems"};
        bool in_a = false, in_b = false, plain = true;
        for (int i = 0; i < 3; i++) {
            json_t *x = json_object_get(a, ak[i]), *y = json_object_get(b, ak[i]);
            in_a |= x != NULL;
            in_b |= y != NULL;
            if ((x && (i || json_is_array(x))) || (y && (i || json_is_array(y)))) plain = false;
        }
        if (in_a && in_b && !plain) {
            *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "allOf: prefixItems / array items / additionalItems on both sides cannot be merged");
            goto fail;
        }
    }
    /* types */
    {
        unsigned ma = type_mask(c, a, rc), mb = type_mask(c, b, rc);
        if (*rc) goto fail;
        unsigned m = ma & mb;
        if ((ma & mb & T_INT) && !((ma & T_NUM) && (mb & T_NUM))) m &= ~(unsigned)T_NUM;
        json_object_del(out, "nullable");
        if (m != T_ALL) json_object_set_new(out, "type", type_json(m));
        else json_object_del(out, "type");
        if (!m) { json_decref(out); out = schema_false(); goto done; }
    }
    /* enum / const: the values in both */
    {
        json_t *ea = json_object_get(a, "enum"), *eb = json_object_get(b, "enum");
        json_t *ca = json_object_get(a, "const"), *cb = json_object_get(b, "const");
        json_t *la = ea ? json_incref(ea) : ca ? json_pack("[O]", ca) : NULL;
        json_t *lb = eb ? json_incref(eb) : cb ? json_pack("[O]", cb) : NULL;
        if (la && lb) {
            json_t *x = json_array();
            size_t i, j;
            json_t *e, *f;
            json_array_foreach(la, i, e) json_array_foreach(lb, j, f) if (json_equal(e, f)) {
                json_array_append(x, e);
                break;
            }
            json_object_del(out, "const");
            json_object_set_new(out, "enum", x);
        }
        json_decref(la);
        json_decref(lb);
    }
    /* properties: key by key, the other side's additionalProperties for a key it lacks */
    {
        json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
        json_t *aa = json_object_get(a, "additionalProperties"), *ab = json_object_get(b, "additionalProperties");
        if ((pa || aa) && (pb || ab)) {
            if (json_object_get(a, "patternProperties") || json_object_get(b, "patternProperties")) {
                *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "allOf: patternProperties cannot be merged");
                goto fail;
            }
            json_t *props = json_object();
            json_t *t = json_true();
            if (pa) json_object_foreach(pa, k, v) {
                json_t *w = pb ? json_object_get(pb, k) : NULL;
                json_t *m = merge2(c, v, w ? w : ab ? ab : t, rc);
                if (!m) { json_decref(props); goto fail; }
                json_object_set_new(props, k, m);
            }
            if (pb) json_object_foreach(pb, k, v) {
                if (pa && json_object_get(pa, k)) continue;
                json_t *m = merge2(c, aa ? aa : t, v, rc);
                if (!m) { json_decref(props); goto fail; }
                json_object_set_new(props, k, m);
            }
            json_object_set_new(out, "properties", props);
            if (aa || ab) {
                json_t *m = merge2(c, aa ? aa : t, ab ? ab : t, rc);
                if (!m) goto fail;
                json_object_set_new(out, "additionalProperties", m);
            }
        }
    }
    goto done;
fail:
    json_decref(out);
    out = NULL;
done:
    c->merge_depth--;
    json_decref(a);
    json_decref(b);
    return out;
}

/* The positive schema equal to {"not": n} (new reference), or NULL with *rc
 * set. Exact forms only: true/false, a type list, one bound keyword (which
 * also requires its type: non-numbers satisfy minimum, so not-minimum is a
 * number below it), one required key, null/boolean values, not-not, anyOf
 * (all of the negations), a bare $ref. Anything else is an error. */
static json_t *negate(sc *c, json_t *n, int depth, vllm_status *rc) {
    if (depth > 8) { *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "not nested too deep"); return NULL; }
    if (json_is_false(n)) return json_object();
    if (is_true_schema(n)) return schema_false();
    if (!json_is_object(n)) { *rc = sc_err(c, VLLM_ERR_INVALID, "not must be a schema"); return NULL; }
    /* the one constraining keyword */
    const char *k, *only = NULL;
    json_t *v, *val = NULL;
    int count = 0;
    json_object_foreach(n, k, v) if (kw_constrains(k, v)) { only = k; val = v; count++; }
    if (count == 0) return schema_false();
    if (count > 1) {
        /* not (a and b) = not a or not b, when the keywords are independent of one another */
        static const char *const indep[] = {
            "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
            "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "required", "multipleOf",
            "pattern", "format", "not", "anyOf", "allOf", "oneOf", "properties", NULL,  /* properties: not with additionalProperties or patternProperties */
        };
        json_object_foreach(n, k, v) {
            if (!kw_constrains(k, v)) continue;
            if (!in_list(indep, k) || json_is_boolean(v)) {
                *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "not over \"%s\" beside other keywords is not supported", k);
                return NULL;
            }
        }
        json_t *alts = json_array();
        json_object_foreach(n, k, v) {
            if (!kw_constrains(k, v)) continue;
            json_t *one = json_pack("{s:O}", k, v);
            json_t *ne = negate(c, one, depth + 1, rc);
            json_decref(one);
            if (!ne) { json_decref(alts); return NULL; }
            json_array_append_new(alts, ne);
        }
        return json_pack("{s:o}", "anyOf", alts);
    }
    if (count == 1) {
        if (!strcmp(only, "$ref") && json_is_string(val)) {
            char *ptr = NULL;
            json_t *t = ref_resolve(c, json_string_value(val), &ptr, rc);
            free(ptr);
            return t ? negate(c, t, depth + 1, rc) : NULL;
        }
        if (!strcmp(only, "not")) return flatten(c, val, rc);
        if (!strcmp(only, "allOf") && json_is_array(val) && json_array_size(val) == 1)
            return negate(c, json_array_get(val, 0), depth + 1, rc);
        if (!strcmp(only, "allOf") && json_is_array(val) && json_array_size(val) > 1) {
            /* not (a and b) = not a or not b */
            json_t *alts = json_array();
            size_t i;
            json_t *e;
            json_array_foreach(val, i, e) {
                json_t *ne = negate(c, e, depth + 1, rc);
                if (!ne) { json_decref(alts); return NULL; }
                json_array_append_new(alts, ne);
            }
            return json_pack("{s:o}", "anyOf", alts);
        }
        if (!strcmp(only, "properties") && json_is_object(val) && json_object_size(val)) {
            /* an object with some listed property present and invalid */
            json_t *alts = json_array();
            json_object_foreach(val, k, v) {
                json_t *ne = negate(c, v, depth + 1, rc);
                if (!ne) { json_decref(alts); return NULL; }
                json_array_append_new(alts, json_pack("{s:s, s:[s], s:{s:o}}", "type", "object", "required", k, "properties", k, ne));
            }
            return json_pack("{s:o}", "anyOf", alts);
        }
        if (!strcmp(only, "anyOf") && json_is_array(val) && json_array_size(val)) {
            json_t *acc = json_object();
            size_t i;
            json_t *e;
            json_array_foreach(val, i, e) {
                json_t *ne = negate(c, e, depth + 1, rc);
                if (!ne) { json_decref(acc); return NULL; }
                json_t *m = merge2(c, acc, ne, rc);
                json_decref(acc);
                json_decref(ne);
                if (!m) return NULL;
                acc = m;
            }
            return acc;
        }
        if (!strcmp(only, "type")) {
            unsigned m = type_mask(c, n, rc);
            if (*rc) return NULL;
            if ((m & T_INT) && !(m & T_NUM))
                { *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "not with type integer is not supported (non-integer numbers)"); return NULL; }
            unsigned r = T_ALL & ~m;
            if (!r) return schema_false();
            return json_pack("{s:o}", "type", type_json(r));
        }
        static const struct { const char *kw, *type, *to; int shift; } b[] = {
            {"minimum", "number", "exclusiveMaximum", 0}, {"maximum", "number", "exclusiveMinimum", 0},
            {"exclusiveMinimum", "number", "maximum", 0}, {"exclusiveMaximum", "number", "minimum", 0},
            {"minLength", "string", "maxLength", -1}, {"maxLength", "string", "minLength", 1},
            {"minItems", "array", "maxItems", -1}, {"maxItems", "array", "minItems", 1},
            {"minProperties", "object", "maxProperties", -1},
        };
        for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
            if (strcmp(only, b[i].kw) || !json_is_number(val)) continue;
            double x = json_number_value(val) + b[i].shift;
            if (x < 0) return schema_false();
            json_t *out = json_pack("{s:s}", "type", b[i].type);
            json_object_set_new(out, b[i].to, b[i].shift ? json_integer((json_int_t)x) : json_incref(val));
            return out;
        }
        if (!strcmp(only, "required") && json_is_array(val) && json_array_size(val) == 1 &&
            json_is_string(json_array_get(val, 0)))
            return json_pack("{s:s, s:{s:b}}", "type", "object", "properties", json_string_value(json_array_get(val, 0)), 0);
        if (!strcmp(only, "required") && json_is_array(val) && json_array_size(val) > 1) {
            /* an object lacking one of the keys */
            json_t *alts = json_array();
            size_t i;
            json_t *e;
            json_array_foreach(val, i, e) {
                if (!json_is_string(e)) { json_decref(alts); *rc = sc_err(c, VLLM_ERR_INVALID, "required.%zu must be a string", i); return NULL; }
                json_array_append_new(alts, json_pack("{s:{s:b}}", "properties", json_string_value(e), 0));
            }
            return json_pack("{s:s, s:o}", "type", "object", "anyOf", alts);
        }
        if ((!strcmp(only, "enum") && json_is_array(val)) || !strcmp(only, "const")) {
            json_t *list = !strcmp(only, "enum") ? json_incref(val) : json_pack("[O]", val);
            bool nul = false, tru = false, fal = false, other = false;
            size_t i;
            json_t *e;
            json_array_foreach(list, i, e) {
                if (json_is_null(e)) nul = true;
                else if (json_is_true(e)) tru = true;
                else if (json_is_false(e)) fal = true;
                else other = true;
            }
            json_decref(list);
            if (!other) {
                unsigned r = T_ALL & ~(unsigned)(nul ? T_NULL : 0) & ~(unsigned)(tru || fal ? T_BOOL : 0);
                json_t *alts = json_array();
                json_array_append_new(alts, json_pack("{s:o}", "type", type_json(r)));
                if (tru != fal) json_array_append_new(alts, json_pack("{s:b}", "const", !tru));
                return json_pack("{s:o}", "anyOf", alts);
            }
        }
    }
    *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "not is not supported (only of types, one bound, one required key, null/boolean values)");
    return NULL;
}

/* s with allOf and $ref-with-siblings merged away (a new reference), or NULL
 * with *rc set. A bare {"$ref"} (with annotations) stays as it is so that
 * recursion goes through rules. */
static json_t *flatten(sc *c, json_t *s, vllm_status *rc) {
    if (!json_is_object(s)) {
        if (json_is_boolean(s)) return json_incref(s);
        *rc = sc_err(c, VLLM_ERR_INVALID, "a schema must be an object or a boolean");
        return NULL;
    }
    json_t *dr = json_object_get(s, "dependentRequired"), *dp = json_object_get(s, "dependencies"),
           *ds = json_object_get(s, "dependentSchemas");
    if ((json_is_object(dr) && json_object_size(dr)) || (json_is_object(dp) && json_object_size(dp)) ||
        (json_is_object(ds) && json_object_size(ds))) {
        /* each key k with its dependencies D: k absent, or k present with D
         * (D: keys it requires, or a schema), as anyOf alternatives; several
         * keys: their product, merged with the rest */
        json_t *alts = json_array();
        json_array_append_new(alts, json_object());
        json_t *srcs[3] = {dr, dp, ds};
        for (int q = 0; q < 3 && !*rc; q++) {
            const char *k;
            json_t *d;
            if (!json_is_object(srcs[q])) continue;
            json_object_foreach(srcs[q], k, d) {
                json_t *absent = json_pack("{s:{s:b}}", "properties", k, 0);
                json_t *present;
                if (json_is_array(d)) {
                    json_t *req = json_copy(d);
                    json_array_append_new(req, json_string(k));
                    present = json_pack("{s:o}", "required", req);
                } else {
                    json_t *rq = json_pack("{s:[s]}", "required", k);
                    present = merge2(c, rq, d, rc);
                    json_decref(rq);
                    if (!present) { json_decref(absent); break; }
                }
                json_t *next = json_array();
                size_t i;
                json_t *a;
                json_array_foreach(alts, i, a) {
                    json_t *m1 = merge2(c, a, absent, rc), *m2 = m1 ? merge2(c, a, present, rc) : NULL;
                    if (m1) json_array_append_new(next, m1);
                    if (m2) json_array_append_new(next, m2);
                }
                json_decref(absent);
                json_decref(present);
                json_decref(alts);
                alts = next;
                if (*rc) break;
                if (json_array_size(alts) > ST_SCHEMA_MAX_BRANCHES) {
                    *rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "dependencies: more than %d combinations", ST_SCHEMA_MAX_BRANCHES);
                    break;
                }
            }
        }
        if (*rc) { json_decref(alts); return NULL; }
        json_t *rest = json_copy(s);
        json_object_del(rest, "dependentRequired");
        json_object_del(rest, "dependencies");
        json_object_del(rest, "dependentSchemas");
        json_t *any = json_pack("{s:o}", "anyOf", alts);
        json_t *m = merge2(c, rest, any, rc);
        json_decref(rest);
        json_decref(any);
        return m;
    }
    json_t *nt = json_object_get(s, "not");
    if (nt && kw_constrains("not", nt)) {
        /* not: its positive form merged with the rest */
        json_t *pos = negate(c, nt, 0, rc);
        if (!pos) return NULL;
        json_t *rest = json_copy(s);
        json_object_del(rest, "not");
        json_t *m = merge2(c, rest, pos, rc);
        json_decref(rest);
        json_decref(pos);
        return m;
    }
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    bool siblings = false;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, "$ref") && strcmp(k, "allOf") && kw_constrains(k, v)) siblings = true;
    if (!all && (!ref || !siblings)) {
        json_t *cp = json_copy(s);
        normalize_bounds(cp);
        return cp;
    }
    if (all && (!json_is_array(all) || !json_array_size(all))) {
        *rc = sc_err(c, VLLM_ERR_INVALID, "allOf must be a non-empty array");
        return NULL;
    }
    json_t *rest = json_copy(s);
    json_object_del(rest, "allOf");
    json_object_del(rest, "$ref");
    normalize_bounds(rest);
    json_t *acc = rest;
    if (ref) {
        char *ptr = NULL;
        if (!json_is_string(ref)) { *rc = sc_err(c, VLLM_ERR_INVALID, "$ref must be a string"); json_decref(acc); return NULL; }
        json_t *target = ref_resolve(c, json_string_value(ref), &ptr, rc);
        free(ptr);
        if (!target) { json_decref(acc); return NULL; }
        json_t *m = merge2(c, acc, target, rc);
        json_decref(acc);
        if (!m) return NULL;
        acc = m;
    }
    size_t i;
    json_t *e;
    if (all) json_array_foreach(all, i, e) {
        json_t *m = merge2(c, acc, e, rc);
        json_decref(acc);
        if (!m) return NULL;
        acc = m;
    }
    return acc;
}

/* ---- shared rules ----------------------------------------------------------------- */

static vllm_status emit_shared(sc *c) {
    vllm_status rc = VLLM_OK;
    const char *r = c->root, *ws = c->ws;
    strbuf *o = c->out;
    /* the any-value rules reach one another: close over their needs first */
    if (c->need & S_VAL) c->need |= S_OBJ | S_ARR | S_STR | S_NUM;
    if (c->need & (S_OBJ | S_ARR)) c->need |= S_VAL | S_STR | S_NUM;
    if (c->need & S_STR) c->need |= S_CHAR;
    if (c->need & S_KCHAR) c->need |= S_HEX;
    if (c->need & S_CHAR) c->need |= S_HEX;
    if (c->need & S_VAL)
        rc = rc ? rc : sb_printf(o, "%s_val ::= %s_obj | %s_arr | %s_str | %s_num | \"true\" | \"false\" | \"null\"\n", r, r, r, r, r);
    if (c->need & S_OBJ)
        rc = rc ? rc : sb_printf(o, "%s_obj ::= \"{\" %s( %s_str %s\":\" %s%s_val ( %s\",\" %s%s_str %s\":\" %s%s_val )* %s)? \"}\"\n",
                                 r, ws, r, ws, ws, r, ws, ws, r, ws, ws, r, ws);
    if (c->need & S_ARR)
        rc = rc ? rc : sb_printf(o, "%s_arr ::= \"[\" %s( %s_val ( %s\",\" %s%s_val )* %s)? \"]\"\n", r, ws, r, ws, ws, r, ws);
    if (c->need & S_STR) rc = rc ? rc : sb_printf(o, "%s_str ::= \"\\\"\" %s_char* \"\\\"\"\n", r, r);
    if (c->need & S_CHAR)
        rc = rc ? rc
                : sb_printf(o,
                            "%s_char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] | \"\\\\u\" [0-9a-cA-Ce-fE-F] %s_hex{3}"
                            " | \"\\\\u\" [dD] [0-7] %s_hex{2} | \"\\\\u\" [dD] [89abAB] %s_hex{2} \"\\\\u\" [dD] [c-fC-F] %s_hex{2}\n",
                            r, r, r, r, r);
    /* additional keys: one spelling per string (no \/ and no \u but for control characters) */
    if (c->need & S_KCHAR)
        rc = rc ? rc : sb_printf(o, "%s_kchar ::= [^\"\\\\\\x00-\\x1F] | %s_kesc\n%s_kesc ::= \"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" [01] %s_hex\n", r, r, r, r);
    if (c->need & S_HEX) rc = rc ? rc : sb_printf(o, "%s_hex ::= [0-9a-fA-F]\n", r);
    if (c->need & S_NUM)
        rc = rc ? rc : sb_printf(o, "%s_num ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n", r);
    if (c->need & S_INT) rc = rc ? rc : sb_printf(o, "%s_int ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n", r);
    if (c->need & S_WS) {
        if (c->opts && c->opts->whitespace_pattern) {
            char name[128];
            snprintf(name, sizeof name, "%s_ws", r);
            rc = rc ? rc : st_regex_to_gbnf(c->opts->whitespace_pattern, strlen(c->opts->whitespace_pattern), name, o);
            if (rc) vllm_error_prefix("whitespace_pattern");
        } else {
            rc = rc ? rc : sb_printf(o, "%s_ws ::= (\"\\n\" | \"\\r\\n\")? [ \\t]{0,%d}\n", r, ST_SCHEMA_MAX_WS);
        }
    }
    return rc;
}

/* ---- integer ranges ------------------------------------------------------------------ */

/* GBNF for the decimal strings of the same length n from lo to hi (digit
 * strings, lo <= hi), appended to b as one parenthesized expression. */
static vllm_status digits_same_len(strbuf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return sb_puts(b, "\"\"");
    if (!memcmp(lo, hi, n)) return gb_lit(b, lo, n);
    vllm_status rc = VLLM_OK;
    if (lo[0] == hi[0]) {
        rc = sb_printf(b, "\"%c\" ", lo[0]);
        if (!rc) rc = sb_puts(b, "(");
        if (!rc) rc = digits_same_len(b, lo + 1, hi + 1, n - 1);
        if (!rc) rc = sb_puts(b, ")");
        return rc;
    }
    char nines[32], zeros[32];
    memset(nines, '9', n); memset(zeros, '0', n);
    bool lo_all0 = !memcmp(lo + 1, zeros, n - 1), hi_all9 = !memcmp(hi + 1, nines, n - 1);
    char a = lo_all0 ? lo[0] : (char)(lo[0] + 1), z = hi_all9 ? hi[0] : (char)(hi[0] - 1);
    bool first = true;
    rc = sb_puts(b, "(");
    if (!lo_all0 && !rc) {
        rc = sb_printf(b, "\"%c\" (", lo[0]);
        if (!rc) rc = digits_same_len(b, lo + 1, nines, n - 1);
        if (!rc) rc = sb_puts(b, ")");
        first = false;
    }
    if (a <= z && !rc) {
        if (!first) rc = sb_puts(b, " | ");
        if (!rc) rc = a == z ? sb_printf(b, "\"%c\"", a) : sb_printf(b, "[%c-%c]", a, z);
        if (!rc && n > 1) rc = n == 2 ? sb_puts(b, " [0-9]") : sb_printf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!hi_all9 && !rc) {
        if (!first) rc = sb_puts(b, " | ");
        if (!rc) rc = sb_printf(b, "\"%c\" (", hi[0]);
        if (!rc) rc = digits_same_len(b, zeros, hi + 1, n - 1);
        if (!rc) rc = sb_puts(b, ")");
    }
    if (!rc) rc = sb_puts(b, ")");
    return rc;
}

/* GBNF for the non-negative integers lo..hi (hi < 0: unbounded), no leading
 * zeros; appended as one parenthesized alternation. */
static vllm_status uint_range(strbuf *b, uint64_t lo, int64_t hi_s) {
    char los[32], his[32];
    snprintf(los, sizeof los, "%" PRIu64, lo);
    size_t ll = strlen(los), hl = 0;
    if (hi_s >= 0) {
        snprintf(his, sizeof his, "%" PRId64, hi_s);
        hl = strlen(his);
    }
    vllm_status rc = sb_puts(b, "(");
    bool first = true;
    size_t top = hi_s >= 0 ? hl : ll;
    for (size_t L = ll; L <= top && !rc; L++) {
        char a[32], z[32];
        if (L == ll) memcpy(a, los, L);
        else { a[0] = '1'; memset(a + 1, '0', L - 1); }
        if (hi_s >= 0 && L == hl) memcpy(z, his, L);
        else memset(z, '9', L);
        if (!first) rc = sb_puts(b, " | ");
        if (!rc) rc = digits_same_len(b, a, z, L);
        first = false;
    }
    if (hi_s < 0 && !rc) {
        /* every longer number */
        rc = sb_printf(b, " | [1-9] [0-9]{%zu,}", ll);
    }
    if (!rc) rc = sb_puts(b, ")");
    return rc;
}

/* integers in [lo, hi] (has_lo/has_hi false: unbounded); empty set: *never */
static vllm_status int_range(strbuf *b, bool has_lo, int64_t lo, bool has_hi, int64_t hi, bool *never) {
    *never = false;
    if (has_lo && has_hi && lo > hi) { *never = true; return VLLM_OK; }
    vllm_status rc = sb_puts(b, "(");
    bool first = true;
    /* negatives: "-" then |v| in [max(1,-hi), -lo] */
    if (!has_lo || lo < 0) {
        uint64_t alo = has_hi && hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1;
        int64_t ahi = has_lo ? (int64_t)(-(lo + 1)) + 1 : -1;
        rc = sb_puts(b, "\"-\" ");
        if (!rc) rc = uint_range(b, alo, ahi);
        first = false;
    }
    if ((!has_hi || hi >= 0) && !rc) {
        uint64_t plo = has_lo && lo > 0 ? (uint64_t)lo : 0;
        if (!first) rc = sb_puts(b, " | ");
        if (!rc) rc = uint_range(b, plo, has_hi ? hi : -1);
    }
    if (!rc) rc = sb_puts(b, ")");
    return rc;
}

/* ---- the translator ---------------------------------------------------------------- */

static vllm_status gen(sc *c, json_t *s, rname *out);

/* gen() of a child schema under path key */
static vllm_status gen_at(sc *c, json_t *s, const char *key, rname *out) {
    size_t old = path_push(c, key);
    vllm_status rc = gen(c, s, out);
    path_pop(c, old);
    return rc;
}

static bool get_num(json_t *s, const char *k, double *v) {
    json_t *x = json_object_get(s, k);
    if (!json_is_number(x)) return false;
    *v = json_number_value(x);
    return true;
}

static vllm_status get_count(sc *c, json_t *s, const char *k, int64_t *v, bool *has) {
    json_t *x = json_object_get(s, k);
    *has = false;
    if (!x) return VLLM_OK;
    double d = json_number_value(x);
    if (!json_is_number(x) || d < 0 || d != floor(d)) return sc_err(c, VLLM_ERR_INVALID, "%s must be a non-negative integer", k);
    *v = d > 1e9 ? 1000000000 : (int64_t)d;
    *has = true;
    return VLLM_OK;
}

/* integer bounds of s for an integer instance */
static void int_bounds(json_t *s, bool *has_lo, int64_t *lo, bool *has_hi, int64_t *hi) {
    double v, L = -INFINITY, H = INFINITY;
    if (get_num(s, "minimum", &v)) L = fmax(L, ceil(v));
    if (get_num(s, "exclusiveMinimum", &v)) L = fmax(L, floor(v) + 1);
    if (get_num(s, "maximum", &v)) H = fmin(H, floor(v));
    if (get_num(s, "exclusiveMaximum", &v)) H = fmin(H, ceil(v) - 1);
    const double lim = 9.2e18;
    *has_lo = L > -INFINITY;
    *has_hi = H < INFINITY;
    *lo = L < -lim ? -(int64_t)lim : L > lim ? (int64_t)lim : (int64_t)L;
    *hi = H > lim ? (int64_t)lim : H < -lim ? -(int64_t)lim : (int64_t)H;
    if (*has_lo && L > lim) *lo = INT64_MAX;  /* nothing fits: lo > hi */
    if (*has_hi && H < -lim) *hi = INT64_MIN + 1;
}

/* The k-state remainder automaton over decimal digits as rules <base>_m<r>
 * (r: the remainder of the digits so far); appends to b the expression for
 * a positive multiple of k without leading zeros. */
static vllm_status mod_rules(sc *c, int64_t k, strbuf *b) {
    rname base;
    rn_new(c, &base);
    vllm_status rc = VLLM_OK;
    strbuf body = {0};
    for (int64_t r = 0; r < k && !rc; r++) {
        body.len = 0;
        bool first = true;
        if (r == 0) { rc = sb_puts(&body, "\"\""); first = false; }
        for (int64_t t = 0; t < k && !rc; t++) {
            char cls[16];
            int n = 0;
            for (int d = 0; d < 10; d++)
                if ((10 * r + d) % k == t) cls[n++] = (char)('0' + d);
            if (!n) continue;
            cls[n] = 0;
            if (!first) rc = sb_puts(&body, " | ");
            first = false;
            if (!rc) rc = sb_printf(&body, "[%s] %s_m%" PRId64, cls, base.s, t);
        }
        if (!rc) {
            rname nm;
            rn_printf(&nm, "%s_m%" PRId64, base.s, r);
            rc = sc_rule(c, &nm, &body);
        }
    }
    if (!rc) rc = sb_puts(b, "(");
    bool first = true;
    for (int64_t t = 0; t < k && !rc; t++) {
        char cls[16];
        int n = 0;
        for (int d = 1; d < 10; d++)
            if (d % k == t) cls[n++] = (char)('0' + d);
        if (!n) continue;
        cls[n] = 0;
        if (!first) rc = sb_puts(b, " | ");
        first = false;
        if (!rc) rc = sb_printf(b, "[%s] %s_m%" PRId64, cls, base.s, t);
    }
    if (!rc) rc = sb_puts(b, ")");
    free(body.s);
    return rc;
}

static vllm_status gen_integer(sc *c, json_t *s, strbuf *b, bool *never) {
    bool has_lo, has_hi;
    int64_t lo, hi;
    int_bounds(s, &has_lo, &lo, &has_hi, &hi);
    json_t *mo = json_object_get(s, "multipleOf");
    *never = false;
    if (mo) {
        double m = json_number_value(mo);
        if (!json_is_number(mo) || m <= 0) return sc_err(c, VLLM_ERR_INVALID, "multipleOf must be a positive number");
        if (m != floor(m)) {
            /* an integer is a multiple of 0.5, 0.25, 0.1 ... when 1/m is an integer */
            double inv = 1.0 / m;
            if (fabs(inv - round(inv)) > 1e-9) return sc_err(c, VLLM_ERR_UNSUPPORTED, "multipleOf %g for integers is not supported", m);
            mo = NULL;
        } else if (m > 1) {
            if (m > ST_SCHEMA_MAX_MOD) return sc_err(c, VLLM_ERR_UNSUPPORTED, "multipleOf %g is not supported (at most %d)", m, ST_SCHEMA_MAX_MOD);
            /* bounds only where they decide the sign: minimum 0 (with 0) or 1 (without) */
            bool nonneg = has_lo && lo >= 0 && lo <= 1;
            if (has_hi || (has_lo && !nonneg))
                return sc_err(c, VLLM_ERR_UNSUPPORTED, "multipleOf %g with minimum/maximum is not supported (only minimum 0 or 1)", m);
            vllm_status rc;
            strbuf pos = {0};
            if ((rc = mod_rules(c, (int64_t)m, &pos))) { free(pos.s); return rc; }
            if (nonneg) rc = sb_printf(b, "(%s%s)", lo == 0 ? "\"0\" | " : "", pos.s);
            else rc = sb_printf(b, "(\"0\" | \"-\"? %s)", pos.s);
            free(pos.s);
            return rc;
        }
    }
    if (!has_lo && !has_hi) {
        rname r;
        rn_shared(c, &r, S_INT, "int");
        return sb_puts(b, r.s);
    }
    return int_range(b, has_lo, lo, has_hi, hi, never);
}

/* fraction grammars: any, zero, non-zero; p >= 0: at most p significant digits */
static vllm_status frac(strbuf *b, int kind, int p) {
    /* kind 0 any (optional), 1 zero (optional), 2 non-zero (required) */
    if (kind == 1) return sb_puts(b, "(\".\" \"0\"+)?");
    const char *nz;
    char buf[64];
    if (p < 0) nz = "\".\" [0-9]* [1-9] [0-9]*";
    else if (p == 0) nz = NULL;
    else {
        snprintf(buf, sizeof buf, "\".\" [0-9]{0,%d} [1-9] \"0\"*", p - 1);
        nz = buf;
    }
    if (kind == 2) return nz ? sb_printf(b, "(%s)", nz) : VLLM_ERR_NOT_FOUND;
    if (p < 0) return sb_puts(b, "(\".\" [0-9]+)?");
    if (!nz) return sb_puts(b, "(\".\" \"0\"+)?");
    return sb_printf(b, "(\".\" \"0\"+ | %s)?", nz);
}

/* |x| in an interval with integer endpoints: alternatives appended (each
 * preceded by " | " unless *first) */
static vllm_status abs_interval(strbuf *b, uint64_t lo, bool lo_ex, bool has_hi, uint64_t hi, bool hi_ex, int p,
                                bool *first) {
    vllm_status rc = VLLM_OK;
#define ALT() do { if (!*first) rc = sb_puts(b, " | "); *first = false; } while (0)
    if (has_hi && lo > hi) return VLLM_OK;
    if (has_hi && lo == hi) {
        if (lo_ex || hi_ex) return VLLM_OK;
        ALT();
        if (!rc) rc = sb_printf(b, "\"%" PRIu64 "\" ", lo);
        return rc ? rc : frac(b, 1, p);
    }
    /* i == lo */
    if (!lo_ex || p != 0) {
        ALT();
        if (!rc) rc = sb_printf(b, "\"%" PRIu64 "\" ", lo);
        if (!rc) rc = frac(b, lo_ex ? 2 : 0, p);
    }
    /* lo < i < hi */
    if ((!has_hi || hi - lo >= 2) && !rc) {
        ALT();
        if (!rc) rc = uint_range(b, lo + 1, has_hi ? (int64_t)(hi - 1) : -1);
        if (!rc) rc = sb_puts(b, " ");
        if (!rc) rc = frac(b, 0, p);
    }
    /* i == hi */
    if (has_hi && !hi_ex && !rc) {
        ALT();
        if (!rc) rc = sb_printf(b, "\"%" PRIu64 "\" ", hi);
        if (!rc) rc = frac(b, 1, p);
    }
#undef ALT
    return rc;
}

static vllm_status gen_number(sc *c, json_t *s, strbuf *b, bool *never) {
    double v;
    bool has_l = false, has_h = false, l_ex = false, h_ex = false;
    double L = 0, H = 0;
    *never = false;
    if (get_num(s, "minimum", &v)) { has_l = true; L = ceil(v); }
    if (get_num(s, "exclusiveMinimum", &v)) {
        double l2 = v == floor(v) ? v : ceil(v);
        bool ex2 = v == floor(v);
        if (!has_l || l2 > L || (l2 == L && ex2)) { L = l2; l_ex = ex2; }
        has_l = true;
    }
    if (get_num(s, "maximum", &v)) { has_h = true; H = floor(v); }
    if (get_num(s, "exclusiveMaximum", &v)) {
        double h2 = v == floor(v) ? v : floor(v);
        bool ex2 = v == floor(v);
        if (!has_h || h2 < H || (h2 == H && ex2)) { H = h2; h_ex = ex2; }
        has_h = true;
    }
    int p = -1;
    json_t *mo = json_object_get(s, "multipleOf");
    if (mo) {
        double m = json_number_value(mo);
        if (!json_is_number(mo) || m <= 0) return sc_err(c, VLLM_ERR_INVALID, "multipleOf must be a positive number");
        if (m == floor(m)) {
            /* an integer multiple: the integer grammar */
            if (m == 1 && !has_l && !has_h) {
                rname r;
                rn_shared(c, &r, S_INT, "int");
                return sb_puts(b, r.s);
            }
            json_t *t = json_deep_copy(s);
            vllm_status rc = gen_integer(c, t, b, never);
            json_decref(t);
            return rc;
        }
        double lg = -log10(m);
        if (fabs(lg - round(lg)) > 1e-9 || lg > 15) return sc_err(c, VLLM_ERR_UNSUPPORTED, "multipleOf %g for numbers is not supported (only 10^-p or integers)", m);
        p = (int)round(lg);
    }
    if (!has_l && !has_h && p < 0) {
        rname r;
        rn_shared(c, &r, S_NUM, "num");
        return sb_puts(b, r.s);
    }
    const double lim = 9.2e18;
    if (fabs(L) > lim || fabs(H) > lim) return sc_err(c, VLLM_ERR_UNSUPPORTED, "a bound beyond 9.2e18 is not supported for numbers");
    vllm_status rc = sb_puts(b, "(");
    bool first = true;
    /* negative values: |x| in (max(-H,0)... , -L] */
    if (!rc && (!has_l || L < 0)) {
        uint64_t alo;
        bool alo_ex;
        if (!has_h || -H <= 0) { alo = 0; alo_ex = true; }
        else { alo = (uint64_t)(-H); alo_ex = h_ex; }
        size_t mark = b->len;
        rc = sb_puts(b, "\"-\" (");
        bool f2 = true;
        if (!rc) rc = abs_interval(b, alo, alo_ex, has_l, has_l ? (uint64_t)(-L) : 0, l_ex, p, &f2);
        if (!rc) rc = sb_puts(b, ")");
        if (f2) { b->len = mark; b->s[mark] = 0; }
        else first = false;
    }
    /* non-negative values */
    if (!rc && (!has_h || H > 0 || (H == 0 && !h_ex))) {
        uint64_t plo = 0;
        bool plo_ex = false;
        if (has_l && L >= 0) { plo = (uint64_t)L; plo_ex = l_ex; }
        size_t mark = b->len;
        if (!first) rc = sb_puts(b, " | ");
        bool f2 = true;
        if (!rc) rc = sb_puts(b, "(");
        if (!rc) rc = abs_interval(b, plo, plo_ex, has_h, has_h ? (uint64_t)H : 0, h_ex, p, &f2);
        if (!rc) rc = sb_puts(b, ")");
        if (f2) { b->len = mark; b->s[mark] = 0; }
        else first = false;
    }
    if (!rc) rc = sb_puts(b, ")");
    if (first) *never = true;
    return rc;
}

/* ---- strings --------------------------------------------------------------------- */

/* The regex as JSON Schema's `pattern` means it (a search): unanchored ends
 * widened with [\s\S]*, per top-level alternative, after trimming what they
 * absorb (st_regex_search_trim: an optional tail is one Earley item per
 * place the match could end). Each alternative gets brackets of its own,
 * which would close a '(' or '[' that re leaves open, so an unbalanced re is
 * refused here, in the regex compiler's words. */
static vllm_status pattern_wrap(const char *re, strbuf *o) {
    size_t n = strlen(re);
    strbuf core = {0};
    /* split at top-level '|' (a '|' past the end closes the last one) */
    size_t start = 0, open_at = 0, class_at = 0;
    int depth = 0;
    bool in_class = false;
    vllm_status rc = VLLM_OK;
    bool first = true;
    for (size_t i = 0; i <= n && !rc; i++) {
        char ch = i < n ? re[i] : '|';
        if (i < n && ch == '\\') {
            if (i + 1 == n) rc = vllm_error(VLLM_ERR_INVALID, "regex: trailing backslash at offset %zu", i);
            i++;
            continue;
        }
        if (i == n && in_class)
            rc = vllm_error(VLLM_ERR_INVALID, "regex: unterminated character class at offset %zu", class_at);
        else if (i == n && depth > 0)
            rc = vllm_error(VLLM_ERR_INVALID, "regex: unbalanced parentheses: '(' is never closed at offset %zu",
                            open_at);
        if (rc) break;
        if (in_class) { if (ch == ']') in_class = false; continue; }
        if (ch == '[') { in_class = true; class_at = i; continue; }
        if (ch == '(' && depth++ == 0) open_at = i;
        else if (ch == ')' && --depth < 0) {
            rc = vllm_error(VLLM_ERR_INVALID, "regex: unbalanced parentheses: ')' without '(' at offset %zu", i);
            break;
        }
        if (ch != '|' || depth > 0) continue;
        const char *a = re + start;
        size_t m = i - start;
        bool anc_s = m && a[0] == '^';
        bool anc_e = false;
        if (m && a[m - 1] == '$') {
            size_t bs = 0;
            while (bs + 2 <= m && a[m - 2 - bs] == '\\') bs++;
            anc_e = bs % 2 == 0 && !(anc_s && m == 1);
        }
        /* what the unanchored ends absorb goes (search.c) */
        core.len = 0;
        bool universal = false;
        rc = st_regex_search_trim(a + anc_s, m - anc_s - anc_e, !anc_s, !anc_e, &core, &universal);
        if (!rc && universal && (!anc_s || !anc_e)) { /* matches every string: so does the pattern */
            o->len = 0;
            rc = sb_puts(o, "[\\s\\S]*");
            break;
        }
        if (!rc && !first) rc = sb_puts(o, "|");
        first = false;
        if (!rc) rc = sb_puts(o, "(?:");
        bool run = false; /* S X{m} S: a run matched from its first character (search.c) */
        if (!rc && !anc_s && !anc_e) rc = st_regex_search_run(core.s ? core.s : "", core.len, o, &run);
        if (!rc && !run) {
            if (!anc_s) rc = sb_puts(o, "[\\s\\S]*");
            if (!rc) rc = sb_puts(o, "(?:");
            if (!rc) rc = sb_add(o, core.s ? core.s : "", core.len);
            if (!rc) rc = sb_puts(o, ")");
            if (!rc && !anc_e) rc = sb_puts(o, "[\\s\\S]*");
        }
        if (!rc) rc = sb_puts(o, ")");
        start = i + 1;
    }
    free(core.s);
    return rc;
}

/* the rule for the JSON text (no quotes) of strings the pattern matches */
static vllm_status gen_pattern_rule(sc *c, const char *re, rname *r) {
    strbuf wrapped = {0}, g = {0};
    rn_new(c, r);
    vllm_status rc = pattern_wrap(re, &wrapped);
    if (!rc) rc = st_regex_to_gbnf(wrapped.s, wrapped.len, r->s, &g);
    if (rc) vllm_error_prefix("%s: pattern", sc_path(c));
    if (!rc) rc = st_gbnf_json_string(g.s, g.len, c->out);
    free(wrapped.s);
    free(g.s);
    return rc;
}

/* does the regex (a search, PCRE2) match s? -1: PCRE2 cannot compile it */
static int regex_search(const char *re, const char *s, size_t n) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    if (!code) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int r = md ? pcre2_match(code, (PCRE2_SPTR)s, n, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return r >= 0;
}

static vllm_status gen_pattern(sc *c, const char *re, strbuf *b) {
    rname r;
    vllm_status rc = gen_pattern_rule(c, re, &r);
    return rc ? rc : sb_printf(b, "\"\\\"\" %s \"\\\"\"", r.s);
}

static const char *const formats_spec[] = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
    "json-pointer", "relative-json-pointer", "regex", NULL,
};

/* the formats we write as grammars, with their lengths in characters
 * (max -1: unbounded) so that minLength / maxLength beside them can be
 * checked to be implied */
static const struct { const char *name; int min, max; } formats_ours[] = {
    {"date", 10, 10}, {"time", 9, -1}, {"date-time", 20, -1}, {"uuid", 36, 36},
    {"email", 3, -1}, {"uri", 4, -1}, {"ipv4", 7, 15}, {"hostname", 1, 247},
};

/* format f as an expression in b; VLLM_ERR_NOT_FOUND: f is an annotation */
static vllm_status gen_format(sc *c, const char *f, int64_t mn, bool hmn, int64_t mx, bool hmx, strbuf *b) {
    int idx = -1;
    for (int i = 0; i < (int)(sizeof formats_ours / sizeof *formats_ours); i++)
        if (!strcmp(formats_ours[i].name, f)) idx = i;
    if (idx < 0) {
        if (in_list(formats_spec, f)) return sc_err(c, VLLM_ERR_UNSUPPORTED, "format \"%s\" is not supported", f);
        return VLLM_ERR_NOT_FOUND;  /* outside the spec: an annotation */
    }
    if ((hmn && mn > formats_ours[idx].min) || (hmx && (formats_ours[idx].max < 0 || mx < formats_ours[idx].max)))
        return sc_err(c, VLLM_ERR_UNSUPPORTED, "format \"%s\" with minLength/maxLength narrower than the format is not supported", f);
    rname nm;
    rn_printf(&nm, "%s_f_%s", c->root, f);
    for (char *q = nm.s; *q; q++) if (*q == '-') *q = '_';
    if (c->fmt_done & (1u << idx)) return sb_puts(b, nm.s);
    c->fmt_done |= 1u << idx;
    const char *date =
        "[0-9]{4} \"-\" (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
        " | [0-9]{4} \"-\" (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\")"
        " | [0-9]{4} \"-02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])"
        " | ([0-9]{2} ([02468] [48] | [2468] \"0\" | [13579] [26]) | ([02468] [048] | [13579] [26]) \"00\") \"-02-29\"";
    const char *time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]+)?"
                       " (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
    strbuf *o = c->out;
    const char *n = nm.s;
    vllm_status rc = VLLM_OK;
    switch (idx) {
    case 0: rc = sb_printf(o, "%s ::= \"\\\"\" (%s) \"\\\"\"\n", n, date); break;
    case 1: rc = sb_printf(o, "%s ::= \"\\\"\" %s \"\\\"\"\n", n, time); break;
    case 2: rc = sb_printf(o, "%s ::= \"\\\"\" (%s) \"T\" %s \"\\\"\"\n", n, date, time); break;
    case 3:
        rc = sb_printf(o, "%s ::= \"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"\n", n);
        break;
    case 4:
        rc = sb_printf(o,
                       "%s ::= \"\\\"\" %s_atom (\".\" %s_atom)* \"@\" %s_label (\".\" %s_label)* \"\\\"\"\n"
                       "%s_atom ::= [a-zA-Z0-9!#$%%&'*+/=?^_`{|}~-]+\n"
                       "%s_label ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?\n",
                       n, n, n, n, n, n, n);
        break;
    case 5:
        rc = sb_printf(o,
                       "%s ::= \"\\\"\" [a-zA-Z] [a-zA-Z0-9+.-]* \"://\" %s_host (\":\" [0-9]+)? (\"/\" %s_pchar*)*"
                       " (\"?\" (%s_pchar | [/?])*)? (\"#\" (%s_pchar | [/?])*)? \"\\\"\"\n"
                       "%s_host ::= [a-zA-Z0-9._~!$&'()*+,;=-]+\n"
                       "%s_pchar ::= [a-zA-Z0-9._~!$&'()*+,;=:@-] | \"%%\" [0-9a-fA-F] [0-9a-fA-F]\n",
                       n, n, n, n, n, n, n);
        break;
    case 6:
        rc = sb_printf(o, "%s ::= \"\\\"\" %s_o \".\" %s_o \".\" %s_o \".\" %s_o \"\\\"\"\n"
                          "%s_o ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n",
                       n, n, n, n, n, n);
        break;
    case 7:
        /* RFC 1123 labels (letters, digits, inner hyphens, at most 63), at most
         * 253 characters in all: up to 3 labels of any length, or up to 8 of
         * at most 30 (a narrowing: the grammar cannot add up the labels) */
        rc = sb_printf(o,
                       "%s ::= \"\\\"\" (%s_l63 (\".\" %s_l63){0,2} | %s_l30 (\".\" %s_l30){0,7}) \"\\\"\"\n"
                       "%s_l63 ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?\n"
                       "%s_l30 ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,28} [a-zA-Z0-9])?\n",
                       n, n, n, n, n, n, n);
        break;
    }
    return rc ? rc : sb_puts(b, n);
}

static vllm_status gen_string(sc *c, json_t *s, strbuf *b) {
    int64_t mn = 0, mx = 0;
    bool hmn, hmx;
    vllm_status rc;
    if ((rc = get_count(c, s, "minLength", &mn, &hmn))) return rc;
    if ((rc = get_count(c, s, "maxLength", &mx, &hmx))) return rc;
    if (hmn && mn == 0) hmn = false;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return sc_err(c, VLLM_ERR_INVALID, "pattern must be a string");
    if (fmt && !json_is_string(fmt)) return sc_err(c, VLLM_ERR_INVALID, "format must be a string");
    if (fmt) {
        if (pat) {
            /* both only when the format is an annotation */
            strbuf t = {0};
            rc = gen_format(c, json_string_value(fmt), 0, false, 0, false, &t);
            free(t.s);
            if (rc == VLLM_OK) return sc_err(c, VLLM_ERR_UNSUPPORTED, "format \"%s\" with pattern is not supported", json_string_value(fmt));
            if (rc != VLLM_ERR_NOT_FOUND) return rc;
        } else {
            rc = gen_format(c, json_string_value(fmt), mn, hmn, mx, hmx, b);
            if (rc != VLLM_ERR_NOT_FOUND) return rc;
        }
    }
    if (pat && (hmn || hmx)) {
        /* one pattern where the lengths can be read off the regex (pattern_len.c) */
        strbuf np = {0};
        bool nothing = false;
        rc = st_pattern_with_length(json_string_value(pat), hmn ? mn : 0, hmx ? mx : -1, &np, &nothing);
        if (rc == VLLM_ERR_UNSUPPORTED)
            rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "pattern with minLength/maxLength is not supported (only where the pattern's lengths are plain: one repeated character class, the rest fixed)");
        else if (!rc && nothing) rc = VLLM_ERR_NOT_FOUND;
        else if (!rc) rc = gen_pattern(c, np.s, b);
        free(np.s);
        return rc;
    }
    if (pat) return gen_pattern(c, json_string_value(pat), b);
    rname ch, str;
    if (!hmn && !hmx) {
        rn_shared(c, &str, S_STR, "str");
        return sb_puts(b, str.s);
    }
    rn_shared(c, &ch, S_CHAR, "char");
    if (hmx && mx < mn) return VLLM_ERR_NOT_FOUND;
    if (hmx) return sb_printf(b, "\"\\\"\" %s{%" PRId64 ",%" PRId64 "} \"\\\"\"", ch.s, mn, mx);
    return sb_printf(b, "\"\\\"\" %s{%" PRId64 ",} \"\\\"\"", ch.s, mn);
}

/* ---- values (enum / const) ---------------------------------------------------------- */

static vllm_status gen_value(sc *c, json_t *v, strbuf *b) {
    vllm_status rc = VLLM_OK;
    const char *ws = c->ws;
    switch (json_typeof(v)) {
    case JSON_NULL: return sb_puts(b, "\"null\"");
    case JSON_TRUE: return sb_puts(b, "\"true\"");
    case JSON_FALSE: return sb_puts(b, "\"false\"");
    case JSON_STRING: return gb_json_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return sb_printf(b, "\"%" JSON_INTEGER_FORMAT "\" (\".\" \"0\"+)?", json_integer_value(v));
    case JSON_REAL: {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 1e16) {
            return sb_printf(b, "(\"%.0f\" (\".\" \"0\"+)?)", d);
        }
        char t[64];
        pyrepr_float(d, t, sizeof t);
        return sb_printf(b, "\"%s\"", t);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        rc = sb_printf(b, "(\"[\" %s", ws);
        json_array_foreach(v, i, e) {
            if (i && !rc) rc = sb_printf(b, " %s\",\" %s", ws, ws);
            if (!rc) rc = gen_value(c, e, b);
        }
        if (!rc) rc = sb_printf(b, " %s\"]\")", json_array_size(v) ? ws : "");
        return rc;
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        bool first = true;
        rc = sb_printf(b, "(\"{\" %s", ws);
        json_object_foreach(v, k, e) {
            if (!first && !rc) rc = sb_printf(b, " %s\",\" %s", ws, ws);
            first = false;
            if (!rc) rc = gb_json_string(b, k, strlen(k));
            if (!rc) rc = sb_printf(b, " %s\":\" %s", ws, ws);
            if (!rc) rc = gen_value(c, e, b);
        }
        if (!rc) rc = sb_printf(b, " %s\"}\")", json_object_size(v) ? ws : "");
        return rc;
    }
    }
    return rc;
}

static size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static json_t *deref(sc *c, json_t *s);

/* Is v valid under the keywords of s (enum/const included)? -1: cannot tell (error set) */
static int value_ok(sc *c, json_t *s, json_t *v) {
    const char *k;
    json_t *x;
    vllm_status rc = VLLM_OK;
    unsigned m = type_mask(c, s, &rc);
    if (rc) return -1;
    unsigned t = 0;
    switch (json_typeof(v)) {
    case JSON_NULL: t = T_NULL; break;
    case JSON_TRUE: case JSON_FALSE: t = T_BOOL; break;
    case JSON_OBJECT: t = T_OBJ; break;
    case JSON_ARRAY: t = T_ARR; break;
    case JSON_STRING: t = T_STR; break;
    case JSON_INTEGER: t = T_INT; break;
    case JSON_REAL: t = json_real_value(v) == floor(json_real_value(v)) ? T_INT : T_NUM; break;
    }
    if (!(m & t)) return 0;
    /* the value's own enum/const, when s is a subschema reached below */
    json_t *se = json_object_get(s, "enum"), *sk = json_object_get(s, "const");
    if (sk && !json_equal(sk, v)) return 0;
    if (json_is_array(se)) {
        bool in = false;
        size_t q;
        json_t *w;
        json_array_foreach(se, q, w) if (json_equal(w, v)) in = true;
        if (!in) return 0;
    }
    json_object_foreach(s, k, x) {
        if (!kw_constrains(k, x) || !strcmp(k, "type") || !strcmp(k, "enum") || !strcmp(k, "const") ||
            !strcmp(k, "nullable") || (!strcmp(k, "format") && t != T_STR))
            continue;
        double d = json_is_number(x) ? json_number_value(x) : 0;
        if (t == T_OBJ) {
            /* objects and arrays: their keywords on the members, recursively (bounded by the value's depth) */
            if (!strcmp(k, "properties") && json_is_object(x)) {
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    json_t *ps = json_object_get(x, pk);
                    if (!ps) continue;
                    json_t *d2 = deref(c, ps);
                    int r = json_is_boolean(d2) ? json_is_true(d2) : d2 ? value_ok(c, d2, pv) : -1;
                    if (r <= 0) return r;
                }
                continue;
            }
            if (!strcmp(k, "required") && json_is_array(x)) {
                size_t q;
                json_t *w;
                json_array_foreach(x, q, w) if (!json_is_string(w) || !json_object_get(v, json_string_value(w))) return 0;
                continue;
            }
            if (!strcmp(k, "additionalProperties")) {
                json_t *props = json_object_get(s, "properties");
                if (json_object_get(s, "patternProperties")) {
                    sc_err(c, VLLM_ERR_UNSUPPORTED, "enum/const with patternProperties is not supported");
                    return -1;
                }
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    if (props && json_object_get(props, pk)) continue;
                    json_t *d2 = deref(c, x);
                    int r = json_is_boolean(d2) ? json_is_true(d2) : d2 ? value_ok(c, d2, pv) : -1;
                    if (r <= 0) return r;
                }
                continue;
            }
            if (!strcmp(k, "minProperties")) { if ((double)json_object_size(v) < d) return 0; continue; }
            if (!strcmp(k, "maxProperties")) { if ((double)json_object_size(v) > d) return 0; continue; }
        }
        if (t == T_ARR) {
            if (!strcmp(k, "items") && (json_is_object(x) || json_is_boolean(x))) {
                size_t q;
                json_t *w;
                json_t *d2 = deref(c, x);
                json_array_foreach(v, q, w) {
                    int r = json_is_boolean(d2) ? json_is_true(d2) : d2 ? value_ok(c, d2, w) : -1;
                    if (r <= 0) return r;
                }
                continue;
            }
            if (!strcmp(k, "minItems")) { if ((double)json_array_size(v) < d) return 0; continue; }
            if (!strcmp(k, "maxItems")) { if ((double)json_array_size(v) > d) return 0; continue; }
        }
        if (t == T_STR) {
            size_t n = utf8_len(json_string_value(v), json_string_length(v));
            if (!strcmp(k, "minLength")) { if ((double)n < d) return 0; continue; }
            if (!strcmp(k, "maxLength")) { if ((double)n > d) return 0; continue; }
            if (!strcmp(k, "pattern") && json_is_string(x)) {
                int err;
                PCRE2_SIZE off;
                pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_string_value(x), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
                if (!re) { sc_err(c, VLLM_ERR_UNSUPPORTED, "enum with a pattern PCRE2 cannot compile"); return -1; }
                pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
                int r = pcre2_match(re, (PCRE2_SPTR)json_string_value(v), json_string_length(v), 0, 0, md, NULL);
                pcre2_match_data_free(md);
                pcre2_code_free(re);
                if (r < 0) return 0;
                continue;
            }
            if (!strcmp(k, "format")) continue;  /* checked below by refusing */
        }
        if (t & (T_INT | T_NUM)) {
            double n = json_number_value(v);
            if (!strcmp(k, "minimum")) { if (json_is_number(x) && n < d) return 0; continue; }
            if (!strcmp(k, "maximum")) { if (json_is_number(x) && n > d) return 0; continue; }
            if (!strcmp(k, "exclusiveMinimum")) { if (json_is_number(x) && n <= d) return 0; continue; }
            if (!strcmp(k, "exclusiveMaximum")) { if (json_is_number(x) && n >= d) return 0; continue; }
            if (!strcmp(k, "multipleOf") && d > 0) { double q = n / d; if (q != floor(q)) return 0; continue; }
        }
        /* keywords of other types do not apply */
        static const char *const str_kw[] = {"minLength", "maxLength", "pattern", "format", NULL};
        static const char *const num_kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
        static const char *const obj_kw[] = {"properties", "required", "additionalProperties", "minProperties",
                                             "maxProperties", "unevaluatedProperties", "patternProperties",
                                             "propertyNames", "dependencies", "dependentRequired", "dependentSchemas", NULL};
        static const char *const arr_kw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                             "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems", NULL};
        if ((in_list(str_kw, k) && t != T_STR) || (in_list(num_kw, k) && !(t & (T_INT | T_NUM))) ||
            (in_list(obj_kw, k) && t != T_OBJ) || (in_list(arr_kw, k) && t != T_ARR))
            continue;
        sc_err(c, VLLM_ERR_UNSUPPORTED, "enum/const with %s is not supported", k);
        return -1;
    }
    return 1;
}

static vllm_status gen_enum(sc *c, json_t *s, strbuf *b, bool *never) {
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    json_t *list = e ? json_incref(e) : json_pack("[O]", k);
    vllm_status rc = VLLM_OK;
    if (e && !json_is_array(e)) { json_decref(list); return sc_err(c, VLLM_ERR_INVALID, "enum must be an array"); }
    if (e && k) {  /* both: the const, if the enum has it */
        bool in = false;
        size_t i;
        json_t *x;
        json_array_foreach(e, i, x) if (json_equal(x, k)) in = true;
        json_decref(list);
        list = in ? json_pack("[O]", k) : json_array();
    }
    size_t i;
    json_t *v;
    bool first = true;
    rc = sb_puts(b, "(");
    json_array_foreach(list, i, v) {
        if (rc) break;
        int ok = value_ok(c, s, v);
        if (ok < 0) { rc = VLLM_ERR_UNSUPPORTED; break; }
        if (!ok) continue;
        if (json_is_string(v) && json_object_get(s, "format")) {
            rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "enum/const with format is not supported");
            break;
        }
        if (!first) rc = sb_puts(b, " | ");
        first = false;
        if (!rc) rc = gen_value(c, v, b);
    }
    if (!rc) rc = sb_puts(b, ")");
    *never = first;
    json_decref(list);
    return rc;
}

/* ---- objects ------------------------------------------------------------------------- */

/* one key of `props` or `required` in the order they are written */
typedef struct okey { const char *name; json_t *schema; bool required; rname rule; } okey;

/* rules for additional keys: any key but the known ones (one spelling each) */
static vllm_status gen_other_key(sc *c, okey *keys, int n, rname *out) {
    rname kc;
    rn_shared(c, &kc, S_KCHAR, "kchar");
    /* a trie over the known names' canonical spellings, walked as rules */
    typedef struct tnode { int child[0]; } tnode_unused;
    (void)sizeof(tnode_unused *);
    vllm_status rc = VLLM_OK;
    for (int i = 0; i < n; i++) {
        const char *p = keys[i].name;
        for (; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
                return sc_err(c, VLLM_ERR_UNSUPPORTED, "additional properties beside a property name with \" \\ or control characters are not supported");
    }
    rname base;
    rn_new(c, &base);
    /* The trie's nodes are the distinct prefixes. An other key is a proper
     * prefix of the known names that is none of them (N, nested rules), or
     * a prefix then a character that leaves the trie there, then anything
     * (one flat production per trie node):
     *   <base>_0     ::= <base>_n0 | "p" <base>_x<p> <kchar>* | ...
     *   <base>_n<id> ::= ("" unless a known name ends here) | "c" <base>_n<child> ...
     *   <base>_x<id> ::= [^c... "\\\x00-\x1F] | <kesc>
     * The free tail's items then start at the key's start, which the mask
     * cache's local state sees (the set after the quote). Written as nested
     * rules with the tail at the bottom (above ST_FLAT_KEY_BYTES of
     * prefixes, where the flat form would grow quadratically), every
     * character of the tail completes the chain of trie rules back past the
     * key's start, which a local state cannot see: each such state is a
     * first walk of the whole vocabulary, and its rejected tokens are
     * walked again at every mask (matcher.c). */
    /* collect prefixes as (start index into names, length) with ids */
    int cap = 1;
    for (int i = 0; i < n; i++) cap += (int)strlen(keys[i].name);
    const char **pfx = malloc(sizeof *pfx * (size_t)cap);
    size_t *plen = malloc(sizeof *plen * (size_t)cap);
    bool *known = calloc((size_t)cap, sizeof *known), *alive = calloc((size_t)cap, sizeof *alive);  /* zeroed: GCC cannot see alive[0] is set */
    if (!pfx || !plen || !known || !alive) {
        free(pfx); free(plen); free(known); free(alive);
        return vllm_error(VLLM_ERR_NOMEM, "schema: out of memory");
    }
    int np = 0;
    pfx[np] = ""; plen[np++] = 0;
    for (int i = 0; i < n; i++) {
        size_t L = strlen(keys[i].name);
        /* characters are whole UTF-8 sequences */
        for (size_t j = 1; j <= L; j++) {
            if (j < L && ((unsigned char)keys[i].name[j] & 0xC0) == 0x80) continue;
            bool have = false;
            for (int q = 0; q < np && !have; q++) have = plen[q] == j && !memcmp(pfx[q], keys[i].name, j);
            if (!have) { pfx[np] = keys[i].name; plen[np++] = j; }
        }
    }
    /* known: a name ends here; alive: N derives a string below (longest prefixes first) */
    for (int q = 0; q < np; q++) {
        known[q] = false;
        for (int i = 0; i < n; i++) known[q] |= strlen(keys[i].name) == plen[q] && !memcmp(keys[i].name, pfx[q], plen[q]);
    }
    for (int q = 0; q < np; q++) {
        alive[q] = false;
        for (int r2 = 0; r2 < np && !alive[q]; r2++)
            alive[q] = !known[r2] && plen[r2] >= plen[q] && !memcmp(pfx[r2], pfx[q], plen[q]);
    }
    size_t flat_bytes = 0;
    for (int q = 0; q < np; q++) flat_bytes += plen[q];
    bool flat = flat_bytes <= ST_FLAT_KEY_BYTES;
    strbuf body = {0}, nbody = {0}, cls = {0}, top = {0};
    for (int q = 0; q < np && !rc; q++) {
        body.len = 0;
        nbody.len = 0;
        cls.len = 0;
        bool nfirst = true;
        if (!known[q]) { rc = sb_puts(&nbody, "\"\""); nfirst = false; }
        /* children: prefixes one character longer */
        rc = rc ? rc : sb_puts(&cls, "[^\"\\\\\\x00-\\x1F");
        for (int r2 = 0; r2 < np && !rc; r2++) {
            if (plen[r2] <= plen[q] || memcmp(pfx[r2], pfx[q], plen[q])) continue;
            size_t cl = plen[r2] - plen[q];
            const unsigned char *ch = (const unsigned char *)pfx[r2] + plen[q];
            size_t want = ch[0] < 0x80 ? 1 : ch[0] < 0xE0 ? 2 : ch[0] < 0xF0 ? 3 : 4;
            if (cl != want) continue;
            if (!flat && !rc) rc = gb_lit(&body, (const char *)ch, cl);
            if (!flat && !rc) rc = sb_printf(&body, " %s_d%d | ", base.s, r2);
            if (!rc && alive[r2]) {
                if (!nfirst) rc = sb_puts(&nbody, " | ");
                nfirst = false;
                if (!rc) rc = gb_lit(&nbody, (const char *)ch, cl);
                if (!rc) rc = sb_printf(&nbody, " %s_n%d", base.s, r2);
            }
            /* the code point, excluded from the "other" class */
            uint32_t cp = ch[0];
            if (cl == 2) cp = ((ch[0] & 0x1Fu) << 6) | (ch[1] & 0x3Fu);
            if (cl == 3) cp = ((ch[0] & 0x0Fu) << 12) | ((ch[1] & 0x3Fu) << 6) | (ch[2] & 0x3Fu);
            if (cl == 4) cp = ((ch[0] & 0x07u) << 18) | ((ch[1] & 0x3Fu) << 12) | ((ch[2] & 0x3Fu) << 6) | (ch[3] & 0x3Fu);
            if (!rc) rc = gb_class_cp(&cls, cp);
        }
        if (!rc) rc = sb_puts(&cls, "]");
        if (!rc) rc = sb_printf(&body, "%s | %s_kesc", cls.s, c->root);
        rname nm;
        rn_printf(&nm, flat ? "%s_x%d" : "%s_d%d", base.s, q);
        if (!rc) rc = sc_rule(c, &nm, &body);
        if (flat && !rc) { /* the top's production for a key leaving the trie here */
            if (top.len) rc = sb_puts(&top, " | ");
            if (!rc && plen[q]) rc = gb_lit(&top, pfx[q], plen[q]);
            if (!rc) rc = sb_printf(&top, " %s_x%d %s_kchar*", base.s, q, c->root);
        }
        rn_printf(&nm, "%s_n%d", base.s, q);
        if (!rc && alive[q]) rc = sc_rule(c, &nm, &nbody);
    }
    body.len = 0;
    if (!rc && alive[0]) rc = sb_printf(&body, "%s_n0 | ", base.s);
    if (!rc && flat) rc = sb_add(&body, top.s, top.len);
    else if (!rc) rc = sb_printf(&body, "%s_d0 %s_kchar*", base.s, c->root);
    rname topname;
    rn_printf(&topname, "%s_0", base.s);
    if (!rc) rc = sc_rule(c, &topname, &body);
    free(top.s);
    free(body.s);
    free(nbody.s);
    free(cls.s);
    free(pfx);
    free(plen);
    free(known);
    free(alive);
    *out = topname;
    return rc;
}

static vllm_status gen_object(sc *c, json_t *s, strbuf *b, bool *never) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    json_t *uneval = json_object_get(s, "unevaluatedProperties");
    vllm_status rc = VLLM_OK;
    *never = false;
    if (props && !json_is_object(props)) return sc_err(c, VLLM_ERR_INVALID, "properties must be an object");
    if (req && !json_is_array(req)) return sc_err(c, VLLM_ERR_INVALID, "required must be an array");
    if (uneval) {
        /* with no applicators left (allOf and $ref are merged, anyOf/oneOf distributed), it is additionalProperties */
        if (!addl) addl = uneval;
    }
    /* patternProperties: one pattern, matching no listed name: the extra keys
     * are then exactly its keys (those outside it, which additionalProperties
     * would govern, are not generated: a narrowing) */
    json_t *pp = json_object_get(s, "patternProperties");
    const char *pp_re = NULL;
    json_t *pp_schema = NULL;
    if (pp && !(json_is_object(pp) && json_object_size(pp) == 0)) {
        if (!json_is_object(pp) || json_object_size(pp) != 1)
            return sc_err(c, VLLM_ERR_UNSUPPORTED, "patternProperties with more than one pattern is not supported");
        void *it = json_object_iter(pp);
        pp_re = json_object_iter_key(it);
        pp_schema = json_object_iter_value(it);
    }
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    okey *keys = calloc(np + nr + 1, sizeof *keys);
    if (!keys) return vllm_error(VLLM_ERR_NOMEM, "schema: out of memory");
    int n = 0;
    const char *k;
    json_t *v;
    if (props) json_object_foreach(props, k, v) { keys[n].name = k; keys[n].schema = v; n++; }
    size_t i;
    json_t *e;
    if (req) json_array_foreach(req, i, e) {
        if (!json_is_string(e)) { free(keys); return sc_err(c, VLLM_ERR_INVALID, "required.%zu must be a string", i); }
        bool have = false;
        for (int j = 0; j < n; j++) if (!strcmp(keys[j].name, json_string_value(e))) { keys[j].required = true; have = true; }
        if (!have) {
            keys[n].name = json_string_value(e);
            keys[n].schema = addl ? addl : NULL;
            keys[n].required = true;
            n++;
        }
    }
    if (pp_re) {
        for (int j = 0; j < n; j++) {
            int m = regex_search(pp_re, keys[j].name, strlen(keys[j].name));
            if (m < 0) rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "patternProperties: PCRE2 cannot compile /%s/", pp_re);
            else if (m) rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "patternProperties /%s/ matching the listed property \"%s\" is not supported", pp_re, keys[j].name);
            if (rc) { free(keys); return rc; }
        }
        addl = pp_schema;  /* the value schema of the pattern's keys */
    }
    bool addl_never = json_is_false(addl);
    rname addl_rule = {{0}};
    if (addl && !addl_never) {
        rc = gen_at(c, addl, "additionalProperties", &addl_rule);
        if (!rc && !addl_rule.s[0]) addl_never = true;
    } else if (!addl) {
        rn_shared(c, &addl_rule, S_VAL, "val");
    }
    /* minProperties / maxProperties: only where the keys decide them already */
    int64_t minp = 0, maxp = 0;
    bool hminp = false, hmaxp = false;
    if (!rc) rc = get_count(c, s, "minProperties", &minp, &hminp);
    if (!rc) rc = get_count(c, s, "maxProperties", &maxp, &hmaxp);
    int n_req = 0;
    for (int j = 0; j < n; j++) n_req += keys[j].required;
    /* counted: the chain tracks how many properties are written (below) */
    bool counted = (hminp && minp > n_req) || (hmaxp && (!addl_never || maxp < n));
    int64_t kcap = counted ? (hmaxp ? maxp : minp) : 0;
    if (!hminp) minp = 0;
    if (!rc && counted && (kcap > ST_SCHEMA_MAX_COUNT || (int64_t)(n + 1) * (kcap + 1) > 4 * ST_SCHEMA_MAX_COUNT * ST_SCHEMA_MAX_COUNT))
        rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "minProperties/maxProperties: counting %" PRId64 " properties over %d keys is not supported", kcap, n);
    if (!rc && hmaxp && n_req > maxp) *never = true;
    /* each key's value rule */
    for (int j = 0; j < n && !rc; j++) {
        if (!keys[j].schema) { rn_shared(c, &keys[j].rule, S_VAL, "val"); continue; }
        size_t old = path_push(c, props && json_object_get(props, keys[j].name) ? "properties" : "additionalProperties");
        if (props && json_object_get(props, keys[j].name)) {
            size_t o2 = path_push(c, keys[j].name);
            rc = gen(c, keys[j].schema, &keys[j].rule);
            path_pop(c, o2);
        } else if (pp_re) {
            /* a required key outside properties and the pattern: additionalProperties' own schema */
            rc = gen(c, keys[j].schema, &keys[j].rule);
        } else {
            keys[j].rule = addl_rule;
            if (addl_never) keys[j].rule.s[0] = 0;
        }
        path_pop(c, old);
        if (!rc && !keys[j].rule.s[0] && keys[j].required) *never = true;
    }
    if (rc || *never) { free(keys); return rc; }
    /* F_j / C_j chains, right to left (see the file comment): F: nothing emitted yet, C: after an item */
    const char *ws = c->ws;
    rname base;
    rn_new(c, &base);
    strbuf body = {0};
    rname other = {{0}};
    if (!addl_never && pp_re) {
        size_t o2 = path_push(c, "patternProperties");
        rc = gen_pattern_rule(c, pp_re, &other);
        path_pop(c, o2);
    } else if (!addl_never) {
        rc = gen_other_key(c, keys, n, &other);
    }
    if (counted && !rc) {
        /* minProperties / maxProperties: C_j_k after k properties (k capped at
         * kcap: maxProperties, else minProperties), F_j before any:
         *   F_j   ::= key_j C_{j+1}_1 | F_{j+1}                      (| when optional)
         *   C_j_k ::= "," key_j C_{j+1}_{k+1} | C_{j+1}_k            (key only while k < maxProperties)
         *   F_n   ::= (addl C_n_1)?                                  (not optional when minProperties >= 1)
         *   C_n_k ::= ("," addl){max(0, minProperties - k), maxProperties - k} */
        const char *none = "\"\\x00\" \"\\x00\"";  /* matches nothing in JSON text (no raw NUL) */
        for (int j = n; j >= 0 && !rc; j--) {
            for (int64_t cnt = 0; cnt <= kcap && !rc; cnt++) {
                body.len = 0;
                rname nm;
                if (cnt == 0) rn_printf(&nm, "%s_f%d", base.s, j);
                else rn_printf(&nm, "%s_c%d_%" PRId64, base.s, j, cnt);
                int64_t k1 = cnt + 1 > kcap ? kcap : cnt + 1;
                bool room = !hmaxp || cnt + 1 <= maxp;
                if (j == n) {
                    int64_t lo = minp - cnt > 0 ? minp - cnt : 0;
                    if (cnt == 0) {
                        if (!addl_never && room) {
                            rc = sb_printf(&body, "( %s\"\\\"\" %s \"\\\"\" %s\":\" %s%s %s_c%d_1 )%s", ws, other.s, ws, ws,
                                           addl_rule.s, base.s, n, lo ? "" : "?");
                        } else {
                            rc = sb_puts(&body, lo ? none : "\"\"");
                        }
                    } else if (addl_never || (hmaxp && cnt >= maxp)) {
                        rc = sb_puts(&body, lo ? none : "\"\"");
                    } else {
                        rc = sb_printf(&body, "( %s\",\" %s\"\\\"\" %s \"\\\"\" %s\":\" %s%s ){%" PRId64 ",", ws, ws, other.s, ws,
                                       ws, addl_rule.s, lo);
                        if (!rc && hmaxp) rc = sb_printf(&body, "%" PRId64, maxp - cnt);
                        if (!rc) rc = sb_puts(&body, "}");
                    }
                } else {
                    bool first = true;
                    if (keys[j].rule.s[0] && room) {
                        rc = sb_printf(&body, "%s%s", ws, cnt ? "\",\" " : "");
                        if (!rc && cnt) rc = sb_puts(&body, ws);
                        if (!rc) rc = gb_json_string(&body, keys[j].name, strlen(keys[j].name));
                        if (!rc) rc = sb_printf(&body, " %s\":\" %s%s %s_c%d_%" PRId64, ws, ws, keys[j].rule.s, base.s, j + 1, k1);
                        first = false;
                    }
                    if (!rc && (!keys[j].required || !keys[j].rule.s[0])) {
                        /* skipped: optional (a required key whose schema is false was refused above) */
                        if (!keys[j].required) {
                            if (!first) rc = sb_puts(&body, " | ");
                            first = false;
                            if (!rc && cnt == 0) rc = sb_printf(&body, "%s_f%d", base.s, j + 1);
                            else if (!rc) rc = sb_printf(&body, "%s_c%d_%" PRId64, base.s, j + 1, cnt);
                        }
                    }
                    if (!rc && first) rc = sb_puts(&body, none);
                }
                if (!rc) rc = sc_rule(c, &nm, &body);
            }
        }
        if (!rc) rc = sb_printf(b, "\"{\" %s_f0 %s\"}\"", base.s, ws);
        free(body.s);
        free(keys);
        return rc;
    }
    /* tail (j == n): additional properties */
    for (int pass = 0; pass < 2 && !rc; pass++) {
        body.len = 0;
        rname nm;
        rn_printf(&nm, "%s_%c%d", base.s, pass ? 'c' : 'f', n);
        if (addl_never) {
            rc = sb_puts(&body, "\"\"");
        } else if (pass == 0) {
            rc = sb_printf(&body, "( %s\"\\\"\" %s \"\\\"\" %s\":\" %s%s %s_c%d )?", ws, other.s, ws, ws, addl_rule.s, base.s, n);
        } else {
            rc = sb_printf(&body, "( %s\",\" %s\"\\\"\" %s \"\\\"\" %s\":\" %s%s )*", ws, ws, other.s, ws, ws, addl_rule.s);
        }
        if (!rc) rc = sc_rule(c, &nm, &body);
    }
    for (int j = n - 1; j >= 0 && !rc; j--) {
        for (int pass = 0; pass < 2 && !rc; pass++) {
            body.len = 0;
            rname nm;
            rn_printf(&nm, "%s_%c%d", base.s, pass ? 'c' : 'f', j);
            if (keys[j].rule.s[0]) {
                rc = sb_printf(&body, "%s%s", ws, pass ? "\",\" " : "");
                if (!rc && pass) rc = sb_puts(&body, ws);
                if (!rc) rc = gb_json_string(&body, keys[j].name, strlen(keys[j].name));
                if (!rc) rc = sb_printf(&body, " %s\":\" %s%s %s_c%d", ws, ws, keys[j].rule.s, base.s, j + 1);
                if (!rc && !keys[j].required) rc = sb_printf(&body, " | %s_%c%d", base.s, pass ? 'c' : 'f', j + 1);
            } else {
                rc = sb_printf(&body, "%s_%c%d", base.s, pass ? 'c' : 'f', j + 1);
            }
            if (!rc) rc = sc_rule(c, &nm, &body);
        }
    }
    if (!rc) rc = sb_printf(b, "\"{\" %s_f0 %s\"}\"", base.s, ws);
    free(body.s);
    free(keys);
    return rc;
}

/* ---- arrays -------------------------------------------------------------------------- */

static vllm_status gen_array(sc *c, json_t *s, strbuf *b, bool *never) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *addi = json_object_get(s, "additionalItems");
    vllm_status rc = VLLM_OK;
    *never = false;
    if (json_is_true(json_object_get(s, "uniqueItems"))) {
        int64_t mx;
        bool h;
        if ((rc = get_count(c, s, "maxItems", &mx, &h))) return rc;
        if (!h || mx > 1) return sc_unsupported(c, "uniqueItems");
    }
    if (json_object_get(s, "unevaluatedItems") && !json_is_true(json_object_get(s, "unevaluatedItems")) &&
        !(json_is_false(json_object_get(s, "unevaluatedItems")) && items && !json_is_array(items)))
        return sc_unsupported(c, "unevaluatedItems");
    json_t *pre = NULL, *rest = NULL;
    const char *pre_kw = NULL, *rest_kw = NULL;
    if (json_is_array(items)) { pre = items; pre_kw = "items"; rest = addi; rest_kw = "additionalItems"; }
    else if (prefix) {
        if (!json_is_array(prefix)) return sc_err(c, VLLM_ERR_INVALID, "prefixItems must be an array");
        pre = prefix; pre_kw = "prefixItems"; rest = items; rest_kw = "items";
    } else { rest = items; rest_kw = "items"; }
    int64_t mn = 0, mx = -1;
    bool h;
    if ((rc = get_count(c, s, "minItems", &mn, &h))) return rc;
    if ((rc = get_count(c, s, "maxItems", &mx, &h))) return rc;
    if (!h) mx = -1;
    size_t k = pre ? json_array_size(pre) : 0;
    rname *pr = calloc(k + 1, sizeof *pr);
    if (!pr) return vllm_error(VLLM_ERR_NOMEM, "schema: out of memory");
    for (size_t i = 0; i < k && !rc; i++) {
        size_t old = path_push_i(c, pre_kw, i);
        rc = gen(c, json_array_get(pre, i), &pr[i]);
        path_pop(c, old);
    }
    rname rr = {{0}};
    if (!rc) {
        if (!rest) rn_shared(c, &rr, S_VAL, "val");
        else rc = gen_at(c, rest, rest_kw, &rr);
    }
    if (rc) { free(pr); return rc; }
    /* element j is pr[j] (j < k) or rr; the prefix ends at its first element
     * that matches nothing, the array at cap elements */
    size_t kk = 0;
    while (kk < k && pr[kk].s[0]) kk++;
    int64_t cap = kk < k ? (int64_t)kk : rr.s[0] ? -1 : (int64_t)k;  /* -1: unbounded */
    if (mx >= 0 && (cap < 0 || mx < cap)) cap = mx;
    if (cap >= 0 && cap < mn) { free(pr); *never = true; return VLLM_OK; }
    const char *ws = c->ws;
    rname base;
    rn_new(c, &base);
    strbuf body = {0};
    /* T_j: what may follow the first j elements, 1 <= j <= jmax */
    int64_t jmax = (int64_t)k;
    if (cap >= 0 && cap < jmax) jmax = cap;
    if (jmax < 1) jmax = 1;
    for (int64_t j = jmax; j >= 1 && !rc; j--) {
        body.len = 0;
        bool first = true;
        if (j < (int64_t)k && (cap < 0 || j < cap)) {
            if (j >= mn) { rc = sb_puts(&body, "\"\" | "); }
            if (!rc) rc = sb_printf(&body, "%s\",\" %s%s %s_t%" PRId64, ws, ws, pr[j].s, base.s, j + 1);
            first = false;
        } else if (j >= (int64_t)k && rr.s[0] && (cap < 0 || j < cap)) {
            int64_t lo = mn > j ? mn - j : 0;
            if (cap < 0) rc = sb_printf(&body, "( %s\",\" %s%s ){%" PRId64 ",}", ws, ws, rr.s, lo);
            else rc = sb_printf(&body, "( %s\",\" %s%s ){%" PRId64 ",%" PRId64 "}", ws, ws, rr.s, lo, cap - j);
            first = false;
        }
        if (first && !rc) rc = sb_puts(&body, "\"\"");  /* j == cap >= mn */
        rname nm;
        rn_printf(&nm, "%s_t%" PRId64, base.s, j);
        if (!rc) rc = sc_rule(c, &nm, &body);
    }
    if (!rc) {
        const char *e0 = k ? pr[0].s : rr.s;
        if (mn == 0 && cap == 0) rc = sb_printf(b, "\"[\" %s\"]\"", ws);
        else if (mn == 0) rc = sb_printf(b, "(\"[\" %s\"]\" | \"[\" %s%s %s_t1 %s\"]\")", ws, ws, e0, base.s, ws);
        else rc = sb_printf(b, "\"[\" %s%s %s_t1 %s\"]\"", ws, e0, base.s, ws);
    }
    free(body.s);
    free(pr);
    return rc;
}

/* ---- schemas -------------------------------------------------------------------------- */

static vllm_status check_keywords(sc *c, json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!kw_constrains(k, v)) continue;
        if (in_list(kw_unsupported, k)) {
            if (!strcmp(k, "not")) {
                /* not with an impossible schema (false) is "true"; the rest is not supported */
                if (json_is_false(v)) continue;
            }
            if (!strcmp(k, "dependencies") || !strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas")) {
                if (json_is_object(v) && json_object_size(v) == 0) continue;
            }
            return sc_unsupported(c, k);
        }
    }
    return VLLM_OK;
}

static vllm_status gen_body(sc *c, json_t *s, strbuf *b, bool *never);

/* anyOf / oneOf: the alternatives, each with the siblings merged in */
static bool provably_disjoint(sc *c, json_t *a, json_t *b);
static json_t *deref(sc *c, json_t *s);

/* oneOf whose branches only require keys (R_i): exactly one matches when
 * the instance has R_i and, for every other j, lacks a key of R_j \ R_i;
 * as anyOf alternatives {required: R_i, properties: {k: false, ...}} (one
 * per choice of the missing keys, at most ST_SCHEMA_MAX_BRANCHES), or NULL
 * when the branches are not of that form. */
static json_t *one_of_required(sc *c, json_t *alts) {
    size_t n = json_array_size(alts), i, j;
    json_t *e;
    json_array_foreach(alts, i, e) {
        json_t *d = deref(c, e);
        if (!json_is_object(d) || !json_is_array(json_object_get(d, "required"))) return NULL;
        const char *k;
        json_t *v;
        json_object_foreach(d, k, v) if (kw_constrains(k, v) && strcmp(k, "required")) return NULL;
    }
    json_t *out = json_array();
    for (i = 0; i < n; i++) {
        json_t *ri = json_object_get(deref(c, json_array_get(alts, i)), "required");
        json_t *choices = json_array();  /* each: an array of keys to forbid */
        json_array_append_new(choices, json_array());
        bool dead = false;
        for (j = 0; j < n && !dead; j++) {
            if (j == i) continue;
            json_t *rj = json_object_get(deref(c, json_array_get(alts, j)), "required");
            json_t *miss = json_array();
            size_t q, r;
            json_t *x, *y;
            json_array_foreach(rj, q, x) {
                bool in = false;
                json_array_foreach(ri, r, y) if (json_equal(x, y)) in = true;
                if (!in) json_array_append(miss, x);
            }
            if (!json_array_size(miss)) dead = true;  /* R_j within R_i: branch j always matches too */
            json_t *next = json_array();
            json_array_foreach(choices, q, x) json_array_foreach(miss, r, y) {
                json_t *f = json_copy(x);
                json_array_append(f, y);
                json_array_append_new(next, f);
            }
            json_decref(miss);
            json_decref(choices);
            choices = next;
            if (json_array_size(choices) > ST_SCHEMA_MAX_BRANCHES) { json_decref(choices); json_decref(out); return NULL; }
        }
        size_t q;
        json_t *f;
        if (!dead) json_array_foreach(choices, q, f) {
            json_t *props = json_object();
            size_t r;
            json_t *k;
            json_array_foreach(f, r, k) if (json_is_string(k)) json_object_set_new(props, json_string_value(k), json_false());
            json_array_append_new(out, json_pack("{s:O, s:o}", "required", ri, "properties", props));
        }
        json_decref(choices);
    }
    if (!json_array_size(out)) json_array_append_new(out, json_false());
    return out;
}

/* oneOf as anyOf of differences: branch i merged with not-branch-j for
 * every j whose merged form (merged[j], with the siblings) it may overlap;
 * NULL (error cleared) when a negation or a merge is not exact */
static json_t *one_of_difference(sc *c, json_t *alts, json_t **merged) {
    size_t n = json_array_size(alts);
    json_t *out = json_array();
    for (size_t i = 0; i < n && out; i++) {
        json_t *acc = json_incref(json_array_get(alts, i));
        for (size_t j = 0; j < n && acc; j++) {
            if (j == i || provably_disjoint(c, merged[i], merged[j])) continue;
            vllm_status rc = VLLM_OK;
            json_t *nj = negate(c, json_array_get(alts, j), 0, &rc);
            json_t *m = nj ? merge2(c, acc, nj, &rc) : NULL;
            json_decref(nj);
            json_decref(acc);
            acc = m;
        }
        if (acc) json_array_append_new(out, acc);
        else { json_decref(out); out = NULL; }
    }
    return out;
}

static vllm_status gen_alts(sc *c, json_t *s, const char *kw, strbuf *b, bool *never) {
    json_t *alts = json_object_get(s, kw);
    json_t *rewritten = NULL;
    if (!strcmp(kw, "oneOf") && json_is_array(alts) && (rewritten = one_of_required(c, alts))) {
        /* exact as anyOf: no disjointness check below */
        json_t *s2 = json_copy(s);
        json_object_del(s2, "oneOf");
        json_object_set_new(s2, "anyOf", rewritten);
        vllm_status rc = gen_alts(c, s2, "anyOf", b, never);
        json_decref(s2);
        return rc;
    }
    if (!json_is_array(alts) || !json_array_size(alts)) return sc_err(c, VLLM_ERR_INVALID, "%s must be a non-empty array", kw);
    if (json_array_size(alts) > ST_SCHEMA_MAX_BRANCHES) return sc_err(c, VLLM_ERR_UNSUPPORTED, "%s has more than %d branches", kw, ST_SCHEMA_MAX_BRANCHES);
    size_t b_len0 = b->len;
    json_t *sib = json_copy(s);
    json_object_del(sib, kw);
    bool has_sib = false;
    const char *k;
    json_t *v;
    json_object_foreach(sib, k, v) if (kw_constrains(k, v)) has_sib = true;
    vllm_status rc = sb_puts(b, "(");
    bool first = true;
    size_t i;
    json_t *e;
    json_t **merged = calloc(json_array_size(alts), sizeof *merged);
    if (!merged) { json_decref(sib); return vllm_error(VLLM_ERR_NOMEM, "schema: out of memory"); }
    json_array_foreach(alts, i, e) {
        if (rc) break;
        size_t old = path_push_i(c, kw, i);
        merged[i] = has_sib ? merge2(c, sib, e, &rc) : json_incref(e);
        path_pop(c, old);
    }
    if (!rc && !strcmp(kw, "oneOf")) {
        /* exactly one: as anyOf when no instance can match two branches;
         * else branch i and the negation of every branch j it may overlap
         * (a difference, exact where negate has a positive form) */
        size_t n = json_array_size(alts);
        json_t *diff = NULL;
        for (size_t x = 0; x < n && !rc; x++)
            for (size_t y = x + 1; y < n && !rc; y++)
                if (!provably_disjoint(c, merged[x], merged[y]) && !diff) {
                    diff = n <= 16 ? one_of_difference(c, alts, merged) : NULL;
                    if (!diff)
                        rc = sc_err(c, VLLM_ERR_UNSUPPORTED, "oneOf: branches %zu and %zu may both match (only provably disjoint branches, or branches whose overlap can be negated exactly, are supported; anyOf may be what you mean)", x, y);
                }
        if (diff) {
            for (size_t q = 0; q < n; q++) json_decref(merged[q]);
            free(merged);
            b->len = b_len0;  /* the "(" written above */
            if (b->s) b->s[b_len0] = 0;
            json_t *s2 = json_copy(s);
            json_object_del(s2, "oneOf");
            json_object_set_new(s2, "anyOf", diff);
            rc = gen_alts(c, s2, "anyOf", b, never);
            json_decref(s2);
            json_decref(sib);
            return rc;
        }
    }
    json_array_foreach(alts, i, e) {
        if (rc) break;
        rname r;
        size_t old = path_push_i(c, kw, i);
        rc = gen(c, merged[i], &r);
        path_pop(c, old);
        if (rc || !r.s[0]) continue;
        if (!first) rc = sb_puts(b, " | ");
        first = false;
        if (!rc) rc = sb_puts(b, r.s);
    }
    for (i = 0; i < json_array_size(alts); i++) json_decref(merged[i]);
    free(merged);
    if (!rc) rc = sb_puts(b, ")");
    *never = first;
    json_decref(sib);
    return rc;
}

/* a bare {"$ref"} followed (a few steps), for looking inside */
static json_t *deref(sc *c, json_t *s) {
    for (int k = 0; k < 8 && json_is_object(s) && json_object_get(s, "$ref"); k++) {
        char *ptr = NULL;
        vllm_status rc = VLLM_OK;
        json_t *t = ref_resolve(c, json_string_value(json_object_get(s, "$ref")), &ptr, &rc);
        free(ptr);
        if (!t) return NULL;
        s = t;
    }
    return s;
}

/* the types a schema's instances can have (enum/const narrow them) */
static unsigned value_types(sc *c, json_t *s) {
    vllm_status rc = VLLM_OK;
    unsigned m = type_mask(c, s, &rc);
    if (rc) return T_ALL;
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    json_t *list = e ? json_incref(e) : k ? json_pack("[O]", k) : NULL;
    if (json_is_array(list)) {
        unsigned t = 0;
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) switch (json_typeof(v)) {
            case JSON_NULL: t |= T_NULL; break;
            case JSON_TRUE: case JSON_FALSE: t |= T_BOOL; break;
            case JSON_OBJECT: t |= T_OBJ; break;
            case JSON_ARRAY: t |= T_ARR; break;
            case JSON_STRING: t |= T_STR; break;
            default: t |= T_NUM | T_INT; break;
        }
        m &= t;
    }
    json_decref(list);
    return m;
}

/* Can no instance be valid under both a and b? false when not provable.
 * Checks the types, const/enum values against the other side's keywords,
 * and objects with a property both require whose values are disjoint (or
 * that one side forbids). Clears the error message it may leave. */
static bool provably_disjoint(sc *c, json_t *a, json_t *b) {
    a = deref(c, a);
    b = deref(c, b);
    if (!a || !b || !json_is_object(a) || !json_is_object(b)) return json_is_false(a) || json_is_false(b);
    if (json_object_get(a, "oneOf") || json_object_get(a, "allOf") || json_object_get(b, "oneOf") || json_object_get(b, "allOf"))
        return false;
    /* a side with anyOf: disjoint when each of its branches (merged with its siblings) is */
    for (int side = 0; side < 2; side++) {
        json_t *x = side ? b : a, *y = side ? a : b;
        json_t *alts = json_object_get(x, "anyOf");
        if (!alts) continue;
        if (!json_is_array(alts) || c->disjoint_depth >= 4 || ++c->disjoint_steps > 20000) return false;
        c->disjoint_depth++;
        json_t *rest = json_copy(x);
        json_object_del(rest, "anyOf");
        bool all = true;
        size_t i;
        json_t *e;
        json_array_foreach(alts, i, e) {
            vllm_status rc = VLLM_OK;
            json_t *m = merge2(c, rest, e, &rc);
            all = m && !rc && provably_disjoint(c, m, y);
            json_decref(m);
            if (!all) break;
        }
        json_decref(rest);
        c->disjoint_depth--;
        return all;
    }
    unsigned ta = value_types(c, a), tb = value_types(c, b);
    if (!(ta & tb)) return true;
    /* enumerated values: each one invalid on the other side */
    for (int side = 0; side < 2; side++) {
        json_t *x = side ? b : a, *y = side ? a : b;
        json_t *e = json_object_get(x, "enum"), *k = json_object_get(x, "const");
        json_t *list = e ? json_incref(e) : k ? json_pack("[O]", k) : NULL;
        if (!json_is_array(list)) { json_decref(list); continue; }
        bool all_out = true;
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            json_t *ye = json_object_get(y, "enum"), *yk = json_object_get(y, "const");
            int ok;
            if (ye || yk) {
                ok = 0;
                if (yk && json_equal(yk, v)) ok = 1;
                size_t j;
                json_t *w;
                if (json_is_array(ye)) json_array_foreach(ye, j, w) if (json_equal(w, v)) ok = 1;
            } else {
                json_t *y2 = json_copy(y);
                /* value_ok knows the simple keywords; objects' keywords make it refuse */
                ok = json_is_object(v) || json_is_array(v) ? -1 : value_ok(c, y2, v);
                json_decref(y2);
            }
            if (ok != 0) { all_out = false; break; }
        }
        json_decref(list);
        if (all_out) return true;
    }
    /* objects: a property both require, with disjoint values or forbidden on one side */
    if ((ta & tb) == T_OBJ) {
        json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
        json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
        json_t *aa = json_object_get(a, "additionalProperties"), *ab = json_object_get(b, "additionalProperties");
        for (int side = 0; side < 2; side++) {
            json_t *r = side ? rb : ra;
            size_t i;
            json_t *n;
            if (!json_is_array(r)) continue;
            json_array_foreach(r, i, n) {
                if (!json_is_string(n)) continue;
                const char *key = json_string_value(n);
                json_t *sa = pa ? json_object_get(pa, key) : NULL, *sb = pb ? json_object_get(pb, key) : NULL;
                if (!sa) sa = aa;
                if (!sb) sb = ab;
                json_t *other = side ? sa : sb;  /* the side that may not require it */
                if (json_is_false(other)) return true;
                bool both = false;
                size_t j;
                json_t *m;
                json_t *r2 = side ? ra : rb;
                if (json_is_array(r2)) json_array_foreach(r2, j, m) if (json_equal(m, n)) both = true;
                if (both && sa && sb && provably_disjoint(c, sa, sb)) return true;
            }
        }
    }
    return false;
}

/* the alternatives for schema s (flattened: no allOf, no $ref with siblings) */
static vllm_status gen_body(sc *c, json_t *s, strbuf *b, bool *never) {
    vllm_status rc;
    *never = false;
    if ((rc = check_keywords(c, s))) return rc;
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any && one) {
        /* anyOf within the oneOf's branches */
        return sc_err(c, VLLM_ERR_UNSUPPORTED, "anyOf together with oneOf is not supported");
    }
    if (any) return gen_alts(c, s, "anyOf", b, never);
    if (one) return gen_alts(c, s, "oneOf", b, never);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return gen_enum(c, s, b, never);
    unsigned m = type_mask(c, s, &rc);
    if (rc) return rc;
    if (m & T_NUM) m &= ~(unsigned)T_INT;
    rc = sb_puts(b, "(");
    bool first = true;
    for (unsigned bit = 1; bit <= T_INT && !rc; bit <<= 1) {
        if (!(m & bit)) continue;
        strbuf t = {0};
        bool nv = false;
        switch (bit) {
        case T_NULL: rc = sb_puts(&t, "\"null\""); break;
        case T_BOOL: rc = sb_puts(&t, "(\"true\" | \"false\")"); break;
        case T_OBJ: rc = gen_object(c, s, &t, &nv); break;
        case T_ARR: rc = gen_array(c, s, &t, &nv); break;
        case T_STR:
            rc = gen_string(c, s, &t);
            if (rc == VLLM_ERR_NOT_FOUND) { rc = VLLM_OK; nv = true; }
            break;
        case T_NUM: rc = gen_number(c, s, &t, &nv); break;
        case T_INT: rc = gen_integer(c, s, &t, &nv); break;
        }
        if (!rc && !nv) {
            if (!first) rc = sb_puts(b, " | ");
            first = false;
            if (!rc) rc = sb_add(b, t.s, t.len);
        }
        free(t.s);
    }
    if (!rc) rc = sb_puts(b, ")");
    *never = first;
    return rc;
}

/* The values a schema pins its instances to (a new array), or NULL: its
 * enum / const, or those of an allOf member or a $ref target (a conjunct),
 * or the union of every anyOf / oneOf branch's (each branch pinned). */
static json_t *enum_candidates(sc *c, json_t *s, int depth, long *budget) {
    if (depth > 16 || --*budget < 0) return NULL;
    if (json_is_false(s)) return json_array();
    if (!json_is_object(s)) return NULL;
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (json_is_array(e)) return json_copy(e);
    if (k) return json_pack("[O]", k);
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        char *ptr = NULL;
        vllm_status rc = VLLM_OK;
        json_t *t = ref_resolve(c, json_string_value(ref), &ptr, &rc);
        free(ptr);
        json_t *r = t ? enum_candidates(c, t, depth + 1, budget) : NULL;
        if (r) return r;
    }
    json_t *all = json_object_get(s, "allOf");
    size_t i;
    json_t *x;
    if (json_is_array(all)) json_array_foreach(all, i, x) {
        json_t *r = enum_candidates(c, x, depth + 1, budget);
        if (r) return r;
    }
    static const char *const alt_kw[] = {"anyOf", "oneOf"};
    for (int q = 0; q < 2; q++) {
        json_t *alts = json_object_get(s, alt_kw[q]);
        if (!json_is_array(alts) || !json_array_size(alts)) continue;
        json_t *u = json_array();
        json_array_foreach(alts, i, x) {
            json_t *r = enum_candidates(c, x, depth + 1, budget);
            if (!r) { json_decref(u); u = NULL; break; }
            json_array_extend(u, r);
            json_decref(r);
        }
        if (u) return u;
    }
    return NULL;
}

/* s pinned to values (enum_candidates): the values valid under all of s,
 * checked one by one (schema_check.c), as {"enum": [...]} (a new reference);
 * NULL when s is not pinned or a value's validity cannot be told exactly
 * (then s is translated keyword by keyword, which may refuse it). */
static json_t *enum_filtered(sc *c, json_t *s) {
    json_t *cand = enum_candidates(c, s, 0, &c->pin_budget);
    if (!cand) return NULL;
    json_t *keep = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(cand, i, v) {
        int r = st_schema_check(c->doc, c->id, s, v, &c->pin_budget, NULL);
        if (r < 0) { json_decref(keep); keep = NULL; break; }
        bool dup = false;
        size_t j;
        json_t *w;
        if (r) json_array_foreach(keep, j, w) dup |= json_equal(w, v);
        if (r && !dup) json_array_append(keep, v);
    }
    json_decref(cand);
    if (!keep) return NULL;
    return json_pack("{s:o}", "enum", keep);
}

/* The rule for schema s (out->s[0] == 0: s accepts nothing). */
static vllm_status gen(sc *c, json_t *s, rname *out) {
    vllm_status rc = VLLM_OK;
    out->s[0] = 0;
    if (++c->depth > ST_SCHEMA_MAX_DEPTH) {
        c->depth--;
        return sc_err(c, VLLM_ERR_UNSUPPORTED, "schemas nest deeper than %d", ST_SCHEMA_MAX_DEPTH);
    }
    if (json_is_false(s)) goto done;
    if (is_true_schema(s)) { rn_shared(c, out, S_VAL, "val"); goto done; }
    if (!json_is_object(s)) { rc = sc_err(c, VLLM_ERR_INVALID, "a schema must be an object or a boolean"); goto done; }
    json_t *f = NULL;
    f = enum_filtered(c, s);  /* pinned to values, also through allOf / anyOf / $ref */
    if (!f) f = flatten(c, s, &rc);
    if (!f) goto done;
    json_t *ref = json_object_get(f, "$ref");
    if (ref) {
        /* a bare $ref: one rule per target, so recursion closes */
        if (!json_is_string(ref)) { rc = sc_err(c, VLLM_ERR_INVALID, "$ref must be a string"); json_decref(f); goto done; }
        char *ptr = NULL;
        json_t *target = ref_resolve(c, json_string_value(ref), &ptr, &rc);
        json_decref(f);
        if (!target) goto done;
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ptr, ptr)) {
                *out = c->refs[i].rule;
                free(ptr);
                goto done;
            }
        if (c->n_refs == c->cap_refs) {
            int nc = c->cap_refs ? 2 * c->cap_refs : 16;
            sc_ref *nr = realloc(c->refs, sizeof *nr * (size_t)nc);
            if (!nr) { free(ptr); rc = vllm_error(VLLM_ERR_NOMEM, "schema: out of memory"); goto done; }
            c->refs = nr;
            c->cap_refs = nc;
        }
        int idx = c->n_refs++;
        c->refs[idx].ptr = ptr;
        rn_new(c, &c->refs[idx].rule);
        rname r = c->refs[idx].rule;
        /* the target's own path for its errors */
        strbuf saved = c->path;
        c->path = (strbuf){0};
        for (const char *p = ptr + 1; *p; p++) {
            char ch = *p == '/' ? '.' : *p;
            if (ch == '.' && c->path.len == 0) continue;
            sb_add(&c->path, &ch, 1);
        }
        rname inner;
        rc = gen(c, target, &inner);
        free(c->path.s);
        c->path = saved;
        if (rc) goto done;
        strbuf body = {0};
        if (inner.s[0]) {
            rc = sb_puts(&body, inner.s);
        } else {
            /* a target that accepts nothing: refer to it and no alternative survives */
            c->refs[idx].rule.s[0] = 0;
            rc = sb_puts(&body, "\"\\x00\" \"\\x00\"");  /* unreachable in JSON text: no raw NUL */
        }
        if (!rc) rc = sc_rule(c, &r, &body);
        free(body.s);
        *out = inner.s[0] ? r : inner;
        goto done;
    }
    {
        strbuf body = {0};
        bool never = false;
        if (json_is_false(f)) never = true;
        else if (is_true_schema(f)) { rn_shared(c, out, S_VAL, "val"); json_decref(f); goto done; }
        else rc = gen_body(c, f, &body, &never);
        json_decref(f);
        if (!rc && !never) {
            rn_new(c, out);
            rc = sc_rule(c, out, &body);
        }
        free(body.s);
    }
done:
    c->depth--;
    return rc;
}

vllm_status st_schema_to_gbnf(const char *json, size_t len, const st_spec *opts, const char *root, strbuf *out) {
    sc c = {0};
    vllm_status rc = VLLM_OK;
    json_t *doc = NULL;
    if (!root || !*root || strlen(root) > 48) return vllm_error(VLLM_ERR_INVALID, "schema: the root rule name must have 1 to 48 characters");
    if (opts && opts->kind == ST_JSON_OBJECT) {
        doc = json_pack("{s:s}", "type", "object");
    } else {
        if (len > ST_SCHEMA_MAX_BYTES)
            return vllm_error(VLLM_ERR_UNSUPPORTED, "schema: %zu bytes is more than the %u bytes supported", len, ST_SCHEMA_MAX_BYTES);
        json_error_t je;
        doc = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (!doc) return vllm_error(VLLM_ERR_FORMAT, "schema: not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    }
    c.root = root;
    c.pin_budget = ST_SCHEMA_PIN_BUDGET;
    c.out = out;
    c.doc = doc;
    c.opts = opts;
    if (json_is_object(doc)) {
        json_t *id = json_object_get(doc, "$id");
        if (!id) id = json_object_get(doc, "id");
        if (json_is_string(id)) c.id = json_string_value(id);
    }
    if (opts && opts->disable_any_whitespace) {
        c.ws = "";
    } else {
        snprintf(c.wsname.s, sizeof c.wsname.s, "%s_ws ", root);
        c.ws = c.wsname.s;
        c.need |= S_WS;
    }
    size_t start = out->len;
    rname top;
    rc = gen(&c, doc, &top);
    if (!rc && !top.s[0]) rc = vllm_error(VLLM_ERR_INVALID, "schema: no JSON value is valid under it");
    if (!rc) rc = sb_printf(out, "%s ::= %s\n", root, top.s);
    if (!rc) rc = emit_shared(&c);
    if (!rc && out->len - start > ST_SCHEMA_MAX_GRAMMAR)
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "schema: the grammar would exceed %u bytes", ST_SCHEMA_MAX_GRAMMAR);
    if (rc) {
        out->len = start;
        if (out->s) out->s[start] = 0;
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
    free(c.refs);
    free(c.path.s);
    json_decref(doc);
    return rc;
}

/*
 * jinja_internal.h - what the lexer, parser and interpreter share: the arena,
 * tokens, the AST and the runtime value type. Not part of the public API
 * (template/jinja.h is).
 *
 * Everything here imitates @huggingface/jinja, the reference our renderings
 * must equal, including its JavaScript-isms: numbers are doubles (an "integer"
 * is a double flagged as such), strings measure and index in UTF-16 code units,
 * `==` is JavaScript's loose equality, containers compare by identity. Our
 * strings are UTF-8 (ptr + length, may hold NUL bytes); conversions to UTF-16
 * semantics happen only where the reference's results depend on them.
 *
 * Memory: one arena per compiled template (tokens, AST) and one per render
 * (every value, scope and buffer). Nothing is freed piecemeal; the arena has
 * a byte limit, which is what bounds a hostile render's memory.
 */
#ifndef VLLM_TEMPLATE_JINJA_INTERNAL_H
#define VLLM_TEMPLATE_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

/* ---- arena ---------------------------------------------------------------- */

typedef struct jinja_arena_chunk jinja_arena_chunk;
typedef struct jinja_arena {
    jinja_arena_chunk *head; /* private */
    size_t total;            /* bytes obtained from malloc so far */
    size_t limit;            /* 0 = unlimited */
    bool over_limit;         /* set once an allocation was refused by the limit */
} jinja_arena;

/* Returns n bytes aligned for any type, or NULL (malloc failed or the limit
 * would be exceeded; over_limit tells which). */
void *jinja_arena_alloc(jinja_arena *a, size_t n);
/* Copies n bytes and appends a NUL. */
char *jinja_arena_strndup(jinja_arena *a, const char *s, size_t n);
void jinja_arena_free(jinja_arena *a);

/* ---- tokens --------------------------------------------------------------- */

typedef enum jinja_token_type {
    JT_TEXT, JT_NUMBER, JT_STRING, JT_IDENT, JT_EQUALS, JT_LPAREN, JT_RPAREN,
    JT_OPEN_STMT, JT_CLOSE_STMT, JT_OPEN_EXPR, JT_CLOSE_EXPR, JT_LBRACKET, JT_RBRACKET,
    JT_LBRACE, JT_RBRACE, JT_COMMA, JT_DOT, JT_COLON, JT_PIPE,
    JT_ADDITIVE,       /* + - ~ */
    JT_MULTIPLICATIVE, /* * / // % */
    JT_POW,            /* ** */
    JT_COMPARISON,     /* < > <= >= == != */
    JT_UNARY,          /* a lone + or - in unary position */
    JT_COMMENT,
} jinja_token_type;

typedef struct jinja_token {
    jinja_token_type type;
    const char *s; /* value: text, decoded string literal, identifier, operator */
    size_t len;
    int line;      /* 1-based line in the original source */
} jinja_token;

/* Applies HF's preprocessing (trailing newline, lstrip_blocks, trim_blocks, the
 * transformers {% generation %} tag) and splits the source into tokens, which
 * live in arena a. Errors name the line. */
vllm_status jinja_lex_tokenize(jinja_arena *a, const char *src, size_t len,
                               jinja_token **tokens, size_t *n_tokens);

/* ---- AST ------------------------------------------------------------------ */

typedef enum jinja_node_kind {
    /* statements */
    JN_IF,          /* a=test, list=body, list2=alternate */
    JN_FOR,         /* a=loop var (IDENT or TUPLE), b=iterable, list=body, list2=else */
    JN_SET,         /* a=target, b=value or NULL, list=block body */
    JN_MACRO,       /* str=name, list=params (IDENT or KWARG), list2=body, flag bits: uses kwargs/varargs */
    JN_CALL_BLOCK,  /* a=CALL expression, list=caller params, list2=body, flag bits */
    JN_FILTER_BLOCK,/* a=filter (IDENT or CALL), list=body */
    JN_BREAK, JN_CONTINUE,
    /* expressions */
    JN_INT, JN_FLOAT, /* num */
    JN_STR,         /* str (also template text) */
    JN_ARRAY, JN_TUPLE, /* list */
    JN_OBJECT,      /* list=keys, list2=values */
    JN_IDENT,       /* str */
    JN_MEMBER,      /* a=object, b=property, flag=computed */
    JN_SLICE,       /* a=start, b=stop, c=step (each may be NULL) */
    JN_CALL,        /* a=callee, list=args */
    JN_UNARY,       /* op, a */
    JN_BINARY,      /* op, a, b */
    JN_FILTER,      /* a=operand, b=filter (IDENT or CALL) */
    JN_TEST,        /* a=operand, str=test name, flag=negated */
    JN_SELECT,      /* a=value, b=condition ("x if c" without else) */
    JN_TERNARY,     /* a=condition, b=if true, c=if false */
    JN_KWARG,       /* str=key, a=value */
    JN_SPREAD,      /* a (*x in a call) */
    JN_KWSPREAD,    /* a (**x in a call) */
} jinja_node_kind;

typedef enum jinja_op {
    JOP_NONE, JOP_ADD, JOP_SUB, JOP_CONCAT, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE, JOP_AND, JOP_OR, JOP_IN, JOP_NOT_IN,
    JOP_NOT, JOP_NEG, JOP_POS,
} jinja_op;

enum { JINJA_USES_KWARGS = 1, JINJA_USES_VARARGS = 2 };

typedef struct jinja_node jinja_node;
struct jinja_node {
    jinja_node_kind kind;
    jinja_op op;
    int flag;
    int line;
    const char *str;
    size_t len;
    double num;
    jinja_node *a, *b, *c;
    jinja_node **list;
    size_t n;
    jinja_node **list2;
    size_t n2;
};

/* Parses tokens into a program (a statement list). Errors name the line. */
vllm_status jinja_parse_program(jinja_arena *a, const jinja_token *tokens, size_t n_tokens,
                                jinja_node ***body, size_t *n_body);

/* The operator's source spelling, for messages. */
const char *jinja_op_str(jinja_op op);

/* ---- values --------------------------------------------------------------- */

typedef enum jv_type {
    JV_UNDEFINED, JV_NULL, JV_BOOL, JV_INT, JV_FLOAT, JV_STRING,
    JV_ARRAY, JV_TUPLE, JV_OBJECT, JV_KWARGS, JV_NAMESPACE, JV_FUNCTION,
} jv_type;

typedef struct jv jv;
typedef struct jinja_env jinja_env;

typedef struct jv_entry {
    const char *key;
    size_t klen;
    jv *val;
} jv_entry;

/* What a function value does when called. */
typedef enum jv_fn_kind {
    JF_RAISE_EXCEPTION, JF_RANGE, JF_STRFTIME_NOW, JF_NAMESPACE,
    JF_MACRO,          /* node = JN_MACRO */
    JF_CALLER,         /* node = JN_CALL_BLOCK, env = its scope */
    JF_METHOD,         /* self.method_name, e.g. "abc".upper */
} jv_fn_kind;

struct jv {
    jv_type type;
    union {
        bool b;
        double num; /* JV_INT and JV_FLOAT */
        struct { const char *s; size_t len; } str;
        struct { jv **v; size_t n; } arr; /* JV_ARRAY, JV_TUPLE (immutable) */
        struct { jv_entry *e; size_t n, cap; } obj; /* JV_OBJECT, JV_KWARGS, JV_NAMESPACE */
        struct {
            jv_fn_kind kind;
            const char *name; /* method name or macro name */
            jv *self;
            const jinja_node *node;
            jinja_env *env;
        } fn;
    } u;
};

/* Shared constants (never written). */
extern jv jv_undefined_value, jv_null_value, jv_true_value, jv_false_value;
#define JV_UNDEF (&jv_undefined_value)
#define JV_NULLV (&jv_null_value)
#define JV_BOOLV(x) ((x) ? &jv_true_value : &jv_false_value)

/* The reference's type names ("StringValue", ...), for messages. */
const char *jv_type_name(const jv *v);

/* Growable byte buffer in an arena; each buffer is capped at `max` bytes. */
typedef struct jinja_buf {
    jinja_arena *arena;
    char *p;
    size_t len, cap, max;
    bool failed; /* an append was refused (limit or memory) */
} jinja_buf;

void jinja_buf_init(jinja_buf *b, jinja_arena *a, size_t max);
bool jinja_buf_append(jinja_buf *b, const char *s, size_t n);
bool jinja_buf_appendc(jinja_buf *b, char c);

/* ---- text helpers (JavaScript semantics on UTF-8) ------------------------- */

/* Decodes one code point at s[i] (< n); returns its byte length (>= 1). */
size_t jinja_utf8_decode(const char *s, size_t n, size_t i, uint32_t *cp);
/* Encodes cp into out (4 bytes); returns the length. */
size_t jinja_utf8_encode(uint32_t cp, char *out);
/* Is cp in JavaScript's \s set (WhiteSpace + LineTerminator)? */
bool jinja_js_is_space(uint32_t cp);
/* Byte length of the JS whitespace character at s[i], or 0. */
size_t jinja_js_space_at(const char *s, size_t n, size_t i);
/* Length in UTF-16 code units. */
size_t jinja_utf16_length(const char *s, size_t n);
/* Number formatting as JavaScript's Number.prototype.toString(); out >= 32 bytes. */
void jinja_js_number(double x, char *out);

/* ---- rendering ------------------------------------------------------------ */

/* One render's state: its arena, limits and the first error. */
typedef struct jinja_render {
    jinja_arena arena;
    size_t max_output; /* bytes, per buffer and for the result */
    int depth;         /* current recursion depth (evaluation, JSON, comparisons) */
    int max_depth;
    int64_t now;       /* unix seconds for strftime_now */
    vllm_status rc;    /* VLLM_OK until the first error */
    int loop_line;     /* line of the last break/continue, for "outside of a loop" */
} jinja_render;

/* Records "chat template line N: <message>" (the first error wins) and returns
 * false, so failing paths read `return jinja_fail(R, line, "...", ...);`. */
bool jinja_fail(jinja_render *R, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The error for a refused allocation: memory limit, output limit or malloc. */
bool jinja_fail_alloc(jinja_render *R, int line);
/* Depth guard around recursive helpers. */
bool jinja_enter(jinja_render *R, int line);
static inline void jinja_leave(jinja_render *R) { R->depth--; }

/* Constructors; all return NULL after recording the error. */
jv *jv_string(jinja_render *R, const char *s, size_t len, int line);      /* copies */
jv *jv_string_ref(jinja_render *R, const char *s, size_t len, int line);  /* borrows s */
jv *jv_number(jinja_render *R, double x, bool is_int, int line);
jv *jv_array(jinja_render *R, jv_type type, size_t n, int line);          /* n slots, filled by caller */
jv *jv_object(jinja_render *R, jv_type type, size_t cap, int line);
jv *jv_function(jinja_render *R, jv_fn_kind kind, int line);
bool jv_object_set(jinja_render *R, jv *obj, const char *key, size_t klen, jv *val, int line);
jv *jv_object_get(const jv *obj, const char *key, size_t klen);            /* NULL if absent */
bool jv_truthy(const jv *v);
bool jv_is_string(const jv *v, const char *s);

/* JSON (jansson) to values, with JavaScript's object key order. */
struct json_t;
jv *jv_from_json(jinja_render *R, const struct json_t *j);

/* RuntimeValue.toString(): what {{ v }} prints. */
bool jv_write_string(jinja_render *R, const jv *v, jinja_buf *out, int line);
/* JavaScript's String(v.value): what "+" and "~" concatenate. */
bool jv_write_js(jinja_render *R, const jv *v, jinja_buf *out, int line);
/* Array.prototype.join on the values (none/undefined become ""). */
bool jv_write_join(jinja_render *R, const jv *arr, const char *sep, size_t sep_len, jinja_buf *out, int line);

typedef struct jv_json_opts {
    int indent;              /* 0: single line */
    bool ensure_ascii;
    const char *item_sep, *key_sep; /* NULL: ", " / ": " (or "," with indent) */
    size_t item_sep_len, key_sep_len;
    bool undefined_is_null;  /* tojson: true; toString: false ("undefined") */
} jv_json_opts;
bool jv_write_json(jinja_render *R, const jv *v, const jv_json_opts *o, int depth, jinja_buf *out, int line);

/* JavaScript == on the underlying values (containers by identity). */
bool jv_loose_equal(jinja_render *R, const jv *a, const jv *b, bool *eq, int line);
/* JavaScript === */
bool jv_strict_equal(const jv *a, const jv *b);
/* The reference's compareRuntimeValues (sort, dictsort): -1/0/1 in *cmp. */
bool jv_compare(jinja_render *R, const jv *a, const jv *b, bool case_sensitive, int *cmp, int line);

/* String transforms with JavaScript semantics; results live in the arena. */
jv *jv_upper(jinja_render *R, const jv *s, int line);
jv *jv_lower(jinja_render *R, const jv *s, int line);
jv *jv_capitalize(jinja_render *R, const jv *s, int line);
jv *jv_title(jinja_render *R, const jv *s, int line);
/* trim / trimStart / trimEnd (JS whitespace) */
jv *jv_trim(jinja_render *R, const jv *s, bool start, bool end, int line);
/* Runs a parsed program with the members of context (a JSON object) as
 * globals, writing to out. Returns R->rc. */
vllm_status jinja_eval_program(jinja_render *R, jinja_node *const *body, size_t n, const struct json_t *context,
                               jinja_buf *out);
/* Does any for loop iterate over `<x>.content` / `<x>['content']`? */
bool jinja_eval_iterates_content(jinja_node *const *body, size_t n);

/* parseInt(s, 10) / parseFloat(s); NaN when no number. */
double jv_parse_int(const char *s, size_t n);
double jv_parse_float(const char *s, size_t n);

#endif

/*
 * jinja_parse.c - tokens to an AST by recursive descent, with the grammar and
 * precedence of @huggingface/jinja (lowest first):
 *
 *   ternary / select     a if c else b, a if c
 *   or, and, not
 *   comparison           == != < > <= >= in, not in   (left-assoc, one level)
 *   additive             + - ~
 *   multiplicative       * / // %
 *   power                **  (left-assoc, as Jinja)
 *   test                 x is [not] name
 *   filter               x | name, x | name(args)
 *   unary sign           - +
 *   call / member        f(args) x.y x[i] x[a:b:c]
 *   primary              literals, identifiers, (expr), [list], {dict}
 *
 * Statements: if/elif/else, for/else, set (also block set), macro, call,
 * filter, break, continue. Anything else ({% include %}, {% raw %}, ...) is an
 * error naming it and its line. Parser recursion is capped so a hostile
 * template cannot exhaust the stack.
 */
#include "base/error.h"
#include "template/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PARSE_MAX_DEPTH = 200 };

typedef struct parser {
    jinja_arena *arena;
    const jinja_token *tok;
    size_t n, cur;
    int depth;
} parser;

static const char *token_name(jinja_token_type t) {
    switch (t) {
    case JT_TEXT: return "text";
    case JT_NUMBER: return "number";
    case JT_STRING: return "string";
    case JT_IDENT: return "identifier";
    case JT_EQUALS: return "'='";
    case JT_LPAREN: return "'('";
    case JT_RPAREN: return "')'";
    case JT_OPEN_STMT: return "'{%'";
    case JT_CLOSE_STMT: return "'%}'";
    case JT_OPEN_EXPR: return "'{{'";
    case JT_CLOSE_EXPR: return "'}}'";
    case JT_LBRACKET: return "'['";
    case JT_RBRACKET: return "']'";
    case JT_LBRACE: return "'{'";
    case JT_RBRACE: return "'}'";
    case JT_COMMA: return "','";
    case JT_DOT: return "'.'";
    case JT_COLON: return "':'";
    case JT_PIPE: return "'|'";
    case JT_ADDITIVE: return "additive operator";
    case JT_MULTIPLICATIVE: return "multiplicative operator";
    case JT_POW: return "'**'";
    case JT_COMPARISON: return "comparison operator";
    case JT_UNARY: return "unary operator";
    case JT_COMMENT: return "comment";
    }
    return "token";
}

const char *jinja_op_str(jinja_op op) {
    static const char *names[] = {
        [JOP_NONE] = "?", [JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_CONCAT] = "~", [JOP_MUL] = "*",
        [JOP_DIV] = "/", [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**", [JOP_EQ] = "==",
        [JOP_NE] = "!=", [JOP_LT] = "<", [JOP_GT] = ">", [JOP_LE] = "<=", [JOP_GE] = ">=",
        [JOP_AND] = "and", [JOP_OR] = "or", [JOP_IN] = "in", [JOP_NOT_IN] = "not in",
        [JOP_NOT] = "not", [JOP_NEG] = "-", [JOP_POS] = "+",
    };
    return names[op];
}

static int cur_line(const parser *P) {
    if (P->cur < P->n) return P->tok[P->cur].line;
    return P->n ? P->tok[P->n - 1].line : 1;
}

static vllm_status perr(const parser *P, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: %s", cur_line(P), msg);
}

static vllm_status nomem(void) { return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory"); }

static jinja_node *node_new(parser *P, jinja_node_kind kind, int line) {
    jinja_node *nd = jinja_arena_alloc(P->arena, sizeof *nd);
    if (!nd) return NULL;
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->line = line;
    return nd;
}

/* A growable node list; becomes (list, n) of a node when done. */
typedef struct nlist {
    jinja_node **v;
    size_t n, cap;
} nlist;

static bool nlist_push(parser *P, nlist *l, jinja_node *nd) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jinja_node **v = jinja_arena_alloc(P->arena, cap * sizeof *v);
        if (!v) return false;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = nd;
    return true;
}

static bool is(const parser *P, jinja_token_type t) { return P->cur < P->n && P->tok[P->cur].type == t; }

static bool tok_is_ident(const parser *P, size_t i, const char *name) {
    return i < P->n && P->tok[i].type == JT_IDENT && strlen(name) == P->tok[i].len &&
           !memcmp(P->tok[i].s, name, P->tok[i].len);
}

static bool is_ident(const parser *P, const char *name) { return tok_is_ident(P, P->cur, name); }

/* Is the next thing "{% name" for one of the names (NULL-terminated)? */
static bool is_statement(const parser *P, const char *const *names) {
    if (!is(P, JT_OPEN_STMT)) return false;
    for (; *names; names++)
        if (tok_is_ident(P, P->cur + 1, *names)) return true;
    return false;
}

static vllm_status expect(parser *P, jinja_token_type t) {
    if (P->cur >= P->n) {
        char what[64];
        snprintf(what, sizeof what, "%s", token_name(t));
        return perr(P, "unexpected end of template, expected %s", what);
    }
    if (P->tok[P->cur].type != t) {
        char msg[160];
        snprintf(msg, sizeof msg, "expected %s, got %s", token_name(t), token_name(P->tok[P->cur].type));
        return perr(P, "%s", msg);
    }
    P->cur++;
    return VLLM_OK;
}

static vllm_status expect_ident(parser *P, const char *name) {
    if (!is_ident(P, name)) return perr(P, "expected '%s'", name);
    P->cur++;
    return VLLM_OK;
}

static char *tok_str(parser *P, const jinja_token *t) { return jinja_arena_strndup(P->arena, t->s, t->len); }

static vllm_status parse_any(parser *P, jinja_node **out);
static vllm_status parse_expression(parser *P, jinja_node **out);
static vllm_status parse_primary(parser *P, jinja_node **out);
static vllm_status parse_args(parser *P, bool parameters, nlist *args);
static vllm_status parse_call(parser *P, jinja_node *callee, jinja_node **out);
static vllm_status parse_member(parser *P, jinja_node *object, jinja_node **out);

static vllm_status enter(parser *P) {
    if (++P->depth > PARSE_MAX_DEPTH) return perr(P, "%s", "template nesting is too deep");
    return VLLM_OK;
}

/* Parses statements until one of `ends` (a "{% name" lookahead). */
static vllm_status parse_body(parser *P, const char *const *ends, const char *closer, const char *opener,
                              int open_line, nlist *body) {
    while (!is_statement(P, ends)) {
        if (P->cur >= P->n) {
            char msg[128];
            snprintf(msg, sizeof msg, "missing {%% %s %%} for the {%% %s %%} on line %d", closer, opener,
                     open_line);
            return vllm_error(VLLM_ERR_FORMAT, "chat template line %d: %s", cur_line(P), msg);
        }
        jinja_node *nd = NULL;
        vllm_status rc = parse_any(P, &nd);
        if (rc) return rc;
        if (nd && !nlist_push(P, body, nd)) return nomem();
    }
    return VLLM_OK;
}

/* expr (, expr)* -> the expression or a JN_TUPLE */
static vllm_status parse_sequence(parser *P, bool primary, jinja_node **out) {
    int line = cur_line(P);
    jinja_node *first;
    vllm_status rc = primary ? parse_primary(P, &first) : parse_expression(P, &first);
    if (rc) return rc;
    if (!is(P, JT_COMMA)) {
        *out = first;
        return VLLM_OK;
    }
    nlist l = {0};
    if (!nlist_push(P, &l, first)) return nomem();
    while (is(P, JT_COMMA)) {
        P->cur++;
        jinja_node *nd;
        rc = primary ? parse_primary(P, &nd) : parse_expression(P, &nd);
        if (rc) return rc;
        if (!nlist_push(P, &l, nd)) return nomem();
    }
    jinja_node *t = node_new(P, JN_TUPLE, line);
    if (!t) return nomem();
    t->list = l.v, t->n = l.n;
    *out = t;
    return VLLM_OK;
}

/* ---- expressions ---------------------------------------------------------- */

static vllm_status parse_or(parser *P, jinja_node **out);

static vllm_status parse_if_expression(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *a = NULL;
    if ((rc = enter(P))) return rc;
    if ((rc = parse_or(P, &a))) return rc;
    if (is_ident(P, "if")) {
        int line = cur_line(P);
        P->cur++;
        jinja_node *test;
        if ((rc = parse_or(P, &test))) return rc;
        if (is_ident(P, "else")) {
            P->cur++;
            jinja_node *f;
            if ((rc = parse_if_expression(P, &f))) return rc;
            jinja_node *t = node_new(P, JN_TERNARY, line);
            if (!t) return nomem();
            t->a = test, t->b = a, t->c = f;
            a = t;
        } else {
            jinja_node *s = node_new(P, JN_SELECT, line);
            if (!s) return nomem();
            s->a = a, s->b = test;
            a = s;
        }
    }
    P->depth--;
    *out = a;
    return VLLM_OK;
}

static vllm_status parse_expression(parser *P, jinja_node **out) { return parse_if_expression(P, out); }

static vllm_status binary(parser *P, jinja_op op, int line, jinja_node *l, jinja_node *r, jinja_node **out) {
    jinja_node *b = node_new(P, JN_BINARY, line);
    if (!b) return nomem();
    b->op = op, b->a = l, b->b = r;
    *out = b;
    return VLLM_OK;
}

static vllm_status parse_and(parser *P, jinja_node **out);
static vllm_status parse_not(parser *P, jinja_node **out);
static vllm_status parse_comparison(parser *P, jinja_node **out);
static vllm_status parse_additive(parser *P, jinja_node **out);
static vllm_status parse_multiplicative(parser *P, jinja_node **out);
static vllm_status parse_power(parser *P, jinja_node **out);
static vllm_status parse_test(parser *P, jinja_node **out);
static vllm_status parse_filter(parser *P, jinja_node **out);
static vllm_status parse_unary_sign(parser *P, jinja_node **out);
static vllm_status parse_call_member(parser *P, jinja_node **out);

static vllm_status parse_or(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_and(P, &l))) return rc;
    while (is_ident(P, "or")) {
        int line = cur_line(P);
        P->cur++;
        if ((rc = parse_and(P, &r)) || (rc = binary(P, JOP_OR, line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_and(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_not(P, &l))) return rc;
    while (is_ident(P, "and")) {
        int line = cur_line(P);
        P->cur++;
        if ((rc = parse_not(P, &r)) || (rc = binary(P, JOP_AND, line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_not(parser *P, jinja_node **out) {
    if (is_ident(P, "not")) {
        int line = cur_line(P);
        P->cur++;
        vllm_status rc;
        jinja_node *arg;
        if ((rc = enter(P)) || (rc = parse_not(P, &arg))) return rc;
        P->depth--;
        jinja_node *u = node_new(P, JN_UNARY, line);
        if (!u) return nomem();
        u->op = JOP_NOT, u->a = arg;
        *out = u;
        return VLLM_OK;
    }
    return parse_comparison(P, out);
}

static vllm_status parse_comparison(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_additive(P, &l))) return rc;
    for (;;) {
        int line = cur_line(P);
        jinja_op op;
        if (is_ident(P, "not") && tok_is_ident(P, P->cur + 1, "in")) {
            op = JOP_NOT_IN;
            P->cur += 2;
        } else if (is_ident(P, "in")) {
            op = JOP_IN;
            P->cur++;
        } else if (is(P, JT_COMPARISON)) {
            const jinja_token *t = &P->tok[P->cur++];
            if (t->len == 2) {
                op = t->s[0] == '<' ? JOP_LE : t->s[0] == '>' ? JOP_GE : t->s[0] == '=' ? JOP_EQ : JOP_NE;
            } else {
                op = t->s[0] == '<' ? JOP_LT : JOP_GT;
            }
        } else {
            break;
        }
        if ((rc = parse_additive(P, &r)) || (rc = binary(P, op, line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_additive(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_multiplicative(P, &l))) return rc;
    while (is(P, JT_ADDITIVE)) {
        const jinja_token *t = &P->tok[P->cur++];
        jinja_op op = t->s[0] == '+' ? JOP_ADD : t->s[0] == '-' ? JOP_SUB : JOP_CONCAT;
        if ((rc = parse_multiplicative(P, &r)) || (rc = binary(P, op, t->line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_multiplicative(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_power(P, &l))) return rc;
    while (is(P, JT_MULTIPLICATIVE)) {
        const jinja_token *t = &P->tok[P->cur++];
        jinja_op op = t->len == 2 ? JOP_FLOORDIV : t->s[0] == '*' ? JOP_MUL : t->s[0] == '/' ? JOP_DIV : JOP_MOD;
        if ((rc = parse_power(P, &r)) || (rc = binary(P, op, t->line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_power(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *l = NULL, *r = NULL;
    if ((rc = parse_test(P, &l))) return rc;
    while (is(P, JT_POW)) {
        int line = cur_line(P);
        P->cur++;
        if ((rc = parse_test(P, &r)) || (rc = binary(P, JOP_POW, line, l, r, &l))) return rc;
    }
    *out = l;
    return VLLM_OK;
}

static vllm_status parse_test(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *operand = NULL;
    if ((rc = parse_filter(P, &operand))) return rc;
    while (is_ident(P, "is")) {
        int line = cur_line(P);
        P->cur++;
        bool negate = is_ident(P, "not");
        if (negate) P->cur++;
        if (!is(P, JT_IDENT)) return perr(P, "%s", "expected a test name after 'is'");
        const jinja_token *name = &P->tok[P->cur++];
        jinja_node *t = node_new(P, JN_TEST, line);
        if (!t) return nomem();
        t->a = operand, t->flag = negate;
        if (!(t->str = tok_str(P, name))) return nomem();
        t->len = name->len;
        operand = t;
    }
    *out = operand;
    return VLLM_OK;
}

static vllm_status parse_filter(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *operand = NULL;
    if ((rc = parse_unary_sign(P, &operand))) return rc;
    while (is(P, JT_PIPE)) {
        int line = cur_line(P);
        P->cur++;
        if (!is(P, JT_IDENT)) return perr(P, "%s", "expected a filter name after '|'");
        jinja_node *filter;
        if ((rc = parse_primary(P, &filter))) return rc;
        if (is(P, JT_LPAREN) && (rc = parse_call(P, filter, &filter))) return rc;
        jinja_node *f = node_new(P, JN_FILTER, line);
        if (!f) return nomem();
        f->a = operand, f->b = filter;
        operand = f;
    }
    *out = operand;
    return VLLM_OK;
}

static vllm_status parse_unary_sign(parser *P, jinja_node **out) {
    if ((is(P, JT_UNARY) || is(P, JT_ADDITIVE)) &&
        (P->tok[P->cur].s[0] == '-' || P->tok[P->cur].s[0] == '+')) {
        const jinja_token *t = &P->tok[P->cur++];
        vllm_status rc;
        jinja_node *arg;
        if ((rc = enter(P)) || (rc = parse_unary_sign(P, &arg))) return rc;
        P->depth--;
        jinja_node *u = node_new(P, JN_UNARY, t->line);
        if (!u) return nomem();
        u->op = t->s[0] == '-' ? JOP_NEG : JOP_POS;
        u->a = arg;
        *out = u;
        return VLLM_OK;
    }
    return parse_call_member(P, out);
}

static vllm_status parse_call_member(parser *P, jinja_node **out) {
    vllm_status rc;
    jinja_node *nd = NULL;
    if ((rc = parse_primary(P, &nd)) || (rc = parse_member(P, nd, &nd))) return rc;
    if (is(P, JT_LPAREN)) return parse_call(P, nd, out);
    *out = nd;
    return VLLM_OK;
}

static vllm_status parse_call(parser *P, jinja_node *callee, jinja_node **out) {
    vllm_status rc;
    if ((rc = enter(P))) return rc;
    int line = cur_line(P);
    nlist args = {0};
    if ((rc = parse_args(P, false, &args))) return rc;
    jinja_node *c = node_new(P, JN_CALL, line);
    if (!c) return nomem();
    c->a = callee, c->list = args.v, c->n = args.n;
    if ((rc = parse_member(P, c, &c))) return rc;
    if (is(P, JT_LPAREN) && (rc = parse_call(P, c, &c))) return rc;
    P->depth--;
    *out = c;
    return VLLM_OK;
}

static const char *node_ident(const jinja_node *nd) { return nd->kind == JN_IDENT ? nd->str : NULL; }

/* (a, b=1, *xs, **kw) in a call, or (a, b=1) as macro parameters. */
static vllm_status parse_args(parser *P, bool parameters, nlist *args) {
    vllm_status rc;
    if ((rc = expect(P, JT_LPAREN))) return rc;
    bool saw_keyword = false, saw_spread = false;
    while (!is(P, JT_RPAREN)) {
        if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template in an argument list");
        bool kw_spread = is(P, JT_POW);
        bool spread = is(P, JT_MULTIPLICATIVE) && P->tok[P->cur].len == 1 && P->tok[P->cur].s[0] == '*';
        if (parameters && (kw_spread || spread))
            return perr(P, "%s", "argument unpacking is not allowed in parameter declarations");
        int line = cur_line(P);
        if (kw_spread) {
            P->cur++;
            jinja_node *v, *s = node_new(P, JN_KWSPREAD, line);
            if (!s) return nomem();
            if ((rc = parse_expression(P, &v))) return rc;
            s->a = v;
            if (!nlist_push(P, args, s)) return nomem();
            if (is(P, JT_COMMA)) P->cur++;
            if (!is(P, JT_RPAREN)) return perr(P, "%s", "'**' must be applied to the final argument");
            break;
        }
        jinja_node *arg;
        if (spread) {
            if (saw_spread) return perr(P, "%s", "only one '*' argument unpacking is allowed");
            saw_spread = true;
            P->cur++;
            jinja_node *v;
            if ((rc = parse_expression(P, &v))) return rc;
            if (!(arg = node_new(P, JN_SPREAD, line))) return nomem();
            arg->a = v;
        } else {
            if ((rc = parse_expression(P, &arg))) return rc;
            if (is(P, JT_EQUALS)) {
                P->cur++;
                if (!node_ident(arg))
                    return perr(P, "%s", parameters ? "expected an identifier for a parameter declaration"
                                                    : "expected an identifier for a keyword argument");
                jinja_node *v, *kw = node_new(P, JN_KWARG, line);
                if (!kw) return nomem();
                if ((rc = parse_expression(P, &v))) return rc;
                kw->str = arg->str, kw->len = arg->len, kw->a = v;
                arg = kw;
            }
            if (parameters) {
                if (arg->kind != JN_IDENT && arg->kind != JN_KWARG)
                    return perr(P, "%s", "expected an identifier for a parameter declaration");
                for (size_t i = 0; i < args->n; i++)
                    if (!strcmp(args->v[i]->str, arg->str))
                        return perr(P, "duplicate parameter name '%s'", arg->str);
            }
            if (arg->kind == JN_KWARG) saw_keyword = true;
            else if (saw_keyword)
                return perr(P, "%s", parameters ? "non-default argument follows default argument"
                                                : "positional argument follows keyword argument");
            else if (saw_spread)
                return perr(P, "%s", "positional argument follows '*' argument unpacking");
        }
        if (!nlist_push(P, args, arg)) return nomem();
        if (is(P, JT_COMMA)) P->cur++;
    }
    return expect(P, JT_RPAREN);
}

/* Inside [...]: an index, or a slice [a:b:c] with any part omitted. */
static vllm_status parse_subscript(parser *P, jinja_node **out) {
    int line = cur_line(P);
    jinja_node *parts[4] = {0};
    int n = 0;
    bool is_slice = false;
    while (!is(P, JT_RBRACKET)) {
        if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template in a subscript");
        if (n == 4) return perr(P, "%s", "a slice takes at most 3 parts");
        if (is(P, JT_COLON)) {
            parts[n++] = NULL;
            P->cur++;
            is_slice = true;
        } else {
            vllm_status rc = parse_expression(P, &parts[n++]);
            if (rc) return rc;
            if (is(P, JT_COLON)) {
                P->cur++;
                is_slice = true;
            }
        }
    }
    if (n == 0) return perr(P, "%s", "expected an index or a slice inside []");
    if (!is_slice) {
        *out = parts[0];
        return VLLM_OK;
    }
    if (n > 3) return perr(P, "%s", "a slice takes at most 3 parts");
    jinja_node *s = node_new(P, JN_SLICE, line);
    if (!s) return nomem();
    s->a = parts[0], s->b = parts[1], s->c = parts[2];
    *out = s;
    return VLLM_OK;
}

static vllm_status parse_member(parser *P, jinja_node *object, jinja_node **out) {
    vllm_status rc;
    while (is(P, JT_DOT) || is(P, JT_LBRACKET)) {
        int line = cur_line(P);
        bool computed = is(P, JT_LBRACKET);
        P->cur++;
        jinja_node *prop;
        if (computed) {
            if ((rc = enter(P)) || (rc = parse_subscript(P, &prop)) || (rc = expect(P, JT_RBRACKET))) return rc;
            P->depth--;
        } else {
            if ((rc = parse_primary(P, &prop))) return rc;
            if (prop->kind != JN_IDENT && prop->kind != JN_INT)
                return perr(P, "%s", "expected an identifier or an integer after '.'");
        }
        jinja_node *m = node_new(P, JN_MEMBER, line);
        if (!m) return nomem();
        m->a = object, m->b = prop, m->flag = computed;
        object = m;
    }
    *out = object;
    return VLLM_OK;
}

static vllm_status parse_primary(parser *P, jinja_node **out) {
    if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template in an expression");
    vllm_status rc;
    if ((rc = enter(P))) return rc;
    const jinja_token *t = &P->tok[P->cur++];
    jinja_node *nd = NULL;
    switch (t->type) {
    case JT_NUMBER: {
        bool is_float = memchr(t->s, '.', t->len) != NULL;
        if (!(nd = node_new(P, is_float ? JN_FLOAT : JN_INT, t->line))) return nomem();
        char buf[64];
        size_t n = t->len < sizeof buf - 1 ? t->len : sizeof buf - 1;
        if (t->len >= sizeof buf - 1) { /* a long digit run: parse from an arena copy */
            char *s = tok_str(P, t);
            if (!s) return nomem();
            nd->num = strtod(s, NULL);
        } else {
            memcpy(buf, t->s, n);
            buf[n] = 0;
            nd->num = strtod(buf, NULL);
        }
        break;
    }
    case JT_STRING: {
        /* adjacent literals concatenate: "a" "b" */
        size_t total = t->len, k = P->cur;
        while (k < P->n && P->tok[k].type == JT_STRING) total += P->tok[k++].len;
        char *s = jinja_arena_alloc(P->arena, total + 1);
        if (!s || !(nd = node_new(P, JN_STR, t->line))) return nomem();
        memcpy(s, t->s, t->len);
        size_t off = t->len;
        while (is(P, JT_STRING)) {
            memcpy(s + off, P->tok[P->cur].s, P->tok[P->cur].len);
            off += P->tok[P->cur++].len;
        }
        s[off] = 0;
        nd->str = s, nd->len = off;
        break;
    }
    case JT_IDENT:
        if (!(nd = node_new(P, JN_IDENT, t->line)) || !(nd->str = tok_str(P, t))) return nomem();
        nd->len = t->len;
        break;
    case JT_LPAREN:
        if ((rc = parse_sequence(P, false, &nd)) || (rc = expect(P, JT_RPAREN))) return rc;
        break;
    case JT_LBRACKET: {
        nlist l = {0};
        while (!is(P, JT_RBRACKET)) {
            if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template in a list literal");
            jinja_node *v;
            if ((rc = parse_expression(P, &v))) return rc;
            if (!nlist_push(P, &l, v)) return nomem();
            if (is(P, JT_COMMA)) P->cur++;
        }
        P->cur++;
        if (!(nd = node_new(P, JN_ARRAY, t->line))) return nomem();
        nd->list = l.v, nd->n = l.n;
        break;
    }
    case JT_LBRACE: {
        nlist keys = {0}, vals = {0};
        while (!is(P, JT_RBRACE)) {
            if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template in a dict literal");
            jinja_node *k, *v;
            if ((rc = parse_expression(P, &k)) || (rc = expect(P, JT_COLON)) || (rc = parse_expression(P, &v)))
                return rc;
            if (!nlist_push(P, &keys, k) || !nlist_push(P, &vals, v)) return nomem();
            if (is(P, JT_COMMA)) P->cur++;
        }
        P->cur++;
        if (!(nd = node_new(P, JN_OBJECT, t->line))) return nomem();
        nd->list = keys.v, nd->n = keys.n, nd->list2 = vals.v, nd->n2 = vals.n;
        break;
    }
    default:
        P->cur--;
        return perr(P, "unexpected %s in an expression", token_name(t->type));
    }
    P->depth--;
    *out = nd;
    return VLLM_OK;
}

/* ---- statements ----------------------------------------------------------- */

/* Which of kwargs/varargs a macro body reads before declaring them, in the
 * reference's visiting order (it decides whether extra arguments are an error). */
typedef struct special_scan {
    int declared, accessed;
} special_scan;

static int special_bit(const char *name) {
    if (!name) return 0;
    if (!strcmp(name, "kwargs")) return JINJA_USES_KWARGS;
    if (!strcmp(name, "varargs")) return JINJA_USES_VARARGS;
    return 0;
}

static void scan_node(special_scan *s, const jinja_node *nd);

static void scan_list(special_scan *s, jinja_node *const *l, size_t n) {
    for (size_t i = 0; i < n; i++) scan_node(s, l[i]);
}

static void declare_target(special_scan *s, const jinja_node *t) {
    if (!t) return;
    if (t->kind == JN_IDENT) s->declared |= special_bit(t->str);
    else if (t->kind == JN_TUPLE)
        for (size_t i = 0; i < t->n; i++) declare_target(s, t->list[i]);
}

static void declare_params(special_scan *s, jinja_node *const *params, size_t n, bool visit_defaults) {
    for (size_t i = 0; i < n; i++) s->declared |= special_bit(params[i]->str);
    if (visit_defaults)
        for (size_t i = 0; i < n; i++)
            if (params[i]->kind == JN_KWARG) scan_node(s, params[i]->a);
}

static void scan_filter(special_scan *s, const jinja_node *f) {
    if (f->kind == JN_CALL) scan_list(s, f->list, f->n);
}

static void scan_node(special_scan *s, const jinja_node *nd) {
    if (!nd) return;
    switch (nd->kind) {
    case JN_FOR:
        declare_target(s, nd->a);
        if (nd->b->kind == JN_SELECT) {
            scan_node(s, nd->b->a);
            scan_list(s, nd->list, nd->n);
            scan_list(s, nd->list2, nd->n2);
            scan_node(s, nd->b->b);
        } else {
            scan_node(s, nd->b);
            scan_list(s, nd->list, nd->n);
            scan_list(s, nd->list2, nd->n2);
        }
        return;
    case JN_SET:
        declare_target(s, nd->a);
        scan_node(s, nd->b);
        scan_list(s, nd->list, nd->n);
        return;
    case JN_MACRO:
        declare_params(s, nd->list, nd->n, true);
        scan_list(s, nd->list2, nd->n2);
        return;
    case JN_CALL_BLOCK:
        scan_node(s, nd->a);
        declare_params(s, nd->list, nd->n, true);
        scan_list(s, nd->list2, nd->n2);
        return;
    case JN_FILTER_BLOCK:
        scan_list(s, nd->list, nd->n);
        scan_filter(s, nd->a);
        return;
    case JN_IDENT: {
        int bit = special_bit(nd->str);
        if (bit && !(s->declared & bit)) s->accessed |= bit;
        return;
    }
    case JN_MEMBER:
        scan_node(s, nd->a);
        if (nd->flag) scan_node(s, nd->b);
        return;
    case JN_FILTER:
        scan_node(s, nd->a);
        scan_filter(s, nd->b);
        return;
    case JN_TEST:
        scan_node(s, nd->a);
        return;
    case JN_SELECT:
        scan_node(s, nd->b);
        scan_node(s, nd->a);
        return;
    case JN_KWARG:
        scan_node(s, nd->a);
        return;
    default:
        scan_node(s, nd->a);
        scan_node(s, nd->b);
        scan_node(s, nd->c);
        scan_list(s, nd->list, nd->n);
        scan_list(s, nd->list2, nd->n2);
    }
}

static int special_arguments(jinja_node *const *params, size_t n, jinja_node *const *body, size_t n_body) {
    special_scan s = {0};
    declare_params(&s, params, n, false);
    scan_list(&s, body, n_body);
    return s.accessed;
}

static vllm_status parse_set(parser *P, int line, jinja_node **out) {
    vllm_status rc;
    jinja_node *nd = node_new(P, JN_SET, line);
    if (!nd) return nomem();
    if ((rc = parse_sequence(P, false, &nd->a))) return rc;
    if (is(P, JT_EQUALS)) {
        P->cur++;
        if ((rc = parse_sequence(P, false, &nd->b))) return rc;
    } else {
        static const char *const ends[] = {"endset", NULL};
        nlist body = {0};
        if ((rc = expect(P, JT_CLOSE_STMT)) || (rc = parse_body(P, ends, "endset", "set", line, &body))) return rc;
        nd->list = body.v, nd->n = body.n;
        P->cur++;
        if ((rc = expect_ident(P, "endset"))) return rc;
    }
    if ((rc = expect(P, JT_CLOSE_STMT))) return rc;
    *out = nd;
    return VLLM_OK;
}

/* After "{% if" or "{% elif": test %} body, then elif/else chains; the caller
 * consumes {% endif %}. */
static vllm_status parse_if(parser *P, int line, jinja_node **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    vllm_status rc;
    jinja_node *nd = node_new(P, JN_IF, line);
    if (!nd) return nomem();
    nlist body = {0}, alt = {0};
    if ((rc = parse_expression(P, &nd->a)) || (rc = expect(P, JT_CLOSE_STMT)) ||
        (rc = parse_body(P, ends, "endif", "if", line, &body)))
        return rc;
    if (is_statement(P, (const char *const[]){"elif", NULL})) {
        int eline = cur_line(P);
        P->cur += 2;
        jinja_node *elif;
        if ((rc = enter(P)) || (rc = parse_if(P, eline, &elif))) return rc;
        P->depth--;
        if (!nlist_push(P, &alt, elif)) return nomem();
    } else if (is_statement(P, (const char *const[]){"else", NULL})) {
        P->cur += 2;
        if ((rc = expect(P, JT_CLOSE_STMT)) || (rc = parse_body(P, endif, "endif", "if", line, &alt))) return rc;
    }
    nd->list = body.v, nd->n = body.n, nd->list2 = alt.v, nd->n2 = alt.n;
    *out = nd;
    return VLLM_OK;
}

static vllm_status parse_for(parser *P, int line, jinja_node **out) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    vllm_status rc;
    jinja_node *nd = node_new(P, JN_FOR, line);
    if (!nd) return nomem();
    if ((rc = parse_sequence(P, true, &nd->a))) return rc;
    if (nd->a->kind != JN_IDENT && nd->a->kind != JN_TUPLE)
        return perr(P, "%s", "expected an identifier or a tuple as the loop variable");
    if (!is_ident(P, "in")) return perr(P, "%s", "expected 'in' after the loop variable");
    P->cur++;
    nlist body = {0}, alt = {0};
    if ((rc = parse_expression(P, &nd->b)) || (rc = expect(P, JT_CLOSE_STMT)) ||
        (rc = parse_body(P, ends, "endfor", "for", line, &body)))
        return rc;
    if (is_statement(P, (const char *const[]){"else", NULL})) {
        P->cur += 2;
        if ((rc = expect(P, JT_CLOSE_STMT)) || (rc = parse_body(P, endfor, "endfor", "for", line, &alt))) return rc;
    }
    nd->list = body.v, nd->n = body.n, nd->list2 = alt.v, nd->n2 = alt.n;
    *out = nd;
    return VLLM_OK;
}

static vllm_status parse_end(parser *P, const char *name) {
    vllm_status rc;
    if ((rc = expect(P, JT_OPEN_STMT)) || (rc = expect_ident(P, name)) || (rc = expect(P, JT_CLOSE_STMT)))
        return rc;
    return VLLM_OK;
}

static vllm_status parse_statement(parser *P, jinja_node **out) {
    vllm_status rc;
    int line = cur_line(P);
    if ((rc = expect(P, JT_OPEN_STMT))) return rc;
    if (!is(P, JT_IDENT)) {
        if (P->cur >= P->n) return perr(P, "%s", "unexpected end of template after '{%'");
        return perr(P, "expected a statement name after '{%%', got %s", token_name(P->tok[P->cur].type));
    }
    const jinja_token *name = &P->tok[P->cur++];
    char kw[32];
    snprintf(kw, sizeof kw, "%.*s", (int)(name->len < 31 ? name->len : 31), name->s);
    if (!strcmp(kw, "set")) return parse_set(P, line, out);
    if (!strcmp(kw, "if")) {
        if ((rc = parse_if(P, line, out))) return rc;
        return parse_end(P, "endif");
    }
    if (!strcmp(kw, "for")) {
        if ((rc = parse_for(P, line, out))) return rc;
        return parse_end(P, "endfor");
    }
    if (!strcmp(kw, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        jinja_node *nd = node_new(P, JN_MACRO, line), *mname;
        if (!nd) return nomem();
        if ((rc = parse_primary(P, &mname))) return rc;
        if (mname->kind != JN_IDENT) return perr(P, "%s", "expected a macro name");
        nlist params = {0}, body = {0};
        if ((rc = parse_args(P, true, &params)) || (rc = expect(P, JT_CLOSE_STMT)) ||
            (rc = parse_body(P, ends, "endmacro", "macro", line, &body)) || (rc = parse_end(P, "endmacro")))
            return rc;
        nd->str = mname->str, nd->len = mname->len;
        nd->list = params.v, nd->n = params.n, nd->list2 = body.v, nd->n2 = body.n;
        nd->flag = special_arguments(nd->list, nd->n, nd->list2, nd->n2);
        *out = nd;
        return VLLM_OK;
    }
    if (!strcmp(kw, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        jinja_node *nd = node_new(P, JN_CALL_BLOCK, line), *callee;
        if (!nd) return nomem();
        nlist caller_params = {0}, args = {0}, body = {0};
        if (is(P, JT_LPAREN) && (rc = parse_args(P, true, &caller_params))) return rc;
        if ((rc = parse_primary(P, &callee))) return rc;
        if (callee->kind != JN_IDENT) return perr(P, "%s", "expected a macro name after 'call'");
        if ((rc = parse_args(P, false, &args)) || (rc = expect(P, JT_CLOSE_STMT)) ||
            (rc = parse_body(P, ends, "endcall", "call", line, &body)) || (rc = parse_end(P, "endcall")))
            return rc;
        jinja_node *call = node_new(P, JN_CALL, line);
        if (!call) return nomem();
        call->a = callee, call->list = args.v, call->n = args.n;
        nd->a = call;
        nd->list = caller_params.v, nd->n = caller_params.n, nd->list2 = body.v, nd->n2 = body.n;
        nd->flag = special_arguments(nd->list, nd->n, nd->list2, nd->n2);
        *out = nd;
        return VLLM_OK;
    }
    if (!strcmp(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jinja_node *nd = node_new(P, JN_FILTER_BLOCK, line), *filter;
        if (!nd) return nomem();
        if ((rc = parse_primary(P, &filter))) return rc;
        if (filter->kind == JN_IDENT && is(P, JT_LPAREN) && (rc = parse_call(P, filter, &filter))) return rc;
        if (filter->kind != JN_IDENT && filter->kind != JN_CALL)
            return perr(P, "%s", "expected a filter name after 'filter'");
        nlist body = {0};
        if ((rc = expect(P, JT_CLOSE_STMT)) || (rc = parse_body(P, ends, "endfilter", "filter", line, &body)) ||
            (rc = parse_end(P, "endfilter")))
            return rc;
        nd->a = filter, nd->list = body.v, nd->n = body.n;
        *out = nd;
        return VLLM_OK;
    }
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if ((rc = expect(P, JT_CLOSE_STMT))) return rc;
        if (!(*out = node_new(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE, line))) return nomem();
        return VLLM_OK;
    }
    P->cur--;
    return vllm_error(VLLM_ERR_UNSUPPORTED, "chat template line %d: unsupported statement {%% %s %%}", line, kw);
}

static vllm_status parse_any(parser *P, jinja_node **out) {
    const jinja_token *t = &P->tok[P->cur];
    vllm_status rc;
    *out = NULL;
    switch (t->type) {
    case JT_COMMENT:
        P->cur++;
        return VLLM_OK;
    case JT_TEXT:
        P->cur++;
        if (!(*out = node_new(P, JN_STR, t->line))) return nomem();
        (*out)->str = t->s, (*out)->len = t->len;
        return VLLM_OK;
    case JT_OPEN_STMT:
        if ((rc = enter(P))) return rc;
        rc = parse_statement(P, out);
        P->depth--;
        return rc;
    case JT_OPEN_EXPR:
        P->cur++;
        if ((rc = parse_expression(P, out))) return rc;
        return expect(P, JT_CLOSE_EXPR);
    default:
        return perr(P, "unexpected %s outside of a tag", token_name(t->type));
    }
}

vllm_status jinja_parse_program(jinja_arena *a, const jinja_token *tokens, size_t n_tokens,
                                jinja_node ***body, size_t *n_body) {
    parser P = {.arena = a, .tok = tokens, .n = n_tokens};
    nlist l = {0};
    while (P.cur < P.n) {
        jinja_node *nd;
        vllm_status rc = parse_any(&P, &nd);
        if (rc) return rc;
        if (nd && !nlist_push(&P, &l, nd)) return nomem();
    }
    *body = l.v;
    *n_body = l.n;
    return VLLM_OK;
}

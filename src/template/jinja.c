/*
 * jinja.c - the public face of the interpreter: parse once (lexer + parser
 * into the template's own arena), render many times (a fresh arena with the
 * caller's limits per render, so concurrent renders share nothing mutable).
 */
#include "template/jinja.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "template/jinja_internal.h"

struct jinja_template {
    jinja_arena arena; /* tokens and AST */
    jinja_node **body;
    size_t n_body;
};

enum {
    DEFAULT_MAX_OUTPUT = 16 << 20,
    DEFAULT_MAX_MEMORY = 128 << 20,
    DEFAULT_MAX_DEPTH = 500,
};

vllm_status jinja_template_parse(const char *source, size_t len, jinja_template **out) {
    *out = NULL;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
    jinja_token *tokens;
    size_t n_tokens;
    vllm_status rc = jinja_lex_tokenize(&t->arena, source ? source : "", source ? len : 0, &tokens, &n_tokens);
    if (!rc) rc = jinja_parse_program(&t->arena, tokens, n_tokens, &t->body, &t->n_body);
    if (rc) {
        jinja_template_free(t);
        return rc;
    }
    *out = t;
    return VLLM_OK;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    jinja_arena_free(&t->arena);
    free(t);
}

vllm_status jinja_template_render(const jinja_template *t, const json_t *context, const jinja_render_opts *opts,
                                  char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    jinja_render R = {0};
    R.max_output = opts && opts->max_output ? opts->max_output : DEFAULT_MAX_OUTPUT;
    R.arena.limit = opts && opts->max_memory ? opts->max_memory : DEFAULT_MAX_MEMORY;
    R.max_depth = opts && opts->max_depth ? opts->max_depth : DEFAULT_MAX_DEPTH;
    R.now = opts && opts->now ? opts->now : (int64_t)time(NULL);
    jinja_buf buf;
    jinja_buf_init(&buf, &R.arena, R.max_output);
    vllm_status rc = jinja_eval_program(&R, t->body, t->n_body, context, &buf);
    if (!rc) {
        char *s = malloc(buf.len + 1);
        if (!s) {
            rc = vllm_error(VLLM_ERR_NOMEM, "chat template: out of memory");
        } else {
            if (buf.len) memcpy(s, buf.p, buf.len);
            s[buf.len] = 0;
            *out = s;
            *len = buf.len;
        }
    }
    jinja_arena_free(&R.arena);
    return rc;
}

int jinja_template_iterates_content(const jinja_template *t) {
    return jinja_eval_iterates_content(t->body, t->n_body);
}

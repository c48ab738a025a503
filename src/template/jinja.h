/*
 * jinja.h - a small Jinja interpreter for chat templates.
 *
 * The language is the subset real chat templates use, and its behaviour is
 * that of @huggingface/jinja (the renderer behind transformers.js), which our
 * tests use as the reference: text, {{ }}, {% %}, {# #} with whitespace
 * control and HF's trim_blocks/lstrip_blocks; if/elif/else, for (loop.*,
 * else, break, continue), set (also block set and namespace attributes),
 * macros and call blocks, filter blocks; its filters, tests, string and dict
 * methods; raise_exception, range, namespace, strftime_now. Where that
 * renderer follows JavaScript rather than Python (number printing, `strip`
 * ignoring its argument, string lengths in UTF-16 units, ...) so do we.
 * A construct outside the subset is an error naming it and its line: at parse
 * time for syntax ({% include %}), at render time for names (an unknown
 * filter in a branch that runs), never a silently different prompt.
 *
 * Lifetime: jinja_template_parse creates a template, jinja_template_free
 * releases it. A parsed template is immutable; any number of threads may
 * render it at once. Errors are vllm_status values with the message in
 * vllm_errmsg(), which starts "chat template line N:" when a line applies.
 */
#ifndef VLLM_TEMPLATE_JINJA_H
#define VLLM_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct jinja_template jinja_template;

/* Parses len bytes of template source (UTF-8). *out is freed with jinja_template_free. */
vllm_status jinja_template_parse(const char *source, size_t len, jinja_template **out);
void jinja_template_free(jinja_template *t);

/* Bounds on one render; zero fields take the defaults. Exceeding one is an
 * error (VLLM_ERR_INVALID), not a crash: they are what make rendering safe on
 * hostile input (deep recursion, string doubling, huge range()). */
typedef struct jinja_render_opts {
    size_t max_output; /* bytes of output (and of any intermediate string); default 16 MiB */
    size_t max_memory; /* bytes the render may allocate in all; default 128 MiB */
    int max_depth;     /* nested evaluation/recursion depth; default 500 */
    int64_t now;       /* unix time strftime_now reports; default time(NULL) */
} jinja_render_opts;

/* Renders t with the members of `context` (a JSON object, borrowed) as global
 * variables. JSON values map to template values the way JSON.parse + the
 * reference do (integral numbers are integers, object key order as in
 * JavaScript). On success *out is a malloc'ed NUL-terminated string of *len
 * bytes (it may contain NULs), freed by the caller with free(). opts may be NULL. */
vllm_status jinja_template_render(const jinja_template *t, const json_t *context, const jinja_render_opts *opts,
                                  char **out, size_t *len);

/* Does the template loop over a message's content (`for part in
 * message['content']`)? vLLM calls such templates "openai" content format and
 * passes content as a list of parts; the others get content as a string. */
int jinja_template_iterates_content(const jinja_template *t);

#endif

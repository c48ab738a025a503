/*
 * structured.h - structured outputs: a grammar-driven matcher that masks a
 * request's logits at every step so that only tokens keeping the output
 * inside the grammar can be sampled (vLLM's vllm/v1/structured_output; the
 * designs of XGrammar and llguidance, none of their code).
 *
 * One grammar language inside: every constraint is translated to GBNF text
 * (the dialect llama.cpp and XGrammar accept, below) and compiled from it,
 * so a JSON schema, a regex, a choice and a user's grammar meet the same
 * parser, the same automaton and the same mask code, and a translation can
 * be read, diffed and fed to another engine when a test disagrees.
 *
 *     st_vocab  - a tokenizer's token bytes and their trie; built once per
 *                 tokenizer, read-only afterwards, shared by every thread
 *     st_grammar - a compiled constraint; immutable and reference-counted,
 *                 so one compile serves every request with the same spec
 *                 (the cache is keyed by st_spec) and any thread may match
 *     st_matcher - one sequence's position in a grammar: fill_mask, accept,
 *                 rollback (speculative decoding's rejected drafts), fork
 *                 (n > 1); not thread-safe, one per sequence
 *
 * Tokens are matched by their bytes (tokenizer_token_bytes), so a token may
 * end inside a UTF-8 character and the next one finish it. Special tokens
 * are never allowed, except the end-of-sequence ids, which are allowed
 * exactly when the grammar can end here; accepting one terminates the
 * matcher (every later mask allows only EOS).
 *
 * The GBNF dialect (llama.cpp's grammars/README.md, XGrammar's EBNF):
 *
 *     root   ::= object            # comments run to the end of the line
 *     object ::= "{" ws ( pair ( "," ws pair )* )? "}"
 *     name   ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,31}
 *     ws     ::= [ \t\n]*
 *
 *   - rules `name ::= alternatives`, a rule may continue on the next lines
 *     while they are indented or start with `|`; `root` is the start rule;
 *     rules may be used before they are defined, may be left- or
 *     right-recursive and may derive the empty string;
 *   - "literal" with escapes \n \r \t \0 \\ \" \' \[ \] \/ \xHH \uHHHH \UHHHHHHHH
 *     (in a class also \- \^);
 *   - [class] and [^class] over code points, ranges a-z, the same escapes;
 *     `.` is any code point;
 *   - grouping ( ), alternation |, and the postfix operators * + ? {m}
 *     {m,} {m,n} on any item;
 *   - XGrammar's printed EBNF also parses: {m, -1} is {m,}, and a
 *     lookahead assertion (= ...) is read and dropped (it restates what the
 *     surrounding grammar requires);
 *   - text is UTF-8 code points: a class matches whole characters, so the
 *     matcher accepts only valid UTF-8 (what JSON and the tokenizers need).
 *
 * Errors are values with the message naming what is wrong and where: a
 * GBNF line and column, a regex offset, a schema's JSON path and keyword
 * ("properties.tags: uniqueItems is not supported").
 */
#ifndef VLLM_STRUCTURED_H
#define VLLM_STRUCTURED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "tokenizer/tokenizer.h"
#include "vllm/status.h"

/* ---- vocabulary ---------------------------------------------------------- */

typedef struct st_vocab st_vocab;

/* Token bytes for every id of t, the trie over them, the EOS ids (eos_ids,
 * n_eos: the model's end-of-sequence tokens, e.g. generation_config's list;
 * NULL/0 = the tokenizer's EOS). t must outlive nothing: the bytes are
 * copied. */
vllm_status st_vocab_new(const tokenizer *t, const int32_t *eos_ids, int32_t n_eos, st_vocab **out);
void st_vocab_free(st_vocab *v);
int32_t st_vocab_size(const st_vocab *v);     /* the mask covers ids [0, size) */
int32_t st_mask_words(const st_vocab *v);     /* (size + 31) / 32 */

/* ---- constraints ----------------------------------------------------------- */

/* What a request asks for (vLLM's StructuredOutputsParams; exactly one kind). */
typedef enum st_kind {
    ST_JSON_SCHEMA = 1,  /* text: a JSON schema document */
    ST_JSON_OBJECT,      /* any JSON object (response_format json_object); text unused */
    ST_REGEX,            /* text: a regular expression (JSON Schema `pattern` dialect) */
    ST_CHOICE,           /* text: a JSON array of strings; the output is exactly one of them */
    ST_GRAMMAR,          /* text: GBNF */
    ST_STRUCTURAL_TAG,   /* text: vLLM's structural_tag JSON */
} st_kind;

typedef struct st_spec {
    st_kind kind;
    const char *text;                /* not NUL-terminated necessarily */
    size_t len;
    bool disable_any_whitespace;     /* JSON kinds: no whitespace between tokens */
    const char *whitespace_pattern;  /* JSON kinds: a regex for whitespace, NULL = JSON's flexible default */
} st_spec;

/* ---- translators to GBNF (each appends rules to out; `root` names the
 * start rule they define; rule names they make start with `root`) ------------ */

/* A regular expression (ECMA-262 as JSON Schema's `pattern` uses it, and
 * vLLM's `regex`): literals, escapes, classes (\d \w \s \D \W \S, [..],
 * [^..]), ., groups (capturing, (?:..), named), |, * + ? {m} {m,} {m,n}
 * and their lazy forms (same language), ^ and $ at the ends. Whole-string
 * match (vLLM's regex and MaskBench's pattern semantics: `pattern` is
 * unanchored in JSON Schema, so the schema translator wraps it in .*
 * where it is not anchored). Lookarounds and backreferences are errors. */
vllm_status st_regex_to_gbnf(const char *re, size_t len, const char *root, strbuf *out);

/* A JSON schema (draft 2020-12 and the older drafts real schemas use). */
vllm_status st_schema_to_gbnf(const char *json, size_t len, const st_spec *opts, const char *root,
                              strbuf *out);

/* vLLM 0.11's structural_tag JSON ({structures: [{begin, schema, end}],
 * triggers: [...]}): free text until a trigger, then one of the structures
 * beginning with it (begin, JSON per schema, end), then free text again
 * (tagged.c). */
vllm_status st_structural_tag_to_gbnf(const char *json, size_t len, const st_spec *opts, strbuf *out);

/* A grammar that starts after free text ends with `end` (e.g. "</think>":
 * vLLM applies a constraint only once the reasoning has ended): root ::=
 * text-without-end end <gbnf's root, renamed> (tagged.c). */
vllm_status st_gbnf_after_text(const char *gbnf, size_t len, const char *end, strbuf *out);

/* Any of the kinds above, root named "root": the text st_compile compiles. */
vllm_status st_spec_to_gbnf(const st_spec *spec, strbuf *out);

/* ---- compiled grammars ------------------------------------------------------- */

typedef struct st_grammar st_grammar;

/* Parses the GBNF and builds everything the matcher needs for v (the
 * automaton, the token masks that do not depend on the parse stack). The
 * result holds a reference to nothing: v must outlive it. */
vllm_status st_compile_gbnf(const char *gbnf, size_t len, const st_vocab *v, st_grammar **out);
/* st_spec_to_gbnf then st_compile_gbnf. */
vllm_status st_compile(const st_spec *spec, const st_vocab *v, st_grammar **out);
st_grammar *st_grammar_ref(st_grammar *g);   /* atomic; returns g */
void st_grammar_unref(st_grammar *g);        /* atomic; frees at 0; NULL is fine */

/* ---- matchers ---------------------------------------------------------------- */

typedef struct st_matcher st_matcher;

vllm_status st_matcher_new(st_grammar *g, st_matcher **out);  /* takes a reference on g */
vllm_status st_matcher_fork(const st_matcher *m, st_matcher **out); /* same state, independent after */
void st_matcher_free(st_matcher *m);

/* Writes the mask of the next token: st_mask_words(v) words, bit (id % 32)
 * of word (id / 32) set = id may come next. */
void st_matcher_fill_mask(st_matcher *m, uint32_t *mask);
/* Advances over one token. A token the mask would not allow returns false
 * and leaves the state unchanged. */
bool st_matcher_accept_token(st_matcher *m, int32_t id);
/* Undoes the last k accepted tokens (k <= the number accepted, at most
 * st_matcher_max_rollback's); VLLM_ERR_INVALID otherwise. */
vllm_status st_matcher_rollback(st_matcher *m, int32_t k);
/* How many tokens rollback can undo now: every token accepted (the matcher
 * keeps its whole history; EOS counts as a token). */
int32_t st_matcher_max_rollback(const st_matcher *m);
bool st_matcher_can_end(const st_matcher *m);      /* the text so far is a whole sentence of the grammar */
bool st_matcher_is_terminated(const st_matcher *m); /* an EOS token was accepted */

#endif

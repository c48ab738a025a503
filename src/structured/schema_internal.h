/*
 * schema_internal.h - what schema.c shares with its helper files (not part
 * of the module's interface).
 */
#ifndef VLLM_STRUCTURED_SCHEMA_INTERNAL_H
#define VLLM_STRUCTURED_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "vllm/status.h"

/* Rewrites GBNF whose terminals match decoded characters (st_regex_to_gbnf's
 * output) into GBNF matching the same strings as they appear inside a JSON
 * string literal: every literal and class becomes the JSON text of the
 * characters it matches (" as \", \ as \\, control characters as \n, \t,
 * ... or \u00XX, everything else raw), appended to out. Rule names,
 * operators and grouping pass through. A class that matches no character
 * JSON can write is an error. */
vllm_status st_gbnf_json_string(const char *gbnf, size_t len, strbuf *out);

/* The node the JSON pointer p ("" or "/a/b~1c/0", %XX decoded as in a URI
 * fragment) names under node, or NULL: *why 1 when a token is over 511
 * bytes, else 0 (nothing there). schema.c; schema_check.c uses it too. */
json_t *st_json_pointer(json_t *node, const char *p, int *why);

/* A JSON-Schema pattern's top-level alternative (re[0..n), its ^ and $
 * taken off) trimmed for a search whose front / back is unanchored: the
 * shortest regex with the same search language, appended to out; *empty
 * when nothing is left (the alternative matches every string). A regex it
 * does not understand is appended as it is (search.c). */
vllm_status st_regex_search_trim(const char *re, size_t n, bool front, bool back, strbuf *out, bool *empty);

/* A search for a run X{m} (X one character class, m >= 1) unanchored at both
 * ends, S X{m} S, written so that a run is matched from its first character
 * only, (?:X{0,m-1}Y)* X{m} S with Y the complement of X: appended to out,
 * *done. Anything else: *done false, out unchanged (search.c). */
vllm_status st_regex_search_run(const char *core, size_t n, strbuf *out, bool *done);

/* A JSON-Schema pattern whose matches must also have mn to mx code points
 * (mx < 0: no upper bound) as one pattern, appended to out; *never when no
 * string qualifies; VLLM_ERR_UNSUPPORTED (no message) when the lengths
 * cannot be read off the regex exactly. pattern_len.c. */
vllm_status st_pattern_with_length(const char *re, int64_t mn, int64_t mx, strbuf *out, bool *never);

/* Is the JSON value v valid under schema s (JSON Schema 2020-12, and the
 * older drafts' spellings per doc's $schema)? 1 valid, 0 invalid, -1 cannot
 * tell exactly (*why, when not NULL, names the keyword). $refs resolve in
 * doc (id: its $id or NULL). *budget: subschemas it may visit, decreased
 * by those it did (-1 when it runs out). schema_check.c. */
int st_schema_check(json_t *doc, const char *id, json_t *s, json_t *v, long *budget, const char **why);

#endif

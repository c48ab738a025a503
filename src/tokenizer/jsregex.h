/*
 * jsregex.h - compile tokenizer.json regexes with PCRE2 so that they match
 * exactly what transformers.js's JavaScript regexes match (see jsregex.c).
 */
#ifndef VLLM_TOKENIZER_JSREGEX_H
#define VLLM_TOKENIZER_JSREGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "vllm/status.h"

/* Compiles pattern[0..n) (a JS regex, or a literal string if literal) into
 * *out (pcre2_code_free to release). field names the source in errors. */
vllm_status jsregex_compile(const char *pattern, size_t n, bool literal, const char *field, pcre2_code **out);

/* JS \s: WhiteSpace + LineTerminator, the set String.prototype.trim strips. */
bool jsregex_is_space(uint32_t cp);

#endif

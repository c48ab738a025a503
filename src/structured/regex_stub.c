/*
 * regex_stub.c - a placeholder st_regex_to_gbnf until the regex translator
 * (branch st-core) is merged: every regex is "not supported". Deleted at
 * that merge.
 */
#include "base/error.h"
#include "structured/structured.h"

vllm_status st_regex_to_gbnf(const char *re, size_t len, const char *root, strbuf *out) {
    (void)out;
    return vllm_error(VLLM_ERR_UNSUPPORTED, "regex /%.*s/ (rule %s): regexes are not supported yet", (int)len, re, root);
}

/*
 * schema.c - st_schema_to_gbnf: JSON Schema -> GBNF. A placeholder until the
 * schema translator lands (branch st-schema replaces this file whole).
 */
#include "base/error.h"
#include "structured/structured.h"

vllm_status st_schema_to_gbnf(const char *json, size_t len, const st_spec *opts, const char *root,
                              strbuf *out) {
    return vllm_error(VLLM_ERR_INVALID, "json schema: not built yet (the schema translator is missing)");
}

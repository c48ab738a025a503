/*
 * spec.c - every kind of constraint as GBNF text (st_spec_to_gbnf) and the
 * one compile entry point (st_compile).
 *
 *   ST_REGEX        st_regex_to_gbnf
 *   ST_CHOICE       a JSON array of strings -> root ::= "a" | "b" | ...
 *   ST_GRAMMAR      the text itself
 *   ST_JSON_SCHEMA  st_schema_to_gbnf (schema.c)
 *   ST_JSON_OBJECT  st_schema_to_gbnf of {"type": "object"}
 *   ST_STRUCTURAL_TAG  st_structural_tag_to_gbnf (tagged.c)
 */
#include <jansson.h>
#include <string.h>

#include "base/error.h"
#include "structured/st_internal.h"

static vllm_status choice_to_gbnf(const char *text, size_t len, strbuf *out) {
    json_error_t err;
    json_t *j = json_loadb(text ? text : "", text ? len : 0, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    vllm_status rc = VLLM_OK;
    if (!json_is_array(j) || json_array_size(j) == 0) {
        rc = vllm_error(VLLM_ERR_INVALID, "choice: expected a non-empty JSON array of strings%s%s", j ? "" : ": ",
                        j ? "" : err.text);
        json_decref(j);
        return rc;
    }
    size_t i;
    json_t *s;
    rc = sb_add(out, "root ::= ", 9);
    json_array_foreach(j, i, s) {
        if (rc) break;
        if (!json_is_string(s)) {
            rc = vllm_error(VLLM_ERR_INVALID, "choice[%zu]: expected a string", i);
            break;
        }
        if (i && (rc = sb_add(out, " | ", 3))) break;
        rc = st_gbnf_append_literal(out, json_string_value(s), json_string_length(s));
        if (rc) vllm_error_prefix("choice[%zu]", i);
    }
    if (!rc) rc = sb_add(out, "\n", 1);
    json_decref(j);
    return rc;
}

vllm_status st_spec_to_gbnf(const st_spec *spec, strbuf *out) {
    switch (spec->kind) {
    case ST_REGEX: return st_regex_to_gbnf(spec->text, spec->len, "root", out);
    case ST_CHOICE: return choice_to_gbnf(spec->text, spec->len, out);
    case ST_GRAMMAR: return sb_add(out, spec->text ? spec->text : "", spec->text ? spec->len : 0);
    case ST_JSON_SCHEMA: return st_schema_to_gbnf(spec->text, spec->len, spec, "root", out);
    case ST_JSON_OBJECT: {
        static const char obj[] = "{\"type\": \"object\"}";
        return st_schema_to_gbnf(obj, sizeof obj - 1, spec, "root", out);
    }
    case ST_STRUCTURAL_TAG: return st_structural_tag_to_gbnf(spec->text, spec->len, spec, out);
    }
    return vllm_error(VLLM_ERR_INVALID, "structured outputs: unknown constraint kind %d", (int)spec->kind);
}

vllm_status st_compile(const st_spec *spec, const st_vocab *v, st_grammar **out) {
    *out = NULL;
    strbuf g = {0};
    vllm_status rc = st_spec_to_gbnf(spec, &g);
    if (!rc) rc = st_compile_gbnf(g.s ? g.s : "", g.len, v, out);
    free(g.s);
    return rc;
}

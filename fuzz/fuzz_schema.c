/*
 * fuzz_schema.c - st_schema_to_gbnf (and st_structural_tag_to_gbnf) on
 * arbitrary JSON, then the matcher walk of fuzz_gbnf.c.
 *
 * Input: a JSON schema (at most 16 KiB). A first byte '!' asks for compact
 * JSON (disable_any_whitespace) on the rest; '#' makes the rest a vLLM
 * structural_tag document instead. A schema that translates must give GBNF
 * that st_compile_gbnf accepts, and the walk must hold on it (mask and
 * accept agree, EOS exactly when the grammar can end, fork, rollback). A
 * schema that does not translate must say why.
 */
#include "fuzz.h"

#include "structured/structured.h"

#ifndef FUZZ_NO_MAIN /* standalone: fuzz_gbnf.c's walk without its entry points */
#define FUZZ_NO_MAIN
#include "fuzz_gbnf.c"
#undef FUZZ_NO_MAIN
#endif

int fuzz_schema_init(void) { return fuzz_gbnf_init(); }

int fuzz_schema_one(const uint8_t *data, size_t size) {
    if (size > 16384) return 0;
    const char *text = (const char *)data;
    bool tag = size > 0 && text[0] == '#';
    st_spec spec = {.kind = tag ? ST_STRUCTURAL_TAG : ST_JSON_SCHEMA,
                    .disable_any_whitespace = size > 0 && text[0] == '!'};
    if (tag || spec.disable_any_whitespace) text++, size--;
    spec.text = text;
    spec.len = size;
    strbuf g = {0};
    vllm_status rc = tag ? st_structural_tag_to_gbnf(text, size, &spec, &g)
                         : st_schema_to_gbnf(text, size, &spec, "root", &g);
    if (rc != VLLM_OK) {
        free(g.s);
        FUZZ_CHECK(vllm_errmsg()[0] != 0, "a refused schema without a message");
        return 0;
    }
    st_grammar *gr;
    if (st_compile_gbnf(g.s, g.len, fuzz_gbnf_vocab, &gr) != VLLM_OK) {
        FUZZ_REPORT("schema translated to GBNF that does not compile: %s\n%s", vllm_errmsg(), g.s);
        free(g.s);
        return 0;
    }
    st_grammar_unref(gr);
    fuzz_gbnf_walk(g.s, g.len, 6);
    free(g.s);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_schema_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_schema_one(data, size); }
#endif

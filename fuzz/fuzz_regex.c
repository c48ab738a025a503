/*
 * fuzz_regex.c - st_regex_to_gbnf on arbitrary patterns.
 *
 * Input: a regex (at most 1 KiB). A pattern that translates must give GBNF
 * that st_compile_gbnf accepts (unless the pattern matches nothing, like
 * [^\s\S]), and the matcher walk of fuzz_gbnf.c must hold on it. A pattern
 * that does not translate must say why with a byte offset.
 */
#include "fuzz.h"

#include "structured/structured.h"

#ifndef FUZZ_NO_MAIN /* standalone: fuzz_gbnf.c's walk without its entry points */
#define FUZZ_NO_MAIN
#include "fuzz_gbnf.c"
#undef FUZZ_NO_MAIN
#endif

int fuzz_regex_init(void) { return fuzz_gbnf_init(); }

int fuzz_regex_one(const uint8_t *data, size_t size) {
    if (size > 1024) return 0;
    strbuf g = {0};
    if (st_regex_to_gbnf((const char *)data, size, "root", &g) != VLLM_OK) {
        free(g.s);
        FUZZ_CHECK(strstr(vllm_errmsg(), "at offset") != NULL, "regex error without an offset: %s", vllm_errmsg());
        return 0;
    }
    st_grammar *gr;
    if (st_compile_gbnf(g.s, g.len, fuzz_gbnf_vocab, &gr) != VLLM_OK) {
        bool empty = strstr(vllm_errmsg(), "matches no text") != NULL;
        if (!empty) FUZZ_REPORT("regex translated to GBNF that does not compile: %s\n%s", vllm_errmsg(), g.s);
        free(g.s);
        return 0;
    }
    st_grammar_unref(gr);
    fuzz_gbnf_walk(g.s, g.len, 4);
    free(g.s);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_regex_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_regex_one(data, size); }
#endif

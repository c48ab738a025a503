/*
 * fuzz_gbnf.c - st_compile_gbnf on arbitrary text, then a short walk of the
 * matcher over stories260K's vocabulary.
 *
 * Input: GBNF text (at most 4 KiB; bigger inputs only cost time). A grammar
 * that compiles must give a matcher whose masks and accepts agree: each step
 * takes the first token of the mask, which accept_token must take; EOS is in
 * the mask exactly when can_end says the grammar may end; a fork matches the
 * original's mask; rolling everything back restores the first mask.
 */
#include "fuzz.h"

#include "structured/structured.h"

static tokenizer *fuzz_gbnf_tok;
static st_vocab *fuzz_gbnf_vocab;

int fuzz_gbnf_init(void) {
    if (fuzz_gbnf_vocab) return 0;
    if (tokenizer_load(FUZZ_STORIES_DIR, &fuzz_gbnf_tok) != VLLM_OK) return 1;
    return st_vocab_new(fuzz_gbnf_tok, NULL, 0, &fuzz_gbnf_vocab) != VLLM_OK;
}

/* Compiles text and walks up to `steps` tokens; shared with fuzz_regex.c. */
static int fuzz_gbnf_walk(const char *text, size_t len, int steps) {
    st_grammar *g;
    if (st_compile_gbnf(text, len, fuzz_gbnf_vocab, &g) != VLLM_OK) {
        FUZZ_CHECK(vllm_errmsg()[0] != 0, "an error without a message");
        return 0;
    }
    st_matcher *m = NULL, *f = NULL;
    int32_t words = st_mask_words(fuzz_gbnf_vocab), eos = tokenizer_eos_id(fuzz_gbnf_tok);
    uint32_t *mask = calloc((size_t)words, 4), *first = calloc((size_t)words, 4), *other = calloc((size_t)words, 4);
    FUZZ_CHECK_GOTO(done, mask && first && other && st_matcher_new(g, &m) == VLLM_OK, "matcher");
    st_matcher_fill_mask(m, first);
    int32_t taken = 0;
    for (int s = 0; s < steps; s++) {
        st_matcher_fill_mask(m, mask);
        FUZZ_CHECK_GOTO(done, ((mask[eos >> 5] >> (eos & 31)) & 1) == st_matcher_can_end(m), "EOS bit != can_end");
        int32_t id = -1;
        for (int32_t k = 0; k < st_vocab_size(fuzz_gbnf_vocab) && id < 0; k++)
            if (k != eos && ((mask[k >> 5] >> (k & 31)) & 1)) id = k;
        if (id < 0) break;
        FUZZ_CHECK_GOTO(done, st_matcher_accept_token(m, id), "token %d in the mask but not accepted", id);
        taken++;
    }
    FUZZ_CHECK_GOTO(done, st_matcher_fork(m, &f) == VLLM_OK, "fork");
    st_matcher_fill_mask(m, mask);
    st_matcher_fill_mask(f, other);
    FUZZ_CHECK_GOTO(done, !memcmp(mask, other, (size_t)words * 4), "fork's mask differs");
    FUZZ_CHECK_GOTO(done, st_matcher_rollback(m, taken) == VLLM_OK, "rollback");
    st_matcher_fill_mask(m, mask);
    FUZZ_CHECK_GOTO(done, !memcmp(mask, first, (size_t)words * 4), "rollback to the start: mask differs");
done:
    st_matcher_free(f);
    st_matcher_free(m);
    st_grammar_unref(g);
    free(mask);
    free(first);
    free(other);
    return 0;
}

int fuzz_gbnf_one(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    return fuzz_gbnf_walk((const char *)data, size, 8);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_gbnf_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_gbnf_one(data, size); }
#endif

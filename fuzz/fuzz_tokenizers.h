/*
 * fuzz_tokenizers.h - the three real tokenizers the encode and detokenizer
 * targets run: stories260K (SentencePiece-style BPE with byte fallback, in the
 * repo), Llama 3 and Qwen3 (byte-level BPE; tokenizer.json from the npm
 * packages scripts/setup.sh installs). Loaded once per process, shared.
 */
#ifndef VLLM_FUZZ_TOKENIZERS_H
#define VLLM_FUZZ_TOKENIZERS_H

#include "fuzz.h"

#include "tokenizer/tokenizer.h"

enum { FUZZ_TOK_STORIES, FUZZ_TOK_LLAMA3, FUZZ_TOK_QWEN3, FUZZ_TOK_COUNT };

static const char *const fuzz_tok_dirs[FUZZ_TOK_COUNT] = {FUZZ_STORIES_DIR, FUZZ_LLAMA3_DIR, FUZZ_QWEN3_DIR};
static const char *const fuzz_tok_names[FUZZ_TOK_COUNT] = {"stories260K", "llama3", "qwen3"};
static tokenizer *fuzz_toks[FUZZ_TOK_COUNT];

/* Loads all three (once); 0 on success, -1 with a message naming what is missing. */
static inline int fuzz_tokenizers_load(void) {
    for (int i = 0; i < FUZZ_TOK_COUNT; i++) {
        if (fuzz_toks[i]) continue;
        if (tokenizer_load(fuzz_tok_dirs[i], &fuzz_toks[i]) != VLLM_OK) {
            fprintf(stderr, "fuzz: cannot load the %s tokenizer: %s (run scripts/setup.sh; run from the "
                            "repository root)\n",
                    fuzz_tok_names[i], vllm_errmsg());
            return -1;
        }
    }
    return 0;
}

#endif

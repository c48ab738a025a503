/*
 * token_bytes.c - dump tokenizer_token_bytes for every id of a vocabulary,
 * for an independent reference to check (tests/test_token_bytes.sh).
 *
 *   build/tools/token_bytes MODEL
 *
 * MODEL: a tokenizer directory (tokenizer.json) or a GGUF file. One line per
 * id 0 .. vocab_size - 1: "<id> <hex bytes>" (lower-case, no separators; an
 * empty token prints nothing after the id), or "<id> -" for an id that is no
 * token (a hole in the vocabulary).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: token_bytes MODEL\n");
        return 2;
    }
    tokenizer *t;
    if (tokenizer_load(argv[1], &t) != VLLM_OK) {
        fprintf(stderr, "token_bytes: %s\n", vllm_errmsg());
        return 1;
    }
    strbuf b = {0};
    int32_t n = tokenizer_vocab_size(t);
    for (int32_t id = 0; id < n; id++) {
        b.len = 0;
        if (tokenizer_token_bytes(t, id, &b) != VLLM_OK) {
            printf("%d -\n", id);
            continue;
        }
        printf("%d ", id);
        for (size_t i = 0; i < b.len; i++) printf("%02x", (unsigned char)b.s[i]);
        putchar('\n');
    }
    free(b.s);
    tokenizer_free(t);
    return 0;
}

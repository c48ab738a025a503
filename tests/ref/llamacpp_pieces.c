/*
 * llamacpp_pieces.c - every token's piece as llama.cpp renders it, the
 * independent reference for GGUF vocabularies in tests/test_token_bytes.sh.
 * Linked against the prebuilt libllama of the node-llama-cpp npm package
 * (bench/llamacpp/build.sh --fetch); nothing of vllm.c is in it.
 *
 *   llamacpp_pieces BACKEND_DIR MODEL.gguf
 *
 * Prints "<id> <hex>" per id: llama_token_to_piece with lstrip 0 and
 * special true (a token in the middle of a text, control tokens as their
 * text), only the vocabulary loaded (vocab_only).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s BACKEND_DIR MODEL.gguf\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "llamacpp_pieces: cannot load %s\n", argv[2]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    char buf[1024];
    for (int id = 0; id < nv; id++) {
        int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
        if (n < 0) { fprintf(stderr, "llamacpp_pieces: token %d is longer than %zu bytes\n", id, sizeof buf); return 1; }
        printf("%d ", id);
        for (int i = 0; i < n; i++) printf("%02x", (unsigned char)buf[i]);
        putchar('\n');
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}

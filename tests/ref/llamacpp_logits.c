/*
 * llamacpp_logits.c - llama.cpp's logits at every position of given token
 * sequences, the independent reference for GGUF files in
 * tests/ref/moe_ref.py. Linked against the prebuilt libllama/libggml of the
 * node-llama-cpp npm package (bench/llamacpp/build.sh --fetch); nothing of
 * vllm.c is in it.
 *
 *   llamacpp_logits BACKEND_DIR MODEL.gguf IDS_FILE OUT THREADS
 *
 * IDS_FILE: one sequence of whitespace-separated token ids a line. Each
 * sequence runs alone from an empty cache in one batch (no BOS added),
 * with K/V in F32 and flash attention off (ggml's CPU flash attention
 * rounds to F16), logits for every position. OUT gets dump_logits' format
 * (tools/dump_logits.c): int32 num_seqs; per sequence int32 len, int32
 * ids[len], float32 logits[len][vocab].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static bool no_progress(float p, void *user) { (void)p, (void)user; return true; }

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

enum { MAX_SEQS = 64, MAX_LEN = 4096 };

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s BACKEND_DIR MODEL.gguf IDS_FILE OUT THREADS\n", argv[0]);
        return 2;
    }
    static int ids[MAX_SEQS][MAX_LEN], len[MAX_SEQS];
    int nseq = 0;
    FILE *f = fopen(argv[3], "r");
    if (!f) { fprintf(stderr, "llamacpp_logits: cannot read %s\n", argv[3]); return 2; }
    static char line[1 << 16];
    while (nseq < MAX_SEQS && fgets(line, sizeof line, f)) {
        char *p = line, *end;
        len[nseq] = 0;
        for (long x; len[nseq] < MAX_LEN && (x = strtol(p, &end, 10), end != p); p = end) ids[nseq][len[nseq]++] = (int)x;
        if (len[nseq]) nseq++;
    }
    fclose(f);
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "llamacpp_logits: cannot load %s\n", argv[2]); return 1; }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int maxlen = 1;
    for (int s = 0; s < nseq; s++) maxlen = len[s] > maxlen ? len[s] : maxlen;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)((maxlen + 255) / 256 * 256);
    cp.n_threads = cp.n_threads_batch = atoi(argv[5]);
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llamacpp_logits: cannot create a context\n"); return 1; }
    FILE *out = fopen(argv[4], "wb");
    if (!out) { fprintf(stderr, "llamacpp_logits: cannot write %s\n", argv[4]); return 1; }
    fwrite(&nseq, 4, 1, out);
    struct llama_batch batch = llama_batch_init(maxlen, 0, 1);
    for (int s = 0; s < nseq; s++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = len[s];
        for (int i = 0; i < len[s]; i++) {
            batch.token[i] = ids[s][i];
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        if (llama_decode(ctx, batch)) { fprintf(stderr, "llamacpp_logits: decode failed\n"); return 1; }
        fwrite(&len[s], 4, 1, out);
        fwrite(ids[s], 4, (size_t)len[s], out);
        for (int i = 0; i < len[s]; i++) fwrite(llama_get_logits_ith(ctx, i), 4, (size_t)nv, out);
    }
    fclose(out);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}

/*
 * driver.c - a minimal llama.cpp throughput probe linked against the prebuilt
 * libllama from the node-llama-cpp npm package (which ships no llama-bench).
 *
 *   driver MODEL.gguf THREADS PREFILL_TOKENS DECODE_TOKENS REPEATS
 *
 * Prefill: one batch of PREFILL_TOKENS random token ids into an empty cache.
 * Decode: after an 8-token prompt, DECODE_TOKENS single-token steps (like
 * llama-bench's tg). Each is repeated REPEATS times (cache cleared between);
 * prints mean and best tok/s. Token ids are random: throughput does not depend
 * on them. Logits are computed for the last token only, as llama-bench does.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool no_progress(float p, void *user) { (void)p, (void)user; return true; }

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s BACKEND_DIR MODEL.gguf THREADS PREFILL DECODE REPEATS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[3]), npp = atoi(argv[4]), ntg = atoi(argv[5]), reps = atoi(argv[6]);
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "driver: cannot load %s\n", argv[2]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(npp + ntg + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(npp > 8 ? npp : 8);
    cp.n_threads = cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "driver: cannot create a context\n"); return 1; }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_token *toks = malloc(sizeof *toks * (size_t)(npp > 8 ? npp : 8));
    srand(1);
    for (int i = 0; i < (npp > 8 ? npp : 8); i++) toks[i] = 3 + rand() % (nv - 3);
    const char *what[2] = {"prefill", "decode"};
    for (int phase = 0; phase < 2; phase++) {
        int n = phase ? ntg : npp;
        if (n <= 0) continue;
        double sum = 0, best = 0;
        for (int r = 0; r < reps + 1; r++) { /* first run warms up */
            llama_memory_clear(llama_get_memory(ctx), true);
            double t0;
            if (phase == 0) {
                t0 = now();
                if (llama_decode(ctx, llama_batch_get_one(toks, npp))) { fprintf(stderr, "decode failed\n"); return 1; }
            } else {
                if (llama_decode(ctx, llama_batch_get_one(toks, 8))) { fprintf(stderr, "decode failed\n"); return 1; }
                t0 = now();
                for (int i = 0; i < ntg; i++) {
                    llama_token t = toks[i % 8];
                    if (llama_decode(ctx, llama_batch_get_one(&t, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
                }
            }
            llama_synchronize(ctx);
            double tps = n / (now() - t0);
            if (r == 0) continue;
            sum += tps;
            if (tps > best) best = tps;
        }
        printf("%s %d tokens, %d threads: %.2f tok/s mean, %.2f best (%d runs)\n", what[phase], n, threads, sum / reps,
               best, reps);
    }
    free(toks);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}

/*
 * llamacpp_score.c - teacher-forced scoring of a token sequence by llama.cpp,
 * the independent reference for tests/test_real_models.sh and its
 * perplexity figure. Linked against the prebuilt libllama/libggml of the
 * node-llama-cpp npm package (bench/llamacpp/build.sh --fetch); nothing of
 * vllm.c is in it.
 *
 *   llamacpp_score BACKEND_DIR MODEL.gguf IDS_FILE CTX THREADS [f32-kv]
 *
 * IDS_FILE holds whitespace-separated token ids. They are cut into chunks of
 * CTX tokens, each run from an empty cache as llama-perplexity does: the
 * chunk's first token replaced by BOS when the vocabulary adds one, logits
 * for every position, and positions [CTX/2, CTX - 1) scored (the first half
 * is context). For each scored position it prints
 *     <position> <argmax id> <-log p(next token)> <top-1 logit - top-2 logit>
 * and at the end "ppl <exp(mean)>". The context is llama-perplexity's
 * default one (an F16 KV cache, flash attention if the backend has it);
 * with "f32-kv", K and V are kept in F32 and flash attention is off (ggml's
 * CPU kernel for it rounds to F16), so that on an F32 model nothing is
 * rounded below F32 anywhere.
 */
#include <math.h>
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

int main(int argc, char **argv) {
    bool f32_kv = argc == 7 && !strcmp(argv[6], "f32-kv");
    if (argc != 6 && !f32_kv) {
        fprintf(stderr, "usage: %s BACKEND_DIR MODEL.gguf IDS_FILE CTX THREADS [f32-kv]\n", argv[0]);
        return 2;
    }
    int n_ctx = atoi(argv[4]), threads = atoi(argv[5]);
    FILE *f = fopen(argv[3], "r");
    if (!f || n_ctx < 4) { fprintf(stderr, "llamacpp_score: cannot read %s (or CTX < 4)\n", argv[3]); return 2; }
    int cap = 1024, n = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    for (int x; fscanf(f, "%d", &x) == 1;) {
        if (n == cap) ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
        ids[n++] = x;
    }
    fclose(f);
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "llamacpp_score: cannot load %s\n", argv[2]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = threads;
    if (f32_kv) { /* ggml's CPU flash attention computes in F16 whatever the cache holds */
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llamacpp_score: cannot create a context\n"); return 1; }
    int nv = llama_vocab_n_tokens(vocab);
    bool add_bos = llama_vocab_get_add_bos(vocab);
    struct llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    double sum = 0;
    long scored = 0;
    for (int c = 0; (c + 1) * n_ctx <= n; c++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = n_ctx;
        for (int i = 0; i < n_ctx; i++) {
            batch.token[i] = i == 0 && add_bos ? llama_vocab_bos(vocab) : ids[c * n_ctx + i];
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = i >= n_ctx / 2;
        }
        if (llama_decode(ctx, batch)) { fprintf(stderr, "llamacpp_score: decode failed\n"); return 1; }
        for (int i = n_ctx / 2; i < n_ctx - 1; i++) {
            const float *l = llama_get_logits_ith(ctx, i);
            int best = 0;
            for (int v = 1; v < nv; v++)
                if (l[v] > l[best]) best = v;
            double m = l[best], second = -INFINITY, z = 0;
            for (int v = 0; v < nv; v++) {
                z += exp((double)l[v] - m);
                if (v != best && l[v] > second) second = l[v];
            }
            double nll = -((double)l[ids[c * n_ctx + i + 1]] - m - log(z));
            printf("%d %d %.6f %.6f\n", c * n_ctx + i, best, nll, m - second);
            sum += nll;
            scored++;
        }
    }
    if (!scored) { fprintf(stderr, "llamacpp_score: fewer than CTX (%d) ids\n", n_ctx); return 1; }
    printf("ppl %.6f\n", exp(sum / (double)scored));
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}

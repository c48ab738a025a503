/*
 * score.c - teacher-forced scoring of a token sequence by vllm.c's runner,
 * the same scheme as tests/ref/llamacpp_score.c (llama.cpp's side) and
 * llama-perplexity, so the two can be compared position by position:
 *
 *   build/tools/score --model PATH --ids FILE [--ctx 512] [--threads N] [--bos]
 *
 * FILE holds whitespace-separated token ids, cut into chunks of CTX tokens.
 * Each chunk runs from an empty KV cache in one forward, its first token
 * replaced by the model's BOS with --bos (llama-perplexity does that when
 * the vocabulary adds BOS), and positions [CTX/2, CTX - 1) are scored: the
 * first half is context. Per scored position it prints
 *     <position> <argmax id> <-log p(next token)> <top-1 logit - top-2 logit>
 * (log-softmax in double over our F32 logits) and at the end
 * "ppl <exp(mean)>".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "engine/engine.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/runner.h"
#include "model/step_batch.h"

static int usage(void) {
    fprintf(stderr, "usage: score --model PATH --ids FILE [--ctx 512] [--threads N] [--bos] [--dtype float32|bfloat16|auto]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *dtype_arg = "float32"; /* --dtype (engine.h): float32 unless asked, as before */
    const char *path = NULL, *ids_file = NULL;
    int32_t ctx = 512, threads = 0;
    bool bos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bos")) { bos = true; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "--ids")) ids_file = v;
        else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--dtype")) dtype_arg = v;
        else return usage();
    }
    if (!path || !ids_file || ctx < 4 || threads < 0 || engine_dtype_bf16(dtype_arg, DTYPE_F32) < 0) return usage();
    FILE *f = fopen(ids_file, "r");
    if (!f) {
        fprintf(stderr, "score: cannot read %s\n", ids_file);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int x; fscanf(f, "%d", &x) == 1; ids[n++] = x)
        if (buf_grow((void **)&ids, &cap, n + 1, sizeof *ids) != VLLM_OK) return 1;
    fclose(f);

    model *m = NULL;
    if (model_load(path, &m) != VLLM_OK ||
        (engine_dtype_bf16(dtype_arg, m->config.torch_dtype) == 1 && model_convert_bf16(m, NULL) != VLLM_OK)) {
        fprintf(stderr, "score: %s\n", vllm_errmsg());
        model_free(m);
        return 1;
    }
    /* scored rows: the last ctx - ctx/2 positions; the very last has no next token to score */
    int32_t vocab = m->config.vocab_size, bs = 16, blocks = (ctx + bs - 1) / bs, rows = ctx - ctx / 2;
    if (bos && m->config.bos_token_id < 0) {
        fprintf(stderr, "score: --bos, but the model has no BOS token\n");
        return 1;
    }
    /* one table per KV cache group (model/kv_layout.h), each over blocks of its own */
    kv_layout *lay = malloc(sizeof *lay);
    if (!lay) return 1;
    kv_layout_init(lay, &m->config);
    int32_t groups = lay->num_groups;
    free(lay);
    runner_config rc = {.num_blocks = blocks * groups, .block_size = bs, .max_num_batched_tokens = ctx,
                        .max_num_seqs = 1, .num_threads = threads,
                        .bf16_compute = engine_dtype_bf16(dtype_arg, m->config.torch_dtype) == 1};
    step_builder_config bc = {.max_tokens = ctx, .max_seqs = 1, .max_scored = rows, .max_copies = 0,
                              .max_blocks_per_seq = blocks, .block_size = bs, .num_kv_groups = groups};
    runner *r = NULL;
    step_builder *b = NULL;
    int32_t *table = malloc((size_t)blocks * (size_t)groups * sizeof *table);
    int32_t *chunk = malloc((size_t)ctx * sizeof *chunk);
    float *logits = malloc((size_t)rows * (size_t)vocab * sizeof *logits);
    if (!table || !chunk || !logits || runner_create(m, &rc, &r) != VLLM_OK || step_builder_create(&bc, &b) != VLLM_OK) {
        fprintf(stderr, "score: %s\n", vllm_errmsg());
        return 1;
    }
    for (int32_t i = 0; i < blocks * groups; i++) table[i] = i;
    double sum = 0;
    long scored = 0;
    for (size_t c = 0; (c + 1) * (size_t)ctx <= n; c++) {
        memcpy(chunk, ids + c * (size_t)ctx, (size_t)ctx * sizeof *chunk);
        if (bos) chunk[0] = m->config.bos_token_id;
        /* a fresh sequence over the same blocks: positions from 0 overwrite them */
        step_builder_reset(b);
        if (step_builder_add_seq(b, chunk, ctx, 0, table, blocks, blocks, rows, 0) != VLLM_OK ||
            runner_forward(r, step_builder_batch(b), logits) != VLLM_OK) {
            fprintf(stderr, "score: %s\n", vllm_errmsg());
            return 1;
        }
        for (int32_t j = 0; j < rows - 1; j++) {
            const float *l = logits + (size_t)j * (size_t)vocab;
            int32_t best = 0, pos = ctx / 2 + j;
            for (int32_t v = 1; v < vocab; v++)
                if (l[v] > l[best]) best = v;
            double mx = l[best], second = -INFINITY, z = 0;
            for (int32_t v = 0; v < vocab; v++) {
                z += exp((double)l[v] - mx);
                if (v != best && l[v] > second) second = l[v];
            }
            double nll = -((double)l[chunk[pos + 1]] - mx - log(z));
            printf("%zu %d %.6f %.6f\n", c * (size_t)ctx + (size_t)pos, best, nll, mx - second);
            sum += nll;
            scored++;
        }
    }
    if (!scored) {
        fprintf(stderr, "score: fewer than --ctx (%d) ids\n", ctx);
        return 1;
    }
    printf("ppl %.6f\n", exp(sum / (double)scored));
    step_builder_free(b);
    runner_free(r);
    model_free(m);
    free(table);
    free(chunk);
    free(logits);
    free(ids);
    return 0;
}

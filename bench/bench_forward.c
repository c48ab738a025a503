/*
 * bench_forward.c - forward-pass throughput of one sequence (or a batch).
 *
 *   build/bench/bench_forward --model DIR [--threads N] [--prefill 128] [--decode 64]
 *                             [--batch 1] [--repeat 1]
 *
 * Prefill: each of --batch sequences gets --prefill random tokens, all in one
 * forward pass (logits for the last token of each). Decode: then --decode
 * steps of one token per sequence. Prints tokens/s for both phases (best of
 * --repeat runs, each on a fresh KV) and the KV / weight sizes; the weights
 * are touched once before timing so page faults of the mmap are not counted.
 * CPU seconds (all threads) are printed beside wall time: on a shared
 * machine, wall time with N threads is only meaningful if CPU ~= N x wall.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/runner.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static size_t tensor_bytes(const tensor *t) {
    return t->data ? (t->ndim > 1 ? (size_t)t->shape[0] * dtype_row_bytes(t->type, t->shape[1])
                                  : (size_t)t->shape[0] * dtype_size(t->type))
                   : 0;
}

/* Sum of all weight bytes; reads one byte per page so the mmap is resident. */
static size_t touch_weights(const model *m, volatile unsigned *sink) {
    const tensor *all[16];
    size_t total = 0;
    for (int l = -1; l < m->config.num_hidden_layers; l++) {
        int n = 0;
        if (l < 0) {
            all[n++] = &m->w.embed_tokens, all[n++] = &m->w.norm;
            if (m->w.lm_head.data != m->w.embed_tokens.data) all[n++] = &m->w.lm_head;
        } else {
            const layer_weights *w = &m->w.layers[l];
            const tensor *ts[] = {&w->input_layernorm, &w->q_proj, &w->k_proj, &w->v_proj, &w->o_proj,
                                  &w->post_attention_layernorm, &w->gate_proj, &w->up_proj, &w->down_proj};
            for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) all[n++] = ts[i];
        }
        for (int i = 0; i < n; i++) {
            size_t b = tensor_bytes(all[i]);
            for (size_t o = 0; o < b; o += 4096) *sink += ((const unsigned char *)all[i]->data)[o];
            total += b;
        }
    }
    return total;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int threads = 0, prefill = 128, decode = 64, batch = 1, repeat = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefill")) prefill = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else dir = NULL, i = argc;
    }
    if (!dir || prefill < 1 || decode < 0 || batch < 1 || repeat < 1) {
        fprintf(stderr, "usage: bench_forward --model DIR [--threads N] [--prefill 128] [--decode 64] "
                        "[--batch 1] [--repeat 1]\n");
        return 2;
    }
    model *m = NULL;
    if (model_load(dir, &m) != VLLM_OK) {
        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
        return 1;
    }
    const int bs = 16, len = prefill + decode, max_blocks = (len + bs - 1) / bs;
    kv_layout *lay = malloc(sizeof *lay); /* one table per KV cache group, every block kept */
    kv_layout_init(lay, &m->config);
    const int G = lay->num_groups;
    free(lay);
    runner_config cfg = {.num_blocks = batch * max_blocks * G, .block_size = bs,
                         .max_num_batched_tokens = prefill * batch, .max_num_seqs = batch, .num_threads = threads};
    runner *r = NULL;
    if (runner_create(m, &cfg, &r) != VLLM_OK) {
        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
        return 1;
    }
    volatile unsigned sink = 0;
    size_t wbytes = touch_weights(m, &sink);
    int32_t vocab = m->config.vocab_size, T = prefill * batch;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T), *pos = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)T * G);
    int32_t *qsl = malloc(sizeof(int32_t) * (size_t)(batch + 1)), *lens = malloc(sizeof(int32_t) * (size_t)batch);
    int32_t *lidx = malloc(sizeof(int32_t) * (size_t)batch);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(batch * G * max_blocks)); /* (batch, G, max_blocks) */
    float *logits = malloc(sizeof(float) * (size_t)batch * vocab);
    for (int i = 0; i < batch * G * max_blocks; i++) tables[i] = i;
    double best_prefill = 0, best_decode = 0;
    uint32_t seed = 12345;
    for (int rep = 0; rep < repeat; rep++) {
        /* prefill */
        for (int s = 0; s < batch; s++) {
            qsl[s] = s * prefill;
            lens[s] = prefill;
            lidx[s] = s * prefill + prefill - 1;
            for (int p = 0; p < prefill; p++) {
                int t = s * prefill + p;
                seed = seed * 1664525u + 1013904223u;
                ids[t] = (int32_t)(seed >> 8) % vocab;
                pos[t] = p;
                for (int g = 0; g < G; g++)
                    slots[t * G + g] = (int64_t)tables[(s * G + g) * max_blocks + p / bs] * bs + p % bs;
            }
        }
        qsl[batch] = T;
        step_batch b = {.num_tokens = T, .token_ids = ids, .positions = pos, .num_kv_groups = G, .slot_mapping = slots,
                          .num_seqs = batch, .query_start_loc = qsl, .seq_lens = lens, .block_tables = tables,
                          .max_blocks_per_seq = max_blocks, .num_scored = batch, .scored_indices = lidx};
        double t0 = now_s(), c0 = cpu_s();
        if (runner_forward(r, &b, logits) != VLLM_OK) {
            fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
            return 1;
        }
        double t1 = now_s(), c1 = cpu_s();
        /* decode: one token per sequence per step */
        for (int step = 0; step < decode; step++) {
            int p = prefill + step;
            for (int s = 0; s < batch; s++) {
                qsl[s] = s;
                lens[s] = p + 1;
                lidx[s] = s;
                ids[s] = (int32_t)((seed = seed * 1664525u + 1013904223u) >> 8) % vocab;
                pos[s] = p;
                for (int g = 0; g < G; g++)
                    slots[s * G + g] = (int64_t)tables[(s * G + g) * max_blocks + p / bs] * bs + p % bs;
            }
            qsl[batch] = batch;
            b.num_tokens = batch;
            if (runner_forward(r, &b, logits) != VLLM_OK) {
                fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                return 1;
            }
        }
        double t2 = now_s(), c2 = cpu_s();
        double pf = T / (t1 - t0), dc = decode ? batch * decode / (t2 - t1) : 0;
        printf("run %d: prefill %d x %d tokens in %.3f s (%.3f s CPU) = %.2f tok/s; "
               "decode %d x %d steps in %.3f s (%.3f s CPU) = %.2f tok/s\n",
               rep + 1, batch, prefill, t1 - t0, c1 - c0, pf, batch, decode, t2 - t1, c2 - c1, dc);
        if (pf > best_prefill) best_prefill = pf;
        if (dc > best_decode) best_decode = dc;
    }
    printf("model %s: %.2f GB of weights (%s), kernels %s, threads %d (0 = all CPUs)\n", dir, wbytes / 1e9,
           dtype_name(m->w.layers[0].q_proj.type), kernels_isa_name(kernels_isa_get()), threads);
    printf("best: prefill %.2f tok/s, decode %.2f tok/s (%.1f GB/s of weights)\n", best_prefill, best_decode,
           best_decode / batch * wbytes / 1e9);
    free(ids), free(pos), free(slots), free(qsl), free(lens), free(lidx), free(tables), free(logits);
    runner_free(r);
    model_free(m);
    return 0;
}

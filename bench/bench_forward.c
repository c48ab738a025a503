/*
 * bench_forward.c - forward-pass throughput of one sequence (or a batch).
 *
 *   build/bench/bench_forward --model DIR [--threads N] [--prefill 128] [--decode 64]
 *                             [--batch 1] [--chunk 2048] [--repeat 1] [--kv-cache-dtype float32]
 *   build/bench/bench_forward --model DIR --context 1024,4096 [--kv-cache-dtype float32,bfloat16,fp8]
 *                             [--decode 32] [--repeat 2] [--threads N]
 *
 * Prefill: each of --batch sequences gets --prefill random tokens, run in
 * forward passes of at most --chunk tokens (sequence after sequence, a
 * chunk may hold the end of one prompt and the start of the next: the
 * engine's --max-num-batched-tokens schedule, llama-batched-bench's -b
 * 2048), so 16 x 32k prompts need activations for 2048 tokens, not 512k;
 * logits for each sequence's last token in a chunk, and a hash of each
 * prompt's final logits that must not depend on --chunk. Decode: then
 * --decode steps of one token per sequence. Prints tokens/s for both
 * phases, as llama-batched-bench's S_PP and S_TG (best of
 * --repeat runs, each on a fresh KV) and the KV / weight sizes; the weights
 * are touched once before timing so page faults of the mmap are not counted.
 * CPU seconds (all threads) are printed beside wall time: on a shared
 * machine, wall time with N threads is only meaningful if CPU ~= N x wall.
 * --kv-cache-dtype: the KV pool's element type (kernels/kv_dtype.h).
 *
 * --context: decode speed against context length per KV cache dtype, side
 * by side. For each repeat, for each dtype in turn (so a noisy machine
 * hits them all alike), one sequence is prefilled (untimed, chunks of 512)
 * up to each context length in increasing order and then decodes --decode
 * tokens there (timed). Prints a table: per dtype the KV bytes per token
 * (K and V of every layer), and per context the KV bytes a decode step
 * reads, the best decode tok/s of the repeats (wall clock) with its ratio to
 * the first dtype's, and the least CPU time per token (all threads) with its
 * ratio: on a loaded machine the CPU time is the steadier of the two.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "kernels/kv_dtype.h"
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

enum { MAX_LIST = 8, SWEEP_CHUNK = 512 };

/* FNV-1a over the bits of n floats, continuing from h (0: a fresh hash). */
static uint64_t hash_floats(uint64_t h, const float *x, int64_t n) {
    if (!h) h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < (size_t)n * sizeof *x; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Splits a comma list of positive ints; the count, or -1 if malformed. */
static int parse_ints(const char *s, int *out) {
    int n = 0;
    for (const char *p = s; *p && n < MAX_LIST;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20 || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* Splits a comma list of KV cache dtype names; the count, or -1. */
static int parse_dtypes(const char *s, kv_dtype *out) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < MAX_LIST; t = strtok_r(NULL, ",", &save))
        if (!kv_dtype_from_name(t, &out[n++])) return -1;
    return n;
}

/* One forward of tokens [p0, p1) of sequence 0 (blocks 0, 1, ... in order);
 * logits for the last one. */
static vllm_status forward_range(runner *r, int32_t vocab, int32_t G, int32_t max_blocks, int32_t *tables, int p0,
                                 int p1, uint32_t *seed, float *logits, int32_t *ids, int32_t *pos, int64_t *slots) {
    const int bs = 16, T = p1 - p0;
    for (int t = 0; t < T; t++) {
        *seed = *seed * 1664525u + 1013904223u;
        ids[t] = (int32_t)(*seed >> 8) % vocab;
        pos[t] = p0 + t;
        for (int g = 0; g < G; g++) slots[t * G + g] = (int64_t)tables[g * max_blocks + pos[t] / bs] * bs + pos[t] % bs;
    }
    int32_t qsl[2] = {0, T}, len = p1, last = T - 1;
    step_batch b = {.num_tokens = T, .token_ids = ids, .positions = pos, .num_kv_groups = G, .slot_mapping = slots,
                    .num_seqs = 1, .query_start_loc = qsl, .seq_lens = &len, .block_tables = tables,
                    .max_blocks_per_seq = max_blocks, .num_scored = 1, .scored_indices = &last};
    return runner_forward(r, &b, logits);
}

/* --context: see the top. */
static int context_sweep(const model *m, int threads, const int *ctx, int nctx, const kv_dtype *types, int ntypes,
                         int decode, int repeat) {
    const model_config *c = &m->config;
    const int bs = 16, max_len = ctx[nctx - 1] + decode, max_blocks = (max_len + bs - 1) / bs;
    kv_layout *lay = malloc(sizeof *lay);
    kv_layout_init(lay, c);
    const int G = lay->num_groups;
    free(lay);
    double best[MAX_LIST][MAX_LIST] = {{0}}; /* [type][context] decode tok/s */
    double best_cpu[MAX_LIST][MAX_LIST];     /* [type][context] CPU ms per token */
    for (int i = 0; i < MAX_LIST; i++)
        for (int j = 0; j < MAX_LIST; j++) best_cpu[i][j] = 1e30;
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(G * max_blocks)), *ids = malloc(sizeof(int32_t) * SWEEP_CHUNK),
            *pos = malloc(sizeof(int32_t) * SWEEP_CHUNK);
    int64_t *slots = malloc(sizeof(int64_t) * SWEEP_CHUNK * (size_t)G);
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    for (int i = 0; i < G * max_blocks; i++) tables[i] = i;
    uint32_t seed = 12345;
    for (int rep = 0; rep < repeat; rep++)
        for (int ti = 0; ti < ntypes; ti++) {
            runner_config cfg = {.num_blocks = G * max_blocks, .block_size = bs, .max_num_batched_tokens = SWEEP_CHUNK,
                                 .max_num_seqs = 1, .num_threads = threads, .kv_cache_dtype = types[ti]};
            runner *r = NULL;
            if (runner_create(m, &cfg, &r) != VLLM_OK) {
                fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                return 1;
            }
            int done = 0;
            for (int ci = 0; ci < nctx; ci++) {
                /* prefill up to ctx[ci] (what earlier contexts decoded is overwritten) */
                for (int p = done < ctx[ci] ? (ci ? ctx[ci - 1] : 0) : ctx[ci]; p < ctx[ci];) {
                    int p1 = p + SWEEP_CHUNK < ctx[ci] ? p + SWEEP_CHUNK : ctx[ci];
                    if (forward_range(r, c->vocab_size, G, max_blocks, tables, p, p1, &seed, logits, ids, pos, slots)) {
                        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                        return 1;
                    }
                    p = p1;
                }
                double t0 = now_s(), c0 = cpu_s();
                for (int step = 0; step < decode; step++)
                    if (forward_range(r, c->vocab_size, G, max_blocks, tables, ctx[ci] + step, ctx[ci] + step + 1,
                                      &seed, logits, ids, pos, slots)) {
                        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                        return 1;
                    }
                double t1 = now_s(), c1 = cpu_s(), tps = decode / (t1 - t0);
                printf("run %d: %-9s context %5d: decode %d tokens in %.3f s (%.3f s CPU) = %.2f tok/s\n", rep + 1,
                       kv_dtype_name(types[ti]), ctx[ci], decode, t1 - t0, c1 - c0, tps);
                fflush(stdout);
                if (tps > best[ti][ci]) best[ti][ci] = tps;
                if ((c1 - c0) * 1e3 / decode < best_cpu[ti][ci]) best_cpu[ti][ci] = (c1 - c0) * 1e3 / decode;
                done = ctx[ci];
            }
            runner_free(r);
        }
    printf("\nmodel %s: %d layers, %d KV heads x %d; kernels %s, threads %d (0 = all CPUs); best of %d, "
           "%d decode steps each\n",
           m->dir, c->num_hidden_layers, c->num_key_value_heads, c->head_dim, kernels_isa_name(kernels_isa_get()),
           threads, repeat, decode);
    printf("%-10s %12s", "kv dtype", "bytes/token");
    for (int ci = 0; ci < nctx; ci++) printf(" | ctx %5d: KV/step   tok/s  ratio  CPU ms/tok  ratio", ctx[ci]);
    printf("\n");
    for (int ti = 0; ti < ntypes; ti++) {
        int64_t per_tok = (int64_t)2 * c->num_hidden_layers * c->num_key_value_heads * c->head_dim *
                          (int64_t)kv_dtype_size(types[ti]);
        printf("%-10s %12lld", kv_dtype_name(types[ti]), (long long)per_tok);
        for (int ci = 0; ci < nctx; ci++)
            printf(" | %11.1f MB %7.2f %5.2fx %11.2f %5.2fx", (double)per_tok * ctx[ci] / 1e6, best[ti][ci],
                   best[0][ci] > 0 ? best[ti][ci] / best[0][ci] : 0, best_cpu[ti][ci],
                   best_cpu[ti][ci] > 0 ? best_cpu[0][ci] / best_cpu[ti][ci] : 0);
        printf("\n");
    }
    free(tables), free(ids), free(pos), free(slots), free(logits);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *kv_list = NULL, *ctx_list = NULL, *dtype_name_arg = "auto";
    int threads = 0, prefill = 128, decode = -1, batch = 1, repeat = 0, chunk = 2048;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefill")) prefill = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) chunk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kv-cache-dtype")) kv_list = argv[i + 1];
        else if (!strcmp(argv[i], "--context")) ctx_list = argv[i + 1];
        else if (!strcmp(argv[i], "--dtype")) dtype_name_arg = argv[i + 1];
        else dir = NULL, i = argc;
    }
    kv_dtype types[MAX_LIST] = {KV_DTYPE_F32};
    int ctx[MAX_LIST], ntypes = kv_list ? parse_dtypes(kv_list, types) : 1, nctx = ctx_list ? parse_ints(ctx_list, ctx) : 0;
    if (decode < 0) decode = ctx_list ? 32 : 64;
    if (repeat < 1) repeat = ctx_list ? 2 : 1;
    bool sorted = true;
    for (int i = 1; i < nctx; i++) sorted &= ctx[i] > ctx[i - 1];
    if (!dir || prefill < 1 || decode < 0 || batch < 1 || chunk < 1 || (int64_t)prefill * batch > 1 << 30 || ntypes < 1 || nctx < 0 || (ctx_list && (nctx < 1 || !sorted)) ||
        (!ctx_list && ntypes != 1) || (ctx_list && decode < 1) || engine_dtype_bf16(dtype_name_arg, DTYPE_F32) < 0) {
        fprintf(stderr, "usage: bench_forward --model DIR [--threads N] [--prefill 128] [--decode 64] "
                        "[--batch 1] [--chunk 2048] [--repeat 1] [--kv-cache-dtype float32]\n"
                        "                     [--dtype auto|bfloat16|float32]\n"
                        "       bench_forward --model DIR --context 1024,4096 [--kv-cache-dtype float32,bfloat16,fp8] "
                        "[--decode 32] [--repeat 2] [--threads N]\n"
                        "  contexts increasing; dtypes: float32 bfloat16 float16 fp8 fp8_e4m3 fp8_e5m2\n");
        return 2;
    }
    model *m = NULL;
    if (model_load(dir, &m) != VLLM_OK ||
        (engine_dtype_bf16(dtype_name_arg, m->config.torch_dtype) == 1 && model_convert_bf16(m, NULL) != VLLM_OK)) {
        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
        model_free(m);
        return 1;
    }
    if (ctx_list) {
        int rc = context_sweep(m, threads, ctx, nctx, types, ntypes, decode, repeat);
        model_free(m);
        return rc;
    }
    const int bs = 16, len = prefill + decode, max_blocks = (len + bs - 1) / bs;
    /* tokens per forward: a prefill chunk, or one per sequence decoding */
    const int32_t T = (int64_t)prefill * batch < chunk ? prefill * batch : chunk > batch ? chunk : batch;
    kv_layout *lay = malloc(sizeof *lay); /* one table per KV cache group, every block kept */
    kv_layout_init(lay, &m->config);
    const int G = lay->num_groups;
    free(lay);
    runner_config cfg = {.num_blocks = batch * max_blocks * G, .block_size = bs,
                         .max_num_batched_tokens = T, .max_num_seqs = batch, .num_threads = threads,
                         .kv_cache_dtype = types[0],
                         .bf16_compute = engine_dtype_bf16(dtype_name_arg, m->config.torch_dtype) == 1};
    runner *r = NULL;
    if (runner_create(m, &cfg, &r) != VLLM_OK) {
        fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
        return 1;
    }
    volatile unsigned sink = 0;
    size_t wbytes = touch_weights(m, &sink);
    int32_t vocab = m->config.vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T), *pos = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)T * G);
    int32_t *qsl = malloc(sizeof(int32_t) * (size_t)(batch + 1)), *lens = malloc(sizeof(int32_t) * (size_t)batch);
    int32_t *lidx = malloc(sizeof(int32_t) * (size_t)batch);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(batch * G * max_blocks)); /* (batch, G, max_blocks) */
    float *logits = malloc(sizeof(float) * (size_t)batch * vocab);
    for (int i = 0; i < batch * G * max_blocks; i++) tables[i] = i;
    double best_prefill = 0, best_decode = 0;
    uint32_t seed = 12345;
    uint64_t hash = 0;
    int forwards = 0;
    for (int rep = 0; rep < repeat; rep++) {
        /* prefill: chunks of up to `chunk` tokens walking the sequences in
         * order (a chunk may end inside one sequence and start the next),
         * each chunk one forward pass: the engine's --max-num-batched-tokens
         * schedule of a batch of waiting prompts, and llama-batched-bench's
         * -b. Token ids are drawn in (sequence, position) order, so they do
         * not depend on the chunk size; so must the logits (the hash). */
        step_batch b = {.token_ids = ids, .positions = pos, .num_kv_groups = G, .slot_mapping = slots,
                        .query_start_loc = qsl, .seq_lens = lens, .max_blocks_per_seq = max_blocks,
                        .scored_indices = lidx};
        double t0 = now_s(), c0 = cpu_s();
        forwards = 0;
        for (int s = 0, p = 0; s < batch; forwards++) {
            int n = 0, ns = 0, s0 = s;
            while (s < batch && n < chunk) {
                int take = prefill - p < chunk - n ? prefill - p : chunk - n;
                qsl[ns] = n;
                for (int i = 0; i < take; i++, n++) {
                    seed = seed * 1664525u + 1013904223u;
                    ids[n] = (int32_t)(seed >> 8) % vocab;
                    pos[n] = p + i;
                    for (int g = 0; g < G; g++)
                        slots[n * G + g] = (int64_t)tables[(s * G + g) * max_blocks + pos[n] / bs] * bs + pos[n] % bs;
                }
                p += take;
                lens[ns] = p;
                lidx[ns] = n - 1; /* the logits of each sequence's last token in the chunk, as vLLM computes */
                ns++;
                if (p == prefill) s++, p = 0;
            }
            qsl[ns] = n;
            b.num_tokens = n, b.num_seqs = ns, b.num_scored = ns;
            b.block_tables = tables + (size_t)s0 * G * max_blocks;
            if (runner_forward(r, &b, logits) != VLLM_OK) {
                fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                return 1;
            }
            /* a sequence whose prompt ended in this chunk: its logits, once */
            for (int i = 0; i < ns && rep == 0; i++)
                if (lens[i] == prefill) hash = hash_floats(hash, logits + (size_t)i * vocab, vocab);
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
            b.num_tokens = batch, b.num_seqs = batch, b.num_scored = batch, b.block_tables = tables;
            if (runner_forward(r, &b, logits) != VLLM_OK) {
                fprintf(stderr, "bench_forward: %s\n", vllm_errmsg());
                return 1;
            }
        }
        double t2 = now_s(), c2 = cpu_s();
        double pf = (double)prefill * batch / (t1 - t0), dc = decode ? batch * decode / (t2 - t1) : 0;
        printf("run %d: prefill %d x %d tokens (%d forwards of <= %d) in %.3f s (%.3f s CPU) = %.2f tok/s; "
               "decode %d x %d steps in %.3f s (%.3f s CPU) = %.2f tok/s\n",
               rep + 1, batch, prefill, forwards, chunk, t1 - t0, c1 - c0, pf, batch, decode, t2 - t1, c2 - c1, dc);
        fflush(stdout);
        if (pf > best_prefill) best_prefill = pf;
        if (dc > best_decode) best_decode = dc;
    }
    printf("model %s: %.2f GB of weights (%s), KV cache %s, kernels %s, dtype %s (%s activations), threads %d "
           "(0 = all CPUs)\n", dir, wbytes / 1e9, dtype_name(m->w.layers[0].q_proj.type), kv_dtype_name(types[0]),
           kernels_isa_name(kernels_isa_get()), dtype_name_arg, cfg.bf16_compute ? "BF16 weights: BF16" : "FP32",
           threads);
    printf("prefill logits hash %016llx (each sequence's last prompt token, run 1)\n", (unsigned long long)hash);
    printf("best: prefill %.2f tok/s, decode %.2f tok/s (%.1f GB/s of weights)\n", best_prefill, best_decode,
           best_decode / batch * wbytes / 1e9);
    free(ids), free(pos), free(slots), free(qsl), free(lens), free(lidx), free(tables), free(logits);
    runner_free(r);
    model_free(m);
    return 0;
}
